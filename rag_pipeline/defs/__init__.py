"""The Dagster layer: thin glue that turns library calls into assets, checks, sensors and jobs."""
