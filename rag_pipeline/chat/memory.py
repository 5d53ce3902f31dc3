"""Conversation memory in the sidecar: sessions (owned by the API key that created them) and their turns (the
message, the answer, and the turn's record: citations, trajectory, the filters and entities it used). Sessions not
updated for RAG_CHAT_RETENTION_DAYS are deleted whenever a turn is saved."""

from __future__ import annotations

import json
import threading
import uuid
from datetime import timedelta
from typing import Any

from rag_pipeline.errors import NotFound
from rag_pipeline.sidecar import Sidecar, now, records

LOCAL_OWNER = "local"  # the owner of sessions made without an API key (loopback, no keys configured; the CLI)
HISTORY_TURNS = 10  # earlier turns a new turn reads (follow-ups need the last ones)
_save_lock = threading.Lock()  # turns of one process are numbered one at a time


def key_owner(key_name: str | None) -> str:
    """The owner of a request's sessions: its API key ("key:<name>"; no key can be named so as to own another's
    sessions or the local ones), else LOCAL_OWNER."""
    return f"key:{key_name}" if key_name else LOCAL_OWNER


class ChatMemory:
    def __init__(self, sidecar: Sidecar, retention_days: float) -> None:
        self.sidecar = sidecar
        self.retention = timedelta(days=retention_days)

    def session(self, session_id: str | None, owner: str) -> tuple[str, list[dict[str, Any]]]:
        """(id, earlier turns) of the caller's session; a new session when `session_id` is None. Another owner's
        session, or one that does not exist, is NotFound (the same answer: a stranger learns nothing)."""
        if session_id is None:
            return uuid.uuid4().hex, []
        return session_id, self.turns(session_id, owner, last=HISTORY_TURNS)

    def turns(self, session_id: str, owner: str, last: int | None = None) -> list[dict[str, Any]]:
        """The session's turns (its `last` ones), oldest first; NotFound for another owner's session or one that
        expired."""
        with self.sidecar.connect() as con:
            found = con.execute("SELECT owner, updated_at FROM chat_sessions WHERE id = ?", [session_id]).fetchone()
            if found is None or found[0] != owner or found[1] < now() - self.retention:
                raise NotFound(f"no chat session {session_id!r}", code="session_not_found")
            rows = records(con.execute(
                "SELECT * FROM (SELECT turn, message, answer, record, created_at FROM chat_turns WHERE session_id = ? "
                "ORDER BY turn DESC LIMIT ?) ORDER BY turn", [session_id, last or 2**31 - 1]))
        return [{**row, "record": json.loads(row["record"])} for row in rows]

    def save(self, session_id: str, owner: str, message: str, answer: str, record: dict[str, Any]) -> int:
        """Append a turn (creating the session); returns its number. Expired sessions are deleted first."""
        stamp = now()
        with _save_lock, self.sidecar.connect() as con:
            con.execute("BEGIN TRANSACTION")
            expired = [row[0] for row in con.execute("SELECT id FROM chat_sessions WHERE updated_at < ?",
                                                     [stamp - self.retention]).fetchall()]
            if expired:
                con.execute("DELETE FROM chat_turns WHERE list_contains(?, session_id)", [expired])
                con.execute("DELETE FROM chat_sessions WHERE list_contains(?, id)", [expired])
            found = con.execute("SELECT owner FROM chat_sessions WHERE id = ?", [session_id]).fetchone()
            if found is not None and found[0] != owner:
                con.execute("ROLLBACK")
                raise NotFound(f"no chat session {session_id!r}", code="session_not_found")
            con.execute("INSERT OR REPLACE INTO chat_sessions VALUES (?, ?, coalesce((SELECT created_at FROM "
                        "chat_sessions WHERE id = ?), ?), ?)", [session_id, owner, session_id, stamp, stamp])
            turn = con.execute("SELECT coalesce(max(turn), 0) + 1 FROM chat_turns WHERE session_id = ?",
                               [session_id]).fetchone()[0]
            con.execute("INSERT INTO chat_turns VALUES (?, ?, ?, ?, ?, ?)",
                        [session_id, turn, message, answer,
                         json.dumps(record, default=str, allow_nan=False, ensure_ascii=True), stamp])
            con.execute("COMMIT")
        return turn

    def delete(self, session_id: str, owner: str) -> None:
        self.turns(session_id, owner)  # NotFound for a stranger
        with self.sidecar.connect() as con:
            con.execute("BEGIN TRANSACTION")
            con.execute("DELETE FROM chat_turns WHERE session_id = ?", [session_id])
            con.execute("DELETE FROM chat_sessions WHERE id = ?", [session_id])
            con.execute("COMMIT")
