"""The bodies of the OpenAI-compatible API (routes/openai_chat.py), as OpenAI's chat completions API has them.

A request is read leniently: clients send sampling options (temperature, max_tokens, tools...) that a RAG answer has
no use for, and they are ignored. Responses carry one extension field, `citations` (the structured sources of the
answer), on the message (streamed: on a chunk's delta).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MODEL_ID = "rag-pipeline"  # the one model /v1/models lists: answers from the index, with citations
MAX_MESSAGES = 200


class ContentPart(BaseModel):
    """A part of a message's content; only the text parts are read."""

    model_config = ConfigDict(extra="ignore")

    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None

    @property
    def text(self) -> str:
        if isinstance(self.content, list):
            return "\n".join(part.text for part in self.content if part.type == "text" and part.text)
        return self.content or ""


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")

    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    """POST /v1/chat/completions. The last user message is the question; the earlier user and assistant messages
    are the conversation it continues (system messages are not read). Other OpenAI options are ignored."""

    model_config = ConfigDict(extra="ignore")

    model: Annotated[str, Field(min_length=1, max_length=200)]
    messages: Annotated[list[ChatMessage], Field(min_length=1, max_length=MAX_MESSAGES)]
    stream: bool = False
    stream_options: StreamOptions | None = None


class Model(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str


class ModelList(BaseModel):
    """GET /v1/models."""

    object: Literal["list"] = "list"
    data: list[Model]


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class AnswerMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str = Field(description="the answer, its citations numbered [n] (passages) and [Dn] (documents a "
                                     "metadata result counted), then a 'Sources:' list")
    citations: list[dict[str, Any]] = Field(description="extension: the structured citations (kind, number or "
                                                        "label, path, heading, page, line_start, score, text)")


class Choice(BaseModel):
    index: int
    message: AnswerMessage
    finish_reason: Literal["stop"]


class ChatCompletion(BaseModel):
    """POST /v1/chat/completions without stream (with stream: `chat.completion.chunk` events, then [DONE])."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[Choice]
    usage: Usage


class ChunkDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    citations: list[dict[str, Any]] | None = Field(default=None, description="extension: on the delta that carries "
                                                                              "the sources list")


class ChunkChoice(BaseModel):
    index: int
    delta: ChunkDelta
    finish_reason: Literal["stop"] | None = None


class ChatCompletionChunk(BaseModel):
    """One `data:` event of POST /v1/chat/completions with stream (the stream ends with `data: [DONE]`)."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChunkChoice] = Field(description="empty on the usage chunk (stream_options.include_usage)")
    usage: Usage | None = None
