"""Retrieval metrics: hand-worked cases and a per-query comparison with trec_eval (pytrec_eval) on a seeded run."""

from __future__ import annotations

import math
import random

import pytest
import pytrec_eval

from rag_pipeline.evaluate.metrics import (
    DEFAULT_METRICS,
    METRICS,
    ConfidenceInterval,
    average_precision,
    bootstrap_ci,
    dedupe_ranking,
    evaluate_run,
    mean_scores,
    ndcg_at_k,
    precision_at_k,
    recall_at_k,
    reciprocal_rank,
    slice_by,
    success_at_k,
    summarise,
)


def _random_collection(seed: int = 7, queries: int = 60) -> tuple[dict[str, dict[str, int]], dict[str, list[str]]]:
    """Graded qrels and rankings of 30 docs mixing judged-relevant, judged-0 and unjudged documents.

    Includes queries with no relevant judgment, queries whose ranking retrieves nothing relevant, and one query
    missing from the run.
    """
    rng = random.Random(seed)
    qrels: dict[str, dict[str, int]] = {}
    run: dict[str, list[str]] = {}
    for q in range(queries):
        qid = f"q{q:02d}"
        pool = [f"d{q}_{i:03d}" for i in range(80)]
        judged = rng.sample(pool, rng.randint(1, 25))
        if q % 10 == 3:  # judged, but nothing relevant: skipped by evaluate_run
            qrels[qid] = {doc: 0 for doc in judged}
        else:
            qrels[qid] = {doc: rng.choice((0, 0, 1, 1, 2, 3)) for doc in judged}
        if q % 7 == 5:  # nothing relevant retrieved
            candidates = [doc for doc in pool if qrels[qid].get(doc, 0) == 0]
        else:
            candidates = pool
        if q != 59:  # q59 is missing from the run
            run[qid] = rng.sample(candidates, 30)
    return qrels, run


def _trec_eval(qrels: dict[str, dict[str, int]], run: dict[str, list[str]], measures: set[str]) -> dict:
    # trec_eval sorts by score descending (ties by doc id descending): give strictly decreasing scores by rank.
    scored = {qid: {doc: float(len(ranking) - i) for i, doc in enumerate(ranking)} for qid, ranking in run.items()}
    return pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(scored)


def test_matches_trec_eval_per_query() -> None:
    qrels, run = _random_collection()
    ours = evaluate_run(
        qrels,
        run,
        (
            "recall@5",
            "recall@10",
            "recall@100",
            "precision@5",
            "precision@10",
            "success@1",
            "success@5",
            "success@10",
            "mrr",
            "map",
            "map@10",
            "ndcg@10",
            "ndcg_exp@10",
        ),
    )
    reference = _trec_eval(
        qrels, run, {"recall.5,10,100", "P.5,10", "success.1,5,10", "recip_rank", "map", "map_cut.10", "ndcg_cut.10"}
    )
    # Exponential gain through trec_eval's linear ndcg_cut: judge each doc with its gain 2^rel - 1 instead.
    exp_qrels = {qid: {doc: 2**grade - 1 for doc, grade in judged.items()} for qid, judged in qrels.items()}
    exp_reference = _trec_eval(exp_qrels, run, {"ndcg_cut.10"})

    scored = {qid for qid, judged in qrels.items() if any(grade > 0 for grade in judged.values())}
    assert set(ours) == scored
    assert len(scored) == 54 and "q59" in scored  # 6 all-zero queries skipped; q59 kept though not in the run
    assert any(ours[qid]["recall@100"] == 0 for qid in ours if qid in run)  # nothing relevant retrieved
    assert any(0 < ours[qid]["recall@100"] < 1 for qid in ours)  # relevant docs left unretrieved
    pairs = {
        "recall@5": "recall_5",
        "recall@10": "recall_10",
        "recall@100": "recall_100",
        "precision@5": "P_5",
        "precision@10": "P_10",
        "success@1": "success_1",
        "success@5": "success_5",
        "success@10": "success_10",
        "mrr": "recip_rank",
        "map": "map",
        "map@10": "map_cut_10",
        "ndcg@10": "ndcg_cut_10",
    }
    for qid in scored - {"q59"}:
        for ours_name, trec_name in pairs.items():
            assert ours[qid][ours_name] == pytest.approx(reference[qid][trec_name], abs=1e-9), (qid, ours_name)
        assert ours[qid]["ndcg_exp@10"] == pytest.approx(exp_reference[qid]["ndcg_cut_10"], abs=1e-9), qid
    assert set(ours["q59"].values()) == {0.0}


def test_ideal_ordering_has_ndcg_one() -> None:
    relevant = {"a": 3, "b": 2, "c": 2, "d": 1, "e": 0}
    ranking = ["a", "c", "b", "d", "e", "x"]
    for gain in ("linear", "exponential"):
        for k in (1, 3, 10):
            assert ndcg_at_k(ranking, relevant, k, gain=gain) == pytest.approx(1.0)


def test_ndcg_hand_worked_linear_and_exponential_differ() -> None:
    relevant = {"a": 3, "b": 2, "c": 1, "d": 0}
    ranking = ["c", "x", "a", "b"]
    # k = 3, ranks 1..3 hold c (1), x (unjudged, 0), a (3); discounts log2(2) = 1, log2(3), log2(4) = 2.
    # Linear:      DCG = 1/1 + 0 + 3/2 = 2.5;  IDCG (3, 2, 1) = 3/1 + 2/log2(3) + 1/2 = 4.76186 -> 0.525005
    # Exponential: DCG = 1/1 + 0 + 7/2 = 4.5;  IDCG (7, 3, 1) = 7/1 + 3/log2(3) + 1/2 = 9.39279 -> 0.479091
    linear = ndcg_at_k(ranking, relevant, 3, gain="linear")
    exponential = ndcg_at_k(ranking, relevant, 3, gain="exponential")
    assert linear == pytest.approx(2.5 / (3.5 + 2 / math.log2(3)))
    assert exponential == pytest.approx(4.5 / (7.5 + 3 / math.log2(3)))
    assert linear == pytest.approx(0.525005, abs=1e-6)
    assert exponential == pytest.approx(0.479091, abs=1e-6)
    assert ndcg_at_k(ranking, relevant, 3) == exponential  # exponential is the function's default
    assert METRICS["ndcg"](ranking, relevant, 3) == linear
    assert METRICS["ndcg_exp"](ranking, relevant, 3) == exponential
    assert ndcg_at_k(["x"], {"a": 0}, 5) == 0.0  # IDCG = 0


def test_average_precision_counts_unretrieved_relevant_docs() -> None:
    relevant = {"a": 1, "b": 2, "c": 3, "d": 1, "z": 0}
    ranking = ["a", "x", "b", "z"]
    # hits at ranks 1 and 3: (1/1 + 2/3) / 4 relevant (c and d never retrieved) = 5/12
    assert average_precision(ranking, relevant) == pytest.approx(5 / 12)
    assert average_precision(ranking, relevant, k=2) == pytest.approx(1 / 4)
    assert average_precision(ranking, {"z": 0}) == 0.0


def test_reciprocal_rank_with_cutoff() -> None:
    relevant = {"a": 1}
    ranking = ["x", "y", "z", "a"]
    assert reciprocal_rank(ranking, relevant) == 0.25
    assert reciprocal_rank(ranking, relevant, k=4) == 0.25
    assert reciprocal_rank(ranking, relevant, k=3) == 0.0
    assert reciprocal_rank([], relevant) == 0.0


def test_set_metrics_by_hand() -> None:
    relevant = {"a": 2, "b": 1, "c": 0}
    ranking = ["c", "a", "x"]
    assert recall_at_k(ranking, relevant, 1) == 0.0
    assert recall_at_k(ranking, relevant, 2) == 0.5
    assert precision_at_k(ranking, relevant, 2) == 0.5
    assert precision_at_k(ranking, relevant, 10) == 0.1  # short ranking: still divided by k
    assert success_at_k(ranking, relevant, 1) == 0.0
    assert success_at_k(ranking, relevant, 2) == 1.0
    assert recall_at_k(ranking, {"c": 0}, 5) == 0.0
    with pytest.raises(ValueError):
        recall_at_k(ranking, relevant, 0)


def test_dedupe_ranking_keeps_first_occurrence() -> None:
    chunk_files = ["b.pdf", "a.md", "b.pdf", "c.txt", "a.md", "b.pdf"]
    assert dedupe_ranking(chunk_files) == ["b.pdf", "a.md", "c.txt"]
    assert dedupe_ranking([]) == []


def test_evaluate_run_metric_names() -> None:
    qrels = {"q1": {"a": 1}, "q2": {"b": 0}}
    run = {"q1": ["x", "a"], "q2": ["b"]}
    scores = evaluate_run(qrels, run, ("mrr", "map@1", "recall@100"))
    assert scores == {"q1": {"mrr": 0.5, "map@1": 0.0, "recall@100": 1.0}}
    assert set(evaluate_run(qrels, run)["q1"]) == set(DEFAULT_METRICS)
    for bad in ("ndcg", "recall@0", "recall@x", "bleu@5"):
        with pytest.raises(ValueError):
            evaluate_run(qrels, run, (bad,))


def test_bootstrap_is_deterministic_and_brackets_the_mean() -> None:
    values = [random.Random(i).random() for i in range(40)]
    first = bootstrap_ci(values, seed=1)
    assert bootstrap_ci(values, seed=1) == first
    other = bootstrap_ci(values, seed=2)
    assert (other.low, other.high) != (first.low, first.high)  # different seed: different resamples
    assert first.mean == pytest.approx(sum(values) / len(values))
    assert first.low < first.mean < first.high
    narrow = bootstrap_ci(values, confidence=0.5, seed=1)
    assert first.low < narrow.low < narrow.high < first.high


def test_bootstrap_of_equal_values_is_a_point() -> None:
    interval = bootstrap_ci([0.1] * 37, resamples=500)
    assert interval.low == interval.high == interval.mean
    assert interval.mean == pytest.approx(0.1)
    assert bootstrap_ci([0.5]) == ConfidenceInterval(mean=0.5, low=0.5, high=0.5)
    with pytest.raises(ValueError):
        bootstrap_ci([])


def test_summarise_warns_below_fifty_queries() -> None:
    per_query = {f"q{i}": {"recall@5": i % 2, "map": i / 10} for i in range(10)}
    summary = summarise(per_query, resamples=200)
    assert summary["n"] == 10
    assert summary["metrics"] == pytest.approx({"recall@5": 0.5, "map": 0.45})
    assert set(summary["ci95"]) == {"recall@5", "map"}  # recall@10 and ndcg@10 absent
    assert summary["ci95"]["map"]["low"] < 0.45 < summary["ci95"]["map"]["high"]
    assert summary["warnings"] == ["only 10 queries: confidence intervals are wide (n < 50)"]
    assert summarise(per_query, resamples=200) == summary

    large = {f"q{i}": {"recall@5": i % 2} for i in range(50)}
    assert summarise(large, resamples=200)["warnings"] == []


def test_slice_by_and_mean_scores() -> None:
    per_query = {
        "q1": {"recall@5": 1.0, "mrr": 1.0},
        "q2": {"recall@5": 0.0, "mrr": 0.5},
        "q3": {"recall@5": 0.5, "mrr": 0.0},
    }
    assert mean_scores(per_query) == pytest.approx({"recall@5": 0.5, "mrr": 0.5})
    assert mean_scores({}) == {}
    sliced = slice_by(per_query, {"factoid": ["q1", "q2"], "table": ["q3", "q-unscored"], "empty": []})
    assert sliced == {
        "factoid": pytest.approx({"recall@5": 0.5, "mrr": 0.75}),
        "table": {"recall@5": 0.5, "mrr": 0.0},
        "empty": {},
    }
