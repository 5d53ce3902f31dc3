"""Cross-origin requests: an Origin header that is neither the server's own origin nor one of
RAG_API_CORS_ORIGINS gets 403 cross_origin; the configured origins get CORS (preflight included) from Starlette's
CORSMiddleware.

CORSMiddleware alone refuses nothing: a simple request from another origin still runs (only its CORS headers are
left out), and a refused preflight is a plain-text 400.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from rag_pipeline.serve.http_errors import error_response
from rag_pipeline.settings import Settings


class SameOrigin:
    """Refuses a request with an Origin header that is neither the request's own origin nor in `cors_origins`."""

    def __init__(self, app: ASGIApp, cors_origins: list[str]) -> None:
        self.app = app
        self.cors_origins = set(cors_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        own_origin = f"{scope['scheme']}://{headers.get('host', '').lower()}"
        if origin is not None and origin != own_origin and origin not in self.cors_origins:
            refusal = error_response(403, "cross_origin", f"cross-origin requests from {origin[:100]!r} are refused; "
                                     "the server allows the origins in RAG_API_CORS_ORIGINS")
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)


def cors(settings: Settings) -> list[Middleware]:
    """CORS for the configured origins (none by default: no middleware)."""
    if not settings.api_cors_origins:
        return []
    return [Middleware(CORSMiddleware, allow_origins=settings.api_cors_origins, allow_methods=["GET", "POST", "DELETE"],
                       allow_headers=["*"], expose_headers=["Location"])]
