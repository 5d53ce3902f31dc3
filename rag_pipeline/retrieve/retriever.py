"""The retriever: query embedding, hybrid (or dense / sparse / blended) search, fragments, post-processing.

Every stage is switchable through `RetrievalSettings` and timed in the result. If the embedder fails, the
search falls back to BM25 only and says so in `RetrievalResult.warnings`; if the vector store cannot be
reached, `StoreUnavailable` names the store and the setting to fix.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import numpy as np

from rag_pipeline.embed.embedder import Embedder
from rag_pipeline.errors import ConfigError, InputError
from rag_pipeline.fields.values import FieldKind
from rag_pipeline.index.sparse import encode_query
from rag_pipeline.index.vector_store import (
    Condition,
    Filters,
    Hit,
    Scope,
    VectorStore,
    check_fusion,
    is_connection_error,
    parse_filters,
    store_unreachable,
)
from rag_pipeline.retrieve import fusion as fusion_functions
from rag_pipeline.retrieve.field_filters import field_conditions
from rag_pipeline.retrieve.fragments import split_fragments
from rag_pipeline.retrieve.hyde import Hyde
from rag_pipeline.retrieve.postprocess import (
    DUPLICATE_COSINE,
    dedupe,
    mmr,
    prefer_coverage,
    score_threshold,
)
from rag_pipeline.retrieve.rerank import Reranker, rerank
from rag_pipeline.retrieve.semantic_cache import SemanticCache

Mode = Literal["hybrid", "dense", "sparse", "blend"]
MODES = ("hybrid", "dense", "sparse", "blend")
MAX_TOP_K = 1000
FLOOR_SHARE = 0.1  # the prefetch floor asks a leg for at most this share of the points a search can reach
SIZE_TTL_SECONDS = 30.0  # a count of the points a search can reach serves the searches of the next 30 s
SIZE_ENTRIES = 256  # distinct condition sets whose counts are kept
T = TypeVar("T")


@dataclass(frozen=True)
class RetrievalSettings:
    """How to retrieve. Defaults are the production defaults.

    mode: "hybrid" (dense + BM25 legs fused inside Qdrant by rrf or dbsf, or client-side by adaptive), "dense",
    "sparse" (BM25), or "blend" (both legs fetched, then alpha·normalised dense + (1 − alpha)·normalised BM25
    client-side, for comparison).
    """

    mode: Mode = "hybrid"
    fusion: Literal["rrf", "dbsf", "adaptive"] = "rrf"
    rrf_k: int = 60
    weights: tuple[float, float] | None = None  # (dense, sparse) RRF leg weights; None: equal
    prefetch_multiplier: int = 5  # each leg of a fused search (hybrid, blend) fetches top_k × this many candidates
    # Each leg of a fused search fetches at least this many candidates, or FLOOR_SHARE of the points the search's
    # filters and scope allow when that is fewer (0: no floor).
    prefetch_floor: int = 300
    alpha: float = 0.7  # blend mode: weight of the dense score
    fragments: bool = True  # multi-sentence questions run per fragment
    dedupe: bool = True
    dedupe_cosine: float = DUPLICATE_COSINE
    mmr_lambda: float | None = None  # None: MMR off
    score_threshold: float | None = None  # on the mode's score scale (RRF scores are ~1/k); None: off
    coverage_margin: float | None = None  # relative score band for "prefer several files"; None: off
    candidate_multiplier: int = 2  # with dedupe/MMR/coverage on, post-process top_k × this many hits
    filterable: Mapping[str, FieldKind] = field(default_factory=dict)  # declared filterable fields: --filter F=V

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"unknown retrieval mode {self.mode!r}; allowed: {', '.join(MODES)}")
        if self.fusion != "adaptive":
            check_fusion(self.fusion, self.rrf_k, self.weights)
        elif self.weights is not None:
            raise ConfigError("leg weights apply to RRF fusion only (adaptive fusion weighs the legs per query)")
        if self.prefetch_multiplier < 1 or self.candidate_multiplier < 1:
            raise ConfigError("prefetch_multiplier and candidate_multiplier must be >= 1")
        if self.prefetch_floor < 0:
            raise ConfigError(f"prefetch_floor must be >= 0, got {self.prefetch_floor}")
        if not 0.0 <= self.alpha <= 1.0:
            raise ConfigError(f"alpha must be in [0, 1], got {self.alpha}")
        if self.mmr_lambda is not None and not 0.0 <= self.mmr_lambda <= 1.0:
            raise ConfigError(f"mmr_lambda must be in [0, 1], got {self.mmr_lambda}")
        if self.coverage_margin is not None and self.coverage_margin < 0:
            raise ConfigError(f"coverage_margin must be >= 0, got {self.coverage_margin}")


@dataclass
class RetrievalResult:
    hits: list[Hit]
    timings_ms: dict[str, float]  # embed, cache, hyde, search, rerank, postprocess, total
    warnings: list[str] = field(default_factory=list)
    mode_used: Mode = "hybrid"
    fragments: list[str] = field(default_factory=list)
    cache_hit: bool = False
    reranked: bool = False
    hyde_documents: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The search result in the CLI/API contract (`search --json`, `POST /search`)."""
        return {
            "results": [hit_json(hit) for hit in self.hits],
            "timings_ms": {stage: round(value, 3) for stage, value in self.timings_ms.items()},
            "warnings": self.warnings, "mode": self.mode_used, "fragments": self.fragments,
            "cache_hit": self.cache_hit, "reranked": self.reranked,
        }


def hit_json(hit: Hit) -> dict[str, Any]:
    """One search result in the CLI/API contract (`path` is the document's first path; `paths` all of them)."""
    payload = hit.payload
    return {
        "path": payload.get("path"), "paths": payload.get("paths") or [], "sources": payload.get("sources") or [],
        "header": payload.get("heading_path", ""),
        "line_start": payload.get("line_start"), "page": payload.get("page"), "chunk_id": hit.id,
        "sha": payload.get("sha"), "doc_type": payload.get("doc_type"), "tags": payload.get("tags") or [],
        "score": hit.score, "text": payload.get("text", ""),
    }


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
    """Searches `store` with queries embedded by `embedder` (None: BM25 only).

    Optional stages: `reranker` re-scores top_k × rerank_multiplier candidates, `cache` serves repeated
    (similar) queries, `hyde` expands the dense query with hypothetical answers. `close()` releases the store
    and the cache.
    """

    def __init__(self, store: VectorStore, embedder: Embedder | None, settings: RetrievalSettings | None = None,
                 *, reranker: Reranker | None = None, rerank_multiplier: int = 3,
                 rerank_min_score: float | None = None, cache: SemanticCache | None = None,
                 hyde: Hyde | None = None, embedder_error: str | None = None) -> None:
        if rerank_multiplier < 1:
            raise ConfigError(f"rerank_multiplier must be >= 1, got {rerank_multiplier}")
        self.store = store
        self.embedder = embedder
        self.embedder_error = embedder_error  # why there is no embedder, for the BM25-only warning
        self.settings = settings or RetrievalSettings()
        self.reranker = reranker
        self.rerank_multiplier = rerank_multiplier
        self.rerank_min_score = rerank_min_score
        self.cache = cache
        self.hyde = hyde
        self._sizes: dict[frozenset[Condition], tuple[float, int]] = {}  # -> (when counted, points they allow)

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()
        self.store.close()

    def signature(self, top_k: int, conditions: list[Condition]) -> str:
        """What besides the query text decides a result: the cache key's second half."""
        parts = {
            "top_k": top_k, "filters": sorted(dataclasses.astuple(condition) for condition in conditions),
            "settings": dataclasses.asdict(self.settings),
            "embedder": getattr(self.embedder, "model_id", None),
            "reranker": (self.reranker.model_id, self.rerank_multiplier, self.rerank_min_score)
            if self.reranker else None,
            "hyde": (self.hyde.mode, self.hyde.documents, self.hyde.adaptive_threshold) if self.hyde else None,
        }
        return hashlib.sha256(json.dumps(parts, sort_keys=True, default=list).encode()).hexdigest()[:32]

    def search(self, query: str, top_k: int = 10, filters: Filters | None = None, scope: Scope | None = None
               ) -> RetrievalResult:
        """The best `top_k` chunks for `query` among those `filters` and `scope` (an API key's) both allow.
        ValueError for a blank query, top_k out of range or a bad filter."""
        started = time.perf_counter()
        settings = self.settings
        if not query or not query.strip():
            raise InputError("the query is empty", code="empty_query")
        if not 1 <= top_k <= MAX_TOP_K:
            raise InputError(f"top_k must be between 1 and {MAX_TOP_K}, got {top_k}")
        # Fail before any work on an unknown filter field; the store gets the request's and the scope's conditions.
        filters, by_field = field_conditions(filters, settings.filterable)
        conditions = parse_filters(filters) + by_field + (scope.conditions() if scope else [])
        query = " ".join(query.split())
        fragments = split_fragments(query) if settings.fragments else [query]
        timings = {stage: 0.0 for stage in ("embed", "cache", "hyde", "search", "rerank", "postprocess")}
        result = RetrievalResult([], timings, mode_used=settings.mode, fragments=fragments)

        # Query vectors: the whole query (cache key, MMR, HyDE) and each fragment.
        whole, vectors = self._embed(query, fragments, result)
        if whole is None and result.mode_used != "sparse":
            result.mode_used = "sparse"
            result.warnings.append(f"{result.warnings.pop()}; fell back to BM25-only retrieval")

        signature = ""
        if self.cache is not None and whole is not None:
            signature = self.signature(top_k, conditions)
            begin = time.perf_counter()
            cached = self._cache_call(lambda: self.cache.lookup(whole, signature), result)
            timings["cache"] = (time.perf_counter() - begin) * 1000
            if cached is not None:
                result.hits, result.cache_hit = cached, True
                timings["total"] = (time.perf_counter() - started) * 1000
                return result

        if self.hyde is not None and whole is not None and result.mode_used != "sparse":
            begin = time.perf_counter()
            vectors = self._expand_with_hyde(query, whole, vectors, conditions, result)
            timings["hyde"] = (time.perf_counter() - begin) * 1000

        limit = top_k
        if settings.dedupe or settings.mmr_lambda is not None or settings.coverage_margin is not None:
            limit = top_k * settings.candidate_multiplier
        if self.reranker is not None:
            limit = max(limit, top_k * self.rerank_multiplier)
        with_vectors = settings.dedupe or settings.mmr_lambda is not None
        begin = time.perf_counter()
        hits = merge_fragment_hits([
            self._search_one(result.mode_used, fragment, vector, limit, top_k, conditions, with_vectors)
            for fragment, vector in zip(fragments, vectors)
        ])
        timings["search"] = (time.perf_counter() - begin) * 1000

        hits = score_threshold(hits, settings.score_threshold)
        if self.reranker is not None and hits:
            begin = time.perf_counter()
            hits = rerank(self.reranker, query, hits, self.rerank_min_score)
            result.reranked = True
            timings["rerank"] = (time.perf_counter() - begin) * 1000

        begin = time.perf_counter()
        if settings.dedupe:  # MMR and coverage choose among more than top_k hits
            keep = top_k if settings.mmr_lambda is None and settings.coverage_margin is None else None
            hits = dedupe(hits, cosine_threshold=settings.dedupe_cosine, keep=keep)
        if settings.mmr_lambda is not None and whole is not None:
            hits = mmr(hits, whole, settings.mmr_lambda, top_k=len(hits))
        if settings.coverage_margin is not None:
            hits = prefer_coverage(hits, settings.coverage_margin)
        result.hits = [dataclasses.replace(hit, vector=None) for hit in hits[:top_k]]
        timings["postprocess"] = (time.perf_counter() - begin) * 1000

        if self.cache is not None and whole is not None and not result.warnings:
            begin = time.perf_counter()
            self._cache_call(lambda: self.cache.store_result(whole, signature, query, result.hits), result)
            timings["cache"] += (time.perf_counter() - begin) * 1000
        timings["total"] = (time.perf_counter() - started) * 1000
        return result

    def _embed(self, query: str, fragments: list[str], result: RetrievalResult
               ) -> tuple[np.ndarray | None, list[np.ndarray | None]]:
        """(whole-query vector, fragment vectors); (None, [None, ...]) with a warning when the embedder fails or
        no stage needs vectors."""
        settings = self.settings
        needed = (settings.mode != "sparse" or settings.mmr_lambda is not None or self.cache is not None)
        if not needed:
            return None, [None] * len(fragments)
        begin = time.perf_counter()
        try:
            if self.embedder is None:
                raise RuntimeError(self.embedder_error or "no embedder configured")
            texts = [query] + [fragment for fragment in fragments if fragment != query]
            embedded = dict(zip(texts, self.embedder.embed_queries(texts)))
            return embedded[query], [embedded[fragment] for fragment in fragments]
        except Exception as error:  # any embedder failure: degrade to BM25, never fail the query
            result.warnings.append(f"query embedding failed ({type(error).__name__}: {error})")
            return None, [None] * len(fragments)
        finally:
            result.timings_ms["embed"] = (time.perf_counter() - begin) * 1000

    def _expand_with_hyde(self, query: str, whole: np.ndarray, vectors: list[np.ndarray | None],
                          filters: Filters | None, result: RetrievalResult) -> list[np.ndarray | None]:
        """Fragment vectors averaged with hypothetical answers' vectors, when HyDE fires; LLM errors only warn."""
        assert self.hyde is not None
        top_dense = None
        if self.hyde.mode == "adaptive":
            probe = self._call_store(lambda: self.store.search_dense([float(x) for x in whole], 1, filters))
            top_dense = probe[0].score if probe else None
        if not self.hyde.wanted(top_dense):
            return vectors
        try:
            documents = self.hyde.hypothetical_documents(query)
            expanded = self.hyde.expand([vector for vector in vectors if vector is not None], documents)
        except Exception as error:  # the LLM is down or misbehaves: search with the plain query
            result.warnings.append(f"HyDE skipped ({type(error).__name__}: {error})")
            return vectors
        result.hyde_documents = documents
        return list(expanded)

    def _cache_call(self, call, result: RetrievalResult):
        """A semantic-cache operation; a failing cache only warns (the search goes on without it)."""
        try:
            return call()
        except Exception as error:
            result.warnings.append(f"semantic cache unavailable ({type(error).__name__}: {error})")
            return None

    def _search_one(
        self, mode: Mode, text: str, vector: np.ndarray | None, limit: int, top_k: int, conditions: list[Condition],
        with_vectors: bool,
    ) -> list[Hit]:
        settings = self.settings
        store = self.store
        if mode == "sparse":
            return self._call_store(lambda: store.search_sparse(encode_query(text), limit, conditions,
                                                                with_vectors=with_vectors))
        assert vector is not None
        dense = [float(value) for value in vector]
        if mode == "dense":
            return self._call_store(lambda: store.search_dense(dense, limit, conditions, with_vectors=with_vectors))
        sparse = encode_query(text)
        prefetch = self._prefetch(limit, top_k, conditions)
        if mode == "blend" or settings.fusion == "adaptive":  # both legs fetched, fused here
            dense_hits = self._call_store(lambda: store.search_dense(dense, prefetch, conditions,
                                                                     with_vectors=with_vectors))
            sparse_hits = self._call_store(lambda: store.search_sparse(sparse, prefetch, conditions,
                                                                       with_vectors=with_vectors))
            if mode == "blend":
                return fusion_functions.weighted_blend(dense_hits, sparse_hits, settings.alpha)[:limit]
            return fusion_functions.adaptive([dense_hits, sparse_hits])[:limit]
        return self._call_store(lambda: store.search_hybrid(
            dense, sparse, limit, conditions, prefetch=prefetch, fusion=settings.fusion, rrf_k=settings.rrf_k,
            weights=settings.weights, with_vectors=with_vectors,
        ))

    def _prefetch(self, limit: int, top_k: int, conditions: Sequence[Condition]) -> int:
        """Candidates each leg of a fused search fetches: top_k × prefetch_multiplier and at least the limit, raised
        to the floor (prefetch_floor, or FLOOR_SHARE of the points `conditions` allow when that is fewer)."""
        settings = self.settings
        prefetch = max(limit, top_k * settings.prefetch_multiplier)
        if settings.prefetch_floor <= prefetch:  # the floor cannot matter: no count
            return prefetch
        return max(prefetch, min(settings.prefetch_floor, int(self._reachable(conditions) * FLOOR_SHARE)))

    def _reachable(self, conditions: Sequence[Condition]) -> int:
        """The points `conditions` allow, counted again at the first search after the count is SIZE_TTL_SECONDS
        old (ingests change it). A stale count only changes how deep the legs are fetched."""
        key = frozenset(conditions)  # the conditions all hold: their order does not matter
        now = time.monotonic()
        counted = self._sizes.get(key)
        if counted is None or now - counted[0] > SIZE_TTL_SECONDS:
            if key not in self._sizes and len(self._sizes) >= SIZE_ENTRIES:
                self._sizes.clear()
            counted = self._sizes[key] = (now, self._call_store(lambda: self.store.count(filters=list(conditions))))
        return counted[1]

    def _call_store(self, call: Callable[[], T]) -> T:
        """A store query; connection failures become StoreUnavailable naming the store and the setting to fix."""
        try:
            return call()
        except Exception as error:
            if is_connection_error(error):
                raise store_unreachable(describe_store(self.store), error) from error
            raise


def merge_fragment_hits(results: Sequence[Sequence[Hit]]) -> list[Hit]:
    """Hits of several fragment searches, one per chunk id with its best score, best first; equal scores by chunk id
    (qdrant-edge returns RRF ties in a different order from one call to the next)."""
    best: dict[str, Hit] = {}
    for hits in results:
        for hit in hits:
            if hit.id not in best or hit.score > best[hit.id].score:
                best[hit.id] = hit
    return sorted(best.values(), key=lambda hit: (-hit.score, hit.id))
