"""Chat sessions (each owned by the API key that created it) and their turns: the message, the answer and the
turn's record (JSON)."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from typing import Any

from rag_pipeline.sidecar.connection import SidecarFile, insert_rows, now, records

_append_lock = threading.Lock()  # turns of one process are numbered one at a time (of many: the write lock)


class ChatTables(SidecarFile):
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
