"""API keys over HTTP, for an admin key without a scope: GET /keys, POST /keys (the token shown once),
DELETE /keys/{name}. The same file and rules as `rag-pipeline keys` (serve/keys.py)."""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations.

from typing import Annotated

from fastapi import APIRouter
from fastapi import Path as PathParam
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response

from rag_pipeline.errors import Forbidden
from rag_pipeline.index.vector_store import Scope
from rag_pipeline.serve.dependencies import Admin, ServicesDep
from rag_pipeline.serve.http_errors import ERROR_RESPONSES
from rag_pipeline.serve.keys import create_key, read_keys, revoke_key
from rag_pipeline.serve.models import KeyCreated, KeyRequest, KeyRevoked, KeysResponse

router = APIRouter()
NO_STORE = {"Cache-Control": "no-store"}  # a token must not stay in a cache


def unscoped(scope: Scope | None) -> None:
    """A scoped admin key could hand out keys wider than its own scope: it may not manage keys."""
    if scope is not None:
        raise Forbidden("managing API keys needs an admin key without a scope (no tags, no sources)")


@router.get("/keys", response_model=KeysResponse, responses=ERROR_RESPONSES)
async def list_keys(scope: Admin, services: ServicesDep) -> Response:
    """The keys (name, role, scope, creation time; never a token)."""
    unscoped(scope)
    keys = await run_in_threadpool(read_keys, services.settings.api_keys_path)
    return JSONResponse({"keys": [key.to_json() for key in keys]})


@router.post("/keys", status_code=201, response_model=KeyCreated, responses=ERROR_RESPONSES)
async def add_key(body: KeyRequest, scope: Admin, services: ServicesDep) -> Response:
    """Create a key; its token is in this answer only. 400 duplicate_key for a name in use."""
    unscoped(scope)
    key, token = await run_in_threadpool(create_key, services.settings.api_keys_path, body.name, body.role,
                                         tuple(body.tags), tuple(body.sources))
    return JSONResponse({**key.to_json(), "token": token}, status_code=201, headers=NO_STORE)


@router.delete("/keys/{name}", response_model=KeyRevoked, responses=ERROR_RESPONSES)
async def remove_key(name: Annotated[str, PathParam(max_length=64)], scope: Admin, services: ServicesDep) -> Response:
    """Revoke a key: its token stops working at once (404 unknown_key). Revoking the last key locks the server
    until a key exists again."""
    unscoped(scope)
    await run_in_threadpool(revoke_key, services.settings.api_keys_path, name)
    return JSONResponse({"revoked": name})
