"""Build the configured embedder: the packaged (or a local) model on torch or ONNX Runtime, or an Ollama or
OpenAI-compatible server; one per configuration and process."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Literal

from rag_pipeline.embedder import (
    Embedder,
    EmbedderUnavailable,
    OllamaEmbedder,
    OpenAIEmbedder,
    SentenceTransformerEmbedder,
)
from rag_pipeline.onnx_embedder import OnnxEmbedder

Backend = Literal["sentence_transformers", "ollama", "openai"]
Runtime = Literal["onnx-int8", "onnx", "torch"]


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
        return OnnxEmbedder(model_path, Path(onnx_cache_dir), runtime, batch_size=batch_size)
    return SentenceTransformerEmbedder(model_path, batch_size=batch_size)


@functools.cache
def shared_embedder(**options: Any) -> Embedder:
    """One embedder per configuration (build_embedder's keyword arguments) and process: loading a model takes
    seconds."""
    return build_embedder(**options)
