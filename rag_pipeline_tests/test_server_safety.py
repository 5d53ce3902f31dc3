"""The HTTP API against careless or hostile callers, through a real uvicorn server: no answer shows a server path, a
tag scope limits the sources' counts, sessions belong to a key (not to its name), a client that hangs up mid-upload
is no server error, a request with several Host headers is refused, no error echoes a long request, and an ingest
started over HTTP runs at a lower CPU priority while the server answers."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from rag_pipeline.components import load_settings
from rag_pipeline.serve.ingest_jobs import INGEST_NICENESS
from rag_pipeline.serve.keys import create_key, revoke_key
from rag_pipeline.settings import Settings
from rag_pipeline_tests.test_api import running_api

from .conftest import DOCUMENTS as DOCUMENTS_DIR

DOCUMENTS = {
    "policy/leave.md": "# Leave policy\n\nEmployees get 25 days of paid annual leave.\n",
    "legal/contract.md": "# Supplier contract\n\nThe supplier contract terminates with 90 days written notice.\n",
    "broken.pdf": "%PDF-1.4\nnot really a PDF\n",
}


@pytest.fixture(scope="module")
def handbook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """A data dir whose source `handbook` (tags policy and legal by folder; one PDF that fails) is ingested, and an
    upload source `inbox`; RAG_SOURCES_FILE names them while the module's tests run."""
    from rag_pipeline.defs.ingest_runner import ingest

    base = tmp_path_factory.mktemp("safety")
    for relative, text in DOCUMENTS.items():
        (base / "corpus" / relative).parent.mkdir(parents=True, exist_ok=True)
        (base / "corpus" / relative).write_text(text)
    sources = base / "sources.yaml"
    sources.write_text(f"sources:\n  handbook:\n    roots: [{base / 'corpus'}]\n"
                       "    rules: {tags: {'policy/**': policy, 'legal/**': legal}}\n  inbox: {uploads: true}\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAG_SOURCES_FILE", str(sources))
        patch.delenv("RAG_ROOTS", raising=False)
        summary = ingest(data_dir=base / "data")
        assert summary["added"] == 2 and [Path(failure["path"]).name for failure in summary["failed"]] == ["broken.pdf"]
        yield load_settings(data_dir=base / "data", sources_file=sources)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def server_paths(settings: Settings) -> list[str]:
    """The server's folders an answer must not show."""
    return [str(settings.data_dir.resolve()), str(Path(settings.sources_file).parent)]


def test_answers_show_no_server_path(handbook: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Search, answers, exact answers, chat, document listings (a failed document's error), uploads, removals,
    ingest jobs and health show paths as <source>/<path under its root>; a shown path filters as before."""
    monkeypatch.setenv("RAG_SOURCES_FILE", str(handbook.sources_file))
    answers: list[str] = []

    def get(response: httpx.Response) -> dict:
        assert response.status_code < 300, response.text
        answers.append(response.text)
        return response.json() if "json" in response.headers["content-type"] else {}

    with running_api(handbook) as url:
        hits = get(httpx.post(f"{url}/search", json={"query": "paid annual leave", "top_k": 3}))["results"]
        assert hits[0]["path"] == "handbook/policy/leave.md" and hits[0]["paths"] == ["handbook/policy/leave.md"]
        for filters in ({"path": "handbook/policy/leave.md"}, {"paths": ["handbook/policy/leave.md"]},
                        {"path_prefix": "handbook/policy"}):
            filtered = get(httpx.post(f"{url}/search", json={"query": "notice", "filters": filters}))["results"]
            assert [hit["path"] for hit in filtered] == ["handbook/policy/leave.md"], filters
        get(httpx.post(f"{url}/ask", json={"question": "How many days of leave?"}))
        listed = get(httpx.post(f"{url}/query", json={"op": "list", "where": {"path": "handbook/legal/contract.md"}}))
        assert [row["path"] for row in listed["rows"]] == ["handbook/legal/contract.md"]
        assert listed["documents"][0]["path"] == "handbook/legal/contract.md"
        assert get(httpx.post(f"{url}/query", json={"op": "count", "where": ["path=handbook/policy/leave.md"]})
                   )["rows"] == [{"count": 1}]
        get(httpx.post(f"{url}/chat", json={"message": "Which documents are there?"},
                       headers={"Accept": "application/json"}))
        documents = get(httpx.get(f"{url}/sources/handbook/documents"))["documents"]
        [failed] = [document for document in documents if document["status"] == "failed"]
        assert failed["paths"] == ["handbook/broken.pdf"] and "<data dir>/artifacts/" in failed["error"]
        health = get(httpx.get(f"{url}/healthz"))
        assert health["status"] == "ok"

        pumps = [("files", ("pumps.md", b"# Pumps\n\nOil."))]
        uploaded = get(httpx.post(f"{url}/sources/inbox/documents", files=pumps, timeout=30))
        assert uploaded["documents"][0]["path"].startswith("inbox/") and uploaded["documents"][0]["path"].endswith(
            "/pumps.md")
        job = wait_for(url, uploaded["ingest"]["id"], answers)
        assert job["status"] == "succeeded", job
        removed = get(httpx.delete(f"{url}/sources/inbox/documents/{uploaded['documents'][0]['id']}", timeout=30))
        assert removed["removed_paths"] == [uploaded["documents"][0]["path"]]
        wait_for(url, removed["ingest"]["id"], answers)
        ingest = get(httpx.post(f"{url}/ingest", timeout=30))
        wait_for(url, ingest["id"], answers)
    for answer in answers:
        for folder in server_paths(handbook):
            assert folder not in answer


def wait_for(url: str, job_id: str, answers: list[str]) -> dict:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        response = httpx.get(f"{url}/ingest/{job_id}", timeout=30)
        answers.append(response.text)
        if response.json()["status"] not in ("queued", "running"):
            return response.json()
        time.sleep(0.2)
    raise AssertionError("the ingest did not finish")


def test_a_configuration_error_is_a_500_that_names_no_path(handbook: Settings) -> None:
    """Any reader triggers the 500 of a broken sources file; it says where to look, not what the file is."""
    sources = Path(handbook.sources_file)
    kept = sources.read_text()
    with running_api(handbook) as url:
        try:
            sources.write_text("sources: [")
            response = httpx.get(f"{url}/sources")
        finally:
            sources.write_text(kept)
    assert response.status_code == 500 and response.json()["error"] == {
        "code": "configuration_error", "message": "the server's configuration is invalid; the server's log says why"}


def test_a_tag_scope_limits_the_sources_counts(handbook: Settings, tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    tokens = {name: create_key(keys, name, "reader", tags)[1] for name, tags in
              [("all", ()), ("policy", ("policy",)), ("nothing", ("secret",))]}
    settings = handbook.model_copy(update={"api_keys_file": keys})
    with running_api(settings) as url:
        def counts(name: str) -> tuple[int, int, int]:
            sources = httpx.get(f"{url}/sources", headers=bearer(tokens[name])).json()["sources"]
            entry = next(entry for entry in sources if entry["name"] == "handbook")
            return entry["documents"], entry["failed"], entry["chunks"]

        assert counts("all")[:2] == (3, 1)
        assert counts("policy") == (1, 0, 1)  # the leave policy only: not the contract, not the untagged PDF
        assert counts("nothing") == (0, 0, 0)


def test_sessions_belong_to_the_key_not_to_its_name(handbook: Settings, tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    _, first = create_key(keys, "alice", "reader")
    with running_api(handbook.model_copy(update={"api_keys_file": keys})) as url:
        done = httpx.post(f"{url}/chat", json={"message": "How many documents are there?"},
                          headers={**bearer(first), "Accept": "application/json"}, timeout=120).json()
        session = f"{url}/chat/{done['session_id']}"
        assert httpx.get(session, headers=bearer(first)).status_code == 200
        revoke_key(keys, "alice")
        _, second = create_key(keys, "alice", "reader")  # the same name, another key
        refused = httpx.get(session, headers=bearer(second))
        assert refused.status_code == 404 and refused.json()["error"]["code"] == "session_not_found"
        assert httpx.delete(session, headers=bearer(second)).status_code == 404
        follow_up = httpx.post(f"{url}/chat", json={"message": "and legal ones?", "session_id": done["session_id"]},
                               headers={**bearer(second), "Accept": "application/json"}, timeout=120)
        assert follow_up.status_code == 404


def raw_request(url: str, request: bytes, wait_s: float = 0.0) -> bytes:
    """Send raw bytes to the server; its answer (empty when `wait_s` is set: hang up after waiting that long)."""
    address = urlsplit(url)
    with socket.create_connection((address.hostname, address.port), timeout=30) as connection:
        connection.sendall(request)
        if wait_s:
            time.sleep(wait_s)
            return b""
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
        return answer


def test_a_client_that_hangs_up_mid_upload_is_no_server_error(handbook: Settings, caplog: pytest.LogCaptureFixture,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAG_SOURCES_FILE", str(handbook.sources_file))
    caplog.set_level(logging.INFO)
    head = (b'--B\r\nContent-Disposition: form-data; name="files"; filename="half.md"\r\n'
            b"Content-Type: text/markdown\r\n\r\n" + b"# Half\n\n" + b"words " * 2000)
    with running_api(handbook) as url:
        raw_request(url, b"POST /sources/inbox/documents HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                         b"multipart/form-data; boundary=B\r\nContent-Length: 1000000\r\n\r\n" + head, wait_s=0.5)
        deadline = time.monotonic() + 10
        while not any(record.name == "rag_pipeline.access" for record in caplog.records):
            assert time.monotonic() < deadline, "the request was never logged"
            time.sleep(0.1)
        listing = httpx.get(f"{url}/sources/inbox/documents").json()
    [access] = [json.loads(record.getMessage()) for record in caplog.records if record.name == "rag_pipeline.access"
                and "/documents" in record.getMessage() and '"POST"' in record.getMessage()]
    assert access["status"] == 400
    assert not [record for record in caplog.records if record.levelno >= logging.ERROR or record.exc_info]
    assert "half.md" not in json.dumps(listing)  # nothing of it was stored


def test_several_host_headers_are_refused(handbook: Settings) -> None:
    with running_api(handbook) as url:
        answer = raw_request(url, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\n"
                                  b"Connection: close\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 400") and b'"invalid_host"' in answer
        single = raw_request(url, b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        assert single.startswith(b"HTTP/1.1 200")


def test_errors_do_not_echo_a_long_request(handbook: Settings) -> None:
    long = "x" * 20_000
    with running_api(handbook) as url:
        for response in (httpx.get(f"{url}/sources/{long}/documents"), httpx.get(f"{url}/ingest/{long}"),
                         httpx.post(f"{url}/query", json={"op": "count", "where": {long[:60]: 1}})):
            assert 400 <= response.status_code < 500 and len(response.text) < 2_500, response.status_code


def test_an_http_ingest_runs_at_a_lower_priority_while_the_server_answers(handbook: Settings,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Real documents uploaded over HTTP: their ingest runs in the server's worker thread at a lower CPU priority
    (nice +INGEST_NICENESS), and /healthz and /search answer 200 all along. The latency under load is measured by
    bench/bench_serve_under_ingest.py (docs/benchmarks.md), not asserted here."""
    files = sorted(path for path in DOCUMENTS_DIR.glob("*.*") if path.suffix in (".pdf", ".docx", ".html"))
    if not files:
        pytest.skip(f"no documents in {DOCUMENTS_DIR}")
    monkeypatch.setenv("RAG_SOURCES_FILE", str(handbook.sources_file))
    with running_api(handbook) as url:
        uploaded = httpx.post(f"{url}/sources/inbox/documents", timeout=120,
                              files=[("files", (path.name, path.read_bytes())) for path in files[:20]])
        assert uploaded.status_code == 202, uploaded.text
        job_url, niceness, probes = f"{url}/ingest/{uploaded.json()['ingest']['id']}", None, []
        while httpx.get(job_url, timeout=30).json()["status"] in ("queued", "running"):
            worker = next((thread for thread in threading.enumerate() if thread.name == "ingest-worker"), None)
            if worker is not None and worker.native_id is not None and niceness is None:
                niceness = os.getpriority(os.PRIO_PROCESS, worker.native_id) - os.getpriority(os.PRIO_PROCESS, 0)
            started = time.monotonic()
            health = httpx.get(f"{url}/healthz", timeout=30)
            probes.append(time.monotonic() - started)
            assert health.status_code == 200
            assert httpx.post(f"{url}/search", json={"query": "leave"}, timeout=30).status_code == 200
            time.sleep(0.2)
        assert httpx.get(job_url).json()["status"] == "succeeded"
    assert niceness == INGEST_NICENESS and probes
    print(f"/healthz during the ingest: {len(probes)} probes, max {max(probes):.3f} s")
