"""Index generations: the collection built for one (embedding model, chunk settings, sparse settings).

A change of any of them makes a new generation, built into a new collection while queries keep using the active
one. The registry (<data dir>/generations.json, replaced atomically) records every generation and which one is
active: the pointer queries follow on the embedded store. On a Qdrant server the switch also moves a collection
alias (RAG_QDRANT_ALIAS), so every client of the server follows it at once. An entry point's settings
(load_settings) are the RAG_* variables over what the active generation was built with.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rag_pipeline.atomic_file import write_atomically
from rag_pipeline.errors import ConfigError
from rag_pipeline.file_lock import locked
from rag_pipeline.index.vector_store import collection_name
from rag_pipeline.settings import Settings, parse_chunking_id

GENERATIONS_FILE = "generations.json"


@dataclass(frozen=True)
class Generation:
    """One generation: its id (a fingerprint of the settings that shape the index), its collection, and the
    embedding settings a query of it needs (backend, model path, Ollama model)."""

    id: str
    collection: str
    model_id: str
    dimension: int
    chunking_id: str
    sparse_id: str
    embedding: dict[str, Any] = field(default_factory=dict)
    created_at: str = ""

    def describe(self) -> str:
        return f"{self.id} ({self.model_id}, {self.dimension}-d, chunks {self.chunking_id}, {self.sparse_id})"


def generation_id(model_id: str, dimension: int, chunking_id: str, sparse_id: str) -> str:
    """The fingerprint of the settings that shape an index."""
    return "g" + hashlib.sha256(f"{model_id}|{dimension}|{chunking_id}|{sparse_id}".encode()).hexdigest()[:10]


def new_generation(model_id: str, dimension: int, chunking_id: str, sparse_id: str, embedding: dict[str, Any],
                   collection: str | None = None) -> Generation:
    """The generation of these settings, in its own collection (or `collection`: an adopted legacy one)."""
    gid = generation_id(model_id, dimension, chunking_id, sparse_id)
    return Generation(gid, collection or f"{collection_name(model_id, dimension)}__{gid}", model_id, dimension,
                      chunking_id, sparse_id, embedding, datetime.now(UTC).isoformat(timespec="seconds"))


class GenerationRegistry:
    """The generations of one data dir and the active one."""

    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / GENERATIONS_FILE
        self._cache: tuple[tuple[int, int], dict[str, Any]] | None = None

    def exists(self) -> bool:
        return self.path.is_file()

    def _read(self) -> dict[str, Any]:
        """The registry file, re-read only when it was replaced (every write is a new inode: the API checks it on
        every request)."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return {"active": None, "generations": {}}
        key = (stat.st_ino, stat.st_mtime_ns)
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, json.loads(self.path.read_text()))
        return self._cache[1]

    def _write(self, state: dict[str, Any]) -> None:
        """Replace the file atomically and durably: a reader sees the old or the new pointer, never a mix, and a
        power loss leaves one of them."""
        write_atomically(self.path, json.dumps(state, indent=1), durable=True)
        self._cache = None

    @contextmanager
    def _changing(self) -> Iterator[dict[str, Any]]:
        """The current state, for a read-modify-write that no other process interleaves (a lock file)."""
        with locked(self.path.with_suffix(".lock")):
            self._cache = None
            yield self._read()

    def all(self) -> dict[str, Generation]:
        return {gid: Generation(**record) for gid, record in self._read()["generations"].items()}

    def active_id(self) -> str | None:
        return self._read()["active"]

    def active(self) -> Generation | None:
        gid = self.active_id()
        return self.all().get(gid) if gid else None

    def register(self, generation: Generation) -> Generation:
        """The recorded generation of this id (recorded now if new)."""
        recorded = self._read()["generations"].get(generation.id)
        if recorded is None:
            with self._changing() as state:
                recorded = state["generations"].get(generation.id) or asdict(generation)
                self._write({"active": state["active"],
                             "generations": {**state["generations"], generation.id: recorded}})
        return Generation(**recorded)

    def activate(self, generation: Generation) -> str | None:
        """Make `generation` the one queries use; returns the previously active id."""
        with self._changing() as state:
            self._write({"active": generation.id,
                         "generations": {**state["generations"], generation.id: asdict(generation)}})
            return state["active"]

    def forget(self, gid: str) -> None:
        """Remove a dropped generation's record."""
        with self._changing() as state:
            self._write({"active": state["active"],
                         "generations": {key: value for key, value in state["generations"].items() if key != gid}})

    def built_settings(self) -> dict[str, object]:
        """The chunk settings and embedding runtime the active generation was built with ({} when none), for
        Settings.deployed_on. An index from before generations: its chunk artifacts' folder, on torch (as is a
        generation from before runtimes)."""
        if not self.exists():
            folders = sorted((path for path in (self.path.parent / "artifacts" / "chunks").glob("*") if path.is_dir()),
                             key=lambda path: path.stat().st_mtime)
            return parse_chunking_id(folders[-1].name) | {"embedding_runtime": "torch"} if folders else {}
        try:
            active = self.active()
        except (OSError, ValueError, KeyError, TypeError):
            return {}
        if active is None:
            return {}
        return parse_chunking_id(active.chunking_id) | {
            "embedding_runtime": active.embedding.get("embedding_runtime", "torch")}


def load_settings(**overrides: Any) -> Settings:
    """The settings of an entry point (the CLI's main, the API app, a Dagster resource): RAG_* variables and
    `overrides`, then, for what neither sets, what the data dir's active index was built with. Build them once
    there and pass them down. An invalid setting is a ConfigError naming it. (Here, not with the components, so
    that the CLI has its settings before it imports them: `rag-pipeline ingest` starts docling's workers first.)"""
    try:
        settings = Settings(**overrides)
    except ValidationError as error:
        problems = "; ".join(f"RAG_{'_'.join(map(str, problem['loc'])).upper() or 'SETTINGS'}: {problem['msg']}"
                             for problem in error.errors())
        raise ConfigError(f"invalid settings: {problems}") from None
    return settings.deployed_on(GenerationRegistry(settings.data_dir).built_settings())
