"""The pipeline resource: settings, stores and the document converter, shared by every asset and sensor."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace

import dagster as dg
from pydantic import PrivateAttr

from rag_pipeline import components
from rag_pipeline.embed.embedder import Embedder, EmbeddingCache
from rag_pipeline.index.lifecycle import IndexGenerations
from rag_pipeline.index.vector_store import VectorStore
from rag_pipeline.ingest.converters import DocumentConverter
from rag_pipeline.ingest.discover import Manifest, discover_sources
from rag_pipeline.ingest.limits import ConversionLimits
from rag_pipeline.ingest.membership import current_manifest, record_discovery
from rag_pipeline.ingest.sources import DEFAULT_SOURCE, SourceSpec, configured_sources, resolve_source
from rag_pipeline.retrieve.retriever import Retriever
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar

# The pool of every asset, check and op that opens the embedded stores (the artifacts, the DuckDB sidecar, the
# embedded Qdrant engine, each one process at a time): dagster.yaml gives it one run at a time, others queue.
STORE_POOL = "rag_store_writer"


class RagResource(dg.ConfigurableResource):
    """Overrides of Settings for a run; unset fields come from settings.py and RAG_* env vars.

    `source` (with `roots`: exactly those roots, or with `add_roots` those roots beside the ones it has) names the
    one source a run re-discovers; without either, a run re-discovers every configured source (RAG_SOURCES_FILE,
    and RAG_ROOTS as `default`). Sources it does not re-discover keep the files their last sync recorded."""

    data_dir: str | None = None
    roots: list[str] | None = None
    source: str | None = None
    add_roots: bool = False  # with roots: sync the source to its configured or last synced roots plus these
    show_progress: bool = False
    rediscover: bool = True  # False: walk no folder, use what every source last recorded (a reindex)

    _settings: Settings | None = PrivateAttr(default=None)
    _sidecar: Sidecar | None = PrivateAttr(default=None)

    @property
    def settings(self) -> Settings:
        """Built once per resource (a run's steps share it): RAG_* variables, the data dir, and what its index was
        built with."""
        if self._settings is None:
            overrides = {"data_dir": self.data_dir}
            self._settings = components.load_settings(**{key: value for key, value in overrides.items()
                                                         if value is not None})
        return self._settings

    def source_specs(self) -> list[SourceSpec]:
        """The sources this resource's runs re-discover."""
        settings = self.settings
        if not self.rediscover:
            return []
        if self.source is None and not self.roots:
            return list(configured_sources(settings).values())
        name = self.source or DEFAULT_SOURCE
        stored = {source: row["roots"] for source, row in self.sidecar().sources().items()}
        spec = resolve_source(settings, name, self.roots, stored)
        if self.add_roots and (name in stored or name in configured_sources(settings)):
            kept = resolve_source(settings, name, None, stored).roots
            spec = replace(spec, roots=tuple(dict.fromkeys((*kept, *spec.roots))))
        return [spec]

    def sidecar(self) -> Sidecar:
        """Opened (and its schema brought up to date) once per resource: a run's steps share it."""
        if self._sidecar is None:
            self._sidecar = Sidecar(self.settings.sidecar_location)
        return self._sidecar

    def converter(self) -> DocumentConverter:
        """The converter of the settings' PDF pipeline and conversion limits (docling itself runs in conversion
        workers, ingest/convert.py)."""
        return DocumentConverter(self.settings.pdf_pipeline, ConversionLimits.of(self.settings))

    def embedder(self) -> Embedder:
        return components.embedder(self.settings)

    def embedding_dimension(self) -> int:
        return components.embedding_dimension(self.settings)

    def embedding_cache(self) -> EmbeddingCache:
        return EmbeddingCache(self.settings.embedding_cache_path)

    def generations(self) -> IndexGenerations:
        return components.generations(self.settings)

    @contextmanager
    def vector_store(self) -> Iterator[VectorStore]:
        """The collection of the index generation the settings describe (the one ingest builds), closed on exit."""
        with self.generations().building() as store:
            yield store

    @contextmanager
    def live_stores(self) -> Iterator[list[VectorStore]]:
        """The collections a purge must reach at once: the generation being built and the one queries use."""
        generations = self.generations()
        target, active = generations.target(), generations.active()
        opened: list[VectorStore] = []
        try:
            for generation in [target] + ([active] if active and active.id != target.id else []):
                opened.append(generations.open(generation))
            yield opened
        finally:
            for store in opened:
                store.close()

    def manifest(self, specs: Sequence[SourceSpec] | None = None, *, record: bool = True) -> Manifest:
        """The corpus: this resource's sources (`specs` when already resolved) re-discovered (re-hashing only files
        whose size or mtime changed since the last scan) and, with `record`, recorded as what they hold; the other
        sources as last recorded."""
        specs = self.source_specs() if specs is None else specs
        sidecar = self.sidecar()
        discovered = discover_sources(self.settings, specs)
        if record:
            record_discovery(sidecar, specs, discovered)
        return current_manifest(sidecar, discovered)


class RetrievalResource(dg.ConfigurableResource):
    """Query-time retrieval: the library's Retriever over the configured store, models and RAG_* retrieval
    settings (the same one the HTTP API and the CLI use). Unset fields come from settings.py and RAG_* vars."""

    data_dir: str | None = None
    retrieval_mode: str | None = None
    rerank_model_path: str | None = None
    semantic_cache: bool | None = None

    _settings: Settings | None = PrivateAttr(default=None)

    @property
    def settings(self) -> Settings:
        """Built once per resource, like RagResource's."""
        if self._settings is None:
            overrides = {"data_dir": self.data_dir, "retrieval_mode": self.retrieval_mode,
                         "rerank_model_path": self.rerank_model_path, "semantic_cache": self.semantic_cache}
            self._settings = components.load_settings(**{key: value for key, value in overrides.items()
                                                         if value is not None})
        return self._settings

    @contextmanager
    def retriever(self) -> Iterator[Retriever]:
        """An open retriever, closed on exit (the embedded store allows one process at a time)."""
        retriever = components.open_retriever(self.settings)
        try:
            yield retriever
        finally:
            retriever.close()
