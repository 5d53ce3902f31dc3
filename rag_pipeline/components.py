"""The configured components, built from Settings: embedder, vector store, reranker, LLM and the retriever.

The Dagster resources, the HTTP API and the CLI all build their components here, so they agree on models,
collections and retrieval defaults.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

from rag_pipeline.embedder import Embedder, EmbedderUnavailable, declared_dimension, shared_embedder
from rag_pipeline.errors import ConfigError
from rag_pipeline.generate.answerer import Answerer, GuardrailSettings
from rag_pipeline.generate.generators import ExtractiveGenerator, Generator, OllamaGenerator
from rag_pipeline.index.factory import open_vector_store
from rag_pipeline.index.vector_store import HnswSettings, VectorStore
from rag_pipeline.llm import build_llm
from rag_pipeline.retrieve.hyde import Hyde
from rag_pipeline.retrieve.rerank import Reranker
from rag_pipeline.retrieve.retriever import RetrievalSettings, Retriever
from rag_pipeline.retrieve.semantic_cache import SemanticCache, cache_collection
from rag_pipeline.settings import Settings

HYDE_TEMPERATURE = 0.7  # hypothetical documents should differ from each other (the HyDE paper's setting)
HYDE_MAX_TOKENS = 256  # a passage, not an essay


def embedder(settings: Settings) -> Embedder:
    """The configured embedder, one per process; EmbedderUnavailable when it cannot be loaded or reached."""
    return shared_embedder(settings.embedding_backend, settings.embedding_model_path, settings.ollama_url,
                           settings.ollama_embed_model, settings.embedding_batch_size)


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


@contextmanager
def vector_store(settings: Settings) -> Iterator[VectorStore]:
    """The chunk collection, closed on exit (the embedded engine allows one process at a time)."""
    store = open_store(settings)
    try:
        yield store
    finally:
        store.close()


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
    )


def open_retriever(settings: Settings, *, semantic_cache: bool | None = None) -> Retriever:
    """The retriever of the configured store, models and retrieval settings; close() it when done.

    An embedder that cannot be loaded leaves retrieval BM25-only (each result says so); a configured reranker
    or HyDE that cannot be set up is a configuration error and raises.
    """
    try:
        query_embedder: Embedder | None = embedder(settings)
    except EmbedderUnavailable:
        query_embedder = None  # searches fall back to BM25 and warn
    dimension = query_embedder.dimension if query_embedder else embedding_dimension(settings)
    reranker = shared_reranker(settings.rerank_model_path) if settings.rerank_model_path else None
    hyde = None
    if settings.hyde != "off":
        if not settings.ollama_url:
            raise ConfigError(f"RAG_HYDE={settings.hyde} needs an LLM: set RAG_OLLAMA_URL (or RAG_HYDE=off)")
        if query_embedder is None:
            raise EmbedderUnavailable("HyDE needs the embedding model, which cannot be loaded")
        llm = build_llm(settings, temperature=HYDE_TEMPERATURE, max_tokens=HYDE_MAX_TOKENS)
        hyde = Hyde(llm, query_embedder, settings.hyde, settings.hyde_documents, settings.hyde_adaptive_threshold)
    store = open_store(settings, dimension=dimension)
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
    if settings.generator == "ollama" and chat is None:
        raise ConfigError("RAG_GENERATOR=ollama needs RAG_OLLAMA_URL")
    if settings.chunk_filter and chat is None:
        raise ConfigError("RAG_CHUNK_FILTER=true needs an LLM: set RAG_OLLAMA_URL")
    extractive = ExtractiveGenerator(retriever.embedder, threshold=settings.extractive_threshold)
    generator: Generator = OllamaGenerator(chat) if chat is not None and settings.generator != "extractive" \
        else extractive
    return Answerer(retriever, generator, guardrails=guardrail_settings(settings),
                    budget_tokens=settings.context_budget_tokens,
                    chunk_filter=chat if settings.chunk_filter else None,
                    chunk_filter_threshold=settings.chunk_filter_threshold, fallback=extractive)
