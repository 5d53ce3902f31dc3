"""The retriever: query embedding, hybrid (or dense / sparse / blended) search, fragments, post-processing.

Every stage is switchable through `RetrievalSettings` and timed in the result. If the embedder fails, the
search falls back to BM25 only and says so in `RetrievalResult.warnings`; if the vector store cannot be
reached, `StoreUnavailable` names the store and the setting to fix.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from rag_pipeline.embed import Embedder
from rag_pipeline.index.sparse import encode_query
from rag_pipeline.index.vector_store import (
    Filters,
    Hit,
    VectorStore,
    check_fusion,
    parse_filters,
)
from rag_pipeline.retrieve import fusion as fusion_functions
from rag_pipeline.retrieve.fragments import split_fragments
from rag_pipeline.retrieve.postprocess import (
    DUPLICATE_COSINE,
    dedupe,
    mmr,
    prefer_coverage,
    score_threshold,
)

Mode = Literal["hybrid", "dense", "sparse", "blend"]
MODES = ("hybrid", "dense", "sparse", "blend")
MAX_TOP_K = 1000


class StoreUnavailable(RuntimeError):
    """The vector store cannot be reached."""


@dataclass(frozen=True)
class RetrievalSettings:
    """How to retrieve. Defaults are the production defaults.

    mode: "hybrid" (dense + BM25 legs fused inside Qdrant), "dense", "sparse" (BM25), or "blend" (both legs
    fetched, then alpha·normalised dense + (1 − alpha)·normalised BM25 client-side, for comparison).
    """

    mode: Mode = "hybrid"
    fusion: Literal["rrf", "dbsf"] = "rrf"
    rrf_k: int = 60
    weights: tuple[float, float] | None = None  # (dense, sparse) RRF leg weights; None: equal
    prefetch_multiplier: int = 5  # each leg fetches top_k × this many candidates
    alpha: float = 0.7  # blend mode: weight of the dense score
    fragments: bool = True  # multi-sentence questions run per fragment
    dedupe: bool = True
    dedupe_cosine: float = DUPLICATE_COSINE
    mmr_lambda: float | None = None  # None: MMR off
    score_threshold: float | None = None  # on the mode's score scale (RRF scores are ~1/k); None: off
    coverage_margin: float | None = None  # relative score band for "prefer several files"; None: off
    candidate_multiplier: int = 2  # with dedupe/MMR/coverage on, post-process top_k × this many hits

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"unknown retrieval mode {self.mode!r}; allowed: {', '.join(MODES)}")
        check_fusion(self.fusion, self.rrf_k, self.weights)
        if self.prefetch_multiplier < 1 or self.candidate_multiplier < 1:
            raise ValueError("prefetch_multiplier and candidate_multiplier must be >= 1")
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {self.alpha}")
        if self.mmr_lambda is not None and not 0.0 <= self.mmr_lambda <= 1.0:
            raise ValueError(f"mmr_lambda must be in [0, 1], got {self.mmr_lambda}")
        if self.coverage_margin is not None and self.coverage_margin < 0:
            raise ValueError(f"coverage_margin must be >= 0, got {self.coverage_margin}")


@dataclass
class RetrievalResult:
    hits: list[Hit]
    timings_ms: dict[str, float]  # embed, search, postprocess, total
    warnings: list[str] = field(default_factory=list)
    mode_used: Mode = "hybrid"
    fragments: list[str] = field(default_factory=list)


def _connection_error(error: BaseException) -> bool:
    """True when the error (or one it was raised from) means the store's server could not be reached."""
    kinds: list[type[BaseException]] = [ConnectionError, TimeoutError]
    try:
        import httpx

        kinds.append(httpx.TransportError)
    except ImportError:  # pragma: no cover
        pass
    try:
        from qdrant_client.http.exceptions import ResponseHandlingException

        kinds.append(ResponseHandlingException)
    except ImportError:  # pragma: no cover
        pass
    seen = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, tuple(kinds)):
            return True
        if type(current).__name__ in ("RpcError", "_InactiveRpcError"):  # grpc, without importing it
            return True
        current = current.__cause__ or current.__context__
    return False


def describe_store(store: VectorStore) -> str:
    """The store's kind and location, for error messages."""
    client = getattr(store, "client", None)
    if client is not None:
        inner = getattr(client, "_client", None)
        where = getattr(inner, "rest_uri", None) or getattr(inner, "location", None) or "?"
        return f"Qdrant server {where} (collection {store.collection})"
    path = getattr(store, "path", None)
    return f"embedded Qdrant store {path or ''} (collection {store.collection})".replace("  ", " ")


class Retriever:
    """Searches `store` with queries embedded by `embedder` (None: BM25 only)."""

    def __init__(self, store: VectorStore, embedder: Embedder | None, settings: RetrievalSettings | None = None):
        self.store = store
        self.embedder = embedder
        self.settings = settings or RetrievalSettings()

    def search(self, query: str, top_k: int = 10, filters: Filters | None = None) -> RetrievalResult:
        """The best `top_k` chunks for `query`. ValueError for a blank query, top_k out of range or a bad filter."""
        started = time.perf_counter()
        settings = self.settings
        if not query or not query.strip():
            raise ValueError("the query is empty")
        if not 1 <= top_k <= MAX_TOP_K:
            raise ValueError(f"top_k must be between 1 and {MAX_TOP_K}, got {top_k}")
        parse_filters(filters)  # fail before any work on an unknown filter field
        fragments = split_fragments(query) if settings.fragments else [" ".join(query.split())]
        warnings: list[str] = []
        timings = {"embed": 0.0, "search": 0.0, "postprocess": 0.0}

        mode: Mode = settings.mode
        vectors: list[np.ndarray | None] = [None] * len(fragments)
        if mode != "sparse" or settings.mmr_lambda is not None:
            embed_started = time.perf_counter()
            try:
                if self.embedder is None:
                    raise RuntimeError("no embedder configured")
                vectors = [np.asarray(self.embedder.embed_query(fragment)) for fragment in fragments]
            except Exception as error:  # any embedder failure: degrade to BM25, never fail the query
                vectors = [None] * len(fragments)
                if mode != "sparse":
                    mode = "sparse"
                    warnings.append(
                        f"query embedding failed ({type(error).__name__}: {error}); fell back to BM25-only retrieval"
                    )
                else:
                    warnings.append(f"query embedding failed ({type(error).__name__}: {error}); MMR skipped")
            timings["embed"] = (time.perf_counter() - embed_started) * 1000

        postprocessing = settings.dedupe or settings.mmr_lambda is not None or settings.coverage_margin is not None
        limit = top_k * settings.candidate_multiplier if postprocessing else top_k
        with_vectors = settings.dedupe or settings.mmr_lambda is not None
        search_started = time.perf_counter()
        hits = merge_fragment_hits(
            [
                self._search_one(mode, fragment, vector, limit, top_k, filters, with_vectors)
                for fragment, vector in zip(fragments, vectors)
            ]
        )
        timings["search"] = (time.perf_counter() - search_started) * 1000

        post_started = time.perf_counter()
        hits = score_threshold(hits, settings.score_threshold)
        if settings.dedupe:
            hits = dedupe(hits, cosine_threshold=settings.dedupe_cosine)
        if settings.mmr_lambda is not None and vectors[0] is not None:
            query_vector = np.mean(np.stack([v for v in vectors if v is not None]), axis=0)
            hits = mmr(hits, query_vector, settings.mmr_lambda, top_k=len(hits))
        if settings.coverage_margin is not None:
            hits = prefer_coverage(hits, settings.coverage_margin)
        hits = [dataclasses.replace(hit, vector=None) for hit in hits[:top_k]]
        timings["postprocess"] = (time.perf_counter() - post_started) * 1000
        timings["total"] = (time.perf_counter() - started) * 1000
        return RetrievalResult(hits, timings, warnings, mode, fragments)

    def _search_one(
        self, mode: Mode, text: str, vector: np.ndarray | None, limit: int, top_k: int, filters: Filters | None,
        with_vectors: bool,
    ) -> list[Hit]:
        settings = self.settings
        prefetch = max(limit, top_k * settings.prefetch_multiplier)
        try:
            if mode == "sparse":
                return self.store.search_sparse(encode_query(text), limit, filters, with_vectors=with_vectors)
            assert vector is not None
            dense = [float(value) for value in vector]
            if mode == "dense":
                return self.store.search_dense(dense, limit, filters, with_vectors=with_vectors)
            sparse = encode_query(text)
            if mode == "blend":
                dense_hits = self.store.search_dense(dense, prefetch, filters, with_vectors=with_vectors)
                sparse_hits = self.store.search_sparse(sparse, prefetch, filters, with_vectors=with_vectors)
                return fusion_functions.weighted_blend(dense_hits, sparse_hits, settings.alpha)[:limit]
            return self.store.search_hybrid(
                dense, sparse, limit, filters, prefetch=prefetch, fusion=settings.fusion, rrf_k=settings.rrf_k,
                weights=settings.weights, with_vectors=with_vectors,
            )
        except Exception as error:
            if _connection_error(error):
                raise StoreUnavailable(
                    f"vector store unreachable: {describe_store(self.store)}: {error}. Start the Qdrant server, or "
                    "point RAG_QDRANT_URL at a reachable one (unset it to use the embedded store)"
                ) from error
            raise


def merge_fragment_hits(results: Sequence[Sequence[Hit]]) -> list[Hit]:
    """Hits of several fragment searches, one per chunk id with its best score, best first."""
    best: dict[str, Hit] = {}
    for hits in results:
        for hit in hits:
            if hit.id not in best or hit.score > best[hit.id].score:
                best[hit.id] = hit
    order = {hit_id: position for position, hit_id in enumerate(best)}
    return sorted(best.values(), key=lambda hit: (-hit.score, order[hit.id]))
