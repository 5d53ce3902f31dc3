"""The serving job: answer one question from the Dagster UI (or the API), recorded with its sources."""

import dagster as dg
from pydantic import Field

from rag_pipeline.components import answerer
from rag_pipeline.defs.resources import STORE_POOL, RetrievalResource
from rag_pipeline.errors import InputError


class AnswerQuestionConfig(dg.Config):
    question: str = Field(description="The question (or search query).")
    top_k: int = Field(default=5, description="Number of sources (1-100).")
    filters: dict[str, list[str]] = Field(
        default_factory=dict, description='Payload filters, e.g. {"doc_type": ["pdf"], "path_prefix": ["/docs/"]}.'
    )
    generate: bool = Field(default=True, description="False: retrieval only, no answer.")


def sources_table(results: list[dict]) -> str:
    """The sources as a Markdown table."""
    rows = ["| # | score | path | heading | line | page |", "|---|---|---|---|---|---|"]
    for number, result in enumerate(results, start=1):
        heading = (result["header"] or "").replace("|", "\\|")
        rows.append(f"| {number} | {result['score']:.4f} | {result['path']} | {heading} | "
                    f"{result['line_start']} | {result['page'] or ''} |")
    return "\n".join(rows)


@dg.op(pool=STORE_POOL,
       description="Answer one question with cited sources (or only retrieve, generate=False); the answer, "
                   "sources, guardrail report and per-stage timings are recorded as output metadata.")
def answer_question_op(context: dg.OpExecutionContext, config: AnswerQuestionConfig,
                       retrieval: RetrievalResource) -> dict:
    filters = {key: values[0] if len(values) == 1 else values for key, values in config.filters.items()} or None
    try:
        return _answer(context, config, retrieval, filters)
    except InputError as error:  # a blank question, top_k out of range, an unknown filter field
        raise dg.Failure(description=f"invalid request: {error}") from error


def _answer(context: dg.OpExecutionContext, config: AnswerQuestionConfig, retrieval: RetrievalResource,
            filters: dict | None) -> dict:
    with retrieval.retriever() as retriever:
        if config.generate:
            answer = answerer(retrieval.settings, retriever).answer(config.question, config.top_k, filters)
            output = answer.to_json()
            results = [{"path": s.path, "header": s.heading, "line_start": s.line_start, "page": s.page,
                        "score": s.score} for s in answer.sources]
            text, generator = answer.answer, answer.generator
            timings, warnings = answer.timings_ms, answer.warnings
            guard = {"quarantined_chunks": len(answer.guardrails["quarantined"]),
                     "flagged_chunks": len(answer.guardrails["flagged"]), "refused": answer.guardrails["refused"],
                     "cited_sources": len(answer.citations)}
        else:
            output = retriever.search(config.question, top_k=config.top_k, filters=filters).to_json()
            results, text, generator = output["results"], "", "none (retrieval only)"
            timings, warnings, guard = output["timings_ms"], output["warnings"], {}
    metadata: dict = {
        "question": config.question, "generator": generator, "sources_count": len(results),
        "sources": dg.MetadataValue.md(sources_table(results)),
        **{f"{stage}_ms": dg.MetadataValue.float(round(value, 3)) for stage, value in timings.items()},
        **guard,
    }
    if text:
        metadata["answer"] = dg.MetadataValue.md(text)
    if warnings:
        metadata["warnings"] = dg.MetadataValue.md("\n".join(f"- {warning}" for warning in warnings))
    context.add_output_metadata(metadata)
    return output


@dg.job(name="answer_question", description="Answer one question with cited sources (run config: question, top_k, "
                                            "filters, generate).", tags={"group": "serving"})
def answer_question() -> None:
    answer_question_op()
