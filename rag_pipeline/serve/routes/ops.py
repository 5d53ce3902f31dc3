"""For operators: GET /healthz (no key needed), GET /metrics (Prometheus) and GET /openapi.json (behind a key)."""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations.

import contextlib

from fastapi import APIRouter
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from rag_pipeline.serve.dependencies import ServicesDep, reader
from rag_pipeline.serve.models import HealthResponse

router = APIRouter()


@router.get("/healthz", response_model=HealthResponse,
            responses={503: {"model": HealthResponse, "description": "the store is down"}})
async def healthz(services: ServicesDep) -> Response:
    """Status of the store, the embedder, the reranker, the semantic cache and the LLM."""
    report = await run_in_threadpool(lambda: services.paths.current().json(services.runtime.health()))
    if report["store"]["ok"]:
        services.metrics.index_points.set(report["store"]["points"])
    return JSONResponse(report, status_code=200 if report["status"] != "down" else 503)


@router.get("/metrics", include_in_schema=False, dependencies=[reader])
async def prometheus(services: ServicesDep) -> Response:
    metrics, runtime = services.metrics, services.runtime
    with contextlib.suppress(Exception):  # a failing store must not break the scrape
        metrics.index_points.set(await run_in_threadpool(lambda: runtime.retriever().store.count()))
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)


@router.get("/openapi.json", include_in_schema=False, dependencies=[reader])
async def openapi(request: Request) -> Response:
    return JSONResponse(request.app.openapi())
