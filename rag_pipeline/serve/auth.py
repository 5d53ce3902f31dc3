"""Who may call the HTTP API: the check of the caller's API key against a role.

With at least one API key (serve/keys.py), every route that depends on a role (serve/dependencies.py: Reader,
Ingester) needs `Authorization: Bearer <token>`: 401 (NotAuthenticated) without a valid token, 403 (Forbidden) for
a key whose role is below the route's. The check gives the route the key's Scope, which the retriever ANDs with the
request's filters. With no key, requests that arrive on a loopback address are served and the others refused (403),
so a server that lost its last key never becomes open (serve() also refuses to bind elsewhere without a key).
"""

from __future__ import annotations

import ipaddress
from typing import Annotated

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.requests import Request

from rag_pipeline.errors import Forbidden, NotAuthenticated
from rag_pipeline.index.vector_store import Scope
from rag_pipeline.serve.keys import Keyring, Role, is_loopback
from rag_pipeline.settings import Settings

KEY_STATE = "api_key"  # the request state's entry naming the caller's key, for the access log
# Reads the header and documents the scheme in the OpenAPI document; a missing or malformed header gives None.
bearer = HTTPBearer(auto_error=False, description="an API key's token (`rag-pipeline keys create`)")
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]


class Auth:
    """The API's authentication over the configured keys (`Keyring`)."""

    def __init__(self, settings: Settings) -> None:
        self.keyring = Keyring(settings)

    def authorize(self, request: Request, credentials: HTTPAuthorizationCredentials | None, role: Role
                  ) -> Scope | None:
        """The scope of the request's key (None: everything) if its role is `role` or above."""
        if not self.keyring.keys():
            if arrived_remotely(request):
                raise Forbidden("this server has no API key, so it answers on loopback only: create one with "
                                "`rag-pipeline keys create NAME`")
            return None
        if credentials is None:
            raise NotAuthenticated("an API key is required: send the header Authorization: Bearer <token>")
        key = self.keyring.lookup(credentials.credentials)
        if key is None:
            raise NotAuthenticated("the API key is not valid (unknown or revoked)", code="invalid_api_key")
        request.state.api_key = key.name
        if not key.allows(role):
            raise Forbidden(f"the key {key.name!r} has the role {key.role}; this endpoint needs {role}")
        return key.scope


def arrived_remotely(request: Request) -> bool:
    """True when the request came in on a non-loopback IP address of this server (not a unix socket or an
    in-process test transport, which name no IP address)."""
    host = (request.scope.get("server") or ("",))[0] or ""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return not is_loopback(host)
