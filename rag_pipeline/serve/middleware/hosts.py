"""ASGI middleware: the Host allow-list. A request whose Host header names none of localhost, 127.0.0.1, [::1]
and RAG_API_ALLOWED_HOSTS (the port is ignored), or that has no Host header or several, gets 400 invalid_host: a
DNS-rebinding page cannot reach a local server.

Not Starlette's TrustedHostMiddleware: its refusal is a fixed plain-text 400 "Invalid host header" (built inside
its __call__, with no hook to change it), where the API answers {"error": {"code": "invalid_host", ...}}.
"""

from __future__ import annotations

import re

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from rag_pipeline.serve.http_errors import error_response

LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]")
# A Host header: a name or IPv4 address, or an IPv6 address in brackets, then an optional port.
HOST_HEADER = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[^\s:@/\[\]]+)(?::\d{1,5})?")


class AllowedHosts:
    """Refuses a request whose Host header is not one of `hosts` (compared without case and port)."""

    def __init__(self, app: ASGIApp, hosts: list[str]) -> None:
        self.app = app
        self.hosts = {host.lower() for host in hosts}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await (self.refusal(Headers(scope=scope).getlist("host")) or self.app)(scope, receive, send)

    def refusal(self, host_headers: list[str]) -> ASGIApp | None:
        """The 400 for the request's Host headers, or None when there is one and it names an allowed host."""
        if len(host_headers) > 1:  # which one a proxy or a cache read is anyone's guess
            return error_response(400, "invalid_host", f"a request needs one Host header, not {len(host_headers)}")
        host_header = host_headers[0] if host_headers else ""
        match = HOST_HEADER.fullmatch(host_header)
        if match is None or match["host"].lower() not in self.hosts:
            return error_response(400, "invalid_host", f"the Host header {host_header[:100]!r} is not an allowed "
                                  "host: localhost, 127.0.0.1, [::1] or one of RAG_API_ALLOWED_HOSTS")
        return None
