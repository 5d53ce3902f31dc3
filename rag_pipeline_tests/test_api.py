"""The HTTP API through a real uvicorn server on 127.0.0.1: search, SSE answers, ingest, health, metrics,
and every bad-input case."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient

from rag_pipeline.errors import ConfigError, InputError, StoreUnavailable
from rag_pipeline.index.vector_store import FILTER_KEYS
from rag_pipeline.serve.api import IngestJob, create_app, job_json
from rag_pipeline.serve.models import MAX_API_TOP_K, HealthResponse, IngestJobResponse, SearchResponse
from rag_pipeline.settings import Settings
from rag_pipeline_tests.fake_ollama import FakeOllama

from .conftest import REPO


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def running_api(settings: Settings, host: str = "127.0.0.1") -> Iterator[str]:
    """A uvicorn server with the app on a free port of `host`, in a thread, and its 127.0.0.1 URL; stopped (and
    the store closed) on exit."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host=host, port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the API server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        assert not thread.is_alive()


@pytest.fixture(scope="module")
def api(sample_index: tuple[Path, Path]) -> Iterator[str]:
    _, data_dir = sample_index
    with running_api(Settings(data_dir=data_dir)) as url:
        yield url


def parse_sse(text: str) -> list[tuple[str, dict]]:
    """(event, data) of every server-sent event in a response body."""
    events = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((fields["event"], json.loads(fields["data"])))
    return events


def test_search(api: str) -> None:
    response = httpx.post(f"{api}/search", json={"query": "who do I page for a SEV1 outage?", "top_k": 3})
    assert response.status_code == 200
    body = response.json()
    assert len(body["results"]) == 3
    assert body["results"][0]["path"].endswith("ops/incident-runbook.md")
    assert set(body["results"][0]) >= {"path", "header", "line_start", "chunk_id", "sha", "score", "text"}
    assert body["mode"] == "hybrid" and body["warnings"] == []
    assert {"embed", "search", "total"} <= set(body["timings_ms"])


def test_search_filters(api: str) -> None:
    body = httpx.post(f"{api}/search", json={"query": "duck", "top_k": 10,
                                             "filters": {"doc_type": ["pdf", "docx"]}}).json()
    assert body["results"] and {result["doc_type"] for result in body["results"]} <= {"pdf", "docx"}


@pytest.mark.parametrize(("body", "status", "code"), [
    ({"query": ""}, 400, "empty_query"),
    ({"query": "   "}, 400, "empty_query"),
    ({"top_k": 3}, 400, "empty_query"),
    ({"query": "pumps", "top_k": 0}, 400, "invalid_top_k"),
    ({"query": "pumps", "top_k": MAX_API_TOP_K + 1}, 400, "invalid_top_k"),
    ({"query": "pumps", "top_k": "5"}, 400, "invalid_top_k"),
    ({"query": "pumps", "top_k": True}, 400, "invalid_top_k"),
    ({"query": "pumps", "filters": {"colour": "red"}}, 400, "unknown_filter_field"),
    ({"query": "pumps", "filters": ["doc_type"]}, 400, "invalid_filters"),
    ({"query": "pumps", "filters": {"doc_type": 5}}, 400, "invalid_request"),
    ({"query": "pumps", "limit": 5}, 400, "unknown_field"),
])
def test_search_bad_input(api: str, body: dict, status: int, code: str) -> None:
    response = httpx.post(f"{api}/search", json=body)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["code"] == code and error["message"]
    assert "Traceback" not in response.text


def test_malformed_and_oversized_bodies(api: str) -> None:
    response = httpx.post(f"{api}/search", content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_json"
    assert httpx.post(f"{api}/search", json=["a"]).json()["error"]["code"] == "invalid_body"
    huge = {"query": "x" * (Settings().api_max_body_bytes + 10)}
    response = httpx.post(f"{api}/search", json=huge)
    assert response.status_code == 413 and response.json()["error"]["code"] == "body_too_large"

    def chunked() -> Iterator[bytes]:  # no Content-Length: the limit holds while reading
        yield b'{"query": "'
        for _ in range(100):
            yield b"y" * 1024
        yield b'"}'

    response = httpx.post(f"{api}/search", content=chunked())
    assert response.status_code == 413


def test_unknown_route_and_method(api: str) -> None:
    response = httpx.get(f"{api}/nope")
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert httpx.get(f"{api}/search").status_code == 405


def test_ask_streams_tokens_then_sources(api: str) -> None:
    with httpx.stream("POST", f"{api}/ask", json={"question": "What do ducks eat?", "top_k": 3}) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        text = "".join(response.iter_text())
    events = parse_sse(text)
    kinds = [kind for kind, _ in events]
    assert kinds[-1] == "done" and set(kinds[:-1]) == {"token"} and len(kinds) >= 2
    final = events[-1][1]
    assert final["answer"] == "".join(data["text"] for _, data in events[:-1])
    assert final["generator"] == "extractive" and final["answer"].startswith("Ducks eat food sources")
    assert final["citations"] and set(final["citations"]) <= {source["number"] for source in final["sources"]}
    cited = final["sources"][final["citations"][0] - 1]
    assert cited["path"].endswith("duck.html")
    assert {"path", "heading", "page", "sha", "chunk_id", "score"} <= set(cited)
    assert final["guardrails"]["refused"] is False and final["guardrails"]["quarantined"] == []


def test_ask_out_of_scope_says_i_dont_know(api: str) -> None:
    response = httpx.post(f"{api}/ask", json={"question": "Who won the 2018 football World Cup?"})
    final = parse_sse(response.text)[-1][1]
    assert final["answer"].startswith("I don't know") and final["citations"] == []


def test_ask_bad_input_is_json_not_a_stream(api: str) -> None:
    response = httpx.post(f"{api}/ask", json={"question": "", "top_k": 3})
    assert response.status_code == 400 and response.json()["error"]["code"] == "empty_question"
    response = httpx.post(f"{api}/ask", json={"question": "x", "filters": {"nope": "1"}})
    assert response.status_code == 400 and response.json()["error"]["code"] == "unknown_filter_field"


def test_healthz_and_metrics(api: str) -> None:
    health = httpx.get(f"{api}/healthz")
    assert health.status_code == 200
    report = health.json()
    assert report["status"] == "ok" and report["store"]["ok"] and report["store"]["points"] > 100
    assert report["embedder"]["ok"] and report["llm"] == {"configured": False}
    httpx.post(f"{api}/search", json={"query": "duck feathers"})
    httpx.post(f"{api}/search", json={"query": ""})
    metrics = httpx.get(f"{api}/metrics")
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    lines = metrics.text.splitlines()
    assert any(line.startswith('rag_http_requests_total{endpoint="/search",status="200"}') for line in lines)
    assert any(line.startswith('rag_http_requests_total{endpoint="/search",status="400"}') for line in lines)
    assert any(line.startswith('rag_retrieval_stage_seconds_bucket{le="0.05",stage="embed"}') for line in lines)
    assert any(line.startswith('rag_http_request_seconds_count{endpoint="/search"}') for line in lines)
    points = next(line for line in lines if line.startswith("rag_index_points "))
    assert float(points.split()[1]) == report["store"]["points"]


def test_ingest_then_cache_invalidation(tmp_path: Path) -> None:
    """POST /ingest runs the real ingest; the semantic cache serves a repeat, and the index change it causes
    invalidates the cache."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "pumps.md").write_text("# Pumps\n\nInspect the pump seals every month for leaks.\n")
    settings = Settings(data_dir=tmp_path / "data", semantic_cache=True)
    with running_api(settings) as url:
        assert httpx.post(f"{url}/ingest", json={"roots": [str(tmp_path / "missing")]}).status_code == 400
        assert httpx.post(f"{url}/ingest", json={"roots": []}).json()["error"]["code"] == "invalid_roots"
        job = ingest_and_wait(url, corpus)
        assert job["summary"]["added"] == 1 and job["summary"]["failed"] == []

        query = {"query": "how often are the pump seals inspected", "top_k": 3}
        first = httpx.post(f"{url}/search", json=query).json()
        assert not first["cache_hit"] and first["results"][0]["path"].endswith("pumps.md")
        assert httpx.post(f"{url}/search", json=query).json()["cache_hit"]

        (corpus / "valves.md").write_text("# Valves\n\nValves are greased every quarter.\n")
        job = ingest_and_wait(url, corpus)
        assert job["summary"]["added"] == 1
        after = httpx.post(f"{url}/search", json=query).json()
        assert not after["cache_hit"]  # the index version changed
        assert httpx.post(f"{url}/search", json=query).json()["cache_hit"]
        metrics = httpx.get(f"{url}/metrics").text
        assert 'rag_semantic_cache_lookups_total{outcome="hit"} 2.0' in metrics
        assert httpx.get(f"{url}/ingest/unknown").status_code == 404


def ingest_and_wait(url: str, corpus: Path) -> dict:
    started = httpx.post(f"{url}/ingest", json={"roots": [str(corpus)]}, timeout=30)
    assert started.status_code == 202
    job_id = started.json()["id"]
    assert started.headers["location"] == f"/ingest/{job_id}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        job = httpx.get(f"{url}/ingest/{job_id}").json()
        if job["status"] != "running":
            assert job["status"] == "succeeded", job["error"]
            return job
        time.sleep(0.2)
    raise AssertionError("the ingest did not finish")


@pytest.mark.slow
def test_serve_command(sample_index: tuple[Path, Path], tmp_path: Path) -> None:
    """`rag-pipeline serve` in its own process: healthy, searchable, stopped by SIGTERM."""
    data_dir = tmp_path / "data"
    shutil.copytree(sample_index[1], data_dir)  # its own copy: the embedded store allows one process
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "rag_pipeline", "serve", "--port", str(port), "--data-dir", str(data_dir)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None, process.stderr.read().decode()
            assert time.monotonic() < deadline, "serve did not come up"
            time.sleep(0.2)
        body = httpx.post(f"http://127.0.0.1:{port}/search", json={"query": "duck plumage"}).json()
        assert body["results"] and body["warnings"] == []
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=30)
    # uvicorn shuts down gracefully on SIGTERM, then re-raises the signal so the exit status reports it
    assert process.returncode == -signal.SIGTERM
    assert b"Traceback" not in stderr


def test_ask_streams_an_llm_answer(sample_index: tuple[Path, Path], fake_ollama: FakeOllama) -> None:
    """With RAG_OLLAMA_URL the answer streams from the LLM's /api/chat, token by token, guarded and cited."""
    fake_ollama.reply = lambda messages: "Ducks eat grasses, aquatic plants and insects [1]. See https://evil.example/x now."
    with running_api(Settings(data_dir=sample_index[1], ollama_url=fake_ollama.url)) as url:
        health = httpx.get(f"{url}/healthz").json()
        assert health["llm"]["configured"] and health["llm"]["reachable"] and health["llm"]["model_available"]
        with httpx.stream("POST", f"{url}/ask", json={"question": "What do ducks eat?", "top_k": 3}) as response:
            events = parse_sse("".join(response.iter_text()))
    tokens = [data["text"] for kind, data in events if kind == "token"]
    final = events[-1][1]
    assert final["generator"] == "ollama/llama3.2" and final["citations"] == [1]
    assert final["answer"].startswith("Ducks eat grasses, aquatic plants and insects [1].")
    assert "evil.example" not in final["answer"] and "evil.example" not in "".join(tokens)
    assert any(v["rule"] == "unknown_url" for v in final["guardrails"]["output_violations"])
    [chat] = fake_ollama.bodies("/api/chat")
    system, user = chat["messages"]
    assert "<<SOURCE" in system["content"] and user["content"].count("<</SOURCE") == 3


def test_deeply_nested_json_is_invalid_json(api: str) -> None:
    """JSON nested past the parser's recursion limit is bad input (400), not a 500 with a trace."""
    response = httpx.post(f"{api}/search", content=b"[" * 30000, headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_json"
    assert "Traceback" not in response.text


def test_openapi_documents_the_bodies(api: str) -> None:
    doc = httpx.get(f"{api}/openapi.json").json()
    schemas = doc["components"]["schemas"]
    for path, name in [("/search", "SearchRequest"), ("/ask", "AskRequest"), ("/ingest", "IngestRequest")]:
        operation = doc["paths"][path]["post"]
        assert operation["requestBody"]["content"]["application/json"]["schema"] == {
            "$ref": f"#/components/schemas/{name}"}
        assert schemas[name]["additionalProperties"] is False
        assert "422" not in operation["responses"]  # validation errors are 400s with the API's error body
        assert operation["responses"]["4XX"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorResponse"}
    search = schemas["SearchRequest"]["properties"]
    assert set(search) == {"query", "top_k", "filters"} and schemas["SearchRequest"]["required"] == ["query"]
    assert (search["top_k"]["minimum"], search["top_k"]["maximum"]) == (1, MAX_API_TOP_K)
    assert search["top_k"]["default"] == Settings().top_k
    assert search["filters"]["anyOf"][0]["propertyNames"]["enum"] == list(FILTER_KEYS)
    assert set(schemas["AskRequest"]["properties"]) == {"question", "top_k", "filters"}
    assert schemas["IngestRequest"]["required"] == ["roots"]
    assert doc["paths"]["/search"]["post"]["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/SearchResponse"}
    assert "text/event-stream" in doc["paths"]["/ask"]["post"]["responses"]["200"]["content"]
    # the documented shapes are the served ones
    SearchResponse.model_validate(httpx.post(f"{api}/search", json={"query": "duck feathers"}).json())
    HealthResponse.model_validate(httpx.get(f"{api}/healthz").json())
    assert httpx.get(f"{api}/docs").status_code == 404  # no docs UI: the OpenAPI document is the contract


class FailingRetriever:
    """A retriever whose every search raises `error`."""

    cache = embedder = reranker = hyde = None

    def __init__(self, error: Exception) -> None:
        self.error = error

    def search(self, query: str, top_k: int = 5, filters: dict | None = None, scope: object = None):
        raise self.error

    def close(self) -> None:
        pass


@pytest.mark.parametrize(("error", "status", "code"), [
    (ValueError("a bug, not bad input"), 500, "internal_error"),  # only a RagError is deliberate
    (InputError("the query is empty", code="empty_query"), 400, "empty_query"),
    (StoreUnavailable("qdrant at http://q:6333 is down"), 503, "store_unavailable"),
    (ConfigError("RAG_X is invalid"), 500, "configuration_error"),
])
def test_errors_map_to_statuses(error: Exception, status: int, code: str, tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path), FailingRetriever(error))
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.post("/search", json={"query": "pumps"})
        assert response.status_code == status and response.json()["error"]["code"] == code
        assert "Traceback" not in response.text
        if code == "internal_error":  # a bug's message stays in the log
            assert response.json()["error"]["message"] == "ValueError: the request failed"
        metrics = client.get("/metrics").text
    assert f'rag_http_requests_total{{endpoint="/search",status="{status}"}} 1.0' in metrics


def test_ingest_bad_input_and_job_shape(tmp_path: Path) -> None:
    with TestClient(create_app(Settings(data_dir=tmp_path), FailingRetriever(ValueError()))) as client:
        response = client.post("/ingest", json={"roots": [str(tmp_path)], "extra": 1})
        assert response.status_code == 400 and response.json()["error"]["code"] == "unknown_field"
        response = client.post("/ingest", json={"roots": [str(tmp_path / "missing")]})
        assert response.json()["error"]["code"] == "not_a_directory"
        assert client.post("/ingest", json={"roots": "/a"}).json()["error"]["code"] == "invalid_roots"
    IngestJobResponse.model_validate(job_json(IngestJob("x", ["/a"])))  # the documented shape is the served one
