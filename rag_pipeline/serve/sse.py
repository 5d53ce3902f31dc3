"""Server-sent events: the response of a route that streams (POST /ask, POST /chat).

FastAPI's EventSourceResponse and its wire format (fastapi.sse), without its generator endpoints: those send the
200 before the first event is made, so a request that fails there (a bad session, a retrieval error) could not
get its error status; the routes take the first event before they answer.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from fastapi.sse import EventSourceResponse, format_sse_event

log = logging.getLogger(__name__)
NO_BUFFERING = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}  # each event goes out as it is made
INTERNAL_ERROR = {"code": "internal_error", "message": "the answer failed; see the server log"}  # no internals

Event = tuple[str, dict[str, Any]]  # (event name, data)


def event(name: str, data: dict[str, Any]) -> bytes:
    """One event: its name and its data as one line of JSON."""
    return format_sse_event(event=name, data_str=json.dumps(data, allow_nan=False, default=str))


def event_stream(events: Iterable[Event], what: str,
                 failure: Callable[[Exception], dict[str, str]] = lambda error: INTERNAL_ERROR) -> EventSourceResponse:
    """The events as a stream. An exception while making them, after the headers went out, is logged (`what`
    failed) and ends the stream with an "error" event whose data is `failure(exception)`."""

    def stream() -> Iterator[bytes]:
        try:
            for name, data in events:
                yield event(name, data)
        except Exception as error:
            log.exception("%s stream failed", what)
            yield event("error", failure(error))

    return EventSourceResponse(stream(), headers=NO_BUFFERING)
