"""One model on a model server: where it is, how long a request may take, how often a failed one is retried, and
how a failure becomes an error that names the server, the model and the setting to fix. The chat models and the
embedders of every provider share it (a provider's module says how its transport fails)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from rag_pipeline.embed.embedder import EmbedderUnavailable
from rag_pipeline.errors import ModelUnavailable
from rag_pipeline.retry import with_retries

T = TypeVar("T")


@dataclass(frozen=True)
class Purpose:
    """What a model is used for: the error a failure raises and the settings its messages name."""

    unavailable: type[ModelUnavailable]  # a server that cannot be reached, refuses, or lacks the model
    malformed: type[ModelUnavailable]  # a server that answers outside its protocol
    timeout_setting: str  # RAG_..._TIMEOUT_S


class ModelServer(ABC):
    """A model on a server. `purpose` picks the errors and settings; a provider subclass says which transport
    errors a request may raise, which are worth retrying, and how each becomes our error."""

    provider: str  # "ollama" | "openai"
    purpose: Purpose
    url_setting: str  # the settings that name the server
    model_setting: str  # the settings that name the model
    transport_errors: tuple[type[Exception], ...]

    def __init__(self, url: str, model: str, *, timeout: float, retries: int, backoff: float) -> None:
        self.url = url
        self.model = model
        self.model_id = f"{self.provider}/{model}"
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff

    @abstractmethod
    def where(self) -> str:
        """The server and model, as an error message names them."""

    @abstractmethod
    def _retryable(self, error: Exception) -> bool:
        """Whether a transport error is worth another request (a connection failure, HTTP 429 or 5xx)."""

    @abstractmethod
    def _error(self, error: Exception) -> ModelUnavailable:
        """The exception to raise for a failed request, naming the server, the model and what to fix."""

    def _timed_out(self) -> ModelUnavailable:
        return self.purpose.unavailable(f"{self.where()} did not answer within {self.timeout}s; raise "
                                        f"{self.purpose.timeout_setting}")

    def _call(self, request: Callable[[], T]) -> T:
        """request(), retried after a retryable failure; a transport failure is raised as `_error`'s."""
        try:
            return with_retries(request, self._retryable, self.retries, self.backoff)
        except self.transport_errors as error:
            raise self._error(error) from error


EMBEDDING = Purpose(EmbedderUnavailable, EmbedderUnavailable, "RAG_EMBEDDING_TIMEOUT_S")
