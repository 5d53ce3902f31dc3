"""The sidecar's migrations: a sidecar made by any earlier version upgrades in place with its rows intact, the steps
are recorded in order and applied once (also when two processes open an old sidecar at once), and an upgraded
sidecar has the same tables, columns and views as a new one.

The earlier versions' DDL is copied below as data (from the history of rag_pipeline/index/sidecar.py), not taken
from the migration steps, so that a step that does not reproduce its version fails here."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from rag_pipeline.sidecar import DOCUMENT_COLUMNS, ChatStore, Sidecar
from rag_pipeline.sidecar.connection import SidecarFile
from rag_pipeline.sidecar.migrations import STEPS, upgrade

from .pg_server import postgres_server  # noqa: F401  (a fixture: the PostgreSQL backend's server)
from .sidecar_backends import location_for, sidecar_location  # noqa: F401  (a fixture: both backends)

STEP_NAMES = [step.name for step in STEPS]
TYPES = {  # the documents columns' declarations (a column's never changed once added)
    "sha": "VARCHAR PRIMARY KEY", "shard": "VARCHAR NOT NULL", "paths": "VARCHAR[] NOT NULL", "sources": "VARCHAR[]",
    "rel_path": "VARCHAR", "doc_type": "VARCHAR", "tags": "VARCHAR[]", "bytes": "BIGINT", "status": "VARCHAR",
    "stage": "VARCHAR", "error": "VARCHAR", "converter": "VARCHAR", "pages": "INTEGER", "chars": "INTEGER",
    "title": "VARCHAR", "first_heading": "VARCHAR", "redactions": "INTEGER", "chunks": "INTEGER",
    "chunk_set": "VARCHAR", "convert_ms": "DOUBLE", "redact_ms": "DOUBLE", "chunk_ms": "DOUBLE",
    "first_seen_at": "TIMESTAMP", "ingested_at": "TIMESTAMP", "updated_at": "TIMESTAMP",
}
# The documents table of each version, in the order its columns were declared.
DOCUMENTS_V1 = ["sha", "shard", "paths", "doc_type", "bytes", "status", "stage", "error", "converter", "pages",
                "chars", "title", "redactions", "chunks", "convert_ms", "redact_ms", "chunk_ms", "first_seen_at",
                "updated_at"]
DOCUMENTS_V2 = ["sha", "shard", "paths", "rel_path", "doc_type", "bytes", "status", "stage", "error", "converter",
                "pages", "chars", "title", "redactions", "chunks", "chunk_set", "convert_ms", "redact_ms", "chunk_ms",
                "first_seen_at", "updated_at"]
DOCUMENTS_V3 = ["sha", "shard", "paths", "rel_path", "doc_type", "bytes", "status", "stage", "error", "converter",
                "pages", "chars", "title", "first_heading", "redactions", "chunks", "chunk_set", "convert_ms",
                "redact_ms", "chunk_ms", "first_seen_at", "ingested_at", "updated_at"]
DOCUMENTS_V5 = DOCUMENTS_V3[:5] + ["tags"] + DOCUMENTS_V3[5:]
DOCUMENTS_V6 = DOCUMENTS_V5[:3] + ["sources"] + DOCUMENTS_V5[3:]
TABLES = {
    "source_errors": "path VARCHAR PRIMARY KEY, reason VARCHAR, seen_at TIMESTAMP",
    "chunks": "chunk_id VARCHAR PRIMARY KEY, sha VARCHAR NOT NULL, shard VARCHAR NOT NULL, chunk_set VARCHAR NOT NULL, "
              "chunk_index INTEGER, heading_path VARCHAR, line_start INTEGER, page INTEGER, chars INTEGER",
    "redactions": "sha VARCHAR NOT NULL, shard VARCHAR NOT NULL, kind VARCHAR NOT NULL, count INTEGER, "
                  "PRIMARY KEY (sha, kind)",
    "runs": "run_id VARCHAR, asset VARCHAR, shards VARCHAR, added INTEGER, skipped INTEGER, purged INTEGER, "
            "failed INTEGER, seconds DOUBLE, finished_at TIMESTAMP",
    "eval_runs": "run_id VARCHAR, golden VARCHAR, index_version VARCHAR, collection VARCHAR, questions INTEGER, "
                 "metrics JSON, finished_at TIMESTAMP",
    "sources": "name VARCHAR PRIMARY KEY, kind VARCHAR, roots VARCHAR[], synced_at TIMESTAMP",
    "source_files": "source VARCHAR NOT NULL, path VARCHAR NOT NULL, root VARCHAR, sha VARCHAR NOT NULL, "
                    "bytes BIGINT, doc_type VARCHAR, tags VARCHAR[], PRIMARY KEY (source, path)",
    "refusals": "source VARCHAR NOT NULL, path VARCHAR NOT NULL, reason VARCHAR, seen_at TIMESTAMP",
    "uploads": "path VARCHAR PRIMARY KEY, source VARCHAR NOT NULL, sha VARCHAR NOT NULL, filename VARCHAR, "
               "bytes BIGINT, uploaded_by VARCHAR, uploaded_at TIMESTAMP",
    "run_documents": "run_id VARCHAR, stage VARCHAR, sha VARCHAR, action VARCHAR",
    "document_fields": "sha VARCHAR NOT NULL, name VARCHAR NOT NULL, position INTEGER NOT NULL, kind VARCHAR NOT NULL, "
                       "text_value VARCHAR, number_value DOUBLE, date_value TIMESTAMP, origin VARCHAR, "
                       "PRIMARY KEY (sha, name, position)",
    "field_errors": "sha VARCHAR NOT NULL, origin VARCHAR, error VARCHAR",
    "rosters": "name VARCHAR PRIMARY KEY, path VARCHAR, key VARCHAR, document_key VARCHAR, authoritative VARCHAR[], "
               "sha VARCHAR, rows INTEGER, problems VARCHAR[], loaded_at TIMESTAMP",
    "roster_values": "roster VARCHAR NOT NULL, key VARCHAR NOT NULL, name VARCHAR NOT NULL, position INTEGER NOT NULL, "
                     "kind VARCHAR NOT NULL, text_value VARCHAR, number_value DOUBLE, date_value TIMESTAMP, "
                     "authoritative BOOLEAN",
    "reconciliation": "roster VARCHAR, key VARCHAR, sha VARCHAR, path VARCHAR, field VARCHAR, status VARCHAR, "
                      "document_value VARCHAR, roster_value VARCHAR",
    "enrichments": "sha VARCHAR NOT NULL, field VARCHAR NOT NULL, model VARCHAR NOT NULL, "
                   "schema_hash VARCHAR NOT NULL, method VARCHAR, value JSON, error VARCHAR, created_at TIMESTAMP, "
                   "PRIMARY KEY (sha, field, model, schema_hash)",
    "state": "key VARCHAR PRIMARY KEY, value VARCHAR",
    "roster_links": "sha VARCHAR NOT NULL, roster VARCHAR NOT NULL, key VARCHAR NOT NULL",
    "chat_sessions": "id VARCHAR PRIMARY KEY, owner VARCHAR NOT NULL, created_at TIMESTAMP, updated_at TIMESTAMP",
    "chat_turns": "session_id VARCHAR NOT NULL, turn INTEGER NOT NULL, message VARCHAR, answer VARCHAR, record JSON, "
                  "created_at TIMESTAMP, PRIMARY KEY (session_id, turn)",
}
OWN_FIELDS_VIEWS = """
CREATE OR REPLACE VIEW builtin_fields AS
    SELECT sha, 'id' AS name, 'string' AS kind, sha AS text_value, NULL::DOUBLE AS number_value,
        NULL::TIMESTAMP AS date_value, 'builtin' AS origin FROM documents
    UNION ALL SELECT sha, 'path', 'list', unnest(paths), NULL, NULL, 'builtin' FROM documents
    UNION ALL SELECT sha, 'folder', 'string', coalesce(nullif(regexp_extract(rel_path, '^(.*)/[^/]*$', 1), ''), '.'),
        NULL, NULL, 'builtin' FROM documents WHERE rel_path IS NOT NULL
    UNION ALL SELECT sha, 'name', 'string', regexp_extract(paths[1], '[^/]*$'), NULL, NULL, 'builtin' FROM documents
    UNION ALL SELECT sha, 'type', 'string', doc_type, NULL, NULL, 'builtin' FROM documents
    UNION ALL SELECT sha, 'source', 'list', unnest(sources), NULL, NULL, 'builtin' FROM documents
    UNION ALL SELECT sha, 'tags', 'list', unnest(tags), NULL, NULL, 'builtin' FROM documents
    UNION ALL SELECT sha, 'pages', 'number', pages::VARCHAR, pages, NULL, 'builtin' FROM documents
        WHERE pages IS NOT NULL
    UNION ALL SELECT sha, 'chars', 'number', chars::VARCHAR, chars, NULL, 'builtin' FROM documents
        WHERE chars IS NOT NULL
    UNION ALL SELECT sha, 'ingested_at', 'date', strftime(ingested_at, '%Y-%m-%dT%H:%M:%S'), NULL, ingested_at,
        'builtin' FROM documents WHERE ingested_at IS NOT NULL;
CREATE OR REPLACE VIEW own_fields AS
    SELECT * FROM builtin_fields
    UNION ALL SELECT sha, name, kind, text_value, number_value, date_value, origin FROM document_fields;
"""
ROSTER_MATCHES_V7 = """
CREATE OR REPLACE VIEW roster_matches AS
    SELECT DISTINCT f.sha, r.name AS roster, f.text_value AS key FROM rosters r
    JOIN own_fields f ON f.name = r.document_key
    JOIN (SELECT DISTINCT roster, key FROM roster_values) k ON k.roster = r.name AND k.key = f.text_value;
"""
VIEWS_V7 = OWN_FIELDS_VIEWS + ROSTER_MATCHES_V7 + """
CREATE OR REPLACE VIEW effective_fields AS
    SELECT f.* FROM own_fields f WHERE NOT EXISTS (
        SELECT 1 FROM roster_matches m JOIN roster_values v ON v.roster = m.roster AND v.key = m.key
        WHERE m.sha = f.sha AND v.name = f.name AND v.authoritative)
    UNION ALL
    SELECT m.sha, v.name, v.kind, v.text_value, v.number_value, v.date_value, 'roster:' || m.roster
    FROM roster_matches m JOIN roster_values v ON v.roster = m.roster AND v.key = m.key
    WHERE v.authoritative OR NOT EXISTS (SELECT 1 FROM own_fields f WHERE f.sha = m.sha AND f.name = v.name);
"""
ROSTER_FIELDS = """
CREATE OR REPLACE VIEW roster_fields AS
    SELECT m.sha, v.name, v.kind, v.text_value, v.number_value, v.date_value, 'roster:' || m.roster AS origin,
        v.authoritative FROM roster_links m JOIN roster_values v ON v.roster = m.roster AND v.key = m.key;
"""
VIEWS_V9 = OWN_FIELDS_VIEWS + ROSTER_MATCHES_V7 + ROSTER_FIELDS + """
CREATE OR REPLACE VIEW effective_fields AS
    SELECT f.* FROM own_fields f
        ANTI JOIN (SELECT DISTINCT sha, name FROM roster_fields WHERE authoritative) a USING (sha, name)
    UNION ALL
    SELECT sha, name, kind, text_value, number_value, date_value, origin FROM roster_fields WHERE authoritative
    UNION ALL
    SELECT r.sha, r.name, r.kind, r.text_value, r.number_value, r.date_value, r.origin FROM roster_fields r
        ANTI JOIN (SELECT DISTINCT sha, name FROM own_fields) o USING (sha, name) WHERE NOT r.authoritative;
"""
EFFECTIVE_V10 = """SELECT f.* FROM own_fields f
        ANTI JOIN (SELECT DISTINCT sha, name FROM roster_fields WHERE authoritative{only}) a USING (sha, name)
        WHERE true{only}
    UNION ALL
    SELECT sha, name, kind, text_value, number_value, date_value, origin FROM roster_fields
        WHERE authoritative{only}
    UNION ALL
    SELECT r.sha, r.name, r.kind, r.text_value, r.number_value, r.date_value, r.origin FROM roster_fields r
        ANTI JOIN (SELECT DISTINCT sha, name FROM own_fields WHERE true{only}) o USING (sha, name)
        WHERE NOT r.authoritative{only}"""
VIEWS_V10 = OWN_FIELDS_VIEWS + """
CREATE OR REPLACE VIEW roster_matches AS
    SELECT f.sha, r.name AS roster, f.text_value AS key FROM rosters r
    JOIN own_fields f ON f.name = r.document_key
    JOIN (SELECT DISTINCT roster, key FROM roster_values) k ON k.roster = r.name AND k.key = f.text_value
    WHERE (SELECT count(*) FROM own_fields g WHERE g.sha = f.sha AND g.name = f.name) = 1;
""" + ROSTER_FIELDS + (f"CREATE OR REPLACE VIEW effective_fields AS {EFFECTIVE_V10.format(only='')};\n"
                       "CREATE OR REPLACE MACRO effective_of(shas) AS TABLE "
                       f"{EFFECTIVE_V10.format(only=' AND list_contains(shas, sha)')};\n")


def version(documents: list[str], tables: list[str], views: str = "", steps: int = 0) -> dict[str, Any]:
    return {"documents": documents, "tables": tables, "views": views, "steps": steps}


# Every released schema (the commit that introduced it), and how many migration steps it already holds.
V1_TABLES = ["source_errors"]
V2_TABLES = V1_TABLES + ["chunks", "redactions", "runs"]
V6_TABLES = ["chunks", "redactions", "runs", "eval_runs", "sources", "source_files", "refusals", "uploads",
             "run_documents"]
V7_TABLES = V6_TABLES + ["document_fields", "field_errors", "rosters", "roster_values", "reconciliation",
                         "enrichments"]
VERSIONS = {
    "d7c8f02_skeleton": version(DOCUMENTS_V1, V1_TABLES, steps=1),
    "a3e732b_chunk_catalogue": version(DOCUMENTS_V2, V2_TABLES, steps=2),
    "73d3a96_first_heading": version(DOCUMENTS_V3, V2_TABLES, steps=3),
    "9c144db_eval_runs": version(DOCUMENTS_V3, V2_TABLES + ["eval_runs"], steps=4),
    "7ef0093_tags": version(DOCUMENTS_V5, V2_TABLES + ["eval_runs"], steps=5),
    "b8be6a9_named_sources": version(DOCUMENTS_V6, V6_TABLES, steps=6),
    "a03d4e7_document_fields": version(DOCUMENTS_V6, V7_TABLES, VIEWS_V7, steps=7),
    "adcca73_state": version(DOCUMENTS_V6, V7_TABLES + ["state"], VIEWS_V7, steps=8),
    "c19b301_roster_links": version(DOCUMENTS_V6, V7_TABLES + ["state", "roster_links"], VIEWS_V9, steps=9),
    "4e23d5b_chat": version(DOCUMENTS_V6, V7_TABLES + ["state", "roster_links", "chat_sessions", "chat_turns"],
                            VIEWS_V10, steps=10),
    # Versions before 7ef0093 did not add columns to an existing documents table: a skeleton sidecar opened by
    # a3e732b gained its new tables but not rel_path and chunk_set.
    "d7c8f02_opened_by_a3e732b": version(DOCUMENTS_V1, V2_TABLES, steps=1),
}
STAMP = datetime(2025, 3, 1, 12, 0)
OLD_DOCUMENT = {"sha": "a" * 64, "shard": "a", "paths": ["/corpus/notes/pump.md", "/copies/pump.md"],
                "sources": ["team"], "rel_path": "notes/pump.md", "doc_type": "md", "tags": ["ops"], "bytes": 120,
                "status": "ok", "stage": "catalogue", "chunks": 2, "chunk_set": "c1", "title": "Pump",
                "first_heading": "Pump", "first_seen_at": STAMP, "ingested_at": STAMP, "updated_at": STAMP}


def make_old_sidecar(path: Path, documents: list[str], tables: list[str], views: str) -> None:
    """A sidecar as that version left it, with a few rows in every table it has."""
    with duckdb.connect(str(path)) as con:
        con.execute(f"CREATE TABLE documents ({', '.join(f'{name} {TYPES[name]}' for name in documents)})")
        for table in tables:
            con.execute(f"CREATE TABLE {table} ({TABLES[table]})")
        con.execute(views)
        row = {name: OLD_DOCUMENT.get(name) for name in documents}
        con.execute(f"INSERT INTO documents ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                    list(row.values()))
        rows = {
            "source_errors": ["/corpus/empty.md", "empty file", STAMP],
            "chunks": ["k1", "a" * 64, "a", "c1", 0, "Pump", 1, None, 40],
            "redactions": ["a" * 64, "a", "email", 2],
            "runs": ["r1", "raw_documents", "a", 1, 0, 0, 0, 0.5, STAMP],
            "eval_runs": ["e1", "sample", "v1", "docs", 3, '{"recall@5": 0.9}', STAMP],
            "sources": ["team", "roots", ["/corpus"], STAMP],
            "source_files": ["team", "/corpus/notes/pump.md", "/corpus", "a" * 64, 120, "md", ["ops"]],
            "refusals": ["team", "/corpus/empty.md", "empty file", STAMP],
            "uploads": ["/up/x.md", "inbox", "b" * 64, "x.md", 10, "key:ops", STAMP],
            "run_documents": ["r1", "raw_documents", "a" * 64, "added"],
            "document_fields": ["a" * 64, "project", 0, "string", "P-1", None, None, "front_matter"],
            "field_errors": ["a" * 64, "extract", "malformed YAML"],
            "rosters": ["projects", "projects.csv", "project_id", "project", ["owner"], "d1", 1, [], STAMP],
            "roster_values": ["projects", "P-1", "owner", 0, "string", "Ada", None, None, True],
            "reconciliation": ["projects", "P-1", "a" * 64, "/corpus/notes/pump.md", "owner", "NOT_STATED", None,
                               "Ada"],
            "enrichments": ["a" * 64, "genre", "m", "h", "lead", '"manual"', None, STAMP],
            "state": ["field_labels", "digest"],
            "roster_links": ["a" * 64, "projects", "P-1"],
            "chat_sessions": ["s1", "local", STAMP, STAMP],
            "chat_turns": ["s1", 1, "hi", "hello", '{"citations": []}', STAMP],
        }
        for table in tables:
            con.execute(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[table]))})", rows[table])


def table_rows(sidecar: SidecarFile, table: str) -> list[tuple[Any, ...]]:
    with sidecar.connect() as con:
        return con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall()


def shape(path: Path) -> dict[str, Any]:
    """Tables with their columns' types (order aside), views and macros: what the schema is, not how it grew."""
    with SidecarFile(path).read_only() as con:
        columns: dict[str, set[tuple[str, str]]] = {}
        for table, column, kind in con.execute(
                "SELECT table_name, column_name, data_type FROM information_schema.columns").fetchall():
            columns.setdefault(table, set()).add((column, kind))
        views = {name for (name,) in con.execute(
            "SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
        macros = {name for (name,) in con.execute(
            "SELECT function_name FROM duckdb_functions() WHERE function_type = 'table_macro' AND NOT internal"
        ).fetchall()}
        keys = {(table, tuple(columns)) for table, columns in con.execute(
            "SELECT table_name, constraint_column_names FROM duckdb_constraints() WHERE constraint_type = 'PRIMARY KEY'"
        ).fetchall()}
    return {"columns": columns, "views": views, "macros": macros, "primary_keys": keys}


def recorded(sidecar: SidecarFile) -> list[tuple[str, datetime | None]]:
    with sidecar.connect() as con:
        return con.execute("SELECT name, applied_at FROM schema_migrations ORDER BY name").fetchall()


@pytest.mark.parametrize("name", list(VERSIONS))
def test_a_sidecar_of_every_earlier_version_upgrades_in_place(tmp_path: Path, name: str) -> None:
    old = VERSIONS[name]
    path = tmp_path / "old" / "sidecar.duckdb"
    path.parent.mkdir()
    make_old_sidecar(path, old["documents"], old["tables"], old["views"])
    with duckdb.connect(str(path), read_only=True) as con:  # what the upgrade keeps as it is
        kept = {table: con.execute(f"SELECT * FROM {table} ORDER BY ALL").fetchall()
                for table in old["tables"] if table not in ("source_errors", "roster_links", "state")}
    chat = {table: kept.pop(table) for table in ("chat_sessions", "chat_turns") if table in kept}
    sidecar = Sidecar(path)

    steps = recorded(sidecar)
    assert [step for step, _ in steps] == STEP_NAMES
    assert all(when is None for _, when in steps[:old["steps"]])  # it had these before steps were recorded
    assert all(when is not None for _, when in steps[old["steps"]:])
    assert shape(path) == shape(Sidecar(tmp_path / "new" / "sidecar.duckdb").path)
    for table, rows in kept.items():
        if table == "sources":  # step 0012 adds body_facts: every source keeps them in use
            rows = [(*row, True) for row in rows]
        if table == "uploads":  # step 0013 adds upload_name: the client's name was not recorded before
            rows = [(*row, None) for row in rows]
        assert table_rows(sidecar, table) == rows, table
    for table, rows in chat.items():  # the chat moved to its own file
        assert table_rows(ChatStore.beside(path), table) == rows, table

    document = sidecar.documents()["a" * 64]
    assert {name: document[name] for name in old["documents"]} == {
        name: OLD_DOCUMENT.get(name) for name in old["documents"]}
    assert all(document[name] is None for name in set(DOCUMENT_COLUMNS) - set(old["documents"]) - {"sources"})
    if old["steps"] < 6:  # from before named sources: the documents join the source `default`, refusals move
        assert document["sources"] == ["default"]
        assert sidecar.source_errors() == [{"source": "default", "path": "/corpus/empty.md", "reason": "empty file"}]
        assert {row["path"] for row in sidecar.source_files_of("default")} == set(document["paths"])
    else:
        assert document["sources"] == ["team"] and sidecar.sources()["team"]["roots"] == ["/corpus"]
    if old["steps"] >= 8:
        assert sidecar.get_state("field_labels") == "digest"
    if old["steps"] >= 7:  # the roster links are filled from the new views, and the fields read through them
        assert table_rows(sidecar, "roster_links") == [("a" * 64, "projects", "P-1")]
        fields = {row["name"]: row["text_value"] for row in sidecar.effective_fields_of("a" * 64)}
        assert (fields["project"], fields["owner"], fields["name"]) == ("P-1", "Ada", "pump.md")
    # The repositories work on it.
    sidecar.upsert([{"sha": "b" * 64, "shard": "b", "paths": ["/corpus/b.md"], "tags": ["x"], "status": "ok"}])
    assert sidecar.documents()["b" * 64]["tags"] == ["x"] and sidecar.documents()["a" * 64]["status"] == "ok"


def test_a_new_sidecar_records_every_step_and_opening_again_applies_nothing(sidecar_location: Path | str) -> None:  # noqa: F811
    path = sidecar_location
    sidecar = Sidecar(path)
    steps = recorded(sidecar)
    assert [step for step, _ in steps] == STEP_NAMES and all(when is not None for _, when in steps)
    assert [when for _, when in steps] == sorted(when for _, when in steps)  # applied in order
    with sidecar.connect() as con:
        assert {name for (name,) in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'documents' "
            "AND table_schema = current_schema()").fetchall()} == set(
            DOCUMENT_COLUMNS)
    sidecar.set_state("probe", "1")
    assert upgrade(sidecar) == [] and upgrade(Sidecar(path)) == []
    assert recorded(Sidecar(path)) == steps and Sidecar(path).get_state("probe") == "1"


def test_the_views_are_recreated_when_their_definition_changed(sidecar_location: Path | str) -> None:  # noqa: F811
    sidecar = Sidecar(sidecar_location)
    sidecar.upsert([{"sha": "a" * 64, "shard": "a", "paths": ["/d/x.md"], "status": "ok"}])
    with sidecar.connect() as con:  # as a sidecar whose views an earlier version made
        con.execute("DROP MACRO TABLE effective_of" if sidecar.url is None else "DROP FUNCTION effective_of")
        con.execute("UPDATE state SET value = 'older' WHERE key = 'views_version'")
    assert upgrade(sidecar) == []
    assert {row["name"] for row in sidecar.effective_fields_of("a" * 64)} >= {"id", "name", "path"}


def old_skeleton(path: Path) -> None:
    make_old_sidecar(path, DOCUMENTS_V1, V1_TABLES, "")


def open_and_report(path: str, start: Any, applied: Any) -> None:
    """In a child process: wait for the start, open the sidecar, report the steps this process applied."""
    start.wait(60)
    applied.put(upgrade(SidecarFile(Path(path))))


def test_two_processes_opening_an_old_sidecar_at_once_apply_each_step_once(tmp_path: Path) -> None:
    path = tmp_path / "sidecar.duckdb"
    old_skeleton(path)
    context = multiprocessing.get_context("spawn")
    start, applied = context.Event(), context.Queue()
    workers = [context.Process(target=open_and_report, args=(str(path), start, applied)) for _ in range(2)]
    for worker in workers:
        worker.start()
    start.set()
    reports = [applied.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    assert sorted(reports, key=len) == [[], STEP_NAMES[1:]]  # one process upgraded, the other found it done
    assert [step for step, _ in recorded(Sidecar(path))] == STEP_NAMES


def test_threads_opening_an_old_sidecar_at_once_apply_each_step_once(tmp_path: Path) -> None:
    path = tmp_path / "sidecar.duckdb"
    old_skeleton(path)
    with ThreadPoolExecutor(4) as pool:
        reports = list(pool.map(lambda _: upgrade(SidecarFile(path)), range(4)))
    assert sorted(reports, key=len) == [[], [], [], STEP_NAMES[1:]]
    assert [step for step, _ in recorded(Sidecar(path))] == STEP_NAMES


def test_chat_turns_keep_their_owner_and_expire(sidecar_location: Path | str) -> None:  # noqa: F811
    state = Sidecar(sidecar_location).data_state()
    sidecar = ChatStore.beside(sidecar_location)  # chat.duckdb beside the file; the same PostgreSQL database
    day = timedelta(days=1)
    assert sidecar.append_chat_turn("s1", "key:a", "hi", "hello", {"n": 1}, day) == 1
    assert sidecar.append_chat_turn("s1", "key:b", "hi", "hello", {}, day) is None  # another owner's session
    assert sidecar.append_chat_turn("s1", "key:a", "more", "sure", {"n": 2}, day) == 2
    assert [turn["record"] for turn in sidecar.chat_turns("s1", "key:a", day, last=1)] == [{"n": 2}]
    assert sidecar.chat_turns("s1", "key:b", day) is None
    assert sidecar.chat_turns("s1", "key:a", timedelta(0)) is None  # expired
    # Saving with no retention expires it: the id starts afresh as the new owner's session.
    assert sidecar.append_chat_turn("s1", "key:b", "new", "start", {}, timedelta(0)) == 1
    sidecar.delete_chat_session("s1")
    assert sidecar.chat_turns("s1", "key:b", day) is None
    assert Sidecar(sidecar_location).data_state() == state  # saving turns leaves the sidecar's state (its caches)


def test_threads_opening_a_new_sidecar_at_once_apply_each_step_once(sidecar_location: Path | str) -> None:  # noqa: F811
    with ThreadPoolExecutor(4) as pool:
        reports = list(pool.map(lambda _: upgrade(SidecarFile(sidecar_location)), range(4)))
    assert sorted(reports, key=len) == [[], [], [], STEP_NAMES]


def test_the_repositories_read_back_what_they_wrote(sidecar_location: Path | str) -> None:  # noqa: F811
    """Documents, sources, fields, rosters, runs and eval history through the repositories, on either backend."""
    sidecar = Sidecar(sidecar_location)
    sha, other = "a" * 64, "b" * 64
    sidecar.upsert([{**OLD_DOCUMENT, "sources": ["team"], "pages": 3},
                    {"sha": other, "shard": "b", "paths": ["/corpus/b.pdf"], "rel_path": "b.pdf", "doc_type": "pdf",
                     "status": "failed", "error": "broken", "sources": ["team"], "tags": []}])
    sidecar.upsert([{"sha": sha, "chars": 99}])  # a partial row keeps the other columns
    stored = sidecar.documents()[sha]
    assert (stored["chars"], stored["title"], stored["first_seen_at"], stored["tags"]) == (99, "Pump", STAMP, ["ops"])
    assert sidecar.documents(["b"]).keys() == {other} and sidecar.shas_by_shard() == {"a": [sha], "b": [other]}
    assert sidecar.failed_documents() == [{"path": "/corpus/b.pdf", "error": "broken"}]
    assert sidecar.totals_by_tag() == [{"tag": "ops", "documents": 1, "chunks": 2},
                                       {"tag": None, "documents": 1, "chunks": 0}]
    assert sidecar.record_source("team", "roots", ["/corpus"], [
        {"source": "team", "path": "/corpus/notes/pump.md", "root": "/corpus", "sha": sha, "bytes": 120,
         "doc_type": "md", "tags": ["ops"]}], [("/corpus/empty.md", "empty file")])
    assert not sidecar.record_source("team", "roots", ["/corpus"], sidecar.source_files_of("team"),
                                     [("/corpus/empty.md", "empty file")])
    assert sidecar.totals_by_source() == [{"source": "team", "kind": "roots", "documents": 2, "failed": 1,
                                           "pending": 0, "chunks": 2}]
    sidecar.replace_catalogue([sha], [{"chunk_id": "k1", "sha": sha, "shard": "a", "chunk_set": "c1",
                                       "chunk_index": 0, "heading_path": "Pump", "line_start": 1, "page": None,
                                       "chars": 40}], [{"sha": sha, "shard": "a", "kind": "email", "count": 2}])
    assert sidecar.catalogued_by_shard("c1") == {"a": {sha}}
    assert sidecar.redaction_totals() == [{"kind": "email", "findings": 2, "documents": 1}]
    sidecar.replace_fields([{"sha": sha, "name": "project", "position": 0, "kind": "string", "text_value": "P-1",
                             "number_value": None, "date_value": None, "origin": "front_matter"}], [sha])
    sidecar.replace_roster("projects", {"name": "projects", "path": "p.csv", "key": "project_id",
                                        "document_key": "project", "authoritative": ["owner"], "sha": "d1",
                                        "rows": 1, "problems": []},
                           [{"roster": "projects", "key": "P-1", "name": "owner", "position": 0, "kind": "string",
                             "text_value": "Ada", "number_value": None, "date_value": None, "authoritative": True}])
    fields = {row["name"]: row for row in sidecar.effective_fields_of(sha)}
    assert (fields["owner"]["text_value"], fields["owner"]["origin"]) == ("Ada", "roster:projects")
    assert (fields["folder"]["text_value"], fields["name"]["text_value"]) == ("notes", "pump.md")
    assert fields["ingested_at"]["text_value"] == "2025-03-01T12:00:00"
    assert sidecar.field_labels([sha], ["owner", "project"]) == {sha: ["owner=Ada", "project=P-1"]}
    sidecar.record_run("r1", "raw_documents", ["a"], {"added": 1}, 0.5, {"added": [sha]})
    assert sidecar.run_actions(["r1"]) == {("raw_documents", "added"): {sha}}
    sidecar.record_eval("e1", "sample", "v1", "docs", 3, {"recall@5": 0.9})
    assert [row["metrics"] for row in sidecar.eval_history("sample")] == [{"recall@5": 0.9}]
    sidecar.delete([other])
    assert sidecar.document_shas() == {sha}


def write_concurrently(location: str, worker: int, rounds: int) -> None:
    """In a child process: merge this worker's column into the shared documents and append chat turns."""
    sidecar = Sidecar(location)
    for round_ in range(rounds):
        sidecar.upsert([{"sha": "a" * 64, "shard": "a", "paths": ["/d/a.md"], f"{'pages' if worker else 'chars'}":
                         round_}])
        ChatStore.beside(location).append_chat_turn("s", "key", f"{worker}-{round_}", "", {}, timedelta(days=1))


def test_workers_writing_a_postgres_sidecar_at_once_lose_no_update(postgres_server, request) -> None:  # noqa: F811
    location = location_for("postgres", request, Path())
    Sidecar(location)
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=write_concurrently, args=(location, worker, 15)) for worker in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(120)
        assert worker.exitcode == 0
    sidecar = Sidecar(location)
    document = sidecar.documents()["a" * 64]
    assert (document["chars"], document["pages"]) == (14, 14)  # each worker's last write kept
    turns = ChatStore.beside(location).chat_turns("s", "key", timedelta(days=1))
    assert [turn["turn"] for turn in turns] == list(range(1, 31))
    assert {turn["message"] for turn in turns} == {f"{w}-{r}" for w in range(2) for r in range(15)}
