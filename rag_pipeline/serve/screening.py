"""The HTTP API's request screening (ASGI middleware): what a request must be before any route sees it.

    400 invalid_host            the Host header names none of localhost, 127.0.0.1, [::1] and RAG_API_ALLOWED_HOSTS
                                (the port is ignored): a DNS-rebinding page cannot reach a local server
    403 cross_origin            an Origin header that is neither the server's own origin nor in RAG_API_CORS_ORIGINS
                                (those get CORS, preflight included, from Starlette's CORSMiddleware)
    415 unsupported_media_type  a POST body that is not Content-Type application/json (a body without one included):
                                no form post from another site's page gets in. The upload route (POST
                                /sources/{name}/documents) takes multipart/form-data instead, and only that: a form
                                from another site's page carries its Origin, which the rule above refuses
    400 invalid_json            JSON nested deeper than MAX_JSON_DEPTH, found while the route reads the body (one
                                linear scan of the bytes, before any parser recurses into them)
"""

from __future__ import annotations

import re

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rag_pipeline.settings import Settings

LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]")
MAX_JSON_DEPTH = 32
JSON_MEDIA_TYPE = "application/json"
MULTIPART_MEDIA_TYPE = "multipart/form-data"
UPLOAD_ROUTE = re.compile(r"/sources/[^/]+/documents")  # POST: multipart uploads (serve/api.py)
# A Host header: a name or IPv4 address, or an IPv6 address in brackets, then an optional port.
HOST_HEADER = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[^\s:@/\[\]]+)(?::\d{1,5})?")
JSON_STRUCTURE = re.compile(rb'[\\"\[\]{}]')  # the bytes that open or close strings, arrays and objects


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The API's one error body, {"error": {"code", "message"}}."""
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


def middleware(settings: Settings) -> list[Middleware]:
    """The screening, then CORS for the configured origins (none by default), outermost first."""
    screen = Middleware(RequestScreen, allowed_hosts=[*LOCAL_HOSTS, *settings.api_allowed_hosts],
                        cors_origins=settings.api_cors_origins)
    if not settings.api_cors_origins:
        return [screen]
    cors = Middleware(CORSMiddleware, allow_origins=settings.api_cors_origins, allow_methods=["GET", "POST", "DELETE"],
                      allow_headers=["*"], expose_headers=["Location"])
    return [screen, cors]


class RequestScreen:
    """Answers a request from a disallowed host or origin, or a POST body that is not JSON, with the API's error
    body; passes the rest on with a `receive` that refuses JSON nested too deeply."""

    def __init__(self, app: ASGIApp, allowed_hosts: list[str], cors_origins: list[str]) -> None:
        self.app = app
        self.allowed_hosts = {host.lower() for host in allowed_hosts}
        self.cors_origins = set(cors_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope, Headers(scope=scope))
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive if is_upload(scope) else nesting_limited(receive), send)

    def refusal(self, scope: Scope, headers: Headers) -> JSONResponse | None:
        """The error response the request gets before reaching the app, or None when it may go on."""
        host_header = headers.get("host", "")
        match = HOST_HEADER.fullmatch(host_header)
        if match is None or match["host"].lower() not in self.allowed_hosts:
            return error_response(400, "invalid_host", f"the Host header {host_header[:100]!r} is not an allowed "
                                  "host: localhost, 127.0.0.1, [::1] or one of RAG_API_ALLOWED_HOSTS")
        origin = headers.get("origin")
        if origin is not None and origin != f"{scope['scheme']}://{host_header.lower()}" \
                and origin not in self.cors_origins:
            return error_response(403, "cross_origin", f"cross-origin requests from {origin[:100]!r} are refused; "
                                  "the server allows the origins in RAG_API_CORS_ORIGINS")
        if scope["method"] == "POST":
            media_type = headers.get("content-type", "").partition(";")[0].strip().lower()
            has_body = headers.get("content-length", "0") != "0" or "transfer-encoding" in headers
            if is_upload(scope):
                if media_type != MULTIPART_MEDIA_TYPE:
                    got = media_type[:100] or "no Content-Type"
                    return error_response(415, "unsupported_media_type",
                                          f"an upload must be {MULTIPART_MEDIA_TYPE} (field `files`): {got}")
            elif media_type != JSON_MEDIA_TYPE and (media_type or has_body):
                got = media_type[:100] or "no Content-Type"
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
