"""Parallel shard runs (RAG_INGEST_WORKERS): the per-document stages of ranges of documents (cut at a document, so
two runs may share a shard) run in worker processes at once and end in the same index as one worker; a worker
killed in the middle of its range loses nothing (the range runs again), leaves no duplicate or orphan point and the
summary counts every document once; the workers' forkserver starts before discovery when a given folder has new or
changed files."""

from __future__ import annotations

import json
import multiprocessing.forkserver
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rag_pipeline.components import load_settings
from rag_pipeline.defs import ingest_runner
from rag_pipeline.defs.ingest_runner import ingest
from rag_pipeline.defs.partitions import shard_ranges
from rag_pipeline.defs.resources import RagResource
from rag_pipeline.ingest.stage import stores
from rag_pipeline.sidecar import Sidecar

from .conftest import REPO
from .pg_server import postgres_server  # noqa: F401  (a fixture, started only for the postgres parameter)
from .sidecar_backends import location_for
from .test_crash_state import DOCUMENTS, assert_honest_state, files, texts
from .test_index_sync import assert_index_agrees, scifact_files

pytestmark = pytest.mark.slow


def test_shard_ranges_are_contiguous_disjoint_and_near_equal() -> None:
    keys = [format(i, "x") for i in range(16)]
    assert shard_ranges(keys, 2) == [keys[:8], keys[8:]]
    assert [len(part) for part in shard_ranges(keys, 3)] == [6, 5, 5]
    assert shard_ranges(["3", "a", "1"], 8) == [["1"], ["3"], ["a"]]
    assert shard_ranges(["3"], 1) == [["3"]]
    for workers in range(1, 20):
        ranges = shard_ranges(keys, workers)
        assert [key for part in ranges for key in part] == keys and all(ranges)


@pytest.fixture(scope="module")
def sequential(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, dict]:
    """One worker's ingest of the corpus: (summary, points)."""
    base = tmp_path_factory.mktemp("sequential")
    summary = ingest([scifact_files(base / "scifact", DOCUMENTS)], base / "data")
    return summary, assert_index_agrees(base / "data")


@pytest.mark.parametrize("backend", ["duckdb", "postgres"])
def test_two_workers_build_the_index_one_worker_builds(backend: str, tmp_path: Path, sequential: tuple[dict, dict],
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        request: pytest.FixtureRequest) -> None:
    """On either sidecar: with PostgreSQL, the two workers write their rows into one database at once."""
    monkeypatch.setenv("RAG_INGEST_WORKERS", "2")
    if backend == "postgres":
        monkeypatch.setenv("RAG_SIDECAR_URL", str(location_for(backend, request, tmp_path)))
    root, data_dir = scifact_files(tmp_path / "scifact", DOCUMENTS), tmp_path / "data"
    summary = ingest([root], data_dir)
    one = sequential[0]
    for key in ("added", "chunks", "vectors_computed", "points_upserted", "shards", "failed"):
        assert summary[key] == one[key], key
    assert summary["added"] == DOCUMENTS and summary["generation"]["switched"]
    # raw_documents here, the per-document stages in two worker runs, vector_index and metadata_sidecar here
    assert len(summary["run_ids"]) == 4
    # the two worker runs cut the documents at one (their pending bytes 44,507 and 44,513): each embedded its own
    # side, and both embedded documents of the shard of the cut
    settings = load_settings(data_dir=data_dir)
    sidecar = Sidecar(settings.sidecar_location)
    actions = [sidecar.run_actions([run_id]) for run_id in summary["run_ids"][1:3]]
    sides = [done[("embeddings", "added")] for done in actions]
    assert not sides[0] & sides[1] and len(sides[0] | sides[1]) == DOCUMENTS
    assert abs(len(sides[0]) - len(sides[1])) <= 6
    shards = [{settings.shard_of(sha) for sha in side} for side in sides]
    assert len(shards[0] & shards[1]) == 1
    for stage in ("markdown_documents", "redacted_documents", "chunks"):  # every per-document stage kept to its side
        assert [done[(stage, "added")] for done in actions] == sides
    assert texts(assert_index_agrees(data_dir)) == texts(sequential[1])
    again = ingest([root], data_dir)
    assert again["added"] == 0 and again["unchanged"] == DOCUMENTS and again["run_ids"] == []


def shard_workers() -> list[int]:
    """The processes this process's forkserver forked (the shard workers while they run)."""
    server = multiprocessing.forkserver._forkserver._forkserver_pid
    if server is None:
        return []
    children = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == server:
                children.append(int(entry.name))
        except (OSError, IndexError, ValueError):
            continue
    return children


def test_a_worker_killed_mid_range_loses_nothing(tmp_path: Path, sequential: tuple[dict, dict],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAG_INGEST_WORKERS", "2")
    root, data_dir = scifact_files(tmp_path / "scifact", DOCUMENTS), tmp_path / "data"
    markdown = stores(load_settings(data_dir=data_dir))["markdown"].dir
    killed: list[int] = []

    def kill_a_worker() -> None:
        """kill -9 one shard worker once its range is under way (a few documents converted)."""
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not killed:
            workers = shard_workers()
            if len(workers) == 2 and files(markdown, "*.md") >= 5:
                os.kill(workers[0], signal.SIGKILL)
                killed.append(workers[0])
            time.sleep(0.01)

    killer = threading.Thread(target=kill_a_worker)
    killer.start()
    summary = ingest([root], data_dir)
    killer.join()
    assert killed, "no shard worker was running to kill"
    # the ranges ran again: every document once, the same points as one worker's ingest, none twice or orphaned
    assert summary["added"] == DOCUMENTS and summary["failed"] == [] and summary["generation"]["switched"]
    assert summary["points_upserted"] == sequential[0]["points_upserted"]  # the index is written once, here
    assert texts(assert_index_agrees(data_dir)) == texts(sequential[1])
    assert all(row["status"] == "ok" for row in assert_honest_state(data_dir).values())


@pytest.mark.parametrize(("qdrant_url", "sidecar_url", "index_pool", "sidecar_pool"), [
    ("", "", "rag_store_writer", "rag_store_writer"),
    ("http://qdrant:6333", "", "None", "rag_store_writer"),
    ("http://qdrant:6333", "postgresql://rag@db:5432/rag", "None", "None"),
])
def test_only_serialised_writes_hold_the_writer_pool(qdrant_url: str, sidecar_url: str, index_pool: str,
                                                     sidecar_pool: str) -> None:
    """The per-document steps hold no pool; vector_index holds it with the embedded store only (a Qdrant server
    takes parallel upserts), metadata_sidecar with the DuckDB sidecar only (PostgreSQL takes concurrent write
    transactions). Definitions are made once per process: a subprocess with the settings."""
    code = ("import rag_pipeline.defs.assets as a; print(*[asset.op.pool for asset in a.INGEST_ASSETS])")
    env = {name: value for name, value in os.environ.items() if name != "RAG_SIDECAR_URL"}
    env |= {"RAG_QDRANT_URL": qdrant_url} | ({"RAG_SIDECAR_URL": sidecar_url} if sidecar_url else {})
    output = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert output.split() == ["rag_store_writer", "None", "None", "None", "None", index_pool, sidecar_pool]


def test_a_killed_ingest_leaves_no_pool_slot_claimed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With runs recorded in $DAGSTER_HOME (SQLite, the repo's dagster.yaml: pools at op granularity) an ingest
    killed while a writer step holds the rag_store_writer slot would leave it claimed, and every later ingest's
    writer steps would wait for it forever; the next ingest fails the killed runs and frees their slots."""
    import dagster as dg

    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    root, data_dir = scifact_files(tmp_path / "scifact", 20), tmp_path / "data"
    command = [sys.executable, "-m", "rag_pipeline", "ingest", str(root), "--json", "--data-dir", str(data_dir)]
    environment = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with dg.DagsterInstance.get() as instance:
        process = subprocess.Popen(command, env=environment, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and process.poll() is None:
            if instance.event_log_storage.get_concurrency_info("rag_store_writer").claimed_slots:
                os.killpg(process.pid, signal.SIGKILL)
                break
            time.sleep(0.005)
        process.wait()
        assert process.returncode == -signal.SIGKILL, "the ingest ended before a writer step held the pool"
        (claimed,) = instance.event_log_storage.get_concurrency_info("rag_store_writer").claimed_slots
        finished = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=600)
        assert finished.returncode == 0, finished.stderr[-2000:]
        assert json.loads(finished.stdout)["failed"] == []
        assert not instance.event_log_storage.get_concurrency_info("rag_store_writer").claimed_slots
        assert instance.get_run_by_id(claimed.run_id).status == dg.DagsterRunStatus.FAILURE


def test_a_second_ingest_names_the_running_one_and_corrupts_nothing(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from rag_pipeline.errors import Conflict

    monkeypatch.setenv("RAG_INGEST_WORKERS", "2")
    root, data_dir = scifact_files(tmp_path / "scifact", DOCUMENTS), tmp_path / "data"
    markdown = stores(load_settings(data_dir=data_dir))["markdown"].dir
    command = [sys.executable, "-m", "rag_pipeline", "ingest", str(root), "--json", "--data-dir", str(data_dir)]
    first = subprocess.Popen(command, env={**os.environ, "HF_HUB_OFFLINE": "1"}, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and first.poll() is None and not files(markdown, "*.md"):
        time.sleep(0.01)
    assert first.poll() is None, "the first ingest ended before its shard workers converted anything"
    with pytest.raises(Conflict) as refused:  # the first one is in its shard workers' stage
        ingest([root], data_dir)
    assert refused.value.code == "ingest_running"
    assert f"pid {first.pid} " in str(refused.value) and "rag_pipeline ingest" in str(refused.value)
    output, _ = first.communicate(timeout=600)
    assert first.returncode == 0 and json.loads(output)["added"] == DOCUMENTS
    assert_index_agrees(data_dir)


def test_the_workers_forkserver_starts_before_discovery_only_for_new_or_changed_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With several workers, the forkserver starts before the lock and discovery when given folders hold two or more
    files that are new or changed since the last scan (its imports then overlap them); not for one such file (one
    shard's work, which no worker runs), nor for folders the last scan saw as they are, nor with one worker."""
    root, data_dir = tmp_path / "docs", tmp_path / "data"
    root.mkdir()
    note, other = root / "note.md", root / "other.txt"
    note.write_text("# Note\n\nA new note.\n")
    started: list[int] = []
    monkeypatch.setattr(ingest_runner, "start_shard_workers_forkserver", lambda: started.append(1))

    def starts_early(workers: int) -> bool:
        monkeypatch.setenv("RAG_INGEST_WORKERS", str(workers))
        started.clear()
        ingest_runner.start_shard_workers_early(RagResource(roots=[str(root)], data_dir=str(data_dir)))
        return bool(started)

    assert not starts_early(2)  # one new file: one shard
    other.write_text("Another new file.\n")
    assert starts_early(2) and not starts_early(1)  # never scanned
    monkeypatch.setenv("RAG_INGEST_WORKERS", "1")
    assert ingest([root], data_dir)["added"] == 2
    assert not starts_early(2)  # the scan saw them as they are
    note.write_text("# Note\n\nEdited since the scan.\n")
    assert not starts_early(2)
    other.write_text("Edited too.\n")
    assert starts_early(2) and not starts_early(1)
    (root / "notes.rtf").write_text("not a type that is ingested")
    (root / "empty.md").write_text("")  # refused by discovery
    note.unlink()
    assert not starts_early(2)
