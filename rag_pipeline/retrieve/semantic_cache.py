"""Semantic cache of retrieval results: a separate collection whose points are past queries' embeddings.

A lookup is a hit when a cached query is at least `min_cosine` similar, was asked with the same request
signature (top_k, filters, retrieval settings), is younger than the TTL, and was answered from the current
index version. Entries are grouped by index version in the `sha` payload field, so an index change purges
the stale generation with one delete.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass

from rag_pipeline.errors import ConfigError
from rag_pipeline.index.vector_store import Hit, IndexPoint, SparseVector, VectorStore

CACHE_NAMESPACE = uuid.UUID("6f1c8a52-3b1e-4c0e-9a57-2f0d6b3c9e41")
NEIGHBOURS = 10  # cached queries examined per lookup


def cache_collection(chunks_collection: str) -> str:
    return f"{chunks_collection}__query_cache"


@dataclass
class SemanticCache:
    """Past results in `store` (a collection of its own), valid while `index_version()` is unchanged."""

    store: VectorStore
    index_version: Callable[[], str]
    _: KW_ONLY
    min_cosine: float = 0.90
    ttl_s: float = 24 * 3600
    clock: Callable[[], float] = time.time

    def __post_init__(self) -> None:
        if not 0.0 < self.min_cosine <= 1.0:
            raise ConfigError(f"the cache's min cosine must be in (0, 1], got {self.min_cosine}")

    def lookup(self, vector: Sequence[float], signature: str) -> list[Hit] | None:
        """The cached hits of a similar enough, fresh query with this signature, or None."""
        version = self.index_version()
        now = self.clock()
        stale_versions = set()
        found = None
        for entry in self.store.search_dense(list(vector), NEIGHBOURS):
            payload = entry.payload
            if payload.get("sha") != version:
                stale_versions.add(payload.get("sha"))
            elif (found is None and entry.score >= self.min_cosine and payload.get("signature") == signature
                  and now - payload.get("created_at", 0.0) <= self.ttl_s):
                found = [Hit(item["id"], item["score"], item["payload"]) for item in json.loads(payload["hits"])]
        if stale_versions:
            self.store.delete_shas(sorted(str(stale) for stale in stale_versions))
        return found

    def store_result(self, vector: Sequence[float], signature: str, query: str, hits: Sequence[Hit]) -> None:
        """Remember `hits` for `query` (one entry per query text and signature; a newer result replaces it)."""
        serialised = json.dumps([{"id": hit.id, "score": hit.score, "payload": hit.payload} for hit in hits])
        point_id = str(uuid.uuid5(CACHE_NAMESPACE, f"{signature}\n{query}"))
        payload = {"sha": self.index_version(), "signature": signature, "query": query,
                   "created_at": self.clock(), "hits": serialised}
        self.store.upsert([IndexPoint(point_id, list(vector), SparseVector([], []), payload)])

    def size(self) -> int:
        return self.store.count()

    def close(self) -> None:
        self.store.close()
