"""Secrets never survive a real ingest: planted secrets in every format (bodies, fields, rosters, file names), the
unredacted artifacts owner-only or dropped, a document holding a secret the redactor misses failing alone, and the
blocking check reading what was released."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from rag_pipeline.components import load_settings
from rag_pipeline.defs.ingest_runner import ingest
from rag_pipeline.ingest.artifacts import DROPPED
from rag_pipeline.ingest.redact import released_secrets
from rag_pipeline.ingest.stage import UNREDACTED, stores
from rag_pipeline.sidecar import Sidecar
from rag_pipeline_tests.secrets_corpus import ingest_and_measure

SECRET_NOTE = "# Access\n\nthe password: Wombat-Lantern-5567 for the admin account\n\nThe admin password is Tr0ub4dor&3x.\n"
SECRETS = ("Wombat-Lantern-5567", "Tr0ub4dor&3x")
GROUP_ID = "AGPAQ6UGNUCBASU4ZUZA"  # an AWS group id: the detector's format list has it, the redactor's rules do not


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
    # in bodies, in the fields of every format but plain text, in roster cells and in file names
    assert {(p.where, p.kind) for p in corpus.secrets} >= {("field", "password"), ("roster", "password"),
                                                            ("name", "github_token")}
    assert {p.where for p in corpus.benign} == {"body", "field", "roster", "name"}
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


def test_a_secret_the_redactor_misses_fails_its_document_alone(tmp_path: Path) -> None:
    """The detector flags a token the redactor misses (an AWS group id in a DOCX core property, a password in a
    line): each document fails alone with where and what kind, never the secret, and every other document, of
    this run and of later runs, is indexed."""
    import docx

    root, data_dir = tmp_path / "docs", tmp_path / "data"
    root.mkdir()
    (root / "root.md").write_text("# Root\n\nLog in with Kx7#pW2q!mZ, the new root password.\n")
    document = docx.Document()
    document.add_paragraph("Quarterly access review of the platform team.")
    document.core_properties.subject = GROUP_ID
    document.save(root / "review.docx")
    (root / "notes.md").write_text("# Notes\n\nDeploys happen on Tuesdays.\n")
    first = ingest([root], data_dir)
    failed = {Path(failure["path"]).name: failure["error"] for failure in first["failed"]}
    assert first["added"] == 1 and sorted(failed) == ["review.docx", "root.md"]
    assert "aws_access_key_id in field subject" in failed["review.docx"]
    assert "credential on line 3" in failed["root.md"]
    assert all("withheld" in error and "Kx7#pW2q!mZ" not in error and GROUP_ID not in error
               for error in failed.values())
    (root / "more.md").write_text("# More\n\nA second note with nothing secret in it.\n")
    second = ingest([root], data_dir)  # later runs go on: the withheld documents stay failed, not pending
    assert second["added"] == 1 and sorted(Path(f["path"]).name for f in second["failed"]) == sorted(failed)
    settings = load_settings(data_dir=data_dir)
    rows = {Path(row["paths"][0]).name: row for row in Sidecar(settings.sidecar_path).documents().values()}
    assert {name: row["status"] for name, row in rows.items()} == {
        "review.docx": "failed", "root.md": "failed", "notes.md": "ok", "more.md": "ok"}
    assert ingest([root], data_dir)["shards"] == []  # the withheld documents leave their shards in sync
    released = files_text(stores(settings)["redacted"].dir) + files_text(stores(settings)["chunks"].dir)
    assert "Kx7#pW2q!mZ" not in released and GROUP_ID not in released
    assert "Deploys happen on Tuesdays." in released


def test_no_secret_survives_reads_what_was_released(tmp_path: Path) -> None:
    """The blocking check reads the released artifacts back with the independent detector, fields with their
    names: it fails on a text or a field that went out holding a secret."""
    settings = load_settings(data_dir=tmp_path / "data")
    redacted = stores(settings)["redacted"]
    redacted.write_text("0", "a" * 64, "md", "# Fine\n\nNothing to see.\n")
    fields = {"values": {"subject": {"kind": "string", "value": GROUP_ID, "origin": "docx"}}, "errors": []}
    redacted.write_json("0", "a" * 64, "json", {"counts": {}, "fields": fields})
    redacted.write_text("0", "b" * 64, "md", "# Root\n\nThe root password is Kx7#pW2q!mZ now.\n")
    redacted.write_json("0", "b" * 64, "json", {"counts": {}, "fields": None})
    redacted.write_text("0", "c" * 64, "md", "# Clean\n")
    redacted.write_json("0", "c" * 64, "json", {"counts": {}, "fields": None})
    released = [("0", "a" * 64), ("0", "b" * 64), ("0", "c" * 64)]
    assert released_secrets(redacted, released, {"a" * 64: "a.docx"}) == [
        "a.docx: released with a secret (aws_access_key_id in field subject)",
        f"{'b' * 64}: released with a secret (credential on line 3)"]


def test_a_secret_in_a_file_name_is_not_embedded_or_shown(tmp_path: Path) -> None:
    """A file named `api_key=ghp_....md`: its name reached the embedded context line, the payload paths and so the
    citations. What is embedded and shown now has it redacted; the sidecar keeps the real path, by which the file
    is found (and re-synced: a second ingest has nothing to do)."""
    from rag_pipeline.components import open_retriever

    from .test_index_sync import hits_for_token

    token = "ghp_" + "Q7w8E9r0T1" * 4
    root, data_dir = tmp_path / "docs", tmp_path / "data"
    (root / f"keys_{token}").mkdir(parents=True)
    (root / f"keys_{token}" / f"api_key={token}.md").write_text("# Deploy notes\n\nThe deploy runs nightly.\n")
    (root / "plain.md").write_text("# Plain\n\nNothing to hide about the nightly deploy.\n")
    assert ingest([root], data_dir)["added"] == 2
    shown = "/[REDACTED:high_entropy]/api_key=[REDACTED:github_token].md"  # the folder name, the file name
    assert hits_for_token(data_dir, token) == []  # the context line's BM25 terms hold no part of it
    retriever = open_retriever(load_settings(data_dir=data_dir))
    try:
        results = retriever.search("when does the deploy run", top_k=5).to_json()["results"]
    finally:
        retriever.close()
    assert {Path(hit["path"]).name for hit in results} == {"plain.md", "api_key=[REDACTED:github_token].md"}
    assert any(hit["path"].endswith(shown) for hit in results) and token not in repr(results)
    settings = load_settings(data_dir=data_dir)
    assert token not in files_text(stores(settings)["chunks"].dir)
    rows = Sidecar(settings.sidecar_path).documents().values()
    assert any(row["paths"][0].endswith(f"api_key={token}.md") for row in rows)  # the real path, to find the file
    assert ingest([root], data_dir)["shards"] == []
