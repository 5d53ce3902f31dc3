"""An adversarial document set (tools/adversarial_corpus.py) through a real ingest: deep nesting, a huge text, ZIP
bombs, executables in disguise, a PDF over the page limit and a secret the redactor misses each fail alone, named
with their reason in the summary and in the sidecar, while every good document, prompt injection in every field kind
included, is indexed; a second ingest has nothing to do."""

from __future__ import annotations

import resource
import time
from pathlib import Path

import pytest

from rag_pipeline.components import load_settings
from rag_pipeline.defs.ingest_runner import ingest
from rag_pipeline.sidecar import Sidecar
from rag_pipeline_tests.sidecar_sql import sql_rows

from .conftest import REPO

pytestmark = pytest.mark.slow


def test_bad_documents_fail_alone_and_good_ones_are_indexed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO / "tools"))
    import adversarial_corpus as adversarial

    sources = adversarial.build(tmp_path / "set")
    monkeypatch.setenv("RAG_SOURCES_FILE", str(sources))
    monkeypatch.setenv("RAG_MAX_PDF_PAGES", "50")
    data_dir = tmp_path / "data"
    started = time.monotonic()
    summary = ingest(data_dir=data_dir)
    seconds = time.monotonic() - started
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    print(f"adversarial ingest: {seconds:.1f} s, peak RSS of the test process {peak_mib} MiB")

    failed = {Path(failure["path"]).name: failure["error"] for failure in summary["failed"]}
    assert sorted(failed) == sorted(adversarial.BAD)
    for name, reason in adversarial.BAD.items():
        assert reason in failed[name], (name, failed[name])
    assert summary["added"] == len(adversarial.GOOD)
    settings = load_settings(data_dir=data_dir)
    sidecar = Sidecar(settings.sidecar_path)
    status = {Path(row["paths"][0]).name: (row["status"], row["error"]) for row in sidecar.documents().values()}
    assert {name for name, (state, _) in status.items() if state == "ok"} == set(adversarial.GOOD)
    refused = {Path(row["path"]).name: row["reason"] for row in sidecar.source_errors()}
    for name, reason in adversarial.BAD.items():  # refused at discovery, or failed at conversion or redaction
        recorded = refused.get(name) or status[name][1]
        assert status.get(name, ("refused",))[0] in ("failed", "refused") and reason in recorded
    everything = repr(sql_rows(sidecar, "SELECT * FROM documents")) + repr(summary)
    assert adversarial.MISSED_TOKEN not in everything
    # Injection in a title, a front matter field, a DOCX property, an HTML meta tag and a roster cell is data: stored
    # as stated (the query side marks it where it is shown).
    stored = repr(sql_rows(sidecar, "SELECT text_value FROM document_fields")) + repr(
        sql_rows(sidecar, "SELECT text_value FROM roster_values"))
    assert stored.count(adversarial.INJECTION) >= 5
    assert ingest(data_dir=data_dir)["shards"] == []
