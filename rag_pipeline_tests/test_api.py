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
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn
from fastapi.testclient import TestClient

from rag_pipeline.components import load_settings, open_retriever
from rag_pipeline.errors import ConfigError, InputError, StoreLocked, StoreUnavailable
from rag_pipeline.index.vector_store import FILTER_KEYS
from rag_pipeline.retrieve.retriever import Retriever
from rag_pipeline.serve.app import create_app
from rag_pipeline.serve.cli import exit_code
from rag_pipeline.serve.ingest_jobs import IngestJob
from rag_pipeline.serve.middleware.json_body import JsonNesting
from rag_pipeline.serve.models import MAX_API_TOP_K, HealthResponse, IngestJobResponse, SearchResponse
from rag_pipeline.settings import Settings
from rag_pipeline.structured.operations import NAMES
from rag_pipeline_tests.fake_ollama import FakeOllama

from .conftest import REPO

LOCAL = "http://127.0.0.1:8000"  # TestClient's base URL: an allowed host (its default, testserver, is not)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def running_api(settings: Settings, retriever: Retriever | None = None, host: str = "127.0.0.1",
                keyless_loopback: bool = True) -> Iterator[str]:
    """A uvicorn server with the app (over `retriever`, else the configured one) on a free port of `host`, in a
    thread, and its 127.0.0.1 URL; stopped (and the store it opened closed) on exit. `keyless_loopback` is the
    choice `serve --keyless-loopback` makes (it matters only while the server has no key)."""
    port = free_port()
    app = create_app(settings.model_copy(update={"api_keyless_loopback": keyless_loopback}), retriever)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
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
    with running_api(load_settings(data_dir=data_dir)) as url:
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


CONCURRENT_QUERIES = [
    "If a setting is in nimbus.yaml and also set as an environment variable, which value does Nimbus use?",
    "How large are chunks by default and how much do neighbouring chunks overlap?",
    "What is the default rrf_k? What happens to the ranking if I lower it?",
    "Is it OK to keep the Nimbus data directory on a network file system?",
    "What CPU and memory do I need to run Nimbus on a corpus of about 50k documents?",
    "On Fedora, SELinux stops the service from binding its port. Which command do I run to allow it?",
    "How many chunks per second can I expect when embedding on an M2 Mac?",
    "Do I need a GPU to run the embedding model?",
    "Can Nimbus index PowerPoint decks and web pages, or only text files?",
    "What per-document information does the DuckDB sidecar keep?",
    "who do I page for a SEV1 outage?",
    "duck",
]


def test_concurrent_searches_match_sequential_ones(sample_index: tuple[Path, Path]) -> None:
    """Searches arriving together (their query embeddings batched) get the results each gets alone."""
    _, data_dir = sample_index

    def search(url: str, query: str) -> list[tuple[str, float]]:
        response = httpx.post(f"{url}/search", json={"query": query, "top_k": 5}, timeout=60)
        assert response.status_code == 200, response.text
        return [(result["chunk_id"], result["score"]) for result in response.json()["results"]]

    with running_api(load_settings(data_dir=data_dir, query_batch_window_ms=20)) as url:
        sequential = [search(url, query) for query in CONCURRENT_QUERIES]
        assert all(sequential)
        with ThreadPoolExecutor(len(CONCURRENT_QUERIES)) as pool:
            for _ in range(3):
                assert list(pool.map(lambda query: search(url, query), CONCURRENT_QUERIES)) == sequential


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

    response = httpx.post(f"{api}/search", content=chunked(), headers={"content-type": "application/json"})
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
    settings = load_settings(data_dir=tmp_path / "data", semantic_cache=True, roots=[corpus])
    with running_api(settings) as url:
        job = ingest_and_wait(url)
        assert job["summary"]["added"] == 1 and job["summary"]["failed"] == []

        query = {"query": "how often are the pump seals inspected", "top_k": 3}
        first = httpx.post(f"{url}/search", json=query).json()
        assert not first["cache_hit"] and first["results"][0]["path"].endswith("pumps.md")
        assert httpx.post(f"{url}/search", json=query).json()["cache_hit"]

        (corpus / "valves.md").write_text("# Valves\n\nValves are greased every quarter.\n")
        job = ingest_and_wait(url, {})
        assert job["summary"]["added"] == 1
        after = httpx.post(f"{url}/search", json=query).json()
        assert not after["cache_hit"]  # the index version changed
        assert httpx.post(f"{url}/search", json=query).json()["cache_hit"]
        metrics = httpx.get(f"{url}/metrics").text
        assert 'rag_semantic_cache_lookups_total{outcome="hit"} 2.0' in metrics
        assert httpx.get(f"{url}/ingest/unknown").status_code == 404


def ingest_and_wait(url: str, body: dict | None = None) -> dict:
    """POST /ingest (no body, or `body`) and poll the job until it finishes."""
    started = httpx.post(f"{url}/ingest", json=body, timeout=30)
    assert started.status_code == 202
    job_id = started.json()["id"]
    assert started.headers["location"] == f"/ingest/{job_id}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        job = httpx.get(f"{url}/ingest/{job_id}", timeout=30).json()
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
    log = tmp_path / "serve.log"
    with serve_process(data_dir, log) as (url, process):
        assert httpx.get(f"{url}/healthz").status_code == 200
        body = httpx.post(f"{url}/search", json={"query": "duck plumage"}).json()
        assert body["results"] and body["warnings"] == []
    # uvicorn shuts down gracefully on SIGTERM, then re-raises the signal so the exit status reports it; a SIGTERM
    # that lands while uvicorn is still starting or already stopping can end it with 0 instead: both are a clean stop
    assert process.returncode in (-signal.SIGTERM, 0)
    assert "Traceback" not in log.read_text()


@contextmanager
def serve_process(data_dir: Path, log: Path, *options: str, **env: str) -> Iterator[tuple[str, subprocess.Popen]]:
    """(URL, process) of `rag-pipeline serve --keyless-loopback` (and `options`) in its own process on a free
    127.0.0.1 port, once it answers HTTP (whatever the status), with `env` added and its output in `log`; stopped by
    SIGTERM on exit."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "rag_pipeline", "serve", "--port", str(port), "--data-dir", str(data_dir),
             "--keyless-loopback", *options],
            cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1", **env}, stdout=output, stderr=output,
        )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx.get(f"{url}/healthz")
                break
            except httpx.TransportError:
                pass
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "serve did not come up"
            time.sleep(0.2)
        yield url, process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)


def test_ask_streams_an_llm_answer(sample_index: tuple[Path, Path], fake_ollama: FakeOllama) -> None:
    """With RAG_OLLAMA_URL the answer streams from the LLM's /api/chat, token by token, guarded and cited."""
    fake_ollama.reply = lambda messages: "Ducks eat grasses, aquatic plants and insects [1]. See https://evil.example/x now."
    with running_api(load_settings(data_dir=sample_index[1], ollama_url=fake_ollama.url)) as url:
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
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        if path == "/ingest":  # the body may be left out (or be null)
            assert body["anyOf"] == [{"$ref": f"#/components/schemas/{name}"}, {"type": "null"}]
            assert not operation["requestBody"].get("required")
        else:
            assert body == {"$ref": f"#/components/schemas/{name}"}
        assert schemas[name]["additionalProperties"] is False
        assert "422" not in operation["responses"]  # validation errors are 400s with the API's error body
        assert operation["responses"]["4XX"]["content"]["application/json"]["schema"] == {
            "$ref": "#/components/schemas/ErrorResponse"}
    search = schemas["SearchRequest"]["properties"]
    assert set(search) == {"query", "top_k", "filters"} and schemas["SearchRequest"]["required"] == ["query"]
    assert (search["top_k"]["minimum"], search["top_k"]["maximum"]) == (1, MAX_API_TOP_K)
    assert search["top_k"]["default"] == Settings().top_k
    # keys: the built-in filter fields or a declared filterable document field (the retriever checks which)
    assert list(search["filters"]["anyOf"][0]["patternProperties"]) == ["^[a-z][a-z0-9_]{0,63}$"]
    assert all(key in search["filters"]["description"] for key in FILTER_KEYS)
    query = schemas["QueryRequest"]
    assert query["additionalProperties"] is False and query["required"] == ["op"]
    assert query["properties"]["op"]["enum"] == list(NAMES)  # structured/operations.py, the one definition
    assert set(schemas["AskRequest"]["properties"]) == {"question", "top_k", "filters"}
    assert schemas["IngestRequest"]["properties"] == {}  # no paths from a client
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
    app = create_app(load_settings(data_dir=tmp_path, api_keyless_loopback=True), FailingRetriever(error))
    with TestClient(app, base_url=LOCAL, raise_server_exceptions=False) as client:
        response = client.post("/search", json={"query": "pumps"})
        assert response.status_code == status and response.json()["error"]["code"] == code
        assert "Traceback" not in response.text
        if code == "internal_error":  # a bug's message stays in the log
            assert response.json()["error"]["message"] == "ValueError: the request failed"
        metrics = client.get("/metrics").text
    assert f'rag_http_requests_total{{endpoint="/search",status="{status}"}} 1.0' in metrics


def test_ingest_takes_no_paths_and_needs_configured_roots(tmp_path: Path) -> None:
    """POST /ingest syncs the server's RAG_ROOTS: a body naming paths is refused, any other field or body shape is
    bad input, and a server without (existing) roots answers 409 before starting anything."""
    keyless = load_settings(data_dir=tmp_path, api_keyless_loopback=True)
    with TestClient(create_app(keyless, FailingRetriever(ValueError())), base_url=LOCAL) as client:
        for body in ({"roots": [str(tmp_path)]}, {"roots": [str(tmp_path)], "extra": 1}, {"roots": None}):
            response = client.post("/ingest", json=body)
            assert response.status_code == 400 and response.json()["error"]["code"] == "paths_not_accepted"
            assert "RAG_ROOTS" in response.json()["error"]["message"]
        response = client.post("/ingest", json={"path": "/etc"})
        assert response.status_code == 400 and response.json()["error"]["code"] == "unknown_field"
        for body in (["/etc"], "/etc", 5):
            response = client.post("/ingest", json=body)
            assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_body"
        for body in (None, {}):  # no body at all, or an empty object
            response = client.post("/ingest", json=body)
            assert response.status_code == 409 and response.json()["error"]["code"] == "no_roots_configured"
            assert "RAG_ROOTS" in response.json()["error"]["message"]
    missing = load_settings(data_dir=tmp_path, roots=[tmp_path / "gone"], api_keyless_loopback=True)
    with TestClient(create_app(missing, FailingRetriever(ValueError())), base_url=LOCAL) as client:
        response = client.post("/ingest")
        assert response.status_code == 409 and response.json()["error"]["code"] == "roots_missing"
        assert "gone" in response.json()["error"]["message"] and str(tmp_path) not in response.text
    IngestJobResponse.model_validate(IngestJob("x", ["/a"]).to_json())  # the documented shape is the served one


# --- request screening: Host, Origin, media type, JSON nesting (serve/middleware/) -----------------------------------

def test_post_bodies_must_be_json(api: str) -> None:
    query = json.dumps({"query": "duck feathers"}).encode()
    for headers in ({"content-type": "text/plain"}, {"content-type": "application/x-www-form-urlencoded"},
                    {"content-type": "multipart/form-data; boundary=x"}, {}):
        response = httpx.post(f"{api}/search", content=query, headers=headers)
        assert response.status_code == 415, headers
        assert response.json()["error"]["code"] == "unsupported_media_type"
    response = httpx.post(f"{api}/search", content=query, headers={"content-type": "Application/JSON; charset=utf-8"})
    assert response.status_code == 200 and response.json()["results"]
    response = httpx.post(f"{api}/search")  # no body at all: not a media type problem, a missing body
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid_body"


def test_host_header_must_be_an_allowed_host(api: str) -> None:
    port = api.rsplit(":", 1)[1]
    for host in (f"localhost:{port}", "LOCALHOST", f"127.0.0.1:{port}", "[::1]", f"[::1]:{port}"):
        response = httpx.get(f"{api}/healthz", headers={"host": host})
        assert response.status_code == 200, host
    for host in ("evil.example", f"evil.example:{port}", "localhost.evil.example", "127.0.0.1.nip.io",
                 "evil.example@localhost", "[::2]", "", "localhost:x"):
        response = httpx.post(f"{api}/search", json={"query": "duck"}, headers={"host": host})
        assert response.status_code == 400, host
        assert response.json()["error"]["code"] == "invalid_host"


def test_cross_origin_requests_are_refused(api: str) -> None:
    for origin in ("http://evil.example", "null", api.replace("127.0.0.1", "localhost"), api + "1"):
        response = httpx.post(f"{api}/search", json={"query": "duck"}, headers={"origin": origin})
        assert response.status_code == 403 and response.json()["error"]["code"] == "cross_origin", origin
        assert "access-control-allow-origin" not in response.headers
    preflight = httpx.options(f"{api}/search", headers={"origin": "http://evil.example",
                                                        "access-control-request-method": "POST"})
    assert preflight.status_code == 403 and "access-control-allow-origin" not in preflight.headers
    same_origin = httpx.post(f"{api}/search", json={"query": "duck"}, headers={"origin": api})
    assert same_origin.status_code == 200


def test_configured_hosts_and_cors_origins(sample_index: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAG_API_ALLOWED_HOSTS", "rag.internal, 10.0.0.7")
    monkeypatch.setenv("RAG_API_CORS_ORIGINS", "https://app.example,http://localhost:5173")
    settings = load_settings(data_dir=sample_index[1])
    assert settings.api_allowed_hosts == ["rag.internal", "10.0.0.7"]
    with running_api(settings) as url:
        for host in ("rag.internal:8443", "10.0.0.7", "localhost"):
            assert httpx.get(f"{url}/healthz", headers={"host": host}).status_code == 200
        assert httpx.get(f"{url}/healthz", headers={"host": "other.internal"}).status_code == 400
        preflight = httpx.options(f"{url}/search", headers={
            "origin": "https://app.example", "access-control-request-method": "POST",
            "access-control-request-headers": "content-type"})
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "https://app.example"
        assert "POST" in preflight.headers["access-control-allow-methods"]
        response = httpx.post(f"{url}/search", json={"query": "duck"}, headers={"origin": "http://localhost:5173"})
        assert response.status_code == 200 and response.json()["results"]
        assert response.headers["access-control-allow-origin"] == "http://localhost:5173"
        refused = httpx.options(f"{url}/search", headers={"origin": "https://evil.example",
                                                          "access-control-request-method": "POST"})
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "cross_origin"


@pytest.mark.parametrize(("body", "code"), [
    (b'{"query": "x", "filters": {"doc_type": ' + b"[" * 30 + b"]" * 30 + b"}}", "invalid_request"),  # 32 deep: ok
    (b'{"query": "x", "filters": {"doc_type": ' + b"[" * 31 + b"]" * 31 + b"}}", "invalid_json"),  # 33 deep
    (b"[" * 33 + b"]" * 33, "invalid_json"),
    (b"{" * 40, "invalid_json"),
    (b'{"a": ' * 50_000, "invalid_json"),  # over the body limit too: either refusal is a 4xx
])
def test_json_nesting_limit(api: str, body: bytes, code: str) -> None:
    response = httpx.post(f"{api}/search", content=body, headers={"content-type": "application/json"})
    assert 400 <= response.status_code < 500 and "Traceback" not in response.text
    if len(body) < Settings().api_max_body_bytes:
        assert response.status_code == 400 and response.json()["error"]["code"] == code


def test_brackets_inside_strings_do_not_count(api: str) -> None:
    query = '[{"\\"[{' * 40 + " duck feathers"
    response = httpx.post(f"{api}/search", json={"query": query, "top_k": 2})
    assert response.status_code == 200 and response.json()["results"]


def test_json_nesting_across_pieces() -> None:
    """The scan keeps its state between the pieces a body arrives in, escapes included."""
    text = b'{"a": "\\\\", "b": "\\"[[[", "c": [[[1]]]}'
    for cut in range(len(text) + 1):
        nesting = JsonNesting()
        nesting.feed(text[:cut])
        assert nesting.feed(text[cut:]) == 4, cut
    nesting = JsonNesting()
    for piece in (b'["', b"\\", b'"[[[[", 1]'):  # the escaped quote arrives in the piece after its backslash
        deepest = nesting.feed(piece)
    assert deepest == 1


# --- a store that is down: 503s naming the store and the setting, no dead server, recovery without a restart -----

def test_server_store_down_at_startup(tmp_path: Path) -> None:
    """`rag-pipeline serve` with RAG_QDRANT_URL at a closed port (qdrant-client's real connection error): the
    server starts without a traceback, /healthz is 503 naming the store and RAG_QDRANT_URL, requests get 503s."""
    port = free_port()
    log = tmp_path / "serve.log"
    with serve_process(tmp_path / "data", log, "--allow-empty", RAG_QDRANT_URL=f"http://127.0.0.1:{port}") as (url, process):
        health = httpx.get(f"{url}/healthz")
        assert health.status_code == 503
        report = health.json()
        assert report["status"] == "down" and report["store"]["ok"] is False
        assert report["store"]["backend"] == f"http://127.0.0.1:{port}"
        assert f"127.0.0.1:{port}" in report["store"]["error"] and "RAG_QDRANT_URL" in report["store"]["error"]
        assert report["store"]["collection"].startswith("chunks__") and report["embedder"]["ok"]
        HealthResponse.model_validate(report)
        for path, body in (("/search", {"query": "duck"}), ("/ask", {"question": "What do ducks eat?"})):
            response = httpx.post(f"{url}{path}", json=body)
            assert response.status_code == 503 and response.json()["error"]["code"] == "store_unavailable"
            assert "RAG_QDRANT_URL" in response.json()["error"]["message"]
        assert httpx.get(f"{url}/metrics").status_code == 200
        assert process.poll() is None  # still serving
    output = log.read_text()
    assert "Traceback" not in output and 'File "' not in output
    assert "serving without the vector store until it can be opened" in output


def test_server_store_that_goes_down_recovers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An open server store whose server stops answering (its client pointed at a closed port) fails searches
    and /healthz with 503s naming the store and RAG_QDRANT_URL; once the server answers again (the client pointed
    back) the same server serves again, without a restart."""
    from qdrant_client import QdrantClient

    from rag_pipeline.components import generations
    from rag_pipeline.index import lifecycle

    settings = load_settings(data_dir=tmp_path, qdrant_url=":memory:")
    # An ingest's switch makes a generation active and points the server's alias at it; the ":memory:" double keeps
    # no alias from one client to the next, so the alias is the one the switch would have set.
    index = generations(settings)
    generation = index.target()
    monkeypatch.setattr(lifecycle, "point_alias", lambda *args: None)
    index.activate(generation)
    monkeypatch.setattr(lifecycle, "alias_target", lambda *args: generation.collection)
    retriever = open_retriever(settings)
    store = retriever.store
    live, port = store.client, free_port()  # type: ignore[attr-defined]
    try:
        with running_api(settings, retriever) as url:
            assert httpx.post(f"{url}/search", json={"query": "duck"}).status_code == 200
            store.client = QdrantClient(url=f"http://127.0.0.1:{port}", timeout=2)  # type: ignore[attr-defined]
            response = httpx.post(f"{url}/search", json={"query": "duck"})
            assert response.status_code == 503 and response.json()["error"]["code"] == "store_unavailable"
            health = httpx.get(f"{url}/healthz")
            assert health.status_code == 503 and health.json()["status"] == "down"
            assert f"127.0.0.1:{port}" in health.json()["store"]["error"]
            assert "RAG_QDRANT_URL" in health.json()["store"]["error"]
            store.client.close()  # type: ignore[attr-defined]
            store.client = live  # type: ignore[attr-defined]
            assert httpx.post(f"{url}/search", json={"query": "duck"}).status_code == 200
            assert httpx.get(f"{url}/healthz").json()["status"] == "ok"
    finally:
        retriever.close()


@pytest.mark.slow
def test_locked_store_cli_error_and_serve_recovery(sample_index: tuple[Path, Path], tmp_path: Path) -> None:
    """While one `serve` holds the embedded store: a CLI search exits with StoreLocked's exit code and one line
    (with --json, the error object on stdout); a second `serve` starts anyway and answers 503 until the first
    stops, then serves the same index without a restart."""
    data_dir = tmp_path / "data"
    shutil.copytree(sample_index[1], data_dir)
    with serve_process(data_dir, tmp_path / "holder.log") as (holder_url, holder):
        assert httpx.get(f"{holder_url}/healthz").status_code == 200
        command = [sys.executable, "-m", "rag_pipeline", "search", "duck", "--data-dir", str(data_dir)]
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        for extra in ([], ["--json"]):
            done = subprocess.run(command + extra, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
            assert done.returncode == exit_code(StoreLocked("x")) == 1
            [line] = done.stderr.splitlines()
            assert line.startswith("rag-pipeline: the embedded vector store") and f"pid {holder.pid}" in line
            assert "RAG_QDRANT_URL" in line
            if extra:
                assert json.loads(done.stdout)["error"]["code"] == "store_locked"
            else:
                assert done.stdout == ""

        log = tmp_path / "second.log"
        with serve_process(data_dir, log) as (url, _):
            health = httpx.get(f"{url}/healthz")
            assert health.status_code == 503 and f"pid {holder.pid}" in health.json()["store"]["error"]
            response = httpx.post(f"{url}/search", json={"query": "duck plumage"})
            assert response.status_code == 503 and response.json()["error"]["code"] == "store_locked"
            holder.send_signal(signal.SIGTERM)
            holder.wait(timeout=30)
            deadline = time.monotonic() + 30
            while (response := httpx.post(f"{url}/search", json={"query": "duck plumage"})).status_code != 200:
                assert response.status_code == 503 and time.monotonic() < deadline
                time.sleep(0.2)
            assert response.json()["results"] and httpx.get(f"{url}/healthz").json()["status"] == "ok"
    output = log.read_text()
    assert "Traceback" not in output and "serving without the vector store" in output


@pytest.mark.parametrize(("path", "body", "code"), [
    ("/search", b'{"query": "duck \\ud800"}', "empty_query"),
    ("/ask", b'{"question": "\\udfff ducks?"}', "empty_question"),
    ("/search", b'{"query": "duck", "filters": {"path": "\\ud83d"}}', "invalid_request"),
    ("/search", b'{"query": "duck", "filters": {"tags": ["ok", "\\ud800x"]}}', "invalid_request"),
])
def test_lone_surrogates_are_bad_input(api: str, path: str, body: bytes, code: str) -> None:
    """JSON escapes can spell text no UTF-8 holds; it is refused before it reaches the store or the response."""
    response = httpx.post(f"{api}{path}", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400 and response.json()["error"]["code"] == code


@pytest.mark.slow
def test_serve_logs_json_lines_starting_with_where_and_what_it_serves(sample_index: tuple[Path, Path],
                                                                      tmp_path: Path) -> None:
    """Every line `serve` logs is a JSON object; the first says where it listens and which index it serves (data
    dir, active generation, documents); the access log's fields are top-level keys, not a quoted string."""
    from rag_pipeline.index.generations import GenerationRegistry

    data_dir = tmp_path / "data"
    shutil.copytree(sample_index[1], data_dir)
    log = tmp_path / "serve.log"
    with serve_process(data_dir, log) as (url, _):
        assert httpx.post(f"{url}/search", json={"query": "duck plumage"}).status_code == 200
        deadline = time.monotonic() + 30
        while '"endpoint": "/search"' not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    startup = lines[0]
    assert startup["logger"] == "rag_pipeline.startup" and startup["level"] == "INFO"
    assert startup["url"] == f"{url}/" and startup["data_dir"] == str(data_dir.resolve())
    assert startup["generation"] == GenerationRegistry(data_dir).active_id() is not None
    assert startup["documents"] == len(list(sample_index[0].rglob("*.*")))
    assert startup["message"] == (f"serving {data_dir.resolve()} (generation {startup['generation']}, "
                                  f"{startup['documents']} documents) on {url}/")
    [access] = [line for line in lines if line["logger"] == "rag_pipeline.access" and line["endpoint"] == "/search"]
    assert access["status"] == 200 and access["method"] == "POST" and access["level"] == "INFO"


def test_openapi_validates_and_types_every_body_and_event(api: str) -> None:
    """The document passes an OpenAPI validator (every $ref resolves), every 2xx body of every route has a schema,
    /ask's and /chat's text/event-stream are typed by their event schemas, and the served bodies and events fit
    them key for key."""
    from openapi_spec_validator import validate

    from rag_pipeline.serve.models import (
        AskEvent,
        ChatDeleted,
        ChatEvent,
        ChatSessionResponse,
        FieldInfo,
        FieldsResponse,
    )

    doc = httpx.get(f"{api}/openapi.json").json()
    validate(doc)
    untyped = [(method, path, status, media) for path, operations in doc["paths"].items()
               for method, operation in operations.items() for status, response in operation["responses"].items()
               if status.startswith("2") for media, content in response.get("content", {}).items()
               if not content.get("schema")]
    assert untyped == []
    for path, model in (("/ask", "AskEvent"), ("/chat", "ChatEvent")):
        content = doc["paths"][path]["post"]["responses"]["200"]["content"]
        assert content["text/event-stream"]["schema"] == {"$ref": f"#/components/schemas/{model}"}

    def fits(model: type, body: dict) -> None:
        """`body` validates and holds the model's required keys and no undocumented one (an event: its data)."""
        parsed = model.model_validate(body)
        target, data = (parsed.root.data, body["data"]) if hasattr(parsed, "root") else (parsed, body)
        fields = type(target).model_fields
        required = {name for name, field in fields.items() if field.is_required()}
        assert required <= set(data) <= set(fields), (type(target).__name__, sorted(data))

    ask = httpx.post(f"{api}/ask", json={"question": "Who do I page for a SEV1 outage?"}, timeout=120)
    events = parse_sse(ask.text)
    assert {name for name, _ in events} == {"token", "done"}
    for name, data in events:
        fits(AskEvent, {"event": name, "data": data})
    chat = httpx.post(f"{api}/chat", json={"message": "Who do I page for a SEV1 outage?"}, timeout=120)
    events = parse_sse(chat.text)
    assert {"session", "step", "observation", "done"} <= {name for name, _ in events}
    for name, data in events:
        fits(ChatEvent, {"event": name, "data": data})
    session = dict(events)["session"]["session_id"]
    fits(ChatSessionResponse, httpx.get(f"{api}/chat/{session}").json())
    fields = httpx.get(f"{api}/fields").json()
    fits(FieldsResponse, fields)
    for field in fields["fields"]:
        fits(FieldInfo, field)
    fits(ChatDeleted, httpx.request("DELETE", f"{api}/chat/{session}").json())
