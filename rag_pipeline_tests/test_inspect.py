"""`rag-pipeline inspect` on the ingested sample corpus: documents, chunks, failures, redactions, collection."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rag_pipeline.defs.ingest_runner import ingest
from rag_pipeline.serve.cli import main


def inspect_json(data_dir: Path, capsys: pytest.CaptureFixture, *view: str) -> object:
    assert main(["inspect", *view, "--json", "--data-dir", str(data_dir)]) == 0
    return json.loads(capsys.readouterr().out)


def test_inspect_documents_and_filters(sample_index: tuple[Path, Path], capsys: pytest.CaptureFixture) -> None:
    _, data_dir = sample_index
    rows = inspect_json(data_dir, capsys, "documents")
    assert len(rows) == 14 and {row["status"] for row in rows} == {"ok"}
    assert {row["type"] for row in rows} == {"md", "txt", "pdf", "docx", "html", "pptx"}
    pdfs = inspect_json(data_dir, capsys, "documents", "--type", "pdf")
    assert len(pdfs) == 2 and all(row["path"].endswith(".pdf") and row["pages"] >= 1 for row in pdfs)
    runbook = inspect_json(data_dir, capsys, "documents", "--path", "incident-runbook")
    assert len(runbook) == 1 and runbook[0]["redactions"] >= 4 and runbook[0]["chunks"] > 0
    assert main(["inspect", "documents", "--data-dir", str(data_dir)]) == 0
    table = capsys.readouterr().out
    assert table.startswith("documents (14)") and "incident-runbook.md" in table


def test_inspect_chunks_of_a_document(sample_index: tuple[Path, Path], capsys: pytest.CaptureFixture) -> None:
    _, data_dir = sample_index
    chunks = inspect_json(data_dir, capsys, "chunks", "papers/word-processor-history.pdf")
    assert chunks and [chunk["index"] for chunk in chunks] == list(range(len(chunks)))
    assert all(chunk["page"] >= 1 for chunk in chunks) and any(chunk["heading"] for chunk in chunks)
    assert all(chunk["text"] for chunk in chunks)
    assert main(["inspect", "chunks", "nope.md", "--data-dir", str(data_dir)]) == 2
    assert "no documents match 'nope.md'" in capsys.readouterr().err


def test_inspect_redactions_and_collection(sample_index: tuple[Path, Path], capsys: pytest.CaptureFixture) -> None:
    _, data_dir = sample_index
    kinds = {row["kind"]: row for row in inspect_json(data_dir, capsys, "redactions")}
    assert kinds["email"]["findings"] >= 2 and kinds["email"]["documents"] >= 1
    info = inspect_json(data_dir, capsys, "collection")
    documents = inspect_json(data_dir, capsys, "documents")
    assert info["points"] == sum(row["chunks"] for row in documents) and info["segments"] >= 1
    assert info["backend"] == "embedded" and {"path", "sha", "doc_type"} <= set(info["payload_indexes"])
    assert info["index_version"] != "0"


def test_inspect_failures(corpus: Path, data_dir: Path, capsys: pytest.CaptureFixture) -> None:
    for path in list(corpus.rglob("*")):
        if path.is_file() and path.suffix not in (".md",):
            path.unlink()
    (corpus / "broken.pdf").write_bytes(b"%PDF-1.4 this is not really a pdf")
    (corpus / "empty.md").write_text("")
    shutil.rmtree(corpus / "web", ignore_errors=True)
    ingest([corpus], data_dir)
    failures = {Path(row["path"]).name: row for row in inspect_json(data_dir, capsys, "failures")}
    assert {"broken.pdf", "empty.md"} <= set(failures)
    assert all(row["reason"] for row in failures.values())
