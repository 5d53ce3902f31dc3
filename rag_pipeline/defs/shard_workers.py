"""Parallel shard runs of the in-process ingest (RAG_INGEST_WORKERS > 1).

The per-document stages (convert, redact, chunk, embed: nearly all of an ingest's time) of disjoint shard ranges
run as separate Dagster runs, one per worker process, each worker pinned to one core of this process's cores. A
worker writes only its own shards' artifacts, the embedding cache (SQLite in WAL mode, safe for several processes)
and its documents' rows in the sidecar (short transactions, retried while another process holds the file). The
stages that must be serialised (raw_documents: discovery and purges; vector_index: the embedded store's single
writer; metadata_sidecar) run in the ingest process before and after the workers.

A worker killed in the middle of a range breaks the pool: every range not finished runs again in new workers,
once (each stage is idempotent: it does exactly the work still missing).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from rag_pipeline.defs.assets import chunks, embeddings, markdown_documents, redacted_documents
from rag_pipeline.defs.local_runs import dagster_instance, materialize_stages, run_failure, stage_totals
from rag_pipeline.defs.partitions import shard_ranges
from rag_pipeline.defs.resources import RagResource
from rag_pipeline.errors import IngestFailed
from rag_pipeline.ingest.stage import StageTotals
from rag_pipeline.ingest.worker_pool import CONTEXT

PER_DOCUMENT_STAGES = [markdown_documents, redacted_documents, chunks, embeddings]
# Imported once by the forkserver the workers fork from (unless one already runs), not by every worker.
PRELOAD = ["__main__", "rag_pipeline.defs.shard_workers"]
ATTEMPTS = 2  # a range whose worker died runs once more
ENVIRONMENT_PREFIXES = ("RAG_", "DAGSTER_")  # the settings a worker must see as this process sees them now


@dataclass(frozen=True)
class RangeJob:
    """One worker's run: the resource's fields, the shards (a contiguous key range), the core to pin to, and the
    RAG_* and DAGSTER_* variables of the ingest process (a forkserver's children inherit its start-up
    environment, not the current one)."""

    resource: dict[str, object]
    shards: list[str]
    cpu: int
    environment: dict[str, str]


@dataclass(frozen=True)
class RangeRun:
    """What a worker's run did: its run id, the stage totals (asset name -> StageTotals JSON), and why it failed."""

    shards: list[str]
    run_id: str
    totals: dict[str, dict[str, object]]
    failure: str | None

    def stage_totals(self) -> dict[str, StageTotals]:
        return {name: StageTotals.from_json(value) for name, value in self.totals.items()}


def run_range(job: RangeJob) -> RangeRun:
    """In a worker: pin to the job's core, then run the per-document stages over the job's shards."""
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {job.cpu})
    for name in [name for name in os.environ if name.startswith(ENVIRONMENT_PREFIXES)]:
        del os.environ[name]
    os.environ.update(job.environment)
    rag = RagResource(**job.resource)
    with dagster_instance() as instance:
        result = materialize_stages(rag, PER_DOCUMENT_STAGES, job.shards, instance)
    return RangeRun(shards=job.shards, run_id=result.run_id,
                    totals={name: totals.to_json() for name, totals in stage_totals(result).items()},
                    failure=None if result.success else run_failure(result))


def run_in_workers(rag: RagResource, shards: Sequence[str], workers: int) -> list[RangeRun]:
    """Run the per-document stages of `shards` in `workers` processes, one contiguous shard range each; the runs
    in the order they finished. A range whose worker died runs again once; then IngestFailed names its shards."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))
    resource = {"data_dir": rag.data_dir, "roots": rag.roots, "source": rag.source, "rediscover": rag.rediscover}
    environment = {name: value for name, value in os.environ.items() if name.startswith(ENVIRONMENT_PREFIXES)}
    CONTEXT.set_forkserver_preload(PRELOAD)  # no effect once this process's forkserver runs
    pending, finished = shard_ranges(shards, workers), []
    for _ in range(ATTEMPTS):
        lost = []
        with ProcessPoolExecutor(len(pending), mp_context=CONTEXT) as pool:
            futures = {pool.submit(run_range, RangeJob(resource, shard_range, cpus[index % len(cpus)], environment)):
                       shard_range for index, shard_range in enumerate(pending)}
            for future in as_completed(futures):
                try:
                    finished.append(future.result())
                except BrokenProcessPool:
                    lost.append(futures[future])
        if not lost:
            return finished
        pending = lost
    raise IngestFailed("a shard worker died twice on shards " + ", ".join(shard for run in pending for shard in run)
                       + "; ingest again to finish them (every stage resumes where it stopped)")
