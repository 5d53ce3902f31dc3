"""Chat completions from an Ollama server's native API (POST /api/chat, streamed) through the ollama client."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import ollama

from rag_pipeline.llm.base import ChatModel, LLMResponseError, LLMUnavailable
from rag_pipeline.retry import RETRYABLE_ERRORS, retryable_status


def _tagged(model: str) -> str:
    """The model name with Ollama's implicit ":latest" tag made explicit."""
    return model if ":" in model else f"{model}:latest"


class OllamaLLM(ChatModel):
    """A chat model on an Ollama server (`url` without /api). `api_key`, if any, is sent as a bearer token (an
    Ollama behind an authenticating proxy)."""

    name = "ollama"
    transport_errors = (ConnectionError, httpx.HTTPError, ollama.ResponseError, ValueError, AttributeError)

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
        super().__init__(url, model, timeout=timeout, retries=retries, backoff=backoff)
        self.options = {"temperature": temperature, "num_predict": max_tokens, "num_ctx": context_window}
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self._client = ollama.Client(host=url, timeout=timeout, headers=headers)

    def _request(self, messages: list[dict[str, str]], response_format: dict[str, Any] | None) -> Iterator[str]:
        for part in self._client.chat(model=self.model, messages=messages, stream=True, options=self.options,
                                      format=response_format):
            if part.message.content:
                yield part.message.content
            if part.done and part.prompt_eval_count is not None and part.eval_count is not None:
                self.last_usage = {"prompt_tokens": part.prompt_eval_count, "completion_tokens": part.eval_count}

    def _retryable(self, error: Exception) -> bool:
        if isinstance(error, ollama.ResponseError):
            return retryable_status(error.status_code)
        return isinstance(error, RETRYABLE_ERRORS)

    def _error(self, error: Exception) -> LLMUnavailable | LLMResponseError:
        where = f"Ollama at {self.url} (model {self.model!r})"
        if isinstance(error, httpx.TimeoutException):
            return LLMUnavailable(
                f"{where} did not answer within {self.timeout}s; raise RAG_LLM_TIMEOUT_S or use a smaller model"
            )
        if isinstance(error, ollama.ResponseError):
            if error.status_code in (401, 403):
                return LLMUnavailable(f"{where} refused the API key (HTTP {error.status_code}); check RAG_LLM_API_KEY")
            if error.status_code == 404:
                return LLMUnavailable(f"{where}: {error}; run `ollama pull {self.model}` on that server or change "
                                      "RAG_LLM_MODEL (RAG_OLLAMA_CHAT_MODEL)")
            if retryable_status(error.status_code):
                return LLMUnavailable(f"{where} failed: {error}; check the server (RAG_OLLAMA_URL or RAG_LLM_BASE_URL)")
            return LLMResponseError(f"{where} answered with an error: {error}")
        if isinstance(error, (ValueError, AttributeError)):  # undecodable JSON line or unexpected fields
            return LLMResponseError(f"{where} sent a malformed response: {error}")
        return LLMUnavailable(f"{where} unreachable: {error}; check RAG_OLLAMA_URL (or RAG_LLM_BASE_URL)")

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
