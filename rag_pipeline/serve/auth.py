"""Who may call the HTTP API: the check of the caller's API key against a role.

With at least one API key (serve/keys.py), every route that depends on a role (serve/dependencies.py: Reader,
Ingester, Admin) needs `Authorization: Bearer <token>`: 401 (NotAuthenticated) without a valid token, 403 (Forbidden)
for a key whose role is below the route's. The check gives the route the key's Scope, which the retriever ANDs with
the request's filters.

Without keys the server fails closed: once it has seen a key, losing them all (the file moved away, emptied or
unreadable, the last key revoked) refuses every request with 503 until a key exists again. Requests are served
without a key only in keyless loopback mode, chosen at start (RAG_API_KEYLESS_LOOPBACK, `serve --keyless-loopback`)
while no key was ever seen, and then only those that arrive on a loopback address and name no proxy (403 for others).
"""

from __future__ import annotations

import ipaddress
import logging
from typing import Annotated

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.requests import Request

from rag_pipeline.errors import ConfigError, Forbidden, NotAuthenticated, Unavailable
from rag_pipeline.index.vector_store import Scope
from rag_pipeline.serve.keys import ApiKey, Keyring, Role, is_loopback
from rag_pipeline.settings import Settings

log = logging.getLogger(__name__)
KEY_STATE = "api_key"  # the request state's entry naming the caller's key, for the access log
KEY_IDENTITY_STATE = "api_key_identity"  # the request state's entry telling the caller's key from any other
# Headers a reverse proxy adds: a request carrying one did not come from this machine's own user.
PROXY_HEADERS = ("forwarded", "x-forwarded-for", "x-real-ip")
# Reads the header and documents the scheme in the OpenAPI document; a missing or malformed header gives None.
bearer = HTTPBearer(auto_error=False, description="an API key's token (`rag-pipeline keys create`)")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


class Auth:
    """The API's authentication over the configured keys (`Keyring`)."""

    def __init__(self, settings: Settings) -> None:
        self.keyring = Keyring(settings)
        self.keyless_loopback = settings.api_keyless_loopback
        self.had_keys = bool(self.keyring.keys())  # from then on, no keys means locked

    def authorize(self, request: Request, credentials: HTTPAuthorizationCredentials | None, role: Role
                  ) -> Scope | None:
        """The scope of the request's key (None: everything) if its role is `role` or above."""
        keys = self.current_keys()
        if not keys:
            self.check_keyless(request)
            return None
        if credentials is None:
            raise NotAuthenticated("an API key is required: send the header Authorization: Bearer <token>")
        key = self.keyring.lookup(credentials.credentials)
        if key is None:
            raise NotAuthenticated("the API key is not valid (unknown or revoked)", code="invalid_api_key")
        setattr(request.state, KEY_STATE, key.name)
        setattr(request.state, KEY_IDENTITY_STATE, key.identity)
        if not key.allows(role):
            raise Forbidden(f"the key {key.name!r} has the role {key.role}; this endpoint needs {role}")
        return key.scope

    def current_keys(self) -> list[ApiKey]:
        """The keys now; Unavailable (every request refused) while the keys file cannot be read."""
        try:
            keys = self.keyring.keys()
        except ConfigError as error:
            log.error("refusing every request until the API keys can be read: %s", error)
            raise Unavailable("the server cannot read its API keys: it refuses every request until it can (its "
                              "log says why)", code="api_keys_unreadable") from None
        self.had_keys = self.had_keys or bool(keys)
        return keys

    def check_keyless(self, request: Request) -> None:
        """Refuses a request the server may not serve without a key (see the module's docstring)."""
        if self.had_keys:
            raise Unavailable("this server had API keys and has none now (its keys file is missing or empty): it "
                              "refuses every request until a key exists (`rag-pipeline keys create NAME`)",
                              code="api_keys_missing")
        if not self.keyless_loopback:
            raise Unavailable("this server has no API key and was not started in keyless loopback mode: create "
                              "one with `rag-pipeline keys create NAME`", code="no_api_keys")
        if arrived_remotely(request) or any(header in request.headers for header in PROXY_HEADERS):
            raise Forbidden("this server has no API key, so it answers only requests made on this machine, not "
                            "through a proxy: create a key with `rag-pipeline keys create NAME`")


def arrived_remotely(request: Request) -> bool:
    """True when the request came in on a non-loopback IP address of this server (not a unix socket or an
    in-process test transport, which name no IP address)."""
    host = (request.scope.get("server") or ("",))[0] or ""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return not is_loopback(host)
