"""Ingest assets, partitioned by content-SHA shard: raw_documents -> markdown_documents -> redacted_documents -> chunks.

Each materialisation covers one shard or a range of shards in a single run and processes only what changed.
"""

from typing import Any

import dagster as dg

from rag_pipeline import sync
from rag_pipeline.defs.partitions import SHARDS
from rag_pipeline.defs.resources import RagResource
from rag_pipeline.sync import StageReport

TABLE_LIMIT = 500
TABLE_COLUMNS = {
    "path": "string", "sha": "string", "shard": "string", "type": "string", "status": "string",
    "pages": "int", "chars": "int", "chunks": "int", "redactions": "int", "error": "string",
}
SHARDED = {
    "partitions_def": SHARDS,
    "backfill_policy": dg.BackfillPolicy.single_run(),
    "pool": "rag_store_writer",
    "group_name": "ingest",
}

def documents_table(report: StageReport, rag: RagResource) -> dg.TableMetadataValue:
    """The documents this stage touched, with their current state from the sidecar."""
    touched = list(dict.fromkeys(report.added + report.moved + list(report.failed) + report.purged))
    stored = rag.sidecar().documents_by_sha(touched[:TABLE_LIMIT])
    records = []
    for sha in touched[:TABLE_LIMIT]:
        row = stored.get(sha) or {}
        records.append(dg.TableRecord({
            "path": row["paths"][0] if row.get("paths") else report.purged_paths.get(sha),
            "sha": sha[:12],
            "shard": row.get("shard") or rag.settings.shard_of(sha),
            "type": row.get("doc_type"),
            "status": "purged" if sha in report.purged else row.get("status"),
            "pages": row.get("pages"),
            "chars": row.get("chars"),
            "chunks": row.get("chunks"),
            "redactions": row.get("redactions"),
            "error": report.failed.get(sha) or row.get("error"),
        }))
    schema = dg.TableSchema(columns=[dg.TableColumn(name, kind) for name, kind in TABLE_COLUMNS.items()])
    return dg.MetadataValue.table(records, schema=schema)

def stage_metadata(report: StageReport, rag: RagResource) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "shards": ",".join(report.shards),
        "added": len(report.added),
        "skipped": report.skipped,
        "purged": len(report.purged),
        "failed": len(report.failed),
        "seconds": round(report.seconds, 3),
        "docs_per_second": round(len(report.added) / report.seconds, 2) if report.seconds else 0.0,
        "documents": documents_table(report, rag),
    }
    if report.failed:
        metadata["failures"] = dg.MetadataValue.md("\n".join(f"- {error}" for error in report.failed.values()))
    return metadata

def check_result(name: str, report: StageReport) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        check_name=name,
        passed=not report.check_failures,
        metadata={"violations": len(report.check_failures),
                  "details": dg.MetadataValue.md("\n".join(f"- {v}" for v in report.check_failures[:50]) or "none")},
    )

@dg.asset(**SHARDED)
def raw_documents(context: dg.AssetExecutionContext, rag: RagResource) -> dg.MaterializeResult:
    """Discover the roots, snapshot new documents' bytes, purge vanished SHAs from every stage."""
    manifest = rag.manifest()
    sidecar = rag.sidecar()
    sidecar.replace_source_errors((error.path, error.reason) for error in manifest.errors)
    report = sync.sync_raw(rag.settings, manifest, context.partition_keys, sidecar)
    metadata = stage_metadata(report, rag)
    metadata["moved"] = len(report.moved)
    metadata["refused_files"] = len(manifest.errors)
    if manifest.errors:
        metadata["refusals"] = dg.MetadataValue.md("\n".join(f"- `{e.path}`: {e.reason}" for e in manifest.errors))
    return dg.MaterializeResult(metadata=metadata)

@dg.asset(
    **SHARDED,
    deps=[raw_documents],
    check_specs=[dg.AssetCheckSpec("converted_documents_non_empty", asset="markdown_documents", blocking=True)],
)
def markdown_documents(context: dg.AssetExecutionContext, rag: RagResource) -> dg.MaterializeResult:
    """Convert new documents to Markdown with docling; failures are recorded per document."""
    report = sync.sync_markdown(rag.settings, rag.converter(), context.partition_keys, rag.sidecar(),
                                progress=rag.show_progress)
    return dg.MaterializeResult(
        metadata=stage_metadata(report, rag),
        check_results=[check_result("converted_documents_non_empty", report)],
    )

@dg.asset(
    **SHARDED,
    deps=[markdown_documents],
    check_specs=[dg.AssetCheckSpec("no_secret_survives", asset="redacted_documents", blocking=True)],
)
def redacted_documents(context: dg.AssetExecutionContext, rag: RagResource) -> dg.MaterializeResult:
    """Redact secrets and PII before anything downstream sees the text."""
    report = sync.sync_redacted(rag.settings, context.partition_keys, rag.sidecar())
    return dg.MaterializeResult(
        metadata=stage_metadata(report, rag),
        check_results=[check_result("no_secret_survives", report)],
    )

@dg.asset(
    **SHARDED,
    deps=[redacted_documents],
    check_specs=[dg.AssetCheckSpec("chunk_sizes_within_limit", asset="chunks", blocking=True)],
)
def chunks(context: dg.AssetExecutionContext, rag: RagResource) -> dg.MaterializeResult:
    """Split redacted documents into chunks with heading paths, lines and pages."""
    report = sync.sync_chunks(rag.settings, context.partition_keys, rag.sidecar())
    metadata = stage_metadata(report, rag)
    metadata["chunks_written"] = report.chunks
    metadata["chunks_per_second"] = round(report.chunks / report.seconds, 1) if report.seconds else 0.0
    return dg.MaterializeResult(metadata=metadata, check_results=[check_result("chunk_sizes_within_limit", report)])

INGEST_ASSETS = [raw_documents, markdown_documents, redacted_documents, chunks]
