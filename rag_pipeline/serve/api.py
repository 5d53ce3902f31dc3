"""The HTTP API (FastAPI): search, streamed answers, ingest, health and Prometheus metrics.

    POST /search       {"query", "top_k"?, "filters"?}     -> {"results": [...], "timings_ms", "warnings", ...}
    POST /ask          {"question", "top_k"?, "filters"?}  -> server-sent events: "token" events, then "done"
    POST /ingest       empty or {}: sync RAG_SOURCES_FILE's sources, else RAG_ROOTS
                                                            -> 202 {"id", "status"}; GET /ingest/{id} for progress
    GET  /sources      every source: name, kind, documents, pending, failed, chunks (no filesystem paths)
    POST /sources/{name}/documents       multipart `files` -> 202 {"source", "documents", "rejected", "ingest"}
    GET  /sources/{name}/documents       the source's documents (status, chunks, paths) and refused files
    DELETE /sources/{name}/documents/{id}  an upload source's document -> 202 {"id", "removed_paths", "ingest"}
    POST /query        {"op", "field"?, "by"?, "where"?, "limit"?} -> {"op", "rows", "documents", "truncated", ...}
    GET  /fields       the fields /query and filters know: type, documents, origins, filterable
    POST /chat         {"message", "session_id"?, "filters"?} -> server-sent events "session", "step", "observation",
                       "token", then "done"; with Accept: application/json the done object only
    GET  /chat/{id}    the session's turns (its owner's key only: 404 otherwise); DELETE /chat/{id} deletes it
    GET  /healthz      store, embedder and LLM status (503 when the store is down)
    GET  /metrics      Prometheus text format
    GET  /openapi.json the OpenAPI document: the bodies above as JSON schemas (serve/models.py); no docs UI

Every error is {"error": {"code", "message"}}: a RagError gets the status of its kind (HTTP_STATUS), a body that
fails validation a 400 whose code names the field (models.input_error), a request the screening refuses (Host,
Origin, media type, JSON nesting: serve/screening.py) its 4xx, anything else a 500 with no trace. A store that is down
gives 503s, not a dead server (serve/runtime.py). With API keys (serve/keys.py) every route but /healthz needs a
bearer token of a role (serve/auth.py); a key's scope filters /search and /ask.
"""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations, and the request models of
# /search and /ask are made per app (their top_k default is the app's setting), so they are local names.

import contextlib
import itertools
import json
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import anyio.to_thread
from anyio import CapacityLimiter
from fastapi import Depends, FastAPI
from fastapi import Path as PathParam
from fastapi.exceptions import RequestValidationError
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers, UploadFile
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rag_pipeline import components
from rag_pipeline.chat.memory import ChatMemory, key_owner
from rag_pipeline.chat.turn import ChatService
from rag_pipeline.errors import (
    ConfigError,
    Conflict,
    Forbidden,
    InputError,
    NotAuthenticated,
    NotFound,
    RagError,
    Unavailable,
)
from rag_pipeline.generate.answerer import Answerer
from rag_pipeline.generate.result import Answer
from rag_pipeline.index.vector_store import Scope as KeyScope  # not the ASGI Scope
from rag_pipeline.ingest.sources import check_source_name
from rag_pipeline.ingest.uploads import list_documents, remove_document, sources_overview, store_upload, upload_source
from rag_pipeline.llm import build_llm
from rag_pipeline.retrieve.retriever import RetrievalResult, Retriever
from rag_pipeline.serve import models, screening
from rag_pipeline.serve.auth import KEY_STATE, AccessLog, Auth
from rag_pipeline.serve.models import (
    AskRequest,
    ChatRequest,
    ErrorResponse,
    HealthResponse,
    IngestJobResponse,
    IngestRequest,
    QueryRequest,
    QueryResponse,
    RemoveResponse,
    SearchRequest,
    SearchResponse,
    SourceDocumentsResponse,
    SourcesResponse,
    UploadResponse,
)
from rag_pipeline.serve.runtime import Runtime
from rag_pipeline.serve.screening import error_response
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar
from rag_pipeline.structured.query import QueryRunner, load_registry

log = logging.getLogger(__name__)
STAGES = ("embed", "cache", "hyde", "search", "rerank", "postprocess", "total")
LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

# The status of each kind of RagError: the most specific class in the error's MRO wins (NotFound is an
# InputError, StoreUnavailable and ModelUnavailable are Unavailable). Anything that is not a RagError is a 500.
HTTP_STATUS: dict[type[RagError], int] = {
    RagError: 500,
    ConfigError: 500,
    InputError: 400,
    NotAuthenticated: 401,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    Unavailable: 503,
}
# Errors that are not RagErrors: HTTP ones (Starlette's routing, the body limit, FastAPI's body parsing).
HTTP_ERROR_CODES = {400: "invalid_json", 404: "not_found", 413: "body_too_large"}
UNTIMED_ROUTES = ("/metrics", "/openapi.json")  # the scrape and the schema are not API traffic
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    "4XX": {"model": ErrorResponse, "description": "bad input; the code names the field or the problem"},
    "5XX": {"model": ErrorResponse, "description": "the store is unavailable (503) or the server failed (500)"},
}


# POST /sources/{name}/documents reads its multipart body itself (its limits, its error codes); this documents it.
UPLOAD_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["files"],
    "properties": {"files": {"type": "array", "items": {"type": "string", "format": "binary"},
                             "description": "the files (at most RAG_UPLOAD_MAX_FILES, RAG_UPLOAD_MAX_BYTES in all)"}},
}}}}}


def http_status(error: RagError) -> int:
    return next(HTTP_STATUS[kind] for kind in type(error).__mro__ if kind in HTTP_STATUS)


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


class RequestGuard:
    """ASGI middleware around every HTTP request: the body-size limit (RAG_API_MAX_BODY_BYTES; for uploads
    RAG_UPLOAD_MAX_BYTES), the per-endpoint request count and latency
    (labelled with the route template, e.g. /ingest/{id}, once the response starts), and a JSON 500 for an
    exception nothing else handled (logged, no trace in the body)."""

    def __init__(self, app: ASGIApp, metrics: Metrics, max_body_bytes: int, upload_max_bytes: int) -> None:
        self.app, self.metrics, self.max_body_bytes = app, metrics, max_body_bytes
        self.upload_max_bytes = upload_max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        response_started = False

        async def send_observed(message: Message) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
                endpoint = getattr(scope.get("route"), "path", None)  # None: no route matched (a 404)
                if endpoint is not None and endpoint not in UNTIMED_ROUTES:
                    self.metrics.requests.labels(endpoint, str(message["status"])).inc()
                    self.metrics.request_seconds.labels(endpoint).observe(time.perf_counter() - started)
            await send(message)

        try:
            await self.app(scope, self.limit_body(scope, receive), send_observed)
        except Exception as error:
            if response_started:
                raise
            log.exception("%s %s failed", scope["method"], scope["path"])
            response = error_response(500, "internal_error", f"{type(error).__name__}: the request failed")
            await response(scope, receive, send_observed)

    def limit_body(self, scope: Scope, receive: Receive) -> Receive:
        """`receive` that raises a 413 once the body is over the limit: at once when the declared Content-Length
        is, else as the streamed pieces add up. Only a route that reads its body is affected."""
        limit = self.upload_max_bytes if screening.is_upload(scope) else self.max_body_bytes
        declared = Headers(scope=scope).get("content-length", "")
        received = 0

        async def receive_limited() -> Message:
            nonlocal received
            if declared.isdigit() and int(declared) > limit:
                raise HTTPException(413, f"the body exceeds {limit} bytes")
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise HTTPException(413, f"the body exceeds {limit} bytes")
            return message

        return receive_limited


@dataclass
class IngestJob:
    id: str
    roots: list[str]
    status: str = "running"  # queued | running | succeeded | failed
    started_at: float = field(default_factory=time.time)  # when it was asked for
    finished_at: float | None = None
    summary: dict[str, Any] | None = None
    error: str | None = None
    source: str | None = None  # the one source it syncs; None: the configured roots or every configured source


class IngestJobs:
    """Ingest runs started over HTTP, one at a time, in a worker thread of this process. POST /ingest is refused
    (409 ingest_running) while another runs or waits; an upload's or a removal's sync of its source is queued
    instead, at most one waiting job per source (a second request joins the one already queued)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.jobs: dict[str, IngestJob] = {}
        self._queue: list[IngestJob] = []
        self._working = False  # a worker thread is running jobs
        self._lock = threading.Lock()

    def start(self, roots: list[str] | None) -> IngestJob:
        """Start syncing `roots` (None: every configured source) now; Conflict when an ingest runs or waits."""
        with self._lock:
            busy = [job for job in self.jobs.values() if job.status in ("running", "queued")]
            if busy:
                raise Conflict(f"ingest {busy[0].id} is still {busy[0].status}", code="ingest_running")
            return self._submit(IngestJob(uuid.uuid4().hex, roots or []))

    def enqueue(self, source: str) -> IngestJob:
        """Sync `source` as soon as the running ingest (if any) ends; the job already queued for it if there is one."""
        with self._lock:
            waiting = next((job for job in self._queue if job.source == source), None)
            if waiting is not None:
                return waiting
            return self._submit(IngestJob(uuid.uuid4().hex, [], source=source))

    def _submit(self, job: IngestJob) -> IngestJob:  # under the lock
        job.status = "queued"
        self.jobs[job.id] = job
        self._queue.append(job)
        if not self._working:
            self._working = True
            threading.Thread(target=self._work, args=(self._next_locked(),), name="ingest-worker",
                             daemon=True).start()
        return job

    def _next_locked(self) -> IngestJob | None:
        if not self._queue:
            self._working = False
            return None
        job = self._queue.pop(0)
        job.status = "running"
        return job

    def _work(self, job: IngestJob | None) -> None:
        while job is not None:
            self._run(job)
            with self._lock:
                job = self._next_locked()

    def _run(self, job: IngestJob) -> None:
        from rag_pipeline.defs.ingest_runner import ingest  # imports Dagster: only when an ingest is asked for

        try:
            job.summary = ingest(job.roots or None, self.data_dir, source=job.source)
            job.status = "succeeded"
        except Exception as error:
            log.exception("ingest %s failed", job.id)
            job.status, job.error = "failed", f"{type(error).__name__}: {error}"
        job.finished_at = time.time()


def sse(event: str, data: dict[str, Any]) -> str:
    return f"event: {event}\ndata: {json.dumps(data, allow_nan=False, default=str)}\n\n"


def create_app(settings: Settings | None = None, retriever: Retriever | None = None) -> FastAPI:
    """The API over `retriever` (default: the configured one, opened at startup and closed at shutdown)."""
    settings = settings or components.load_settings()
    metrics = Metrics()
    ingest_jobs = IngestJobs(settings.data_dir)
    runtime = Runtime(settings, retriever)
    SearchBody = models.with_default_top_k(SearchRequest, settings.top_k)
    AskBody = models.with_default_top_k(AskRequest, settings.top_k)
    search_threads = CapacityLimiter(settings.api_search_threads)
    sidecar = Sidecar(settings.sidecar_path)
    query_runner = QueryRunner(settings, sidecar)
    chat_memory = ChatMemory(sidecar, settings.chat_retention_days)
    bodies = {"/search": SearchBody, "/ask": AskBody, "/ingest": IngestRequest, "/query": QueryRequest,
              "/chat": ChatRequest}  # route -> its body model
    auth = Auth(settings)  # with API keys: reader for search, ask, metrics and the schema; ingester for ingest
    reader, ingester = Depends(auth.require("reader")), Depends(auth.require("ingester"))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await run_in_threadpool(runtime.start)  # a store that is down does not stop the server: 503s until it is up
        try:
            yield
        finally:
            runtime.close()

    async def rag_error(request: Request, error: RagError) -> Response:
        status = http_status(error)
        if status == 500:
            log.error("%s %s failed: %s", request.method, request.url.path, error, exc_info=error)
        challenge = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return error_response(status, error.code, error.message, challenge)

    async def invalid_body(request: Request, error: RequestValidationError) -> Response:
        body = bodies.get(getattr(request.scope.get("route"), "path", ""))
        return await rag_error(request, models.input_error(error.errors(), body.model_fields if body else ()))

    async def http_error(request: Request, error: HTTPException) -> Response:
        message = error.detail
        cause = error.__cause__
        if error.status_code == 400 and cause is not None:  # FastAPI could not parse the body
            reason = "nested too deeply" if isinstance(cause, RecursionError) else cause
            message = f"the body is not valid JSON: {reason}"
        return error_response(error.status_code, HTTP_ERROR_CODES.get(error.status_code, "http_error"), message,
                              error.headers)

    app = FastAPI(
        title="rag_pipeline", summary="Search, answers, ingest and health of the RAG platform",
        lifespan=lifespan, openapi_url=None, docs_url=None, redoc_url=None,  # /openapi.json below, behind auth
        exception_handlers={RagError: rag_error, RequestValidationError: invalid_body, HTTPException: http_error},
        middleware=[Middleware(RequestGuard, metrics=metrics, max_body_bytes=settings.api_max_body_bytes,
                               upload_max_bytes=settings.upload_max_bytes),
                    *screening.middleware(settings)],
    )

    app.add_middleware(AccessLog, log_queries=settings.api_log_queries)  # the outermost: sees every response

    @app.post("/search", response_model=SearchResponse, responses=ERROR_RESPONSES)
    async def search(body: SearchBody, scope: Annotated[KeyScope | None, reader]) -> Response:
        """The best `top_k` chunks for the query (hybrid retrieval, optional rerank and semantic cache)."""
        def run() -> tuple[Retriever, RetrievalResult]:  # one worker-thread hop per request
            retriever = runtime.retriever()
            return retriever, retriever.search(body.query, body.top_k, body.filters or None, scope)

        retriever, result = await anyio.to_thread.run_sync(run, limiter=search_threads)
        metrics.observe_retrieval(result, retriever.cache is not None)
        return JSONResponse(result.to_json())  # the contract's own JSON, as `search --json` writes it

    @app.post("/query", response_model=QueryResponse, responses=ERROR_RESPONSES)
    async def query(body: QueryRequest, scope: Annotated[KeyScope | None, reader]) -> Response:
        """An exact answer over document fields: count, list, distinct, group_by, top_n or lookup, on a read-only
        connection with row and time limits; a key's scope limits the documents it counts."""
        result = await run_in_threadpool(query_runner.run_json, body.model_dump(exclude_none=True), scope)
        return JSONResponse(result.to_json())

    @app.get("/fields", responses=ERROR_RESPONSES)
    async def fields(scope: Annotated[KeyScope | None, reader]) -> Response:
        """The fields /query accepts and their types, counts and origins over the documents the key may see
        (declared filterable ones filter /search)."""
        registry = await run_in_threadpool(load_registry, settings, sidecar, scope)
        return JSONResponse({"fields": [field.to_json() for field in registry.values()]})

    def chat_service() -> ChatService:
        # a model per turn: its token counts (last_usage) belong to this conversation alone
        return ChatService(settings, runtime.answerer(), sidecar, build_llm(settings))

    def owner(request: Request) -> str:
        return key_owner(getattr(request.state, KEY_STATE, None))

    @app.post("/chat", responses={
        200: {"content": {"text/event-stream": {}, "application/json": {
            "schema": {"$ref": "#/components/schemas/ChatResponse"}}},
              "description": 'server-sent events "session", "step" (a tool call), "observation" (its summary), '
                             '"token" (answer text), then "done" (the ChatResponse object); with Accept: '
                             'application/json the ChatResponse only'},
        **ERROR_RESPONSES})
    async def chat(body: ChatRequest, request: Request, scope: Annotated[KeyScope | None, reader]) -> Response:
        """One conversational turn: the agent routes between semantic search and the metadata query tool."""
        service = await run_in_threadpool(chat_service)
        events = service.stream(body.message, owner(request), body.session_id, body.filters or None, scope)
        first = await run_in_threadpool(next, events)  # a bad session or message fails here, before the stream
        if "application/json" in request.headers.get("accept", "") and \
                "text/event-stream" not in request.headers.get("accept", ""):
            done = await run_in_threadpool(lambda: next(data for event, data in events if event == "done"))
            return JSONResponse(done)

        def stream() -> Iterator[str]:
            try:
                for event, data in itertools.chain([first], events):  # each event as it happens
                    yield sse(event, data)
            except Exception as error:  # after the headers: report the failure as an event, without internals
                log.exception("chat stream failed")
                if isinstance(error, RagError) and http_status(error) < 500:
                    yield sse("error", {"code": error.code, "message": error.message})
                else:
                    yield sse("error", {"code": "internal_error", "message": "the answer failed; see the server log"})

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.get("/chat/{session_id}", responses=ERROR_RESPONSES)
    async def chat_session(session_id: str, request: Request, _: Annotated[KeyScope | None, reader]) -> Response:
        """The session's turns: message, answer, citations, trajectory (the key that created it only)."""
        turns = await run_in_threadpool(chat_memory.turns, session_id, owner(request))
        return JSONResponse({"session_id": session_id, "turns": [
            {"turn": turn["turn"], "message": turn["message"], "answer": turn["answer"],
             "citations": turn["record"].get("citations"), "trajectory": turn["record"].get("trajectory"),
             "exit_reason": turn["record"].get("exit_reason"), "created_at": str(turn["created_at"])}
            for turn in turns]})

    @app.delete("/chat/{session_id}", responses=ERROR_RESPONSES)
    async def delete_chat_session(session_id: str, request: Request,
                                  _: Annotated[KeyScope | None, reader]) -> Response:
        """Delete the session and its turns (the key that created it only)."""
        await run_in_threadpool(chat_memory.delete, session_id, owner(request))
        return JSONResponse({"session_id": session_id, "deleted": True})

    @app.post("/ask", response_class=StreamingResponse, responses={
        200: {"content": {"text/event-stream": {}},
              "description": 'server-sent events: "token" ({"text"}) events, then "done" (the answer with its '
                             'sources, citations and guardrail report); "error" if the stream fails midway'},
        **ERROR_RESPONSES})
    async def ask(body: AskBody, scope: Annotated[KeyScope | None, reader]) -> Response:
        """The answer to the question, streamed as it is written, grounded in the retrieved chunks."""
        answerer: Answerer = await run_in_threadpool(runtime.answerer)
        events = answerer.stream(body.question, body.top_k, body.filters or None, scope)
        first = await run_in_threadpool(next, events)  # retrieval errors surface here, before the stream starts

        def stream() -> Iterator[str]:
            try:
                for item in itertools.chain([first], events):  # each piece as it is generated
                    if isinstance(item, Answer):
                        yield sse("done", item.to_json())
                    else:
                        yield sse("token", {"text": item})
            except Exception:  # after the headers: report the failure as an event, without internals
                log.exception("answer stream failed")
                yield sse("error", {"code": "internal_error", "message": "the answer failed; see the server log"})

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.post("/ingest", status_code=202, response_model=IngestJobResponse, responses=ERROR_RESPONSES,
              dependencies=[ingester])
    async def start_ingest(body: IngestRequest | None = None) -> Response:
        """Start syncing the server's configured sources (RAG_SOURCES_FILE) or roots (RAG_ROOTS), one ingest at a
        time; poll the Location for progress. The body is empty or {}: a request never names paths."""
        if not settings.roots and not settings.sources_file:
            raise Conflict("the server has no roots to ingest: set RAG_ROOTS (comma-separated folders) or "
                           "RAG_SOURCES_FILE (named sources) where it runs", code="no_roots_configured")
        missing = [str(root) for root in settings.roots if not root.is_dir()]
        if missing:
            raise Conflict(f"configured root(s) not a directory: {', '.join(missing)} (RAG_ROOTS)",
                           code="roots_missing")
        # With a sources file every configured source is synced (RAG_ROOTS among them as `default`)
        job = ingest_jobs.start(None if settings.sources_file else [str(root) for root in settings.roots])
        return JSONResponse(job_json(job), status_code=202, headers={"Location": f"/ingest/{job.id}"})

    @app.get("/ingest/{id}", response_model=IngestJobResponse, responses=ERROR_RESPONSES, dependencies=[ingester])
    async def ingest_status(job_id: Annotated[str, PathParam(alias="id")]) -> Response:
        """An ingest started by POST /ingest, an upload or a removal: queued, running, or its summary (succeeded)
        or error (failed)."""
        job = ingest_jobs.jobs.get(job_id)
        if job is None:
            raise NotFound(f"no ingest with id {job_id}", code="unknown_ingest")
        return JSONResponse(job_json(job))

    def visible_source(name: str, scope: KeyScope | None) -> str:
        """`name`, if the key's scope may see that source (a key scoped to sources sees no other: 404)."""
        check_source_name(name)
        if scope is not None and scope.sources and name not in scope.sources:
            raise NotFound(f"unknown source {name!r}", code="unknown_source")
        return name

    def ingest_ref(job: IngestJob) -> dict[str, str]:
        return {"id": job.id, "status": job.status}

    @app.post("/sources/{name}/documents", status_code=202, response_model=UploadResponse,
              responses=ERROR_RESPONSES, openapi_extra=UPLOAD_BODY)
    async def upload_documents(name: Annotated[str, PathParam()], request: Request,
                               scope: Annotated[KeyScope | None, ingester]) -> Response:
        """Store files (multipart field `files`, one or several) in the upload source, then sync it (queued while
        another ingest runs). Each file's type comes from its bytes; refused files are listed, the others stored.
        Identical bytes are stored once per source (duplicate: true)."""
        visible_source(name, scope)
        await run_in_threadpool(upload_source, settings, name)  # 404 / 409 before the body is read
        uploaded_by = getattr(request.state, KEY_STATE, None)
        documents, rejected, first_error = [], [], None
        async with read_form(request) as files:
            for upload in files:
                filename = upload.filename or ""
                data = await upload.read()
                try:
                    stored = await run_in_threadpool(store_upload, settings, name, filename, data, uploaded_by)
                except InputError as error:
                    first_error = first_error or error
                    rejected.append({"filename": filename, "error": {"code": error.code, "message": error.message}})
                    continue
                documents.append(stored.to_json())
        if not documents:
            raise first_error or InputError("no file was uploaded", code="no_files")
        job = ingest_jobs.enqueue(name)
        return JSONResponse({"source": name, "documents": documents, "rejected": rejected, "ingest": ingest_ref(job)},
                            status_code=202, headers={"Location": f"/ingest/{job.id}"})

    @contextlib.asynccontextmanager
    async def read_form(request: Request) -> AsyncIterator[list[UploadFile]]:
        """The uploaded files of the request's form (field `files`), at most RAG_UPLOAD_MAX_FILES."""
        limit = settings.upload_max_files
        try:
            form = await request.form(max_files=limit, max_fields=limit)
        except HTTPException as error:
            if error.status_code != 400:
                raise
            if "too many files" in str(error.detail).lower():
                raise InputError(f"too many files: at most {limit} per request (RAG_UPLOAD_MAX_FILES)",
                                 code="too_many_files") from None
            raise InputError(f"the body is not a valid multipart form: {error.detail}", code="invalid_multipart") \
                from None
        try:
            files = [item for item in form.getlist("files") if isinstance(item, UploadFile)]
            if not files:
                raise InputError("no file: send the files in the multipart field `files`", code="no_files")
            if len(files) > limit:
                raise InputError(f"too many files: at most {limit} per request (RAG_UPLOAD_MAX_FILES)",
                                 code="too_many_files")
            yield files
        finally:
            await form.close()

    @app.get("/sources/{name}/documents", response_model=SourceDocumentsResponse, responses=ERROR_RESPONSES)
    async def source_documents(name: Annotated[str, PathParam()],
                               scope: Annotated[KeyScope | None, reader]) -> Response:
        """The documents a source holds (status, stage, chunks, paths) and the files its last scan refused. A key
        scoped to tags sees only documents with one of them."""
        visible_source(name, scope)
        listing = await run_in_threadpool(list_documents, settings, name, scope.tags if scope else None)
        return JSONResponse(listing)

    @app.delete("/sources/{name}/documents/{id}", status_code=202, response_model=RemoveResponse,
                responses=ERROR_RESPONSES)
    async def remove_source_document(name: Annotated[str, PathParam()],
                                     document_id: Annotated[str, PathParam(alias="id")],
                                     scope: Annotated[KeyScope | None, ingester]) -> Response:
        """Delete an upload source's stored files of the document, then sync the source, which purges it (from
        the index, unless another source holds it). A folder (roots) source's files are never deleted: 409. A key
        scoped to tags removes only documents it can see (one of its tags)."""
        visible_source(name, scope)
        if scope is not None and scope.tags:
            listing = await run_in_threadpool(list_documents, settings, name, scope.tags)
            if document_id not in {document["id"] for document in listing["documents"]}:
                await run_in_threadpool(upload_source, settings, name)  # 404 / 409 for the source first
                raise NotFound(f"source {name!r} holds no document {document_id[:100]} that this key may see",
                               code="unknown_document")
        removed = await run_in_threadpool(remove_document, settings, name, document_id)
        job = ingest_jobs.enqueue(name)
        return JSONResponse({"id": document_id, "removed_paths": removed, "ingest": ingest_ref(job)},
                            status_code=202, headers={"Location": f"/ingest/{job.id}"})

    @app.get("/sources", response_model=SourcesResponse, responses=ERROR_RESPONSES)
    async def list_sources(scope: Annotated[KeyScope | None, reader]) -> Response:
        """Every source, configured or synced: its kind and its documents, pending, failed and chunks."""
        overview = await run_in_threadpool(sources_overview, settings)
        if scope is not None and scope.sources:
            overview = [entry for entry in overview if entry["name"] in scope.sources]
        return JSONResponse({"sources": overview})

    @app.get("/healthz", response_model=HealthResponse,
             responses={503: {"model": HealthResponse, "description": "the store is down"}})
    async def healthz() -> Response:
        """Status of the store, the embedder, the reranker, the semantic cache and the LLM."""
        report = await run_in_threadpool(runtime.health)
        if report["store"]["ok"]:
            metrics.index_points.set(report["store"]["points"])
        return JSONResponse(report, status_code=200 if report["status"] != "down" else 503)

    @app.get("/metrics", include_in_schema=False, dependencies=[reader])
    async def prometheus() -> Response:
        with contextlib.suppress(Exception):  # a failing store must not break the scrape
            metrics.index_points.set(await run_in_threadpool(lambda: runtime.retriever().store.count()))
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/openapi.json", include_in_schema=False, dependencies=[reader])
    async def openapi() -> Response:
        return JSONResponse(app.openapi())

    return app


def job_json(job: IngestJob) -> dict[str, Any]:
    return {"id": job.id, "status": job.status, "roots": job.roots, "source": job.source, "started_at": job.started_at,
            "finished_at": job.finished_at, "summary": job.summary, "error": job.error}


def serve(settings: Settings, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run the API with uvicorn until interrupted."""
    import uvicorn

    uvicorn.run(create_app(settings), host=host, port=port, log_level="warning")
