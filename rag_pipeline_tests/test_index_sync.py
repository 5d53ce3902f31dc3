"""Index correctness on both vector store backends: points == sidecar chunks == chunk files, exact incremental
semantics (edit / rename / copy / delete), crash convergence, and search by paraphrase and by rare token."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from rag_pipeline.components import load_settings
from rag_pipeline.defs.ingest_runner import ingest
from rag_pipeline.defs.resources import RagResource
from rag_pipeline.index.sparse import encode_query
from rag_pipeline.index.vector_store import IndexPoint, SparseVector, VectorStore
from rag_pipeline.ingest.chunk import read_chunks
from rag_pipeline.ingest.chunkers import contextual_text
from rag_pipeline.ingest.stage import stores
from rag_pipeline.ingest import vector_index
from rag_pipeline.ingest.vector_index import FIELD_LABELS, shard_batch, sync_field_labels
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar
from rag_pipeline_tests.sidecar_sql import sql_rows

from .conftest import DATASETS, SAMPLE_CORPUS

pytestmark = [
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect in the local Qdrant"),
    pytest.mark.filterwarnings("ignore:Local mode performs exact"),
]
PAYLOAD_KEYS = {"text", "window_text", "paths", "path", "heading_path", "line_start", "page", "chunk_index",
                "sha", "shard", "doc_type", "tags", "sources", "fields", "ingested_at"}


def open_store(data_dir: Path):
    return RagResource(data_dir=str(data_dir)).vector_store()


def sha_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def chunk_file_lines(settings: Settings) -> int:
    return sum(len(path.read_text().splitlines()) for path in stores(settings)["chunks"].dir.rglob("*.jsonl"))


def all_points(store: VectorStore, settings: Settings) -> dict[str, dict]:
    """Every point of the collection, by id (shard by shard)."""
    points = {}
    sidecar = Sidecar(settings.sidecar_location)
    for shard in settings.shard_keys:
        state = store.shard_state(shard)
        for sha in state:
            ids = [row["chunk_id"] for row in sql_rows(sidecar, "SELECT chunk_id FROM chunks WHERE sha = ?", [sha])]
            points.update({hit.id: hit.payload for hit in store.get(ids)})
    return points


def assert_index_agrees(data_dir: Path) -> dict[str, dict]:
    """Points == sidecar chunk rows == chunk file lines, with complete payloads and current paths and tags."""
    settings = load_settings(data_dir=data_dir)
    sidecar = Sidecar(settings.sidecar_location)
    rows = sql_rows(sidecar, "SELECT c.chunk_id, c.sha, d.paths, d.tags, d.sources FROM chunks c JOIN documents d "
                         "USING (sha)")
    with open_store(data_dir) as store:
        total = store.count()
        points = all_points(store, settings)
    assert total == len(rows) == chunk_file_lines(settings) == len(points)
    for row in rows:
        payload = points[row["chunk_id"]]
        assert set(payload) == PAYLOAD_KEYS
        assert payload["sha"] == row["sha"] and sorted(payload["paths"]) == sorted(row["paths"])
        assert payload["tags"] == row["tags"] and payload["sources"] == row["sources"]
        assert payload["path"] == payload["paths"][0] and payload["text"]
    return points


def small_corpus(root: Path) -> Path:
    for name in ["guides/installation.md", "guides/configuration.md", "ops/incident-runbook.md",
                 "reference/glossary.md", "notes/faq.txt"]:
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(SAMPLE_CORPUS / name, target)
    return root


def hits_for_token(data_dir: Path, token: str) -> list[dict]:
    with open_store(data_dir) as store:
        return [hit.payload for hit in store.search_sparse(encode_query(token), top_k=5)]


@pytest.mark.slow
def test_sample_corpus_index_and_reingest(backend: str, corpus: Path, data_dir: Path) -> None:
    first = ingest([corpus], data_dir)
    assert first["failed"] == [] and first["points_upserted"] == first["chunks"] > 50
    points = assert_index_agrees(data_dir)
    assert {payload["doc_type"] for payload in points.values()} == {"md", "txt", "pdf", "docx", "html", "pptx"}
    assert any(payload["doc_type"] == "pdf" and (payload["page"] or 0) > 1 for payload in points.values())

    again = ingest([corpus], data_dir)
    assert again["run_ids"] == [] and again["vectors_computed"] == 0 and again["points_upserted"] == 0

    rag = RagResource(data_dir=str(data_dir))
    with rag.vector_store() as store:
        # Dense search finds a document by a paraphrase; sparse search finds one by a rare exact token.
        embedder = rag.embedder()
        dense = store.search_dense(embedder.embed_query("how can the service listen on port 8000 under SELinux"), 3)
        assert dense[0].payload["path"].endswith("installation.md")
        sparse = store.search_sparse(encode_query("semanage"), 3)
        assert sparse[0].payload["path"].endswith("installation.md") and "semanage" in sparse[0].payload["text"]


def test_edit_rename_copy_delete_keep_the_index_exact(backend: str, tmp_path: Path, data_dir: Path) -> None:
    root = small_corpus(tmp_path / "docs")
    ingest([root], data_dir)
    assert_index_agrees(data_dir)

    edited = root / "reference" / "glossary.md"
    old_sha = sha_of(edited)
    edited.write_text(edited.read_text().replace("Reciprocal rank fusion", "Fusion QX-9031 of ranks"))
    summary = ingest([root], data_dir)
    assert summary["vectors_computed"] >= 1 and summary["points_deleted"] > 0
    assert_index_agrees(data_dir)
    assert not [hit for hit in hits_for_token(data_dir, "reciprocal") if hit["sha"] == old_sha]
    assert hits_for_token(data_dir, "QX-9031")[0]["sha"] == sha_of(edited)
    with open_store(data_dir) as store:
        assert store.count(sha=old_sha) == 0

    moved = root / "reference" / "terms.md"
    edited.rename(moved)
    summary = ingest([root], data_dir)
    assert (summary["moved"], summary["vectors_computed"], summary["points_upserted"]) == (1, 0, 0)
    assert hits_for_token(data_dir, "QX-9031")[0]["paths"] == [str(moved)]

    copy = root / "archive" / "terms-copy.md"
    copy.parent.mkdir()
    shutil.copy(moved, copy)
    summary = ingest([root], data_dir)
    assert (summary["moved"], summary["vectors_computed"], summary["points_upserted"]) == (1, 0, 0)
    assert sorted(hits_for_token(data_dir, "QX-9031")[0]["paths"]) == sorted([str(copy), str(moved)])
    assert_index_agrees(data_dir)

    moved.unlink()
    copy.unlink()
    summary = ingest([root], data_dir)
    assert summary["purged"] == 1 and summary["points_deleted"] > 0
    assert not [hit for hit in hits_for_token(data_dir, "QX-9031") if "QX-9031" in hit["text"]]
    assert_index_agrees(data_dir)


TAG_RULES = """
tags:
  "guides/**": [handbook, how-to]
  "ops/**": runbook
  "archive/**": archived
"""


def test_corpus_rule_tags_follow_rule_changes_and_moves_without_reembedding(
        backend: str, tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = small_corpus(tmp_path / "docs")
    rules = tmp_path / "rules.yaml"
    rules.write_text(TAG_RULES)
    monkeypatch.setenv("RAG_CORPUS_RULES", str(rules))
    first = ingest([root], data_dir)
    assert first["failed"] == [] and first["retagged"] == 0
    assert_index_agrees(data_dir)

    def tags_by_name() -> dict[str, list[str]]:
        rows = Sidecar(load_settings(data_dir=data_dir).sidecar_path).documents().values()
        return {Path(row["paths"][-1]).name: row["tags"] for row in rows}  # a copy in archive/ sorts first

    def tagged(tag: str | list[str]) -> set[str]:
        with open_store(data_dir) as store:
            hits = store.search_dense([store.dimension ** -0.5] * store.dimension, 100, {"tags": tag})
        return {Path(path).name for hit in hits for path in hit.payload["paths"]}

    assert tags_by_name() == {"installation.md": ["handbook", "how-to"], "configuration.md": ["handbook", "how-to"],
                              "incident-runbook.md": ["runbook"], "glossary.md": [], "faq.txt": []}
    assert tagged("handbook") == {"installation.md", "configuration.md"}
    assert tagged(["runbook", "how-to"]) == {"installation.md", "configuration.md", "incident-runbook.md"}

    # The rules change, the bytes do not: the points are relabelled, nothing is converted or embedded again.
    rules.write_text('tags:\n  "guides/install*": setup\n  "**/*.txt": faq\n')
    summary = ingest([root], data_dir)
    assert (summary["retagged"], summary["moved"], summary["added"], summary["unchanged"]) == (4, 0, 0, 1)
    assert (summary["vectors_computed"], summary["points_upserted"], summary["points_deleted"]) == (0, 0, 0)
    assert tags_by_name()["installation.md"] == ["setup"] and tags_by_name()["incident-runbook.md"] == []
    assert tagged("handbook") == set() and tagged("setup") == {"installation.md"} and tagged("faq") == {"faq.txt"}
    assert_index_agrees(data_dir)
    assert ingest([root], data_dir)["run_ids"] == []  # in sync: nothing pending

    # A copy under a tagged folder adds its tags to the document's; deleting the copy takes them away again.
    rules.write_text(TAG_RULES)
    ingest([root], data_dir)
    copy = root / "archive" / "runbook.md"
    copy.parent.mkdir()
    shutil.copy(root / "ops" / "incident-runbook.md", copy)
    summary = ingest([root], data_dir)
    assert (summary["moved"], summary["retagged"], summary["vectors_computed"]) == (1, 1, 0)
    assert tags_by_name()["incident-runbook.md"] == ["archived", "runbook"]
    assert tagged("archived") == {"incident-runbook.md", "runbook.md"}
    copy.unlink()
    summary = ingest([root], data_dir)
    assert (summary["moved"], summary["retagged"], summary["vectors_computed"]) == (1, 1, 0)
    assert tagged("archived") == set()
    assert_index_agrees(data_dir)

    # Without rules every tag goes.
    monkeypatch.delenv("RAG_CORPUS_RULES")
    assert ingest([root], data_dir)["retagged"] == 3
    assert set(map(tuple, tags_by_name().values())) == {()}
    assert_index_agrees(data_dir)


def test_embedding_cache_serves_a_rebuild(tmp_path: Path, data_dir: Path, backend: str) -> None:
    root = small_corpus(tmp_path / "docs")
    first = ingest([root], data_dir)
    settings = load_settings(data_dir=data_dir)
    shutil.rmtree(stores(settings)["embeddings"].dir)  # a rebuild of the vectors: every shard re-embeds
    rebuilt = ingest([root], data_dir)
    assert rebuilt["vectors_computed"] == 0 and rebuilt["vectors_cached"] == first["vectors_computed"]
    assert rebuilt["points_upserted"] == 0  # same vectors, same points already in the index
    assert_index_agrees(data_dir)


def test_contextual_text_carries_path_and_headings(tmp_path: Path, data_dir: Path) -> None:
    root = small_corpus(tmp_path / "docs")
    ingest([root], data_dir)
    settings = load_settings(data_dir=data_dir)
    sha = sha_of(root / "guides" / "installation.md")
    chunk = next(c for c in read_chunks(settings, settings.shard_of(sha), sha) if "semanage" in c.text)
    assert contextual_text("guides/installation.md", chunk).startswith(
        "guides/installation.md > Installing Nimbus > Linux > Fedora\n")
    assert "guides/installation.md" not in chunk.text  # the stored text is unchanged


def scifact_files(target: Path, count: int) -> Path:
    target.mkdir(parents=True)
    with (DATASETS / "scifact" / "corpus.jsonl").open() as handle:
        for _, line in zip(range(count), handle):
            record = json.loads(line)
            (target / f"{record['_id']}.txt").write_text(f"{record['title']}\n\n{record['text']}\n")
    return target


def test_half_written_document_is_rewritten(backend: str, tmp_path: Path, data_dir: Path) -> None:
    root = small_corpus(tmp_path / "docs")
    ingest([root], data_dir)
    settings = load_settings(data_dir=data_dir)
    sha = sha_of(root / "ops" / "incident-runbook.md")
    chunk_ids = [c.chunk_id for c in read_chunks(settings, settings.shard_of(sha), sha)]
    with open_store(data_dir) as store:  # simulate a crash in the middle of this document's upsert
        kept = store.get(chunk_ids[:2])
        store.delete_shas([sha])
        store.upsert([IndexPoint(hit.id, [1.0] + [0.0] * 383, SparseVector([], []), hit.payload) for hit in kept])
        assert store.count(sha=sha) == 2
    summary = ingest([root], data_dir)
    assert summary["shards"] == [settings.shard_of(sha)] and summary["points_upserted"] == len(chunk_ids)
    assert summary["vectors_computed"] == 0
    assert_index_agrees(data_dir)


def test_vector_index_reads_sidecar_rows_for_whole_shards_about_label_batch_at_a_time() -> None:
    by_shard = {"0": {"a", "b"}, "1": set(), "2": {"c"}, "3": {"d", "e", "f"}}
    assert shard_batch(by_shard, "0", 3) == ["0", "1", "2"]
    assert shard_batch(by_shard, "0", 100) == ["0", "1", "2", "3"]
    assert shard_batch(by_shard, "3", 1) == ["3"]  # the first shard, whatever its size
    assert shard_batch(by_shard, "1", 1) == ["1", "2"]


@pytest.mark.parametrize("label_batch", [vector_index.LABEL_BATCH, 3])
def test_field_labels_are_synced_from_one_sidecar_read_per_batch_of_shards(
        sample_index: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, label_batch: int) -> None:
    """The roster step's relabelling reads the sidecar rows of many shards at once (a DuckDB start is 11-20 ms; it
    was one per shard), and still puts back the labels of a document whose points lost them, in every batch."""
    import duckdb

    shutil.copytree(sample_index[1], tmp_path / "data")
    rag = RagResource(data_dir=str(tmp_path / "data"))
    settings, sidecar = rag.settings, rag.sidecar()
    by_shard = sidecar.shas_by_shard()
    assert len(by_shard) >= 8
    shard, shas = sorted(by_shard.items())[-1]  # in the last batch
    with rag.vector_store() as store:
        right = store.shard_state(shard)[shas[0]]
        store.relabel(shas[0], ["elsewhere.md"], [], right.sources, [])
    sidecar.set_state(FIELD_LABELS, "stale")  # as after a roster change
    monkeypatch.setattr(vector_index, "LABEL_BATCH", label_batch)
    opened = []
    connect = duckdb.connect
    monkeypatch.setattr(duckdb, "connect", lambda *args, **kwargs: opened.append(args) or connect(*args, **kwargs))
    with rag.live_stores() as live:
        assert sync_field_labels(settings, sidecar, live) == 1
    batches = -(-sum(map(len, by_shard.values())) // label_batch)
    assert len(opened) <= 2 + min(batches, len(by_shard))  # the digest and the shards, each batch, the new digest
    with rag.vector_store() as store:
        assert store.shard_state(shard)[shas[0]] == right


def test_field_labels_that_fail_part_way_still_mark_the_store_changed(
        sample_index: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Points relabelled before a failure are what the store holds: its index version moves, so that readers keyed
    on it (the semantic cache) do not keep answering with the old labels."""
    shutil.copytree(sample_index[1], tmp_path / "data")
    rag = RagResource(data_dir=str(tmp_path / "data"))
    settings, sidecar = rag.settings, rag.sidecar()
    shard, shas = sorted(sidecar.shas_by_shard().items())[0]  # in the first batch, which is relabelled
    with rag.vector_store() as store:
        right = store.shard_state(shard)[shas[0]]
        store.relabel(shas[0], ["elsewhere.md"], [], right.sources, [])
    sidecar.set_state(FIELD_LABELS, "stale")
    monkeypatch.setattr(vector_index, "LABEL_BATCH", 3)
    batches = []
    real = vector_index.labelled_rows

    def failing_second_read(*args: object) -> dict[str, dict]:
        batches.append(args)
        if len(batches) == 2:
            raise OSError("the sidecar went away")
        return real(*args)

    monkeypatch.setattr(vector_index, "labelled_rows", failing_second_read)
    with rag.live_stores() as live:
        before = live[0].index_version()
        with pytest.raises(OSError, match="went away"):
            sync_field_labels(settings, sidecar, live)
        assert live[0].index_version() != before
        assert live[0].shard_state(shard)[shas[0]] == right
    assert sidecar.get_state(FIELD_LABELS) == "stale"  # the next roster step syncs them again
