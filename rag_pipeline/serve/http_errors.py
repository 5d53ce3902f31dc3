"""The API's errors over HTTP: each kind of RagError's status (the one place it is decided), the one error body
{"error": {"code", "message"}}, the exception handlers that give it, and its entries in the OpenAPI document.

A RagError gets the status of its kind and its message with no server path in it (serve/public_paths.py); one
that is the server's fault (500: its configuration) a message that only points to the log, where the details go.
A body that fails validation gets a 400 whose code names the field (input_error: empty_query, invalid_top_k,
unknown_filter_field, ...); Starlette's HTTP errors (no route, the body limit, an unparsable body) their status
and a code; a client that went away mid-request a 400 client_disconnected (no one reads it; the log has no trace).
Anything else is a bug: a 500 with no trace (middleware/internal_error.py). No message is longer than
MAX_MESSAGE_CHARS, however much of the request it quotes.
"""

from __future__ import annotations

import logging
import reprlib
from collections.abc import Iterable, Sequence
from typing import Any, get_args

from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from rag_pipeline.errors import (
    ConfigError,
    Conflict,
    Forbidden,
    InputError,
    NotAuthenticated,
    NotFound,
    RagError,
    Unavailable,
)
from rag_pipeline.index.vector_store import FILTER_KEYS
from rag_pipeline.serve.models import MAX_API_TOP_K, ErrorResponse
from rag_pipeline.structured.operations import AGGREGATES, COMPARISONS
from rag_pipeline.structured.operations import NAMES as OPERATION_NAMES

log = logging.getLogger(__name__)
MAX_MESSAGE_CHARS = 2000
RETRY_AFTER_S = 5  # a 503's Retry-After: the store reopens (or an ingest is over) in seconds, not at once

# The status of each kind of RagError: the most specific class in the error's MRO wins (NotFound is an
# InputError, StoreUnavailable and ModelUnavailable are Unavailable). Anything that is not a RagError is a 500.
HTTP_STATUS: dict[type[RagError], int] = {
    RagError: 500,
    ConfigError: 500,
    InputError: 400,
    NotAuthenticated: 401,
    Forbidden: 403,
    NotFound: 404,
    Conflict: 409,
    Unavailable: 503,
}
# Errors that are not RagErrors: HTTP ones (Starlette's routing, the body limit, FastAPI's body parsing).
HTTP_ERROR_CODES = {400: "invalid_json", 404: "not_found", 413: "body_too_large"}
# What a failed field means: its error code and the rule it broke.
FIELD_RULES = {
    "query": ("empty_query", "must be a non-empty string"),
    "question": ("empty_question", "must be a non-empty string"),
    "top_k": ("invalid_top_k", f"must be an integer from 1 to {MAX_API_TOP_K}"),
    "filters": ("invalid_filters", "must be an object of field: value"),
    "op": ("invalid_op", f"must be one of {', '.join(OPERATION_NAMES)}"),
    "field": ("invalid_field", "must be a field name"),
    "by": ("invalid_field", "must be a field name"),
    "return": ("invalid_field", "must be a field name"),
    "where": ("invalid_where", "must map fields to a value, a list, {gte|gt|lte|lt|eq|in|contains|empty: ...} or "
                               "{in: QUERY}, or be a list of 'F=V' strings"),
    "aggregate": ("invalid_aggregate", f"must be {{op: {'|'.join(AGGREGATES)}, field?: F}}"),
    "having": ("invalid_having", f"must be {{{'|'.join(COMPARISONS)}: N}}"),
    "queries": ("invalid_queries", "must be a list of two queries"),
    "limit": ("invalid_limit", "must be an integer from 1 to 1000"),
    "message": ("invalid_message", "must be a non-empty string of at most 4000 characters"),
    "session_id": ("invalid_session_id", "must be a session id returned by POST /chat"),
    "name": ("invalid_key", "must be letters, digits, '.', '_' or '-' (at most 64)"),
    "role": ("invalid_key", "must be reader, ingester or admin"),
    "tags": ("invalid_key", "must be a list of at most 100 labels"),
    "sources": ("invalid_key", "must be a list of at most 100 source names"),
    "model": ("invalid_model", "must be a model id from GET /v1/models"),
    "messages": ("invalid_messages", "must be a list of {role, content} messages, the last one the user's"),
    "stream": ("invalid_stream", "must be true or false"),
}
_short = reprlib.Repr()  # a bad value, cut short and a few levels deep (a body can nest deeply)
_short.maxlevel, _short.maxstring, _short.maxother = 3, 60, 60
# The error responses every route documents in the OpenAPI document.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    "4XX": {"model": ErrorResponse, "description": "bad input; the code names the field or the problem"},
    "5XX": {"model": ErrorResponse, "description": "the store is unavailable (503) or the server failed (500)"},
}


def http_status(error: RagError) -> int:
    return next(HTTP_STATUS[kind] for kind in type(error).__mro__ if kind in HTTP_STATUS)


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    """The API's one error body, {"error": {"code", "message"}}."""
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[: MAX_MESSAGE_CHARS - 1] + "…"
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


async def rag_error(request: Request, error: RagError) -> Response:
    status = http_status(error)
    if status == 500:
        log.error("%s %s failed: %s", request.method, request.url.path[:200], error, exc_info=error)
        message = "the server's configuration is invalid" if isinstance(error, ConfigError) else "the request failed"
        message += "; the server's log says why"
    else:
        paths = request.app.state.services.paths
        message = await run_in_threadpool(lambda: paths.current().message(error.message))
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else {"Retry-After": str(RETRY_AFTER_S)} \
        if status == 503 else None
    return error_response(status, error.code, message, headers)


async def invalid_body(request: Request, error: RequestValidationError) -> Response:
    allowed = body_fields(request.scope.get("route"))
    return await rag_error(request, input_error(error.errors(), allowed))


async def http_error(request: Request, error: HTTPException) -> Response:
    message = error.detail
    cause = error.__cause__
    if error.status_code == 400 and cause is not None:  # FastAPI could not parse the body
        reason = "nested too deeply" if isinstance(cause, RecursionError) else cause
        message = f"the body is not valid JSON: {reason}"
    return error_response(error.status_code, HTTP_ERROR_CODES.get(error.status_code, "http_error"), message,
                          error.headers)


async def client_gone(request: Request, error: ClientDisconnect) -> Response:
    log.info("%s %s: the client disconnected before its request was read", request.method, request.url.path[:200])
    return error_response(400, "client_disconnected", "the client disconnected before the request was complete")


EXCEPTION_HANDLERS: dict[Any, Any] = {RagError: rag_error, RequestValidationError: invalid_body,
                                      HTTPException: http_error, ClientDisconnect: client_gone}


def input_error(errors: Sequence[dict[str, Any]], allowed: Iterable[str] = ()) -> InputError:
    """The InputError of a request body that failed validation: its first problem, body-level first (not JSON,
    not an object), then unknown fields, then the fields in order. `allowed` names the body's fields."""
    errors = sorted(errors, key=lambda error: 0 if len(error["loc"]) < 2 or error["type"] == "json_invalid"
                    else 1 if error["type"] == "extra_forbidden" else 2)
    first = errors[0]
    loc, kind = tuple(first["loc"])[1:], first["type"]  # loc[0] is "body"
    if kind == "json_invalid":
        return InputError(f"the body is not valid JSON: {first.get('ctx', {}).get('error', first['msg'])}"
                          f" (at character {loc[0] if loc else 0})", code="invalid_json")
    if not loc:
        return InputError("the body must be a JSON object", code="invalid_body")
    if kind == "extra_forbidden":
        unknown = [str(error["loc"][-1]) for error in errors if error["type"] == "extra_forbidden"]
        if "roots" in unknown:
            return InputError("the API takes no filesystem paths: POST /ingest syncs the roots the server is "
                              "configured with (RAG_ROOTS); send an empty body or {}", code="paths_not_accepted")
        return InputError(f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed)) or 'none'}",
                          code="unknown_field")
    field = str(loc[0])
    if field == "filters" and len(loc) > 2:
        if loc[-1] == "[key]":
            unknown = [str(error["loc"][2]) for error in errors if tuple(error["loc"])[-1:] == ("[key]",)]
            return InputError(f"unknown filter field(s) {', '.join(unknown)}; allowed: {', '.join(FILTER_KEYS)} and "
                              "the document fields declared filterable", code="unknown_filter_field")
        return InputError(f"filter {loc[1]!r} needs a string or a non-empty list of strings, "
                          f"got {_short.repr(first.get('input'))}")  # the same words as the retriever's check
    code, rule = FIELD_RULES.get(field, ("invalid_request", "is invalid"))
    got = "" if kind == "missing" else f", got {_short.repr(first.get('input'))}"
    return InputError(f"'{field}' {rule}: {first['msg'].removeprefix('Value error, ')}{got}", code=code)


def body_fields(route: object) -> dict[str, Any]:
    """The fields of the route's JSON body model by their names in JSON (none for a route without one)."""
    body = getattr(route, "body_field", None)
    annotation = body.field_info.annotation if body is not None else None  # e.g. IngestRequest | None
    for model in (annotation, *get_args(annotation)):
        if isinstance(model, type) and issubclass(model, BaseModel):
            return {info.alias or name: info for name, info in model.model_fields.items()}
    return {}
