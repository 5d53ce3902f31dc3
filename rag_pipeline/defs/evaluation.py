"""Evaluation: the eval_report asset (golden-set metrics of the current index, with history), its blocking
quality gate, and the nightly eval job schedule."""

import dagster as dg

from rag_pipeline.defs.resources import RetrievalResource
from rag_pipeline.evaluate.golden import load_golden
from rag_pipeline.evaluate.service import evaluate_index, format_report, headline
from rag_pipeline.index.sidecar import Sidecar
from rag_pipeline.settings import Settings

golden_set = dg.AssetSpec(
    "golden_set", group_name="eval", kinds={"yaml"}, owners=["team:rag-platform"],
    description="The golden question set (RAG_EVAL_GOLDEN_PATH): questions with graded relevance per file.",
)
QUESTION_COLUMNS = {"id": "string", "kind": "string", "recall@5": "float", "ndcg@10": "float", "mrr@10": "float",
                    "answer_contains": "float", "abstained": "float", "top_files": "string"}


def questions_table(report: dict) -> dg.TableMetadataValue:
    rows = []
    for result in report["results"]:
        answer = result["answer_metrics"]
        rows.append(dg.TableRecord({
            "id": result["id"], "kind": result["kind"],
            "recall@5": result["retrieval"].get("recall@5"), "ndcg@10": result["retrieval"].get("ndcg@10"),
            "mrr@10": result["retrieval"].get("mrr@10"), "answer_contains": answer.get("contains"),
            "abstained": answer.get("abstained"), "top_files": ", ".join(result["ranking"][:3]),
        }))
    schema = dg.TableSchema(columns=[dg.TableColumn(name, kind) for name, kind in QUESTION_COLUMNS.items()])
    return dg.TableMetadataValue(records=rows, schema=schema)


@dg.asset(
    deps=["vector_index", "metadata_sidecar", golden_set], group_name="eval", kinds={"qdrant", "duckdb"},
    owners=["team:rag-platform"],
    description="Retrieval and answer metrics of the golden set on the current index: float metadata per metric "
                "(plotted over time), a Markdown report with the change since the previous run, a per-question "
                "table and the index version measured. Each run is kept in the sidecar's eval_runs table.",
)
def eval_report(context: dg.AssetExecutionContext, retrieval: RetrievalResource) -> dg.MaterializeResult:
    settings = retrieval.settings
    report = evaluate_index(settings)
    sidecar = Sidecar(settings.sidecar_path)
    history = sidecar.eval_history(report["golden"], limit=1)
    previous = history[0] if history else None
    figures = headline(report)
    sidecar.record_eval(context.run_id, report["golden"], report["index_version"], report["collection"],
                        report["questions"], figures)
    metadata: dict = {name: dg.MetadataValue.float(round(value, 6)) for name, value in figures.items()}
    metadata.update(
        report=dg.MetadataValue.md(format_report(report, previous["metrics"] if previous else None)),
        questions_table=questions_table(report), questions=report["questions"],
        index_version=report["index_version"], golden_set=report["golden_path"],
        previous_index_version=previous["index_version"] if previous else "none",
        eval_seconds=dg.MetadataValue.float(report["seconds"]),
    )
    return dg.MaterializeResult(metadata=metadata)


@dg.asset_check(asset=eval_report, blocking=True,
                description="Recall@5 and NDCG@10 are not below RAG_EVAL_MIN_RECALL_AT_5 / RAG_EVAL_MIN_NDCG_AT_10 and "
                            "not more than RAG_EVAL_MAX_DROP below the previous evaluation.")
def eval_quality_gate(retrieval: RetrievalResource) -> dg.AssetCheckResult:
    settings = retrieval.settings
    golden = load_golden(settings.eval_golden_path)
    history = Sidecar(settings.sidecar_path).eval_history(golden.name, limit=2)
    if not history:
        return dg.AssetCheckResult(passed=False, metadata={"details": "no evaluation recorded yet"})
    latest = history[0]["metrics"]
    previous = history[1]["metrics"] if len(history) > 1 else None
    return gate(latest, previous, settings)


def gate(latest: dict, previous: dict | None, settings: Settings) -> dg.AssetCheckResult:
    """Floors and maximum drop on Recall@5 and NDCG@10."""
    failures = []
    for name, floor in (("recall@5", settings.eval_min_recall_at_5), ("ndcg@10", settings.eval_min_ndcg_at_10)):
        value = latest.get(name, 0.0)
        if value < floor:
            failures.append(f"{name} {value:.3f} is below the floor {floor:.3f}")
        if previous and name in previous and previous[name] - value > settings.eval_max_drop:
            failures.append(f"{name} dropped {previous[name] - value:.3f} (from {previous[name]:.3f} to {value:.3f}), "
                            f"more than {settings.eval_max_drop:.3f}")
    details = "; ".join(failures) or "Recall@5 and NDCG@10 within the floors and the allowed drop"
    return dg.AssetCheckResult(passed=not failures, metadata={
        "details": details, "recall@5": latest.get("recall@5", 0.0), "ndcg@10": latest.get("ndcg@10", 0.0)})


eval_job = dg.define_asset_job("eval_job", selection=dg.AssetSelection.assets(eval_report),
                               description="Evaluate the golden set on the current index.")

eval_schedule = dg.ScheduleDefinition(
    name="nightly_eval", job=eval_job, cron_schedule=Settings().eval_cron,
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Nightly evaluation of the golden set (cron: RAG_EVAL_CRON).",
)
