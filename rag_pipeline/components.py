"""The configured components, built from Settings: embedder, vector store, reranker, LLM and the retriever.

The Dagster resources, the HTTP API and the CLI all build their components here, so they agree on models,
collections and retrieval defaults.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

from rag_pipeline.embedder import Embedder, EmbedderUnavailable, declared_dimension
from rag_pipeline.embedder_factory import shared_embedder
from rag_pipeline.errors import ConfigError
from rag_pipeline.generate.answerer import Answerer, GuardrailSettings
from rag_pipeline.generate.generators import ExtractiveGenerator, Generator, LLMGenerator
from rag_pipeline.index.factory import alias_target, collection_exists, open_vector_store, point_alias
from rag_pipeline.index.generations import Generation, GenerationRegistry, new_generation
from rag_pipeline.index.sidecar import Sidecar
from rag_pipeline.index.sparse import SPARSE_ID
from rag_pipeline.index.vector_store import HnswSettings, VectorStore, collection_name
from rag_pipeline.llm import NO_LLM, build_llm
from rag_pipeline.query_batcher import QueryBatcher
from rag_pipeline.retrieve.hyde import Hyde
from rag_pipeline.retrieve.rerank import Reranker
from rag_pipeline.retrieve.retriever import RetrievalSettings, Retriever
from rag_pipeline.retrieve.semantic_cache import SemanticCache, cache_collection
from rag_pipeline.settings import Settings
from rag_pipeline.structured.registry import declared_fields

HYDE_TEMPERATURE = 0.7  # hypothetical documents should differ from each other (the HyDE paper's setting)
HYDE_MAX_TOKENS = 256  # a passage, not an essay


def embedder(settings: Settings) -> Embedder:
    """The configured embedder, one per process; EmbedderUnavailable when it cannot be loaded or reached."""
    key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
    return shared_embedder(backend=settings.embedding_backend, model_path=settings.embedding_model_path,
                           runtime=settings.embedding_runtime, onnx_cache_dir=str(settings.onnx_models_dir),
                           ollama_url=settings.ollama_url, ollama_model=settings.ollama_embed_model,
                           openai_url=settings.embedding_url, openai_model=settings.openai_embed_model, api_key=key,
                           batch_size=settings.embedding_batch_size, timeout=settings.embedding_timeout_s,
                           retries=settings.embedding_retries)


def embedding_dimension(settings: Settings) -> int:
    """The model's dimension (it names the collection), read from the model files when they declare it, so a
    status check does not load the model."""
    declared = None
    if settings.embedding_backend == "sentence_transformers":
        declared = declared_dimension(settings.embedding_model_path)
    return declared or embedder(settings).dimension


def open_store(settings: Settings, collection: str | None = None, dimension: int | None = None) -> VectorStore:
    """The chunk collection of the configured model (or `collection`), embedded unless RAG_QDRANT_URL is set."""
    return open_vector_store(
        data_dir=settings.data_dir, model_id=settings.embedding_model_id,
        dimension=dimension or embedding_dimension(settings), qdrant_url=settings.qdrant_url,
        qdrant_api_key=settings.qdrant_api_key, collection=collection,
        hnsw=HnswSettings(m=settings.hnsw_m, ef_construct=settings.hnsw_ef_construct, ef=settings.hnsw_ef),
    )


def embedding_settings(settings: Settings) -> dict[str, str | None]:
    """The settings a query embedder of this model needs (recorded with each index generation)."""
    return {"embedding_backend": settings.embedding_backend, "embedding_model_path": settings.embedding_model_path,
            "embedding_runtime": settings.embedding_runtime,
            "ollama_embed_model": settings.ollama_embed_model, "openai_embed_model": settings.openai_embed_model}


def generations(settings: Settings) -> GenerationRegistry:
    return GenerationRegistry(settings.data_dir)


def target_generation(settings: Settings) -> Generation:
    """The generation the settings describe, registered (an index made before generations existed is adopted as
    the active generation first, so an unchanged configuration keeps using it)."""
    dimension = embedding_dimension(settings)
    registry = generations(settings)
    if not registry.exists():
        adopt_legacy_collection(settings, registry, dimension)
    return registry.register(new_generation(settings.embedding_model_id, dimension, settings.chunking_id, SPARSE_ID,
                                            embedding_settings(settings)))


def adopt_legacy_collection(settings: Settings, registry: GenerationRegistry, dimension: int) -> None:
    """Register the collection of a data dir from before generations (named after the model only) as the active
    generation, with the chunk settings its sidecar records."""
    legacy = collection_name(settings.embedding_model_id, dimension)
    if not collection_exists(settings.data_dir, legacy, settings.qdrant_url, settings.qdrant_api_key):
        return
    rows = Sidecar(settings.sidecar_path).query(
        "SELECT chunk_set FROM documents WHERE chunk_set IS NOT NULL GROUP BY chunk_set ORDER BY count(*) DESC LIMIT 1")
    chunking = rows[0]["chunk_set"] if rows else settings.chunking_id
    generation = new_generation(settings.embedding_model_id, dimension, chunking, SPARSE_ID,
                                embedding_settings(settings), collection=legacy)
    activate_generation(settings, registry.register(generation))


def activate_generation(settings: Settings, generation: Generation) -> str | None:
    """Point queries at `generation` (the registry pointer; on a server also the alias, moved atomically);
    returns the previously active generation's id."""
    if settings.qdrant_url:
        point_alias(settings.qdrant_url, settings.qdrant_api_key, settings.qdrant_alias, generation.collection)
    return generations(settings).activate(generation)


def open_generation(settings: Settings, generation: Generation) -> VectorStore:
    """The collection of a generation (to build or purge it)."""
    return open_store(settings, generation.collection, generation.dimension)


@contextmanager
def vector_store(settings: Settings) -> Iterator[VectorStore]:
    """The collection of the generation the settings describe (the one ingest builds), closed on exit (the
    embedded engine allows one process at a time)."""
    store = open_generation(settings, target_generation(settings))
    try:
        yield store
    finally:
        store.close()


@contextmanager
def query_store(settings: Settings) -> Iterator[VectorStore]:
    """The collection queries use (the active generation's; the target's before any is active), closed on exit."""
    store = open_store(*query_settings(settings))
    try:
        yield store
    finally:
        store.close()


def query_settings(settings: Settings) -> tuple[Settings, str, int]:
    """(settings with the embedding model of the generation queries use, the collection they open, its dimension):
    the active generation (on a server the one the alias names, opened through the alias), else, before any is
    active, the one the settings describe."""
    registry = generations(settings)
    active = registry.active()
    if settings.qdrant_url:  # the alias is what queries follow: the generation is the one whose collection it names
        aliased = alias_target(settings.qdrant_url, settings.qdrant_api_key, settings.qdrant_alias)
        active = next((g for g in registry.all().values() if g.collection == aliased), None) if aliased else None
    if active is None:
        target = target_generation(settings)
        return settings, target.collection, target.dimension
    collection = settings.qdrant_alias if settings.qdrant_url else active.collection
    embedding = {"embedding_runtime": "torch", **active.embedding}  # generations from before runtimes: torch
    if "embedding_runtime" in settings.model_fields_set and active.model_id == settings.embedding_model_id:
        embedding["embedding_runtime"] = settings.embedding_runtime  # torch and onnx (fp32) share one generation
    return settings.model_copy(update=embedding), collection, active.dimension


@functools.cache
def shared_reranker(model_path: str) -> Reranker:
    return Reranker(model_path)


def retrieval_settings(settings: Settings) -> RetrievalSettings:
    weights = tuple(settings.fusion_weights) if settings.fusion_weights else None
    return RetrievalSettings(
        mode=settings.retrieval_mode, fusion=settings.fusion, rrf_k=settings.rrf_k, weights=weights,
        prefetch_multiplier=settings.prefetch_multiplier, alpha=settings.blend_alpha,
        fragments=settings.query_fragments, dedupe=settings.dedupe, dedupe_cosine=settings.dedupe_cosine,
        mmr_lambda=settings.mmr_lambda, score_threshold=settings.score_threshold,
        coverage_margin=settings.coverage_margin, candidate_multiplier=settings.candidate_multiplier,
        filterable={name: spec.kind or "string" for name, spec in declared_fields(settings).items()
                    if spec.filterable},
    )


def open_retriever(settings: Settings, *, semantic_cache: bool | None = None, batch_queries: bool = False
                   ) -> Retriever:
    """The retriever of the configured store, models and retrieval settings; close() it when done. With
    `batch_queries` (a server's), concurrent searches embed their queries together (RAG_QUERY_BATCH_WINDOW_MS).

    An embedder that cannot be loaded leaves retrieval BM25-only (each result says so); a configured reranker
    or HyDE that cannot be set up is a configuration error and raises.
    """
    settings, collection, dimension = query_settings(settings)
    try:
        query_embedder: Embedder | None = embedder(settings)
    except EmbedderUnavailable:
        query_embedder = None  # searches fall back to BM25 and warn
    if batch_queries and query_embedder is not None and settings.query_batch_window_ms > 0:
        query_embedder = QueryBatcher(query_embedder, settings.query_batch_window_ms)
    reranker = shared_reranker(settings.rerank_model_path) if settings.rerank_model_path else None
    hyde = None
    if settings.hyde != "off":
        llm = build_llm(settings, temperature=HYDE_TEMPERATURE, max_tokens=HYDE_MAX_TOKENS)
        if llm is None:
            raise ConfigError(f"RAG_HYDE={settings.hyde} needs an LLM: {NO_LLM} (or RAG_HYDE=off)")
        if query_embedder is None:
            raise EmbedderUnavailable("HyDE needs the embedding model, which cannot be loaded")
        hyde = Hyde(llm, query_embedder, settings.hyde, settings.hyde_documents, settings.hyde_adaptive_threshold)
    store = open_store(settings, collection, dimension)
    cache = None
    if settings.semantic_cache if semantic_cache is None else semantic_cache:
        try:
            cache_store = open_store(settings, cache_collection(store.collection), dimension)
        except BaseException:
            store.close()
            raise
        cache = SemanticCache(cache_store, store.index_version, min_cosine=settings.semantic_cache_min_cosine,
                              ttl_s=settings.semantic_cache_ttl_s)
    return Retriever(store, query_embedder, retrieval_settings(settings), reranker=reranker,
                     rerank_multiplier=settings.rerank_candidate_multiplier,
                     rerank_min_score=settings.rerank_min_score, cache=cache, hyde=hyde)


def guardrail_settings(settings: Settings) -> GuardrailSettings:
    return GuardrailSettings(scan=settings.guard_scan, spotlight=settings.guard_spotlight,
                             hierarchy=settings.guard_hierarchy, output=settings.guard_output)


def answerer(settings: Settings, retriever: Retriever) -> Answerer:
    """The configured answerer over `retriever`: generator, guardrail layers, budget and chunk filter."""
    chat = build_llm(settings)
    if settings.generator == "llm" and chat is None:
        raise ConfigError(f"RAG_GENERATOR={settings.generator} needs an LLM: {NO_LLM}")
    if settings.chunk_filter and chat is None:
        raise ConfigError(f"RAG_CHUNK_FILTER=true needs an LLM: {NO_LLM}")
    extractive = ExtractiveGenerator(retriever.embedder, threshold=settings.extractive_threshold)
    generator: Generator = LLMGenerator(chat) if chat is not None and settings.generator != "extractive" \
        else extractive
    return Answerer(retriever, generator, guardrails=guardrail_settings(settings),
                    budget_tokens=settings.context_budget_tokens,
                    chunk_filter=chat if settings.chunk_filter else None,
                    chunk_filter_threshold=settings.chunk_filter_threshold, fallback=extractive)
