"""Rank and score fusion of several result lists, as pure functions over `Hit` lists (best first).

`rrf` and `dbsf` compute exactly what Qdrant computes inside a hybrid query (so results fused client-side, e.g.
across query fragments, agree with the store's own fusion); `adaptive` is DBSF with per-query leg weights taken
from each leg's own score distribution (Qdrant has no such fusion, so it runs client-side); `weighted_blend` is
the classic client-side alpha blend of normalised dense and BM25 scores, kept for comparison in the eval.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from rag_pipeline.index.vector_store import Hit


def _fused(scores: dict[str, float], hits: dict[str, Hit]) -> list[Hit]:
    """Hits with their fused scores, best first; ties keep first-seen order (dicts keep insertion order)."""
    order = {hit_id: position for position, hit_id in enumerate(scores)}
    ranked = sorted(scores, key=lambda hit_id: (-scores[hit_id], order[hit_id]))
    return [dataclasses.replace(hits[hit_id], score=scores[hit_id]) for hit_id in ranked]


def rrf(rankings: Sequence[Sequence[Hit]], k: int = 60, weights: Sequence[float] | None = None) -> list[Hit]:
    """Reciprocal rank fusion: score(d) = sum over rankings of 1 / (k + rank / weight), rank 1-based.

    With weight 1 this is the RRF of Cormack et al. (1 / (k + rank)). It equals Qdrant's weighted RRF with
    Qdrant's constant set to k + 1, which is what the stores send. A ranking with weight 0 contributes nothing.
    """
    if weights is not None and len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings")
    scores: dict[str, float] = {}
    hits: dict[str, Hit] = {}
    for index, ranking in enumerate(rankings):
        weight = 1.0 if weights is None else float(weights[index])
        for rank, hit in enumerate(ranking, start=1):
            contribution = 1.0 / (k + rank / weight) if weight > 0 else 0.0
            scores[hit.id] = scores.get(hit.id, 0.0) + contribution
            hits.setdefault(hit.id, hit)
    return _fused(scores, hits)


def dbsf_normalise(scores: Sequence[float]) -> list[float]:
    """Scores mapped by (s - (mean - 3σ)) / 6σ, σ the sample standard deviation; 0.5 each when σ is 0 or n is 1."""
    if len(scores) <= 1:
        return [0.5] * len(scores)
    mean = sum(scores) / len(scores)
    variance = sum((score - mean) ** 2 for score in scores) / (len(scores) - 1)
    if variance == 0:
        return [0.5] * len(scores)
    deviation = math.sqrt(variance)
    low = mean - 3 * deviation
    return [(score - low) / (6 * deviation) for score in scores]


def dbsf(rankings: Sequence[Sequence[Hit]], weights: Sequence[float] | None = None) -> list[Hit]:
    """Distribution-based score fusion (Qdrant's DBSF): each list normalised by dbsf_normalise, then summed; with
    `weights` (client-side only: Qdrant's DBSF takes none) each list's normalised scores are scaled first."""
    if weights is not None and len(weights) != len(rankings):
        raise ValueError(f"{len(weights)} weights for {len(rankings)} rankings")
    scores: dict[str, float] = {}
    hits: dict[str, Hit] = {}
    for index, ranking in enumerate(rankings):
        weight = 1.0 if weights is None else float(weights[index])
        for hit, normalised in zip(ranking, dbsf_normalise([hit.score for hit in ranking])):
            scores[hit.id] = scores.get(hit.id, 0.0) + weight * normalised
            hits.setdefault(hit.id, hit)
    return _fused(scores, hits)


def min_max(scores: Sequence[float]) -> list[float]:
    """Scores scaled to [0, 1] by the list's min and max; 1.0 each when they are all equal."""
    if not scores:
        return []
    low, high = min(scores), max(scores)
    if high == low:
        return [1.0] * len(scores)
    return [(score - low) / (high - low) for score in scores]


def weighted_blend(dense_hits: Sequence[Hit], sparse_hits: Sequence[Hit], alpha: float = 0.7) -> list[Hit]:
    """alpha · min-max-normalised dense score + (1 − alpha) · min-max-normalised BM25 score; a hit missing from
    one list gets 0 for that part."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    scores: dict[str, float] = {}
    hits: dict[str, Hit] = {}
    for ranking, weight in ((dense_hits, alpha), (sparse_hits, 1.0 - alpha)):
        for hit, normalised in zip(ranking, min_max([hit.score for hit in ranking])):
            scores[hit.id] = scores.get(hit.id, 0.0) + weight * normalised
            hits.setdefault(hit.id, hit)
    return _fused(scores, hits)


def lead(scores: Sequence[float], runners_up: int = 9, head: int = 50) -> float:
    """How far a leg's best candidate stands out: its score minus the mean of the next `runners_up`, in sample
    standard deviations of the leg's first `head` scores (scores best first; at least two), so that it does not
    depend on how deep the leg was fetched beyond that. 0 when those scores are all equal. A confident leg has a
    clear winner; a leg that matched nothing in particular has a flat head."""
    if len(scores) < 2:
        raise ValueError("the lead of a leg needs at least two scores")
    first = scores[:head]
    mean = sum(first) / len(first)
    deviation = math.sqrt(sum((score - mean) ** 2 for score in first) / (len(first) - 1))
    if deviation == 0:
        return 0.0
    following = scores[1:1 + runners_up]
    return max(0.0, (scores[0] - sum(following) / len(following)) / deviation)


def adaptive_weights(rankings: Sequence[Sequence[Hit]]) -> list[float]:
    """Per-query leg weights summing to 1, each leg's share of the legs' `lead`s. Equal (DBSF's) when no leg
    leads or when a leg has fewer than three candidates, too few to judge (a rare code BM25 finds once)."""
    if any(len(ranking) < 3 for ranking in rankings):
        return [1.0 / len(rankings)] * len(rankings)
    leads = [lead([hit.score for hit in ranking]) for ranking in rankings]
    total = sum(leads)
    if total == 0:
        return [1.0 / len(rankings)] * len(rankings)
    return [value / total for value in leads]


def adaptive(rankings: Sequence[Sequence[Hit]]) -> list[Hit]:
    """DBSF with per-query leg weights (`adaptive_weights`): each list normalised by dbsf_normalise, times its
    weight, then summed. A leg with a clear winner counts for more than one whose head is flat, so a weak leg's
    noise does not drag a confident leg down; legs that lead equally give DBSF's order (and half its scores, for
    two legs)."""
    return dbsf(rankings, adaptive_weights(rankings))
