"""POST /query (an exact answer over document fields) and GET /fields (the fields it knows)."""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations.

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response

from rag_pipeline.serve.dependencies import Reader, ServicesDep
from rag_pipeline.serve.http_errors import ERROR_RESPONSES
from rag_pipeline.serve.models import FieldsResponse, QueryRequest, QueryResponse
from rag_pipeline.structured.query import load_registry

router = APIRouter()


@router.post("/query", response_model=QueryResponse, responses=ERROR_RESPONSES)
async def query(body: QueryRequest, scope: Reader, services: ServicesDep) -> Response:
    """An exact answer over document fields (the operations of structured/operations.py, set operations and
    semi-joins included), on a read-only connection with row and time limits; a key's scope limits the documents it
    counts."""
    paths = await run_in_threadpool(services.paths.current)
    request = paths.query(body.body())
    result = await run_in_threadpool(services.query_runner.run_json, request, scope)
    return JSONResponse(paths.json(result.to_json()))


@router.get("/fields", response_model=FieldsResponse, responses=ERROR_RESPONSES)
async def fields(scope: Reader, services: ServicesDep) -> Response:
    """The fields /query accepts and their types, counts and origins over the documents the key may see
    (declared filterable ones filter /search)."""
    registry = await run_in_threadpool(load_registry, services.settings, services.sidecar, scope)
    return JSONResponse({"fields": [field.to_json() for field in registry.values()]})
