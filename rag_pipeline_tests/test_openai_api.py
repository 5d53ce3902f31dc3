"""The OpenAI-compatible API (GET /v1/models, POST /v1/chat/completions) with the official `openai` client against a
real uvicorn server over the sample index: cited answers streamed and not, the client's conversation as context,
keys and their scopes, and errors in OpenAI's shape."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from rag_pipeline.components import load_settings
from rag_pipeline.serve.keys import create_key
from rag_pipeline.serve.openai_models import MODEL_ID
from rag_pipeline_tests.test_api import running_api

SEV1 = "who do I page for a SEV1 outage?"


@pytest.fixture(scope="module")
def keyed_api(sample_index: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[tuple[str, dict[str, str]]]:
    """The API over the sample index with three keys: a reader, a reader scoped to a tag no document has, and an
    admin."""
    _, data_dir = sample_index
    keys_file = tmp_path_factory.mktemp("openai_keys") / "api_keys.yaml"
    tokens = {"reader": create_key(keys_file, "reader")[1],
              "elsewhere": create_key(keys_file, "elsewhere", tags=("no-such-tag",))[1],
              "admin": create_key(keys_file, "admin", role="admin")[1]}
    with running_api(load_settings(data_dir=data_dir, api_keys_file=keys_file)) as url:
        yield url, tokens


def client(url: str, token: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=token, max_retries=0, timeout=120)


def test_models_lists_the_one_model(keyed_api: tuple[str, dict[str, str]]) -> None:
    url, tokens = keyed_api
    assert [model.id for model in client(url, tokens["reader"]).models.list()] == [MODEL_ID]


def test_a_cited_answer(keyed_api: tuple[str, dict[str, str]]) -> None:
    url, tokens = keyed_api
    completion = client(url, tokens["reader"]).chat.completions.create(
        model=MODEL_ID, messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": SEV1}])
    choice = completion.choices[0]
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    answer, sources = choice.message.content.split("\n\nSources:\n")
    assert "incident commander" in answer and "[1]" in answer
    assert sources.splitlines()[0].startswith("[1] default/ops/incident-runbook.md, line ")
    citations = choice.message.citations  # the extension field
    first = citations[0]
    assert (first["kind"], first["number"], first["path"]) == ("passage", 1, "default/ops/incident-runbook.md")
    assert "incident commander" in first["text"] and first["score"] > 0 and "SEV1" in first["heading"]
    assert completion.object == "chat.completion" and completion.model == MODEL_ID and completion.id
    assert completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens


def test_a_streamed_answer(keyed_api: tuple[str, dict[str, str]]) -> None:
    url, tokens = keyed_api
    stream = client(url, tokens["reader"]).chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": SEV1}], stream=True,
        stream_options={"include_usage": True})
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert "incident commander" in text and "\n\nSources:\n[1] default/ops/incident-runbook.md" in text
    with_citations = [chunk for chunk in chunks if chunk.choices and getattr(chunk.choices[0].delta, "citations", None)]
    assert len(with_citations) == 1 and with_citations[0].choices[0].delta.citations[0]["number"] == 1
    finishes = [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices]
    assert finishes[-1] == "stop" and finishes.count("stop") == 1
    assert chunks[-1].choices == [] and chunks[-1].usage is not None  # the usage chunk comes last
    assert len({chunk.id for chunk in chunks}) == 1
    # the wire format is OpenAI's: data lines, then [DONE]
    raw = httpx.post(f"{url}/v1/chat/completions", headers={"Authorization": f"Bearer {tokens['reader']}"},
                     json={"model": MODEL_ID, "stream": True, "messages": [{"role": "user", "content": SEV1}]},
                     timeout=120)
    assert raw.headers["content-type"].startswith("text/event-stream")
    assert raw.text.startswith("data: {") and raw.text.endswith("data: [DONE]\n\n")


def test_the_conversation_is_the_clients(keyed_api: tuple[str, dict[str, str]]) -> None:
    """A follow-up is read in the conversation the client sends (the earlier turn's answer, its sources list
    included); the server keeps nothing."""
    url, tokens = keyed_api
    openai_client = client(url, tokens["reader"])
    first = openai_client.chat.completions.create(
        model=MODEL_ID, messages=[{"role": "user", "content": "How many documents are there per doc_type?"}])
    follow_up = openai_client.chat.completions.create(model=MODEL_ID, messages=[
        {"role": "user", "content": "How many documents are there per doc_type?"},
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": [{"type": "text", "text": "and which of those are md?"}]}])
    assert follow_up.choices[0].message.citations
    assert follow_up.choices[0].message.content != first.choices[0].message.content


def test_keys_and_scopes_apply(keyed_api: tuple[str, dict[str, str]]) -> None:
    url, tokens = keyed_api
    messages = [{"role": "user", "content": SEV1}]
    with pytest.raises(openai.AuthenticationError) as refused:
        client(url, "rag_not-a-key").chat.completions.create(model=MODEL_ID, messages=messages)
    assert refused.value.status_code == 401
    assert refused.value.body["type"] == "authentication_error" and refused.value.code == "invalid_api_key"
    keyless = httpx.post(f"{url}/v1/chat/completions", json={"model": MODEL_ID, "messages": messages})
    assert keyless.status_code == 401 and keyless.json()["error"]["code"] == "not_authenticated"
    with pytest.raises(openai.AuthenticationError):
        client(url, "rag_not-a-key").models.list()
    # a key's scope filters what the answer may cite: this one sees no document
    scoped = client(url, tokens["elsewhere"]).chat.completions.create(model=MODEL_ID, messages=messages)
    assert scoped.choices[0].message.citations == []
    assert "incident commander" not in scoped.choices[0].message.content
    assert client(url, tokens["admin"]).chat.completions.create(model=MODEL_ID, messages=messages).choices[
        0].message.citations


@pytest.mark.parametrize(("body", "status", "code"), [
    ({"model": MODEL_ID, "messages": []}, 400, "invalid_messages"),
    ({"model": MODEL_ID}, 400, "invalid_messages"),
    ({"messages": [{"role": "user", "content": SEV1}]}, 400, "invalid_model"),
    ({"model": MODEL_ID, "messages": [{"role": "user", "content": SEV1}, {"role": "assistant", "content": "x"}]},
     400, "invalid_messages"),
    ({"model": MODEL_ID, "messages": [{"role": "user", "content": "   "}]}, 400, "empty_message"),
    ({"model": MODEL_ID, "messages": [{"role": "wizard", "content": SEV1}]}, 400, "invalid_messages"),
    ({"model": "gpt-4o", "messages": [{"role": "user", "content": SEV1}]}, 404, "model_not_found"),
])
def test_invalid_requests_get_openai_errors(keyed_api: tuple[str, dict[str, str]], body: dict, status: int,
                                            code: str) -> None:
    url, tokens = keyed_api
    response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60,
                          headers={"Authorization": f"Bearer {tokens['reader']}"})
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["code"] == code
    assert error["type"] == ("not_found_error" if status == 404 else "invalid_request_error")
    assert error["param"] == ("model" if "model" in code else "messages")  # the field the error is about
    if {"model", "messages"} <= set(body):  # (the client itself refuses a call without them)
        with pytest.raises(openai.APIStatusError) as raised:  # the client reads the error as OpenAI's
            client(url, tokens["reader"]).chat.completions.create(**body)
        assert raised.value.status_code == status and raised.value.code == code


def test_screening_refusals_get_openai_errors(keyed_api: tuple[str, dict[str, str]]) -> None:
    url, tokens = keyed_api
    response = httpx.post(f"{url}/v1/chat/completions", content=b"{}", timeout=60,
                          headers={"Authorization": f"Bearer {tokens['reader']}", "Content-Type": "text/plain"})
    assert response.status_code == 415
    assert response.json() == {"error": {"message": "a POST body must be application/json: text/plain",
                                         "type": "invalid_request_error", "param": None,
                                         "code": "unsupported_media_type"}}
    other = httpx.post(f"{url}/search", json={}, headers={"Authorization": f"Bearer {tokens['reader']}"})
    assert set(other.json()["error"]) == {"code", "message"}  # the rest of the API keeps its own error shape
