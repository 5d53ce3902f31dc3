"""Secrets never survive a real ingest: planted secrets in every format, the unredacted artifacts owner-only or
dropped, and the blocking check failing the run on a secret the redactor misses."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from rag_pipeline.components import load_settings
from rag_pipeline.defs.ingest_runner import ingest
from rag_pipeline.errors import IngestFailed
from rag_pipeline.ingest.artifacts import DROPPED
from rag_pipeline.ingest.stage import UNREDACTED, stores
from rag_pipeline_tests.secrets_corpus import ingest_and_measure

SECRET_NOTE = "# Access\n\nthe password: Wombat-Lantern-5567 for the admin account\n\nThe admin password is Tr0ub4dor&3x.\n"
SECRETS = ("Wombat-Lantern-5567", "Tr0ub4dor&3x")


def modes(root: Path) -> dict[str, int]:
    """Relative path -> permission bits of every file and folder under root."""
    return {str(path.relative_to(root)): stat.S_IMODE(path.stat().st_mode) for path in [root, *root.rglob("*")]}


def files_text(folder: Path) -> str:
    return "\n".join(path.read_bytes().decode("utf-8", "replace") for path in folder.rglob("*") if path.is_file())


@pytest.mark.slow
def test_no_planted_secret_survives_and_benign_strings_stay(tmp_path: Path) -> None:
    measured = ingest_and_measure(tmp_path / "corpus", tmp_path / "data")
    print(measured.report())
    corpus = measured.corpus
    assert len(corpus.secrets) >= 60 and len({p.kind for p in corpus.secrets}) >= 15 and len(corpus.benign) >= 40
    assert {name.rsplit(".", 1)[1] for name in corpus.files} == {"md", "txt", "html", "docx", "pdf", "pptx"}
    assert measured.lost_in_conversion == []  # every planted string reached redaction verbatim
    assert measured.leaks == {name: [] for name in measured.leaks}
    assert measured.recall == 1.0
    assert measured.false_redaction_rate <= 0.05
    settings = load_settings(data_dir=tmp_path / "data")
    for stage in UNREDACTED:
        folder = stores(settings)[stage].dir
        assert {mode for name, mode in modes(folder).items() if (folder / name).is_dir()} == {0o700}
        assert {mode for name, mode in modes(folder).items() if (folder / name).is_file()} == {0o600}


def test_dropped_unredacted_artifacts_keep_the_shards_in_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAG_KEEP_UNREDACTED", "false")
    root, data_dir = tmp_path / "docs", tmp_path / "data"
    root.mkdir()
    (root / "access.md").write_text(SECRET_NOTE)
    (root / "notes.txt").write_text("Deploys happen on Tuesdays.\nThe token is valid for one hour.\n")
    (root / "broken.pdf").write_bytes(b"%PDF-1.4 not really a pdf")
    first = ingest([root], data_dir)
    assert [failure["path"] for failure in first["failed"]] == [str((root / "broken.pdf").resolve())]
    settings = load_settings(data_dir=data_dir)
    raw, markdown = stores(settings)["raw"], stores(settings)["markdown"]
    assert {path.suffix for path in raw.dir.rglob("*.*")} == {f".{DROPPED}"}
    assert {path.name.split(".", 1)[1] for path in markdown.dir.rglob("*.*")} == {DROPPED, "json", "error.json"}
    assert not any(secret in files_text(settings.artifacts_dir) for secret in SECRETS)
    assert "Deploys happen on Tuesdays." in files_text(stores(settings)["redacted"].dir)
    again = ingest([root], data_dir)
    assert again["shards"] == [] and again["added"] == 0
    (root / "more.md").write_text("# More\n\nA second note with nothing secret in it.\n")
    third = ingest([root], data_dir)
    assert third["added"] == 1 and ingest([root], data_dir)["shards"] == []


def test_secret_the_redactor_misses_fails_the_check_and_the_run(tmp_path: Path) -> None:
    root, data_dir = tmp_path / "docs", tmp_path / "data"
    root.mkdir()
    (root / "root.md").write_text("# Root\n\nLog in with Kx7#pW2q!mZ, the new root password.\n")
    for _ in range(2):  # no redacted output is written, so the check fails on every run, not once
        with pytest.raises(IngestFailed, match=r"no_secret_survives.*root\.md: 1 secret\(s\) survived"):
            ingest([root], data_dir)
    settings = load_settings(data_dir=data_dir)
    assert "Kx7#pW2q!mZ" not in files_text(stores(settings)["redacted"].dir)
    assert not stores(settings)["chunks"].dir.exists() or "Kx7#pW2q!mZ" not in files_text(stores(settings)["chunks"].dir)
