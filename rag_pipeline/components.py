"""The configured components, built from Settings: embedder, vector store, reranker, LLM and the retriever.

The Dagster resources, the HTTP API and the CLI all build their components here, so they agree on models,
collections and retrieval defaults.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Literal

from rag_pipeline.embed.batcher import QueryBatcher
from rag_pipeline.embed.embedder import Embedder, EmbedderUnavailable
from rag_pipeline.embed.model_files import declared_dimension
from rag_pipeline.embed.onnx_embedder import OnnxEmbedder
from rag_pipeline.embed.openvino_embedder import OpenVinoEmbedder
from rag_pipeline.embed.torch_embedder import SentenceTransformerEmbedder
from rag_pipeline.errors import ConfigError
from rag_pipeline.fields.registry import declared_fields
from rag_pipeline.generate.answerer import Answerer, GuardrailSettings
from rag_pipeline.generate.generators import ExtractiveGenerator, Generator, LLMGenerator
from rag_pipeline.index.generations import load_settings  # noqa: F401  (the entry points' settings, here too)
from rag_pipeline.index.lifecycle import IndexGenerations, QueryTarget
from rag_pipeline.llm import NO_LLM, build_llm
from rag_pipeline.llm.ollama import OllamaEmbedder
from rag_pipeline.llm.openai import OpenAIEmbedder
from rag_pipeline.retrieve.hyde import Hyde
from rag_pipeline.retrieve.rerank import Reranker
from rag_pipeline.retrieve.retriever import RetrievalSettings, Retriever
from rag_pipeline.retrieve.semantic_cache import SemanticCache, cache_collection
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar


HYDE_TEMPERATURE = 0.7  # hypothetical documents should differ from each other (the HyDE paper's setting)
HYDE_MAX_TOKENS = 256  # a passage, not an essay


Backend = Literal["sentence_transformers", "ollama", "openai"]
Runtime = Literal["onnx-int8", "openvino-bf16", "onnx", "torch"]


def build_embedder(
    *,
    backend: Backend = "sentence_transformers",
    model_path: str | None = None,
    runtime: Runtime = "torch",
    onnx_cache_dir: str | None = None,
    ollama_url: str | None = None,
    ollama_model: str = "nomic-embed-text",
    openai_url: str | None = None,
    openai_model: str = "text-embedding-3-small",
    api_key: str | None = None,
    batch_size: int = 64,
    timeout: float = 60.0,
    retries: int = 2,
) -> Embedder:
    """The configured embedder; raises EmbedderUnavailable if it cannot be loaded or reached."""
    if backend == "ollama":
        if not ollama_url:
            raise EmbedderUnavailable("the ollama embedding backend needs an Ollama URL (RAG_OLLAMA_URL)")
        return OllamaEmbedder(ollama_url, model=ollama_model, batch_size=batch_size, timeout=timeout,
                              retries=retries)
    if backend == "openai":
        if not openai_url:
            raise EmbedderUnavailable("the openai embedding backend needs a server URL: set RAG_EMBEDDING_BASE_URL "
                                      "(or RAG_LLM_BASE_URL), e.g. http://host:8000/v1")
        return OpenAIEmbedder(openai_url, model=openai_model, api_key=api_key, batch_size=batch_size,
                              timeout=timeout, retries=retries)
    if runtime != "torch":
        if not onnx_cache_dir:
            raise EmbedderUnavailable(f"the {runtime} runtime needs a directory for the exported model")
        if runtime == "openvino-bf16":
            return OpenVinoEmbedder(model_path, Path(onnx_cache_dir))
        return OnnxEmbedder(model_path, Path(onnx_cache_dir), runtime, batch_size=batch_size)
    return SentenceTransformerEmbedder(model_path, batch_size=batch_size)


@functools.cache
def shared_embedder(**options: Any) -> Embedder:
    """One embedder per configuration (build_embedder's keyword arguments) and process: loading a model takes
    seconds."""
    return build_embedder(**options)


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


def generations(settings: Settings) -> IndexGenerations:
    """The index generations of the deployment: the one ingest builds, the one queries use, the switch."""
    return IndexGenerations(settings, dimension=lambda: embedding_dimension(settings),
                            legacy_chunking=lambda: Sidecar(settings.sidecar_location).most_common_chunk_set())


def query_settings(settings: Settings) -> tuple[Settings, QueryTarget]:
    """(the settings with the embedding model of the generation queries use, what queries open)."""
    target = generations(settings).queried()
    return settings.model_copy(update=target.embedding), target


@functools.cache
def shared_reranker(model_path: str) -> Reranker:
    return Reranker(model_path)


def retrieval_settings(settings: Settings) -> RetrievalSettings:
    weights = tuple(settings.fusion_weights) if settings.fusion_weights else None
    return RetrievalSettings(
        mode=settings.retrieval_mode, fusion=settings.fusion, rrf_k=settings.rrf_k, weights=weights,
        prefetch_multiplier=settings.prefetch_multiplier, prefetch_floor=settings.prefetch_floor,
        alpha=settings.blend_alpha, fragments=settings.query_fragments, dedupe=settings.dedupe,
        dedupe_cosine=settings.dedupe_cosine,
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
    settings, target = query_settings(settings)
    index = generations(settings)
    try:
        loaded = embedder(settings)
        loaded.prepare_queries()  # the first search does not wait for it
        query_embedder: Embedder | None = loaded
        embedder_error = None
    except EmbedderUnavailable as error:
        query_embedder = None  # searches fall back to BM25 and warn, saying why
        embedder_error = f"the embedding model cannot be loaded: {error}"
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
    store = index.open(collection=target.collection, dimension=target.dimension)
    cache = None
    if settings.semantic_cache if semantic_cache is None else semantic_cache:
        try:
            cache_store = index.open(collection=cache_collection(store.collection), dimension=target.dimension)
        except BaseException:
            store.close()
            raise
        cache = SemanticCache(cache_store, store.index_version, min_cosine=settings.semantic_cache_min_cosine,
                              ttl_s=settings.semantic_cache_ttl_s)
    return Retriever(store, query_embedder, retrieval_settings(settings), reranker=reranker,
                     rerank_multiplier=settings.rerank_candidate_multiplier,
                     rerank_min_score=settings.rerank_min_score, cache=cache, hyde=hyde,
                     embedder_error=embedder_error)


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
