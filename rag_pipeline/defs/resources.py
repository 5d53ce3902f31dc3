"""The pipeline resource: settings, stores and the document converter, shared by every asset and sensor."""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg

from rag_pipeline.convert import DocumentConverter
from rag_pipeline.embed import (
    Embedder,
    EmbeddingCache,
    build_embedder,
    declared_dimension,
)
from rag_pipeline.index.sidecar import Sidecar
from rag_pipeline.index.vector_store import HnswSettings, VectorStore, open_vector_store
from rag_pipeline.settings import Settings
from rag_pipeline.sources import HashCache, Manifest, discover


@functools.cache
def shared_converter(pdf_pipeline: str) -> DocumentConverter:
    """One converter per process: docling's pipelines are built once and reused across runs."""
    return DocumentConverter(pdf_pipeline=pdf_pipeline)


@functools.cache
def shared_embedder(backend: str, model_path: str | None, ollama_url: str | None, ollama_model: str,
                    batch_size: int) -> Embedder:
    """One embedding model per process (loading it takes seconds)."""
    return build_embedder(backend=backend, model_path=model_path, ollama_url=ollama_url,
                          ollama_model=ollama_model, batch_size=batch_size)


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
        settings = self.settings
        return shared_embedder(settings.embedding_backend, settings.embedding_model_path, settings.ollama_url,
                               settings.ollama_embed_model, settings.embedding_batch_size)

    def embedding_dimension(self) -> int:
        """The model's dimension (it names the collection), read from the model files when they declare it,
        so opening the store for a status check does not load the model."""
        settings = self.settings
        declared = None
        if settings.embedding_backend == "sentence_transformers":
            declared = declared_dimension(settings.embedding_model_path)
        return declared or self.embedder().dimension

    def embedding_cache(self) -> EmbeddingCache:
        return EmbeddingCache(self.settings.embedding_cache_path)

    @contextmanager
    def vector_store(self) -> Iterator[VectorStore]:
        """The collection of the configured embedding model (embedded engine unless RAG_QDRANT_URL is set).

        Closed on exit: the embedded engine allows one process at a time, so nothing may hold it longer.
        """
        settings = self.settings
        store = open_vector_store(
            data_dir=settings.data_dir, model_id=settings.embedding_model_id, dimension=self.embedding_dimension(),
            qdrant_url=settings.qdrant_url, qdrant_api_key=settings.qdrant_api_key,
            hnsw=HnswSettings(m=settings.hnsw_m, ef_construct=settings.hnsw_ef_construct, ef=settings.hnsw_ef),
        )
        try:
            yield store
        finally:
            store.close()

    def manifest(self) -> Manifest:
        """Discover the roots, re-hashing only files whose size or mtime changed since the last scan."""
        settings = self.settings
        cache_path = settings.data_dir / "hash_cache.json"
        cache: HashCache = {}
        if cache_path.is_file():
            cache = {path: tuple(entry) for path, entry in json.loads(cache_path.read_text()).items()}
        manifest = discover(settings.roots, ignore=settings.ignore, extensions=settings.extensions,
                            max_file_bytes=settings.max_file_bytes, cache=cache)
        live = {str(Path(f.path).resolve()) for f in manifest.files}
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        cache_path.write_text(json.dumps({path: entry for path, entry in cache.items() if path in live}))
        return manifest
