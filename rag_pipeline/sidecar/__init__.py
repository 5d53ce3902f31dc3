"""DuckDB metadata sidecar: exact per-document state (paths, status, errors, counts, timings).

DuckDB allows one writer process at a time, so every operation opens its own short-lived connection and
retries briefly when another process holds the file lock (or another thread of this one is opening or closing
the file: the API's threads read it while an ingest writes it).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from rag_pipeline.errors import StoreUnavailable

DOCUMENT_COLUMNS: dict[str, str] = {
    "sha": "VARCHAR PRIMARY KEY",
    "shard": "VARCHAR NOT NULL",
    "paths": "VARCHAR[] NOT NULL",
    "sources": "VARCHAR[]",  # the sources that hold the document (NULL in rows written before sources existed)
    "rel_path": "VARCHAR",  # first path relative to its root: the document's name in embedded context
    "doc_type": "VARCHAR",
    "tags": "VARCHAR[]",  # from the corpus rules' per-folder tags, over all the document's paths
    "bytes": "BIGINT",
    "status": "VARCHAR",  # pending (not fully ingested yet) | ok (catalogued: its ingest ended) | failed
    "stage": "VARCHAR",  # last stage that completed: raw | markdown | redacted | chunks | catalogue
    "error": "VARCHAR",
    "converter": "VARCHAR",
    "pages": "INTEGER",
    "chars": "INTEGER",
    "title": "VARCHAR",
    "first_heading": "VARCHAR",
    "redactions": "INTEGER",
    "chunks": "INTEGER",
    "chunk_set": "VARCHAR",  # chunking id of this document's rows in the chunks table
    "convert_ms": "DOUBLE",
    "redact_ms": "DOUBLE",
    "chunk_ms": "DOUBLE",
    "first_seen_at": "TIMESTAMP",
    "ingested_at": "TIMESTAMP",  # when its chunks were last catalogued (the end of its ingest)
    "updated_at": "TIMESTAMP",
}

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS documents ({", ".join(f"{name} {kind}" for name, kind in DOCUMENT_COLUMNS.items())});
CREATE TABLE IF NOT EXISTS sources (name VARCHAR PRIMARY KEY, kind VARCHAR, roots VARCHAR[], synced_at TIMESTAMP);
CREATE TABLE IF NOT EXISTS source_files (source VARCHAR NOT NULL, path VARCHAR NOT NULL, root VARCHAR,
    sha VARCHAR NOT NULL, bytes BIGINT, doc_type VARCHAR, tags VARCHAR[], PRIMARY KEY (source, path));
CREATE TABLE IF NOT EXISTS refusals (source VARCHAR NOT NULL, path VARCHAR NOT NULL, reason VARCHAR,
    seen_at TIMESTAMP);
CREATE TABLE IF NOT EXISTS uploads (path VARCHAR PRIMARY KEY, source VARCHAR NOT NULL, sha VARCHAR NOT NULL,
    filename VARCHAR, bytes BIGINT, uploaded_by VARCHAR, uploaded_at TIMESTAMP);
CREATE TABLE IF NOT EXISTS run_documents (run_id VARCHAR, stage VARCHAR, sha VARCHAR, action VARCHAR);
CREATE TABLE IF NOT EXISTS chunks (
    chunk_id VARCHAR PRIMARY KEY, sha VARCHAR NOT NULL, shard VARCHAR NOT NULL, chunk_set VARCHAR NOT NULL,
    chunk_index INTEGER, heading_path VARCHAR, line_start INTEGER, page INTEGER, chars INTEGER);
CREATE TABLE IF NOT EXISTS redactions (sha VARCHAR NOT NULL, shard VARCHAR NOT NULL, kind VARCHAR NOT NULL,
    count INTEGER, PRIMARY KEY (sha, kind));
CREATE TABLE IF NOT EXISTS runs (run_id VARCHAR, asset VARCHAR, shards VARCHAR, added INTEGER, skipped INTEGER,
    purged INTEGER, failed INTEGER, seconds DOUBLE, finished_at TIMESTAMP);
CREATE TABLE IF NOT EXISTS eval_runs (run_id VARCHAR, golden VARCHAR, index_version VARCHAR, collection VARCHAR,
    questions INTEGER, metrics JSON, finished_at TIMESTAMP);
CREATE TABLE IF NOT EXISTS document_fields (sha VARCHAR NOT NULL, name VARCHAR NOT NULL, position INTEGER NOT NULL,
    kind VARCHAR NOT NULL, text_value VARCHAR, number_value DOUBLE, date_value TIMESTAMP, origin VARCHAR,
    PRIMARY KEY (sha, name, position));
CREATE TABLE IF NOT EXISTS field_errors (sha VARCHAR NOT NULL, origin VARCHAR, error VARCHAR);
CREATE TABLE IF NOT EXISTS rosters (name VARCHAR PRIMARY KEY, path VARCHAR, key VARCHAR, document_key VARCHAR,
    authoritative VARCHAR[], sha VARCHAR, rows INTEGER, problems VARCHAR[], loaded_at TIMESTAMP);
CREATE TABLE IF NOT EXISTS roster_values (roster VARCHAR NOT NULL, key VARCHAR NOT NULL, name VARCHAR NOT NULL,
    position INTEGER NOT NULL, kind VARCHAR NOT NULL, text_value VARCHAR, number_value DOUBLE, date_value TIMESTAMP,
    authoritative BOOLEAN);
CREATE TABLE IF NOT EXISTS roster_links (sha VARCHAR NOT NULL, roster VARCHAR NOT NULL, key VARCHAR NOT NULL);
CREATE TABLE IF NOT EXISTS reconciliation (roster VARCHAR, key VARCHAR, sha VARCHAR, path VARCHAR, field VARCHAR,
    status VARCHAR, document_value VARCHAR, roster_value VARCHAR);
CREATE TABLE IF NOT EXISTS state (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE IF NOT EXISTS chat_sessions (id VARCHAR PRIMARY KEY, owner VARCHAR NOT NULL, created_at TIMESTAMP,
    updated_at TIMESTAMP);
CREATE TABLE IF NOT EXISTS chat_turns (session_id VARCHAR NOT NULL, turn INTEGER NOT NULL, message VARCHAR,
    answer VARCHAR, record JSON, created_at TIMESTAMP, PRIMARY KEY (session_id, turn));
CREATE TABLE IF NOT EXISTS enrichments (sha VARCHAR NOT NULL, field VARCHAR NOT NULL, model VARCHAR NOT NULL,
    schema_hash VARCHAR NOT NULL, method VARCHAR, value JSON, error VARCHAR, created_at TIMESTAMP,
    PRIMARY KEY (sha, field, model, schema_hash));
"""
# Fields in one long, typed form (one row per value; a list has one row per element): the built-in facts of every
# document, its stated and enriched fields, and the roster's columns joined by key, authoritative ones replacing
# what the document states (a document whose key field holds several values joins no row: its key is ambiguous).
# `effective_fields` is what the metadata query tool reads. Which document joins which
# roster row is kept in the table roster_links (refreshed from the view roster_matches whenever fields or rosters
# are written), so a query does not redo the join.
VIEWS = """
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
CREATE OR REPLACE VIEW roster_matches AS
    SELECT f.sha, r.name AS roster, f.text_value AS key FROM rosters r
    JOIN own_fields f ON f.name = r.document_key
    JOIN (SELECT DISTINCT roster, key FROM roster_values) k ON k.roster = r.name AND k.key = f.text_value
    WHERE (SELECT count(*) FROM own_fields g WHERE g.sha = f.sha AND g.name = f.name) = 1;
CREATE OR REPLACE VIEW roster_fields AS
    SELECT m.sha, v.name, v.kind, v.text_value, v.number_value, v.date_value, 'roster:' || m.roster AS origin,
        v.authoritative FROM roster_links m JOIN roster_values v ON v.roster = m.roster AND v.key = m.key;
"""
# The effective fields: stated and built-in ones unless an authoritative roster column replaces them, the
# authoritative columns, and the other columns where the document states nothing. One definition serves the view
# (every document) and the table macro effective_of(shas) (a few documents, filtered before the joins).
EFFECTIVE = """SELECT f.* FROM own_fields f
        ANTI JOIN (SELECT DISTINCT sha, name FROM roster_fields WHERE authoritative{only}) a USING (sha, name)
        WHERE true{only}
    UNION ALL
    SELECT sha, name, kind, text_value, number_value, date_value, origin FROM roster_fields
        WHERE authoritative{only}
    UNION ALL
    SELECT r.sha, r.name, r.kind, r.text_value, r.number_value, r.date_value, r.origin FROM roster_fields r
        ANTI JOIN (SELECT DISTINCT sha, name FROM own_fields WHERE true{only}) o USING (sha, name)
        WHERE NOT r.authoritative{only}"""
VIEWS += (f"CREATE OR REPLACE VIEW effective_fields AS {EFFECTIVE.format(only='')};\n"
          "CREATE OR REPLACE MACRO effective_of(shas) AS TABLE "
          f"{EFFECTIVE.format(only=' AND list_contains(shas, sha)')};\n")
TABLES = ("documents", "sources", "source_files", "refusals", "uploads", "run_documents", "chunks", "redactions",
          "runs", "eval_runs", "document_fields", "field_errors", "rosters", "roster_values", "roster_links",
          "reconciliation", "enrichments", "state", "chat_sessions", "chat_turns", "builtin_fields", "own_fields", "roster_matches", "roster_fields", "effective_fields")
FIELD_COLUMNS = ["sha", "name", "position", "kind", "text_value", "number_value", "date_value", "origin"]
ROSTER_VALUE_COLUMNS = ["roster", "key", "name", "position", "kind", "text_value", "number_value", "date_value",
                        "authoritative"]
RECONCILIATION_COLUMNS = ["roster", "key", "sha", "path", "field", "status", "document_value", "roster_value"]
SOURCE_FILE_COLUMNS = ["source", "path", "root", "sha", "bytes", "doc_type", "tags"]
DEFAULT_SOURCE = "default"  # the source that documents of a sidecar from before named sources join
CHUNK_COLUMNS = ["chunk_id", "sha", "shard", "chunk_set", "chunk_index", "heading_path", "line_start", "page", "chars"]

LOCK_RETRY_SECONDS = 10.0


def records(cursor: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """Rows of an executed query as dicts (NULL stays None)."""
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def add_missing_columns(con: duckdb.DuckDBPyConnection) -> None:
    """Add the document columns a sidecar made by an earlier version lacks (they start as NULL). IF NOT EXISTS:
    another connection may add the same column first. Columns added this way carry no constraints."""
    present = {name for (name,) in con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'documents'").fetchall()}
    for name, kind in DOCUMENT_COLUMNS.items():
        if name not in present:
            con.execute(f"ALTER TABLE documents ADD COLUMN IF NOT EXISTS {name} {kind}")


def table_exists(con: duckdb.DuckDBPyConnection, name: str) -> bool:
    return bool(con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name]).fetchone()[0])


def schema_is_current(con: duckdb.DuckDBPyConnection) -> bool:
    """True when every table and document column exists (the common case: no DDL, nothing to conflict)."""
    tables = {name for (name,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    columns = {name for (name,) in con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'documents'").fetchall()}
    return set(TABLES) <= tables and set(DOCUMENT_COLUMNS) <= columns


def migrate_to_sources(con: duckdb.DuckDBPyConnection) -> None:
    """A sidecar from before named sources: its documents join the source `default`, whose roots are derived from
    each document's first path and its root-relative path; the last scan's refusals move to `refusals`."""
    rows = records(con.execute("SELECT sha, paths, rel_path, bytes, doc_type, tags FROM documents"))
    roots = sorted({row["paths"][0][: -len(row["rel_path"]) - 1] for row in rows
                    if row["rel_path"] and row["paths"][0].endswith("/" + row["rel_path"])})
    members = []
    for row in rows:
        for path in row["paths"]:
            root = next((root for root in roots if path.startswith(root + "/")), str(Path(path).parent))
            members.append({"source": DEFAULT_SOURCE, "path": path, "root": root, "sha": row["sha"],
                            "bytes": row["bytes"], "doc_type": row["doc_type"], "tags": row["tags"] or []})
    if members:
        con.register("members", pd.DataFrame(members, columns=SOURCE_FILE_COLUMNS, dtype=object))
        con.execute(f"INSERT OR REPLACE INTO source_files SELECT {', '.join(SOURCE_FILE_COLUMNS)} FROM members")
        con.execute("INSERT OR REPLACE INTO sources VALUES (?, 'roots', ?, NULL)", [DEFAULT_SOURCE, roots])
    con.execute("UPDATE documents SET sources = [?] WHERE sources IS NULL", [DEFAULT_SOURCE])
    if table_exists(con, "source_errors"):
        con.execute("INSERT INTO refusals SELECT ?, path, reason, seen_at FROM source_errors", [DEFAULT_SOURCE])
        con.execute("DROP TABLE source_errors")


READ_ONLY_CONFIG = {"enable_external_access": False, "lock_configuration": True, "threads": 1, "max_memory": "512MB"}
READ_ONLY_WAIT_SECONDS = 5.0


class ModeGate:
    """Connections of one process to one DuckDB file all need the same configuration (DuckDB refuses to open a
    file twice with different ones), so read-write and read-only connections take turns: any number of one mode
    at a time; a mode that is waiting stops new connections of the other mode (neither starves)."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._mode: str | None = None
        self._open = 0
        self._waiting: dict[str, int] = {}
        self._local = threading.local()  # the mode this thread holds

    @contextmanager
    def hold(self, mode: str, timeout: float, path: Path) -> Iterator[None]:
        held = getattr(self._local, "mode", None)
        if held is not None:  # this thread holds the gate already: nest in the same mode only
            if held != mode:
                raise RuntimeError(f"a {mode} connection to {path} opened inside a {held} one")
            yield
            return
        deadline = time.monotonic() + timeout
        with self._condition:
            self._waiting[mode] = self._waiting.get(mode, 0) + 1
            try:
                while not (self._open == 0 or (self._mode == mode and not self._others_waiting(mode))):
                    if not self._condition.wait(timeout=max(0.0, deadline - time.monotonic())) and \
                            time.monotonic() >= deadline:
                        raise StoreUnavailable(f"the metadata sidecar {path} stayed busy for {timeout:g} s")
            finally:
                self._waiting[mode] -= 1
            self._mode, self._open = mode, self._open + 1
        self._local.mode = mode
        try:
            yield
        finally:
            self._local.mode = None
            with self._condition:
                self._open -= 1
                self._condition.notify_all()

    def _others_waiting(self, mode: str) -> bool:
        return any(count for other, count in self._waiting.items() if other != mode)


_gates: dict[Path, ModeGate] = {}
_gates_lock = threading.Lock()


def gate_for(path: Path) -> ModeGate:
    with _gates_lock:
        return _gates.setdefault(Path(path).resolve(), ModeGate())


def open_retrying(opener: Callable[[], duckdb.DuckDBPyConnection], path: Path,
                  timeout: float) -> duckdb.DuckDBPyConnection:
    """A new connection; retried while another thread of this process attaches or detaches the file (DuckDB's
    instance cache) or another process holds its lock."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return opener()
        except duckdb.ResourceInUseException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                raise StoreUnavailable(f"the metadata sidecar {path} is locked by another process: {exc}") from exc
            time.sleep(0.2)


def refresh_links(con: duckdb.DuckDBPyConnection, shas: list[str] | None = None) -> None:
    """Recompute roster_links (of these documents, or of all) from the roster_matches view, in the caller's
    transaction."""
    if shas is None:
        con.execute("DELETE FROM roster_links")
        con.execute("INSERT INTO roster_links SELECT sha, roster, key FROM roster_matches")
    else:
        con.execute("DELETE FROM roster_links WHERE list_contains(?, sha)", [shas])
        con.execute("INSERT INTO roster_links SELECT sha, roster, key FROM roster_matches WHERE list_contains(?, sha)",
                    [shas])


class Sidecar:
    """The DuckDB file at `path`; created with its schema on first use."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with self.connect() as con:
            if schema_is_current(con):
                return
            con.execute("BEGIN TRANSACTION")  # the schema and the migration land together or not at all
            had_sources = table_exists(con, "source_files")
            con.execute(SCHEMA)
            add_missing_columns(con)
            con.execute(VIEWS)
            refresh_links(con)
            if not had_sources:
                migrate_to_sources(con)
            con.execute("COMMIT")

    @contextmanager
    def connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-write connection (retried briefly while another process holds the file)."""
        with gate_for(self.path).hold("read-write", LOCK_RETRY_SECONDS, self.path):
            con = open_retrying(lambda: duckdb.connect(str(self.path)), self.path, LOCK_RETRY_SECONDS)
            try:
                yield con
            finally:
                con.close()

    @contextmanager
    def read_only(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A read-only connection with external access off and its configuration locked (what the metadata query
        tool runs on): it can read the sidecar's tables and nothing else, and change nothing."""
        with gate_for(self.path).hold("read-only", READ_ONLY_WAIT_SECONDS, self.path):
            con = open_retrying(lambda: duckdb.connect(str(self.path), read_only=True, config=READ_ONLY_CONFIG),
                                self.path, READ_ONLY_WAIT_SECONDS)
            try:
                yield con
            finally:
                con.close()

    def documents(self, shards: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        """sha -> row, for the given shards (all when None)."""
        query = "SELECT * FROM documents"
        params: list[Any] = []
        if shards is not None:
            query += " WHERE list_contains(?, shard)"
            params.append(list(shards))
        with self.connect() as con:
            return {row["sha"]: row for row in records(con.execute(query, params))}

    def upsert(self, rows: Iterable[dict[str, Any]]) -> None:
        """Insert or update documents; fields missing from a row keep their stored value."""
        rows = list(rows)
        if not rows:
            return
        stored = self.documents_by_sha([row["sha"] for row in rows])
        merged = []
        stamp = now()
        for row in rows:
            record = {column: None for column in DOCUMENT_COLUMNS}
            record.update(stored.get(row["sha"], {}))
            record.update(row)
            record["first_seen_at"] = record["first_seen_at"] or stamp
            record["updated_at"] = stamp
            merged.append(record)
        frame = pd.DataFrame(merged, columns=list(DOCUMENT_COLUMNS), dtype=object)
        with self.connect() as con:
            con.register("incoming", frame)
            columns = ", ".join(DOCUMENT_COLUMNS)
            con.execute(f"INSERT OR REPLACE INTO documents ({columns}) SELECT {columns} FROM incoming")

    def totals_by_type(self) -> list[dict[str, Any]]:
        """Documents, failures and chunks per document type."""
        return self.query(
            "SELECT doc_type, count(*) AS documents, count(*) FILTER (status = 'failed') AS failed, "
            "coalesce(sum(chunks), 0) AS chunks, coalesce(sum(redactions), 0) AS redactions "
            "FROM documents GROUP BY doc_type ORDER BY doc_type"
        )

    def totals_by_tag(self) -> list[dict[str, Any]]:
        """Documents and chunks per tag (a document counts under each of its tags), then the untagged ones."""
        return self.query(
            "SELECT tag, count(*) AS documents, coalesce(sum(chunks), 0) AS chunks FROM ("
            "  SELECT unnest(tags) AS tag, chunks FROM documents) GROUP BY tag "
            "UNION ALL SELECT NULL, count(*), coalesce(sum(chunks), 0) FROM documents WHERE len(tags) = 0 "
            "OR tags IS NULL ORDER BY tag NULLS LAST"
        )

    def documents_by_sha(self, shas: list[str]) -> dict[str, dict[str, Any]]:
        with self.connect() as con:
            cursor = con.execute("SELECT * FROM documents WHERE list_contains(?, sha)", [shas])
            return {row["sha"]: row for row in records(cursor)}

    def delete(self, shas: Iterable[str]) -> None:
        """Forget documents: their rows, fields and field errors (their enrichment cache stays: the same bytes
        coming back are not enriched again)."""
        shas = list(shas)
        if shas:
            with self.connect() as con:
                con.execute("BEGIN TRANSACTION")
                for table in ("documents", "document_fields", "field_errors", "roster_links"):
                    con.execute(f"DELETE FROM {table} WHERE list_contains(?, sha)", [shas])
                con.execute("COMMIT")

    def field_labels(self, shas: list[str], names: list[str]) -> dict[str, list[str]]:
        """sha -> the sorted "name=value" labels of these fields (their effective values: rosters applied)."""
        if not shas or not names:
            return {}
        with self.connect() as con:
            rows = con.execute(
                "SELECT sha, list(DISTINCT name || '=' || text_value ORDER BY name || '=' || text_value) "
                "FROM effective_fields WHERE list_contains(?, sha) AND list_contains(?, name) GROUP BY sha",
                [shas, names]).fetchall()
        return {sha: list(labels) for sha, labels in rows}

    def most_common_chunk_set(self) -> str | None:
        """The chunking id most documents were chunked with (None before any was chunked)."""
        with self.connect() as con:
            row = con.execute("SELECT chunk_set FROM documents WHERE chunk_set IS NOT NULL GROUP BY chunk_set "
                              "ORDER BY count(*) DESC LIMIT 1").fetchone()
        return row[0] if row else None

    def get_state(self, key: str) -> str | None:
        with self.connect() as con:
            row = con.execute("SELECT value FROM state WHERE key = ?", [key]).fetchone()
        return row[0] if row else None

    def set_state(self, key: str, value: str) -> None:
        with self.connect() as con:
            con.execute("INSERT OR REPLACE INTO state VALUES (?, ?)", [key, value])

    def record_enrichments(self, rows: list[dict[str, Any]]) -> None:
        """Cache enrichment results (sha, field, model, schema_hash, method, value JSON, error)."""
        if rows:
            columns = ["sha", "field", "model", "schema_hash", "method", "value", "error"]
            with self.connect() as con:
                con.register("incoming", pd.DataFrame(rows, columns=columns, dtype=object))
                con.execute(f"INSERT OR REPLACE INTO enrichments SELECT {', '.join(columns)}, now() FROM incoming")

    def replace_field_values(self, name: str, rows: list[dict[str, Any]]) -> bool:
        """Make `rows` (FIELD_COLUMNS dicts) the only values of field `name`; True when that changed anything."""
        with self.connect() as con:
            stored = sorted(con.execute("SELECT sha, position, kind, text_value, origin FROM document_fields "
                                        "WHERE name = ?", [name]).fetchall())
            incoming = sorted((row["sha"], row["position"], row["kind"], row["text_value"], row["origin"])
                              for row in rows)
            if stored == incoming:
                return False
            con.execute("BEGIN TRANSACTION")
            con.execute("DELETE FROM document_fields WHERE name = ?", [name])
            if rows:
                con.register("incoming", pd.DataFrame(rows, columns=FIELD_COLUMNS, dtype=object))
                con.execute(f"INSERT INTO document_fields SELECT {', '.join(FIELD_COLUMNS)} FROM incoming")
            refresh_links(con)
            con.execute("COMMIT")
        return True

    def replace_roster(self, name: str, roster: dict[str, Any] | None, values: list[dict[str, Any]]) -> None:
        """Replace one roster (its rosters row and roster_values) in one transaction; None removes it."""
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            con.execute("DELETE FROM roster_values WHERE roster = ?", [name])
            con.execute("DELETE FROM rosters WHERE name = ?", [name])
            if roster is not None:
                con.execute("INSERT INTO rosters VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            [roster["name"], roster["path"], roster["key"], roster["document_key"],
                             roster["authoritative"], roster["sha"], roster["rows"], roster["problems"], now()])
            if values:
                con.register("incoming", pd.DataFrame(values, columns=ROSTER_VALUE_COLUMNS, dtype=object))
                con.execute(f"INSERT INTO roster_values SELECT {', '.join(ROSTER_VALUE_COLUMNS)} FROM incoming")
            refresh_links(con)
            con.execute("COMMIT")

    def refresh_roster_links(self) -> None:
        """Recompute which document joins which roster row (a document's key may be a built-in field that a move
        changed); the roster asset does this on every run."""
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            refresh_links(con)
            con.execute("COMMIT")

    def replace_reconciliation(self, rows: list[dict[str, Any]]) -> None:
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            con.execute("DELETE FROM reconciliation")
            if rows:
                con.register("incoming", pd.DataFrame(rows, columns=RECONCILIATION_COLUMNS, dtype=object))
                con.execute(f"INSERT INTO reconciliation SELECT {', '.join(RECONCILIATION_COLUMNS)} FROM incoming")
            con.execute("COMMIT")

    def replace_fields(self, rows: list[dict[str, Any]], shas: list[str], origins: list[str] | None = None,
                       names: list[str] | None = None, errors: list[dict[str, Any]] | None = None,
                       error_origin: str = "extract") -> None:
        """Replace the field rows (FIELD_COLUMNS dicts) of these documents in one transaction: all of them, or only
        those of the given `origins` or `names`; with `errors` (sha, origin, error dicts), also their field errors
        of `error_origin`."""
        if not shas:
            return
        condition, params = "list_contains(?, sha)", [shas]
        if origins is not None:
            condition, params = condition + " AND list_contains(?, origin)", params + [origins]
        if names is not None:
            condition, params = condition + " AND list_contains(?, name)", params + [names]
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            con.execute(f"DELETE FROM document_fields WHERE {condition}", params)
            if rows:
                con.register("incoming_fields", pd.DataFrame(rows, columns=FIELD_COLUMNS, dtype=object))
                con.execute(f"INSERT INTO document_fields SELECT {', '.join(FIELD_COLUMNS)} FROM incoming_fields")
            if errors is not None:
                con.execute("DELETE FROM field_errors WHERE list_contains(?, sha) AND origin = ?", [shas, error_origin])
                if errors:
                    frame = pd.DataFrame(errors, columns=["sha", "origin", "error"], dtype=object)
                    con.register("incoming_errors", frame)
                    con.execute("INSERT INTO field_errors SELECT sha, origin, error FROM incoming_errors")
            refresh_links(con, shas)
            con.execute("COMMIT")

    def catalogued_shas(self, shard: str) -> set[str]:
        """Documents of the shard whose chunk rows are stored, however they were chunked."""
        with self.connect() as con:
            rows = con.execute("SELECT DISTINCT sha FROM chunks WHERE shard = ?", [shard]).fetchall()
        return {sha for (sha,) in rows}

    def catalogued_by_shard(self, chunk_set: str) -> dict[str, set[str]]:
        """shard -> documents catalogued with this chunking (chunk rows stored, or zero chunks), in one query."""
        with self.connect() as con:
            rows = con.execute(
                "SELECT DISTINCT shard, sha FROM chunks WHERE chunk_set = ? UNION "
                "SELECT shard, sha FROM documents WHERE chunk_set = ? AND chunks = 0", [chunk_set, chunk_set],
            ).fetchall()
        by_shard: dict[str, set[str]] = {}
        for shard, sha in rows:
            by_shard.setdefault(shard, set()).add(sha)
        return by_shard

    def pending_shas(self, shard: str) -> set[str]:
        """Documents of the shard whose ingest has not ended (status pending)."""
        with self.connect() as con:
            rows = con.execute("SELECT sha FROM documents WHERE shard = ? AND status = 'pending'", [shard]).fetchall()
        return {sha for (sha,) in rows}

    def replace_catalogue(self, shas: list[str], chunk_rows: list[dict[str, Any]],
                          redaction_rows: list[dict[str, Any]]) -> None:
        """Replace the chunk and redaction rows of these documents in one transaction."""
        chunk_frame = pd.DataFrame(chunk_rows, columns=CHUNK_COLUMNS, dtype=object)
        redaction_frame = pd.DataFrame(redaction_rows, columns=["sha", "shard", "kind", "count"], dtype=object)
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            con.execute("DELETE FROM chunks WHERE list_contains(?, sha)", [shas])
            con.execute("DELETE FROM redactions WHERE list_contains(?, sha)", [shas])
            con.register("incoming_chunks", chunk_frame)
            con.register("incoming_redactions", redaction_frame)
            con.execute(f"INSERT INTO chunks SELECT {', '.join(CHUNK_COLUMNS)} FROM incoming_chunks")
            con.execute("INSERT INTO redactions SELECT sha, shard, kind, count FROM incoming_redactions")
            con.execute("COMMIT")

    def record_run(self, run_id: str, asset: str, shards: list[str], counts: dict[str, int], seconds: float,
                   actions: dict[str, list[str]] | None = None) -> None:
        """A stage's counts in one run, and what it did to each document (action -> SHAs: added, purged, ...)."""
        rows = [(run_id, asset, sha, action) for action, shas in (actions or {}).items() for sha in shas]
        with self.connect() as con:
            con.execute(
                "INSERT INTO runs VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [run_id, asset, ",".join(shards), counts.get("added", 0), counts.get("skipped", 0),
                 counts.get("purged", 0), counts.get("failed", 0), seconds, now()],
            )
            if rows:
                con.register("incoming", pd.DataFrame(rows, columns=["run_id", "stage", "sha", "action"], dtype=object))
                con.execute("INSERT INTO run_documents SELECT run_id, stage, sha, action FROM incoming")

    def run_actions(self, run_ids: list[str]) -> dict[tuple[str, str], set[str]]:
        """(stage, action) -> the SHAs it applied to in these runs."""
        actions: dict[tuple[str, str], set[str]] = {}
        with self.connect() as con:
            for stage, action, sha in con.execute(
                    "SELECT stage, action, sha FROM run_documents WHERE list_contains(?, run_id)", [run_ids]).fetchall():
                actions.setdefault((stage, action), set()).add(sha)
        return actions

    def record_eval(self, run_id: str, golden: str, index_version: str, collection: str, questions: int,
                    metrics: dict[str, float]) -> None:
        """One evaluation's mean metrics, for the history the eval report compares against."""
        with self.connect() as con:
            con.execute("INSERT INTO eval_runs VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [run_id, golden, index_version, collection, questions, json.dumps(metrics), now()])

    def eval_history(self, golden: str, limit: int = 20) -> list[dict[str, Any]]:
        """The latest evaluations of a golden set, newest first, metrics decoded."""
        with self.connect() as con:
            rows = records(con.execute(
                "SELECT run_id, golden, index_version, collection, questions, metrics, finished_at FROM eval_runs "
                "WHERE golden = ? ORDER BY finished_at DESC LIMIT ?", [golden, limit]))
        return [{**row, "metrics": json.loads(row["metrics"])} for row in rows]

    def query(self, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
        """A read-only question to the sidecar (count, list, group by)."""
        with self.connect() as con:
            return records(con.execute(sql, params or []))

    def record_source(self, name: str, kind: str, roots: list[str], files: list[dict[str, Any]],
                      refusals: list[tuple[str, str]]) -> bool:
        """Replace what the source holds (its files as SOURCE_FILE_COLUMNS dicts, and the refusals of its scan);
        True when its files changed. Unchanged files are not rewritten (a no-change sync stays cheap)."""
        stamp = now()
        incoming = sorted((row["path"], row["sha"], sorted(row["tags"] or [])) for row in files)
        with self.connect() as con:
            stored = sorted((path, sha, sorted(tags or [])) for path, sha, tags in con.execute(
                "SELECT path, sha, tags FROM source_files WHERE source = ?", [name]).fetchall())
            con.execute("BEGIN TRANSACTION")
            changed = stored != incoming
            if changed:
                con.execute("DELETE FROM source_files WHERE source = ?", [name])
                con.register("incoming", pd.DataFrame(files, columns=SOURCE_FILE_COLUMNS, dtype=object))
                con.execute(f"INSERT INTO source_files SELECT {', '.join(SOURCE_FILE_COLUMNS)} FROM incoming")
            con.execute("DELETE FROM refusals WHERE source = ?", [name])
            if refusals:
                frame = pd.DataFrame([(name, path, reason, stamp) for path, reason in refusals],
                                     columns=["source", "path", "reason", "seen_at"], dtype=object)
                con.register("incoming_refusals", frame)
                con.execute("INSERT INTO refusals SELECT source, path, reason, seen_at FROM incoming_refusals")
            con.execute("INSERT OR REPLACE INTO sources VALUES (?, ?, ?, ?)", [name, kind, roots, stamp])
            con.execute("COMMIT")
        return changed

    def forget_source(self, name: str) -> None:
        """Delete everything recorded of a source (its files, refusals and roots) in one transaction."""
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            for table, column in (("source_files", "source"), ("refusals", "source"), ("sources", "name")):
                con.execute(f"DELETE FROM {table} WHERE {column} = ?", [name])
            con.execute("COMMIT")

    def source_files(self, exclude: Iterable[str] = ()) -> list[dict[str, Any]]:
        """Every source's recorded files (SOURCE_FILE_COLUMNS dicts), except those of the `exclude` sources."""
        with self.connect() as con:
            return records(con.execute(
                f"SELECT {', '.join(SOURCE_FILE_COLUMNS)} FROM source_files WHERE NOT list_contains(?, source) "
                "ORDER BY path, source", [list(exclude)]))

    def sources(self) -> dict[str, dict[str, Any]]:
        """name -> {kind, roots, synced_at} of every source synced so far."""
        with self.connect() as con:
            return {row["name"]: row for row in records(con.execute("SELECT * FROM sources ORDER BY name"))}

    def totals_by_source(self) -> list[dict[str, Any]]:
        """Documents, failures and chunks per source (a document counts under each source that holds it)."""
        return self.query(
            "SELECT s.name AS source, s.kind, count(d.sha) AS documents, "
            "count(d.sha) FILTER (d.status = 'failed') AS failed, "
            "count(d.sha) FILTER (d.status = 'pending') AS pending, coalesce(sum(d.chunks), 0) AS chunks "
            "FROM sources s LEFT JOIN documents d ON list_contains(d.sources, s.name) GROUP BY s.name, s.kind "
            "ORDER BY s.name")

    def source_errors(self, exclude: Iterable[str] = ()) -> list[dict[str, Any]]:
        """Discovery refusals of each source's latest scan (source, path, reason), except the `exclude` sources'."""
        with self.connect() as con:
            return records(con.execute("SELECT source, path, reason FROM refusals WHERE NOT list_contains(?, source) "
                                       "ORDER BY path, source", [list(exclude)]))

    def source_files_of(self, name: str) -> list[dict[str, Any]]:
        """The files the source `name` held at its last sync (SOURCE_FILE_COLUMNS dicts), by path."""
        with self.connect() as con:
            return records(con.execute(f"SELECT {', '.join(SOURCE_FILE_COLUMNS)} FROM source_files WHERE source = ? "
                                       "ORDER BY path", [name]))

    def record_upload(self, path: str, source: str, sha: str, filename: str, size: int,
                      uploaded_by: str | None) -> datetime:
        """One stored upload (its path under the source's upload folder); returns its uploaded_at."""
        stamp = now()
        with self.connect() as con:
            con.execute("INSERT OR REPLACE INTO uploads VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [path, source, sha, filename, size, uploaded_by, stamp])
        return stamp

    def uploads(self, source: str, sha: str | None = None) -> list[dict[str, Any]]:
        """The recorded uploads of a source (of the bytes `sha` only, when given), oldest first."""
        query, params = "SELECT * FROM uploads WHERE source = ?", [source]
        if sha is not None:
            query, params = query + " AND sha = ?", [source, sha]
        with self.connect() as con:
            return records(con.execute(query + " ORDER BY uploaded_at, path", params))

    def delete_uploads(self, paths: Iterable[str]) -> None:
        paths = list(paths)
        if paths:
            with self.connect() as con:
                con.execute("DELETE FROM uploads WHERE list_contains(?, path)", [paths])
