"""The query-embedding batcher: concurrent callers batched into one call of the real embedder (the packaged model on
ONNX Runtime int8, Ollama's HTTP API on the fake server), each getting its own rows; errors reach every caller."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest

from rag_pipeline.embed.batcher import QueryBatcher
from rag_pipeline.embed.embedder import Embedder, EmbedderUnavailable
from rag_pipeline.embed.onnx_embedder import OnnxEmbedder
from rag_pipeline.llm.ollama import OllamaEmbedder
from rag_pipeline_tests.fake_ollama import FakeOllama, fake_vector

THREADS = 16


@pytest.fixture(scope="module")
def onnx(tmp_path_factory: pytest.TempPathFactory) -> OnnxEmbedder:
    return OnnxEmbedder(None, tmp_path_factory.mktemp("models"), "onnx-int8")


class Recording(Embedder):
    """`embedder`, recording the texts of each embed_queries call."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder, self.model_id, self.dimension = embedder, embedder.model_id, embedder.dimension
        self.calls: list[list[str]] = []
        self._lock = threading.Lock()

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.embedder.embed_documents(texts)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        with self._lock:
            self.calls.append(list(texts))
        return self.embedder.embed_queries(texts)


def concurrently(call: Callable[[int], Any], count: int = THREADS) -> list[Any]:
    """call(0..count-1) from `count` threads released together; results (or raised errors) in index order."""
    barrier = threading.Barrier(count)

    def run(index: int) -> Any:
        barrier.wait()
        try:
            return call(index)
        except Exception as error:
            return error

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(run, range(count)))


def requests_of(round_: int) -> list[list[str]]:
    """Distinct texts per caller; every third caller sends three (a query and its fragments)."""
    return [[f"round {round_} caller {index} question {part} about topic {index * 7 + part}"
             for part in range(3 if index % 3 == 0 else 1)] for index in range(THREADS)]


def test_concurrent_callers_get_their_own_rows(onnx: OnnxEmbedder) -> None:
    recording = Recording(onnx)
    batcher = QueryBatcher(recording, window_ms=20)
    assert (batcher.model_id, batcher.dimension) == (onnx.model_id, onnx.dimension)
    for round_ in range(6):
        requests = requests_of(round_)
        results = concurrently(lambda index: batcher.embed_queries(requests[index]))
        for texts, vectors in zip(requests, results):
            assert not isinstance(vectors, Exception), vectors
            np.testing.assert_allclose(vectors, onnx.embed_queries(texts), atol=1e-6)
        single = concurrently(lambda index: batcher.embed_query(requests[index][0]))
        for texts, vector in zip(requests, single):
            np.testing.assert_allclose(vector, onnx.embed_query(texts[0]), atol=1e-6)
    # every text was embedded exactly once per call, and concurrent callers shared calls
    assert sorted(text for call in recording.calls for text in call) == sorted(
        [text for round_ in range(6) for texts in requests_of(round_) for text in texts]
        + [texts[0] for round_ in range(6) for texts in requests_of(round_)])
    assert max(len(call) for call in recording.calls) > 3


def test_batches_hold_at_most_max_batch_rows(onnx: OnnxEmbedder) -> None:
    recording = Recording(onnx)
    batcher = QueryBatcher(recording, window_ms=20, max_batch=4)
    requests = requests_of(0)
    results = concurrently(lambda index: batcher.embed_queries(requests[index]))
    for texts, vectors in zip(requests, results):
        np.testing.assert_allclose(vectors, onnx.embed_queries(texts), atol=1e-6)
    assert all(len(call) <= 4 for call in recording.calls)


def test_window_zero_passes_every_call_through(onnx: OnnxEmbedder) -> None:
    recording = Recording(onnx)
    batcher = QueryBatcher(recording, window_ms=0)
    requests = requests_of(0)
    results = concurrently(lambda index: batcher.embed_queries(requests[index]))
    for texts, vectors in zip(requests, results):
        np.testing.assert_allclose(vectors, onnx.embed_queries(texts), atol=1e-6)
    assert sorted(recording.calls) == sorted(requests)
    np.testing.assert_array_equal(batcher.embed_documents(["a passage"]), onnx.embed_documents(["a passage"]))


def test_concurrent_queries_share_server_calls(fake_ollama: FakeOllama) -> None:
    batcher = QueryBatcher(OllamaEmbedder(fake_ollama.url, model="fake-embed"), window_ms=20)
    fake_ollama.requests.clear()
    fake_ollama.delay_s = 0.02  # requests arriving while one is answered queue for the next call
    texts = [f"question {index}" for index in range(THREADS)]
    vectors = concurrently(lambda index: batcher.embed_query(texts[index]))
    for text, vector in zip(texts, vectors):
        expected = np.array(fake_vector(text), dtype=np.float32)
        np.testing.assert_allclose(vector, expected / np.linalg.norm(expected), atol=1e-6)
    calls = fake_ollama.bodies("/api/embed")
    assert sorted(text for body in calls for text in body["input"]) == sorted(texts)
    assert len(calls) < THREADS


def test_an_error_reaches_every_caller_of_the_batch(fake_ollama: FakeOllama) -> None:
    batcher = QueryBatcher(OllamaEmbedder(fake_ollama.url, model="fake-embed", retries=0), window_ms=20)
    fake_ollama.delay_s, fake_ollama.fail_next = 0.02, 1000
    results = concurrently(lambda index: batcher.embed_query(f"question {index}"))
    assert all(isinstance(result, EmbedderUnavailable) for result in results)
    fake_ollama.fail_next = 0  # the batcher serves again once the server does
    assert all(isinstance(result, np.ndarray) for result in
               concurrently(lambda index: batcher.embed_query(f"question {index}")))


def test_a_lone_caller_is_served(onnx: OnnxEmbedder) -> None:
    batcher = QueryBatcher(onnx, window_ms=50)
    for text in ("one", "two", "three"):
        np.testing.assert_allclose(batcher.embed_query(text), onnx.embed_query(text), atol=1e-6)
    assert batcher.embed_queries([]).shape == (0, onnx.dimension)
