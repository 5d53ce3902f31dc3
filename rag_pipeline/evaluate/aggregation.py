"""Exact-answer accuracy of aggregation questions: each question's metadata query is run through the query tool
and its result compared with the expected answer (a number, a set of values, counts or another aggregate per value,
a set or ranking of documents, or one value). Sets compare as sets (a value held by several documents counts once
per document, as the query tool returns it), numbers within NUMBER_TOLERANCE (an average is a float). These
questions are never scored as retrieval: a top-k of chunks cannot count."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rag_pipeline.errors import RagError
from rag_pipeline.evaluate.golden import GoldenQuestion, matches
from rag_pipeline.structured.query import QueryResult, QueryRunner

NUMBER_TOLERANCE = 1e-9  # relative: what separates two computations of the same decimal answer


def canonical(value: Any) -> Any:
    """A value compared as text (numbers without a trailing .0), lists element-wise."""
    if isinstance(value, list):
        return [canonical(item) for item in value]
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def answer_of(result: QueryResult, form: str) -> Any:
    """The part of a query result an expected answer of `form` compares with."""
    if form == "count":
        return result.rows[0]["count"] if result.rows and "count" in result.rows[0] else len(result.rows)
    if form == "values":  # values, or the documents of a set operation of documents
        return sorted(canonical(row["value"] if "value" in row else row["path"]) for row in result.rows)
    if form == "groups":  # the count per value, or the aggregate group_by was asked for (the row's other key)
        return {canonical(row["value"]): next((row[key] for key in row if key not in ("value", "count")),
                                              row["count"]) for row in result.rows}
    if form == "documents":  # the documents listed, or those holding the values a query gave
        return [row["path"] for row in result.rows] if all("path" in row for row in result.rows) \
            else [document["path"] for document in result.documents]
    return canonical(result.rows[0].get("value")) if len(result.rows) == 1 else None


def same_number(got: Any, expected: Any) -> bool:
    """Whether two answers are the same: numbers within NUMBER_TOLERANCE, anything else as canonical text."""
    try:
        return math.isclose(float(got), float(expected), rel_tol=NUMBER_TOLERANCE, abs_tol=NUMBER_TOLERANCE)
    except (TypeError, ValueError):
        return canonical(got) == canonical(expected)


def is_correct(question: GoldenQuestion, got: Any) -> bool:
    form, expected = next(iter((question.expected or {}).items()))
    if form == "count":
        return got == expected
    if form == "values":
        return got == sorted(canonical(value) for value in expected)
    if form == "groups":
        wanted = {canonical(value): measure for value, measure in expected.items()}
        return isinstance(got, dict) and got.keys() == wanted.keys() and all(
            same_number(got[key], wanted[key]) for key in wanted)
    if form == "documents":
        if (question.query or {}).get("op") == "top_n":  # a ranking: order matters
            return len(got) == len(expected) and all(matches(path, key) for path, key in zip(got, expected))
        return len(got) == len(expected) and all(any(matches(path, key) for path in got) for key in expected)
    return got is not None and same_number(got, expected)


def evaluate_aggregations(questions: Sequence[GoldenQuestion], runner: QueryRunner) -> dict[str, Any]:
    """Accuracy over the aggregation questions, overall and per operation, with every miss and its result."""
    results = []
    for question in questions:
        form = next(iter((question.expected or {"value": None})))
        try:
            result = runner.run_json(question.query or {})
            got, error = answer_of(result, form), None
        except RagError as failure:
            got, error = None, f"{failure.code}: {failure}"
        results.append({"id": question.id, "op": (question.query or {}).get("op"), "question": question.question,
                        "correct": error is None and is_correct(question, got), "got": got,
                        "expected": question.expected, "error": error})
    by_op: dict[str, list[bool]] = {}
    for row in results:
        by_op.setdefault(row["op"], []).append(row["correct"])
    return {
        "questions": len(results),
        "accuracy": sum(row["correct"] for row in results) / len(results) if results else None,
        "by_op": {op: {"questions": len(flags), "accuracy": sum(flags) / len(flags)} for op, flags in
                  sorted(by_op.items())},
        "misses": [row for row in results if not row["correct"]],
        "results": results,
    }
