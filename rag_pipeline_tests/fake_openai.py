"""A fake OpenAI-compatible server for tests, speaking the real HTTP API: POST /v1/chat/completions (JSON, or
server-sent events with `stream: true`), POST /v1/embeddings, GET /v1/models. Configure it through its
attributes; every request is recorded in `requests`."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any, Literal

from rag_pipeline_tests.fake_ollama import JsonHandler, QuietServer, echo_reply, fake_vector, split_pieces

FAKE_CHAT_MODEL = "fake-chat"
FAKE_EMBED_MODEL = "fake-embed"
CREATED = 1_700_000_000


class FakeOpenAI(QuietServer):
    """An OpenAI-compatible server on 127.0.0.1 (a free port). Attributes tests may change at any time:

    chat_models / embed_models: the models it serves (others get 404 model_not_found). reply(messages) -> str: the
    assistant's text, streamed in pieces split after spaces. fail_next: the next N requests fail, as HTTP 503
    (fail_mode "http_503"), 429 ("http_429") or a connection closed without an answer ("drop"). delay_s: sleep
    before answering. malformed: chat streams lines that are not JSON. require_key: requests without
    "Authorization: Bearer <require_key>" get 401. requests: (path, parsed JSON body or None, headers) of every
    request, in arrival order.
    """

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), FakeOpenAIHandler)
        self.chat_models: set[str] = {FAKE_CHAT_MODEL}
        self.embed_models: set[str] = {FAKE_EMBED_MODEL}
        self.reply: Callable[[list[dict]], str] = echo_reply
        self.fail_next = 0
        self.fail_mode: Literal["http_503", "http_429", "drop"] = "http_503"
        self.delay_s = 0.0
        self.malformed = False
        self.require_key: str | None = None
        self.requests: list[tuple[str, Any, dict[str, str]]] = []
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        """The API root clients are configured with (RAG_LLM_BASE_URL)."""
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def bodies(self, path: str) -> list[Any]:
        """The bodies of the recorded requests to path."""
        return [body for request_path, body, _ in self.requests if request_path == path]

    def record(self, path: str, body: Any, headers: dict[str, str]) -> bool:
        """Records a request; True when it must fail (fail_next counts down)."""
        with self._lock:
            self.requests.append((path, body, headers))
            if self.fail_next > 0:
                self.fail_next -= 1
                return True
            return False


def error_body(message: str, kind: str, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


class FakeOpenAIHandler(JsonHandler):
    server: FakeOpenAI

    def answer(self, body: Any) -> None:
        server = self.server
        if server.record(self.path, body, dict(self.headers)):
            if server.fail_mode == "drop":
                self.close_connection = True
                return
            status = 429 if server.fail_mode == "http_429" else 503
            self.send_json(status, error_body("try again later", "server_error" if status == 503 else "rate_limit"))
            return
        if server.require_key and self.headers.get("Authorization") != f"Bearer {server.require_key}":
            self.send_json(401, error_body("Incorrect API key provided.", "invalid_request_error", "invalid_api_key"))
            return
        time.sleep(server.delay_s)
        route = {
            ("GET", "/v1/models"): self.models,
            ("POST", "/v1/chat/completions"): self.chat,
            ("POST", "/v1/embeddings"): self.embeddings,
        }.get((self.command, self.path))
        if route is None:
            self.send_json(404, error_body(f"Unknown request URL: {self.command} {self.path}", "invalid_request_error"))
        else:
            route(body)

    def models(self, _: None) -> None:
        names = sorted(self.server.chat_models | self.server.embed_models)
        data = [{"id": name, "object": "model", "created": CREATED, "owned_by": "fake"} for name in names]
        self.send_json(200, {"object": "list", "data": data})

    def known(self, model: str, models: set[str]) -> bool:
        if model in models:
            return True
        self.send_json(404, error_body(f"The model `{model}` does not exist or you do not have access to it.",
                                       "invalid_request_error", "model_not_found"))
        return False

    def embeddings(self, body: dict) -> None:
        if not self.known(body["model"], self.server.embed_models):
            return
        inputs = [body["input"]] if isinstance(body["input"], str) else body["input"]
        data = [{"object": "embedding", "index": index, "embedding": fake_vector(text)}
                for index, text in enumerate(inputs)]
        tokens = sum(len(text.split()) for text in inputs)
        self.send_json(200, {"object": "list", "data": data, "model": body["model"],
                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    def chat(self, body: dict) -> None:
        """A chat completion: one JSON object, or with `stream: true` chunks as server-sent events, then the usage
        chunk when `stream_options.include_usage`, then `data: [DONE]`."""
        model = body["model"]
        if not self.known(model, self.server.chat_models):
            return
        messages = body.get("messages", [])
        text = self.server.reply(messages)
        pieces = split_pieces(text)
        usage = {"prompt_tokens": sum(len(m["content"].split()) for m in messages),
                 "completion_tokens": len(pieces)}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        base = {"id": "chatcmpl-fake", "created": CREATED, "model": model, "system_fingerprint": "fp_fake"}
        if not body.get("stream"):
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                      "finish_reason": "stop"}
            self.send_json(200, {**base, "object": "chat.completion", "choices": [choice], "usage": usage})
            return

        def chunk(delta: dict, finish: str | None = None) -> dict:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return {**base, "object": "chat.completion.chunk", "choices": [choice]}

        if self.server.malformed:
            events = ["this is not JSON", "{truncated"]
        else:
            chunks = [chunk({"role": "assistant", "content": ""})]
            chunks += [chunk({"content": piece}) for piece in pieces] + [chunk({}, "stop")]
            if (body.get("stream_options") or {}).get("include_usage"):
                chunks.append({**base, "object": "chat.completion.chunk", "choices": [], "usage": usage})
            events = [json.dumps(item) for item in chunks] + ["[DONE]"]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        for event in events:  # no Content-Length: the stream ends when the connection closes
            self.wfile.write(f"data: {event}\n\n".encode())
            self.wfile.flush()

