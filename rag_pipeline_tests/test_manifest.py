"""The manifest dry run: `rag-pipeline manifest` and the source_manifest asset report every file with its
status and reason, coverage and redaction findings, and convert nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import dagster as dg
import pytest

from rag_pipeline.defs.assets import source_manifest
from rag_pipeline.defs.resources import RagResource
from rag_pipeline.serve.cli import main

SECRET_DOC = ("# Access\n\nThe key is AKIAIOSFODNN7EXAMPLE and the owner is maria.keller@nimbus-search.example.\n"
              "Ask the team for details.\n")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    (root / "notes").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    (root / "access.md").write_text(SECRET_DOC)
    (root / "notes" / "plain.txt").write_text("Pumps are inspected monthly.\n" * 20)
    (root / "notes" / "copy.txt").write_text("Pumps are inspected monthly.\n" * 20)  # same bytes: one document
    (root / "empty.md").write_text("")
    (root / "diagram.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)
    (root / "notes" / ".DS_Store").write_bytes(b"\0\0\0\1Bud1")
    outside = tmp_path / "outside.md"
    outside.write_text("# Outside\n\nNot under the root.\n")
    os.symlink(outside, root / "escape.md")
    return root


def test_manifest_command_reports_every_file(tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    data_dir = tmp_path / "data"
    assert main(["manifest", str(tree), "--json", "--data-dir", str(data_dir)]) == 0
    report = json.loads(capsys.readouterr().out)
    by_name = {Path(row["path"]).name: row for row in report["files"]}
    assert {name: row["status"] for name, row in by_name.items()} == {
        "access.md": "included", "plain.txt": "included", "copy.txt": "included", "empty.md": "refused",
        "escape.md": "refused", "diagram.png": "excluded", ".DS_Store": "excluded", ".git": "excluded"}
    assert by_name["empty.md"]["reason"] == "empty file"
    assert "outside the root" in by_name["escape.md"]["reason"]
    assert "type .png is not ingested" in by_name["diagram.png"]["reason"]
    assert "pattern '**/.DS_Store'" in by_name[".DS_Store"]["reason"]
    assert "folder ignored by pattern '.git/**'" in by_name[".git"]["reason"]
    summary = report["summary"]
    assert (summary["included"], summary["documents"], summary["refused"], summary["excluded"]) == (3, 2, 2, 3)
    assert report["by_type"] == {"md": {"files": 1, "bytes": len(SECRET_DOC)},
                                 "txt": {"files": 2, "bytes": 2 * 29 * 20}}
    assert report["by_folder"] == {"(root)": {"files": 1, "bytes": len(SECRET_DOC)},
                                   "notes": {"files": 2, "bytes": 2 * 29 * 20}}
    assert [Path(row["path"]).name for row in report["largest"]][:2] == ["copy.txt", "plain.txt"]
    assert [Path(path).name for path in report["empty"]] == ["empty.md"]
    [finding] = report["redactions"]
    assert Path(finding["path"]).name == "access.md" and finding["findings"] == {"aws_access_key": 1, "email": 1}
    assert not data_dir.exists()  # a dry run writes nothing

    assert main(["manifest", str(tree), "--data-dir", str(data_dir)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("3 files included (2 distinct documents") and "excluded" in text
    assert main(["manifest", str(tree / "missing")]) == 2


def test_source_manifest_asset(tree: Path, tmp_path: Path) -> None:
    rag = RagResource(roots=[str(tree)], data_dir=str(tmp_path / "data"))
    result = dg.materialize([source_manifest], resources={"rag": rag})
    metadata = result.asset_materializations_for_node("source_manifest")[0].metadata
    assert (metadata["included_files"].value, metadata["refused_files"].value,
            metadata["excluded_files"].value, metadata["would_redact_files"].value) == (3, 2, 3, 1)
    assert "| md | 1 |" in metadata["by_type"].value and "| notes | 2 |" in metadata["by_top_folder"].value
    assert "empty file" in metadata["not_included"].value and "aws_access_key 1" in metadata["would_redact"].value
    assert metadata["by_tag"].value == "no tag rules (RAG_CORPUS_RULES)"
    assert not (tmp_path / "data" / "artifacts").exists()  # nothing converted


RULES = """
include: ["**/*.md", "**/*.txt"]
exclude: ["notes/copy.txt"]
types: [md, txt, pdf]
min_bytes: 1
max_bytes: 1000
"""


def manifest_with_rules(text: str, tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
                        monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict, dict[str, dict]]:
    """Write the rules, set RAG_CORPUS_RULES and run `manifest --json`: (rules path, report, file rows by name)."""
    rules = tmp_path / "rules.yaml"
    rules.write_text(text)
    monkeypatch.setenv("RAG_CORPUS_RULES", str(rules))
    assert main(["manifest", str(tree), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    return rules, report, {Path(row["path"]).name: row for row in report["files"]}


def test_corpus_rules_in_the_manifest_and_the_ingest(tree: Path, tmp_path: Path, capsys: pytest.CaptureFixture,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from rag_pipeline.defs.ingest_runner import ingest
    from rag_pipeline.sidecar import Sidecar

    (tree / "notes" / "big.md").write_text("# Big\n\n" + "word " * 400)
    rules, report, by_name = manifest_with_rules(RULES, tree, tmp_path, capsys, monkeypatch)
    assert by_name["access.md"]["status"] == "included" and by_name["plain.txt"]["status"] == "included"
    assert by_name["copy.txt"]["reason"] == f"excluded by pattern 'notes/copy.txt' of {rules}"
    assert by_name["big.md"]["reason"].endswith(f"is above max_bytes 1,000 of {rules}")
    assert by_name["diagram.png"]["status"] == "excluded"  # not an accepted type in the first place
    summary = ingest([tree], tmp_path / "data")
    assert summary["added"] == 2 and all(not item["path"].endswith(("copy.txt", "big.md")) for item in summary["failed"])
    stored = {Path(row["paths"][0]).name for row in Sidecar(tmp_path / "data" / "sidecar.duckdb").documents().values()}
    assert stored == {"access.md", "plain.txt"}  # the ingest obeys the rules too


def test_corpus_rules_errors(tmp_path: Path) -> None:
    from rag_pipeline.ingest.corpus_rules import load_rules

    bad = tmp_path / "rules.yaml"
    bad.write_text("include: docs/**\ntypes: [md, exe]\nmax_bytes: -1\ncolour: red\n"
                   "tags:\n  legal/**: [legal, 'two words']\n  hr/**: []\n  ops/**: runbook\n"
                   "  it/**: \"policy\\n\"\n")
    with pytest.raises(ValueError) as raised:
        load_rules(bad)
    message = str(raised.value)
    for expected in ("unknown key 'colour'", "include must be a list of strings", "unknown type(s) exe",
                     "max_bytes must be a whole number", "tags of 'legal/**' must be a tag or a list of tags",
                     "tags of 'hr/**'", "tags of 'it/**'"):
        assert expected in message
    assert "ops/**" not in message
    bad.write_text("tags: [policy]\n")
    with pytest.raises(ValueError, match="tags must be a mapping of glob: tag"):
        load_rules(bad)


def test_tags_for_unions_every_matching_pattern(tmp_path: Path) -> None:
    from rag_pipeline.ingest.corpus_rules import load_rules

    path = tmp_path / "rules.yaml"
    path.write_text('tags:\n  "handbook/**": policy\n  "**/*.pdf": [scanned, policy]\n'
                    '  "legal/contracts/*": contract\n')
    rules = load_rules(path)
    assert rules.tags_for("handbook/leave.md") == ("policy",)
    assert rules.tags_for("handbook/forms/leave.pdf") == ("policy", "scanned")
    assert rules.tags_for("leave.pdf") == ("policy", "scanned")  # "**/x" also matches at the top
    assert rules.tags_for("legal/contracts/nda.md") == ("contract",)
    assert rules.tags_for("legal/contracts/old/nda.md") == ("contract",)  # fnmatch: "*" also crosses "/"
    assert rules.tags_for("legal/nda.md") == ()
    assert rules.tags_for("notes/todo.md") == ()
    assert rules.exclusion("notes/todo.md", "md", 10) is None  # tags alone exclude nothing


TAG_RULES = """
tags:
  "notes/**": maintenance
  "access.md": [security, policy]
  "legal/**": legal
"""


def test_tags_in_the_manifest_the_index_search_and_inspect(tree: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from rag_pipeline.defs.ingest_runner import ingest

    _, report, by_name = manifest_with_rules(TAG_RULES, tree, tmp_path, capsys, monkeypatch)
    assert by_name["plain.txt"]["tags"] == ["maintenance"] and by_name["access.md"]["tags"] == ["policy", "security"]
    assert report["by_tag"] == {"maintenance": {"files": 2, "bytes": 2 * 29 * 20},
                                "policy": {"files": 1, "bytes": len(SECRET_DOC)},
                                "security": {"files": 1, "bytes": len(SECRET_DOC)}}
    assert report["untagged"] == 0 and report["unmatched_tag_patterns"] == ["legal/**"]
    assert by_name["empty.md"]["tags"] == [] and by_name["diagram.png"]["tags"] == []
    assert main(["manifest", str(tree)]) == 0
    text = capsys.readouterr().out
    assert "by tag (0 files untagged):\n  maintenance" in text
    assert "tag patterns that match no included file: legal/**" in text
    rag = RagResource(roots=[str(tree)], data_dir=str(tmp_path / "dry"))
    metadata = dg.materialize([source_manifest], resources={"rag": rag}).asset_materializations_for_node(
        "source_manifest")[0].metadata
    assert "| maintenance | 2 |" in metadata["by_tag"].value and "| (untagged) | 0 |" in metadata["by_tag"].value
    assert "Tag patterns that match no included file: `legal/**`" in metadata["by_tag"].value

    data_dir = tmp_path / "data"
    assert ingest([tree], data_dir)["failed"][0]["error"] == "empty file"
    rows = json.loads(run_cli(capsys, "inspect", "documents", "--tag", "security", "--json",
                              "--data-dir", str(data_dir)))
    assert [(Path(row["path"]).name, row["tags"]) for row in rows] == [("access.md", "policy,security")]
    found = json.loads(run_cli(capsys, "search", "how often are pumps inspected", "--filter", "tags=maintenance",
                               "--json", "--data-dir", str(data_dir)))
    assert found["results"] and {tuple(hit["tags"]) for hit in found["results"]} == {("maintenance",)}
    none = json.loads(run_cli(capsys, "search", "pumps", "--filter", "tags=legal", "--json",
                              "--data-dir", str(data_dir)))
    assert none["results"] == []


def run_cli(capsys: pytest.CaptureFixture, *args: str) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


def test_an_older_sidecar_gains_the_tags_column(tmp_path: Path) -> None:
    import duckdb

    from rag_pipeline.sidecar import DOCUMENT_COLUMNS, Sidecar

    path = tmp_path / "sidecar.duckdb"
    old_columns = {name: kind for name, kind in DOCUMENT_COLUMNS.items() if name != "tags"}
    with duckdb.connect(str(path)) as con:  # the documents table as it was before tags existed
        con.execute(f"CREATE TABLE documents ({', '.join(f'{n} {k}' for n, k in old_columns.items())})")
        con.execute("INSERT INTO documents (sha, shard, paths, doc_type, status) "
                    "VALUES ('a1', 'a', ['/d/x.md'], 'md', 'ok')")
    sidecar = Sidecar(path)
    assert sidecar.documents()["a1"]["tags"] is None and sidecar.documents()["a1"]["paths"] == ["/d/x.md"]
    sidecar.upsert([{"sha": "a1", "tags": ["policy"]}, {"sha": "b2", "shard": "b", "paths": ["/d/y.md"], "tags": []}])
    stored = sidecar.documents()
    assert (stored["a1"]["tags"], stored["a1"]["paths"], stored["a1"]["status"]) == (["policy"], ["/d/x.md"], "ok")
    assert stored["b2"]["tags"] == [] and stored["b2"]["shard"] == "b"
