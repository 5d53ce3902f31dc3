"""The vector store interface: one Qdrant collection of chunks with a dense and a BM25 sparse vector.

Two backends implement it with the same collection layout and query semantics: `EdgeStore` (qdrant-edge,
embedded, on disk under the data dir, one process at a time) and `ServerStore` (qdrant-client against a
Qdrant server, or its in-process `:memory:` mode).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DENSE = "dense"
SPARSE = "bm25"
KEYWORD_FIELDS = ("path", "paths", "sha", "shard", "doc_type")
TEXT_FIELD = "text"
BATCH_SIZE = 256


@dataclass(frozen=True)
class SparseVector:
    indices: list[int]
    values: list[float]


@dataclass(frozen=True)
class IndexPoint:
    """One chunk to index: id is the chunk id (a UUID string), payload holds its text and metadata."""

    id: str
    dense: Sequence[float]
    sparse: SparseVector
    payload: dict[str, Any]


@dataclass(frozen=True)
class Hit:
    id: str
    score: float
    payload: dict[str, Any]


@dataclass(frozen=True)
class HnswSettings:
    m: int = 16
    ef_construct: int = 100
    ef: int = 128


class VectorStoreLocked(RuntimeError):
    """The embedded store is open in another process."""


def collection_name(model_id: str, dimension: int) -> str:
    """Collection of one embedding model, e.g. 'chunks__sentence-transformers_all-minilm-l6-v2__384'."""
    model = re.sub(r"[^a-z0-9_-]+", "_", model_id.lower()).strip("_")
    return f"chunks__{model}__{dimension}"


class VectorStore(ABC):
    """Chunks of one collection. `filters` are exact keyword matches on payload keys (any element of a list)."""

    collection: str
    dimension: int

    @abstractmethod
    def upsert(self, points: Sequence[IndexPoint]) -> None:
        """Insert or overwrite points by id."""

    @abstractmethod
    def delete_shas(self, shas: Sequence[str]) -> None:
        """Delete every point of these documents."""

    @abstractmethod
    def set_paths(self, sha: str, paths: list[str]) -> None:
        """Set payload `paths` and `path` (the first one) on every point of a document."""

    @abstractmethod
    def shard_state(self, shard: str) -> dict[str, tuple[int, list[str]]]:
        """sha -> (point count, paths) of every document with points in the shard."""

    @abstractmethod
    def get(self, ids: Sequence[str]) -> list[Hit]:
        """The points with these ids (score 0), in no particular order; missing ids are skipped."""

    @abstractmethod
    def count(self, *, shard: str | None = None, sha: str | None = None) -> int:
        """Exact number of points, optionally of one shard and/or document."""

    @abstractmethod
    def search_dense(
        self, vector: Sequence[float], top_k: int = 10, filters: Mapping[str, str] | None = None
    ) -> list[Hit]:
        """Nearest points by cosine similarity of the dense vector."""

    @abstractmethod
    def search_sparse(
        self, vector: SparseVector, top_k: int = 10, filters: Mapping[str, str] | None = None
    ) -> list[Hit]:
        """Best points by BM25 (query weights times the IDF Qdrant computes)."""

    @abstractmethod
    def search_hybrid(
        self,
        dense: Sequence[float],
        sparse: SparseVector,
        top_k: int = 10,
        filters: Mapping[str, str] | None = None,
        prefetch: int = 50,
    ) -> list[Hit]:
        """Reciprocal rank fusion of the best `prefetch` dense and sparse results."""

    @abstractmethod
    def optimize(self) -> None:
        """Bring indexes up to date after a bulk load."""

    @abstractmethod
    def close(self) -> None:
        """Release the store."""


def open_vector_store(
    *,
    data_dir: Path,
    model_id: str,
    dimension: int,
    qdrant_url: str | None = None,
    qdrant_api_key: str | None = None,
    hnsw: HnswSettings = HnswSettings(),
    location: str | None = None,
) -> VectorStore:
    """The server store when a Qdrant URL or client location (":memory:") is given, else the embedded store.

    qdrant_url=":memory:" selects one process-wide in-memory client (the server code path, in-process).
    """
    collection = collection_name(model_id, dimension)
    if qdrant_url == ":memory:":
        from rag_pipeline.index.server_store import ServerStore, shared_memory_client

        return ServerStore(shared_memory_client(), collection, dimension, hnsw, owns_client=False)
    if qdrant_url or location:
        from rag_pipeline.index.server_store import ServerStore, connect

        client = connect(url=qdrant_url, api_key=qdrant_api_key, location=location)
        return ServerStore(client, collection, dimension, hnsw)
    from rag_pipeline.index.edge_store import open_edge_store

    return open_edge_store(data_dir / "qdrant_edge" / collection, collection, dimension, hnsw)
