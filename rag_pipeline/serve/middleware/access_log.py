"""ASGI middleware: the access log, one JSON line per HTTP request on the `rag_pipeline.access` logger."""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rag_pipeline.serve.auth import KEY_STATE
from rag_pipeline.serve.middleware.json_body import is_upload

access_log = logging.getLogger("rag_pipeline.access")
MAX_LOGGED_CHARS = 1000  # of a query, and of an unrouted path


class AccessLog:
    """ASGI middleware: one JSON line per HTTP request on the `rag_pipeline.access` logger (level INFO): time,
    key (its name, or "-"), method, endpoint (the route template, else the path), status, latency_ms; plus the
    query or question of the body when `log_queries` (RAG_API_LOG_QUERIES)."""

    def __init__(self, app: ASGIApp, log_queries: bool = False) -> None:
        self.app, self.log_queries = app, log_queries

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
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
