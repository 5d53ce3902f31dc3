"""File sensor: re-ingests the shards whose documents changed in any configured source."""

import hashlib
import json

import dagster as dg

from rag_pipeline.defs.assets import INGEST_ASSETS, corpus_summary
from rag_pipeline.defs.jobs import corpus_summary_job, ingest_job
from rag_pipeline.defs.partitions import shard_ranges, shard_run_tags, shard_runs
from rag_pipeline.defs.resources import RagResource
from rag_pipeline.errors import StoreLocked
from rag_pipeline.ingest.discover import Manifest
from rag_pipeline.ingest.plan import pending_shards
from rag_pipeline.settings import Settings
from rag_pipeline.structured.freshness import stale_fields


def shard_digests(settings: Settings, manifest: Manifest) -> dict[str, str]:
    """shard -> digest of its (sha, path, tags, source) entries: any add, edit, move, copy, delete, re-tag or change
    of source membership changes it."""
    lines: dict[str, list[str]] = {}
    for source in manifest.files:
        entry = f"{source.sha256}\t{source.path}" + (f"\t{','.join(source.tags)}" if source.tags else "")
        entry += f"\t@{source.source}"
        lines.setdefault(settings.shard_of(source.sha256), []).append(entry)
    return {
        shard: hashlib.sha256("\n".join(sorted(entries)).encode()).hexdigest()[:16]
        for shard, entries in sorted(lines.items())
    }


@dg.sensor(job=ingest_job, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def source_files_sensor(context: dg.SensorEvaluationContext, rag: RagResource) -> dg.SensorResult | dg.SkipReason:
    """One run for the affected shards (several when they lie far apart among 256 shards: see shard_runs), split
    into RAG_INGEST_WORKERS runs over contiguous shard ranges whose per-document steps run at once; the cursor
    holds per-shard digests so an unchanged tree requests nothing.

    With no cursor yet (first tick), the shards whose stored state differs from the tree are requested.
    """
    settings = rag.settings
    if not rag.source_specs():
        return dg.SkipReason("no sources configured (set RAG_SOURCES_FILE or RAG_ROOTS)")
    manifest = rag.manifest(record=False)  # the runs record what they sync
    digests = shard_digests(settings, manifest)
    if context.cursor is None:
        try:
            with rag.vector_store() as store:
                affected = pending_shards(settings, manifest, rag.sidecar(), store)
        except StoreLocked as exc:  # a run holds the embedded store: compare on a later tick
            return dg.SkipReason(f"waiting for the vector store: {exc}")
    else:
        previous = json.loads(context.cursor)
        affected = [shard for shard in settings.shard_keys if digests.get(shard) != previous.get(shard)]
    cursor = json.dumps(digests, sort_keys=True)
    if not affected:
        return dg.SensorResult(skip_reason=dg.SkipReason("no change under the roots"), cursor=cursor)
    # Dagster launches one run per run key: the key names this transition (from the last cursor, at this tick), so
    # a retried evaluation of the tick is not launched twice, but a state the tree returns to (a file moved back,
    # a tag rule reverted) is ingested again.
    transition = f"{context.cursor}|{cursor}|{context.last_tick_completion_time}"
    run_key = hashlib.sha256(transition.encode()).hexdigest()[:16]
    requests = [dg.RunRequest(run_key=f"{run_key}-{shards[0]}", tags=shard_run_tags(shards))
                for run in shard_runs(affected) for shards in shard_ranges(run, settings.ingest_workers)]
    return dg.SensorResult(run_requests=requests, cursor=cursor)


@dg.sensor(job=corpus_summary_job, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def field_sources_sensor(context: dg.SensorEvaluationContext, rag: RagResource) -> dg.RunRequest | dg.SkipReason:
    """Re-reads a roster whose file changed, enriches documents a new or changed field declaration covers, and
    refreshes points whose filterable fields changed, without an ingest run."""
    reasons = stale_fields(rag.settings, rag.sidecar())
    if not reasons:
        return dg.SkipReason("rosters, enrichments and field labels are current")
    key = hashlib.sha256(json.dumps([reasons, context.last_tick_completion_time]).encode()).hexdigest()[:16]
    return dg.RunRequest(run_key=key, tags={"reason": "; ".join(reasons)[:200]})


INGEST_KEYS = {asset.key for asset in INGEST_ASSETS}


@dg.run_status_sensor(
    run_status=dg.DagsterRunStatus.SUCCESS,
    request_job=corpus_summary_job,
    default_status=dg.DefaultSensorStatus.RUNNING,
    minimum_interval_seconds=10,  # queries switch to a finished generation within ~10 s (Dagster's default: 30)
)
def corpus_summary_after_ingest(context: dg.RunStatusSensorContext) -> dg.RunRequest | dg.SkipReason:
    """Every successful run that materialised ingest assets (the sensor's ingest_job runs, and backfills or
    materialisations launched from the UI, which run as the implicit asset job) refreshes the corpus summary,
    unless it refreshed it itself (the in-process ingest's last run)."""
    run = context.dagster_run
    if run.job_name != ingest_job.name:
        records = context.instance.get_records_for_run(
            run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION, limit=1000).records
        keys = {record.event_log_entry.dagster_event.asset_key for record in records}
        if not keys & INGEST_KEYS:
            return dg.SkipReason(f"run {run.run_id} materialised no ingest asset")
        if corpus_summary.key in keys:
            return dg.SkipReason(f"run {run.run_id} refreshed the corpus summary itself")
    return dg.RunRequest(run_key=run.run_id)
