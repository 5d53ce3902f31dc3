"""Field assets after the per-shard ingest: document_enrichment (fields declared `from:`) and roster (master data
joined by key, its reconciliation, and the chunk points' filterable field labels brought in line)."""

from typing import Any

import dagster as dg

from rag_pipeline.defs.assets import OWNERS, metadata_sidecar
from rag_pipeline.defs.resources import STORE_POOL, RagResource
from rag_pipeline.ingest.vector_index import sync_field_labels
from rag_pipeline.llm import build_llm
from rag_pipeline.structured.enrich import Enricher, enrichment_summary, failures
from rag_pipeline.structured.roster import STATUSES, load_rosters, stored_secrets

TABLE_LIMIT = 500
FIELDS = {"group_name": "fields", "owners": OWNERS, "pool": STORE_POOL}


def markdown_table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join("" if row.get(column) is None else str(row[column]).replace("|", "\\|")
                                for column in columns) + " |" for row in rows]
    return "\n".join(lines)


@dg.asset(**FIELDS, kinds={"duckdb"}, deps=[metadata_sidecar])
def document_enrichment(rag: RagResource) -> dg.MaterializeResult:
    """Fill the fields declared `from: llm | classify | lead` for every ingested document (cached per document,
    model and field schema; without an LLM, classify or lead stand in). Failures leave the field NULL."""
    settings, sidecar = rag.settings, rag.sidecar()
    report = Enricher(settings, sidecar, rag.embedder, build_llm(settings)).run()
    failed = failures(report, sidecar.first_paths())
    summary = enrichment_summary(report)
    return dg.MaterializeResult(metadata={
        "fields": len(report.fields),
        "computed": sum(row["computed"] for row in summary),
        "cached": sum(row["cached"] for row in summary),
        "failed": report.failed,
        "by_field": dg.MetadataValue.md(markdown_table(summary, ["field", "method", "model", "computed", "cached",
                                                                  "failed"]) if summary else "no enriched fields"),
        "failures": dg.MetadataValue.md("\n".join(f"- {line}" for line in failed[:TABLE_LIMIT]) or "none"),
    })


@dg.asset(
    **FIELDS,
    kinds={"duckdb", "qdrant"},
    deps=[metadata_sidecar, document_enrichment],
    check_specs=[dg.AssetCheckSpec("roster_reconciles", asset="roster"),
                 dg.AssetCheckSpec("no_secret_survives", asset="roster", blocking=True)],
)
def roster(rag: RagResource) -> dg.MaterializeResult:
    """Load the rosters of the sources file (re-read when a file changes; cells redacted with their column's name as
    context), reconcile their authoritative columns with what the documents state, and relabel the points whose
    filterable fields changed (not while a stored roster value fails the secret check)."""
    settings, sidecar = rag.settings, rag.sidecar()
    report = load_rosters(settings, sidecar)
    leaks = stored_secrets(sidecar)
    relabelled = 0
    if not leaks:
        with rag.live_stores() as live:
            relabelled = sync_field_labels(settings, sidecar, live)
    rows = sorted(report.reconciliation, key=lambda row: (row["status"] == "MATCH", row["roster"], row["key"] or "",
                                                          row["field"]))
    counts = {status.lower(): report.counts[status] for status in STATUSES}
    problems = [f"{name}: {problem}" for name, item in report.rosters.items() for problem in item["problems"]]
    return dg.MaterializeResult(
        metadata={
            "rosters": dg.MetadataValue.md(markdown_table(
                [{"roster": name, **item} for name, item in report.rosters.items()],
                ["roster", "path", "rows", "reloaded"]) if report.rosters else "no roster configured"),
            **counts,
            "relabelled_documents": relabelled,
            "reconciliation": dg.MetadataValue.md(markdown_table(
                rows[:TABLE_LIMIT], ["status", "roster", "key", "field", "document_value", "roster_value", "path"])
                if rows else "nothing to reconcile"),
            "row_problems": dg.MetadataValue.md("\n".join(f"- {line}" for line in problems[:TABLE_LIMIT]) or "none"),
        },
        check_results=[dg.AssetCheckResult(
            check_name="roster_reconciles", passed=report.warnings == 0 and not problems,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={**counts, "row_problems": len(problems)}),
            dg.AssetCheckResult(check_name="no_secret_survives", passed=not leaks, metadata={
                "violations": len(leaks),
                "details": dg.MetadataValue.md("\n".join(f"- {leak}" for leak in leaks[:TABLE_LIMIT]) or "none")})],
    )
