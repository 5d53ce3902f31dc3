"""Content-SHA shards: a document's partition is the first hex digit(s) of its SHA-256."""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
)

from rag_pipeline.settings import Settings

SHARDS = dg.StaticPartitionsDefinition(Settings().shard_keys)


def shard_run_tags(shards: Sequence[str]) -> dict[str, str]:
    """Tags that make one run cover every given shard (the key range from the first to the last).

    Shards inside the range that did not change are cheap no-ops: their stages find nothing to do.
    """
    ordered = sorted(shards)
    return {
        ASSET_PARTITION_RANGE_START_TAG: ordered[0],
        ASSET_PARTITION_RANGE_END_TAG: ordered[-1],
        "rag/changed_shards": ",".join(ordered),
    }
