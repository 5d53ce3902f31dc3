"""Post-processing of ranked hits (best first): near-duplicate removal, MMR diversity, score threshold, and
coverage of several files when scores are close. Pure functions; dense vectors come from `Hit.vector`
(search with `with_vectors=True`)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from rag_pipeline.index.vector_store import Hit

DUPLICATE_COSINE = 0.95
DUPLICATE_OVERLAP = 0.8  # share of the shorter text's word trigrams found in the other text
_WORD = re.compile(r"\w+")


def _shingles(text: str, size: int = 3) -> set[tuple[str, ...]]:
    words = _WORD.findall(text.lower())
    if len(words) < size:
        return {tuple(words)} if words else set()
    return set(zip(*(words[start:] for start in range(size))))  # each run of `size` words, as a tuple


def text_overlap(a: str, b: str) -> float:
    """Share of the shorter text's word trigrams that also occur in the other text (1.0: one contains the other)."""
    first, second = _shingles(a), _shingles(b)
    if not first or not second:
        return 0.0
    return len(first & second) / min(len(first), len(second))


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    va, vb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    norm = float(np.linalg.norm(va) * np.linalg.norm(vb))
    return float(va @ vb) / norm if norm else 0.0


def is_duplicate(a: Hit, b: Hit, cosine_threshold: float = DUPLICATE_COSINE,
                 overlap_threshold: float = DUPLICATE_OVERLAP) -> bool:
    """Same document and overlapping text, or dense vectors with cosine above the threshold."""
    if a.payload.get("sha") is not None and a.payload.get("sha") == b.payload.get("sha"):
        if text_overlap(a.payload.get("text", ""), b.payload.get("text", "")) >= overlap_threshold:
            return True
    if a.vector is not None and b.vector is not None:
        return cosine(a.vector, b.vector) > cosine_threshold
    return False


def dedupe(hits: Sequence[Hit], cosine_threshold: float = DUPLICATE_COSINE,
           overlap_threshold: float = DUPLICATE_OVERLAP, keep: int | None = None) -> list[Hit]:
    """Hits in order, without any that duplicates a better-ranked kept hit (see is_duplicate); with `keep`, only
    the first `keep` of them (the rest are not examined).

    Same decisions as pairwise is_duplicate, computed with one similarity matrix, shingles built once, and text
    compared only with kept hits of the same document."""
    similarity = _cosine_matrix(hits)
    with_vector = np.array([hit.vector is not None for hit in hits])
    shingles: dict[int, set[tuple[str, ...]]] = {}

    def overlap(i: int, j: int) -> float:
        for index in (i, j):
            if index not in shingles:
                shingles[index] = _shingles(hits[index].payload.get("text", ""))
        first, second = shingles[i], shingles[j]
        return len(first & second) / min(len(first), len(second)) if first and second else 0.0

    kept: list[int] = []
    kept_of_document: dict[str, list[int]] = {}
    for index, hit in enumerate(hits):
        if keep is not None and len(kept) >= keep:
            break
        sha = hit.payload.get("sha")
        if sha is not None and any(overlap(index, other) >= overlap_threshold
                                   for other in kept_of_document.get(sha, ())):
            continue
        if similarity is not None and with_vector[index] and kept:
            others = np.array(kept)
            if (similarity[index, others[with_vector[others]]] > cosine_threshold).any():
                continue
        kept.append(index)
        if sha is not None:
            kept_of_document.setdefault(sha, []).append(index)
    return [hits[index] for index in kept]


def _cosine_matrix(hits: Sequence[Hit]) -> np.ndarray | None:
    """Pairwise cosine of the hits' vectors (rows of hits without a vector are zero), or None if none has one."""
    rows = [index for index, hit in enumerate(hits) if hit.vector is not None]
    if not rows:
        return None
    vectors = np.asarray([hits[index].vector for index in rows], dtype=np.float64)
    matrix = np.zeros((len(hits), vectors.shape[1]), dtype=np.float64)
    matrix[rows] = vectors
    matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-300)
    return matrix @ matrix.T


def mmr(hits: Sequence[Hit], query_vector: Sequence[float], lambda_: float = 0.7, top_k: int = 10) -> list[Hit]:
    """Maximal marginal relevance: repeatedly pick argmax λ·cos(query, d) − (1 − λ)·max cos(d, picked).

    Hits keep their scores (the order is MMR's, so scores need not decrease). Hits without a vector are
    appended after the MMR selection in their original order, if room is left.
    """
    if not 0.0 <= lambda_ <= 1.0:
        raise ValueError(f"MMR lambda must be in [0, 1], got {lambda_}")
    with_vectors = [hit for hit in hits if hit.vector is not None]
    without = [hit for hit in hits if hit.vector is None]
    if not with_vectors:
        return list(hits[:top_k])
    matrix = np.asarray([hit.vector for hit in with_vectors], dtype=np.float64)
    matrix /= np.maximum(np.linalg.norm(matrix, axis=1, keepdims=True), 1e-12)
    query = np.asarray(query_vector, dtype=np.float64)
    query /= max(float(np.linalg.norm(query)), 1e-12)
    relevance = matrix @ query
    similarity = matrix @ matrix.T
    picked: list[int] = []
    remaining = list(range(len(with_vectors)))
    while remaining and len(picked) < top_k:
        if picked:
            redundancy = similarity[np.ix_(remaining, picked)].max(axis=1)
        else:
            redundancy = np.zeros(len(remaining))
        values = lambda_ * relevance[remaining] - (1 - lambda_) * redundancy
        best = remaining[int(np.argmax(values))]  # argmax takes the first on ties: the better-ranked hit
        picked.append(best)
        remaining.remove(best)
    selected = [with_vectors[index] for index in picked]
    return selected + without[: max(0, top_k - len(selected))]


def score_threshold(hits: Sequence[Hit], threshold: float | None) -> list[Hit]:
    """Hits scoring at least `threshold` (all of them when it is None). Scores are on the search mode's scale."""
    if threshold is None:
        return list(hits)
    return [hit for hit in hits if hit.score >= threshold]


def _file(hit: Hit) -> str:
    return str(hit.payload.get("path") or hit.payload.get("sha") or hit.id)


def prefer_coverage(hits: Sequence[Hit], margin: float) -> list[Hit]:
    """Within each band of close scores, interleave files so that several are covered near the top.

    A band starts at the best remaining hit and holds the following hits scoring at least
    top − margin·|top| (margin is relative, e.g. 0.05 = within 5 %). Inside a band, hits are reordered round
    robin by file (path): each file's best hit first, in score order, then each file's second, and so on.
    Bands keep their order, so a clearly better hit is never pushed down.
    """
    if margin < 0:
        raise ValueError(f"coverage margin must be >= 0, got {margin}")
    result: list[Hit] = []
    start = 0
    while start < len(hits):
        floor = hits[start].score - margin * abs(hits[start].score)
        end = start + 1
        while end < len(hits) and hits[end].score >= floor:
            end += 1
        by_file: dict[str, list[Hit]] = {}
        for hit in hits[start:end]:
            by_file.setdefault(_file(hit), []).append(hit)
        queues = list(by_file.values())
        depth = 0
        while len(result) < end:
            for queue in queues:
                if depth < len(queue):
                    result.append(queue[depth])
            depth += 1
        start = end
    return result
