"""Named sources end to end on real materialisations: syncing one source never purges another, a document leaves
the index only when no source holds it, the sources file drives `ingest`, the sensor watches every source, old
data dirs migrate into `default`, and search, ask and inspect show every path of a document."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import duckdb
import pytest
import qdrant_edge

from rag_pipeline import components
from rag_pipeline.components import answerer, load_settings, open_retriever
from rag_pipeline.defs.assets import INGEST_ASSETS, corpus_summary, index_generation
from rag_pipeline.defs.ingest_runner import ingest
from rag_pipeline.defs.resources import RagResource
from rag_pipeline.defs.sensors import source_files_sensor
from rag_pipeline.errors import ConfigError, NotFound
from rag_pipeline.index.vector_store import collection_name
from rag_pipeline.ingest.sources import configured_sources, resolve_source
from rag_pipeline.serve.inspect import inspect
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar

from .conftest import SAMPLE_CORPUS
from .test_index_sync import assert_index_agrees, sha_of

pytestmark = [
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect in the local Qdrant"),
    pytest.mark.filterwarnings("ignore:Local mode performs exact"),
]


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def search(data_dir: Path, query: str, filters: dict | None = None, top_k: int = 20) -> list[dict]:
    retriever = open_retriever(load_settings(data_dir=data_dir))
    try:
        return retriever.search(query, top_k=top_k, filters=filters).to_json()["results"]
    finally:
        retriever.close()


def documents(data_dir: Path) -> dict[str, dict]:
    return Sidecar(load_settings(data_dir=data_dir).sidecar_path).documents()


@pytest.fixture
def two_folders(tmp_path: Path) -> tuple[Path, Path]:
    docs, notes = tmp_path / "docs", tmp_path / "notes"
    docs.mkdir()
    shutil.copy(SAMPLE_CORPUS / "guides" / "installation.md", docs / "install.md")
    write(docs / "pumps.md", "# Pumps\n\nThe quartzite pump moves coolant through the loop.\n")
    write(notes / "meeting.md", "# Meeting\n\nWe agreed to replace the zirconium valve next week.\n")
    return docs, notes


def test_syncing_one_source_keeps_the_others(two_folders: tuple[Path, Path], data_dir: Path) -> None:
    docs, notes = two_folders
    first = ingest([docs], data_dir)
    assert first["sources"] == ["default"] and first["added"] == 2
    second = ingest([notes], data_dir, source="notes")
    # The old behaviour purged docs/ here; now only the source being synced changes.
    assert (second["added"], second["purged"], second["unchanged"], second["sources"]) == (1, 0, 2, ["notes"])
    rows = documents(data_dir)
    assert sorted(tuple(row["sources"]) for row in rows.values()) == [("default",), ("default",), ("notes",)]
    assert search(data_dir, "quartzite pump")[0]["sources"] == ["default"]
    only_notes = search(data_dir, "pump valve coolant", {"source": "notes"})
    assert only_notes and {hit["path"] for hit in only_notes} == {str(notes / "meeting.md")}
    assert_index_agrees(data_dir)

    # Syncing `default` to exactly notes/ drops docs/ from it: those documents leave, the notes stay.
    third = ingest([notes], data_dir)
    assert (third["purged"], third["moved"]) == (2, 1)  # meeting.md joins `default`: relabelled, not re-embedded
    assert third["vectors_computed"] == 0
    assert {tuple(row["sources"]) for row in documents(data_dir).values()} == {("default", "notes")}
    assert search(data_dir, "quartzite pump", {"path_prefix": str(docs)}) == []
    assert_index_agrees(data_dir)


def test_a_document_leaves_only_when_no_source_holds_it(tmp_path: Path, data_dir: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    text = "# Shared\n\nThe obsidian turbine spins at nine hundred revolutions.\n"
    write(a / "shared.md", text)
    write(b / "copy" / "shared.md", text)
    write(b / "other.md", "# Other\n\nNothing about turbines at all, only gardens.\n")
    ingest([a], data_dir, source="alpha")
    ingest([b], data_dir, source="beta")
    sha = sha_of(a / "shared.md")
    row = documents(data_dir)[sha]
    assert row["sources"] == ["alpha", "beta"]
    assert row["paths"] == sorted([str(a / "shared.md"), str(b / "copy" / "shared.md")])
    hit = search(data_dir, "obsidian turbine")[0]
    assert hit["sha"] == sha and hit["paths"] == row["paths"] and hit["sources"] == ["alpha", "beta"]
    assert search(data_dir, "obsidian turbine", {"source": "alpha"})[0]["sha"] == sha

    (b / "copy" / "shared.md").unlink()
    after = ingest(None, data_dir, source="beta")  # the roots beta was last synced with
    assert (after["purged"], after["moved"]) == (0, 1)
    assert documents(data_dir)[sha]["sources"] == ["alpha"]
    assert all(hit["sha"] != sha for hit in search(data_dir, "obsidian turbine", {"source": "beta"}))

    (a / "shared.md").unlink()
    gone = ingest(None, data_dir, source="alpha")
    assert gone["purged"] == 1 and sha not in documents(data_dir)
    assert all(hit["sha"] != sha for hit in search(data_dir, "obsidian turbine"))
    assert_index_agrees(data_dir)


def test_sources_file_drives_ingest(tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "handbook" / "policy" / "leave.md", "# Leave\n\nAnnual leave is twenty-eight days.\n")
    write(tmp_path / "handbook" / "drafts" / "wip.md", "# Draft\n\nNot ready.\n")
    write(tmp_path / "wiki" / "howto.md", "# How to\n\nRestart the basalt service with the red switch.\n")
    sources_file = write(tmp_path / "config" / "sources.yaml", """
sources:
  handbook:
    roots: [../handbook]
    rules: {exclude: ["drafts/**"], tags: {"policy/**": policy}}
  wiki:
    roots: [../wiki]
  inbox:
    uploads: true
roster: []
""")
    monkeypatch.setenv("RAG_SOURCES_FILE", str(sources_file))
    settings = load_settings(data_dir=data_dir)
    specs = configured_sources(settings)
    assert {name: spec.kind for name, spec in specs.items()} == {"handbook": "roots", "wiki": "roots",
                                                                  "inbox": "uploads"}
    assert specs["handbook"].roots == ((tmp_path / "handbook").resolve(),)

    summary = ingest(None, data_dir)  # every source of the file
    assert sorted(summary["sources"]) == ["handbook", "inbox", "wiki"] and summary["added"] == 2
    rows = {Path(row["paths"][0]).name: row for row in documents(data_dir).values()}
    assert rows["leave.md"]["tags"] == ["policy"] and rows["leave.md"]["sources"] == ["handbook"]
    assert "wip.md" not in rows  # excluded by the handbook's rules

    write(tmp_path / "wiki" / "more.md", "# More\n\nThe basalt service logs to the console.\n")
    only_wiki = ingest(None, data_dir, source="wiki")  # the file's roots for wiki
    assert (only_wiki["added"], only_wiki["sources"]) == (1, ["wiki"])

    with pytest.raises(NotFound, match="unknown source 'nope'.*known: handbook, inbox, wiki"):
        ingest(None, data_dir, source="nope")
    with pytest.raises(Exception, match="upload area"):
        ingest([tmp_path / "wiki"], data_dir, source="inbox")

    sidecar = Sidecar(settings.sidecar_path)
    by_source = {row["source"]: row for row in sidecar.totals_by_source()}
    assert (by_source["handbook"]["documents"], by_source["wiki"]["documents"], by_source["inbox"]["documents"]) \
        == (1, 2, 0)

    # The corpus summary asset shows documents and chunks per source in the Dagster UI.
    result = dg.materialize([corpus_summary, index_generation, *INGEST_ASSETS], selection=[corpus_summary],
                            resources={"rag": RagResource(data_dir=str(data_dir))})
    table = result.asset_materializations_for_node("corpus_summary")[0].metadata["by_source"].value
    assert "| handbook | roots | 1 | 0 | 0 |" in table and "| inbox | uploads | 0 |" in table


@pytest.mark.parametrize("content, message", [
    ("sources: {}", "needs a `sources:` mapping"),
    ("sources: {a: {roots: []}}", "roots must be a non-empty list"),
    ("sources: {'bad name': {roots: [x]}}", "invalid name"),
    ("sources: {a: {roots: [x], uploads: true}}", "upload source has no roots"),
    ("sources: {a: {roots: [x], rules: {colour: red}}}", "unknown key 'colour'"),
    ("sources: {a: {folders: [x]}}", "unknown key(s) 'folders'"),
    ("extra: 1\nsources: {a: {roots: [x]}}", "unknown top-level key 'extra'"),
])
def test_invalid_sources_files_name_the_problem(tmp_path: Path, content: str, message: str) -> None:
    path = write(tmp_path / "sources.yaml", content)
    with pytest.raises(ConfigError) as error:
        configured_sources(load_settings(data_dir=tmp_path / "data", sources_file=path))
    assert str(path) in str(error.value) and message in str(error.value)


def test_cli_sources_and_errors(two_folders: tuple[Path, Path], data_dir: Path) -> None:
    docs, notes = two_folders

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "rag_pipeline", "ingest", *args, "--data-dir", str(data_dir),
                               "--json"], capture_output=True, text=True)

    assert json.loads(cli(str(docs), "--source", "notes").stdout)["sources"] == ["notes"]
    again = ingest(None, data_dir, source="notes")  # the roots notes was last synced with
    assert (again["run_ids"], again["unchanged"], again["sources"]) == ([], 2, ["notes"])
    unknown = cli("--source", "missing")
    assert unknown.returncode == 2 and json.loads(unknown.stdout)["error"]["code"] == "unknown_source"
    with pytest.raises(Exception, match="invalid source name") as invalid:
        ingest([notes], data_dir, source="../etc")
    assert invalid.value.code == "invalid_source"
    with pytest.raises(ConfigError, match="nothing to ingest"):
        ingest(None, data_dir / "x")


def test_sensor_watches_every_source(tmp_path: Path, data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write(tmp_path / "one" / "a.md", "# A\n\nFirst source.\n")
    write(tmp_path / "two" / "b.md", "# B\n\nSecond source.\n")
    monkeypatch.setenv("RAG_SOURCES_FILE", str(write(tmp_path / "sources.yaml",
                                                     f"sources:\n  one: {{roots: [{tmp_path / 'one'}]}}\n"
                                                     f"  two: {{roots: [{tmp_path / 'two'}]}}\n")))
    rag = RagResource(data_dir=str(data_dir))
    with dg.instance_for_test() as instance:
        first = source_files_sensor(dg.build_sensor_context(instance=instance, resources={"rag": rag}))
        assert len(first.run_requests) == 1
        result = dg.materialize(INGEST_ASSETS, resources={"rag": rag}, instance=instance,
                                tags=first.run_requests[0].tags)
        assert result.success
        assert {tuple(row["sources"]) for row in documents(data_dir).values()} == {("one",), ("two",)}
        quiet = source_files_sensor(dg.build_sensor_context(instance=instance, cursor=first.cursor,
                                                            resources={"rag": rag}))
        assert not quiet.run_requests
        new = write(tmp_path / "two" / "c.md", "# C\n\nA change in the second source.\n")
        tick = source_files_sensor(dg.build_sensor_context(instance=instance, cursor=quiet.cursor,
                                                           resources={"rag": rag}))
        assert tick.run_requests[0].tags["rag/changed_shards"] == Settings().shard_of(sha_of(new))


def make_legacy(data_dir: Path) -> None:
    """Turn a data dir into one made before named sources and generations: no source tables or column, the last
    scan's refusals in `source_errors`, no record of migration steps (a sidecar that old has none), the collection
    named after the model only, points without `sources`."""
    settings = load_settings(data_dir=data_dir)
    active = components.generations(settings).active()
    legacy = collection_name(active.model_id, active.dimension)
    edge = data_dir / "qdrant_edge"
    for suffix in ("", ".version", ".lock"):
        (edge / (active.collection + suffix)).rename(edge / (legacy + suffix))
    (data_dir / "generations.json").unlink()
    store = components.generations(settings).open(collection=legacy, dimension=active.dimension)
    try:
        everything = qdrant_edge.Filter(must=[qdrant_edge.FieldCondition("sha", match=qdrant_edge.MatchExcept(["-"]))])
        store._shard.update(qdrant_edge.UpdateOperation.delete_payload_by_filter(everything, ["sources"]))
    finally:
        store.close()
    con = duckdb.connect(str(settings.sidecar_path))
    for table in ("sources", "source_files", "refusals", "uploads", "run_documents", "schema_migrations"):
        con.execute(f"DROP TABLE {table}")
    con.execute("ALTER TABLE documents DROP COLUMN sources")
    con.execute("CREATE TABLE source_errors (path VARCHAR PRIMARY KEY, reason VARCHAR, seen_at TIMESTAMP)")
    con.execute("INSERT INTO source_errors VALUES ('/x/empty.md', 'empty file', now())")
    con.close()


def test_an_old_data_dir_migrates_into_default(two_folders: tuple[Path, Path], data_dir: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    docs, _ = two_folders
    with monkeypatch.context() as old_defaults:  # what data dirs from before generations were built with
        old_defaults.setenv("RAG_EMBEDDING_RUNTIME", "torch")
        old_defaults.setenv("RAG_CHUNKER", "recursive")
        ingest([docs], data_dir)
        make_legacy(data_dir)
    sidecar = Sidecar(load_settings(data_dir=data_dir).sidecar_path)  # opening migrates
    assert {tuple(row["sources"]) for row in sidecar.documents().values()} == {("default",)}
    assert sidecar.sources()["default"]["roots"] == [str(docs)]
    assert sidecar.source_errors() == [{"source": "default", "path": "/x/empty.md", "reason": "empty file"}]
    summary = ingest([docs], data_dir)
    # The legacy collection is adopted as the active generation: relabelled with sources, nothing re-embedded.
    assert (summary["moved"], summary["vectors_computed"], summary["points_upserted"]) == (2, 0, 0)
    assert summary["generation"]["active"] == summary["generation"]["target"]
    assert components.generations(load_settings(data_dir=data_dir)).active().collection.endswith("__384")
    assert search(data_dir, "quartzite pump")[0]["sources"] == ["default"]
    assert_index_agrees(data_dir)


def test_search_ask_and_inspect_show_every_path(tmp_path: Path, data_dir: Path) -> None:
    text = "# Vault\n\nThe cobalt vault opens with the seventh key only.\n"
    paths = [write(tmp_path / "docs" / "vault.md", text), write(tmp_path / "docs" / "archive" / "vault-old.md", text)]
    ingest([tmp_path / "docs"], data_dir)
    expected = sorted(str(path) for path in paths)
    assert search(data_dir, "cobalt vault")[0]["paths"] == expected
    settings = load_settings(data_dir=data_dir)
    retriever = open_retriever(settings)
    try:
        answer = answerer(settings, retriever).answer("Which key opens the cobalt vault?")
    finally:
        retriever.close()
    assert list(answer.to_json()["sources"][0]["paths"]) == expected
    rows, _ = inspect(settings, argparse.Namespace(view="documents", status=None, doc_type=None, path=None,
                                                   limit=10, tag=None))
    assert rows[0]["paths"] == expected and rows[0]["sources"] == "default"
    _, title = inspect(settings, argparse.Namespace(view="chunks", document="vault.md"))
    assert all(path in title for path in expected)
    cli = subprocess.run([sys.executable, "-m", "rag_pipeline", "search", "cobalt vault", "--data-dir",
                          str(data_dir)], capture_output=True, text=True, check=True)
    assert f"also at {expected[1]}" in cli.stdout


def test_resolve_source_roots(tmp_path: Path) -> None:
    settings = load_settings(data_dir=tmp_path / "data")
    spec = resolve_source(settings, "x", [tmp_path])
    assert spec.roots == (tmp_path.resolve(),) and not spec.uploads
    assert resolve_source(settings, "x", None, {"x": [str(tmp_path)]}).roots == (tmp_path,)
    with pytest.raises(NotFound):
        resolve_source(settings, "x")


def test_forget_a_source_and_an_unmounted_root_purges_nothing(tmp_path: Path, data_dir: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    text = "# Shared\n\nThe malachite lantern hangs in the hall.\n"
    write(tmp_path / "a" / "shared.md", text)
    write(tmp_path / "b" / "shared.md", text)
    write(tmp_path / "b" / "only-b.md", "# Only B\n\nThe tourmaline gate stays shut.\n")
    ingest([tmp_path / "a"], data_dir, source="alpha")
    ingest([tmp_path / "b"], data_dir, source="beta")

    # A configured root that is not a folder (unmounted, moved) stops the sync before anything is purged.
    monkeypatch.setenv("RAG_SOURCES_FILE", str(write(tmp_path / "sources.yaml", f"sources:\n  beta: {{roots: ["
                                                                                 f"{tmp_path / 'gone'}]}}\n")))
    with pytest.raises(ConfigError, match="not a folder"):
        ingest(None, data_dir)
    assert len(documents(data_dir)) == 2
    with pytest.raises(Exception, match="is configured") as error:
        ingest(None, data_dir, forget="beta", rediscover=False)
    assert error.value.code == "source_configured"
    monkeypatch.delenv("RAG_SOURCES_FILE")
    with pytest.raises(NotFound):
        ingest(None, data_dir, forget="gamma", rediscover=False)

    # Forgetting beta purges what only beta held; the shared document stays, relabelled.
    forgotten = subprocess.run([sys.executable, "-m", "rag_pipeline", "forget", "beta", "--data-dir", str(data_dir),
                                "--json"], capture_output=True, text=True, check=True)
    summary = json.loads(forgotten.stdout)
    assert (summary["purged"], summary["moved"], summary["unchanged"]) == (1, 1, 0)
    rows = documents(data_dir)
    assert [row["sources"] for row in rows.values()] == [["alpha"]]
    assert "beta" not in Sidecar(load_settings(data_dir=data_dir).sidecar_path).sources()
    assert all("tourmaline" not in hit["text"] for hit in search(data_dir, "tourmaline gate"))


def test_cli_ingest_adds_a_folder_and_replacing_names_what_it_purges(
        two_folders: tuple[Path, Path], data_dir: Path, capsys: pytest.CaptureFixture) -> None:
    """`ingest FOLDER` after another folder (the demo's, say) adds it beside the first: nothing is purged. Syncing to
    exactly the folders given takes --replace, and the purged documents are named (CLI output and the summary)."""
    from rag_pipeline.serve.cli import main

    docs, notes = two_folders
    assert main(["ingest", str(docs), "--data-dir", str(data_dir), "--json"]) == 0
    capsys.readouterr()
    assert main(["ingest", str(notes), "--data-dir", str(data_dir), "--json"]) == 0
    added = json.loads(capsys.readouterr().out)
    assert (added["added"], added["purged"], added["unchanged"], added["purged_paths"]) == (1, 0, 2, [])
    assert Sidecar(load_settings(data_dir=data_dir).sidecar_path).sources()["default"]["roots"] == [str(docs),
                                                                                                    str(notes)]
    assert search(data_dir, "quartzite pump")[0]["path"] == str(docs / "pumps.md")
    assert main(["ingest", str(notes), "--data-dir", str(data_dir), "--json"]) == 0  # again: nothing changes
    assert json.loads(capsys.readouterr().out)["unchanged"] == 3

    assert main(["ingest", str(notes), "--replace", "--data-dir", str(data_dir)]) == 0
    output = capsys.readouterr().out
    assert "purged 2," in output
    assert [line for line in output.splitlines() if line.startswith("  purged: ")] == [
        f"  purged: {docs / 'install.md'}", f"  purged: {docs / 'pumps.md'}"]
    assert {row["paths"][0] for row in documents(data_dir).values()} == {str(notes / "meeting.md")}
