"""The HTTP API (Starlette): search, streamed answers, ingest, health and Prometheus metrics.

    POST /search       {"query", "top_k"?, "filters"?}     -> {"results": [...], "timings_ms", "warnings", ...}
    POST /ask          {"question", "top_k"?, "filters"?}  -> server-sent events: "token" events, then "done"
    POST /ingest       {"roots": [...]}                     -> 202 {"id", "status"}; GET /ingest/{id} for progress
    GET  /healthz      store, embedder and LLM status (503 when the store is down)
    GET  /metrics      Prometheus text format

Bad input gets a 4xx JSON error {"error": {"code", "message"}}; an unexpected failure a 500 with no trace.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from rag_pipeline import components
from rag_pipeline.errors import StoreUnavailable
from rag_pipeline.generate.answerer import Answerer
from rag_pipeline.generate.result import Answer
from rag_pipeline.index.vector_store import FILTER_KEYS
from rag_pipeline.llm import build_llm
from rag_pipeline.retrieve.retriever import RetrievalResult, Retriever
from rag_pipeline.settings import Settings

log = logging.getLogger(__name__)
MAX_API_TOP_K = 100
STAGES = ("embed", "cache", "hyde", "search", "rerank", "postprocess", "total")
LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def error_response(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


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


@dataclass
class IngestJob:
    id: str
    roots: list[str]
    status: str = "running"  # running | succeeded | failed
    started_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    summary: dict[str, Any] | None = None
    error: str | None = None


class IngestJobs:
    """Ingest runs started over HTTP, one at a time, each in a thread of this process."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.jobs: dict[str, IngestJob] = {}
        self._lock = threading.Lock()

    def start(self, roots: list[str]) -> IngestJob:
        with self._lock:
            running = [job for job in self.jobs.values() if job.status == "running"]
            if running:
                raise ApiError(409, "ingest_running", f"ingest {running[0].id} is still running")
            job = IngestJob(uuid.uuid4().hex, roots)
            self.jobs[job.id] = job
        threading.Thread(target=self._run, args=(job,), name=f"ingest-{job.id}", daemon=True).start()
        return job

    def _run(self, job: IngestJob) -> None:
        from rag_pipeline.defs.runner import ingest  # imports Dagster: only when an ingest is asked for

        try:
            job.summary = ingest(job.roots, self.data_dir)
            job.status = "succeeded"
        except Exception as error:
            log.exception("ingest %s failed", job.id)
            job.status, job.error = "failed", f"{type(error).__name__}: {error}"
        job.finished_at = time.time()


def parse_body(raw: bytes, allowed: set[str]) -> dict[str, Any]:
    try:
        body = json.loads(raw or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ApiError(400, "invalid_json", f"the body is not valid JSON: {error}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "invalid_body", "the body must be a JSON object")
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise ApiError(400, "unknown_field", f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed))}")
    return body


def query_arguments(body: dict[str, Any], text_field: str, default_top_k: int) -> tuple[str, int, dict | None]:
    """(text, top_k, filters) of a /search or /ask body, validated."""
    text = body.get(text_field)
    if not isinstance(text, str) or not text.strip():
        raise ApiError(400, f"empty_{text_field}", f"'{text_field}' must be a non-empty string")
    top_k = body.get("top_k", default_top_k)
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_API_TOP_K:
        raise ApiError(400, "invalid_top_k", f"'top_k' must be an integer from 1 to {MAX_API_TOP_K}, got {top_k!r}")
    filters = body.get("filters")
    if filters is not None:
        if not isinstance(filters, dict):
            raise ApiError(400, "invalid_filters", "'filters' must be an object of field: value")
        unknown = sorted(set(filters) - set(FILTER_KEYS))
        if unknown:
            raise ApiError(400, "unknown_filter_field",
                           f"unknown filter field(s) {', '.join(unknown)}; allowed: {', '.join(FILTER_KEYS)}")
    return text, top_k, filters or None


def sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"


def create_app(settings: Settings | None = None, retriever: Retriever | None = None) -> Starlette:
    """The API over `retriever` (default: the configured one, opened at startup and closed at shutdown)."""
    settings = settings or Settings()
    metrics = Metrics()
    ingest_jobs = IngestJobs(settings.data_dir)
    state: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        owned = retriever is None
        state["retriever"] = retriever or await run_in_threadpool(components.open_retriever, settings)
        try:
            state["answerer"] = components.answerer(settings, state["retriever"])
            yield
        finally:
            if owned:
                state["retriever"].close()

    async def read_body(request: Request, allowed: set[str]) -> dict[str, Any]:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > settings.api_max_body_bytes:
            raise ApiError(413, "body_too_large", f"the body exceeds {settings.api_max_body_bytes} bytes")
        raw = b""
        async for piece in request.stream():
            raw += piece
            if len(raw) > settings.api_max_body_bytes:
                raise ApiError(413, "body_too_large", f"the body exceeds {settings.api_max_body_bytes} bytes")
        return parse_body(raw, allowed)

    async def search(request: Request) -> Response:
        body = await read_body(request, {"query", "top_k", "filters"})
        query, top_k, filters = query_arguments(body, "query", settings.top_k)
        result = await run_in_threadpool(state["retriever"].search, query, top_k, filters)
        metrics.observe_retrieval(result, state["retriever"].cache is not None)
        return JSONResponse(result.to_json())

    async def ask(request: Request) -> Response:
        body = await read_body(request, {"question", "top_k", "filters"})
        question, top_k, filters = query_arguments(body, "question", settings.top_k)
        answerer: Answerer = state["answerer"]
        events = answerer.stream(question, top_k, filters)
        first = await run_in_threadpool(next, events)  # retrieval errors surface here, before the stream starts

        def stream() -> Iterator[str]:
            try:
                for item in [first, *events]:
                    if isinstance(item, Answer):
                        yield sse("done", item.to_json())
                    else:
                        yield sse("token", {"text": item})
            except Exception as error:  # after the headers: report the failure as an event
                log.exception("answer stream failed")
                yield sse("error", {"code": "internal_error", "message": f"{type(error).__name__}: {error}"})

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def start_ingest(request: Request) -> Response:
        body = await read_body(request, {"roots"})
        roots = body.get("roots")
        if not isinstance(roots, list) or not roots or not all(isinstance(root, str) and root for root in roots):
            raise ApiError(400, "invalid_roots", "'roots' must be a non-empty list of folder paths")
        missing = [root for root in roots if not Path(root).is_dir()]
        if missing:
            raise ApiError(400, "not_a_directory", f"not a directory: {', '.join(missing)}")
        job = ingest_jobs.start(roots)
        return JSONResponse(job_json(job), status_code=202, headers={"Location": f"/ingest/{job.id}"})

    async def ingest_status(request: Request) -> Response:
        job = ingest_jobs.jobs.get(request.path_params["job_id"])
        if job is None:
            raise ApiError(404, "unknown_ingest", f"no ingest with id {request.path_params['job_id']}")
        return JSONResponse(job_json(job))

    async def healthz(request: Request) -> Response:
        report = await run_in_threadpool(health, state["retriever"], settings)
        if report["store"]["ok"]:
            metrics.index_points.set(report["store"]["points"])
        return JSONResponse(report, status_code=200 if report["status"] != "down" else 503)

    async def prometheus(request: Request) -> Response:
        with contextlib.suppress(Exception):  # a failing store must not break the scrape
            metrics.index_points.set(await run_in_threadpool(state["retriever"].store.count))
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    def timed(endpoint: str, handler):
        async def wrapped(request: Request) -> Response:
            started = time.perf_counter()
            try:
                response = await handler(request)
            except ApiError as error:
                response = error_response(error.status, error.code, error.message)
            except ValueError as error:  # the retriever's own validation
                response = error_response(400, "invalid_request", str(error))
            except StoreUnavailable as error:
                response = error_response(503, "store_unavailable", str(error))
            except Exception as error:
                log.exception("%s failed", endpoint)
                response = error_response(500, "internal_error", f"{type(error).__name__}: the request failed")
            metrics.requests.labels(endpoint, str(response.status_code)).inc()
            metrics.request_seconds.labels(endpoint).observe(time.perf_counter() - started)
            return response
        return wrapped

    async def http_error(request: Request, error: HTTPException) -> Response:
        return error_response(error.status_code, "not_found" if error.status_code == 404 else "http_error",
                              error.detail)

    routes = [
        Route("/search", timed("/search", search), methods=["POST"]),
        Route("/ask", timed("/ask", ask), methods=["POST"]),
        Route("/ingest", timed("/ingest", start_ingest), methods=["POST"]),
        Route("/ingest/{job_id}", timed("/ingest/{id}", ingest_status), methods=["GET"]),
        Route("/healthz", timed("/healthz", healthz), methods=["GET"]),
        Route("/metrics", prometheus, methods=["GET"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers={HTTPException: http_error})


def job_json(job: IngestJob) -> dict[str, Any]:
    return {"id": job.id, "status": job.status, "roots": job.roots, "started_at": job.started_at,
            "finished_at": job.finished_at, "summary": job.summary, "error": job.error}


def health(retriever: Retriever, settings: Settings) -> dict[str, Any]:
    """Status of the store, the embedder, the reranker, the cache and the LLM. "down" when the store is."""
    store: dict[str, Any] = {"collection": retriever.store.collection, "backend": settings.qdrant_url or "embedded"}
    try:
        info = retriever.store.info()
        store.update(ok=True, points=info["points"], index_version=info["index_version"])
    except Exception as error:
        store.update(ok=False, error=f"{type(error).__name__}: {error}")
    embedder: dict[str, Any] = {"ok": retriever.embedder is not None,
                                "model": getattr(retriever.embedder, "model_id", None)}
    if retriever.embedder is not None:
        try:
            retriever.embedder.embed_query("health check")
        except Exception as error:
            embedder.update(ok=False, error=f"{type(error).__name__}: {error}")
    if not embedder["ok"]:
        embedder.setdefault("error", "embedder unavailable: searches fall back to BM25 only")
    llm_client = build_llm(settings)
    llm = {"configured": False} if llm_client is None else {"configured": True, **llm_client.status()}
    status = "down" if not store["ok"] else "ok" if embedder["ok"] else "degraded"
    return {
        "status": status, "store": store, "embedder": embedder, "llm": llm,
        "reranker": {"configured": retriever.reranker is not None,
                     "model": retriever.reranker.model_id if retriever.reranker else None},
        "semantic_cache": {"enabled": retriever.cache is not None},
        "hyde": retriever.hyde.mode if retriever.hyde else "off",
    }


def serve(settings: Settings, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run the API with uvicorn until interrupted."""
    import uvicorn

    uvicorn.run(create_app(settings), host=host, port=port, log_level="warning")
