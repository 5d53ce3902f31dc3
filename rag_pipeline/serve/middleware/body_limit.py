"""ASGI middleware: the request body's size limit, RAG_API_MAX_BODY_BYTES (an upload's: RAG_UPLOAD_MAX_BYTES).

Not FastAPI's `max_body_size` (Starlette's RequestBodyLimitMiddleware): it answers a plain-text 413 "Content Too
Large", also for a request whose route never reads the body (a 401, a 404, a refused Host), where the API answers
with its JSON error body; this limit is a 413 body_too_large only for a route that reads the body.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rag_pipeline.serve.middleware.json_body import is_upload


class BodyLimit:
    """Passes the request on with a `receive` that raises a 413 once the body is over the limit: at once when the
    declared Content-Length is, else as the streamed pieces add up."""

    def __init__(self, app: ASGIApp, max_body_bytes: int, upload_max_bytes: int) -> None:
        self.app, self.max_body_bytes, self.upload_max_bytes = app, max_body_bytes, upload_max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.app(scope, self.limited(scope, receive), send)

    def limited(self, scope: Scope, receive: Receive) -> Receive:
        limit = self.upload_max_bytes if is_upload(scope) else self.max_body_bytes
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
