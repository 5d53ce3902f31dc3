"""The chat model interface every provider implements, and the errors its calls raise."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator
from contextlib import closing
from typing import Any

from rag_pipeline.errors import ModelUnavailable
from rag_pipeline.llm.client import ModelServer, Purpose
from rag_pipeline.retry import with_retries


class LLMUnavailable(ModelUnavailable):
    """The model server is unreachable, timed out, failed, refused the API key, or lacks the model."""


class LLMResponseError(ModelUnavailable):
    """The model server answered with something malformed or unexpected."""


CHAT = Purpose(LLMUnavailable, LLMResponseError, "RAG_LLM_TIMEOUT_S or use a smaller model")


class ChatModel(ModelServer):
    """A chat model on a server. Calls stream the reply; connection failures and HTTP 429/5xx are retried with
    exponential backoff before the first piece only (no piece is ever repeated); every failure raises
    LLMUnavailable or LLMResponseError naming the server, the model and what to fix."""

    purpose = CHAT

    def __init__(self, url: str, model: str, *, timeout: float, retries: int, backoff: float) -> None:
        super().__init__(url, model, timeout=timeout, retries=retries, backoff=backoff)
        # Tokens of the most recent completed call ({"prompt_tokens", "completion_tokens"}); None if not reported.
        self.last_usage: dict[str, int] | None = None

    @property
    def name(self) -> str:
        return self.provider

    @abstractmethod
    def _request(self, messages: list[dict[str, str]], response_format: dict[str, Any] | None) -> Iterator[str]:
        """One streamed request: its content pieces; sets last_usage when the stream ends."""

    @abstractmethod
    def status(self) -> dict[str, Any]:
        """{url, model, reachable, model_available, error}: whether the server answers and serves the model
        ("error" says why the model is not usable, None when it is); never raises."""

    def stream_chat(self, messages: list[dict[str, str]], response_format: dict[str, Any] | None = None
                    ) -> Iterator[str]:
        """The reply's content pieces as they arrive. With `response_format` (a JSON schema) the server constrains
        the reply to JSON of that schema; the caller still validates it."""
        self.last_usage = None

        def opened() -> tuple[Iterator[str], str | None]:
            pieces = self._request(messages, response_format)
            return pieces, next(pieces, None)

        try:
            pieces, first = with_retries(opened, self._retryable, self.retries, self.backoff)
            with closing(pieces):
                if first is None:
                    return
                yield first
                yield from pieces
        except self.transport_errors as error:
            raise self._error(error) from error

    def chat(self, messages: list[dict[str, str]], response_format: dict[str, Any] | None = None) -> str:
        """The whole reply to messages."""
        return "".join(self.stream_chat(messages, response_format))

    def complete(self, prompt: str, system: str | None = None) -> str:
        """The reply to one user prompt, after an optional system message."""
        messages = [{"role": "system", "content": system}] if system is not None else []
        return self.chat([*messages, {"role": "user", "content": prompt}])
