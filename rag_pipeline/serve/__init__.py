"""Serving layer: the CLI (and later the HTTP API) on top of the Dagster resource."""
