"""Model servers for every LLM use (generator, HyDE, chunk filter, judge, field enrichment) and for server-side
embeddings: Ollama's native API or any OpenAI-compatible server, over one client base (llm/client.py), behind the
ChatModel and Embedder interfaces."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rag_pipeline.llm.base import ChatModel, LLMResponseError, LLMUnavailable
from rag_pipeline.llm.ollama import OllamaLLM
from rag_pipeline.llm.openai import OpenAIChatModel

if TYPE_CHECKING:
    from rag_pipeline.settings import Settings

__all__ = ["ChatModel", "LLMResponseError", "LLMUnavailable", "NO_LLM", "OllamaLLM", "OpenAIChatModel", "build_llm"]

# What a feature that needs an LLM tells the user to set when none is configured.
NO_LLM = "set RAG_OLLAMA_URL, or RAG_LLM_PROVIDER=openai with RAG_LLM_BASE_URL and RAG_LLM_MODEL"


def build_llm(settings: Settings, *, temperature: float | None = None, max_tokens: int | None = None
              ) -> ChatModel | None:
    """The configured chat model, or None when no provider is configured (Ollama without RAG_LLM_BASE_URL or
    RAG_OLLAMA_URL, OpenAI without RAG_LLM_BASE_URL). `temperature` and `max_tokens` override the settings for a
    caller with other needs (HyDE)."""
    url = settings.llm_url
    if not url:
        return None
    common = {
        "api_key": settings.llm_api_key.get_secret_value() if settings.llm_api_key else None,
        "temperature": settings.llm_temperature if temperature is None else temperature,
        "max_tokens": settings.llm_max_tokens if max_tokens is None else max_tokens,
        "timeout": settings.llm_timeout_s,
        "retries": settings.llm_retries,
    }
    if settings.llm_provider == "openai":
        assert settings.llm_model is not None  # the settings refuse an OpenAI base URL without a model
        return OpenAIChatModel(url, settings.llm_model, **common)
    return OllamaLLM(url, settings.llm_model or settings.ollama_chat_model,
                     context_window=settings.llm_context_window, **common)
