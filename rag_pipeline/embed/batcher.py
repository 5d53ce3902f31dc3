"""Query embeddings of concurrent requests computed together: one embed_queries call on the model for the queries
that arrive while another batch is being embedded or within a short collection window.

The first caller becomes the leader. When calls arrived within the last window (concurrent traffic), it waits up
to the window for more, stopping early once max_batch rows are pending; a lone caller embeds at once. Callers
arriving while a batch is embedded queue up; when it ends, the oldest of them leads the next batch with all that
queued meanwhile. Each caller gets its own rows; an error of the batch is raised to every caller in it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from rag_pipeline.embed.embedder import Embedder


@dataclass
class _Request:
    texts: list[str]
    wake: threading.Event = field(default_factory=threading.Event)  # set: vectors (or error) ready, or lead
    vectors: np.ndarray | None = None
    error: BaseException | None = None
    done: bool = False


class QueryBatcher(Embedder):
    """`embedder` whose embed_query/embed_queries calls from concurrent threads are batched (window_ms: how long a
    leader collects under concurrent traffic; 0 passes every call through). Documents are passed through."""

    def __init__(self, embedder: Embedder, window_ms: float = 2.0, max_batch: int = 32) -> None:
        self.embedder = embedder
        self.model_id = embedder.model_id
        self.dimension = embedder.dimension
        self.window_s = window_ms / 1000
        self.max_batch = max_batch
        self._lock = threading.Lock()
        self._more = threading.Condition(self._lock)  # notified on each arrival while a leader collects
        self._pending: list[_Request] = []  # requests not yet taken into a batch, oldest first
        self._leading = False  # a leader is collecting or embedding; new requests queue
        self._last_arrival = float("-inf")

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.embedder.embed_documents(texts)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_queries([text])[0]

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        if self.window_s <= 0 or not texts:
            return self.embedder.embed_queries(texts)
        request = _Request(list(texts))
        with self._lock:
            now = time.monotonic()
            concurrent = now - self._last_arrival < self.window_s
            self._last_arrival = now
            self._pending.append(request)
            self._more.notify()
            follower = self._leading
            self._leading = True
        if follower:
            request.wake.wait()
            if request.done:
                return self._result(request)
            concurrent = False  # promoted: what queued while the last batch ran is the batch
        self._lead(concurrent)
        return self._result(request)

    def _lead(self, collect: bool) -> None:
        """Collect (with `collect`: up to the window), embed the batch, hand the lead to the oldest queued request."""
        with self._lock:
            if collect:
                self._more.wait_for(lambda: self._rows() >= self.max_batch, timeout=self.window_s)
            batch = self._take()
        try:
            vectors = self.embedder.embed_queries([text for request in batch for text in request.texts])
        except BaseException as error:
            for request in batch:
                request.error = error
        else:
            start = 0
            for request in batch:
                request.vectors = vectors[start:start + len(request.texts)]
                start += len(request.texts)
        for request in batch:
            request.done = True
            request.wake.set()
        with self._lock:
            if self._pending:
                self._pending[0].wake.set()  # its thread leads the next batch
            else:
                self._leading = False

    def _rows(self) -> int:
        return sum(len(request.texts) for request in self._pending)

    def _take(self) -> list[_Request]:
        """The oldest pending requests, up to max_batch rows (at least one request); under the lock."""
        rows, count = 0, 0
        for request in self._pending:
            if count and rows + len(request.texts) > self.max_batch:
                break
            rows, count = rows + len(request.texts), count + 1
        batch, self._pending = self._pending[:count], self._pending[count:]
        return batch

    @staticmethod
    def _result(request: _Request) -> np.ndarray:
        if request.error is not None:
            raise request.error
        assert request.vectors is not None
        return request.vectors
