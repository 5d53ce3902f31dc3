"""Run the ingest graph in-process through Dagster for the shards that changed, and summarise it."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import dagster as dg

from rag_pipeline.defs.assets import INGEST_ASSETS, corpus_summary
from rag_pipeline.defs.partitions import shard_run_tags, shard_runs
from rag_pipeline.defs.resources import RagResource
from rag_pipeline.index.indexing import pending_shards
from rag_pipeline.settings import Settings
from rag_pipeline.sources import Manifest

QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


class IngestFailed(RuntimeError):
    """The Dagster run failed (a step raised or a blocking asset check failed)."""


@contextmanager
def dagster_instance() -> Iterator[dg.DagsterInstance]:
    """The instance in $DAGSTER_HOME when set (runs are recorded there), else an ephemeral one."""
    if os.environ.get("DAGSTER_HOME"):
        with dg.DagsterInstance.get() as instance:
            yield instance
    else:
        with dg.DagsterInstance.ephemeral() as instance:
            yield instance


# Summary counts: key -> (asset, metadata key), summed over the runs.
COUNTS = {
    "added": ("raw_documents", "added"), "moved": ("raw_documents", "moved"),
    "retagged": ("raw_documents", "retagged"), "unchanged": ("raw_documents", "unchanged"),
    "purged": ("raw_documents", "purged"), "chunks": ("chunks", "chunks_written"),
    "vectors_computed": ("embeddings", "vectors_computed"), "vectors_cached": ("embeddings", "vectors_cached"),
    "points_upserted": ("vector_index", "points_upserted"), "points_deleted": ("vector_index", "points_deleted"),
    "embed_seconds": ("embeddings", "embed_seconds"),
}


def metadata_value(result: dg.ExecuteInProcessResult, asset: str, key: str) -> Any:
    events = result.asset_materializations_for_node(asset)
    return events[0].metadata[key].value if events else 0


def outside_runs(settings: Settings, manifest: Manifest, runs: Sequence[Sequence[str]]) -> int:
    """Documents in shards no run's partition range covers (unchanged, as their shards were in sync)."""
    covered = {key for run in runs for key in settings.shard_keys if run[0] <= key <= run[-1]}
    return sum(1 for sha in manifest.documents() if settings.shard_of(sha) not in covered)


def ingest(roots: Sequence[str | Path], data_dir: str | Path | None = None, *, progress: bool = False) -> dict[str, Any]:
    """Sync the roots into the data dir; returns the summary the CLI prints as JSON."""
    started = time.perf_counter()
    rag = RagResource(
        roots=[str(Path(root).resolve()) for root in roots],
        data_dir=str(data_dir) if data_dir is not None else None,
        show_progress=progress,
    )
    settings, sidecar = rag.settings, rag.sidecar()
    manifest = rag.manifest()
    with rag.vector_store() as store:
        shards = pending_shards(settings, manifest, sidecar, store)
    summary: dict[str, Any] = {key: 0 for key in COUNTS} | {
        "unchanged": len(manifest.documents()), "shards": shards, "run_ids": []}
    if shards:
        runs = shard_runs(shards)
        results = []
        with dagster_instance() as instance:
            for run in runs:
                result = dg.materialize(
                    INGEST_ASSETS, resources={"rag": rag}, instance=instance, tags=shard_run_tags(run),
                    run_config=QUIET_LOGS, raise_on_error=False,
                )
                if not result.success:
                    raise IngestFailed(run_failure(result))
                results.append(result)
            dg.materialize([corpus_summary, *INGEST_ASSETS], selection=[corpus_summary], resources={"rag": rag},
                           instance=instance, run_config=QUIET_LOGS)
        summary.update({key: sum(metadata_value(result, asset, name) for result in results)
                        for key, (asset, name) in COUNTS.items()})
        summary["unchanged"] += outside_runs(settings, manifest, runs)
        summary["embed_seconds"] = round(summary["embed_seconds"], 3)
        summary["run_ids"] = [result.run_id for result in results]
        summary["stage_seconds"] = {
            asset.key.to_user_string(): round(sum(metadata_value(result, asset.key.to_user_string(), "seconds")
                                                  for result in results), 3)
            for asset in INGEST_ASSETS}
    else:
        sidecar.replace_source_errors((error.path, error.reason) for error in manifest.errors)
    current = set(manifest.documents())
    failed = [{"path": e.path, "error": e.reason} for e in manifest.errors]
    failed += [{"path": row["paths"][0], "error": row["error"]} for sha, row in sorted(sidecar.documents().items())
               if row["status"] == "failed" and sha in current]
    summary["failed"] = failed
    summary["seconds"] = round(time.perf_counter() - started, 3)
    return summary


def run_failure(result: dg.ExecuteInProcessResult) -> str:
    """A readable reason for a failed run: failed checks first, then step errors."""
    reasons = [
        f"asset check {evaluation.check_name} failed: {evaluation.metadata.get('details').value}"
        for evaluation in result.get_asset_check_evaluations() if not evaluation.passed
    ]
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data.error:
            reasons.append(f"{event.step_key}: {event.step_failure_data.error.message.strip()}")
    return "; ".join(reasons) or "the ingest run failed"
