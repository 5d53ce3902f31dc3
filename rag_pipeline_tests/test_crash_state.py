"""What a user sees after `kill -9` of an ingest, at several moments: a document whose ingest did not end is never
`ok`, a purged document is never searchable, and the re-run's summary counts the work it did (also the work the
killed run left), converging to the state of an uninterrupted ingest."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rag_pipeline import components
from rag_pipeline.components import load_settings
from rag_pipeline.defs.ingest_runner import ingest
from rag_pipeline.errors import StoreUnavailable
from rag_pipeline.ingest.stage import stores
from rag_pipeline.sidecar import Sidecar
from rag_pipeline_tests.sidecar_sql import sql_rows

from .test_index_sync import assert_index_agrees, scifact_files, sha_of

pytestmark = pytest.mark.slow
DOCUMENTS = 60
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}


def command(root: Path, data_dir: Path) -> list[str]:
    return [sys.executable, "-m", "rag_pipeline", "ingest", str(root), "--json", "--data-dir", str(data_dir)]


def run(root: Path, data_dir: Path) -> dict:
    """An ingest in this process (the killed ones run as the CLI in a subprocess)."""
    return ingest([root], data_dir)


def kill_when(root: Path, data_dir: Path, moment: Callable[[], bool]) -> None:
    """Start an ingest and kill -9 it (the whole process group) as soon as `moment()` holds."""
    process = subprocess.Popen(command(root, data_dir), env=ENV, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None and not moment():
        time.sleep(0.02)
    assert process.poll() is None, "the ingest finished before the moment to kill it"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def files(store_dir: Path, pattern: str) -> int:
    return sum(1 for _ in store_dir.rglob(pattern)) if store_dir.is_dir() else 0


def assert_honest_state(data_dir: Path) -> dict[str, dict]:
    """The invariants that hold at any moment: `ok` means catalogued with every point in the index; every point
    in the index belongs to a document the sidecar knows. Returns the sidecar's documents."""
    settings = load_settings(data_dir=data_dir)
    sidecar = Sidecar(settings.sidecar_path)
    rows = sidecar.documents()
    catalogued = {row["sha"] for row in sql_rows(sidecar, "SELECT DISTINCT sha FROM chunks")}
    for sha, row in rows.items():
        if row["status"] == "ok":
            assert row["ingested_at"] is not None and (sha in catalogued or row["chunks"] == 0), row["paths"]
    if components.generations(settings).active() is None:
        with pytest.raises(StoreUnavailable, match="no index yet"):  # a half-built first generation is not served
            components.generations(settings).queried()
        return rows
    with components.generations(settings).query_store() as store:
        for shard in settings.shard_keys:
            state = store.shard_state(shard)
            assert set(state) <= set(rows), "points of a document the sidecar no longer holds are searchable"
            for sha, held in state.items():
                if rows[sha]["status"] == "ok":
                    assert held.points == rows[sha]["chunks"], rows[sha]["paths"]
    return rows


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict]:
    """An uninterrupted ingest of the corpus: (its root, summary, points)."""
    base = tmp_path_factory.mktemp("clean")
    root = scifact_files(base / "scifact", DOCUMENTS)
    summary = run(root, base / "data")
    return root, summary, assert_index_agrees(base / "data")


def assert_converges(root: Path, data_dir: Path, clean: tuple[Path, dict, dict]) -> dict:
    """Re-run after the kill: the summary counts as added exactly the documents that were not `ok`, and the
    index ends as the uninterrupted one."""
    before = assert_honest_state(data_dir)
    not_done = DOCUMENTS - sum(row["status"] == "ok" for row in before.values())
    resumed = run(root, data_dir)
    assert resumed["added"] == not_done and resumed["failed"] == []
    assert resumed["added"] + resumed["unchanged"] + resumed["reindexed"] == DOCUMENTS
    points = assert_index_agrees(data_dir)
    assert texts(points) == texts(clean[2])
    return resumed


def texts(points: dict[str, dict]) -> dict[str, tuple[str, str, str]]:
    """Point id -> (document, relative name, text): what must not depend on where the corpus was copied to."""
    return {key: (value["sha"], Path(value["path"]).name, value["text"]) for key, value in points.items()}


@pytest.mark.parametrize("moment", ["conversion", "embedding", "indexing"])
def test_killed_first_ingest(moment: str, tmp_path: Path, clean: tuple[Path, dict, dict]) -> None:
    root = scifact_files(tmp_path / "scifact", DOCUMENTS)
    data_dir = tmp_path / "data"
    all_stores = stores(load_settings(data_dir=data_dir))
    moments = {
        "conversion": lambda: files(all_stores["markdown"].dir, "*.md") >= 5,
        "embedding": lambda: files(all_stores["embeddings"].dir, "*.npy") >= 1,
        "indexing": lambda: files(all_stores["embeddings"].dir, "*.npy") >= DOCUMENTS,
    }
    kill_when(root, data_dir, moments[moment])
    resumed = assert_converges(root, data_dir, clean)
    if moment == "embedding":  # vectors computed before the kill are kept (files, cache): not computed again
        assert resumed["vectors_computed"] < clean[1]["vectors_computed"]


def test_killed_update_never_shows_purged_documents(tmp_path: Path, clean: tuple[Path, dict, dict]) -> None:
    root = scifact_files(tmp_path / "scifact", DOCUMENTS)
    data_dir = tmp_path / "data"
    run(root, data_dir)
    deleted = sorted(root.iterdir())[:16]
    deleted_shas = {sha_of(path) for path in deleted}
    for path in deleted:
        path.unlink()
    raw = stores(load_settings(data_dir=data_dir))["raw"]
    kill_when(root, data_dir, lambda: not any(raw.shas(sha[:1]) & {sha} for sha in deleted_shas))
    rows = assert_honest_state(data_dir)
    with components.generations(load_settings(data_dir=data_dir)).query_store() as store:
        assert sum(store.count(sha=sha) for sha in deleted_shas) == 0  # not searchable between kill and re-run
    resumed = run(root, data_dir)
    assert resumed["added"] == 0 and resumed["unchanged"] == DOCUMENTS - 16
    # The re-run counts the purges it finished: documents whose sidecar row the killed run had not dropped yet,
    # or whose later artifacts it left.
    assert resumed["purged"] <= 16 and (resumed["purged"] > 0 or not (deleted_shas & set(rows)))
    points = assert_index_agrees(data_dir)
    assert {payload["sha"] for payload in points.values()}.isdisjoint(deleted_shas)
    for store in stores(load_settings(data_dir=data_dir)).values():
        assert not any(store.shas(sha[:1]) & {sha} for sha in deleted_shas)


def test_half_written_conversion_and_redaction_are_redone(tmp_path: Path) -> None:
    """A kill between a stage's two files (<sha>.json, then <sha>.md) leaves the .json only: the document is
    converted (or redacted) again instead of being taken as done and blocking its shard forever."""
    root = scifact_files(tmp_path / "scifact", 3)
    data_dir = tmp_path / "data"
    run(root, data_dir)
    settings = load_settings(data_dir=data_dir)
    all_stores = stores(settings)
    sha = sha_of(sorted(root.iterdir())[0])
    shard = settings.shard_of(sha)
    for stage in ("chunks", "embeddings"):
        all_stores[stage].delete_documents(shard, [sha])
    for stage in ("markdown", "redacted"):
        all_stores[stage].path(shard, sha, "md").unlink()  # as if killed after writing <sha>.json
    resumed = run(root, data_dir)
    assert resumed["shards"] == [shard] and resumed["failed"] == []
    assert all_stores["markdown"].exists(shard, sha, "md") and all_stores["redacted"].exists(shard, sha, "md")
    assert_index_agrees(data_dir)
