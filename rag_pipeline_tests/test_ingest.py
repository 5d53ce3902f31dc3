"""Incremental sync end to end: real Dagster materialisations over real files, docling, DuckDB."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from rag_pipeline.components import load_settings
from rag_pipeline.defs.assets import INGEST_ASSETS, corpus_summary
from rag_pipeline.defs.ingest_runner import ingest
from rag_pipeline.defs.partitions import shard_runs
from rag_pipeline.defs.resources import RagResource
from rag_pipeline.defs.sensors import corpus_summary_after_ingest, source_files_sensor
from rag_pipeline.errors import IngestFailed
from rag_pipeline.ingest.chunk import read_chunks
from rag_pipeline.ingest.stage import stores
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar
from rag_pipeline_tests.sidecar_sql import sql_rows

from .conftest import REPO, SAMPLE_CORPUS


def sha_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def artifacts_of(settings: Settings, sha: str) -> list[Path]:
    shard = settings.shard_of(sha)
    return [path for store in stores(settings).values() for path in (store.dir / shard).glob(f"{sha}.*")]


def all_chunk_texts(settings: Settings) -> str:
    chunk_dir = stores(settings)["chunks"].dir
    return "\n".join(path.read_text() for path in chunk_dir.rglob("*.jsonl"))


def small_corpus(root: Path) -> Path:
    """Markdown and text documents only: fast to convert, enough to exercise every sync case."""
    for name in ["guides/installation.md", "guides/configuration.md", "ops/incident-runbook.md",
                 "reference/glossary.md", "notes/faq.txt", "notes/meeting-2026-03-12.txt"]:
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SAMPLE_CORPUS / name, target)
    return root


def edit_into_other_shard(path: Path, settings: Settings) -> None:
    """Append a line so the new content lands in a different shard from the old one."""
    old_shard = settings.shard_of(sha_of(path))
    original = path.read_text()
    for attempt in range(100):
        path.write_text(original + f"\nAddendum {attempt}: the retention default changed to 45 days.\n")
        if settings.shard_of(sha_of(path)) != old_shard:
            return
    raise AssertionError("could not move the document to another shard")


@pytest.mark.slow
def test_sample_corpus_ingests_every_type_and_reingest_does_nothing(corpus: Path, data_dir: Path) -> None:
    summary = ingest([corpus], data_dir)
    assert summary["failed"] == []
    assert summary["added"] == 14 and summary["chunks"] > 50
    settings = load_settings(data_dir=data_dir)
    rows = Sidecar(settings.sidecar_path).documents()
    assert len(rows) == 14
    assert {row["doc_type"] for row in rows.values()} == {"md", "txt", "pdf", "docx", "html", "pptx"}
    assert all(row["status"] == "ok" and row["chunks"] > 0 for row in rows.values())
    assert sum(row["chunks"] for row in rows.values()) == summary["chunks"]
    pdf = next(row for row in rows.values() if row["paths"][0].endswith("word-processor-history.pdf"))
    assert pdf["pages"] == 5
    pdf_chunks = read_chunks(settings, pdf["shard"], pdf["sha"])
    assert {1, 2, 3, 4} <= {chunk.page for chunk in pdf_chunks} <= {1, 2, 3, 4, 5}  # a chunk may span pages
    assert any("Rise of Personal Computers" in chunk.heading_path for chunk in pdf_chunks)

    config = next(row for row in rows.values() if row["paths"][0].endswith("configuration.md"))
    assert config["redactions"] >= 5
    assert config["title"] == config["first_heading"] == "Configuring Nimbus" and config["ingested_at"]
    sidecar = Sidecar(settings.sidecar_path)
    kinds = {r["kind"]: r["count"] for r in sql_rows(sidecar, "SELECT kind, count FROM redactions WHERE sha = ?",
                                                     [config["sha"]])}
    assert kinds["aws_access_key"] == 1 and kinds["password"] == 1 and kinds["jwt"] == 1
    assert sql_rows(sidecar, "SELECT count(*) AS n FROM chunks")[0]["n"] == summary["chunks"]
    runs = sql_rows(sidecar, "SELECT asset, added FROM runs WHERE list_contains(?, run_id) ORDER BY asset",
                    [summary["run_ids"]])
    assert {r["asset"]: r["added"] for r in runs}["raw_documents"] == 14 and len(runs) == 7
    texts = all_chunk_texts(settings)
    for secret in ["AKIAIOSFODNN7EXAMPLE", "Tr0ub4dor&3-staging", "xoxb-2048", "maria.keller@", "eyJhbGciOi"]:
        assert secret not in texts
    assert "support@nimbus-search.example" in texts

    mtimes = {path: path.stat().st_mtime_ns for path in settings.artifacts_dir.rglob("*")}
    again = ingest([corpus], data_dir)
    assert again["added"] == 0 and again["chunks"] == 0 and again["shards"] == []
    assert again["unchanged"] == 14 and again["run_ids"] == []
    assert mtimes == {path: path.stat().st_mtime_ns for path in settings.artifacts_dir.rglob("*")}


def test_edit_rename_duplicate_delete(tmp_path: Path, data_dir: Path) -> None:
    root = small_corpus(tmp_path / "docs")
    settings = load_settings(data_dir=data_dir)
    first = ingest([root], data_dir)
    assert first["added"] == 6 and first["failed"] == []
    sidecar = Sidecar(settings.sidecar_path)

    # Edit: the old SHA is purged from its shard, the new SHA added in another; nothing else is touched.
    edited = root / "guides" / "configuration.md"
    old_sha = sha_of(edited)
    edit_into_other_shard(edited, settings)
    new_sha = sha_of(edited)
    summary = ingest([root], data_dir)
    assert sorted(summary["shards"]) == sorted({settings.shard_of(old_sha), settings.shard_of(new_sha)})
    assert (summary["added"], summary["purged"], summary["moved"]) == (1, 1, 0)
    assert artifacts_of(settings, old_sha) == [] and old_sha not in sidecar.documents()
    assert len(artifacts_of(settings, new_sha)) == 7  # raw, md + json, redacted md + json, chunks, vectors
    assert "retention default changed to 45 days" in all_chunk_texts(settings)

    # Rename: same bytes, new path: recorded, not re-converted or re-chunked.
    chunk_file = stores(settings)["chunks"].path(settings.shard_of(new_sha), new_sha, "jsonl")
    before = chunk_file.stat().st_mtime_ns
    renamed = root / "guides" / "settings-reference.md"
    edited.rename(renamed)
    summary = ingest([root], data_dir)
    assert (summary["added"], summary["purged"], summary["moved"], summary["chunks"]) == (0, 0, 1, 0)
    assert sidecar.documents()[new_sha]["paths"] == [str(renamed)]
    assert chunk_file.stat().st_mtime_ns == before

    # Duplicate: stored once, both paths recorded.
    copy = root / "archive" / "settings-copy.md"
    copy.parent.mkdir()
    shutil.copy(renamed, copy)
    summary = ingest([root], data_dir)
    assert (summary["added"], summary["moved"]) == (0, 1)
    assert sorted(sidecar.documents()[new_sha]["paths"]) == sorted([str(copy), str(renamed)])
    assert len(sidecar.documents()) == 6

    # Delete one copy: still stored under the other path; delete both: purged everywhere.
    copy.unlink()
    assert ingest([root], data_dir)["moved"] == 1
    renamed.unlink()
    summary = ingest([root], data_dir)
    assert summary["purged"] == 1
    assert artifacts_of(settings, new_sha) == [] and new_sha not in sidecar.documents()
    assert "retention default changed to 45 days" not in all_chunk_texts(settings)
    assert len(sidecar.documents()) == 5


def test_bad_inputs_are_recorded_and_the_rest_is_ingested(tmp_path: Path, data_dir: Path) -> None:
    root = small_corpus(tmp_path / "docs")
    (root / "corrupt.pdf").write_bytes(b"%PDF-1.7\n" + bytes(range(256)) * 40)
    (root / "binary.md").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4)
    (root / "empty.txt").write_bytes(b"")
    outside = tmp_path / "elsewhere" / "private.md"
    outside.parent.mkdir()
    outside.write_text("# Private\n\nnot under the root")
    (root / "escape.md").symlink_to(outside)
    summary = ingest([root], data_dir)
    failed = {Path(item["path"]).name: item["error"] for item in summary["failed"]}
    assert set(failed) == {"corrupt.pdf", "binary.md", "empty.txt", "escape.md"}
    assert "binary content" in failed["binary.md"]
    assert failed["empty.txt"] == "empty file"
    assert "outside the root" in failed["escape.md"]
    assert failed["corrupt.pdf"]
    assert summary["added"] == 6  # the six good documents; the corrupt PDF, whose conversion failed, is in failed
    rows = Sidecar(load_settings(data_dir=data_dir).sidecar_path).documents()
    corrupt = next(row for row in rows.values() if row["paths"][0].endswith("corrupt.pdf"))
    assert corrupt["status"] == "failed" and corrupt["error"] == failed["corrupt.pdf"]
    assert sum(row["status"] == "ok" for row in rows.values()) == 6
    # A failed document is not retried while its bytes are unchanged, and is still reported.
    again = ingest([root], data_dir)
    assert again["shards"] == [] and len(again["failed"]) == 4


def test_blocking_check_stops_downstream_assets(tmp_path: Path, data_dir: Path) -> None:
    root = small_corpus(tmp_path / "docs")
    ingest([root], data_dir)
    settings = load_settings(data_dir=data_dir)
    victim = root / "notes" / "faq.txt"
    sha = sha_of(victim)
    shard = settings.shard_of(sha)
    stores(settings)["markdown"].path(shard, sha, "md").write_text("")  # a corrupted artifact
    newcomer = root / "notes" / "new.md"
    for attempt in range(200):  # a new document in the same shard triggers that shard's run
        newcomer.write_text(f"# New note {attempt}\n\nA note that lands in the victim's shard.\n")
        if settings.shard_of(sha_of(newcomer)) == shard:
            break
    with pytest.raises(IngestFailed, match="converted_documents_non_empty"):
        ingest([root], data_dir)
    assert not stores(settings)["redacted"].exists(shard, sha_of(newcomer), "md")


def test_sensor_requests_one_run_for_affected_shards(tmp_path: Path, data_dir: Path) -> None:
    root = small_corpus(tmp_path / "docs")
    rag = RagResource(roots=[str(root)], data_dir=str(data_dir))
    settings = rag.settings
    with dg.instance_for_test() as instance:
        first = source_files_sensor(dg.build_sensor_context(instance=instance, resources={"rag": rag}))
        assert len(first.run_requests) == 1
        request = first.run_requests[0]
        changed = request.tags["rag/changed_shards"].split(",")
        assert sorted(changed) == sorted({settings.shard_of(sha_of(p)) for p in root.rglob("*.*")})
        result = dg.materialize(INGEST_ASSETS, resources={"rag": rag}, instance=instance, tags=request.tags)
        assert result.success
        assert len(Sidecar(settings.sidecar_path).documents()) == 6

        # Unchanged tree: the cursor makes the tick request nothing.
        quiet = source_files_sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor,
                                                            resources={"rag": rag}))
        assert not quiet.run_requests and quiet.skip_reason

        # An edit requests exactly the old and the new shard, in one run.
        edited = root / "reference" / "glossary.md"
        old_shard = settings.shard_of(sha_of(edited))
        edit_into_other_shard(edited, settings)
        tick = source_files_sensor(dg.build_sensor_context(instance=instance, cursor=quiet.cursor,
                                                           resources={"rag": rag}))
        assert len(tick.run_requests) == 1
        tags = tick.run_requests[0].tags
        assert tags["rag/changed_shards"].split(",") == sorted({old_shard, settings.shard_of(sha_of(edited))})
        result = dg.materialize(INGEST_ASSETS, resources={"rag": rag}, instance=instance, tags=tags)
        assert result.success
        materialized = {event.partition for event in result.asset_materializations_for_node("chunks")}
        assert {old_shard, settings.shard_of(sha_of(edited))} <= materialized
        chunk_events = result.asset_materializations_for_node("chunks")
        chunk_meta = chunk_events[0].metadata
        assert chunk_meta["added"].value == 1 and chunk_meta["purged"].value == 1
        # Each shard's materialisation lists its own documents: the new version in one, the purged one in the other.
        records = {event.partition: event.metadata["documents"].value.records for event in chunk_events}
        assert all(record.data["shard"] == shard for shard, listed in records.items() for record in listed)
        # the edited document's ingest ends with the catalogue, after the chunks step: pending until then
        assert sorted(record.data["status"] for listed in records.values() for record in listed) == ["pending",
                                                                                                      "purged"]

        # A successful shard run requests the corpus summary refresh, which reads the sidecar.
        context = dg.build_run_status_sensor_context(
            sensor_name="corpus_summary_after_ingest", dagster_instance=instance,
            dagster_run=result.dagster_run, dagster_event=result.get_run_success_event(),
        )
        assert corpus_summary_after_ingest(context).run_key == result.run_id
        summary = dg.materialize([corpus_summary, *INGEST_ASSETS], selection=[corpus_summary],
                                 resources={"rag": rag}, instance=instance)
        metadata = summary.asset_materializations_for_node("corpus_summary")[0].metadata
        assert metadata["documents"].value == 6 and metadata["failed"].value == 0
        not_ingest = dg.build_run_status_sensor_context(  # the summary's own run must not trigger another
            sensor_name="corpus_summary_after_ingest", dagster_instance=instance,
            dagster_run=summary.dagster_run, dagster_event=summary.get_run_success_event(),
        )
        assert isinstance(corpus_summary_after_ingest(not_ingest), dg.SkipReason)
        assert metadata["redactions_by_kind"].value["aws_access_key"] == 1
        assert "| md | 4 |" in metadata["by_type"].value


def test_sensor_requests_the_shard_a_tag_rule_change_retags(tmp_path: Path, data_dir: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    root = small_corpus(tmp_path / "docs")
    rules = tmp_path / "rules.yaml"
    rules.write_text("tags:\n  ops/**: runbook\n")
    monkeypatch.setenv("RAG_CORPUS_RULES", str(rules))
    rag = RagResource(roots=[str(root)], data_dir=str(data_dir))
    settings = rag.settings
    with dg.instance_for_test() as instance:
        first = source_files_sensor(dg.build_sensor_context(instance=instance, resources={"rag": rag}))
        assert dg.materialize(INGEST_ASSETS, resources={"rag": rag}, instance=instance,
                              tags=first.run_requests[0].tags).success

        # Only the rules change: the tick requests the shard of the one document they re-tag.
        rules.write_text("tags:\n  ops/**: [runbook, on-call]\n")
        tick = source_files_sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor,
                                                           resources={"rag": rag}))
        runbook = root / "ops" / "incident-runbook.md"
        assert tick.run_requests[0].tags["rag/changed_shards"] == settings.shard_of(sha_of(runbook))
        result = dg.materialize(INGEST_ASSETS, resources={"rag": rag}, instance=instance,
                                tags=tick.run_requests[0].tags)
        assert result.success
        raw = result.asset_materializations_for_node("raw_documents")[0].metadata
        index = result.asset_materializations_for_node("vector_index")[0].metadata
        assert (raw["retagged"].value, raw["added"].value) == (1, 0)
        assert (index["retagged"].value, index["points_upserted"].value, index["moved"].value) == (1, 0, 0)
        [record] = index["documents"].value.records
        assert record.data["tags"] == "on-call, runbook" and record.data["path"] == str(runbook)
        embeddings = result.asset_materializations_for_node("embeddings")[0].metadata
        assert embeddings["vectors_computed"].value == 0
        quiet = source_files_sensor(dg.build_sensor_context(instance=instance, cursor=tick.cursor,
                                                            resources={"rag": rag}))
        assert not quiet.run_requests
        # Reverting the rules returns the shard to a digest seen before: still a new run key, so Dagster launches it.
        rules.write_text("tags:\n  ops/**: runbook\n")
        back = source_files_sensor(dg.build_sensor_context(instance=instance, cursor=tick.cursor,
                                                           resources={"rag": rag}))
        assert back.cursor == first.cursor
        assert back.run_requests[0].run_key not in {first.run_requests[0].run_key, tick.run_requests[0].run_key}
        rules.write_text("tags:\n  ops/**: [runbook, on-call]\n")
        summary = dg.materialize([corpus_summary, *INGEST_ASSETS], selection=[corpus_summary],
                                 resources={"rag": rag}, instance=instance)
        by_tag = summary.asset_materializations_for_node("corpus_summary")[0].metadata["by_tag"].value
        chunks = Sidecar(settings.sidecar_path).documents_by_sha([sha_of(runbook)])[sha_of(runbook)]["chunks"]
        assert f"| on-call | 1 | {chunks} |" in by_tag and f"| runbook | 1 | {chunks} |" in by_tag
        assert "| (untagged) | 5 |" in by_tag


HEX256 = [format(index, "02x") for index in range(256)]


def test_shard_runs_split_only_where_changed_shards_lie_far_apart() -> None:
    assert shard_runs(["f", "0", "3", "3"], [format(index, "x") for index in range(16)]) == [["0", "3", "f"]]
    assert shard_runs(["00", "11", "12", "40", "ff"], HEX256) == [["00", "11", "12"], ["40"], ["ff"]]  # 16 between
    assert shard_runs(["00", "12"], HEX256) == [["00"], ["12"]]  # 17 unchanged shards between: two runs
    assert shard_runs(["00", "12"], HEX256, max_gap=17) == [["00", "12"]]
    assert shard_runs([], HEX256) == []


@pytest.mark.slow
def test_far_apart_changes_over_256_shards_ingest_in_several_runs(tmp_path: Path) -> None:
    """With RAG_SHARD_HEX_DIGITS=2 (fixed when the definitions load, hence a subprocess), documents in far-apart
    shards are ingested by one run per group of nearby shards, and the summary adds up over the runs."""
    root = tmp_path / "docs"
    root.mkdir()
    for prefix in "08f":  # one note per region of the SHA space
        for attempt in range(10_000):
            text = f"# Pump hall {prefix}\n\nThe pumps in hall {prefix} are inspected every {attempt} days.\n"
            if hashlib.sha256(text.encode()).hexdigest().startswith(prefix):
                (root / f"hall-{prefix}.md").write_text(text)
                break
    env = {**os.environ, "RAG_SHARD_HEX_DIGITS": "2", "HF_HUB_OFFLINE": "1"}
    env.pop("DAGSTER_HOME", None)

    def ingest_cli() -> dict:
        done = subprocess.run([sys.executable, "-m", "rag_pipeline", "ingest", str(root), "--json", "--data-dir",
                               str(tmp_path / "data")], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout)

    first = ingest_cli()
    assert first["added"] == 3 and first["failed"] == [] and len(first["shards"]) == 3
    assert len(first["run_ids"]) == 3 and first["points_upserted"] == first["chunks"] > 0
    edited = root / "hall-8.md"
    edited.write_text(edited.read_text() + "\nThe seals are replaced yearly.\n")
    second = ingest_cli()
    assert (second["added"], second["purged"], second["unchanged"]) == (1, 1, 2)
    assert len(second["run_ids"]) == len(shard_runs(second["shards"], HEX256))
    third = ingest_cli()
    assert third["run_ids"] == [] and third["unchanged"] == 3


def test_cli_ingest_json(tmp_path: Path, data_dir: Path) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("# Alpha\n\nThe first document.\n")
    (root / "b.txt").write_text("The second document, plain text.\n")
    process = subprocess.run(
        [sys.executable, "-m", "rag_pipeline", "ingest", str(root), "--data-dir", str(data_dir), "--json"],
        capture_output=True, text=True, check=True,
    )
    summary = json.loads(process.stdout)
    assert {key: summary[key] for key in ["added", "unchanged", "moved", "purged", "failed", "chunks"]} == {
        "added": 2, "unchanged": 0, "moved": 0, "purged": 0, "failed": [], "chunks": 2,
    }
    assert summary["seconds"] > 0
    assert "convert" in process.stderr  # the progress bar goes to stderr


def test_dagster_definitions_validate() -> None:
    repo = Path(__file__).resolve().parents[1]
    dagster = Path(sys.executable).parent / "dagster"
    process = subprocess.run([str(dagster), "definitions", "validate", "-w", "workspace.yaml"],
                             cwd=repo, capture_output=True, text=True)
    assert process.returncode == 0, process.stderr[-3000:]


def test_citations_give_the_line_of_the_original_file(tmp_path: Path, data_dir: Path) -> None:
    """A chunk of a Markdown file with front matter (and of a text file with blank runs) cites the line of the
    original file its text starts on, not the line of the converted Markdown; a converted format (HTML, PDF) cites
    no line (its lines are docling's), a PDF its page."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    shutil.copy(REPO / "golden" / "catalog" / "docs" / "projects" / "quarry-kings.md", corpus)
    (corpus / "spaced.txt").write_text("\n\n\nThe first paragraph.\n\n\n\n\nThe pump seals are checked weekly.\n")
    for name in ("notes/faq.txt", "web/duck.html", "papers/word-processor-history.pdf"):
        shutil.copy(SAMPLE_CORPUS / name, corpus)
    summary = ingest([corpus], data_dir)
    assert summary["failed"] == []
    settings = load_settings(data_dir=data_dir)
    rows = {Path(row["paths"][0]).name: row for row in Sidecar(settings.sidecar_path).documents().values()}
    for name in ("quarry-kings.md", "faq.txt", "spaced.txt"):
        lines = (corpus / name).read_text().split("\n")
        chunks = read_chunks(settings, rows[name]["shard"], rows[name]["sha"])
        for chunk in chunks:
            cited = lines[chunk.line_start - 1].strip()
            assert cited and cited[:40] in chunk.text, (name, chunk.line_start, cited, chunk.text[:200])
    first = read_chunks(settings, rows["quarry-kings.md"]["shard"], rows["quarry-kings.md"]["sha"])[0]
    assert first.line_start > 12  # after the 12 lines of front matter
    assert [chunk.line_start for chunk in read_chunks(settings, rows["spaced.txt"]["shard"],
                                                      rows["spaced.txt"]["sha"])] == [4]
    for name in ("duck.html", "word-processor-history.pdf"):
        chunks = read_chunks(settings, rows[name]["shard"], rows[name]["sha"])
        assert chunks and {chunk.line_start for chunk in chunks} == {None}
    assert {chunk.page for chunk in read_chunks(settings, rows["word-processor-history.pdf"]["shard"],
                                                rows["word-processor-history.pdf"]["sha"])} >= {1, 2}
