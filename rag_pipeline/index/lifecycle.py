"""The lifecycle of index generations: which generation the settings describe (the one ingest builds), which one
queries use, opening either one's collection, and switching queries over. Ingest (the generation switch), the
query side (the retriever, the API's runtime) and inspection all go through this one service; the registry file
underneath is index/generations.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from rag_pipeline.errors import StoreUnavailable
from rag_pipeline.index.factory import alias_target, collection_exists, open_vector_store, point_alias
from rag_pipeline.index.generations import Generation, GenerationRegistry, new_generation
from rag_pipeline.index.sparse import SPARSE_ID
from rag_pipeline.index.vector_store import HnswSettings, VectorStore, collection_name
from rag_pipeline.settings import Settings


def embedding_settings(settings: Settings) -> dict[str, Any]:
    """The settings a query embedder of this model needs (recorded with each index generation)."""
    return {"embedding_backend": settings.embedding_backend, "embedding_model_path": settings.embedding_model_path,
            "embedding_runtime": settings.embedding_runtime,
            "ollama_embed_model": settings.ollama_embed_model, "openai_embed_model": settings.openai_embed_model}


@dataclass(frozen=True)
class QueryTarget:
    """What queries open: the embedding settings of the generation they search, its collection (on a server the
    alias) and its dimension."""

    embedding: dict[str, Any]
    collection: str
    dimension: int


class IndexGenerations(GenerationRegistry):
    """The generations of one deployment (its data dir, and its Qdrant server when one is configured).

    `dimension` gives the embedding model's dimension (asked only when a generation must be described: loading a
    server's model takes a request); `legacy_chunking` the chunk settings a data dir from before generations was
    built with (its sidecar's most common chunking id), to adopt its collection."""

    def __init__(self, settings: Settings, dimension: Callable[[], int],
                 legacy_chunking: Callable[[], str | None]) -> None:
        super().__init__(settings.data_dir)
        self.settings = settings
        self._dimension = dimension
        self._legacy_chunking = legacy_chunking

    def target(self) -> Generation:
        """The generation the settings describe, registered (an index made before generations existed is adopted as
        the active generation first, so an unchanged configuration keeps using it)."""
        settings, dimension = self.settings, self._dimension()
        if not self.exists():
            self._adopt_legacy_collection(dimension)
        return self.register(new_generation(settings.embedding_model_id, dimension, settings.chunking_id, SPARSE_ID,
                                            embedding_settings(settings)))

    def _adopt_legacy_collection(self, dimension: int) -> None:
        """Register the collection of a data dir from before generations (named after the model only) as the active
        generation, with the chunk settings its sidecar records."""
        settings = self.settings
        legacy = collection_name(settings.embedding_model_id, dimension)
        if not collection_exists(settings.data_dir, legacy, settings.qdrant_url, settings.qdrant_api_key):
            return
        generation = new_generation(settings.embedding_model_id, dimension,
                                    self._legacy_chunking() or settings.chunking_id, SPARSE_ID,
                                    embedding_settings(settings), collection=legacy)
        self.activate(self.register(generation))

    def activate(self, generation: Generation) -> str | None:
        """Point queries at `generation` (the registry pointer; on a server also the alias, moved atomically);
        returns the previously active generation's id."""
        settings = self.settings
        if settings.qdrant_url:
            point_alias(settings.qdrant_url, settings.qdrant_api_key, settings.qdrant_alias, generation.collection)
        return super().activate(generation)

    def open(self, generation: Generation | None = None, *, collection: str | None = None,
             dimension: int | None = None) -> VectorStore:
        """The collection of `generation` (default: the target, to build, check or purge it), or the collection
        named so, of that dimension (a query's, the semantic cache's)."""
        settings = self.settings
        if collection is None:
            generation = generation or self.target()
            collection, dimension = generation.collection, generation.dimension
        return open_vector_store(
            data_dir=settings.data_dir, model_id=settings.embedding_model_id,
            dimension=dimension or self._dimension(), qdrant_url=settings.qdrant_url,
            qdrant_api_key=settings.qdrant_api_key, collection=collection,
            hnsw=HnswSettings(m=settings.hnsw_m, ef_construct=settings.hnsw_ef_construct, ef=settings.hnsw_ef),
        )

    @contextmanager
    def building(self) -> Iterator[VectorStore]:
        """The collection of the target generation (the one ingest builds), closed on exit (the embedded engine
        allows one process at a time)."""
        store = self.open(self.target())
        try:
            yield store
        finally:
            store.close()

    def queried(self) -> QueryTarget:
        """What queries use: the active generation (on a server the one the alias names, opened through the
        alias). StoreUnavailable (no_index) before any generation is active: the one being built is never served,
        however many of its points are written (a first ingest killed half way leaves a half-built collection)."""
        settings = self.settings
        active = self._active_for_queries()
        if active is None:
            self.target()  # adopts an index from before generations as the active one, when there is one
            active = self._active_for_queries()
        if active is None:
            raise StoreUnavailable("no index yet: no ingest of this data dir has completed (an index is served once "
                                   "an ingest switches to it); run an ingest", code="no_index")
        embedding = {"embedding_runtime": "torch", **active.embedding}  # generations from before runtimes: torch
        if "embedding_runtime" in settings.model_fields_set and active.model_id == settings.embedding_model_id:
            embedding["embedding_runtime"] = settings.embedding_runtime  # torch and onnx (fp32) share one generation
        return QueryTarget(embedding, settings.qdrant_alias if settings.qdrant_url else active.collection,
                           active.dimension)

    def _active_for_queries(self) -> Generation | None:
        """The active generation; on a server the one whose collection the alias names (queries follow the alias)."""
        settings = self.settings
        if not settings.qdrant_url:
            return self.active()
        aliased = alias_target(settings.qdrant_url, settings.qdrant_api_key, settings.qdrant_alias)
        return next((g for g in self.all().values() if g.collection == aliased), None) if aliased else None

    @contextmanager
    def query_store(self) -> Iterator[VectorStore]:
        """The collection queries use, closed on exit."""
        target = self.queried()
        store = self.open(collection=target.collection, dimension=target.dimension)
        try:
            yield store
        finally:
            store.close()
