"""Redaction and chunking in worker processes (ingest/document_workers.py): a pooled ingest writes exactly what an
in-process one writes; results come back in order; a document that kills or hangs its worker fails alone (redaction:
withheld and recorded; chunking: recorded and tried again by the next ingest); a worker's exception is raised in the
step; small steps and RAG_DOCUMENT_WORKERS=1 stay in process."""

from __future__ import annotations

import filecmp
import os
import signal
import time
from pathlib import Path

import pytest

from rag_pipeline.components import load_settings
from rag_pipeline.defs.assets import markdown_documents, raw_documents
from rag_pipeline.defs.ingest_runner import ingest
from rag_pipeline.defs.local_runs import dagster_instance, materialize_stages
from rag_pipeline.defs.resources import RagResource
from rag_pipeline.errors import ConfigError
from rag_pipeline.ingest import document_workers, worker_pool
from rag_pipeline.ingest.chunk import sync_chunks
from rag_pipeline.ingest.document_workers import per_document
from rag_pipeline.ingest.redact import sync_redacted
from rag_pipeline.ingest.stage import stores
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar

SLOW_DOCUMENT_CHARS = 9_000_000  # redacting or chunking it takes over 10 s of a core
TIMEOUT_S = 3.0  # the worker's limit in the stage test: a worker's start and a small batch take well under it


class TwoPartError(Exception):
    """An exception that pickles but does not unpickle (its __init__ takes two arguments)."""

    def __init__(self, first: str, second: str) -> None:
        super().__init__(f"{first} {second}")


def pid_handler() -> object:
    """Each job's (job, pid of the process that handled it); job "kill" kills its worker, "hang" sleeps a minute,
    "raise" raises, "two parts" raises an exception that cannot cross the pipe."""
    def handle(jobs: list[str]) -> list[tuple[str, int]]:
        for job in jobs:
            if job == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            if job == "hang":
                time.sleep(60)
            if job == "raise":
                raise ValueError(f"bad job {job} in process {os.getpid()}")
            if job == "two parts":
                raise TwoPartError("two", "parts")
        return [(job, os.getpid()) for job in jobs]
    return handle


def lost(job: str, reason: str) -> tuple[str, str, str]:
    """The result of a job whose worker died or was stopped."""
    return ("lost", job, reason)


def broken_handler() -> object:
    """A handler that cannot be built (as chunking's without its tokenizer)."""
    raise ConfigError("RAG_CHUNKER=tokens: no tokenizer here")


@pytest.fixture
def pooled(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Steps of any size use 2 workers, in batches of 2 documents; returns the worker counts of the pools made."""
    pools: list[int] = []
    real_pool = worker_pool.WorkerPool

    def counted_pool(workers: int, *args: object, **kwargs: object) -> object:
        pools.append(workers)
        return real_pool(workers, *args, **kwargs)

    monkeypatch.setattr(document_workers, "MIN_POOLED_DOCUMENTS", 1)
    monkeypatch.setattr(document_workers, "BATCH_DOCUMENTS", 2)
    monkeypatch.setattr(worker_pool, "WorkerPool", counted_pool)
    monkeypatch.setenv("RAG_DOCUMENT_WORKERS", "2")
    return pools


def test_results_come_back_in_order_from_the_workers(pooled: list[int]) -> None:
    jobs = [f"job {index}" for index in range(9)]
    results = per_document(Settings(), pid_handler, jobs, lost)
    assert [job for job, _ in results] == jobs
    assert os.getpid() not in {pid for _, pid in results}
    assert len({pid for _, pid in results}) == 2 and pooled == [2]


def test_small_steps_and_one_worker_stay_in_process(monkeypatch: pytest.MonkeyPatch) -> None:
    jobs = ["a", "b", "c"]
    in_process = [(job, os.getpid()) for job in jobs]
    assert per_document(Settings(), pid_handler, jobs, lost) == in_process  # below the minimum
    monkeypatch.setattr(document_workers, "MIN_POOLED_DOCUMENTS", 1)
    assert per_document(Settings(document_workers=1), pid_handler, jobs, lost) == in_process
    assert document_workers.document_workers(Settings(document_workers=4), 3) == 1  # at most one per batch
    monkeypatch.setattr(document_workers, "BATCH_DOCUMENTS", 2)
    assert document_workers.document_workers(Settings(document_workers=4), 3) == 2
    monkeypatch.setattr(document_workers, "usable_cores", lambda: 1)  # a shard worker pinned to one core
    assert document_workers.document_workers(Settings(document_workers=4), 3) == 1


def test_a_job_that_kills_its_worker_is_lost_alone(pooled: list[int]) -> None:
    jobs = ["a", "b", "kill", "c", "d", "e"]
    results = per_document(Settings(), pid_handler, jobs, lost)
    assert results[2][:2] == ("lost", "kill") and "killed by SIGKILL" in results[2][2]
    assert [result[0] for index, result in enumerate(results) if index != 2] == ["a", "b", "c", "d", "e"]


def test_a_job_that_hangs_its_worker_is_lost_alone(pooled: list[int]) -> None:
    started = time.perf_counter()
    results = per_document(Settings(convert_timeout_s=3.0), pid_handler, ["a", "hang", "b", "c"], lost)
    assert results[1][:2] == ("lost", "hang") and "stopped after 3 s" in results[1][2]
    assert [result[0] for index, result in enumerate(results) if index != 1] == ["a", "b", "c"]
    assert time.perf_counter() - started < 30  # twice the limit (its batch, then alone), not the minute


def test_an_exception_in_a_worker_is_raised_in_the_step(pooled: list[int]) -> None:
    with pytest.raises(ValueError, match="bad job raise in process") as raised:
        per_document(Settings(), pid_handler, ["a", "b", "raise", "c"], lost)
    assert f"in process {os.getpid()}" not in str(raised.value)
    assert any("in document worker" in note and 'raise ValueError(f"bad job' in note for note in raised.value.__notes__)
    with pytest.raises(RuntimeError, match="TwoPartError: two parts"):  # it cannot cross the pipe as itself
        per_document(Settings(), pid_handler, ["a", "two parts", "b"], lost)
    with pytest.raises(ConfigError, match="no tokenizer here"):  # building the handler: not every document lost
        per_document(Settings(), broken_handler, ["a", "b", "c"], lost)


def test_a_pooled_ingest_writes_what_an_in_process_ingest_writes(
        corpus: Path, tmp_path: Path, pooled: list[int], sample_index: tuple[Path, Path]) -> None:
    _, in_process_data = sample_index
    summary = ingest([corpus], tmp_path / "data")
    assert pooled == [2, 2]  # redaction, then chunking
    assert summary["added"] == 14 and not summary["failed"]
    pooled_settings, in_process_settings = (load_settings(data_dir=data)
                                            for data in (tmp_path / "data", in_process_data))
    for stage, pattern in [("redacted", "*/*.md"), ("redacted", "*/*.json"), ("chunks", "*/*.jsonl")]:
        ours, theirs = (sorted(path.relative_to(stores(settings)[stage].dir)
                               for path in stores(settings)[stage].dir.glob(pattern))
                        for settings in (pooled_settings, in_process_settings))
        assert ours == theirs and ours
        _, mismatch, errors = filecmp.cmpfiles(stores(pooled_settings)[stage].dir,
                                               stores(in_process_settings)[stage].dir, [str(p) for p in ours],
                                               shallow=False)
        assert not mismatch and not errors, (stage, mismatch, errors)
    columns = ("sha", "status", "redactions", "chunks", "title", "first_heading")
    rows = [sorted(tuple(row[column] for column in columns) for row in Sidecar(settings.sidecar_location)
                   .documents().values()) for settings in (pooled_settings, in_process_settings)]
    assert rows[0] == rows[1]


def converted_corpus(tmp_path: Path) -> tuple[Settings, Sidecar, list[str], str]:
    """Six small documents and one slow one, converted (raw and markdown stages) into a fresh data dir:
    (settings, sidecar, shards, the slow document's SHA)."""
    folder = tmp_path / "docs"
    folder.mkdir()
    for index in range(6):
        (folder / f"note-{index}.md").write_text(f"# Note {index}\n\nCall 020 7946 0958 about item {index}.\n")
    (folder / "huge.txt").write_text("Reading list item with words. " * (SLOW_DOCUMENT_CHARS // 30))
    rag = RagResource(roots=[str(folder)], data_dir=str(tmp_path / "data"))
    settings, sidecar = rag.settings, rag.sidecar()
    shards = settings.shard_keys
    with dagster_instance() as instance:
        assert materialize_stages(rag, [raw_documents, markdown_documents], shards, instance).success
    slow = next(sha for sha, row in sidecar.documents().items() if row["rel_path"] == "huge.txt")
    return settings, sidecar, shards, slow


def test_a_document_that_hangs_its_worker_fails_alone(tmp_path: Path, pooled: list[int]) -> None:
    settings, sidecar, shards, slow = converted_corpus(tmp_path)
    limited = settings.model_copy(update={"convert_timeout_s": TIMEOUT_S})
    redacted = stores(settings)["redacted"]

    started = time.perf_counter()
    report = sync_redacted(limited, shards, sidecar)
    assert list(report.failed) == [slow] and "huge.txt: the redaction did not finish" in report.failed[slow]
    assert f"stopped after {TIMEOUT_S:g} s" in report.failed[slow] and time.perf_counter() - started < 60
    assert len(report.added) == 6 and not report.check_failures
    shard = settings.shard_of(slow)
    assert redacted.exists(shard, slow, "error.json") and not redacted.exists(shard, slow, "md")
    assert sidecar.documents()[slow]["status"] == "failed"
    assert "[REDACTED:phone]" in redacted.read_text(settings.shard_of(report.added[0]), report.added[0], "md")
    assert sync_redacted(settings, shards, sidecar).added == []  # withheld: not tried again until its bytes change

    # Chunking: the slow document (released this time) fails alone and is chunked by the next run.
    redacted.delete_documents(shard, [slow])
    assert sync_redacted(settings.model_copy(update={"document_workers": 1}), shards, sidecar).added == [slow]
    report = sync_chunks(limited, shards, sidecar)
    assert list(report.failed) == [slow] and "huge.txt: the chunking did not finish" in report.failed[slow]
    assert len(report.added) == 6 and not stores(settings)["chunks"].exists(shard, slow, "jsonl")
    row = sidecar.documents()[slow]
    assert row["status"] == "failed" and row["stage"] == "chunks"
    assert row["error"].startswith("the chunking did not finish")
    assert sync_chunks(settings, shards, sidecar).added == [slow]
    assert stores(settings)["chunks"].exists(shard, slow, "jsonl")


def test_the_forkserver_starts_ahead_only_for_a_pooled_step(monkeypatch: pytest.MonkeyPatch, corpus: Path,
                                                            tmp_path: Path) -> None:
    """The ingest starts the workers' forkserver before its first run when the redaction step will be pooled."""
    from rag_pipeline.defs import ingest_runner

    started: list[str] = []
    monkeypatch.setattr(ingest_runner, "start_document_workers", lambda: started.append("documents"))
    monkeypatch.setattr(ingest_runner, "start_conversion_workers", lambda: started.append("conversion"))
    only_text = tmp_path / "text"
    only_text.mkdir()
    for index in range(3):
        (only_text / f"{index}.md").write_text(f"# {index}\n\ntext {index}\n")
    monkeypatch.setenv("RAG_DOCUMENT_WORKERS", "2")
    ingest([only_text], tmp_path / "small")
    assert started == []  # 3 documents: below the minimum
    monkeypatch.setattr(document_workers, "MIN_POOLED_DOCUMENTS", 3)
    monkeypatch.setattr(document_workers, "BATCH_DOCUMENTS", 2)
    ingest([only_text], tmp_path / "pooled")
    assert started == ["documents"]
    ingest([corpus], tmp_path / "docling")
    assert started == ["documents", "conversion"]  # docling's forkserver serves both pools
    ingest([only_text], tmp_path / "pooled")
    assert started == ["documents", "conversion"]  # nothing left to redact

