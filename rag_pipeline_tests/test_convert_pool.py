"""Conversion in a pool of worker processes, on real documents with real docling: the same Markdown as in-process
conversion, a document that fails, hangs or kills its worker fails alone, and every document for docling converts in
a worker (with its time limit), RAG_CONVERT_WORKERS=1 and a one-document step too."""

from __future__ import annotations

import argparse
import functools
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from rag_pipeline.defs import ingest_runner
from rag_pipeline.defs.ingest_runner import ingest
from rag_pipeline.defs.resources import RagResource
from rag_pipeline.ingest import convert
from rag_pipeline.ingest.convert import Outcome, conversions, conversions_ahead, convert_outcome, worker_handler
from rag_pipeline.ingest.converters import DocumentConverter
from rag_pipeline.ingest.plan import docling_pending, pending_shards
from rag_pipeline.ingest.worker_pool import Lost, WorkerPool
from rag_pipeline.serve.cli import main
from rag_pipeline.serve.cli.corpus import start_conversions_early
from rag_pipeline.settings import Settings

from .conftest import DOCUMENTS

DOC_TYPES = {".pdf": "pdf", ".docx": "docx", ".html": "html"}
STEP_DOCUMENTS = 24  # a step with more documents than workers


def dataset_jobs() -> list[tuple[Path, str]]:
    """The dataset's PDF, DOCX and HTML files."""
    return [(path, DOC_TYPES[path.suffix]) for path in sorted(DOCUMENTS.iterdir()) if path.suffix in DOC_TYPES]


def reader_of(path: Path) -> int:
    """The pid of another process that has `path` open."""
    for pid in set(filter(str.isdigit, os.listdir("/proc"))) - {str(os.getpid())}:
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == str(path) for fd in os.listdir(f"/proc/{pid}/fd")):
                return int(pid)
        except OSError:  # the process ended, or is not ours
            continue
    raise AssertionError(f"no process has {path} open")


def test_pool_gives_the_same_markdown_as_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    notes = tmp_path / "notes.md"
    notes.write_text("# Notes\n\nplain text needs no docling\n")
    jobs = dataset_jobs() + [(notes, "md")]

    pooled_converter = DocumentConverter()
    pooled = dict(conversions(Settings(convert_workers=2), pooled_converter, jobs))
    in_process_converter = DocumentConverter()
    in_process = {index: convert_outcome(in_process_converter, *job) for index, job in enumerate(jobs)}

    assert sorted(pooled) == sorted(in_process) == list(range(len(jobs)))
    for index, (path, _) in enumerate(jobs):
        assert pooled[index].error is None and in_process[index].error is None, path.name
        assert pooled[index].converted == in_process[index].converted, path.name
    assert pooled_converter._docling_converter is None  # every docling document went to the workers
    # One worker, one document: still in a worker, with its time limit, never in this process.
    monkeypatch.setenv("RAG_CONVERT_WORKERS", "1")
    one = DocumentConverter()
    assert dict(conversions(Settings(), one, jobs[:1]))[0].converted == in_process[0].converted
    assert one._docling_converter is None


def test_the_largest_documents_go_to_the_workers_first(tmp_path: Path) -> None:
    """One worker converts in the order it is given the documents: largest first, whatever the jobs' order."""
    jobs = []
    for name, paragraphs in [("small", 2), ("large", 200), ("middle", 40)]:
        page = tmp_path / f"{name}.html"
        page.write_text(f"<html><body><h1>{name}</h1>" + "<p>Ducks eat seeds and snails.</p>" * paragraphs
                        + "</body></html>")
        jobs.append((page, "html"))
    missing = (tmp_path / "missing.html", "html")  # no size: last, and its failure is its own
    outcomes = list(conversions(Settings(convert_workers=1), DocumentConverter(), [missing, *jobs]))
    assert [index for index, _ in outcomes] == [2, 3, 1, 0]
    assert [outcome.error is None for _, outcome in outcomes] == [True, True, True, False]


def test_a_document_that_hangs_or_kills_its_worker_fails_alone(tmp_path: Path) -> None:
    hangs, dies = tmp_path / "hangs.pdf", tmp_path / "dies.pdf"
    os.mkfifo(hangs)  # opening a FIFO nobody writes to blocks
    os.mkfifo(dies)  # once the killer opens it, its reader blocks reading the first bytes until it is killed
    good = [(DOCUMENTS / "lorem_ipsum.docx", "docx"), (DOCUMENTS / "example_03.html", "html")]
    jobs = [(hangs, "pdf"), (dies, "pdf"), *good]

    def kill_the_reader() -> None:
        with dies.open("wb"):  # returns once a worker has opened the FIFO to read it
            os.kill(reader_of(dies), signal.SIGKILL)

    killer = threading.Thread(target=kill_the_reader)
    killer.start()
    with WorkerPool(2, functools.partial(worker_handler, "native"), timeout_s=10) as pool:
        results = dict(pool.run(jobs))
    killer.join()

    assert results[0] == Lost("its worker process was stopped after 10 s")
    assert results[1] == Lost("its worker process died (killed by SIGKILL)")
    converter = DocumentConverter()
    for index, job in enumerate(good, start=2):
        result = results[index]
        assert isinstance(result, Outcome) and result.converted == convert_outcome(converter, *job).converted


@pytest.mark.slow
def test_ingest_records_a_failing_document_of_the_pool_as_its_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                     data_dir: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    for number in range(STEP_DOCUMENTS):
        (root / f"page{number}.html").write_text(f"<html><body><h1>Page {number}</h1><p>Text {number}.</p></body></html>")
    (root / "corrupt.pdf").write_bytes(b"%PDF-1.7\n" + bytes(range(256)) * 40)
    monkeypatch.setenv("RAG_CONVERT_WORKERS", "2")

    summary = ingest([root], data_dir)

    assert summary["added"] == STEP_DOCUMENTS
    assert [failure["path"].rsplit("/", 1)[-1] for failure in summary["failed"]] == ["corrupt.pdf"]
    assert summary["failed"][0]["error"].startswith("not a valid PDF")


def test_an_ingest_with_documents_for_docling_starts_their_workers_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data_dir: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "notes.md").write_text("# Notes\n\nplain text needs no docling\n")

    def pending() -> bool:
        rag = RagResource(roots=[str(root)], data_dir=str(data_dir))
        with rag.vector_store() as store:
            manifest = rag.manifest(record=False)
            return docling_pending(rag.settings, manifest, pending_shards(rag.settings, manifest, rag.sidecar(),
                                                                          store))

    assert not pending()  # text alone
    (root / "page.html").write_text("<html><body><h1>Page</h1><p>Converted by docling.</p></body></html>")
    assert pending()
    started: list[bool] = []
    monkeypatch.setattr(ingest_runner, "start_conversion_workers", lambda: started.append(True))
    assert ingest([root], data_dir)["added"] == 2
    assert started == [True] and not pending()  # converted: nothing left for docling
    assert ingest([root], data_dir)["added"] == 0 and started == [True]  # a no-change ingest starts no worker


def test_the_cli_starts_the_conversion_workers_before_its_imports_when_docling_has_work(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data_dir: Path, capsys: pytest.CaptureFixture,
        caplog: pytest.LogCaptureFixture) -> None:
    """`rag-pipeline ingest` looks (hashing nothing) for a file docling converts that is new, changed or not yet
    converted, and then starts the workers' forkserver before it imports Dagster; a no-change ingest starts none,
    and neither do files discovery refuses or ignores."""
    root = tmp_path / "docs"
    root.mkdir()
    (root / "notes.md").write_text("# Notes\n\nplain text needs no docling\n")
    settings = Settings(data_dir=data_dir)
    assert not conversions_ahead(settings, [root])  # text alone
    (root / "empty.pdf").write_bytes(b"")
    assert not conversions_ahead(settings, [root])  # refused by discovery (an empty file)
    page = root / "page.html"
    page.write_text("<html><body><h1>Page</h1><p>Converted by docling.</p></body></html>")
    assert conversions_ahead(settings, [root])  # never scanned

    started: list[str] = []
    monkeypatch.setattr(convert, "start_conversion_workers", lambda: started.append("cli"))
    monkeypatch.setattr(ingest_runner, "start_conversion_workers", lambda: started.append("runner"))

    def cli_ingest() -> dict:
        assert main(["ingest", str(root), "--data-dir", str(data_dir), "--json"]) == 0
        return json.loads(capsys.readouterr().out)

    assert cli_ingest()["added"] == 2 and started == ["cli", "runner"]
    assert not conversions_ahead(settings, [root])  # scanned and converted
    (root / "link.html").symlink_to(page)  # the cache knows a file symlink by its target
    assert not conversions_ahead(settings, [root])
    started.clear()
    assert cli_ingest()["added"] == 0 and started == []

    (data_dir / "hash_cache.json").write_text('{"truncated": [1, ')  # a kill mid-write, before writes were atomic
    assert conversions_ahead(settings, [root])  # nothing known: a guess
    assert cli_ingest()["added"] == 0 and started == ["cli"]  # discovery hashes again and finds nothing new
    assert "hash_cache.json is unreadable" in caplog.text
    assert not conversions_ahead(settings, [root])  # the scan wrote a whole cache again

    page.write_text("<html><body><h1>Page</h1><p>Edited: converted again.</p></body></html>")
    assert conversions_ahead(settings, [root])  # changed since the scan
    two_workers = argparse.Namespace(roots=[str(root)], source=None)
    assert not start_conversions_early(two_workers, Settings(data_dir=data_dir, ingest_workers=2))
    started.clear()
    assert start_conversions_early(two_workers, settings) and started == ["cli"]
    (root / "ignored.pdf").write_bytes(b"%PDF-1.4 never converted")
    monkeypatch.setenv("RAG_IGNORE", "ignored.pdf")
    page.unlink()
    (root / "link.html").unlink()
    assert not conversions_ahead(Settings(data_dir=data_dir), [root])  # what discovery ignores is no work


def test_the_cli_looks_for_conversions_before_importing_dagster(tmp_path: Path) -> None:
    """In a fresh interpreter: the CLI's early start happens while Dagster is not imported yet."""
    root = tmp_path / "docs"
    root.mkdir()
    (root / "page.html").write_text("<html><body><h1>Page</h1></body></html>")
    script = f"""
import sys
from rag_pipeline.ingest import convert
class Stop(Exception):
    pass
def start():
    print(["dagster" in sys.modules])
    raise Stop
convert.start_conversion_workers = start
from rag_pipeline.serve.cli import main
try:
    main(["ingest", {str(root)!r}, "--data-dir", {str(tmp_path / "data")!r}])
except Stop:
    pass
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.stdout.strip().splitlines()[-1:] == ["[False]"], done.stdout + done.stderr
