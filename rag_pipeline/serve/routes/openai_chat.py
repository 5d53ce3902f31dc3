"""The OpenAI-compatible API: GET /v1/models and POST /v1/chat/completions, so any OpenAI client (Open WebUI,
LibreChat, Continue, the `openai` package) can use rag_pipeline as a model.

The messages become one chat turn (the agent of POST /chat) whose conversation is the client's: the earlier user and
assistant messages are its context and nothing is stored. The answer's text cites [n] and [Dn] and ends with a
"Sources:" list; the structured citations are the extension field `citations` of the message (streamed: of the
delta that carries the sources). With `stream` the answer comes as OpenAI's server-sent events, `data: {chunk}`
... `data: [DONE]`. Keys and roles apply as on /chat (a reader key); errors have OpenAI's shape
(middleware/openai_errors.py).
"""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations.

import itertools
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response, StreamingResponse

from rag_pipeline.chat.citation_text import SOURCES_HEADING, sources_text
from rag_pipeline.errors import InputError, NotFound
from rag_pipeline.serve.dependencies import Reader, ServicesDep
from rag_pipeline.serve.http_errors import ERROR_RESPONSES
from rag_pipeline.serve.openai_models import MODEL_ID, ChatCompletion, ChatCompletionRequest, ChatMessage, ModelList
from rag_pipeline.serve.openapi import event_stream_content
from rag_pipeline.serve.routes.conversation import chat_service, stream_failure
from rag_pipeline.serve.sse import NO_BUFFERING

log = logging.getLogger(__name__)
router = APIRouter(prefix="/v1", tags=["openai"])
CREATED = 1_700_000_000  # the model's fixed creation time (OpenAI lists one; ours has none that matters)


@router.get("/models", response_model=ModelList, responses=ERROR_RESPONSES)
async def models(_: Reader) -> Response:
    """The one model: answers from the index, with citations."""
    return JSONResponse({"object": "list", "data": [
        {"id": MODEL_ID, "object": "model", "created": CREATED, "owned_by": "rag_pipeline"}]})


@router.post("/chat/completions", response_model=ChatCompletion, responses={
    200: {"content": event_stream_content("ChatCompletionChunk"),
          "description": "without stream: the chat.completion; with stream: `data: {chat.completion.chunk}` events "
                         "(the delta carrying the sources also carries `citations`), then `data: [DONE]`"},
    **ERROR_RESPONSES})
async def chat_completions(body: ChatCompletionRequest, scope: Reader, services: ServicesDep) -> Response:
    """The answer to the last user message, in the conversation of the earlier ones, with its citations."""
    if body.model != MODEL_ID:
        raise NotFound(f"the model {body.model!r} does not exist; use {MODEL_ID!r} (the one model v1/models lists)",
                       code="model_not_found")
    question, history = conversation(body.messages)
    service = await run_in_threadpool(chat_service, services)
    paths = await run_in_threadpool(services.paths.current)
    turn = service.stream_unsaved(question, history, None, scope)
    events = ((event, paths.json(data)) for event, data in turn)
    first = await run_in_threadpool(next, events)  # a bad message or a store that is down fails here, with its status
    completion_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
    if not body.stream:
        done = first[1] if first[0] == "done" else \
            await run_in_threadpool(lambda: next(data for event, data in events if event == "done"))
        content = done["answer"] + sources_text(done["citations"])
        return JSONResponse({
            "id": completion_id, "object": "chat.completion", "created": created, "model": MODEL_ID,
            "choices": [{"index": 0, "finish_reason": "stop", "message": {
                "role": "assistant", "content": content, "citations": done["citations"]}}],
            "usage": usage(done)})
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    chunks = completion_chunks(itertools.chain([first], events), completion_id, created, include_usage, paths.message)
    return StreamingResponse(chunks, media_type="text/event-stream", headers=NO_BUFFERING)


def conversation(messages: list[ChatMessage]) -> tuple[str, list[tuple[str, str]]]:
    """(the question: the last message, which must be the user's; the earlier (user message, answer) pairs)."""
    spoken = [(message.role, message.text) for message in messages if message.role in ("user", "assistant")]
    if not spoken or spoken[-1][0] != "user":
        raise InputError("the last message must be the user's (role user, with text content)",
                         code="invalid_messages")
    history: list[tuple[str, str]] = []
    asked: str | None = None
    for role, text in spoken[:-1]:
        if role == "user":
            asked = text
        elif asked is not None:
            history.append((asked, text.split(SOURCES_HEADING, 1)[0]))  # our own sources list is no context
            asked = None
    return spoken[-1][1], history


def usage(done: dict[str, Any]) -> dict[str, int]:
    prompt, completion = int(done["tokens"].get("in", 0)), int(done["tokens"].get("out", 0))
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def completion_chunks(events: Iterable[tuple[str, Any]], completion_id: str, created: int, include_usage: bool,
                      shown: Callable[[str], str]) -> Iterator[str]:
    """The turn's events as OpenAI's stream: the role, the answer's text as it is written, the sources (with the
    citations), the finish, the usage when asked for, then [DONE]. A failure midway ends it with an error object
    (its message as `shown`: no server path)."""

    def chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> str:
        choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
        data = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": MODEL_ID,
                "choices": choices, **extra}
        return f"data: {json.dumps(data, allow_nan=False, default=str)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    try:
        for event, data in events:
            if event == "token":
                yield chunk({"content": data["text"]})
            elif event == "done":
                yield chunk({"content": sources_text(data["citations"]), "citations": data["citations"]})
                yield chunk({}, "stop")
                if include_usage:
                    yield chunk(None, usage=usage(data))
    except Exception as error:
        log.exception("chat completion stream failed")
        failure = stream_failure(error)
        shown_error = {**failure, "message": shown(failure["message"]), "type": "server_error", "param": None}
        yield f"data: {json.dumps({'error': shown_error})}\n\n"
        return
    yield "data: [DONE]\n\n"
