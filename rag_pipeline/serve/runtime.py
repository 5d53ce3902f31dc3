"""The components the HTTP API serves with (retriever and answerer) and their health, kept usable while the
store is down, and following the active index generation (a switch reopens them on the next request).

The server starts whether or not the vector store can be reached. While it cannot (a Qdrant server that is down,
an embedded store another process holds), every request that needs it gets StoreUnavailable (503) and /healthz
names the store and the setting; the next request after REOPEN_INTERVAL_S tries to open it again, so the server
recovers without a restart. An open server store that goes down later fails its queries the same way (the
retriever's StoreUnavailable) and serves again once the server is back.

The embedded store allows one process, and an ingest holds it from start to end. While another process's ingest
holds <data dir>/ingest.lock (defs/ingest_runner.py), the server does not open the store, and a server that has it
open leaves it (a watcher thread sees the lock within WATCH_INTERVAL_S and closes the retriever after
RELEASE_GRACE_S, for requests in flight): requests that need the store get StoreBusy (503, naming the ingest) until
the ingest ends, then the store is opened again. The server's own ingests (POST /ingest, uploads) share its store.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from rag_pipeline import components
from rag_pipeline.embed.embedder import Embedder, EmbedderUnavailable
from rag_pipeline.errors import StoreBusy, StoreUnavailable
from rag_pipeline.file_lock import holder_elsewhere
from rag_pipeline.generate.answerer import Answerer
from rag_pipeline.index.vector_store import collection_name, is_connection_error, store_unreachable
from rag_pipeline.llm import build_llm
from rag_pipeline.retrieve.retriever import Retriever, describe_store
from rag_pipeline.settings import Settings

log = logging.getLogger(__name__)
REOPEN_INTERVAL_S = 1.0  # while the store is down, at most one attempt to open it per interval
RETIRE_GRACE_S = 10.0  # after a generation switch, in-flight requests keep the old retriever this long
WATCH_INTERVAL_S = 0.5  # how often a server on the embedded store looks for another process's ingest
RELEASE_GRACE_S = 2.0  # in-flight requests keep the retriever this long once another process's ingest started


class Runtime:
    """The retriever (`retriever`, else opened from `settings`) and its answerer; `close()` releases what it
    opened."""

    def __init__(self, settings: Settings, retriever: Retriever | None = None) -> None:
        self.settings = settings
        self.owned = retriever is None
        self._retriever = retriever
        self._answerer: Answerer | None = None
        self.error: StoreUnavailable | None = None  # why the store could not be opened, until it is
        self._next_attempt = 0.0
        self._lock = threading.Lock()
        self._generations = components.generations(settings)
        self._generation: str | None = None  # the index generation the open retriever queries
        self._retired: list[tuple[float, Retriever]] = []  # (close after, retriever of an older generation)
        # another process's ingest makes the server leave the embedded store (see the module's docstring)
        self._ingest_lock = settings.data_dir / "ingest.lock" if self.owned and not settings.qdrant_url else None
        self._stop = threading.Event()

    def start(self) -> None:
        """Open the components now if the store can be reached; if not, log why and serve 503s until it can."""
        try:
            self.answerer()
        except StoreUnavailable as error:
            log.warning("serving without the vector store until it can be opened: %s", error)
        if self._ingest_lock is not None:
            threading.Thread(target=self._watch, name="ingest-watch", daemon=True).start()

    def retriever(self) -> Retriever:
        """The open retriever; StoreUnavailable while the store cannot be opened."""
        return self._open()[0]

    def answerer(self) -> Answerer:
        return self._open()[1]

    def _open(self) -> tuple[Retriever, Answerer]:
        with self._lock:
            active = self._generations.active_id()
            if self.owned and self._retriever is not None and active != self._generation:
                log.info("index generation %s is active: reopening the retriever", active)
                # requests already holding the old retriever finish on it; it is closed after a grace period
                self._retired.append((time.monotonic() + RETIRE_GRACE_S, self._retriever))
                self._retriever = self._answerer = None
            self._close_retired()
            if self._retriever is None:
                if self.error is not None and time.monotonic() < self._next_attempt:
                    raise self.error
                try:
                    self._check_no_ingest_elsewhere()
                    self._retriever = components.open_retriever(self.settings, batch_queries=True)
                except StoreUnavailable as error:
                    self.error, self._next_attempt = error, time.monotonic() + REOPEN_INTERVAL_S
                    raise
                self.error, self._generation = None, active
            if self._answerer is None:
                self._answerer = components.answerer(self.settings, self._retriever)
            return self._retriever, self._answerer

    def _check_no_ingest_elsewhere(self) -> None:
        """StoreBusy while another process's ingest holds the data dir's ingest lock."""
        holder = holder_elsewhere(self._ingest_lock) if self._ingest_lock is not None else None
        if holder is not None:
            raise StoreBusy(f"an ingest in {holder} is writing the embedded vector store: queries resume when it "
                            "ends (to query while ingesting, use a Qdrant server: RAG_QDRANT_URL)")

    def _watch(self) -> None:
        """Leave the store to another process's ingest as soon as one starts; close what was left once unused."""
        while not self._stop.wait(WATCH_INTERVAL_S):
            holder = holder_elsewhere(self._ingest_lock)
            with self._lock:
                if holder is not None and self._retriever is not None:
                    log.warning("an ingest started in %s: leaving the embedded store to it until it ends", holder)
                    self._retired.append((time.monotonic() + RELEASE_GRACE_S, self._retriever))
                    self._retriever = self._answerer = None
                self._close_retired()

    def _close_retired(self, force: bool = False) -> None:
        """Close the retrievers of older generations whose grace period is over (all with `force`)."""
        now = time.monotonic()
        for entry in [entry for entry in self._retired if force or entry[0] <= now]:
            self._retired.remove(entry)
            entry[1].close()

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            self._close_retired(force=True)
            if self.owned and self._retriever is not None:
                self._retriever.close()
            self._retriever = self._answerer = None

    def health(self) -> dict[str, Any]:
        """Status of the store, the embedder, the reranker, the cache and the LLM. "down" when the store is (also
        while it cannot be opened: then the rest is what the settings configure)."""
        settings = self.settings
        try:
            retriever: Retriever | None = self.retriever()
        except StoreUnavailable:
            retriever = None
        store: dict[str, Any] = {"backend": settings.qdrant_url or "embedded"}
        if retriever is None:
            assert self.error is not None
            dimension = components.embedding_dimension(settings)
            store.update(collection=collection_name(settings.embedding_model_id, dimension), ok=False,
                         error=self.error.message)
            embedder = embedder_health(lambda: components.embedder(settings))
            reranker = {"configured": bool(settings.rerank_model_path), "model": settings.rerank_model_path}
            cache, hyde = settings.semantic_cache, settings.hyde
        else:
            store["collection"] = retriever.store.collection
            try:
                info = retriever.store.info()
                store.update(ok=True, points=info["points"], index_version=info["index_version"])
            except Exception as error:
                if is_connection_error(error):
                    error = store_unreachable(describe_store(retriever.store), error)
                store.update(ok=False, error=f"{type(error).__name__}: {error}")
            embedder = embedder_health(lambda: retriever.embedder)
            reranker = {"configured": retriever.reranker is not None,
                        "model": retriever.reranker.model_id if retriever.reranker else None}
            cache, hyde = retriever.cache is not None, retriever.hyde.mode if retriever.hyde else "off"
        llm_client = build_llm(settings)
        llm = {"configured": False} if llm_client is None else {"configured": True, **llm_client.status()}
        status = "down" if not store["ok"] else "ok" if embedder["ok"] else "degraded"
        return {"status": status, "store": store, "embedder": embedder, "llm": llm, "reranker": reranker,
                "semantic_cache": {"enabled": cache}, "hyde": hyde}


def embedder_health(get_embedder: Callable[[], Embedder | None]) -> dict[str, Any]:
    """Whether the query embedder (None: none could be loaded) embeds a query."""
    embedder = None
    try:
        embedder = get_embedder()
        if embedder is None:
            raise EmbedderUnavailable("embedder unavailable")
        embedder.embed_query("health check")
    except Exception as error:
        return {"ok": False, "model": getattr(embedder, "model_id", None),
                "error": f"{type(error).__name__}: {error}: searches fall back to BM25 only"}
    return {"ok": True, "model": embedder.model_id}
