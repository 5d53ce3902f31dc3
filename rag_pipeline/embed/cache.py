"""Persistent store of computed embeddings, keyed by (model id, SHA-256 of the embedded text)."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from pathlib import Path

import numpy as np

_BUSY_TIMEOUT_SECONDS = 60.0
_MAX_SQL_PARAMETERS = 900  # below SQLite's smallest compiled-in limit (999), so one IN (...) always fits


def text_sha256(text: str) -> str:
    """Hex SHA-256 of the UTF-8 text: the cache key of an embedded text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class EmbeddingCache:
    """Persistent cache keyed by (model_id, sha256 of the embedded text) so a rebuild or a second collection
    never recomputes a vector.

    SQLite (stdlib sqlite3) file; vectors stored as float32 bytes; safe for several processes (WAL mode, short
    transactions, busy timeout). Each call opens its own connection, so an instance may be shared by threads.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as conn:
            conn.execute("PRAGMA journal_mode=WAL")  # persistent: stored in the database file
            conn.execute(
                "CREATE TABLE IF NOT EXISTS embeddings ("
                " model_id TEXT NOT NULL, text_sha TEXT NOT NULL, vector BLOB NOT NULL,"
                " PRIMARY KEY (model_id, text_sha)) WITHOUT ROWID"
            )

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A connection whose `with` block is one transaction (committed on success), closed afterwards."""
        with closing(sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_SECONDS)) as conn:
            conn.execute("PRAGMA synchronous=NORMAL")  # durable enough in WAL mode; a lost vector is recomputed
            with conn:
                yield conn

    def get_many(self, model_id: str, text_shas: Sequence[str]) -> dict[str, np.ndarray]:
        """The cached float32 vectors of those text_shas that are cached for model_id."""
        shas = list(dict.fromkeys(text_shas))
        found: dict[str, np.ndarray] = {}
        with self._connect() as conn:
            for start in range(0, len(shas), _MAX_SQL_PARAMETERS):
                batch = shas[start : start + _MAX_SQL_PARAMETERS]
                rows = conn.execute(
                    f"SELECT text_sha, vector FROM embeddings"
                    f" WHERE model_id = ? AND text_sha IN ({','.join('?' * len(batch))})",
                    [model_id, *batch],
                )
                found.update((sha, np.frombuffer(blob, dtype=np.float32)) for sha, blob in rows)
        return found

    def put_many(self, model_id: str, items: Mapping[str, np.ndarray]) -> None:
        """Store vectors by text sha for model_id in one transaction; existing entries are kept."""
        with self._connect() as conn:
            conn.executemany(
                "INSERT OR IGNORE INTO embeddings (model_id, text_sha, vector) VALUES (?, ?, ?)",
                ((model_id, sha, np.asarray(vector, dtype=np.float32).tobytes()) for sha, vector in items.items()),
            )

    def __len__(self) -> int:
        with self._connect() as conn:
            return conn.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0]
