"""Evaluation: the eval_report asset (golden-set metrics of the current index, with history), its blocking
quality gate, and the nightly eval job schedule."""

import dagster as dg

from rag_pipeline.defs.location import DEFINITION_SETTINGS
from rag_pipeline.defs.resources import STORE_POOL, RetrievalResource
from rag_pipeline.evaluate.gate import recorded_gate
from rag_pipeline.evaluate.golden import load_golden
from rag_pipeline.evaluate.index_eval import evaluate_index, format_report, headline
from rag_pipeline.sidecar import Sidecar

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
    owners=["team:rag-platform"], pool=STORE_POOL,
    description="Retrieval and answer metrics of the golden set on the current index: float metadata per metric "
                "(plotted over time), a Markdown report with the change since the previous run, a per-question "
                "table and the index version measured. Each run is kept in the sidecar's eval_runs table.",
)
def eval_report(context: dg.AssetExecutionContext, retrieval: RetrievalResource) -> dg.MaterializeResult:
    settings = retrieval.settings
    report = evaluate_index(settings)
    sidecar = Sidecar(settings.sidecar_location)
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


@dg.asset_check(asset=eval_report, blocking=True, pool=STORE_POOL,
                description="Recall@5 and NDCG@10 are not below RAG_EVAL_MIN_RECALL_AT_5 / RAG_EVAL_MIN_NDCG_AT_10 and "
                            "not more than RAG_EVAL_MAX_DROP below the previous evaluation.")
def eval_quality_gate(retrieval: RetrievalResource) -> dg.AssetCheckResult:
    settings = retrieval.settings
    result = recorded_gate(settings, load_golden(settings.eval_golden_path).name)
    return dg.AssetCheckResult(passed=result.passed, metadata={"details": result.details, **result.metrics})


eval_job = dg.define_asset_job("eval_job", selection=dg.AssetSelection.assets(eval_report),
                               description="Evaluate the golden set on the current index.")

eval_schedule = dg.ScheduleDefinition(
    name="nightly_eval", job=eval_job, cron_schedule=DEFINITION_SETTINGS.eval_cron,
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Nightly evaluation of the golden set (cron: RAG_EVAL_CRON).",
)
