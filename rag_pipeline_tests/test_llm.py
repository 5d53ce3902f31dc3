"""Tests of rag_pipeline.llm against a fake Ollama server speaking its HTTP API."""

from __future__ import annotations

import socket
import time

import httpx
import ollama
import pytest

from rag_pipeline.llm import LLMResponseError, LLMUnavailable, OllamaLLM, build_llm
from rag_pipeline.settings import Settings
from rag_pipeline_tests.fake_ollama import (
    FAKE_VERSION,
    FakeOllama,
)

QUESTION = [{"role": "user", "content": "What is RAG?"}]


def make_llm(url: str, **kwargs) -> OllamaLLM:
    return OllamaLLM(url, **{"timeout": 5.0, "backoff": 0.01, **kwargs})


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_streams_tokens_in_order(fake_ollama: FakeOllama) -> None:
    fake_ollama.reply = lambda messages: "Retrieval augmented  generation grounds answers."
    llm = make_llm(fake_ollama.url)
    assert (llm.model_id, llm.name) == ("ollama/llama3.2", "ollama")
    tokens = list(llm.stream_chat(QUESTION))
    assert tokens == ["Retrieval ", "augmented ", " ", "generation ", "grounds ", "answers."]
    assert llm.chat(QUESTION) == "Retrieval augmented  generation grounds answers."


def test_default_reply_echoes_the_question(fake_ollama: FakeOllama) -> None:
    assert make_llm(fake_ollama.url).chat(QUESTION) == "You said: What is RAG?"


def test_sends_model_options_and_messages(fake_ollama: FakeOllama) -> None:
    llm = make_llm(fake_ollama.url, model="llama3.2:latest", temperature=0.3, max_tokens=64, context_window=2048)
    llm.chat(QUESTION)
    [body] = fake_ollama.bodies("/api/chat")
    assert body["model"] == "llama3.2:latest" and body["stream"] is True
    assert body["options"] == {"temperature": 0.3, "num_predict": 64, "num_ctx": 2048}
    assert body["messages"] == QUESTION


def test_complete_sends_system_then_user(fake_ollama: FakeOllama) -> None:
    seen: list[list[dict]] = []
    fake_ollama.reply = lambda messages: seen.append(messages) or "ok"
    llm = make_llm(fake_ollama.url)
    assert llm.complete("Summarise.", system="You are terse.") == "ok"
    assert llm.complete("Again.") == "ok"
    assert seen == [
        [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Summarise."}],
        [{"role": "user", "content": "Again."}],
    ]


@pytest.mark.parametrize("fail_mode", ["http_503", "drop"])
def test_retries_until_success(fake_ollama: FakeOllama, fail_mode: str) -> None:
    fake_ollama.fail_mode = fail_mode
    fake_ollama.fail_next = 2
    assert make_llm(fake_ollama.url, retries=2).chat(QUESTION) == "You said: What is RAG?"
    assert len(fake_ollama.bodies("/api/chat")) == 3


@pytest.mark.parametrize("fail_mode", ["http_503", "drop"])
def test_gives_up_after_the_retries(fake_ollama: FakeOllama, fail_mode: str) -> None:
    fake_ollama.fail_mode = fail_mode
    fake_ollama.fail_next = 3
    with pytest.raises(LLMUnavailable) as error:
        make_llm(fake_ollama.url, retries=2).chat(QUESTION)
    assert fake_ollama.url in str(error.value) and "llama3.2" in str(error.value)
    assert len(fake_ollama.bodies("/api/chat")) == 3


def test_no_retry_once_tokens_were_yielded(monkeypatch: pytest.MonkeyPatch) -> None:
    llm = make_llm("http://127.0.0.1:9", retries=3)
    calls = []

    def broken_stream(**kwargs):
        calls.append(kwargs)
        yield ollama.ChatResponse(model=llm.model, message={"role": "assistant", "content": "partial "})
        raise httpx.RemoteProtocolError("peer closed connection")

    monkeypatch.setattr(llm._client, "chat", broken_stream)
    tokens = []
    with pytest.raises(LLMUnavailable, match="unreachable"):
        for token in llm.stream_chat(QUESTION):
            tokens.append(token)
    assert tokens == ["partial "] and len(calls) == 1


def test_timeout(fake_ollama: FakeOllama) -> None:
    fake_ollama.delay_s = 1.0
    llm = make_llm(fake_ollama.url, timeout=0.2, retries=2)
    start = time.perf_counter()
    with pytest.raises(LLMUnavailable, match="RAG_LLM_TIMEOUT_S") as error:
        llm.chat(QUESTION)
    assert time.perf_counter() - start < 0.9  # timeouts are not retried
    assert fake_ollama.url in str(error.value) and len(fake_ollama.bodies("/api/chat")) == 1


def test_unknown_model(fake_ollama: FakeOllama) -> None:
    with pytest.raises(LLMUnavailable) as error:
        make_llm(fake_ollama.url, model="mistral").chat(QUESTION)
    message = str(error.value)
    assert fake_ollama.url in message and "not found" in message
    assert "ollama pull mistral" in message and "RAG_OLLAMA_CHAT_MODEL" in message
    assert len(fake_ollama.bodies("/api/chat")) == 1  # a missing model is not retried


def test_malformed_response(fake_ollama: FakeOllama) -> None:
    fake_ollama.malformed = True
    with pytest.raises(LLMResponseError, match="malformed") as error:
        make_llm(fake_ollama.url).chat(QUESTION)
    assert fake_ollama.url in str(error.value) and "llama3.2" in str(error.value)


def test_server_down() -> None:
    url = closed_port_url()
    with pytest.raises(LLMUnavailable, match="RAG_OLLAMA_URL") as error:
        make_llm(url, retries=1).chat(QUESTION)
    assert url in str(error.value) and "llama3.2" in str(error.value)
    status = make_llm(url).status()
    assert status["reachable"] is False and status["model_available"] is False
    assert url in status["error"]


def test_status(fake_ollama: FakeOllama) -> None:
    for model in ("llama3.2", "llama3.2:latest"):
        assert make_llm(fake_ollama.url, model=model).status() == {
            "url": fake_ollama.url,
            "model": model,
            "reachable": True,
            "model_available": True,
            "error": None,
        }
    status = make_llm(fake_ollama.url, model="mistral").status()
    assert status["reachable"] is True and status["model_available"] is False
    assert "ollama pull mistral" in status["error"]
    assert fake_ollama.requests[-1] == ("/api/tags", None)


def test_build_llm() -> None:
    assert build_llm(Settings(ollama_url=None)) is None
    settings = Settings(ollama_url="http://ollama:11434", ollama_chat_model="qwen3", llm_temperature=0.5,
                        llm_max_tokens=99, llm_context_window=4096, llm_timeout_s=7.0, llm_retries=4)
    llm = build_llm(settings)
    assert isinstance(llm, OllamaLLM) and (llm.url, llm.model_id) == ("http://ollama:11434", "ollama/qwen3")
    assert llm.options == {"temperature": 0.5, "num_predict": 99, "num_ctx": 4096}
    assert (llm.timeout, llm.retries) == (7.0, 4)


def test_fake_server_speaks_the_ollama_api(fake_ollama: FakeOllama) -> None:
    client = ollama.Client(host=fake_ollama.url, timeout=5)
    fake_ollama.reply = lambda messages: " | ".join(f"{m['role']}={m['content']}" for m in messages)
    chat = client.chat(model="llama3.2", messages=QUESTION, stream=False)
    assert chat.message.content == "user=What is RAG?" and chat.done and chat.done_reason == "stop"
    pieces = [part.response for part in client.generate(model="llama3.2", prompt="hi", system="sys", stream=True)]
    assert pieces == ["system=sys ", "| ", "user=hi", ""]
    assert client.generate(model="llama3.2", prompt="hi", stream=False).response == "user=hi"
    assert httpx.get(f"{fake_ollama.url}/api/version").json() == {"version": FAKE_VERSION}
    assert [model.model for model in client.list().models] == ["fake-embed:latest", "llama3.2:latest",
                                                                "nomic-embed-text:latest"]
    with pytest.raises(ollama.ResponseError) as error:
        client.generate(model="absent", prompt="hi")
    assert error.value.status_code == 404
    assert [path for path, _ in fake_ollama.requests] == [
        "/api/chat", "/api/generate", "/api/generate", "/api/version", "/api/tags", "/api/generate"
    ]
