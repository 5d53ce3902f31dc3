"""The errors the product raises on purpose: one base (RagError), a few kinds that callers act on.

The CLI maps each kind to an exit code (serve/cli.py: EXIT_CODES) and the HTTP API to a status
(serve/http_errors.py: HTTP_STATUS), each in that one place. Anything that is not a RagError is a bug: exit 1 / HTTP 500
with no trace shown. Kinds that replace former ValueError/RuntimeError raises keep that builtin as a second base,
so existing `except ValueError` handlers around library calls keep working.
"""

from __future__ import annotations


class RagError(Exception):
    """Base of every deliberate error. `code` is a stable machine-readable name (the API's error code)."""

    code = "error"

    def __init_subclass__(cls, *, code: str | None = None, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if code is not None:
            cls.code = code

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code


class ConfigError(RagError, ValueError, code="configuration_error"):
    """A setting or a configuration file (corpus rules, golden set, attack cases) is invalid; names what and why."""


class InputError(RagError, ValueError, code="invalid_request"):
    """A caller's input is invalid: a blank query, top_k out of range, an unknown filter field, a malformed body."""


class NotFound(InputError, code="not_found"):
    """The caller asked for something that does not exist (an ingest id, a document)."""


class NotAuthenticated(RagError, code="not_authenticated"):
    """The request carries no valid API key (none, malformed, unknown or revoked)."""


class Forbidden(RagError, code="forbidden"):
    """The API key's role or scope does not allow the request, or the server takes no unauthenticated request
    from where it came."""


class Conflict(RagError, code="conflict"):
    """The request conflicts with work in progress (an ingest is already running)."""


class Unavailable(RagError, RuntimeError, code="unavailable"):
    """A store or model the request needs cannot be reached or loaded; retrying later may succeed."""


class StoreUnavailable(Unavailable, code="store_unavailable"):
    """The vector store (or the sidecar) cannot be reached; the message names the store and the setting to fix."""


class StoreLocked(StoreUnavailable, code="store_locked"):
    """The embedded store is open in another process (it allows one at a time)."""


class StoreBusy(StoreUnavailable, code="store_busy"):
    """Another process's ingest is writing the embedded store: a server leaves it to the ingest until it ends."""


class QueryTimeout(Unavailable, code="query_timeout"):
    """A metadata query ran past its time limit and was stopped."""


class ModelUnavailable(Unavailable, code="model_unavailable"):
    """A model (embedder, reranker, LLM) cannot be reached or loaded."""


class IngestFailed(RagError, RuntimeError, code="ingest_failed"):
    """An ingest run failed (a step raised or a blocking asset check failed); the message gives the reasons."""
