"""Ingest assets, partitioned by content-SHA shard: raw_documents -> markdown_documents -> redacted_documents
-> chunks -> embeddings -> vector_index -> metadata_sidecar, then (unpartitioned) document_enrichment and roster
(defs/field_assets.py), index_generation (the switch to a newly built generation) and corpus_summary.

Each materialisation covers one shard or a range of shards in a single run and processes only what changed.
"""

from typing import Any

import dagster as dg

from rag_pipeline.defs.location import DEFINITION_SETTINGS
from rag_pipeline.defs.partitions import SHARDS, run_sha_range
from rag_pipeline.defs.resources import STORE_POOL, RagResource
from rag_pipeline.ingest.catalogue import sync_catalogue
from rag_pipeline.ingest.chunk import sync_chunks
from rag_pipeline.ingest.convert import sync_markdown
from rag_pipeline.ingest.embeddings import sync_embeddings
from rag_pipeline.ingest.generation_switch import finalize_generation
from rag_pipeline.ingest.manifest import configured_report
from rag_pipeline.ingest.raw import sync_raw
from rag_pipeline.ingest.redact import sync_redacted
from rag_pipeline.ingest.stage import StageReport
from rag_pipeline.ingest.vector_index import sync_vector_index
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar

TABLE_LIMIT = 500
TABLE_COLUMNS = {
    "path": "string",
    "sha": "string",
    "shard": "string",
    "type": "string",
    "sources": "string",
    "tags": "string",
    "status": "string",
    "pages": "int",
    "chars": "int",
    "chunks": "int",
    "redactions": "int",
    "error": "string",
}
OWNERS = ["team:rag-platform"]
TOTALS = "totals"  # metadata key of a stage's StageTotals (JSON), which the in-process runner sums
GENERATION = "generation"  # metadata key of index_generation's GenerationReport (JSON)
SHARDED = {"partitions_def": SHARDS, "backfill_policy": dg.BackfillPolicy.single_run(), "owners": OWNERS}
INGEST = {**SHARDED, "group_name": "ingest"}  # source files to chunks
INDEX = {**SHARDED, "group_name": "index"}  # chunks to vectors, index and sidecar
# The steps whose writes must be serialised hold this pool (limit 1 in the instance): discovery and purges, the
# embedded store's single writer, the sidecar's chunk rows. The per-document stages hold none, so those of
# different runs (shard ranges) run at once; with a Qdrant server, so do the upserts of vector_index.
INDEX_POOL = None if DEFINITION_SETTINGS.qdrant_url else STORE_POOL
# A PostgreSQL sidecar (RAG_SIDECAR_URL) takes concurrent write transactions (one advisory lock each), so the
# sidecar rows of different shard ranges are written at once too.
SIDECAR_POOL = None if DEFINITION_SETTINGS.sidecar_url else STORE_POOL


def documents_tables(report: StageReport, shards: list[str], settings: Settings,
                     sidecar: Sidecar) -> dict[str, dg.TableMetadataValue]:
    """Per shard, the documents this stage touched in it (at most TABLE_LIMIT), with their current state from the
    sidecar: each shard's materialisation shows its own documents."""
    touched = list(dict.fromkeys(report.added + report.moved + report.retagged + list(report.failed) + report.purged))
    by_shard: dict[str, list[str]] = {shard: [] for shard in shards}
    for sha in touched:
        listed = by_shard.get(settings.shard_of(sha))
        if listed is not None and len(listed) < TABLE_LIMIT:
            listed.append(sha)
    stored = sidecar.documents_by_sha([sha for listed in by_shard.values() for sha in listed])
    schema = dg.TableSchema(columns=[dg.TableColumn(name, kind) for name, kind in TABLE_COLUMNS.items()])
    return {shard: dg.MetadataValue.table([document_record(sha, stored.get(sha) or {}, report, settings)
                                           for sha in listed], schema=schema)
            for shard, listed in by_shard.items()}


def document_record(sha: str, row: dict[str, Any], report: StageReport, settings: Settings) -> dg.TableRecord:
    """A document's row of the documents table."""
    return dg.TableRecord(
        {
            "path": row["paths"][0] if row.get("paths") else report.purged_paths.get(sha),
            "sha": sha[:12],
            "shard": row.get("shard") or settings.shard_of(sha),
            "type": row.get("doc_type"),
            "sources": ", ".join(row.get("sources") or []),
            "tags": ", ".join(row.get("tags") or []),
            "status": "purged" if sha in report.purged else row.get("status"),
            "pages": row.get("pages"),
            "chars": row.get("chars"),
            "chunks": row.get("chunks"),
            "redactions": row.get("redactions"),
            "error": report.failed.get(sha) or row.get("error"),
        }
    )


def stage_metadata(report: StageReport, rag: RagResource, context: dg.AssetExecutionContext) -> dict[str, Any]:
    """Counts, timings and figures of a stage (the same counts go to the sidecar's runs table); each shard's
    materialisation also gets the table of its own documents."""
    totals = report.totals()
    counts = {"added": totals.added, "skipped": totals.skipped, "purged": totals.purged, "failed": totals.failed}
    sidecar = rag.sidecar()
    with sidecar.kept():
        sidecar.record_run(context.run_id, context.asset_key.to_user_string(), report.shards, counts,
                           report.seconds, report.actions())
        tables = documents_tables(report, context.partition_keys, rag.settings, sidecar)
    for shard, table in tables.items():
        context.add_asset_metadata({"documents": table}, partition_key=shard)
    metadata: dict[str, Any] = {
        "shards": ",".join(report.shards),
        **counts,
        "seconds": round(report.seconds, 3),
        "docs_per_second": round(totals.added / report.seconds, 2) if report.seconds else 0.0,
        **report.stage_figures(),
        TOTALS: dg.MetadataValue.json(totals.to_json()),
    }
    if report.failed:
        metadata["failures"] = dg.MetadataValue.md("\n".join(f"- {error}" for error in report.failed.values()))
    return metadata


def check_result(name: str, report: StageReport) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        check_name=name,
        passed=not report.check_failures,
        metadata={
            "violations": len(report.check_failures),
            "details": dg.MetadataValue.md("\n".join(f"- {v}" for v in report.check_failures[:50]) or "none"),
        },
    )


def coverage_table(label: str, coverage: dict[str, dict[str, int]]) -> list[str]:
    """Markdown table lines of a manifest coverage table (files and MiB per key)."""
    rows = [f"| {name} | {v['files']} | {v['bytes'] / 2**20:.2f} |" for name, v in coverage.items()]
    return [f"| {label} | files | MiB |", "|---|---:|---:|", *rows]


@dg.asset(group_name="ingest", kinds={"python"}, owners=OWNERS, pool=STORE_POOL)
def source_manifest(rag: RagResource) -> dg.MaterializeResult:
    """Dry run of every configured source: every file with included / refused / excluded and the reason, coverage
    by type, top folder and tag, largest and empty files, and the text files redaction would change. Converts
    nothing."""
    report = configured_report(rag.settings, specs=rag.source_specs())
    summary = report["summary"]
    by_tag = "no tag rules (RAG_CORPUS_RULES)"
    if report["tag_patterns"]:
        tags = coverage_table("tag", report["by_tag"]) + [f"| (untagged) | {report['untagged']} | |"]
        if report["unmatched_tag_patterns"]:
            patterns = ", ".join(f"`{pattern}`" for pattern in report["unmatched_tag_patterns"])
            tags += ["", f"Tag patterns that match no included file: {patterns}"]
        by_tag = "\n".join(tags)
    left_out = [row for row in report["files"] if row["status"] != "included"]
    return dg.MaterializeResult(metadata={
        "included_files": summary["included"], "documents": summary["documents"],
        "included_mib": dg.MetadataValue.float(round(summary["included_bytes"] / 2**20, 3)),
        "refused_files": summary["refused"], "excluded_files": summary["excluded"],
        "would_redact_files": summary["would_redact"],
        "by_type": dg.MetadataValue.md("\n".join(coverage_table("type", report["by_type"]))),
        "by_top_folder": dg.MetadataValue.md("\n".join(coverage_table("top folder", report["by_folder"]))),
        "by_tag": dg.MetadataValue.md(by_tag),
        "largest": dg.MetadataValue.md("\n".join(f"- {row['bytes']:,} B `{row['path']}`" for row in report["largest"])),
        "not_included": dg.MetadataValue.md(
            "\n".join(f"- {row['status']}: `{row['path']}`: {row['reason']}" for row in left_out[:TABLE_LIMIT])
            or "none"),
        "would_redact": dg.MetadataValue.md("\n".join(
            f"- `{row['path']}`: " + ", ".join(f"{kind} {n}" for kind, n in row["findings"].items())
            for row in report["redactions"]) or "none"),
    })


@dg.asset(**INGEST, kinds={"python"}, pool=STORE_POOL)
def raw_documents(context: dg.AssetExecutionContext, rag: RagResource) -> dg.MaterializeResult:
    """Discover the sources, snapshot new documents' bytes, drop vanished SHAs (their points first, from the
    generation being built and the one queries use), record current paths, tags and sources."""
    manifest = rag.manifest()
    sidecar = rag.sidecar()
    with rag.live_stores() as live:
        report = sync_raw(rag.settings, manifest, context.partition_keys, sidecar, live)
    metadata = stage_metadata(report, rag, context)
    totals = report.totals()
    metadata.update(moved=totals.moved, retagged=totals.retagged, unchanged=totals.unchanged)
    metadata["refused_files"] = len(manifest.errors)
    if manifest.errors:
        metadata["refusals"] = dg.MetadataValue.md("\n".join(f"- `{e.path}`: {e.reason}" for e in manifest.errors))
    return dg.MaterializeResult(metadata=metadata)


@dg.asset(
    **INGEST,
    kinds={"docling"},
    deps=[raw_documents],
    check_specs=[dg.AssetCheckSpec("converted_documents_non_empty", asset="markdown_documents", blocking=True)],
)
def markdown_documents(context: dg.AssetExecutionContext, rag: RagResource) -> dg.MaterializeResult:
    """Convert new documents to Markdown with docling; failures are recorded per document."""
    report = sync_markdown(rag.settings, rag.converter(), context.partition_keys, rag.sidecar(),
                           progress=rag.show_progress, documents=run_sha_range(context.run.tags))
    return dg.MaterializeResult(
        metadata=stage_metadata(report, rag, context),
        check_results=[check_result("converted_documents_non_empty", report)],
    )


@dg.asset(
    **INGEST,
    kinds={"python"},
    deps=[markdown_documents],
    check_specs=[dg.AssetCheckSpec("no_secret_survives", asset="redacted_documents", blocking=True)],
)
def redacted_documents(context: dg.AssetExecutionContext, rag: RagResource) -> dg.MaterializeResult:
    """Redact secrets and PII before anything downstream sees the text."""
    report = sync_redacted(rag.settings, context.partition_keys, rag.sidecar(),
                           documents=run_sha_range(context.run.tags))
    return dg.MaterializeResult(
        metadata=stage_metadata(report, rag, context),
        check_results=[check_result("no_secret_survives", report)],
    )


@dg.asset(
    **INGEST,
    kinds={"python"},
    deps=[redacted_documents],
    check_specs=[dg.AssetCheckSpec("chunk_sizes_within_limit", asset="chunks", blocking=True)],
)
def chunks(context: dg.AssetExecutionContext, rag: RagResource) -> dg.MaterializeResult:
    """Split redacted documents into chunks with heading paths, lines and pages."""
    report = sync_chunks(rag.settings, context.partition_keys, rag.sidecar(), documents=run_sha_range(context.run.tags))
    metadata = stage_metadata(report, rag, context)
    metadata["chunks_written"] = report.chunks
    metadata["chunks_per_second"] = round(report.chunks / report.seconds, 1) if report.seconds else 0.0
    return dg.MaterializeResult(metadata=metadata, check_results=[check_result("chunk_sizes_within_limit", report)])


@dg.asset(**INDEX, kinds={"pytorch", "huggingface"}, deps=[chunks])
def embeddings(context: dg.AssetExecutionContext, rag: RagResource) -> dg.MaterializeResult:
    """Embed new chunks ("path > heading path" + text), batched across documents, through the embedding cache."""
    embedder = rag.embedder()
    report = sync_embeddings(rag.settings, embedder, rag.embedding_cache(), context.partition_keys, rag.sidecar(),
                             progress=rag.show_progress, documents=run_sha_range(context.run.tags))
    metadata = stage_metadata(report, rag, context)
    metadata.update(model=embedder.model_id, dimension=embedder.dimension, chunks_embedded=report.chunks,
                    chunks_per_second=round(report.chunks / report.seconds, 1) if report.seconds else 0.0)
    return dg.MaterializeResult(metadata=metadata)


@dg.asset(
    **INDEX,
    kinds={"qdrant"},
    pool=INDEX_POOL,
    deps=[embeddings],
    check_specs=[dg.AssetCheckSpec("points_match_sidecar_chunks", asset="vector_index", blocking=True)],
)
def vector_index(context: dg.AssetExecutionContext, rag: RagResource) -> dg.MaterializeResult:
    """Upsert new points, delete purged documents' points, relabel moved or re-tagged ones (no re-embedding)."""
    with rag.live_stores() as (store, *active):
        report = sync_vector_index(rag.settings, store, context.partition_keys, rag.sidecar(), also_relabel=active)
    metadata = stage_metadata(report, rag, context)
    metadata.update(collection=store.collection, moved=len(report.moved), retagged=len(report.retagged))
    return dg.MaterializeResult(metadata=metadata, check_results=[check_result("points_match_sidecar_chunks", report)])


@dg.asset(**INDEX, kinds={"duckdb"}, pool=SIDECAR_POOL, deps=[vector_index])
def metadata_sidecar(context: dg.AssetExecutionContext, rag: RagResource) -> dg.MaterializeResult:
    """Chunk and redaction rows of every document in the DuckDB sidecar, for exact questions."""
    report = sync_catalogue(rag.settings, context.partition_keys, rag.sidecar())
    metadata = stage_metadata(report, rag, context)
    metadata["chunk_rows_written"] = report.chunks
    return dg.MaterializeResult(metadata=metadata)


@dg.asset(
    deps=[metadata_sidecar, dg.AssetKey("roster")],  # the roster asset (defs/field_assets.py) relabels points first
    group_name="index",
    kinds={"qdrant"},
    owners=OWNERS,
    pool=STORE_POOL,
    check_specs=[dg.AssetCheckSpec("generation_points_match_chunks", asset="index_generation")],
)
def index_generation(rag: RagResource) -> dg.MaterializeResult:
    """Switch queries to the generation the settings describe (model, chunk and sparse settings) once every shard
    of it is in sync and every point matches its chunk; drop generations beyond RAG_KEEP_GENERATIONS."""
    report = finalize_generation(rag.settings, rag.sidecar(), rag.generations())
    state = "switched" if report.switched else "active" if report.active == report.target else \
        "waiting for the store" if report.waiting else "building"
    return dg.MaterializeResult(
        metadata={
            "state": state, "target": report.target, "active": report.active or "none",
            "previous": report.previous or "none", "pending_shards": len(report.pending_shards),
            "points": report.points, "check_seconds": report.check_seconds, "switch_ms": report.switch_ms,
            "dropped": ", ".join(report.dropped) or "none", "kept": ", ".join(report.kept) or "none",
            "waiting": report.waiting or "no",
            "drop_deferred": dg.MetadataValue.md(
                "\n".join(f"- {gid}: {why}" for gid, why in report.drop_deferred.items()) or "none"),
            GENERATION: dg.MetadataValue.json(report.to_json()),
        },
        check_results=[dg.AssetCheckResult(
            check_name="generation_points_match_chunks", passed=not report.check_failures,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={"violations": len(report.check_failures), "details": dg.MetadataValue.md(
                "\n".join(f"- {v}" for v in report.check_failures) or "none")})],
    )


@dg.asset(deps=[index_generation], group_name="index", kinds={"duckdb"}, owners=OWNERS,
          pool=STORE_POOL)
def corpus_summary(rag: RagResource) -> dg.MaterializeResult:
    """Documents and chunks by type, by source and by tag, failures and redaction totals over the whole corpus."""
    sidecar = rag.sidecar()
    with sidecar.kept():
        by_type, redactions = sidecar.totals_by_type(), sidecar.redaction_totals()
        failures, refused = sidecar.failed_documents(), sidecar.source_errors()
        by_source, by_tag = sidecar.totals_by_source(), sidecar.totals_by_tag()
    lines = ["| type | documents | failed | chunks | redactions |", "|---|---:|---:|---:|---:|"]
    lines += [
        f"| {r['doc_type']} | {r['documents']} | {r['failed']} | {r['chunks']} | {r['redactions']} |" for r in by_type
    ]
    sources = ["| source | kind | documents | pending | failed | chunks |", "|---|---|---:|---:|---:|---:|"]
    sources += [f"| {r['source']} | {r['kind']} | {r['documents']} | {r['pending']} | {r['failed']} | {r['chunks']} |"
                for r in by_source]
    tags = ["| tag | documents | chunks |", "|---|---:|---:|"]
    tags += [f"| {r['tag'] or '(untagged)'} | {r['documents']} | {r['chunks']} |" for r in by_tag]
    return dg.MaterializeResult(
        metadata={
            "documents": sum(r["documents"] for r in by_type),
            "chunks": sum(r["chunks"] for r in by_type),
            "failed": len(failures),
            "refused_files": len(refused),
            "by_type": dg.MetadataValue.md("\n".join(lines)),
            "by_source": dg.MetadataValue.md("\n".join(sources)),
            "by_tag": dg.MetadataValue.md("\n".join(tags)),
            "redactions_by_kind": dg.MetadataValue.json({r["kind"]: r["findings"] for r in redactions}),
            "failures": dg.MetadataValue.md(
                "\n".join(
                    f"- `{f['path']}`: {f['error']}"
                    for f in failures + [{"path": r["path"], "error": r["reason"]} for r in refused]
                )
                or "none"
            ),
        }
    )


INGEST_ASSETS = [
    raw_documents,
    markdown_documents,
    redacted_documents,
    chunks,
    embeddings,
    vector_index,
    metadata_sidecar,
]
