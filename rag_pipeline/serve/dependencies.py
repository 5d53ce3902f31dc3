"""What the routes are given, as FastAPI dependencies: the app's services (`ServicesDep`) and the caller's key
scope, for a route that needs the role (`Reader`, `Ingester`, `Admin`; `reader`, `ingester`, `admin` for a route's
dependencies)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated

from anyio import CapacityLimiter
from fastapi import Depends
from starlette.requests import Request

from rag_pipeline.chat.memory import ChatMemory
from rag_pipeline.index.vector_store import Scope
from rag_pipeline.retrieve.retriever import Retriever
from rag_pipeline.serve.auth import Auth, Credentials
from rag_pipeline.serve.ingest_jobs import IngestJobs
from rag_pipeline.serve.keys import Role
from rag_pipeline.serve.middleware.prometheus import Metrics
from rag_pipeline.serve.public_paths import ServerPaths
from rag_pipeline.serve.runtime import Runtime
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import ChatStore, Sidecar
from rag_pipeline.structured.query import QueryRunner


@dataclass(frozen=True)
class Services:
    """What the routes serve with, one set per app (create_app puts it in app.state.services)."""

    settings: Settings
    runtime: Runtime  # the retriever and the answerer
    metrics: Metrics
    ingest_jobs: IngestJobs
    sidecar: Sidecar
    query_runner: QueryRunner
    chat_memory: ChatMemory
    search_threads: CapacityLimiter  # the worker threads /search may hold at once
    auth: Auth
    paths: ServerPaths  # how answers show server paths, and how path filters are read back


def build_services(settings: Settings, retriever: Retriever | None = None) -> Services:
    """The services of one app (or of the MCP server on stdio) over `retriever`, else the configured one."""
    sidecar = Sidecar(settings.sidecar_location)
    return Services(
        settings=settings, runtime=Runtime(settings, retriever), metrics=Metrics(),
        ingest_jobs=IngestJobs(settings.data_dir), sidecar=sidecar, query_runner=QueryRunner(settings, sidecar),
        chat_memory=ChatMemory(ChatStore.beside(settings.sidecar_location), settings.chat_retention_days),
        search_threads=CapacityLimiter(settings.api_search_threads), auth=Auth(settings),
        paths=ServerPaths(settings, sidecar))


async def get_services(request: Request) -> Services:  # async: FastAPI runs a plain def in a worker thread
    return request.app.state.services


ServicesDep = Annotated[Services, Depends(get_services)]


def require(role: Role) -> Callable[..., Awaitable[Scope | None]]:
    """A dependency that admits keys of `role` or above and gives their scope (None: everything)."""

    async def authorize(request: Request, credentials: Credentials, services: ServicesDep) -> Scope | None:
        return services.auth.authorize(request, credentials, role)

    return authorize


reader, ingester, admin = Depends(require("reader")), Depends(require("ingester")), Depends(require("admin"))
Reader = Annotated[Scope | None, reader]
Ingester = Annotated[Scope | None, ingester]
Admin = Annotated[Scope | None, admin]
