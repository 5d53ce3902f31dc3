"""GET / (the web page for people: ask, chat, read the sources, upload) and GET /static/{name} (its script and
style sheet). Plain files shipped in the package (serve/web/), no build step; public like /healthz: the page holds
no data, and everything it shows comes from the API with the key the user enters (kept in sessionStorage)."""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations.

from pathlib import Path

from fastapi import APIRouter
from starlette.responses import FileResponse, Response

from rag_pipeline.errors import NotFound

WEB = Path(__file__).resolve().parents[1] / "web"
STATIC = {"page.js": "text/javascript", "page.css": "text/css"}
# The page loads nothing but its own files and talks only to this server; no other site may frame it.
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                               "img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "Cache-Control": "no-cache",
}

router = APIRouter(include_in_schema=False)


@router.get("/")
async def page() -> Response:
    return FileResponse(WEB / "index.html", media_type="text/html; charset=utf-8", headers=HEADERS)


@router.get("/static/{name}")
async def static(name: str) -> Response:
    if name not in STATIC:
        raise NotFound(f"no static file {name!r}", code="not_found")
    return FileResponse(WEB / name, media_type=f"{STATIC[name]}; charset=utf-8", headers=HEADERS)
