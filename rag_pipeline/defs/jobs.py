"""Jobs: the shard-partitioned ingest job the file sensor launches, and the corpus summary refresh."""

import dagster as dg

from rag_pipeline.defs.assets import INGEST_ASSETS
from rag_pipeline.defs.location import DEFINITION_SETTINGS
from rag_pipeline.defs.partitions import SHARDS


def ingest_executor() -> dg.ExecutorDefinition | None:
    """The executor RAG_DAGSTER_EXECUTOR names; None: the code location's (defs/step_executor.py)."""
    if DEFINITION_SETTINGS.dagster_executor == "celery":
        from dagster_celery import celery_executor  # installed in the image only (Dockerfile)

        return celery_executor
    return None


ingest_job = dg.define_asset_job(
    "ingest_job",
    selection=dg.AssetSelection.assets(*INGEST_ASSETS),
    partitions_def=SHARDS,
    executor_def=ingest_executor(),
    description="Sync the selected shards: new SHAs ingested, vanished SHAs purged, unchanged SHAs skipped.",
)

corpus_summary_job = dg.define_asset_job(
    "corpus_summary_job",
    selection=dg.AssetSelection.assets("document_enrichment", "roster", "index_generation", "corpus_summary"),
    description="Enrich fields, load the rosters and reconcile them, switch to the new index generation once it is "
                "complete, then refresh the corpus-wide summary.",
)
