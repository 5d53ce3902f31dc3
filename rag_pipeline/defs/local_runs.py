"""Dagster runs of ingest assets in this process: the instance they are recorded in, the stage totals a run
carried, and a readable reason when one failed. Used by the in-process runner (defs/ingest_runner.py) and by its
shard workers (defs/shard_workers.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
from sqlalchemy.engine import Engine

from rag_pipeline.defs.assets import INGEST_ASSETS, TOTALS
from rag_pipeline.defs.partitions import shard_run_tags
from rag_pipeline.defs.resources import RagResource
from rag_pipeline.ingest.sha_range import ALL_DOCUMENTS, ShaRange
from rag_pipeline.ingest.stage import StageTotals

QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
DATA_DIR_TAG = "rag/in_process_ingest"  # the data dir of the in-process ingest a run belongs to
UNFINISHED = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED,
              dg.DagsterRunStatus.CANCELING]


# An in-process run covers a range of shards in one step per asset (a single-run backfill): one "planned" event per
# asset for the whole range instead of one per shard (with 16 shards and 7 assets, 105 event-log writes fewer per
# ingest). The cost Dagster names: a failed run does not mark its shards failed in the UI; the ingest reports the
# failure and the sidecar records each document's. Set the variable to false to restore per-shard events.
PLANNED_EVENTS_PER_RANGE = "DAGSTER_EMIT_PARTITION_SUBSET_IN_PLANNED_EVENTS"
# dagster-postgres opens a connection for every storage call (a NullPool), unless the instance is "optimised for the
# webserver": then each storage keeps one (up to 20 more for a moment). A ranged run writes an event per shard and
# step, so the in-process runner keeps them too: 51 -> 22 ms per partition event on a local server. Statement
# timeout 0: none (a step's long query must not fail its run), overriding one set on the role or database. Recycled
# after 5 idle-or-not minutes, before a proxy or idle_session_timeout drops one mid-step. Closed with the instance.
# SQLite storage ignores it (its event log keeps its engines anyway).
KEPT_CONNECTIONS = {"statement_timeout": 0, "pool_recycle": 300, "max_overflow": 20}


@contextmanager
def dagster_instance() -> Iterator[dg.DagsterInstance]:
    """The instance in $DAGSTER_HOME when set (runs are recorded there; its database connections kept for the
    instance's life), else an ephemeral one."""
    os.environ.setdefault(PLANNED_EVENTS_PER_RANGE, "true")
    if os.environ.get("DAGSTER_HOME"):
        with dg.DagsterInstance.get() as instance:
            instance.optimize_for_webserver(**KEPT_CONNECTIONS)
            try:
                yield instance
            finally:
                close_kept_connections(instance)
    else:
        with dg.DagsterInstance.ephemeral() as instance:
            yield instance


def close_kept_connections(instance: dg.DagsterInstance) -> None:
    """Close the connections the instance's storages keep (disposing an instance leaves dagster-postgres's open
    until they are garbage-collected)."""
    for storage in (instance.run_storage, instance.event_log_storage, instance.schedule_storage):
        engine = getattr(storage, "_engine", None)  # dagster-postgres's storages keep their engine there
        if isinstance(engine, Engine):
            engine.dispose()


def materialize_stages(rag: RagResource, stages: Sequence[dg.AssetsDefinition], shards: Sequence[str],
                       instance: dg.DagsterInstance, documents: ShaRange = ALL_DOCUMENTS) -> dg.ExecuteInProcessResult:
    """One run of the given assets (ingest assets over the key range of `shards`, the per-document ones over only
    their `documents`, and unpartitioned assets after them) (no error raised: see run_failure)."""
    tags = {**shard_run_tags(shards, documents), DATA_DIR_TAG: str(rag.settings.data_dir.resolve())}
    assets = list(dict.fromkeys([*INGEST_ASSETS, *stages]))
    return dg.materialize(assets, selection=list(stages), resources={"rag": rag}, instance=instance,
                          tags=tags, run_config=QUIET_LOGS, raise_on_error=False)


def release_killed_runs(instance: dg.DagsterInstance, data_dir: Path) -> list[str]:
    """Fail the unfinished runs of an earlier in-process ingest of `data_dir` and free the pool slots they claim.

    Called under the data dir's ingest lock, when no other in-process ingest of it runs: such a run's process was
    killed (kill -9, OOM) before Dagster could end it, and with the pool at op granularity the writer steps of every
    later ingest would wait for its slot forever. Returns the run ids."""
    runs = instance.get_runs(dg.RunsFilter(statuses=UNFINISHED, tags={DATA_DIR_TAG: str(data_dir.resolve())}))
    for run in runs:
        if instance.event_log_storage.supports_global_concurrency_limits:
            instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        instance.report_run_failed(run, "its in-process ingest was killed; released by the next ingest")
    return [run.run_id for run in runs]


def stage_totals(result: dg.ExecuteInProcessResult) -> dict[str, StageTotals]:
    """Asset name -> the StageTotals its step carried, for every ingest asset the run materialised. A step over a
    range of shards records one materialisation per shard, each with the step's metadata: the first one holds the
    totals."""
    totals = {}
    for asset in INGEST_ASSETS:
        name = asset.key.to_user_string()
        if events := result.asset_materializations_for_node(name):
            totals[name] = StageTotals.from_json(events[0].metadata[TOTALS].value)
    return totals


def run_failure(result: dg.ExecuteInProcessResult) -> str:
    """A readable reason for a failed run: failed checks first, then step errors, each by the error that caused it
    (StoreLocked and its holder, say), not Dagster's wrapper of it."""
    reasons = [
        f"asset check {evaluation.check_name} failed: {evaluation.metadata.get('details').value}"
        for evaluation in result.get_asset_check_evaluations() if not evaluation.passed
    ]
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data.error:
            error = event.step_failure_data.error
            while error.cause is not None and (error.cls_name or "").startswith("Dagster"):
                error = error.cause
            reasons.append(f"{event.step_key}: {error.message.strip()}")
    return "; ".join(reasons) or "the ingest run failed"
