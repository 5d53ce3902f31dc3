"""Parallel shard runs of the in-process ingest (RAG_INGEST_WORKERS > 1).

The per-document stages (convert, redact, chunk, embed: nearly all of an ingest's time) of disjoint ranges of
documents run as separate Dagster runs, one per worker process, each worker pinned to one core of this process's
cores. The ranges are consecutive SHA ranges of near-equal pending bytes, cut at a document: a run covers the
shards its range meets, and two runs may share a shard, each processing only its side of the cut (run tag
rag/sha_range). A worker writes only its own documents' artifacts, the embedding cache (SQLite in WAL mode, safe
for several processes) and its documents' rows in the sidecar (short transactions, retried while another process
holds the file). The stages that must be serialised (raw_documents: discovery and purges; vector_index: the
embedded store's single writer; metadata_sidecar) run in the ingest process before and after the workers.

The workers start (and load the embedding model) as soon as the pool is made, while the ingest process runs
raw_documents. A worker killed in the middle of a range breaks the pool: every range not finished runs again in new
workers, once (each stage is idempotent: it does exactly the work still missing).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing.sharedctypes import Synchronized

from rag_pipeline.defs.assets import chunks, embeddings, markdown_documents, redacted_documents
from rag_pipeline.defs.local_runs import dagster_instance, materialize_stages, run_failure, stage_totals
from rag_pipeline.defs.partitions import worker_ranges
from rag_pipeline.defs.resources import RagResource
from rag_pipeline.errors import IngestFailed
from rag_pipeline.ingest.sha_range import ShaRange
from rag_pipeline.ingest.stage import StageTotals
from rag_pipeline.ingest.worker_pool import CONTEXT, start_forkserver

PER_DOCUMENT_STAGES = [markdown_documents, redacted_documents, chunks, embeddings]
# Imported once by the forkserver the workers fork from (unless one already runs), not by every worker.
PRELOAD = ["__main__", "rag_pipeline.defs.shard_workers"]
ATTEMPTS = 2  # a range whose worker died runs once more
ENVIRONMENT_PREFIXES = ("RAG_", "DAGSTER_")  # the settings a worker must see as this process sees them now


def start_shard_workers_forkserver() -> None:
    """Start the forkserver shard workers fork from now: its imports (Dagster and the pipeline, ~2 s of a core)
    then overlap the raw_documents run instead of delaying the workers."""
    start_forkserver(PRELOAD)


@dataclass(frozen=True)
class RangeRun:
    """What a worker's run did: its run id, the stage totals (asset name -> StageTotals JSON), and why it failed."""

    shards: list[str]
    run_id: str
    totals: dict[str, dict[str, object]]
    failure: str | None

    def stage_totals(self) -> dict[str, StageTotals]:
        return {name: StageTotals.from_json(value) for name, value in self.totals.items()}


def start_worker(next_core: Synchronized, cores: list[int], environment: dict[str, str],
                 resource: dict[str, object]) -> None:
    """A worker's start: pin to the next of the ingest's cores, take the ingest's RAG_* and DAGSTER_* variables (a
    forkserver's children inherit its start-up environment, not the current one), load the local embedding model
    and Dagster's instance storage (its first instance takes ~0.4 s of imports): both while the ingest process runs
    raw_documents, not at the start of the worker's first range."""
    with next_core.get_lock():
        index, next_core.value = next_core.value, next_core.value + 1
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cores[index % len(cores)]})
    for name in [name for name in os.environ if name.startswith(ENVIRONMENT_PREFIXES)]:
        del os.environ[name]
    os.environ.update(environment)
    rag = RagResource(**resource)
    if rag.settings.embedding_backend == "sentence_transformers":
        try:
            rag.embedder()  # kept for the process (components.embedder); a failure shows in the embeddings step
        except Exception:
            pass
    try:  # a failing initializer breaks the whole pool, naming no cause: run_range meets the failure and reports it
        with dagster_instance():
            pass
    except Exception:
        pass


def run_range(resource: dict[str, object], shards: list[str], documents: ShaRange) -> RangeRun:
    """In a worker: the per-document stages over the shards (a contiguous key range), only their `documents`, as
    one Dagster run."""
    rag = RagResource(**resource)
    with dagster_instance() as instance:
        result = materialize_stages(rag, PER_DOCUMENT_STAGES, shards, instance, documents)
    return RangeRun(shards=shards, run_id=result.run_id,
                    totals={name: totals.to_json() for name, totals in stage_totals(result).items()},
                    failure=None if result.success else run_failure(result))


class ShardWorkers:
    """`workers` processes, each on one core of this process's, started at once; `run` gives them ranges of
    documents."""

    def __init__(self, rag: RagResource, workers: int) -> None:
        self.workers = workers
        self.resource = {"data_dir": rag.data_dir, "roots": rag.roots, "source": rag.source,
                         "rediscover": rag.rediscover}
        self.environment = {name: value for name, value in os.environ.items() if name.startswith(ENVIRONMENT_PREFIXES)}
        self.cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
            list(range(os.cpu_count() or 1))
        CONTEXT.set_forkserver_preload(PRELOAD)  # no effect once this process's forkserver runs
        # The forkserver imports PRELOAD (Dagster and the pipeline, ~2 s) before the first worker forks: start them
        # on a thread, so that the caller's raw_documents run goes on meanwhile.
        self._pool: ProcessPoolExecutor | None = None
        self._start_error: BaseException | None = None
        self._starting = threading.Thread(target=self._start_in_background, name="shard-workers-start", daemon=True)
        self._starting.start()

    def _start_in_background(self) -> None:
        try:
            self._pool = self._start()
        except BaseException as error:  # raised to the caller by `pool`
            self._start_error = error

    @property
    def pool(self) -> ProcessPoolExecutor:
        """The started pool (waits for the start; raises what it raised)."""
        self._starting.join()
        if self._start_error is not None:
            raise self._start_error
        assert self._pool is not None
        return self._pool

    def _start(self) -> ProcessPoolExecutor:
        """A pool whose workers all start now (a process starts per task while none is idle)."""
        pool = ProcessPoolExecutor(self.workers, mp_context=CONTEXT, initializer=start_worker,
                                   initargs=(CONTEXT.Value("i", 0), self.cores, self.environment, self.resource))
        try:
            for _ in range(self.workers):
                pool.submit(int)
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        return pool

    def run(self, shards: Sequence[str], work: Mapping[str, float]) -> list[RangeRun]:
        """The per-document stages of `shards`, one range of documents per worker (of near-equal `work`: SHA ->
        the pending work of a document); the runs in the order they finished. A range whose worker died runs again
        once (in new workers); then IngestFailed names its shards."""
        pending, finished = worker_ranges(shards, self.workers, work), []
        for attempt in range(ATTEMPTS):
            if attempt:
                self.pool.shutdown(wait=True, cancel_futures=True)
                self._pool = self._start()
            futures = {self.pool.submit(run_range, self.resource, *part): part for part in pending}
            lost = []
            for future in as_completed(futures):
                try:
                    finished.append(future.result())
                except BrokenProcessPool:
                    lost.append(futures[future])
            if not lost:
                return finished
            pending = lost
        lost_shards = sorted({shard for run, _ in pending for shard in run})  # a shared shard named once
        raise IngestFailed("a shard worker died twice on shards " + ", ".join(lost_shards)
                           + "; ingest again to finish them (every stage resumes where it stopped)")

    def close(self) -> None:
        self._starting.join()
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> ShardWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
