"""POST /chat (one conversational turn, as server-sent events or one JSON object), GET and DELETE /chat/{id}."""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations.

import itertools

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from rag_pipeline.chat.memory import key_owner
from rag_pipeline.chat.turn import ChatService
from rag_pipeline.errors import RagError
from rag_pipeline.llm import build_llm
from rag_pipeline.serve.auth import KEY_IDENTITY_STATE
from rag_pipeline.serve.dependencies import Reader, Services, ServicesDep
from rag_pipeline.serve.http_errors import ERROR_RESPONSES, http_status
from rag_pipeline.serve.models import ChatDeleted, ChatRequest, ChatSessionResponse
from rag_pipeline.serve.openapi import event_stream_content
from rag_pipeline.serve.sse import INTERNAL_ERROR, event_stream

router = APIRouter()


def chat_service(services: Services) -> ChatService:
    # a model per turn: its token counts (last_usage) belong to this conversation alone
    settings = services.settings
    return ChatService(settings, services.runtime.answerer(), services.sidecar, services.chat_memory, build_llm(settings))


def owner(request: Request) -> str:
    return key_owner(getattr(request.state, KEY_IDENTITY_STATE, None))


def stream_failure(error: Exception) -> dict[str, str]:
    """The "error" event of a turn that failed midway: a caller's mistake says what it was, a bug does not."""
    if isinstance(error, RagError) and http_status(error) < 500:
        return {"code": error.code, "message": error.message}
    return INTERNAL_ERROR


@router.post("/chat", responses={
    200: {"content": {**event_stream_content("ChatEvent"), "application/json": {
        "schema": {"$ref": "#/components/schemas/ChatResponse"}}},
          "description": 'server-sent events (ChatEvent) "session", "step" (a tool call), "observation" (its '
                         'summary), "token" (answer text), then "done" (the ChatResponse object); with Accept: '
                         'application/json the ChatResponse only'},
    **ERROR_RESPONSES})
async def chat(body: ChatRequest, request: Request, scope: Reader, services: ServicesDep) -> Response:
    """One conversational turn: the agent routes between semantic search and the metadata query tool."""
    service = await run_in_threadpool(chat_service, services)
    paths = await run_in_threadpool(services.paths.current)
    turn = service.stream(body.message, owner(request), body.session_id, paths.filters(body.filters), scope)
    events = ((event, paths.json(data)) for event, data in turn)
    first = await run_in_threadpool(next, events)  # a bad session or message fails here, before the stream
    accept = request.headers.get("accept", "")
    if "application/json" in accept and "text/event-stream" not in accept:
        done = await run_in_threadpool(lambda: next(data for event, data in events if event == "done"))
        return JSONResponse(done)
    def failure(error: Exception) -> dict[str, str]:
        shown = stream_failure(error)
        return {**shown, "message": paths.message(shown["message"])}

    return event_stream(itertools.chain([first], events), "chat", failure)  # each event as it happens


@router.get("/chat/{session_id}", response_model=ChatSessionResponse, responses=ERROR_RESPONSES)
async def chat_session(session_id: str, request: Request, _: Reader, services: ServicesDep) -> Response:
    """The session's turns: message, answer, citations, trajectory (the key that created it only)."""
    turns = await run_in_threadpool(services.chat_memory.turns, session_id, owner(request))
    paths = await run_in_threadpool(services.paths.current)
    return JSONResponse(paths.json({"session_id": session_id, "turns": [
        {"turn": turn["turn"], "message": turn["message"], "answer": turn["answer"],
         "citations": turn["record"].get("citations"), "trajectory": turn["record"].get("trajectory"),
         "exit_reason": turn["record"].get("exit_reason"), "created_at": str(turn["created_at"])}
        for turn in turns]}))


@router.delete("/chat/{session_id}", response_model=ChatDeleted, responses=ERROR_RESPONSES)
async def delete_chat_session(session_id: str, request: Request, _: Reader, services: ServicesDep) -> Response:
    """Delete the session and its turns (the key that created it only)."""
    await run_in_threadpool(services.chat_memory.delete, session_id, owner(request))
    return JSONResponse({"session_id": session_id, "deleted": True})
