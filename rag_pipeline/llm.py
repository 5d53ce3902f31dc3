"""Chat completions from an Ollama server (POST /api/chat, streamed), with retries and actionable errors."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import httpx
import ollama

from rag_pipeline.errors import ModelUnavailable

if TYPE_CHECKING:
    from rag_pipeline.settings import Settings

# Failures worth retrying before the first token: the connection could not be made or was dropped.
# Timeouts are not retried: a server that is too slow once is too slow again.
_RETRYABLE = (ConnectionError, httpx.NetworkError, httpx.RemoteProtocolError)


class LLMUnavailable(ModelUnavailable):
    """The Ollama server is unreachable, timed out, failed, or lacks the model."""


class LLMResponseError(ModelUnavailable):
    """The Ollama server answered with something malformed or unexpected."""


def _tagged(model: str) -> str:
    """The model name with Ollama's implicit ":latest" tag made explicit."""
    return model if ":" in model else f"{model}:latest"


class OllamaLLM:
    """A chat model on an Ollama server, called through the ollama client."""

    name = "ollama"

    def __init__(
        self,
        url: str,
        model: str = "llama3.2",
        *,
        temperature: float = 0.1,
        max_tokens: int = 512,
        context_window: int = 8192,
        timeout: float = 60.0,
        retries: int = 2,
        backoff: float = 0.5,
    ) -> None:
        self.url = url
        self.model = model
        self.model_id = f"ollama/{model}"
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.options = {"temperature": temperature, "num_predict": max_tokens, "num_ctx": context_window}
        self._client = ollama.Client(host=url, timeout=timeout)

    def _error(self, error: Exception) -> LLMUnavailable | LLMResponseError:
        """The exception to raise for a failed request, naming the server, the model and what to fix."""
        where = f"Ollama at {self.url} (model {self.model!r})"
        if isinstance(error, httpx.TimeoutException):
            return LLMUnavailable(
                f"{where} did not answer within {self.timeout}s; raise RAG_LLM_TIMEOUT_S or use a smaller model"
            )
        if isinstance(error, ollama.ResponseError):
            if error.status_code == 404:
                return LLMUnavailable(
                    f"{where}: {error}; run `ollama pull {self.model}` on that server or change RAG_OLLAMA_CHAT_MODEL"
                )
            if error.status_code >= 500:
                return LLMUnavailable(f"{where} failed: {error}; check the server at RAG_OLLAMA_URL")
            return LLMResponseError(f"{where} answered with an error: {error}")
        if isinstance(error, (ValueError, AttributeError)):  # undecodable JSON line or unexpected fields
            return LLMResponseError(f"{where} sent a malformed response: {error}")
        return LLMUnavailable(f"{where} unreachable: {error}; check RAG_OLLAMA_URL")

    def stream_chat(self, messages: list[dict[str, str]], response_format: dict[str, Any] | None = None
                    ) -> Iterator[str]:
        """The reply's content pieces as they arrive; with `response_format` (a JSON schema), the server constrains
        the reply to JSON of that schema (Ollama's structured outputs). The caller still validates it.

        Connection failures and HTTP 5xx are retried with exponential backoff, but only before the first piece
        has been yielded, so no piece is ever repeated. Every failure raises LLMUnavailable or LLMResponseError.
        """
        for attempt in range(self.retries + 1):
            started = False
            try:
                for part in self._client.chat(model=self.model, messages=messages, stream=True, options=self.options,
                                              format=response_format):
                    if part.message.content:
                        started = True
                        yield part.message.content
                return
            except ollama.ResponseError as error:
                if started or attempt == self.retries or error.status_code < 500:
                    raise self._error(error) from error
            except _RETRYABLE as error:
                if started or attempt == self.retries:
                    raise self._error(error) from error
            except (httpx.HTTPError, ValueError, AttributeError) as error:
                raise self._error(error) from error
            time.sleep(self.backoff * 2**attempt)

    def chat(self, messages: list[dict[str, str]], response_format: dict[str, Any] | None = None) -> str:
        """The whole reply to messages."""
        return "".join(self.stream_chat(messages, response_format))

    def complete(self, prompt: str, system: str | None = None) -> str:
        """The reply to one user prompt, after an optional system message."""
        messages = [{"role": "system", "content": system}] if system is not None else []
        return self.chat([*messages, {"role": "user", "content": prompt}])

    def status(self) -> dict[str, Any]:
        """Whether the server answers GET /api/tags and lists the model; never raises.

        "error" explains why the model is not usable (None when it is).
        """
        result: dict[str, Any] = {"url": self.url, "model": self.model, "reachable": False, "model_available": False}
        try:
            names = {_tagged(model.model or "") for model in self._client.list().models}
        except Exception as error:  # status is a health probe: report every failure instead of raising
            return {**result, "error": str(self._error(error))}
        available = _tagged(self.model) in names
        error = None if available else f"model {self.model!r} not on the server; run `ollama pull {self.model}` there"
        return {**result, "reachable": True, "model_available": available, "error": error}


def build_llm(settings: Settings, *, temperature: float | None = None, max_tokens: int | None = None
              ) -> OllamaLLM | None:
    """The configured LLM, or None when no Ollama URL (RAG_OLLAMA_URL) is set. `temperature` and `max_tokens`
    override the settings for a caller with other needs (HyDE)."""
    if not settings.ollama_url:
        return None
    return OllamaLLM(
        settings.ollama_url,
        model=settings.ollama_chat_model,
        temperature=settings.llm_temperature if temperature is None else temperature,
        max_tokens=settings.llm_max_tokens if max_tokens is None else max_tokens,
        context_window=settings.llm_context_window,
        timeout=settings.llm_timeout_s,
        retries=settings.llm_retries,
    )
