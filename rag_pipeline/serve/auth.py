"""Who may call the HTTP API: a FastAPI dependency per role, and the access log.

With at least one API key (serve/keys.py), every route that depends on `Auth.require(role)` needs
`Authorization: Bearer <token>`: 401 (NotAuthenticated) without a valid token, 403 (Forbidden) for a key whose
role is below `role`. The dependency gives the route the key's Scope, which the retriever ANDs with the request's
filters. With no key, requests that arrive on a loopback address are served and the others refused (403), so a
server that lost its last key never becomes open (serve() also refuses to bind elsewhere without a key).
"""

from __future__ import annotations

import ipaddress
import json
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Annotated

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Send
from starlette.types import Scope as AsgiScope

from rag_pipeline.errors import Forbidden, NotAuthenticated
from rag_pipeline.index.vector_store import Scope
from rag_pipeline.serve.keys import Keyring, Role, is_loopback
from rag_pipeline.serve.screening import is_upload
from rag_pipeline.settings import Settings

access_log = logging.getLogger("rag_pipeline.access")
KEY_STATE = "api_key"  # the request state's entry naming the caller's key, for the access log
MAX_LOGGED_CHARS = 1000  # of a query, and of an unrouted path
# Reads the header and documents the scheme in the OpenAPI document; a missing or malformed header gives None.
bearer = HTTPBearer(auto_error=False, description="an API key's token (`rag-pipeline keys create`)")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


class Auth:
    """The API's authentication over the configured keys (`Keyring`)."""

    def __init__(self, settings: Settings) -> None:
        self.keyring = Keyring(settings)

    def require(self, role: Role) -> Callable[..., Awaitable[Scope | None]]:
        """A dependency that admits keys of `role` or above and gives their scope (None: everything)."""

        async def authorize(request: Request, credentials: Credentials) -> Scope | None:
            return self.authorize(request, credentials, role)

        return authorize

    def authorize(self, request: Request, credentials: HTTPAuthorizationCredentials | None, role: Role
                  ) -> Scope | None:
        if not self.keyring.keys():
            if arrived_remotely(request):
                raise Forbidden("this server has no API key, so it answers on loopback only: create one with "
                                "`rag-pipeline keys create NAME`")
            return None
        if credentials is None:
            raise NotAuthenticated("an API key is required: send the header Authorization: Bearer <token>")
        key = self.keyring.lookup(credentials.credentials)
        if key is None:
            raise NotAuthenticated("the API key is not valid (unknown or revoked)", code="invalid_api_key")
        request.state.api_key = key.name
        if not key.allows(role):
            raise Forbidden(f"the key {key.name!r} has the role {key.role}; this endpoint needs {role}")
        return key.scope


def arrived_remotely(request: Request) -> bool:
    """True when the request came in on a non-loopback IP address of this server (not a unix socket or an
    in-process test transport, which name no IP address)."""
    host = (request.scope.get("server") or ("",))[0] or ""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return not is_loopback(host)


class AccessLog:
    """ASGI middleware: one JSON line per HTTP request on the `rag_pipeline.access` logger (level INFO): time,
    key (its name, or "-"), method, endpoint (the route template, else the path), status, latency_ms; plus the
    query or question of the body when `log_queries` (RAG_API_LOG_QUERIES)."""

    def __init__(self, app: ASGIApp, log_queries: bool = False) -> None:
        self.app, self.log_queries = app, log_queries

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, at = time.perf_counter(), datetime.now(UTC).isoformat(timespec="milliseconds")
        state = scope.setdefault("state", {})
        status, body, logged = 500, bytearray(), False

        def write() -> None:  # once the response is complete (before its last bytes go out), or has failed
            nonlocal logged
            logged = True
            endpoint = getattr(scope.get("route"), "path", None) or scope["path"][:MAX_LOGGED_CHARS]
            record = {"time": at, "key": state.get(KEY_STATE, "-"), "method": scope["method"], "endpoint": endpoint,
                      "status": status, "latency_ms": round((time.perf_counter() - started) * 1000, 3)}
            query = logged_query(bytes(body)) if self.log_queries else None
            if query is not None:
                record["query"] = query
            access_log.info(json.dumps(record))

        async def send_logged(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                write()
            await send(message)

        async def receive_logged() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                body.extend(message.get("body", b""))
            return message

        try:
            logged_body = self.log_queries and not is_upload(scope)  # an upload's files are no query
            await self.app(scope, receive_logged if logged_body else receive, send_logged)
        finally:
            if not logged:
                write()


def logged_query(body: bytes) -> str | None:
    """The `query` or `question` of a JSON request body, shortened; None when there is none."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    text = data.get("query", data.get("question")) if isinstance(data, dict) else None
    return text[:MAX_LOGGED_CHARS] if isinstance(text, str) else None
