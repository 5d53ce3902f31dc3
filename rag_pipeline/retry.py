"""Retries with exponential backoff for calls to model servers.

A connection that could not be made or was dropped, and HTTP 429 or 5xx, are worth another try. Timeouts are
not: a server that is too slow once is too slow again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import httpx

T = TypeVar("T")

# Transport failures worth retrying (the ollama client raises the builtin ConnectionError when it cannot connect).
RETRYABLE_ERRORS = (ConnectionError, httpx.NetworkError, httpx.RemoteProtocolError)


def retryable_status(status: int) -> bool:
    """Whether an HTTP status is worth another try: rate limited (429) or a server error (5xx)."""
    return status == 429 or status >= 500


def with_retries(call: Callable[[], T], retryable: Callable[[Exception], bool], retries: int, backoff: float) -> T:
    """call(), tried again up to `retries` times after a failure `retryable` accepts, sleeping backoff·2^attempt
    seconds before each retry; the last failure (or the first one not retryable) is raised as is."""
    for attempt in range(retries):
        try:
            return call()
        except Exception as error:
            if not retryable(error):
                raise
        time.sleep(backoff * 2**attempt)
    return call()
