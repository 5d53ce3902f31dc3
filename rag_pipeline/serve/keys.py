"""API keys: create, list, revoke and look up, with only a SHA-256 digest of each token on disk.

Keys live in `<data dir>/api_keys.yaml` (or RAG_API_KEYS_FILE), written atomically with mode 0600 under an
exclusive lock. A token is "rag_" + 32 random bytes (secrets.token_urlsafe): with 256 bits of entropy a plain
SHA-256 cannot be reversed or brute-forced, so a slow KDF (scrypt) would only cost CPU on every request. Lookups
compare digests in constant time. One more admin key may come from RAG_API_KEY or RAG_API_KEY_FILE (named
"env", hashed at startup, never written). A role can do what the roles before it in ROLES can.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from rag_pipeline.atomic_file import write_atomically
from rag_pipeline.errors import ConfigError, InputError, NotFound
from rag_pipeline.file_lock import locked
from rag_pipeline.index.vector_store import Scope
from rag_pipeline.settings import Settings

Role = Literal["reader", "ingester", "admin"]
ROLES: tuple[Role, ...] = ("reader", "ingester", "admin")
TOKEN_PREFIX = "rag_"
ENV_KEY_NAME = "env"
MIN_ENV_TOKEN_CHARS = 32
Name = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")]
Label = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200,  # a tag or source
                                         pattern=r"^[^\x00-\x1f\x7f]+$")]
HEADER = "# rag_pipeline API keys: SHA-256 digests of the tokens only. Manage with `rag-pipeline keys`.\n"


class ApiKey(BaseModel):
    """One key as stored: its name, role, scope (tags, sources; empty: everything) and the token's digest."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Name
    role: Role = "reader"
    tags: tuple[Label, ...] = ()
    sources: tuple[Label, ...] = ()
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    created_at: str = ""

    @property
    def scope(self) -> Scope | None:
        return Scope(self.tags, self.sources) if self.tags or self.sources else None

    @property
    def identity(self) -> str:
        """What tells this key from any other, a later key of the same name included (its token's digest, cut)."""
        return f"{self.name}#{self.sha256[:16]}"

    def allows(self, role: Role) -> bool:
        return ROLES.index(self.role) >= ROLES.index(role)

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "role": self.role, "tags": list(self.tags), "sources": list(self.sources),
                "created_at": self.created_at}


class KeyFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    keys: list[ApiKey] = []


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def read_keys(path: Path) -> list[ApiKey]:
    """The keys stored in `path` (none when it does not exist); ConfigError for a file that is unsafe or invalid."""
    try:
        info = path.stat()
        text = path.read_text()
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: cannot read the API keys: {error}") from error
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigError(f"{path}: others may write the API keys file; chmod 600 it")
    try:
        stored = KeyFile.model_validate(yaml.safe_load(text) or {})
    except (yaml.YAMLError, ValidationError) as error:
        raise ConfigError(f"{path}: not a valid API keys file: {error}") from error
    names = [key.name for key in stored.keys]
    if len(set(names)) != len(names) or ENV_KEY_NAME in names:
        raise ConfigError(f"{path}: key names must be unique and not {ENV_KEY_NAME!r}")
    return stored.keys


@contextmanager
def locked_keys(path: Path) -> Iterator[list[ApiKey]]:
    """The stored keys under an exclusive lock (`<file>.lock`); the list as left by the caller is written back
    atomically, mode 0600."""
    with locked(path.with_name(path.name + ".lock"), mode=0o600):
        keys = read_keys(path)
        yield keys
        text = HEADER + yaml.safe_dump(KeyFile(keys=keys).model_dump(mode="json"), sort_keys=False)
        write_atomically(path, text, durable=True)  # mode 0600


def create_key(path: Path, name: str, role: Role = "reader", tags: tuple[str, ...] = (),
               sources: tuple[str, ...] = ()) -> tuple[ApiKey, str]:
    """A new key and its token (shown once; only its digest is stored). InputError for a bad or taken name."""
    token = new_token()
    created = datetime.now(UTC).isoformat(timespec="seconds")
    try:
        key = ApiKey(name=name, role=role, tags=tuple(dict.fromkeys(tags)), sources=tuple(dict.fromkeys(sources)),
                     sha256=digest(token), created_at=created)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, item['loc']))}: {item['msg']}" for item in error.errors())
        raise InputError(f"invalid key: {problems}", code="invalid_key") from error
    if name == ENV_KEY_NAME:
        raise InputError(f"the key name {ENV_KEY_NAME!r} is reserved for RAG_API_KEY", code="invalid_key")
    with locked_keys(path) as keys:
        if any(existing.name == name for existing in keys):
            raise InputError(f"a key named {name!r} already exists; revoke it first or pick another name",
                             code="duplicate_key")
        keys.append(key)
    return key, token


def revoke_key(path: Path, name: str) -> None:
    with locked_keys(path) as keys:
        remaining = [key for key in keys if key.name != name]
        if len(remaining) == len(keys):
            raise NotFound(f"no API key named {name!r}", code="unknown_key")
        keys[:] = remaining


def env_key(settings: Settings) -> ApiKey | None:
    """The admin key given by RAG_API_KEY or RAG_API_KEY_FILE (its digest), or None."""
    if settings.api_key is not None and settings.api_key_file is not None:
        raise ConfigError("set RAG_API_KEY or RAG_API_KEY_FILE, not both")
    if settings.api_key_file is not None:
        try:
            token = settings.api_key_file.read_text().strip()
        except (OSError, UnicodeDecodeError) as error:
            raise ConfigError(f"RAG_API_KEY_FILE {settings.api_key_file}: {error}") from error
    elif settings.api_key is not None:
        token = settings.api_key.get_secret_value().strip()
    else:
        return None
    if len(token) < MIN_ENV_TOKEN_CHARS or any(not 32 < ord(char) < 127 for char in token):
        raise ConfigError(f"the RAG_API_KEY token must be at least {MIN_ENV_TOKEN_CHARS} printable characters "
                          "without spaces, e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))'")
    return ApiKey(name=ENV_KEY_NAME, role="admin", sha256=digest(token))


class Keyring:
    """The keys a server accepts: the environment's admin key and the keys file, re-read when the file changes
    (so `keys create` and `keys revoke` take effect on a running server)."""

    def __init__(self, settings: Settings) -> None:
        self.path = settings.api_keys_path
        self.env_key = env_key(settings)
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int] | None = None
        self._stored: list[ApiKey] = []
        self.keys()  # a broken file fails at startup

    def keys(self) -> list[ApiKey]:
        with self._lock:
            try:
                info = self.path.stat()
                seen = (info.st_ino, info.st_mtime_ns, info.st_size)
            except FileNotFoundError:
                seen = None
            if seen != self._seen:
                self._stored = read_keys(self.path)
                self._seen = seen
            stored = self._stored
        return [self.env_key, *stored] if self.env_key else list(stored)

    def lookup(self, token: str) -> ApiKey | None:
        """The key whose token this is, or None; every key's digest is compared, in constant time."""
        wanted = digest(token)
        found = None
        for key in self.keys():
            if hmac.compare_digest(wanted, key.sha256):
                found = key
        return found


def is_loopback(host: str) -> bool:
    """True for "localhost" and loopback IP addresses (127.0.0.0/8, ::1, IPv4-mapped 127.x)."""
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def check_bind(host: str, keyring: Keyring, keyless_loopback: bool) -> None:
    """ConfigError unless a key exists, or `host` is loopback and keyless loopback mode was chosen."""
    if keyring.keys():
        return
    create = "create one with `rag-pipeline keys create NAME --role admin` (or set RAG_API_KEY)"
    if not is_loopback(host):
        raise ConfigError(f"refusing to serve on {host} without an API key: {create}, or serve on 127.0.0.1 with "
                          "--keyless-loopback", code="no_api_key")
    if not keyless_loopback:
        raise ConfigError(f"refusing to serve without an API key: {create}, or answer this machine's requests "
                          "without a key with `serve --keyless-loopback` (RAG_API_KEYLESS_LOOPBACK=true; never "
                          "behind a reverse proxy)", code="no_api_key")
