"""Retrieval metrics over graded relevance judgments (qrels) and ranked runs, with bootstrap confidence intervals.

Ranks are positional: a ranking is a list, best first, and the document at index i has rank i + 1, so there are
no score ties to break. Rankings are expected to hold each document once (see `dedupe_ranking`). A document is
relevant when its grade is > 0; unjudged documents count as not relevant. The definitions follow trec_eval
(recall, P, recip_rank, map / map_cut, ndcg_cut with the grade as gain), which the tests check them against.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

Qrels = Mapping[str, Mapping[str, int]]
"""Query id -> {doc id: graded relevance 0..3}; grade 0 means judged not relevant."""
Run = Mapping[str, Sequence[str]]
"""Query id -> ranked doc ids, best first, each doc once."""

DEFAULT_METRICS = (
    "recall@5",
    "recall@10",
    "precision@5",
    "success@1",
    "success@5",
    "mrr@10",
    "map",
    "ndcg@10",
    "ndcg_exp@10",
)


def dedupe_ranking(items: Sequence[str]) -> list[str]:
    """Items in order of first occurrence, e.g. chunk hits mapped to their files -> a ranking of files."""
    return list(dict.fromkeys(items))


def _relevant_count(relevant: Mapping[str, int]) -> int:
    return sum(1 for grade in relevant.values() if grade > 0)


def _hits(ranking: Sequence[str], relevant: Mapping[str, int], k: int | None) -> list[bool]:
    """Whether each ranked document in the top k (all when k is None) is relevant."""
    top = ranking if k is None else ranking[:k]
    return [relevant.get(doc, 0) > 0 for doc in top]


def _check_k(k: int) -> None:
    if k < 1:
        raise ValueError(f"cutoff k must be >= 1, got {k}")


def recall_at_k(ranking: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """|relevant in top k| / |relevant|; 0.0 when nothing is relevant (callers skip such queries)."""
    _check_k(k)
    total = _relevant_count(relevant)
    return sum(_hits(ranking, relevant, k)) / total if total else 0.0


def precision_at_k(ranking: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """|relevant in top k| / k (a ranking shorter than k is padded with non-relevant documents)."""
    _check_k(k)
    return sum(_hits(ranking, relevant, k)) / k


def success_at_k(ranking: Sequence[str], relevant: Mapping[str, int], k: int) -> float:
    """1.0 if any relevant document is in the top k, else 0.0."""
    _check_k(k)
    return 1.0 if any(_hits(ranking, relevant, k)) else 0.0


def reciprocal_rank(ranking: Sequence[str], relevant: Mapping[str, int], k: int | None = None) -> float:
    """1 / rank of the first relevant document within the top k (whole ranking when k is None), else 0.0."""
    if k is not None:
        _check_k(k)
    for rank, hit in enumerate(_hits(ranking, relevant, k), start=1):
        if hit:
            return 1.0 / rank
    return 0.0


def average_precision(ranking: Sequence[str], relevant: Mapping[str, int], k: int | None = None) -> float:
    """Sum of precision@i over the ranks i <= k of relevant documents, divided by |relevant|.

    As in trec_eval, the denominator counts all relevant documents, retrieved or not; 0.0 when none is relevant.
    """
    if k is not None:
        _check_k(k)
    total = _relevant_count(relevant)
    if not total:
        return 0.0
    found = 0
    precision_sum = 0.0
    for rank, hit in enumerate(_hits(ranking, relevant, k), start=1):
        if hit:
            found += 1
            precision_sum += found / rank
    return precision_sum / total


def _gain(grade: int, gain: Literal["linear", "exponential"]) -> float:
    if grade <= 0:
        return 0.0
    return float(grade) if gain == "linear" else 2.0**grade - 1.0


def ndcg_at_k(
    ranking: Sequence[str],
    relevant: Mapping[str, int],
    k: int,
    gain: Literal["linear", "exponential"] = "exponential",
) -> float:
    """DCG@k / IDCG@k with DCG = sum_{i=1..k} g(rel_i) / log2(i + 1); 0.0 when IDCG is 0.

    Linear gain g = rel (trec_eval's ndcg_cut), exponential g = 2^rel - 1. IDCG is the DCG@k of the ideal
    ordering of all judged grades, retrieved or not.
    """
    _check_k(k)
    ideal = sorted((_gain(grade, gain) for grade in relevant.values()), reverse=True)[:k]
    idcg = sum(g / math.log2(rank + 1) for rank, g in enumerate(ideal, start=1))
    if idcg == 0:
        return 0.0
    dcg = sum(_gain(relevant.get(doc, 0), gain) / math.log2(rank + 1) for rank, doc in enumerate(ranking[:k], start=1))
    return dcg / idcg


MetricFn = Callable[..., float]
"""A metric function called as fn(ranking, relevant, k); k is None only for "mrr" and "map"."""

METRICS: dict[str, MetricFn] = {
    "recall": recall_at_k,
    "precision": precision_at_k,
    "success": success_at_k,
    "mrr": reciprocal_rank,
    "map": average_precision,
    "ndcg": functools.partial(ndcg_at_k, gain="linear"),
    "ndcg_exp": functools.partial(ndcg_at_k, gain="exponential"),
}
"""Metric base name -> function(ranking, relevant, k); names take a cutoff as "name@k"."""

_CUTOFF_OPTIONAL = frozenset({"mrr", "map"})


def parse_metric(name: str) -> tuple[MetricFn, int | None]:
    """The function and cutoff for a metric name such as "ndcg@10", "recall@100", "mrr" or "map@100"."""
    base, _, cutoff = name.partition("@")
    if base not in METRICS:
        raise ValueError(f"unknown metric {name!r}; known: {sorted(METRICS)}")
    if not cutoff:
        if base not in _CUTOFF_OPTIONAL:
            raise ValueError(f"metric {name!r} needs a cutoff, e.g. {base}@10")
        return METRICS[base], None
    if not cutoff.isdigit() or int(cutoff) < 1:
        raise ValueError(f"bad cutoff in metric {name!r}")
    return METRICS[base], int(cutoff)


def evaluate_run(qrels: Qrels, run: Run, metrics: Sequence[str] = DEFAULT_METRICS) -> dict[str, dict[str, float]]:
    """Query id -> metric name -> value, for the queries in qrels with at least one relevant document.

    A query missing from the run scores 0 on every metric.
    """
    parsed = {name: parse_metric(name) for name in metrics}
    scores: dict[str, dict[str, float]] = {}
    for query_id, relevant in qrels.items():
        if not _relevant_count(relevant):
            continue
        ranking = run.get(query_id, ())
        scores[query_id] = {name: fn(ranking, relevant, k) for name, (fn, k) in parsed.items()}
    return scores


def mean_scores(per_query: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Metric name -> mean over the queries that have it ({} for no queries)."""
    values: dict[str, list[float]] = {}
    for scores in per_query.values():
        for name, value in scores.items():
            values.setdefault(name, []).append(value)
    return {name: float(np.mean(vals)) for name, vals in values.items()}


@dataclass(frozen=True)
class ConfidenceInterval:
    """A mean with the bounds of its confidence interval."""

    mean: float
    low: float
    high: float


def bootstrap_ci(
    values: Sequence[float], resamples: int = 1000, confidence: float = 0.95, seed: int = 0
) -> ConfidenceInterval:
    """Percentile bootstrap interval of the mean, resampling with `numpy.random.default_rng(seed)` (deterministic)."""
    if len(values) == 0:
        raise ValueError("bootstrap_ci needs at least one value")
    if resamples < 1 or not 0 < confidence < 1:
        raise ValueError("need resamples >= 1 and 0 < confidence < 1")
    data = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = data[rng.integers(0, len(data), size=(resamples, len(data)))].mean(axis=1)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(means, [tail, 100.0 - tail])
    return ConfidenceInterval(mean=float(data.mean()), low=float(low), high=float(high))


def summarise(
    per_query: Mapping[str, Mapping[str, float]],
    ci_metrics: Sequence[str] = ("recall@5", "recall@10", "ndcg@10", "map"),
    resamples: int = 1000,
    seed: int = 0,
) -> dict:
    """{"n", "metrics": name -> mean, "ci95": name -> {"low", "high"} for ci_metrics present, "warnings": [...]}."""
    n = len(per_query)
    ci95 = {}
    for name in ci_metrics:
        values = [scores[name] for scores in per_query.values() if name in scores]
        if values:
            interval = bootstrap_ci(values, resamples=resamples, confidence=0.95, seed=seed)
            ci95[name] = {"low": interval.low, "high": interval.high}
    warnings = [f"only {n} queries: confidence intervals are wide (n < 50)"] if n < 50 else []
    return {"n": n, "metrics": mean_scores(per_query), "ci95": ci95, "warnings": warnings}


def slice_by(
    per_query: Mapping[str, Mapping[str, float]], groups: Mapping[str, Sequence[str]]
) -> dict[str, dict[str, float]]:
    """Group name -> mean metrics over its query ids that were scored (ids absent from per_query are ignored)."""
    return {
        group: mean_scores({qid: per_query[qid] for qid in query_ids if qid in per_query})
        for group, query_ids in groups.items()
    }
