"""The settings the code location's definitions are made with (the shard partitions, the eval schedule): read once
when Dagster loads the location. Runs build their own, once per resource (resources.py)."""

from rag_pipeline.settings import Settings

DEFINITION_SETTINGS = Settings()
