"""Index generations: the collection built for one (embedding model, chunk settings, sparse settings).

A change of any of them makes a new generation, built into a new collection while queries keep using the active
one. The registry (<data dir>/generations.json, replaced atomically) records every generation and which one is
active: the pointer queries follow on the embedded store. On a Qdrant server the switch also moves a collection
alias (RAG_QDRANT_ALIAS), so every client of the server follows it at once.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rag_pipeline.index.vector_store import collection_name

REGISTRY_FILE = "generations.json"


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
        self.path = data_dir / REGISTRY_FILE
        self._cache: tuple[float, dict[str, Any]] | None = None

    def exists(self) -> bool:
        return self.path.is_file()

    def _read(self) -> dict[str, Any]:
        """The registry file (re-read only when its mtime changed: the API checks it on every request)."""
        try:
            mtime = self.path.stat().st_mtime_ns
        except FileNotFoundError:
            return {"active": None, "generations": {}}
        if self._cache is None or self._cache[0] != mtime:
            self._cache = (mtime, json.loads(self.path.read_text()))
        return self._cache[1]

    def _write(self, state: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=".generations-")
        with os.fdopen(fd, "w") as handle:
            json.dump(state, handle, indent=1)
        os.replace(temporary, self.path)  # atomic: a reader sees the old or the new pointer, never a mix
        self._cache = None

    def all(self) -> dict[str, Generation]:
        return {gid: Generation(**record) for gid, record in self._read()["generations"].items()}

    def active_id(self) -> str | None:
        return self._read()["active"]

    def active(self) -> Generation | None:
        gid = self.active_id()
        return self.all().get(gid) if gid else None

    def register(self, generation: Generation) -> Generation:
        """The recorded generation of this id (recorded now if new)."""
        state = self._read()
        if generation.id not in state["generations"]:
            state = {"active": state["active"], "generations": {**state["generations"], generation.id: asdict(generation)}}
            self._write(state)
        return Generation(**state["generations"][generation.id])

    def activate(self, generation: Generation) -> str | None:
        """Make `generation` the one queries use; returns the previously active id."""
        state = self._read()
        previous = state["active"]
        self._write({"active": generation.id, "generations": {**state["generations"], generation.id: asdict(generation)}})
        return previous

    def forget(self, gid: str) -> None:
        """Remove a dropped generation's record."""
        state = self._read()
        self._write({"active": state["active"],
                     "generations": {key: value for key, value in state["generations"].items() if key != gid}})
