"""Chat sessions (each owned by the API key that created it) and their turns: the message, the answer and the
turn's record (JSON), in a DuckDB file of their own beside the sidecar (chat.duckdb); with the sidecar on
PostgreSQL, in its database (tables chat_sessions and chat_turns, which the sidecar's change counter ignores).

They are kept apart from the document metadata because they are written while questions are answered: a turn
saved does not change the sidecar, so what is computed from the sidecar (the field registry, the corpus profile)
stays valid, and saving a turn does not wait for an ingest that holds the sidecar's file."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

from rag_pipeline.sidecar import postgres
from rag_pipeline.sidecar.connection import SidecarFile, insert_rows, now, records

_append_lock = threading.Lock()  # turns of one process are numbered one at a time (of many: the write lock)

CHAT_SCHEMA = """
    CREATE TABLE IF NOT EXISTS chat_sessions (id VARCHAR PRIMARY KEY, owner VARCHAR NOT NULL,
        created_at TIMESTAMP, updated_at TIMESTAMP);
    CREATE TABLE IF NOT EXISTS chat_turns (session_id VARCHAR NOT NULL, turn INTEGER NOT NULL, message VARCHAR,
        answer VARCHAR, record JSON, created_at TIMESTAMP, PRIMARY KEY (session_id, turn));
"""
CHAT_FILE = "chat.duckdb"  # beside the sidecar


class ChatStore(SidecarFile):
    """The chat file at `location` (or the chat tables of the PostgreSQL database at a postgresql:// URL);
    created when opened."""

    def __init__(self, location: Path | str) -> None:
        super().__init__(location)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.transaction() as con:
            con.execute(CHAT_SCHEMA)

    @classmethod
    def beside(cls, sidecar_location: Path | str) -> ChatStore:
        """The chat store of the sidecar at `sidecar_location`: the chat file beside its DuckDB file, or the same
        PostgreSQL database."""
        if isinstance(sidecar_location, str) and postgres.is_postgres_url(sidecar_location):
            return cls(sidecar_location)
        return cls(Path(sidecar_location).with_name(CHAT_FILE))

    def import_rows(self, sessions: list[tuple], turns: list[tuple]) -> None:
        """Add sessions and turns (rows in the tables' column order) kept elsewhere before; a row already here
        is replaced, so an import that was interrupted can run again."""
        with self.transaction() as con:
            insert_rows(con, "chat_sessions", ["id", "owner", "created_at", "updated_at"], sessions, replace=True)
            insert_rows(con, "chat_turns", ["session_id", "turn", "message", "answer", "record", "created_at"],
                        turns, replace=True)

    def chat_turns(self, session_id: str, owner: str, retention: timedelta,
                   last: int | None = None) -> list[dict[str, Any]] | None:
        """The session's turns (its `last` ones; turn, message, answer, record, created_at), oldest first; None
        when no session of `owner` with this id was updated within `retention`."""
        with self.connect() as con:
            found = con.execute("SELECT owner, updated_at FROM chat_sessions WHERE id = ?", [session_id]).fetchone()
            if found is None or found[0] != owner or found[1] < now() - retention:
                return None
            rows = records(con.execute(
                "SELECT * FROM (SELECT turn, message, answer, record, created_at FROM chat_turns WHERE session_id = ? "
                "ORDER BY turn DESC LIMIT ?) latest ORDER BY turn", [session_id, last or 2**31 - 1]))
        return [{**row, "record": json.loads(row["record"])} for row in rows]

    def append_chat_turn(self, session_id: str, owner: str, message: str, answer: str, record: dict[str, Any],
                         retention: timedelta) -> int | None:
        """Delete the sessions not updated within `retention`, then append a turn to the session (creating it as
        `owner`'s); the turn's number, or None (nothing written) when the session is another owner's."""
        stamp = now()
        with _append_lock, self.transaction() as con:
            found = con.execute("SELECT owner, updated_at FROM chat_sessions WHERE id = ?", [session_id]).fetchone()
            if found is not None and found[0] != owner and found[1] >= stamp - retention:
                return None  # another owner's live session (an expired one is deleted below and started afresh)
            expired = [row[0] for row in con.execute("SELECT id FROM chat_sessions WHERE updated_at < ?",
                                                     [stamp - retention]).fetchall()]
            if expired:
                con.execute("DELETE FROM chat_turns WHERE list_contains(?, session_id)", [expired])
                con.execute("DELETE FROM chat_sessions WHERE list_contains(?, id)", [expired])
            created = con.execute("SELECT created_at FROM chat_sessions WHERE id = ?", [session_id]).fetchall()
            insert_rows(con, "chat_sessions", ["id", "owner", "created_at", "updated_at"],
                        [(session_id, owner, created[0][0] if created else stamp, stamp)], replace=True)
            turn = con.execute("SELECT coalesce(max(turn), 0) + 1 FROM chat_turns WHERE session_id = ?",
                               [session_id]).fetchone()[0]
            con.execute("INSERT INTO chat_turns VALUES (?, ?, ?, ?, ?, ?)",
                        [session_id, turn, message, answer,
                         json.dumps(record, default=str, allow_nan=False, ensure_ascii=True), stamp])
        return turn

    def delete_chat_session(self, session_id: str) -> None:
        with self.transaction() as con:
            con.execute("DELETE FROM chat_turns WHERE session_id = ?", [session_id])
            con.execute("DELETE FROM chat_sessions WHERE id = ?", [session_id])
