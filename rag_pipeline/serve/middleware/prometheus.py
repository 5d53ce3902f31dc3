"""The API's Prometheus metrics (GET /metrics) and the ASGI middleware that counts and times each request."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rag_pipeline.retrieve.retriever import RetrievalResult

STAGES = ("embed", "cache", "hyde", "search", "rerank", "postprocess", "total")
LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
UNTIMED_ROUTES = ("/metrics", "/openapi.json")  # the scrape and the schema are not API traffic


class Metrics:
    """The app's Prometheus metrics, in a registry of its own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("rag_http_requests", "HTTP requests by endpoint and status",
                                ["endpoint", "status"], registry=self.registry)
        self.request_seconds = Histogram("rag_http_request_seconds", "HTTP request latency", ["endpoint"],
                                         buckets=LATENCY_BUCKETS, registry=self.registry)
        self.stage_seconds = Histogram("rag_retrieval_stage_seconds", "Retrieval latency per stage", ["stage"],
                                       buckets=LATENCY_BUCKETS, registry=self.registry)
        self.cache_lookups = Counter("rag_semantic_cache_lookups", "Semantic cache lookups by outcome",
                                     ["outcome"], registry=self.registry)
        self.fallbacks = Counter("rag_retrieval_warnings", "Searches that degraded (e.g. BM25-only fallback)",
                                 registry=self.registry)
        self.index_points = Gauge("rag_index_points", "Points in the chunk collection", registry=self.registry)

    def observe_retrieval(self, result: RetrievalResult, cache_enabled: bool) -> None:
        for stage in STAGES:
            value = result.timings_ms.get(stage, 0.0)
            if value or stage in ("search", "total"):
                self.stage_seconds.labels(stage).observe(value / 1000)
        if cache_enabled:
            self.cache_lookups.labels("hit" if result.cache_hit else "miss").inc()
        if result.warnings:
            self.fallbacks.inc()


class RequestMetrics:
    """ASGI middleware: the request count (by status) and latency of each endpoint, labelled with its route
    template (e.g. /ingest/{id}) once the response starts. A request no route matched (a 404, a refusal of the
    screening) is not counted, nor are /metrics and /openapi.json."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()

        async def send_observed(message: Message) -> None:
            if message["type"] == "http.response.start":
                endpoint = getattr(scope.get("route"), "path", None)  # None: no route matched
                if endpoint is not None and endpoint not in UNTIMED_ROUTES:
                    self.metrics.requests.labels(endpoint, str(message["status"])).inc()
                    self.metrics.request_seconds.labels(endpoint).observe(time.perf_counter() - started)
            await send(message)

        await self.app(scope, receive, send_observed)
