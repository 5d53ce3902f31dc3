"""ASGI middleware: the errors of the OpenAI-compatible routes (/v1/...) in OpenAI's shape,
{"error": {"message", "type", "param", "code"}}, whichever layer refused the request (the screening, the key check,
the body's validation, the route). The API's own error body ({"error": {"code", "message"}}) is rewritten; the
code and the message stay as they were. Responses below 400 pass through untouched (streams included)."""

from __future__ import annotations

import json

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

OPENAI_PATHS = "/v1/"
# OpenAI's error types by status; any other 4xx is invalid_request_error, any 5xx server_error.
ERROR_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error", 409: "conflict_error",
               429: "rate_limit_error"}
# The request field an error code is about (OpenAI's `param`); other codes name none.
PARAMS = {"invalid_model": "model", "model_not_found": "model", "invalid_messages": "messages",
          "empty_message": "messages", "message_too_long": "messages", "invalid_stream": "stream"}


def error_type(status: int) -> str:
    return ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")


def openai_error(status: int, body: bytes) -> bytes:
    """The API's error body `body` of a `status` response in OpenAI's shape."""
    try:
        error = json.loads(body)["error"]
        code, message = str(error["code"]), str(error["message"])
    except (ValueError, KeyError, TypeError):
        code, message = "http_error", body.decode("utf-8", errors="replace")[:2000]
    return json.dumps({"error": {"message": message, "type": error_type(status), "param": PARAMS.get(code),
                                 "code": code}}).encode()


class OpenAIErrors:
    """Rewrites the error responses of the /v1/ routes in OpenAI's shape."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(OPENAI_PATHS):
            await self.app(scope, receive, send)
            return
        start: Message | None = None  # an error's start, held until its body is complete
        chunks: list[bytes] = []

        async def reshape(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start" and message["status"] >= 400:
                start = message
                return
            if start is None or message["type"] != "http.response.body":
                await send(message)
                return
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            body = openai_error(start["status"], b"".join(chunks))
            headers = MutableHeaders(scope=start)
            headers["content-length"] = str(len(body))
            headers["content-type"] = "application/json"
            await send(start)
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, reshape)
