"""The artifact store's per-document files: a document's files are found from one listing of its shard folder
(names that only start with its SHA, and temporary files, are not its files); deleting and dropping documents."""

from __future__ import annotations

from pathlib import Path

from rag_pipeline.ingest.artifacts import ArtifactStore

A, B, C = "a" * 64, "b" * 64, "c" * 64


def test_documents_are_deleted_and_dropped_with_their_files_only(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path, "markdown")
    for sha in (A, B, C):
        store.write_text("0", sha, "md", f"# {sha[0]}\n")
        store.write_json("0", sha, "json", {"line_pages": []})
    store.write_text("0", A + "0", "md", "a longer name")  # starts with A's SHA, is not A's
    temporary = store.dir / "0" / f".{A}.md.123.0.tmp"
    temporary.write_text("a write in progress")

    assert sorted(path.name for path in store.files_of("0", [A])[A]) == [f"{A}.json", f"{A}.md"]
    assert store.files_of("1", [A]) == {A: []} and store.files_of("0", []) == {}

    store.delete_documents("0", [A])
    assert store.shas("0") == {A + "0", B, C} and temporary.exists()

    store.drop_documents("0", [B, C], keep=("json",))
    assert store.shas("0", "dropped") == {B, C} and store.shas("0", "md") == {A + "0"}
    assert store.read_json("0", B, "json") == {"line_pages": []}
    store.delete_documents("0", [B])
    assert store.shas("0") == {A + "0", C}
