"""Jobs: the shard-partitioned ingest job the sensor and the CLI launch."""

import dagster as dg

from rag_pipeline.defs.partitions import SHARDS

ingest_job = dg.define_asset_job(
    "ingest_job",
    selection=dg.AssetSelection.groups("ingest"),
    partitions_def=SHARDS,
    description="Sync the selected shards: new SHAs ingested, vanished SHAs purged, unchanged SHAs skipped.",
)
