"""The HTTP API (FastAPI): `create_app` builds it, `serve` runs it.

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
    GET  /keys         the API keys (admin); POST /keys {"name", "role"?, "tags"?, "sources"?} -> 201 the key and its
                       token (shown once); DELETE /keys/{name} revokes one
    GET  /healthz      store, embedder and LLM status (503 when the store is down)
    GET  /metrics      Prometheus text format
    GET  /openapi.json the OpenAPI document: the bodies above as JSON schemas (serve/models.py); no docs UI

The routes are in serve/routes/ (one module per resource), what they are given in serve/dependencies.py, the
middleware in serve/middleware/. Every error is {"error": {"code", "message"}} (serve/http_errors.py); a request
the screening refuses (Host, Origin, media type, JSON nesting) gets its 4xx before any route. A store that is down
gives 503s, not a dead server (serve/runtime.py). With API keys (serve/keys.py) every route but /healthz needs a
bearer token of a role (serve/auth.py); a key's scope filters what the routes read. Without keys the server refuses
every request, unless it was started in keyless loopback mode and has never had a key.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from anyio import CapacityLimiter
from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware

from rag_pipeline import components
from rag_pipeline.chat.memory import ChatMemory
from rag_pipeline.retrieve.retriever import Retriever
from rag_pipeline.serve.auth import Auth
from rag_pipeline.serve.dependencies import Services
from rag_pipeline.serve.http_errors import EXCEPTION_HANDLERS
from rag_pipeline.serve.ingest_jobs import IngestJobs
from rag_pipeline.serve.middleware.access_log import AccessLog
from rag_pipeline.serve.middleware.body_limit import BodyLimit
from rag_pipeline.serve.middleware.hosts import LOCAL_HOSTS, AllowedHosts
from rag_pipeline.serve.middleware.internal_error import InternalError
from rag_pipeline.serve.middleware.json_body import JsonBodies
from rag_pipeline.serve.middleware.origins import SameOrigin, cors
from rag_pipeline.serve.middleware.prometheus import Metrics, RequestMetrics
from rag_pipeline.serve.public_paths import ServerPaths
from rag_pipeline.serve.routes import conversation, documents, keys, metadata, ops, search
from rag_pipeline.serve.runtime import Runtime
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar
from rag_pipeline.structured.query import QueryRunner


def create_app(settings: Settings | None = None, retriever: Retriever | None = None) -> FastAPI:
    """The API over `retriever` (default: the configured one, opened at startup and closed at shutdown)."""
    settings = settings or components.load_settings()
    sidecar = Sidecar(settings.sidecar_location)
    services = Services(
        settings=settings, runtime=Runtime(settings, retriever), metrics=Metrics(),
        ingest_jobs=IngestJobs(settings.data_dir), sidecar=sidecar, query_runner=QueryRunner(settings, sidecar),
        chat_memory=ChatMemory(sidecar, settings.chat_retention_days),
        search_threads=CapacityLimiter(settings.api_search_threads), auth=Auth(settings),
        paths=ServerPaths(settings, sidecar))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runtime = services.runtime
        await run_in_threadpool(runtime.start)  # a store that is down does not stop the server: 503s until it is up
        try:
            yield
        finally:
            runtime.close()

    app = FastAPI(
        title="rag_pipeline", summary="Search, answers, ingest and health of the RAG platform",
        lifespan=lifespan, openapi_url=None, docs_url=None, redoc_url=None,  # routes/ops.py serves it, behind auth
        exception_handlers=EXCEPTION_HANDLERS, middleware=middleware(settings, services.metrics),
    )
    app.state.services = services
    for router in (search.router(settings.top_k), metadata.router, conversation.router, documents.router, keys.router,
                   ops.router):
        app.include_router(router)
    return app


def middleware(settings: Settings, metrics: Metrics) -> list[Middleware]:
    """The middleware, outermost first: the access log and the metrics see every response (the JSON 500 of an
    unhandled exception included); the body limit and the screening come before any route."""
    return [
        Middleware(AccessLog, log_queries=settings.api_log_queries),
        Middleware(RequestMetrics, metrics=metrics),
        Middleware(InternalError),
        Middleware(BodyLimit, max_body_bytes=settings.api_max_body_bytes, upload_max_bytes=settings.upload_max_bytes),
        Middleware(AllowedHosts, hosts=[*LOCAL_HOSTS, *settings.api_allowed_hosts]),
        Middleware(SameOrigin, cors_origins=settings.api_cors_origins),
        Middleware(JsonBodies),
        *cors(settings),
    ]


def serve(settings: Settings, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run the API with uvicorn until interrupted."""
    import uvicorn

    uvicorn.run(create_app(settings), host=host, port=port, log_level="warning")
