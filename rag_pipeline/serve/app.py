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
    GET  /v1/models, POST /v1/chat/completions  the OpenAI-compatible API (routes/openai_chat.py; errors in OpenAI's
                       shape)
    POST /mcp          the MCP server (streamable HTTP, serve/mcp_server.py): tools search, ask, query_metadata,
                       list_fields, get_document
    GET  /             the web page (serve/web/: ask, chat, sources, uploads), no key needed to load it

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

from fastapi import FastAPI
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware

from rag_pipeline import components
from rag_pipeline.retrieve.retriever import Retriever
from rag_pipeline.serve.dependencies import build_services
from rag_pipeline.serve.http_errors import EXCEPTION_HANDLERS
from rag_pipeline.serve.mcp_server import McpHttp
from rag_pipeline.serve.middleware.access_log import AccessLog
from rag_pipeline.serve.middleware.body_limit import BodyLimit
from rag_pipeline.serve.middleware.hosts import LOCAL_HOSTS, AllowedHosts
from rag_pipeline.serve.middleware.internal_error import InternalError
from rag_pipeline.serve.middleware.json_body import JsonBodies
from rag_pipeline.serve.middleware.openai_errors import OpenAIErrors
from rag_pipeline.serve.middleware.origins import SameOrigin, cors
from rag_pipeline.serve.middleware.prometheus import Metrics, RequestMetrics
from rag_pipeline.serve.openapi import openapi_document
from rag_pipeline.serve.routes import conversation, documents, keys, metadata, openai_chat, ops, page, search
from rag_pipeline.settings import Settings


def create_app(settings: Settings | None = None, retriever: Retriever | None = None) -> FastAPI:
    """The API over `retriever` (default: the configured one, opened at startup and closed at shutdown)."""
    settings = settings or components.load_settings()
    services = build_services(settings, retriever)
    mcp_http = McpHttp(services)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        runtime = services.runtime
        await run_in_threadpool(runtime.start)  # a store that is down does not stop the server: 503s until it is up
        try:
            async with mcp_http.running():
                yield
        finally:
            runtime.close()

    app = FastAPI(
        title="rag_pipeline", summary="Search, answers, ingest and health of the RAG platform",
        lifespan=lifespan, openapi_url=None, docs_url=None, redoc_url=None,  # routes/ops.py serves it, behind auth
        exception_handlers=EXCEPTION_HANDLERS, middleware=middleware(settings, services.metrics),
    )
    app.openapi = lambda: openapi_document(app)  # type: ignore[method-assign]  # with the event streams' schemas
    app.state.services = services
    for router in (search.router(settings.top_k), metadata.router, conversation.router, documents.router, keys.router,
                   ops.router, openai_chat.router, page.router):
        app.include_router(router)
    app.router.routes.append(mcp_http.route())
    return app


def middleware(settings: Settings, metrics: Metrics) -> list[Middleware]:
    """The middleware, outermost first: the access log and the metrics see every response (the JSON 500 of an
    unhandled exception included), and the errors of /v1/ get OpenAI's shape; the body limit and the screening come
    before any route."""
    return [
        Middleware(AccessLog, log_queries=settings.api_log_queries),
        Middleware(RequestMetrics, metrics=metrics),
        Middleware(OpenAIErrors),
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

    # log_config=None: uvicorn keeps the handlers the caller gave its loggers (the CLI's JSON lines)
    uvicorn.run(create_app(settings), host=host, port=port, log_level="warning", log_config=None)
