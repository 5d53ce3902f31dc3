"""A fake Ollama server for tests, speaking the real HTTP API: /api/embed, /api/chat, /api/generate, /api/tags,
/api/version. Configure it through its attributes; every request is recorded in `requests`."""

from __future__ import annotations

import hashlib
import json
import re
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

FAKE_DIMENSION = 12
FAKE_EMBED_MODELS = ("fake-embed", "nomic-embed-text")
FAKE_CHAT_MODELS = ("llama3.2",)
FAKE_VERSION = "0.12.6"


def fake_vector(text: str) -> list[float]:
    """A deterministic, deliberately unnormalised embedding of text."""
    digest = hashlib.sha256(text.encode()).digest()
    return [float(byte) - 100.0 for byte in digest[:FAKE_DIMENSION]]


def echo_reply(messages: list[dict]) -> str:
    """The default answer: the last user message, echoed."""
    last = next((message["content"] for message in reversed(messages) if message["role"] == "user"), "")
    return f"You said: {last}"


def split_pieces(text: str) -> list[str]:
    """text cut after each space, as the streamed pieces ("a b c" -> ["a ", "b ", "c"])."""
    return [piece for piece in re.split(r"(?<= )", text) if piece]


def _tagged(model: str) -> str:
    return model if ":" in model else f"{model}:latest"


class QuietServer(ThreadingHTTPServer):
    """A threading HTTP server that does not log clients giving up (e.g. on a timeout)."""

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class JsonHandler(BaseHTTPRequestHandler):
    """GETs and JSON POSTs, both handed to `answer(body)` (None for a GET)."""

    def do_GET(self) -> None:
        self.answer(None)

    def do_POST(self) -> None:
        self.answer(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))

    def answer(self, body: Any) -> None:
        raise NotImplementedError

    def send_json(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:
        pass


class FakeOllama(QuietServer):
    """Ollama on 127.0.0.1 (a free port). Attributes tests may change at any time:

    chat_models / embed_models: models /api/chat and /api/generate, resp. /api/embed, know (with or without
    ":latest"); others get 404 like Ollama. reply(messages) -> str: the assistant's text, streamed in pieces split
    after spaces. fail_next: the next N requests fail, as HTTP 503 (fail_mode "http_503") or a connection closed
    without an answer (fail_mode "drop"). delay_s: sleep before answering. malformed: chat and generate answer
    lines that are not JSON. requests: (path, parsed JSON body or None) of every request, in arrival order.
    """

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), FakeOllamaHandler)
        self.chat_models: set[str] = set(FAKE_CHAT_MODELS)
        self.embed_models: set[str] = set(FAKE_EMBED_MODELS)
        self.reply: Callable[[list[dict]], str] = echo_reply
        self.fail_next = 0
        self.fail_mode: Literal["http_503", "drop"] = "http_503"
        self.delay_s = 0.0
        self.malformed = False
        self.requests: list[tuple[str, Any]] = []
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def bodies(self, path: str) -> list[Any]:
        """The bodies of the recorded requests to path."""
        return [body for request_path, body in self.requests if request_path == path]

    def knows(self, model: str, models: set[str]) -> bool:
        return _tagged(model) in {_tagged(known) for known in models}

    def record(self, path: str, body: Any) -> bool:
        """Records a request; True when it must fail (fail_next counts down)."""
        with self._lock:
            self.requests.append((path, body))
            if self.fail_next > 0:
                self.fail_next -= 1
                return True
            return False


class FakeOllamaHandler(JsonHandler):
    server: FakeOllama

    def answer(self, body: Any) -> None:
        server = self.server
        if server.record(self.path, body):
            if server.fail_mode == "drop":
                self.close_connection = True
                return
            self.send_json(503, {"error": "server busy, please try again"})
            return
        time.sleep(server.delay_s)
        route = {
            ("GET", "/api/tags"): self.tags,
            ("GET", "/api/version"): lambda _: self.send_json(200, {"version": FAKE_VERSION}),
            ("POST", "/api/embed"): self.embed,
            ("POST", "/api/chat"): self.chat,
            ("POST", "/api/generate"): self.generate,
        }.get((self.command, self.path))
        if route is None:
            self.send_json(404, {"error": "404 page not found"})
        else:
            route(body)

    def tags(self, _: None) -> None:
        names = sorted({_tagged(model) for model in self.server.chat_models | self.server.embed_models})
        models = [
            {
                "name": name,
                "model": name,
                "modified_at": "2025-01-01T00:00:00Z",
                "size": 1_000_000,
                "digest": hashlib.sha256(name.encode()).hexdigest(),
                "details": {"format": "gguf", "family": "llama", "parameter_size": "1B", "quantization_level": "Q4_0"},
            }
            for name in names
        ]
        self.send_json(200, {"models": models})

    def embed(self, body: dict) -> None:
        if not self.server.knows(body["model"], self.server.embed_models):
            self.model_not_found(body["model"])
            return
        inputs = [body["input"]] if isinstance(body["input"], str) else body["input"]
        self.send_json(200, {"model": body["model"], "embeddings": [fake_vector(text) for text in inputs]})

    def chat(self, body: dict) -> None:
        self.generation(body, body.get("messages", []), "message")

    def generate(self, body: dict) -> None:
        system = [{"role": "system", "content": body["system"]}] if body.get("system") else []
        self.generation(body, [*system, {"role": "user", "content": body.get("prompt", "")}], "response")

    def generation(self, body: dict, messages: list[dict], field: Literal["message", "response"]) -> None:
        """A chat or generate answer: NDJSON pieces then a final "done" line, or one object when not streaming."""
        model = body["model"]
        if not self.server.knows(model, self.server.chat_models):
            self.model_not_found(model)
            return
        text = self.server.reply(messages)

        def part(content: str, done: bool) -> dict:
            value = {"role": "assistant", "content": content} if field == "message" else content
            return {"model": model, "created_at": datetime.now(UTC).isoformat(), field: value, "done": done}

        final = {"done_reason": "stop", "total_duration": 1_000, "load_duration": 10, "prompt_eval_count": 5,
                 "prompt_eval_duration": 100, "eval_count": len(split_pieces(text)), "eval_duration": 800}
        if self.server.malformed:
            lines = [b"this is not JSON\n", b"{truncated\n"]
        elif body.get("stream", True):
            pieces = [part(piece, False) for piece in split_pieces(text)] + [{**part("", True), **final}]
            lines = [json.dumps(piece).encode() + b"\n" for piece in pieces]
        else:
            self.send_json(200, {**part(text, True), **final})
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.end_headers()
        for line in lines:  # no Content-Length: the answer ends when the connection closes
            self.wfile.write(line)
            self.wfile.flush()

    def model_not_found(self, model: str) -> None:
        self.send_json(404, {"error": f'model "{model}" not found, try pulling it first'})



