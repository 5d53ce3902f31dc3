"""The index_generation step: switch queries to the generation the settings describe once it is complete.

The generation being built is complete when no shard is out of sync with the sources and every point matches
its chunk artifact (ids and text hashes, over all shards). Then the pointer moves in one atomic step (the
registry file; on a server also the collection alias) and generations beyond RAG_KEEP_GENERATIONS are dropped.
Until then queries keep using the active generation.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from rag_pipeline.errors import StoreLocked
from rag_pipeline.index.generations import Generation
from rag_pipeline.index.lifecycle import IndexGenerations
from rag_pipeline.ingest.membership import stored_manifest
from rag_pipeline.ingest.plan import pending_shards
from rag_pipeline.ingest.vector_index import chunk_mismatches, expected_chunks
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar


@dataclass
class GenerationReport:
    """Where the index generations stand after the step."""

    target: str  # the generation the settings describe
    active: str | None  # the one queries use
    switched: bool = False  # the step moved queries to the target
    previous: str | None = None  # the generation queries used before a switch
    pending_shards: list[str] = field(default_factory=list)  # shards of the target still out of sync
    check_failures: list[str] = field(default_factory=list)  # points that do not match their chunks
    dropped: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # older generations kept (RAG_KEEP_GENERATIONS)
    drop_deferred: dict[str, str] = field(default_factory=dict)  # generation -> why it could not be dropped yet
    points: int = 0  # in the target's collection (counted when it is checked for a switch)
    waiting: str | None = None  # why the check could not run yet (the store is busy)
    check_seconds: float = 0.0
    switch_ms: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def finalize_generation(settings: Settings, sidecar: Sidecar, generations: IndexGenerations) -> GenerationReport:
    """Switch to the target generation if it is not active yet, complete and checks out; drop generations beyond
    the ones kept. When the target is already active there is nothing to check (its runs' checks guard it)."""
    target = generations.target()
    report = GenerationReport(target=target.id, active=generations.active_id())
    if report.active != target.id:
        try:
            switch_if_complete(settings, sidecar, generations, target, report)
        except StoreLocked as error:  # another process holds the embedded store: a later step switches
            report.waiting = str(error)
    drop_old_generations(settings, generations, report)
    return report


def switch_if_complete(settings: Settings, sidecar: Sidecar, generations: IndexGenerations, target: Generation,
                       report: GenerationReport) -> None:
    """Check the target generation over every shard and switch queries to it when it is complete."""
    begin = time.perf_counter()
    with generations.building() as store:
        report.pending_shards = pending_shards(settings, stored_manifest(sidecar), sidecar, store)
        if not report.pending_shards:
            documents = sidecar.document_shas()
            expected = {shard: expected_chunks(settings, shard, documents) for shard in settings.shard_keys}
            report.check_failures = chunk_mismatches(store, expected, sidecar)
        report.points = store.count()
    report.check_seconds = round(time.perf_counter() - begin, 3)
    if not report.pending_shards and not report.check_failures:
        begin = time.perf_counter()
        report.previous = generations.activate(target)
        report.switch_ms = round((time.perf_counter() - begin) * 1000, 2)
        report.switched, report.active = True, target.id


def drop_old_generations(settings: Settings, generations: IndexGenerations, report: GenerationReport) -> None:
    """Drop the generations that are neither active, nor being built, nor among the newest kept
    (RAG_KEEP_GENERATIONS counts the active one). One still open elsewhere is dropped by a later step."""
    others = sorted((generation for gid, generation in generations.all().items()
                     if gid not in (report.active, report.target)), key=lambda g: g.created_at, reverse=True)
    keep = settings.keep_generations - 1
    report.kept = [generation.id for generation in others[:keep]]
    for generation in others[keep:]:
        try:
            store = generations.open(generation)
        except StoreLocked as error:  # open in another process
            report.drop_deferred[generation.id] = str(error)
            continue
        try:
            store.drop()
        except StoreLocked as error:  # open elsewhere in this process (a retriever still on it)
            store.close()
            report.drop_deferred[generation.id] = str(error)
            continue
        generations.forget(generation.id)
        report.dropped.append(generation.id)
