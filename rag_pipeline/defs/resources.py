"""The pipeline resource: settings, stores and the document converter, shared by every asset and sensor."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

from rag_pipeline import components
from rag_pipeline.embedder import Embedder, EmbeddingCache
from rag_pipeline.index.sidecar import Sidecar
from rag_pipeline.index.vector_store import VectorStore
from rag_pipeline.ingest.convert import DocumentConverter
from rag_pipeline.ingest.discover import Manifest, discover_configured
from rag_pipeline.retrieve.retriever import Retriever
from rag_pipeline.settings import Settings


@functools.cache
def shared_converter(pdf_pipeline: str) -> DocumentConverter:
    """One converter per process: docling's pipelines are built once and reused across runs."""
    return DocumentConverter(pdf_pipeline=pdf_pipeline)


class RagResource(dg.ConfigurableResource):
    """Overrides of Settings for a run; unset fields come from settings.py and RAG_* env vars."""

    data_dir: str | None = None
    roots: list[str] | None = None
    show_progress: bool = False

    @property
    def settings(self) -> Settings:
        overrides = {"data_dir": self.data_dir, "roots": self.roots}
        return Settings(**{key: value for key, value in overrides.items() if value is not None})

    def sidecar(self) -> Sidecar:
        return Sidecar(self.settings.sidecar_path)

    def converter(self) -> DocumentConverter:
        return shared_converter(self.settings.pdf_pipeline)

    def embedder(self) -> Embedder:
        return components.embedder(self.settings)

    def embedding_dimension(self) -> int:
        return components.embedding_dimension(self.settings)

    def embedding_cache(self) -> EmbeddingCache:
        return EmbeddingCache(self.settings.embedding_cache_path)

    @contextmanager
    def vector_store(self) -> Iterator[VectorStore]:
        """The chunk collection of the configured model, closed on exit."""
        with components.vector_store(self.settings) as store:
            yield store

    def manifest(self) -> Manifest:
        """Discover the roots, re-hashing only files whose size or mtime changed since the last scan."""
        return discover_configured(self.settings)


class RetrievalResource(dg.ConfigurableResource):
    """Query-time retrieval: the library's Retriever over the configured store, models and RAG_* retrieval
    settings (the same one the HTTP API and the CLI use). Unset fields come from settings.py and RAG_* vars."""

    data_dir: str | None = None
    retrieval_mode: str | None = None
    rerank_model_path: str | None = None
    semantic_cache: bool | None = None

    @property
    def settings(self) -> Settings:
        overrides = {"data_dir": self.data_dir, "retrieval_mode": self.retrieval_mode,
                     "rerank_model_path": self.rerank_model_path, "semantic_cache": self.semantic_cache}
        return Settings(**{key: value for key, value in overrides.items() if value is not None})

    @contextmanager
    def retriever(self) -> Iterator[Retriever]:
        """An open retriever, closed on exit (the embedded store allows one process at a time)."""
        retriever = components.open_retriever(self.settings)
        try:
            yield retriever
        finally:
            retriever.close()
