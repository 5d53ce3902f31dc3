"""Ollama's native API through the ollama client: chat completions (POST /api/chat, streamed) and embeddings
(POST /api/embed, batched)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import numpy as np
import ollama

from rag_pipeline.embed.embedder import Embedder, normalise
from rag_pipeline.errors import ModelUnavailable
from rag_pipeline.llm.base import ChatModel
from rag_pipeline.llm.client import EMBEDDING, ModelServer
from rag_pipeline.retry import RETRYABLE_ERRORS, retryable_status

# Task prefixes some Ollama embedding models are trained with: (document prefix, query prefix).
_EMBED_PREFIXES = {"nomic-embed-text": ("search_document: ", "search_query: ")}


def _tagged(model: str) -> str:
    """The model name with Ollama's implicit ":latest" tag made explicit."""
    return model if ":" in model else f"{model}:latest"


class OllamaServer(ModelServer):
    """A model on an Ollama server (`url` without /api). `api_key`, if any, is sent as a bearer token (an Ollama
    behind an authenticating proxy)."""

    provider = "ollama"
    transport_errors = (ConnectionError, httpx.HTTPError, ollama.ResponseError, ValueError, AttributeError)

    def __init__(self, url: str, model: str, *, api_key: str | None = None, timeout: float, retries: int,
                 backoff: float) -> None:
        super().__init__(url, model, timeout=timeout, retries=retries, backoff=backoff)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self._client = ollama.Client(host=url, timeout=timeout, headers=headers)

    def where(self) -> str:
        return f"Ollama at {self.url} (model {self.model!r})"

    def _retryable(self, error: Exception) -> bool:
        if isinstance(error, ollama.ResponseError):
            return retryable_status(error.status_code)
        return isinstance(error, RETRYABLE_ERRORS)

    def _error(self, error: Exception) -> ModelUnavailable:
        where, purpose = self.where(), self.purpose
        if isinstance(error, httpx.TimeoutException):
            return self._timed_out()
        if isinstance(error, ollama.ResponseError):
            if error.status_code in (401, 403):
                return purpose.unavailable(f"{where} refused the API key (HTTP {error.status_code}); check "
                                           "RAG_LLM_API_KEY")
            if error.status_code == 404:
                return purpose.unavailable(f"{where}: {error}; run `ollama pull {self.model}` on that server or "
                                           f"change {self.model_setting}")
            if retryable_status(error.status_code):
                return purpose.unavailable(f"{where} failed: {error}; check the server ({self.url_setting})")
            return purpose.malformed(f"{where} answered with an error: {error}")
        if isinstance(error, (ValueError, AttributeError)):  # undecodable JSON line or unexpected fields
            return purpose.malformed(f"{where} sent a malformed response: {error}")
        return purpose.unavailable(f"{where} unreachable: {error}; check {self.url_setting}")


class OllamaLLM(OllamaServer, ChatModel):
    """A chat model on an Ollama server."""

    url_setting = "RAG_OLLAMA_URL (or RAG_LLM_BASE_URL)"
    model_setting = "RAG_LLM_MODEL (RAG_OLLAMA_CHAT_MODEL)"

    def __init__(
        self,
        url: str,
        model: str = "llama3.2",
        *,
        api_key: str | None = None,
        temperature: float = 0.1,
        max_tokens: int = 512,
        context_window: int = 8192,
        timeout: float = 60.0,
        retries: int = 2,
        backoff: float = 0.5,
    ) -> None:
        super().__init__(url, model, api_key=api_key, timeout=timeout, retries=retries, backoff=backoff)
        self.options = {"temperature": temperature, "num_predict": max_tokens, "num_ctx": context_window}

    def _request(self, messages: list[dict[str, str]], response_format: dict[str, Any] | None) -> Iterator[str]:
        for part in self._client.chat(model=self.model, messages=messages, stream=True, options=self.options,
                                      format=response_format):
            if part.message.content:
                yield part.message.content
            if part.done and part.prompt_eval_count is not None and part.eval_count is not None:
                self.last_usage = {"prompt_tokens": part.prompt_eval_count, "completion_tokens": part.eval_count}

    def status(self) -> dict[str, Any]:
        """Whether the server answers GET /api/tags and lists the model; never raises."""
        result: dict[str, Any] = {"url": self.url, "model": self.model, "reachable": False, "model_available": False}
        try:
            names = {_tagged(model.model or "") for model in self._client.list().models}
        except Exception as error:  # status is a health probe: report every failure instead of raising
            return {**result, "error": str(self._error(error))}
        available = _tagged(self.model) in names
        error = None if available else f"model {self.model!r} not on the server; run `ollama pull {self.model}` there"
        return {**result, "reachable": True, "model_available": available, "error": error}


class OllamaEmbedder(OllamaServer, Embedder):
    """Embeddings from an Ollama server's POST /api/embed, in batches; probes the server once at init (the
    dimension). Connection failures and HTTP 429/5xx are retried `retries` times with exponential backoff; a call
    times out after `timeout` seconds."""

    purpose = EMBEDDING
    url_setting = "RAG_OLLAMA_URL"
    model_setting = "RAG_OLLAMA_EMBED_MODEL"

    def __init__(self, url: str, model: str = "nomic-embed-text", batch_size: int = 64, timeout: float = 60.0,
                 retries: int = 2, backoff: float = 0.5) -> None:
        super().__init__(url, model, timeout=timeout, retries=retries, backoff=backoff)
        self.batch_size = batch_size
        self._document_prefix, self._query_prefix = _EMBED_PREFIXES.get(model.split(":")[0], ("", ""))
        self.dimension = len(self._embed(["dimension"])[0])

    def _embed(self, texts: list[str]) -> Sequence[Sequence[float]]:
        """One /api/embed call (retried); every failure becomes EmbedderUnavailable naming the server and model."""
        embeddings = self._call(lambda: self._client.embed(model=self.model, input=texts).embeddings)
        if len(embeddings) != len(texts):
            raise self.purpose.unavailable(f"{self.where()} returned {len(embeddings)} embeddings for {len(texts)} "
                                           "inputs")
        return embeddings

    def _embed_batched(self, texts: list[str]) -> np.ndarray:
        vectors = [vector for start in range(0, len(texts), self.batch_size)
                   for vector in self._embed(texts[start: start + self.batch_size])]
        return normalise(np.array(vectors, dtype=np.float32).reshape(len(texts), self.dimension))

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed_batched([self._document_prefix + text for text in texts])

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_queries([text])[0]

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed_batched([self._query_prefix + text for text in texts])
