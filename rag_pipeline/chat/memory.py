"""Conversation memory in the chat file beside the sidecar: sessions (owned by the API key that created them, not by
its name) and their turns (the message, the answer, and the turn's record: citations, trajectory, the filters and
entities it used). Sessions not updated for RAG_CHAT_RETENTION_DAYS are deleted whenever a turn is saved."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from rag_pipeline.errors import NotFound
from rag_pipeline.sidecar import ChatStore

LOCAL_OWNER = "local"  # the owner of sessions made without an API key (loopback, no keys configured; the CLI)
HISTORY_TURNS = 10  # earlier turns a new turn reads (follow-ups need the last ones)


def key_owner(key_identity: str | None) -> str:
    """The owner of a request's sessions: its API key ("key:<name>#<digest>": a later key of the same name is
    another owner; no key can be named so as to own another's sessions or the local ones), else LOCAL_OWNER."""
    return f"key:{key_identity}" if key_identity else LOCAL_OWNER


class ChatMemory:
    def __init__(self, store: ChatStore, retention_days: float) -> None:
        self.store = store
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
        turns = self.store.chat_turns(session_id, owner, self.retention, last)
        if turns is None:
            raise NotFound(f"no chat session {session_id!r}", code="session_not_found")
        return turns

    def save(self, session_id: str, owner: str, message: str, answer: str, record: dict[str, Any]) -> int:
        """Append a turn (creating the session); returns its number. Expired sessions are deleted first."""
        turn = self.store.append_chat_turn(session_id, owner, message, answer, record, self.retention)
        if turn is None:
            raise NotFound(f"no chat session {session_id!r}", code="session_not_found")
        return turn

    def delete(self, session_id: str, owner: str) -> None:
        self.turns(session_id, owner)  # NotFound for a stranger
        self.store.delete_chat_session(session_id)
