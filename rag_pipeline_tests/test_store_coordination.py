"""A server and a CLI ingest on one data dir with the embedded store (one process at a time), as real processes:
the ingest holds the store from start to end, a server started during it (or running when it starts) leaves the
store to it and answers 503 store_busy naming it, then serves the new index without a restart; an ingest that a
holder never leaves the store to fails after its wait with StoreLocked naming that holder, in its JSON."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from rag_pipeline.file_lock import holder_elsewhere
from rag_pipeline_tests.test_api import serve_process

from .conftest import REPO, SAMPLE_CORPUS

ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}


def start_ingest(corpus: Path, data_dir: Path, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "rag_pipeline", "ingest", str(corpus), "--data-dir", str(data_dir),
                             "--json"], cwd=REPO, env={**ENV, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def wait_until_holding(process: subprocess.Popen, data_dir: Path) -> None:
    """Until `process` holds the data dir's ingest lock."""
    deadline = time.monotonic() + 120
    while f"pid {process.pid} " not in (holder_elsewhere(data_dir / "ingest.lock") or "") + " ":
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.1)


def search(url: str) -> httpx.Response:
    return httpx.post(f"{url}/search", json={"query": "duck plumage", "top_k": 3}, timeout=30)


def probe_while(process: subprocess.Popen, url: str) -> list[tuple[int, str | None, float]]:
    """(status, error code, /healthz seconds) of a search and a health probe every 0.2 s while `process` runs; a
    refused search names the ingest, and so does /healthz."""
    seen = []
    while process.poll() is None:
        started = time.monotonic()
        health = httpx.get(f"{url}/healthz", timeout=10)
        elapsed = time.monotonic() - started
        response = search(url)
        code = response.json()["error"]["code"] if response.status_code >= 400 else None
        if code == "store_busy":
            assert response.headers["retry-after"] == "5"
            assert f"pid {process.pid}" in response.json()["error"]["message"]
            if health.status_code != 503:  # the ingest took the store between the two probes
                health = httpx.get(f"{url}/healthz", timeout=10)
            if health.status_code == 503:
                assert f"pid {process.pid}" in health.json()["store"]["error"]
            else:  # the ingest has let the store go since: the server answers again
                assert search(url).status_code == 200
        seen.append((response.status_code, code, elapsed))
        time.sleep(0.2)
    return seen


def finished(process: subprocess.Popen) -> dict:
    out, err = process.communicate(timeout=600)
    assert process.returncode == 0, err
    return json.loads(out)


def serves_again(url: str) -> dict:
    deadline = time.monotonic() + 30
    while (response := search(url)).status_code != 200:
        assert response.json()["error"]["code"] == "store_busy" and time.monotonic() < deadline
        time.sleep(0.2)
    return response.json()


@pytest.mark.slow
def test_serve_started_during_a_cli_ingest_leaves_it_the_store(tmp_path: Path) -> None:
    corpus, data_dir = tmp_path / "corpus", tmp_path / "data"
    shutil.copytree(SAMPLE_CORPUS, corpus)
    ingest = start_ingest(corpus, data_dir)
    try:
        wait_until_holding(ingest, data_dir)
        with serve_process(data_dir, tmp_path / "serve.log", "--allow-empty") as (url, server):
            seen = probe_while(ingest, url)
            summary = finished(ingest)
            assert summary["added"] == len(list(corpus.rglob("*.*"))) and summary["failed"] == []
            assert seen and {code for _, code, _ in seen} <= {"store_busy", None}
            assert "store_busy" in {code for _, code, _ in seen}  # (latency: bench/bench_serve_under_ingest.py)
            assert serves_again(url)["results"]
    finally:
        ingest.kill()
    assert "Traceback" not in (tmp_path / "serve.log").read_text()


@pytest.mark.slow
def test_a_running_server_leaves_the_store_to_a_cli_ingest(sample_index: tuple[Path, Path], tmp_path: Path) -> None:
    data_dir, corpus = tmp_path / "data", tmp_path / "more"
    shutil.copytree(sample_index[1], data_dir)
    shutil.copytree(SAMPLE_CORPUS, corpus)
    (corpus / "pumps.md").write_text("# Pumps\n\nThe bilge pump seals are inspected every fortnight.\n")
    with serve_process(data_dir, tmp_path / "serve.log") as (url, server):
        assert search(url).status_code == 200  # the server has the store open
        ingest = start_ingest(corpus, data_dir)
        try:
            seen = probe_while(ingest, url)
            summary = finished(ingest)
        finally:
            ingest.kill()
        assert summary["added"] == 1 and summary["failed"] == []
        assert {code for _, code, _ in seen} <= {"store_busy", None} and "store_busy" in {code for _, code, _ in seen}
        serves_again(url)
        found = httpx.post(f"{url}/search", json={"query": "bilge pump seals fortnight", "top_k": 1}, timeout=30)
        assert found.json()["results"][0]["path"].endswith("pumps.md")


HOLDER = """
import sys, time
from rag_pipeline.components import load_settings, open_retriever
retriever = open_retriever(load_settings(data_dir=sys.argv[1]))
print("holding", flush=True)
time.sleep(300)
"""


def test_an_ingest_waits_for_the_store_then_names_its_holder(sample_index: tuple[Path, Path], tmp_path: Path) -> None:
    """A process that never leaves the store (a script, not a server): the ingest waits RAG_INGEST_STORE_WAIT_S,
    then fails with StoreLocked naming that process, in its JSON (not a Dagster wrapper)."""
    data_dir = tmp_path / "data"
    shutil.copytree(sample_index[1], data_dir)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(data_dir)], cwd=REPO, env=ENV,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "holding"
        started = time.monotonic()
        ingest = start_ingest(sample_index[0], data_dir, RAG_INGEST_STORE_WAIT_S="3")
        out, err = ingest.communicate(timeout=300)
        waited = time.monotonic() - started
    finally:
        holder.kill()
        holder.wait()
    assert ingest.returncode == 1
    error = json.loads(out)["error"]
    assert error["code"] == "store_locked" and f"pid {holder.pid}" in error["message"]
    assert "waited 3 s" in error["message"] and "Dagster" not in error["message"]
    assert waited >= 3


def test_a_failed_step_names_its_cause_not_dagsters_wrapper(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from contextlib import contextmanager

    from rag_pipeline.defs.ingest_runner import ingest
    from rag_pipeline.defs.resources import RagResource
    from rag_pipeline.errors import IngestFailed, StoreLocked

    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "pumps.md").write_text("# Pumps\n\nSeals are inspected monthly.\n")

    @contextmanager
    def held_elsewhere(self: RagResource):
        raise StoreLocked("the embedded vector store is open in pid 4242 (rag-pipeline serve)")
        yield

    monkeypatch.setattr(RagResource, "live_stores", held_elsewhere)  # what a step meets when another process has it
    with pytest.raises(IngestFailed) as failed:
        ingest([tmp_path / "corpus"], tmp_path / "data")
    assert "StoreLocked: the embedded vector store is open in pid 4242" in failed.value.message
    assert "DagsterExecutionStepExecutionError" not in failed.value.message
