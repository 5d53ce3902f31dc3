"""ASGI middleware: request bodies are JSON, and not nested too deeply.

    415 unsupported_media_type  a POST body that is not Content-Type application/json (a body without one included):
                                no form post from another site's page gets in. The upload route (POST
                                /sources/{name}/documents) takes multipart/form-data instead, and only that: a form
                                from another site's page carries its Origin, which middleware/origins.py refuses
    400 invalid_json            JSON nested deeper than MAX_JSON_DEPTH, found while the route reads the body (one
                                linear scan of the bytes, before any parser recurses into them)
"""

from __future__ import annotations

import re

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rag_pipeline.serve.http_errors import error_response

MAX_JSON_DEPTH = 32
JSON_MEDIA_TYPE = "application/json"
MULTIPART_MEDIA_TYPE = "multipart/form-data"
UPLOAD_ROUTE = re.compile(r"/sources/[^/]+/documents")  # POST: multipart uploads (routes/ingest.py)
JSON_STRUCTURE = re.compile(rb'[\\"\[\]{}]')  # the bytes that open or close strings, arrays and objects


class JsonBodies:
    """Answers a POST whose body is not of the route's media type with 415; passes the rest on with a `receive`
    that refuses JSON nested too deeply."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = media_type_refusal(scope) if scope["method"] == "POST" else None
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive if is_upload(scope) else nesting_limited(receive), send)


def media_type_refusal(scope: Scope) -> JSONResponse | None:
    """The 415 a POST gets when its body is not JSON (an upload's: not multipart), else None."""
    headers = Headers(scope=scope)
    media_type = headers.get("content-type", "").partition(";")[0].strip().lower()
    got = media_type[:100] or "no Content-Type"
    if is_upload(scope):
        if media_type != MULTIPART_MEDIA_TYPE:
            return error_response(415, "unsupported_media_type",
                                  f"an upload must be {MULTIPART_MEDIA_TYPE} (field `files`): {got}")
        return None
    has_body = headers.get("content-length", "0") != "0" or "transfer-encoding" in headers
    if media_type != JSON_MEDIA_TYPE and (media_type or has_body):
        return error_response(415, "unsupported_media_type", f"a POST body must be {JSON_MEDIA_TYPE}: {got}")
    return None


def is_upload(scope: Scope) -> bool:
    """True for the upload route's POSTs (multipart, not JSON; their own body limit)."""
    return scope["method"] == "POST" and UPLOAD_ROUTE.fullmatch(scope["path"]) is not None


def nesting_limited(receive: Receive) -> Receive:
    """`receive` that raises a 400 (invalid_json) once the body's JSON nests deeper than MAX_JSON_DEPTH."""
    nesting = JsonNesting()

    async def receive_checked() -> Message:
        message = await receive()
        if message["type"] == "http.request" and nesting.feed(message.get("body", b"")) > MAX_JSON_DEPTH:
            raise HTTPException(400, f"the body is not valid JSON: nested deeper than {MAX_JSON_DEPTH} levels")
        return message

    return receive_checked


class JsonNesting:
    """The deepest array/object nesting of a JSON text fed in pieces, brackets inside strings excluded."""

    def __init__(self) -> None:
        self.depth = self.deepest = 0
        self.in_string = False
        self.escape_pending = False  # the previous piece ended on a backslash inside a string

    def feed(self, piece: bytes) -> int:
        """Scan the next piece; the deepest nesting so far."""
        escaped = 0 if self.escape_pending else -1  # the index of a byte a backslash escapes
        self.escape_pending = False
        for match in JSON_STRUCTURE.finditer(piece):
            at = match.start()
            if at == escaped:
                continue
            byte = piece[at : at + 1]
            if self.in_string:
                if byte == b"\\":
                    escaped = at + 1
                    self.escape_pending = escaped == len(piece)
                elif byte == b'"':
                    self.in_string = False
            elif byte == b'"':
                self.in_string = True
            elif byte in (b"[", b"{"):
                self.depth += 1
                self.deepest = max(self.deepest, self.depth)
            elif byte in (b"]", b"}"):
                self.depth -= 1
        return self.deepest
