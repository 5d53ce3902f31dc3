"""The embedder interface every runtime and model server implements, and embedding texts through the cache."""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rag_pipeline.embed.cache import EmbeddingCache, text_sha256
from rag_pipeline.errors import ModelUnavailable

DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"


class EmbedderUnavailable(ModelUnavailable):
    """The embedding model cannot be reached or loaded."""


def normalise(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm, as float32 (all-zero rows stay zero)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, np.finfo(np.float32).tiny)


class Embedder(ABC):
    """Maps texts to L2-normalised float32 vectors of a fixed dimension."""

    model_id: str  # stable across runs and machines: part of the embedding cache key
    dimension: int

    @abstractmethod
    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """float32 array of shape (len(texts), dimension), rows L2-normalised, in input order."""

    def embed_query(self, text: str) -> np.ndarray:
        """float32 vector of shape (dimension,), L2-normalised."""
        return self.embed_documents([text])[0]

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """float32 array of shape (len(texts), dimension): embed_query of each text."""
        return np.stack([self.embed_query(text) for text in texts]) if texts else np.empty((0, self.dimension))

    def prepare_queries(self) -> None:
        """Load now whatever embedding a query needs and the embedder loads lazily (a retriever's start, so the
        first search does not wait); EmbedderUnavailable if it cannot. Nothing to do by default."""


@dataclass
class EmbeddingStats:
    computed: int  # distinct texts sent to the model
    cached: int  # distinct texts found in the cache
    seconds: float  # time spent in the model only


def embed_texts(
    embedder: Embedder, texts: Sequence[str], cache: EmbeddingCache | None = None
) -> tuple[np.ndarray, EmbeddingStats]:
    """Vectors for texts in input order: cached ones looked up by sha256(text), the rest embedded in one batched
    call (deduplicated: identical texts embedded once) and written to the cache."""
    shas = [text_sha256(text) for text in texts]
    found = cache.get_many(embedder.model_id, shas) if cache is not None else {}
    cached = len(found)
    missing = {sha: text for sha, text in zip(shas, texts) if sha not in found}
    seconds = 0.0
    if missing:
        start = time.perf_counter()
        vectors = embedder.embed_documents(list(missing.values()))
        seconds = time.perf_counter() - start
        computed = dict(zip(missing, vectors))
        if cache is not None:
            cache.put_many(embedder.model_id, computed)
        found.update(computed)
    matrix = np.stack([found[sha] for sha in shas]) if shas else np.empty((0, embedder.dimension), dtype=np.float32)
    return matrix, EmbeddingStats(computed=len(missing), cached=cached, seconds=seconds)
