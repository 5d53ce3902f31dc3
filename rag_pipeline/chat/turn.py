"""One chat turn end to end: the caller's session (memory), the field catalog the planner reads (within the key's
scope), the tools, the agent, and the turn saved. The HTTP API and the CLI both call `ChatService.stream`."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from rag_pipeline.chat.agent import ChatAgent
from rag_pipeline.chat.memory import ChatMemory
from rag_pipeline.chat.planner import field_catalog
from rag_pipeline.chat.tools import Tools
from rag_pipeline.errors import InputError
from rag_pipeline.generate.answerer import Answerer
from rag_pipeline.index.vector_store import Filters, Scope
from rag_pipeline.llm import ChatModel
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar
from rag_pipeline.structured.query import QueryRunner

MAX_MESSAGE_CHARS = 4000


class ChatService:
    def __init__(self, settings: Settings, answerer: Answerer, sidecar: Sidecar, memory: ChatMemory,
                 llm: ChatModel | None) -> None:
        self.settings = settings
        self.answerer = answerer
        self.sidecar = sidecar
        self.memory = memory
        self.llm = llm
        self.runner = QueryRunner(settings, sidecar)

    def stream(self, message: str, owner: str, session_id: str | None = None, filters: Filters | None = None,
               scope: Scope | None = None) -> Iterator[tuple[str, Any]]:
        """Events of one turn: ("session", {"session_id"}), ("step", ...), ("observation", ...), ("token", ...),
        then ("done", the answer object). NotFound for a session of another owner (before anything else)."""
        check_message(message)
        session_id, history = self.memory.session(session_id, owner)
        agent = self._agent(filters, scope)
        yield "session", {"session_id": session_id}
        for event, data in agent.run(" ".join(message.split()), history, session_id):
            if event != "done":
                yield event, data
                continue
            record = {**data.to_json(), "filters": data.filters, "last_action": data.last_action}
            self.memory.save(session_id, owner, message, data.answer, record)
            yield "done", data.to_json()

    def stream_unsaved(self, message: str, history: Sequence[tuple[str, str]], filters: Filters | None = None,
                       scope: Scope | None = None) -> Iterator[tuple[str, Any]]:
        """The events of a turn whose conversation the caller keeps (the OpenAI-compatible API): `history` is its
        earlier (message, answer) pairs, oldest first. No "session" event, and nothing is saved."""
        check_message(message)
        agent = self._agent(filters, scope)
        turns = [{"message": asked, "answer": answer, "record": {}} for asked, answer in history]
        for event, data in agent.run(" ".join(message.split()), turns, ""):
            yield event, data.to_json() if event == "done" else data

    def _agent(self, filters: Filters | None, scope: Scope | None) -> ChatAgent:
        catalog = field_catalog(self.settings, self.sidecar, scope, self.answerer.retriever.embedder)
        tools = Tools(self.answerer.retriever, self.runner, scope, filters)
        return ChatAgent(tools, self.answerer, catalog, self.llm, self.settings.chat_max_tool_calls)

    def turn(self, message: str, owner: str, session_id: str | None = None, filters: Filters | None = None,
             scope: Scope | None = None) -> dict[str, Any]:
        """The `done` object of one turn."""
        return next(data for event, data in self.stream(message, owner, session_id, filters, scope)
                    if event == "done")


def check_message(message: str) -> None:
    if not isinstance(message, str) or not message.strip():
        raise InputError("the message is empty", code="empty_message")
    if len(message) > MAX_MESSAGE_CHARS:
        raise InputError(f"the message is longer than {MAX_MESSAGE_CHARS} characters", code="message_too_long")
