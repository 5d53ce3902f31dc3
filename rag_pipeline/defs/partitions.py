"""Content-SHA shards: a document's partition is the first hex digit(s) of its SHA-256."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import pairwise

import dagster as dg
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
)

from rag_pipeline.defs.location import DEFINITION_SETTINGS
from rag_pipeline.ingest.sha_range import ALL_DOCUMENTS, ShaRange, balanced_ranges

SHARDS = dg.StaticPartitionsDefinition(DEFINITION_SETTINGS.shard_keys)
# The part of its shards' documents a run's per-document stages process ("start..end" of SHAs; absent: all): set
# on a shard worker's run, which may share a shard with the next worker's, each taking its own side of a document.
# A run launched by hand with it processes only those documents; an ingest without it finishes the rest.
SHA_RANGE_TAG = "rag/sha_range"


# A run costs about as much as this many partitions' bookkeeping (a run start against ~7 asset events and a
# shard scan per partition; see bench/bench_dagster_storage.py): changed shards further apart go to separate runs.
# With 16 shards no gap is this wide, so a change is always one run.
RUN_SPLIT_GAP = 16


def shard_runs(shards: Sequence[str], keys: Sequence[str] = SHARDS.get_partition_keys(),
               max_gap: int = RUN_SPLIT_GAP) -> list[list[str]]:
    """The changed shards grouped into runs: a new run starts where more than `max_gap` unchanged partitions
    separate two changed ones, so sparse changes over 256 shards do not pay for every partition in between."""
    position = {key: index for index, key in enumerate(keys)}
    runs: list[list[str]] = []
    for shard in sorted(set(shards), key=position.__getitem__):
        if runs and position[shard] - position[runs[-1][-1]] - 1 <= max_gap:
            runs[-1].append(shard)
        else:
            runs.append([shard])
    return runs


def shard_ranges(shards: Sequence[str], workers: int) -> list[list[str]]:
    """The shards split into at most `workers` contiguous ranges of near-equal numbers of shards (a run covers a
    key range, so ranges must not interleave)."""
    ordered = sorted(shards)
    count = max(1, min(workers, len(ordered)))
    size, extra = divmod(len(ordered), count)
    bounds = [0]
    for index in range(count):
        bounds.append(bounds[-1] + size + (1 if index < extra else 0))
    return [ordered[start:end] for start, end in pairwise(bounds)]


def worker_ranges(shards: Sequence[str], workers: int,
                  work: Mapping[str, float]) -> list[tuple[list[str], ShaRange]]:
    """The documents of `shards` shared out among at most `workers` runs: consecutive SHA ranges of near-equal
    `work` (SHA -> the pending work of a document), each with the shards it meets (a run and the next may share
    one, cut at a document: shards hold too few, too unequal documents to share work evenly by whole shards).
    When the work cannot be cut (none pending, say only purges, or one document): contiguous ranges of whole
    shards."""
    ranges = balanced_ranges(work, workers)
    if len(ranges) == 1:
        return [(part, ALL_DOCUMENTS) for part in shard_ranges(shards, workers)]
    runs = [([shard for shard in sorted(shards) if documents.meets_shard(shard)], documents) for documents in ranges]
    return [(part, documents) for part, documents in runs if part]


def shard_run_tags(shards: Sequence[str], documents: ShaRange = ALL_DOCUMENTS) -> dict[str, str]:
    """Tags that make one run cover every given shard (the key range from the first to the last), or only the
    documents of them in `documents`.

    Shards inside the range that did not change are cheap no-ops: their stages find nothing to do.
    """
    ordered = sorted(shards)
    return {
        ASSET_PARTITION_RANGE_START_TAG: ordered[0],
        ASSET_PARTITION_RANGE_END_TAG: ordered[-1],
        "rag/changed_shards": ",".join(ordered),
        **({} if documents.whole else {SHA_RANGE_TAG: documents.to_text()}),
    }


def run_sha_range(tags: Mapping[str, str]) -> ShaRange:
    """The documents a run's per-document stages process, from its tags (all of its shards' when not limited)."""
    text = tags.get(SHA_RANGE_TAG)
    if text is None:
        return ALL_DOCUMENTS
    try:
        return ShaRange.parse(text)
    except ValueError as error:
        raise ValueError(f"run tag {SHA_RANGE_TAG}: {error}") from None
