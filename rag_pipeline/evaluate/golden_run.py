"""Run a golden set through the retriever (and the answerer): retrieval metrics per question with bootstrap
CIs, sliced by kind and tag; answer metrics (citations, exact match / token F1, abstention) and, with an LLM
judge, faithfulness, answer relevance, context precision and context recall."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from rag_pipeline.evaluate.aggregation import evaluate_aggregations
from rag_pipeline.evaluate.answers import abstained, citation_scores, contains, exact_match, token_f1
from rag_pipeline.evaluate.golden import GoldenQuestion, GoldenSet, matches
from rag_pipeline.evaluate.judge import Judge
from rag_pipeline.evaluate.metrics import dedupe_ranking, evaluate_run, mean_scores, slice_by, summarise
from rag_pipeline.generate.answerer import Answerer
from rag_pipeline.index.vector_store import Hit
from rag_pipeline.ingest.chunkers import chunk_id
from rag_pipeline.structured.query import QueryRunner

Granularity = Literal["file", "chunk"]


@dataclass
class QuestionResult:
    id: str
    kind: str
    tags: list[str]
    question: str
    ranking: list[str]  # retrieved ids (relevance keys for file granularity), best first
    retrieval: dict[str, float] = field(default_factory=dict)
    answer: str | None = None
    generator: str | None = None
    answer_metrics: dict[str, float] = field(default_factory=dict)
    judge: dict[str, Any] | None = None


def file_id(hit: Hit, question: GoldenQuestion) -> str:
    """The relevance key that names the hit's document (any of its paths), else its first path."""
    paths = hit.payload.get("paths") or [hit.payload.get("path", "")]
    for key in question.relevance:
        if any(matches(path, key) for path in paths):
            return key
    return paths[0] or hit.payload.get("sha") or hit.id


def chunk_qrels(question: GoldenQuestion, documents: Mapping[str, tuple[Sequence[str], int]]) -> dict[str, int]:
    """Chunk granularity: every chunk of a relevant document carries the document's grade.
    `documents`: sha -> (paths, chunk count)."""
    qrels: dict[str, int] = {}
    for sha, (paths, chunks) in documents.items():
        grades = [grade for key, grade in question.relevance.items() if any(matches(p, key) for p in paths)]
        if grades:
            qrels.update({chunk_id(sha, index): max(grades) for index in range(chunks)})
    return qrels


def evaluate_golden(golden: GoldenSet, answerer: Answerer, *, top_k: int = 10, answer_top_k: int = 5,
                    granularity: Granularity = "file", documents: Mapping[str, tuple[Sequence[str], int]] | None = None,
                    with_answers: bool = True, judge: Judge | None = None,
                    progress: Callable[[int, int], None] | None = None,
                    query_runner: QueryRunner | None = None) -> dict[str, Any]:
    """The evaluation report of `golden` (a JSON-ready dict): retrieval (and answer) metrics of the semantic and
    out-of-scope questions; exact-answer accuracy of the aggregation questions through `query_runner`."""
    if granularity == "chunk" and documents is None:
        raise ValueError("chunk granularity needs the indexed documents (sha -> paths, chunk count)")
    started = time.perf_counter()
    results: list[QuestionResult] = []
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, list[str]] = {}
    aggregations = [question for question in golden.questions if question.kind == "aggregation"]
    retrieved = [question for question in golden.questions if question.kind != "aggregation"]
    for position, question in enumerate(retrieved, start=1):
        hits = answerer.retriever.search(question.question, top_k=top_k).hits
        if granularity == "file":
            ranking = dedupe_ranking([file_id(hit, question) for hit in hits])
            qrels[question.id] = dict(question.relevance)
        else:
            ranking = [hit.id for hit in hits]
            qrels[question.id] = chunk_qrels(question, documents or {})
        run[question.id] = ranking
        result = QuestionResult(question.id, question.kind, list(question.tags), question.question, ranking)
        if with_answers:
            answer = answerer.answer(question.question, top_k=answer_top_k)
            result.answer, result.generator = answer.answer, answer.generator
            result.answer_metrics = answer_metrics(question, answer.answer, answer.citations,
                                                   [source.path for source in answer.sources])
            if judge is not None and question.kind != "out_of_scope":
                result.judge = judge.evaluate(question.question, answer.answer,
                                              [source.text for source in answer.sources], question.expected_answer)
        results.append(result)
        if progress:
            progress(position, len(retrieved))
    per_query = evaluate_run({qid: grades for qid, grades in qrels.items() if grades}, run)
    for result in results:
        result.retrieval = per_query.get(result.id, {})
    kinds = {kind: [r.id for r in results if r.kind == kind] for kind in sorted({r.kind for r in results})}
    tags = {tag: [r.id for r in results if tag in r.tags] for tag in sorted({t for r in results for t in r.tags})}
    report: dict[str, Any] = {
        "golden": golden.name, "questions": len(results), "granularity": granularity, "top_k": top_k,
        "retrieval": summarise(per_query),
        "retrieval_by_kind": {k: v for k, v in slice_by(per_query, kinds).items() if v},
        "retrieval_by_tag": {k: v for k, v in slice_by(per_query, tags).items() if v},
        "results": [vars(result) for result in results],
    }
    if aggregations:
        report["aggregation"] = evaluate_aggregations(aggregations, query_runner) if query_runner else {
            "questions": len(aggregations), "accuracy": None, "skipped": "no metadata query tool given"}
    if with_answers:
        report["answers"] = answer_summary(results)
        report["generator"] = next((r.generator for r in results if r.generator), None)
    if judge is not None:
        report["judge"] = judge_summary(results, judge)
    report["seconds"] = round(time.perf_counter() - started, 3)
    return report


def answer_metrics(question: GoldenQuestion, answer: str, citations: Sequence[int],
                   source_paths: Sequence[str]) -> dict[str, float]:
    """Per-question answer metrics that need no LLM."""
    metrics: dict[str, float] = {"abstained": float(abstained(answer))}
    if question.kind == "out_of_scope":
        return metrics
    cited = []
    for number in citations:
        path = source_paths[number - 1]
        cited.append(next((key for key in question.relevance if matches(path, key)), path))
    metrics.update(citation_scores(cited, question.relevance))
    if question.expected_answer:
        metrics.update(exact_match=exact_match(answer, question.expected_answer),
                       contains=contains(answer, question.expected_answer),
                       token_f1=token_f1(answer, question.expected_answer))
    return metrics


def answer_summary(results: Sequence[QuestionResult]) -> dict[str, float]:
    """Means over the questions each metric applies to; out-of-scope questions count for abstention only."""
    in_scope = [r for r in results if r.kind != "out_of_scope"]
    out_of_scope = [r for r in results if r.kind == "out_of_scope"]
    summary = mean_scores({r.id: {k: v for k, v in r.answer_metrics.items() if k != "abstained"} for r in in_scope})
    if out_of_scope:
        summary["out_of_scope_abstention"] = sum(r.answer_metrics["abstained"] for r in out_of_scope) / len(out_of_scope)
    if in_scope:
        summary["in_scope_abstention"] = sum(r.answer_metrics["abstained"] for r in in_scope) / len(in_scope)
    return summary


def judge_summary(results: Sequence[QuestionResult], judge: Judge) -> dict[str, Any]:
    judged = [r.judge for r in results if r.judge]
    names = ("faithfulness", "answer_relevance", "context_precision", "context_recall")
    means = {}
    for name in names:
        values = [j[name] for j in judged if j.get(name) is not None]
        if values:
            means[name] = sum(values) / len(values)
    return {"model": judge.model_id, "judged": len(judged), "metrics": means}
