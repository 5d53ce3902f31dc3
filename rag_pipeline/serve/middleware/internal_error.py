"""ASGI middleware: a JSON 500 for an exception nothing else handled.

Not Starlette's ServerErrorMiddleware (what `exception_handlers={Exception: ...}` installs): that one sits outside
every user middleware, so the access log and the request metrics would never see the 500, and it re-raises the
exception after answering.
"""

from __future__ import annotations

import logging

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rag_pipeline.serve.http_errors import error_response

log = logging.getLogger(__name__)


class InternalError:
    """Answers a request whose handling raised, before any response started, with 500 internal_error (the
    exception's type only: no trace, no message) and logs the exception; one raised mid-response propagates."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        response_started = False

        async def send_tracked(message: Message) -> None:
            nonlocal response_started
            response_started = response_started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, send_tracked)
        except Exception as error:
            if response_started:
                raise
            log.exception("%s %s failed", scope["method"], scope["path"])
            response = error_response(500, "internal_error", f"{type(error).__name__}: the request failed")
            await response(scope, receive, send)
