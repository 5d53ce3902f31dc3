"""Model providers: the ChatModel interface on Ollama's native API and on an OpenAI-compatible server (each against
a fake server speaking its HTTP protocol), the provider settings, OpenAI-compatible embeddings, and both end to end
(an answer from the answerer, an ingest and a search)."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import numpy as np
import pytest
from pydantic import ValidationError

from rag_pipeline import components
from rag_pipeline.components import build_embedder, load_settings
from rag_pipeline.embed.embedder import EmbedderUnavailable
from rag_pipeline.generate.generators import LLMGenerator
from rag_pipeline.llm import ChatModel, LLMResponseError, LLMUnavailable, OllamaLLM, OpenAIChatModel, build_llm
from rag_pipeline.llm.ollama import OllamaEmbedder
from rag_pipeline.llm.openai import OpenAIEmbedder
from rag_pipeline.settings import Settings
from rag_pipeline_tests.fake_ollama import FAKE_DIMENSION, FakeOllama, fake_vector
from rag_pipeline_tests.fake_openai import FAKE_CHAT_MODEL, FAKE_EMBED_MODEL, FakeOpenAI

QUESTION = [{"role": "user", "content": "What is RAG?"}]
REPLY = "Retrieval augmented generation grounds answers."
SCHEMA = {"type": "object", "properties": {"value": {"type": "string"}}, "required": ["value"]}
Server = FakeOllama | FakeOpenAI


def chat_path(server: Server) -> str:
    return "/api/chat" if isinstance(server, FakeOllama) else "/v1/chat/completions"


def model_on(server: Server, **kwargs) -> ChatModel:
    """A chat model of the server's provider, with test timings."""
    options = {"timeout": 5.0, "backoff": 0.01, **kwargs}
    if isinstance(server, FakeOllama):
        return OllamaLLM(server.url, **options)
    return OpenAIChatModel(server.url, options.pop("model", FAKE_CHAT_MODEL), **options)


@pytest.fixture(params=["ollama", "openai"])
def server(request: pytest.FixtureRequest) -> Server:
    """The fake server of each provider."""
    return request.getfixturevalue(f"fake_{request.param}")


# --- the ChatModel interface on both providers ------------------------------------------------------------------


def test_streams_pieces_and_reports_usage(server: Server) -> None:
    server.reply = lambda messages: REPLY
    llm = model_on(server)
    assert llm.last_usage is None
    assert list(llm.stream_chat(QUESTION)) == ["Retrieval ", "augmented ", "generation ", "grounds ", "answers."]
    prompt_tokens = 5 if isinstance(server, FakeOllama) else 3  # the fakes: a constant, resp. the words sent
    assert llm.last_usage == {"prompt_tokens": prompt_tokens, "completion_tokens": 5}
    assert llm.model_id == f"{llm.name}/{llm.model}" and llm.url == server.url
    assert llm.complete("Say it.", system="Be brief.") == REPLY
    assert chat_path(server) in {path for path, *_ in server.requests}


def test_response_format_is_forwarded(server: Server) -> None:
    server.reply = lambda messages: '{"value": "x"}'
    llm = model_on(server)
    assert llm.chat(QUESTION) == llm.chat(QUESTION, response_format=SCHEMA) == '{"value": "x"}'
    plain, constrained = server.bodies(chat_path(server))
    if isinstance(server, FakeOllama):
        assert "format" not in plain and constrained["format"] == SCHEMA
    else:
        assert "response_format" not in plain
        assert constrained["response_format"] == {"type": "json_schema",
                                                  "json_schema": {"name": "reply", "schema": SCHEMA}}
        assert constrained["stream"] is True and constrained["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(("provider", "fail_mode"), [("ollama", "http_503"), ("ollama", "drop"), ("openai", "http_503"),
                                                     ("openai", "http_429"), ("openai", "drop")])
def test_retries_then_succeeds(request: pytest.FixtureRequest, provider: str, fail_mode: str) -> None:
    server: Server = request.getfixturevalue(f"fake_{provider}")
    server.fail_mode = fail_mode  # type: ignore[assignment]
    server.fail_next = 2
    assert model_on(server, retries=2).chat(QUESTION) == "You said: What is RAG?"
    assert len(server.bodies(chat_path(server))) == 3


def test_gives_up_after_the_retries(fake_openai: FakeOpenAI) -> None:
    fake_openai.fail_next = 3
    with pytest.raises(LLMUnavailable, match="HTTP 503") as error:
        model_on(fake_openai, retries=2).chat(QUESTION)
    assert fake_openai.url in str(error.value) and FAKE_CHAT_MODEL in str(error.value)
    assert len(fake_openai.bodies("/v1/chat/completions")) == 3


def test_timeout_is_not_retried(server: Server) -> None:
    server.delay_s = 1.0
    start = time.perf_counter()
    with pytest.raises(LLMUnavailable, match="RAG_LLM_TIMEOUT_S") as error:
        model_on(server, timeout=0.2, retries=2).chat(QUESTION)
    assert time.perf_counter() - start < 0.9
    assert server.url in str(error.value) and len(server.bodies(chat_path(server))) == 1


# --- OpenAI-compatible errors ------------------------------------------------------------------------------------


def test_api_key(fake_openai: FakeOpenAI) -> None:
    fake_openai.require_key = "sk-right"
    with pytest.raises(LLMUnavailable, match="refused the API key") as error:
        model_on(fake_openai, api_key="sk-wrong").chat(QUESTION)
    assert "RAG_LLM_API_KEY" in str(error.value) and "sk-wrong" not in str(error.value)
    assert len(fake_openai.requests) == 1  # a refused key is not retried
    status = model_on(fake_openai, api_key="sk-wrong").status()
    assert status["reachable"] is False and "refused the API key" in status["error"]
    assert model_on(fake_openai, api_key="sk-right").chat(QUESTION) == "You said: What is RAG?"
    assert fake_openai.requests[-1][2]["Authorization"] == "Bearer sk-right"


def test_unknown_model(fake_openai: FakeOpenAI) -> None:
    with pytest.raises(LLMUnavailable, match="not found") as error:
        model_on(fake_openai, model="gpt-absent").chat(QUESTION)
    message = str(error.value)
    assert "'gpt-absent'" in message and "RAG_LLM_MODEL" in message and fake_openai.url in message
    assert len(fake_openai.requests) == 1
    status = model_on(fake_openai, model="gpt-absent").status()
    assert status["reachable"] is True and status["model_available"] is False and "gpt-absent" in status["error"]
    assert model_on(fake_openai).status() == {"url": fake_openai.url, "model": FAKE_CHAT_MODEL, "reachable": True,
                                               "model_available": True, "error": None}


def test_malformed_stream(fake_openai: FakeOpenAI) -> None:
    fake_openai.malformed = True
    with pytest.raises(LLMResponseError, match="malformed") as error:
        model_on(fake_openai).chat(QUESTION)
    assert fake_openai.url in str(error.value) and FAKE_CHAT_MODEL in str(error.value)


def test_server_down() -> None:
    url = "http://127.0.0.1:9/v1"  # the discard port: nothing listens
    with pytest.raises(LLMUnavailable, match="unreachable.*RAG_LLM_BASE_URL"):
        OpenAIChatModel(url, "m", retries=1, backoff=0.01).chat(QUESTION)
    assert OpenAIChatModel(url, "m").status()["reachable"] is False


def test_fake_speaks_the_openai_api(fake_openai: FakeOpenAI) -> None:
    """The fake's non-streamed completion and model list, as an OpenAI client reads them."""
    body = {"model": FAKE_CHAT_MODEL, "messages": QUESTION}
    completion = httpx.post(f"{fake_openai.url}/chat/completions", json=body).json()
    assert completion["object"] == "chat.completion"
    assert completion["choices"][0]["message"] == {"role": "assistant", "content": "You said: What is RAG?"}
    assert completion["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
    models = httpx.get(f"{fake_openai.url}/models").json()
    assert [model["id"] for model in models["data"]] == [FAKE_CHAT_MODEL, FAKE_EMBED_MODEL]
    stream = httpx.post(f"{fake_openai.url}/chat/completions", json={**body, "stream": True}).text
    assert stream.startswith("data: {") and stream.endswith("data: [DONE]\n\n") and '"usage"' not in stream


# --- settings ----------------------------------------------------------------------------------------------------


def test_build_llm_from_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    assert build_llm(Settings(llm_provider="openai", ollama_url="http://ollama:11434")) is None
    monkeypatch.setenv("RAG_LLM_PROVIDER", "openai")
    monkeypatch.setenv("RAG_LLM_BASE_URL", "http://vllm:8000/v1")
    monkeypatch.setenv("RAG_LLM_MODEL", "qwen2.5-7b")
    monkeypatch.setenv("RAG_LLM_API_KEY", "sk-secret")
    monkeypatch.setenv("RAG_LLM_TIMEOUT_S", "7")
    settings = Settings()
    llm = build_llm(settings)
    assert isinstance(llm, OpenAIChatModel) and (llm.url, llm.model_id, llm.timeout) == (
        "http://vllm:8000/v1", "openai/qwen2.5-7b", 7.0)
    assert llm._client.headers["Authorization"] == "Bearer sk-secret" and "sk-secret" not in repr(settings)
    monkeypatch.delenv("RAG_LLM_MODEL")
    with pytest.raises(ValidationError, match="RAG_LLM_MODEL"):
        Settings()
    ollama = build_llm(Settings(llm_provider="ollama", llm_base_url="http://gpu:11434", llm_model="qwen3",
                                ollama_url="http://ollama:11434"))
    assert isinstance(ollama, OllamaLLM) and (ollama.url, ollama.model_id) == ("http://gpu:11434", "ollama/qwen3")


def test_generator_setting_accepts_the_ollama_alias() -> None:
    assert Settings(generator="ollama").generator == "llm"  # type: ignore[arg-type]
    assert Settings(generator="llm").generator == "llm"


# --- embeddings --------------------------------------------------------------------------------------------------


def test_openai_embeddings(fake_openai: FakeOpenAI) -> None:
    fake_openai.require_key = "sk-e"
    embedder = OpenAIEmbedder(fake_openai.url, FAKE_EMBED_MODEL, api_key="sk-e", batch_size=4)
    assert (embedder.dimension, embedder.model_id) == (FAKE_DIMENSION, f"openai/{FAKE_EMBED_MODEL}")
    fake_openai.requests.clear()
    texts = [f"text {i}" for i in range(10)]
    vectors = embedder.embed_documents(texts)
    assert [len(body["input"]) for body in fake_openai.bodies("/v1/embeddings")] == [4, 4, 2]
    expected = np.array([fake_vector(text) for text in texts])
    np.testing.assert_allclose(vectors, expected / np.linalg.norm(expected, axis=1, keepdims=True), atol=1e-6)
    assert embedder.embed_query("q").shape == (FAKE_DIMENSION,)


def test_openai_embedding_failures(fake_openai: FakeOpenAI) -> None:
    fake_openai.fail_mode, fake_openai.fail_next = "http_429", 2
    OpenAIEmbedder(fake_openai.url, FAKE_EMBED_MODEL, retries=2, backoff=0.01)  # the probe, retried
    assert len(fake_openai.bodies("/v1/embeddings")) == 3
    with pytest.raises(EmbedderUnavailable, match="RAG_OPENAI_EMBED_MODEL") as error:
        OpenAIEmbedder(fake_openai.url, "absent-embed")
    assert fake_openai.url in str(error.value) and "absent-embed" in str(error.value)
    fake_openai.require_key = "sk-e"
    with pytest.raises(EmbedderUnavailable, match="refused the API key"):
        OpenAIEmbedder(fake_openai.url, FAKE_EMBED_MODEL, api_key="sk-other")
    fake_openai.delay_s = 1.0
    with pytest.raises(EmbedderUnavailable, match="RAG_EMBEDDING_TIMEOUT_S"):
        OpenAIEmbedder(fake_openai.url, FAKE_EMBED_MODEL, api_key="sk-e", timeout=0.2)
    with pytest.raises(EmbedderUnavailable, match="RAG_EMBEDDING_BASE_URL"):
        build_embedder(backend="openai")


def test_ollama_embeddings_retry_and_time_out(fake_ollama: FakeOllama) -> None:
    fake_ollama.fail_mode, fake_ollama.fail_next = "drop", 1
    assert OllamaEmbedder(fake_ollama.url, "fake-embed", backoff=0.01).dimension == FAKE_DIMENSION
    assert len(fake_ollama.bodies("/api/embed")) == 2
    fake_ollama.delay_s = 1.0
    with pytest.raises(EmbedderUnavailable, match="RAG_EMBEDDING_TIMEOUT_S"):
        OllamaEmbedder(fake_ollama.url, "fake-embed", timeout=0.2)


# --- end to end --------------------------------------------------------------------------------------------------


def use_openai(monkeypatch: pytest.MonkeyPatch, server: FakeOpenAI, **extra: str) -> None:
    """RAG_* variables for the OpenAI-compatible provider on `server`, with an API key it requires."""
    server.require_key = "sk-test"
    for name, value in {"RAG_LLM_PROVIDER": "openai", "RAG_LLM_BASE_URL": server.url,
                        "RAG_LLM_MODEL": FAKE_CHAT_MODEL, "RAG_LLM_API_KEY": "sk-test", **extra}.items():
        monkeypatch.setenv(name, value)


def test_answer_streams_from_an_openai_compatible_server(sample_index: tuple[Path, Path], fake_openai: FakeOpenAI,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    use_openai(monkeypatch, fake_openai, RAG_DATA_DIR=str(sample_index[1]), RAG_GENERATOR="ollama")
    fake_openai.reply = lambda messages: "Ducks eat grasses, aquatic plants and insects [1]. They also dabble."
    settings = Settings()
    retriever = components.open_retriever(settings)
    try:
        answerer = components.answerer(settings, retriever)
        assert isinstance(answerer.generator, LLMGenerator)
        items = list(answerer.stream("What do ducks eat?", top_k=3))
    finally:
        retriever.close()
    *pieces, answer = items
    assert len(pieces) > 1 and "".join(pieces) == answer.answer
    assert answer.answer == "Ducks eat grasses, aquatic plants and insects [1]. They also dabble."
    assert answer.generator == f"openai/{FAKE_CHAT_MODEL}" and answer.citations == [1] and not answer.warnings
    [chat] = fake_openai.bodies("/v1/chat/completions")
    assert chat["stream"] is True and chat["messages"][0]["role"] == "system"
    assert "<<SOURCE" in chat["messages"][0]["content"]


def test_ingest_and_search_with_openai_embeddings(tmp_path: Path, fake_openai: FakeOpenAI,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from rag_pipeline.defs.ingest_runner import ingest

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "pumps.md").write_text("# Pumps\n\nThe centrifugal pump seals are inspected every month.\n")
    (corpus / "ducks.md").write_text("# Ducks\n\nMallard ducks eat grasses, aquatic plants and insects.\n")
    (corpus / "tea.md").write_text("# Tea\n\nGreen tea is steeped at eighty degrees for two minutes.\n")
    use_openai(monkeypatch, fake_openai, RAG_EMBEDDING_BACKEND="openai", RAG_OPENAI_EMBED_MODEL=FAKE_EMBED_MODEL)
    data_dir = tmp_path / "data"
    summary = ingest([corpus], data_dir)
    assert summary["failed"] == [] and summary["added"] == 3 and summary["chunks"] >= 3
    embedded = [text for body in fake_openai.bodies("/v1/embeddings") for text in body["input"]]
    assert any("centrifugal pump seals" in text for text in embedded)
    assert {headers["Authorization"] for _, _, headers in fake_openai.requests} == {"Bearer sk-test"}

    settings = load_settings(data_dir=data_dir)
    [generation] = components.generations(settings).all().values()
    assert (generation.model_id, generation.dimension) == (f"openai/{FAKE_EMBED_MODEL}", FAKE_DIMENSION)
    retriever = components.open_retriever(settings)
    try:
        assert retriever.embedder is not None and retriever.embedder.model_id == f"openai/{FAKE_EMBED_MODEL}"
        result = retriever.search("How often are the centrifugal pump seals inspected?", top_k=2)
    finally:
        retriever.close()
    assert result.mode_used == "hybrid" and not result.warnings
    assert result.hits[0].payload["path"].endswith("pumps.md")
    queried = fake_openai.bodies("/v1/embeddings")[-1]["input"]
    assert any("centrifugal pump seals" in text for text in queried)
