"""An OpenAI-compatible server (vLLM, llama.cpp server, LM Studio, hosted APIs) over httpx: chat completions
(POST {base}/chat/completions, streamed as server-sent events) and embeddings (POST {base}/embeddings)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import httpx
import numpy as np

from rag_pipeline.embed.embedder import Embedder, normalise
from rag_pipeline.errors import ModelUnavailable
from rag_pipeline.llm.base import ChatModel, LLMResponseError
from rag_pipeline.llm.client import EMBEDDING, ModelServer
from rag_pipeline.retry import RETRYABLE_ERRORS, retryable_status

# A stream that is not the protocol: undecodable JSON, missing fields, a missing `data: [DONE]`.
MALFORMED = (ValueError, KeyError, TypeError, AttributeError, IndexError)


def openai_client(base_url: str, api_key: str | None, timeout: float) -> httpx.Client:
    """An httpx client for the API rooted at base_url (e.g. http://host:8000/v1), with the key as bearer token."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.Client(base_url=base_url, timeout=timeout, headers=headers, follow_redirects=True)


def error_detail(response: httpx.Response) -> str:
    """HTTP status and the server's error message, shortened (OpenAI's {"error": {"message"}} or the text)."""
    try:
        error = response.json().get("error") or response.json().get("detail")
        message = error.get("message") if isinstance(error, dict) else error
    except (ValueError, AttributeError):
        message = None
    return f"HTTP {response.status_code}: {str(message or response.text or response.reason_phrase)[:300]}"


def server_sent_data(lines: Iterable[str]) -> Iterator[str]:
    """The data of each server-sent event (comments, other fields and blank separators skipped)."""
    for line in lines:
        if line.startswith("data:"):
            yield line[5:].strip()


class OpenAIServer(ModelServer):
    """A model on an OpenAI-compatible server; `url` is the API root (with /v1), `api_key` the bearer token."""

    provider = "openai"
    transport_errors = (httpx.HTTPError, *MALFORMED)

    def __init__(self, url: str, model: str, *, api_key: str | None = None, timeout: float, retries: int,
                 backoff: float) -> None:
        super().__init__(url, model, timeout=timeout, retries=retries, backoff=backoff)
        self._client = openai_client(url, api_key, timeout)

    def _retryable(self, error: Exception) -> bool:
        if isinstance(error, httpx.HTTPStatusError):
            return retryable_status(error.response.status_code)
        return isinstance(error, RETRYABLE_ERRORS)

    def _error(self, error: Exception) -> ModelUnavailable:
        where, purpose = self.where(), self.purpose
        if isinstance(error, httpx.TimeoutException):
            return self._timed_out()
        if isinstance(error, httpx.HTTPStatusError):
            status, detail = error.response.status_code, error_detail(error.response)
            if status in (401, 403):
                return purpose.unavailable(f"{where} refused the API key ({detail}); check RAG_LLM_API_KEY")
            if status == 404:
                return purpose.unavailable(
                    f"{where}: model {self.model!r} not found ({detail}); set {self.model_setting} to a model GET "
                    f"{self.url.rstrip('/')}/models lists, and {self.url_setting} to the API root (e.g. .../v1)")
            if retryable_status(status):
                return purpose.unavailable(f"{where} failed ({detail}); check the server at {self.url_setting}")
            return purpose.malformed(f"{where} answered with an error ({detail})")
        if isinstance(error, MALFORMED):
            return purpose.malformed(f"{where} sent a malformed response: {type(error).__name__}: {error}")
        return purpose.unavailable(f"{where} unreachable: {error}; check {self.url_setting}")


class OpenAIChatModel(OpenAIServer, ChatModel):
    """A chat model on an OpenAI-compatible server."""

    url_setting = "RAG_LLM_BASE_URL"
    model_setting = "RAG_LLM_MODEL"

    def __init__(
        self,
        url: str,
        model: str,
        *,
        api_key: str | None = None,
        temperature: float = 0.1,
        max_tokens: int = 512,
        timeout: float = 60.0,
        retries: int = 2,
        backoff: float = 0.5,
    ) -> None:
        super().__init__(url, model, api_key=api_key, timeout=timeout, retries=retries, backoff=backoff)
        self.temperature = temperature
        self.max_tokens = max_tokens

    def where(self) -> str:
        return f"OpenAI-compatible server at {self.url} (model {self.model!r})"

    def _request(self, messages: list[dict[str, str]], response_format: dict[str, Any] | None) -> Iterator[str]:
        body: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": self.temperature,
                                "max_tokens": self.max_tokens, "stream": True,
                                "stream_options": {"include_usage": True}}
        if response_format is not None:
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "reply", "schema": response_format}}
        with self._client.stream("POST", "chat/completions", json=body) as response:
            if response.is_error:
                response.read()
                response.raise_for_status()
            for data in server_sent_data(response.iter_lines()):
                if data == "[DONE]":
                    return
                chunk = json.loads(data)
                if chunk.get("error"):
                    raise LLMResponseError(f"{self.where()} failed mid-stream: {chunk['error']}")
                if usage := chunk.get("usage"):  # the final chunk, asked for with include_usage
                    self.last_usage = {"prompt_tokens": int(usage["prompt_tokens"]),
                                       "completion_tokens": int(usage["completion_tokens"])}
                for choice in chunk["choices"]:
                    if content := choice["delta"].get("content"):
                        yield content
        raise ValueError("the stream ended without `data: [DONE]`")

    def status(self) -> dict[str, Any]:
        """Whether the server answers GET {base}/models and lists the model; never raises."""
        result: dict[str, Any] = {"url": self.url, "model": self.model, "reachable": False, "model_available": False}
        try:
            response = self._client.get("models")
            response.raise_for_status()
            names = {model["id"] for model in response.json()["data"]}
        except Exception as error:  # status is a health probe: report every failure instead of raising
            return {**result, "error": str(self._error(error))}
        available = self.model in names
        error = None if available else f"model {self.model!r} not served there (it lists {sorted(names)[:10]})"
        return {**result, "reachable": True, "model_available": available, "error": error}


class OpenAIEmbedder(OpenAIServer, Embedder):
    """Embeddings from an OpenAI-compatible server's POST {base}/embeddings, in batches; the dimension comes from
    the first response (a probe at init). Retries and timeout as the chat model's."""

    purpose = EMBEDDING
    url_setting = "RAG_EMBEDDING_BASE_URL (or RAG_LLM_BASE_URL)"
    model_setting = "RAG_OPENAI_EMBED_MODEL"

    def __init__(self, url: str, model: str = "text-embedding-3-small", *, api_key: str | None = None,
                 batch_size: int = 64, timeout: float = 60.0, retries: int = 2, backoff: float = 0.5) -> None:
        super().__init__(url, model, api_key=api_key, timeout=timeout, retries=retries, backoff=backoff)
        self.batch_size = batch_size
        self.dimension = len(self._embed(["dimension"])[0])

    def where(self) -> str:
        return f"OpenAI-compatible server at {self.url} (embedding model {self.model!r})"

    def _post(self, texts: list[str]) -> list[list[float]]:
        response = self._client.post("embeddings", json={"model": self.model, "input": texts})
        response.raise_for_status()
        rows = sorted(response.json()["data"], key=lambda row: row["index"])
        return [row["embedding"] for row in rows]

    def _embed(self, texts: list[str]) -> list[list[float]]:
        """One /embeddings call (retried); every failure becomes EmbedderUnavailable naming the server and model."""
        embeddings = self._call(lambda: self._post(texts))
        if len(embeddings) != len(texts):
            raise self.purpose.unavailable(f"{self.where()} returned {len(embeddings)} embeddings for {len(texts)} "
                                           "inputs")
        return embeddings

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        vectors = [vector for start in range(0, len(texts), self.batch_size)
                   for vector in self._embed(list(texts[start: start + self.batch_size]))]
        return normalise(np.array(vectors, dtype=np.float32).reshape(len(texts), self.dimension))

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_documents(texts)  # no query prefix: one request for all
