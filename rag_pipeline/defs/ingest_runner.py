"""Run the ingest graph in-process through Dagster for the shards that changed, switch to a completed index
generation, and summarise it.

The CLI's `ingest`, `reindex`, `upload` and `remove` (and `beir`, `guard-eval`) and the API's `POST /ingest` and
uploads call `ingest` here: it is the one place outside the Dagster UI that launches runs. The summary is added
up from each stage's typed StageTotals and the sidecar's record of what each run did to each document. With
RAG_INGEST_WORKERS > 1 the per-document stages of a run's shards run in shard worker processes
(defs/shard_workers.py) between the serialised stages.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg

from rag_pipeline.defs.assets import (
    GENERATION,
    INGEST_ASSETS,
    corpus_summary,
    index_generation,
    metadata_sidecar,
    raw_documents,
    vector_index,
)
from rag_pipeline.defs.field_assets import document_enrichment, roster
from rag_pipeline.defs.local_runs import (
    DATA_DIR_TAG,
    QUIET_LOGS,
    dagster_instance,
    materialize_stages,
    release_killed_runs,
    run_failure,
    stage_totals,
)
from rag_pipeline.defs.partitions import shard_runs
from rag_pipeline.defs.resources import RagResource
from rag_pipeline.defs.shard_workers import ShardWorkers, start_shard_workers_forkserver
from rag_pipeline.errors import ConfigError, Conflict, IngestFailed, StoreLocked
from rag_pipeline.file_lock import LockHeld, locked
from rag_pipeline.ingest.convert import start_conversion_workers
from rag_pipeline.ingest.discover import files_since_scan
from rag_pipeline.ingest.document_workers import document_workers, start_document_workers
from rag_pipeline.ingest.membership import forget_source
from rag_pipeline.ingest.plan import docling_pending, pending_shards, pending_work
from rag_pipeline.ingest.summary import IngestSummary
from rag_pipeline.structured.freshness import stale_fields

# The unpartitioned assets an ingest ends with, once every shard run is done: fields from enrichment and rosters, the
# switch to a completed generation, the corpus summary.
AFTER_SHARDS = [document_enrichment, roster, index_generation, corpus_summary]
STORE_POLL_S = 0.25  # how often an ingest tries again for the embedded store another process holds
LOCK_PATIENCE_S = 1.0  # a server asks who holds ingest.lock by taking it for an instant
EARLY_LOOK_FILES = 10_000  # the most files start_shard_workers_early looks at (a no-change look walks them all)


@contextmanager
def exclusive_ingest(data_dir: Path) -> Iterator[None]:
    """Hold <data dir>/ingest.lock for a whole ingest: two ingests of one data dir (the CLI and the API, say) would
    purge each other's new documents between their stages. A second one gets Conflict (ingest_running). A server
    that sees another process hold it leaves the embedded store to that ingest until it ends (serve/runtime.py)."""
    try:
        with locked(data_dir / "ingest.lock", wait=False, record=True, patience_s=LOCK_PATIENCE_S):
            yield
    except LockHeld as held:
        raise Conflict(f"another ingest of {data_dir} is running ({held.holder}); try again when it ends",
                       code="ingest_running") from None


@contextmanager
def held_store(rag: RagResource) -> Iterator[None]:
    """Hold the embedded store the ingest builds for the whole ingest, so that no other process takes it between
    two stages. A process that holds it now (a server, which leaves it once it sees ingest.lock) is waited for up to
    RAG_INGEST_STORE_WAIT_S; then StoreLocked names it. A Qdrant server needs no holding."""
    if rag.settings.qdrant_url:
        yield
        return
    generations, wait_s = rag.generations(), rag.settings.ingest_store_wait_s
    target, deadline = generations.target(), time.monotonic() + wait_s
    while True:
        try:
            store = generations.open(target)
            break
        except StoreLocked as error:
            if time.monotonic() >= deadline:
                raise StoreLocked(f"{error.message} (the ingest waited {wait_s:g} s for it: "
                                  "RAG_INGEST_STORE_WAIT_S)") from None
            time.sleep(STORE_POLL_S)
    try:
        with store.holding():
            yield
    finally:
        store.close()


def ingest(roots: Sequence[str | Path] | None = None, data_dir: str | Path | None = None, *,
           source: str | None = None, rediscover: bool = True, forget: str | None = None,
           progress: bool = False, add_roots: bool = False) -> dict[str, Any]:
    """Sync sources into the data dir; returns the summary the CLI prints as JSON.

    With `roots`, the source `source` (default `default`) is synced to exactly those roots (`add_roots`: to the
    roots it has plus these, so adding a folder removes nothing); with `source` alone,
    to its configured (or last synced) roots; with neither, every configured source. `rediscover=False` walks no
    folder: the index generation the settings describe is built from what the sources last recorded (reindex).
    `forget` drops a source that is no longer configured first (its documents leave unless another source holds
    them). Then, once the generation the settings describe is complete, queries switch to it.
    """
    started = time.perf_counter()
    rag = RagResource(
        roots=[str(Path(root).resolve()) for root in roots] if roots else None, source=source,
        data_dir=str(data_dir) if data_dir is not None else None, show_progress=progress, rediscover=rediscover,
        add_roots=add_roots,
    )
    settings = rag.settings
    start_shard_workers_early(rag)
    with exclusive_ingest(settings.data_dir), held_store(rag):
        if forget is not None:
            forget_source(settings, rag.sidecar(), forget)
        return locked_ingest(rag, started)


def start_shard_workers_early(rag: RagResource) -> None:
    """With RAG_INGEST_WORKERS > 1, start the shard workers' forkserver before the lock, discovery and the diff when
    the given folders hold two or more files that are new or changed since the last scan (a look at the first
    EARLY_LOOK_FILES files that hashes nothing): its imports (Dagster and the pipeline, ~2 s of a core) then overlap
    them, and the workers are ready when raw_documents ends. One such file is one shard's work, which no worker
    runs (and its conversions want docling's forkserver). A wrong guess costs an idle forkserver, or conversion
    workers that import docling themselves."""
    if rag.settings.ingest_workers < 2 or not rag.roots:
        return
    looked = itertools.islice(files_since_scan(rag.settings, rag.roots), EARLY_LOOK_FILES)
    changed = (path for path, _, sha in looked if sha is None)
    if len(list(itertools.islice(changed, 2))) == 2:
        start_shard_workers_forkserver()


def locked_ingest(rag: RagResource, started: float) -> dict[str, Any]:
    """The ingest, under the data dir's ingest lock."""
    settings, sidecar = rag.settings, rag.sidecar()
    specs = rag.source_specs()
    if rag.rediscover and not specs:
        raise ConfigError("nothing to ingest: give folders, or configure sources (RAG_SOURCES_FILE) or RAG_ROOTS")
    manifest = rag.manifest(specs)
    with rag.vector_store() as store:
        shards = pending_shards(settings, manifest, sidecar, store)
    runs = shard_runs(shards)
    # The forkserver the workers fork from imports what they need in the background, while the Dagster run starts
    # (neither call has an effect once this process's forkserver runs: see start_shard_workers_early).
    if settings.ingest_workers > 1 and any(len(run) > 1 for run in runs):
        start_shard_workers_forkserver()  # Dagster and the pipeline (~2 s), during the raw_documents run
    elif docling_pending(settings, manifest, shards):
        start_conversion_workers()  # docling (~1.4 s), for the conversions in this process
    elif document_workers(settings, len(pending_work(settings, manifest, shards))) > 1:
        start_document_workers()  # for the redaction and chunking workers (~0.5 s), during raw_documents
    summary = IngestSummary(shards=shards, sources=[spec.name for spec in specs], paths_before=sidecar.first_paths())
    generations = rag.generations()
    target = generations.target()
    with dagster_instance() as instance:
        release_killed_runs(instance, settings.data_dir)
        for position, run in enumerate(runs):
            after = AFTER_SHARDS if position == len(runs) - 1 else []  # in the last run: one run start fewer
            if settings.ingest_workers > 1 and len(run) > 1:
                result = parallel_run(rag, run, pending_work(settings, manifest, run), instance, summary, after)
            else:
                result = add_run(summary, materialize_stages(rag, [*INGEST_ASSETS, *after], run, instance))
            if after:
                summary.generation = generation_of(result)
        if not shards and (generations.active_id() != target.id or stale_fields(settings, sidecar)):
            result = dg.materialize([*AFTER_SHARDS, *INGEST_ASSETS], selection=AFTER_SHARDS, resources={"rag": rag},
                                    instance=instance, run_config=QUIET_LOGS,
                                    tags={DATA_DIR_TAG: str(settings.data_dir.resolve())})
            summary.generation = generation_of(result)
    if summary.generation is None:
        summary.generation = {"target": target.id, "active": target.id, "switched": False}
    summary.record_documents(manifest, sidecar)
    summary.seconds = round(time.perf_counter() - started, 3)
    return summary.to_json()


def generation_of(result: dg.ExecuteInProcessResult) -> dict[str, Any]:
    """The index generation report of a run that materialised index_generation."""
    return result.asset_materializations_for_node("index_generation")[0].metadata[GENERATION].value


def add_run(summary: IngestSummary, result: dg.ExecuteInProcessResult) -> dg.ExecuteInProcessResult:
    """Count a finished run in the summary; a failed one stops the ingest (IngestFailed says why)."""
    if not result.success:
        raise IngestFailed(run_failure(result))
    summary.add_run(result.run_id, stage_totals(result))
    return result


def parallel_run(rag: RagResource, shards: list[str], work: dict[str, int], instance: dg.DagsterInstance,
                 summary: IngestSummary, after: Sequence[dg.AssetsDefinition] = ()) -> dg.ExecuteInProcessResult:
    """The stages of `shards` with the per-document ones in RAG_INGEST_WORKERS shard workers (ranges of near-equal
    `work`): raw_documents here (while the workers start), then the workers' runs at once, then vector_index and
    metadata_sidecar here (the writes that must be serialised), with the `after` assets in the same run."""
    with ShardWorkers(rag, rag.settings.ingest_workers) as workers:
        add_run(summary, materialize_stages(rag, [raw_documents], shards, instance))
        failures = []
        for worker_run in workers.run(shards, work):
            summary.add_run(worker_run.run_id, worker_run.stage_totals())
            if worker_run.failure:
                failures.append(worker_run.failure)
    if failures:
        raise IngestFailed("; ".join(failures))
    return add_run(summary, materialize_stages(rag, [vector_index, metadata_sidecar, *after], shards, instance))
