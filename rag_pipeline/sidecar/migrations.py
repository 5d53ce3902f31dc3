"""The sidecar's schema as an ordered table of named steps, applied in order and recorded in `schema_migrations`.

A new sidecar runs every step; an existing one runs the steps it has not recorded. A sidecar made before steps were
recorded (no `schema_migrations` table) is matched against each step's marks, the tables and columns that show it
has the step: the longest run of steps it has is recorded as applied (applied_at NULL: when is not known), and the
rest are applied. The steps are idempotent (IF NOT EXISTS) because such a sidecar may hold part of a step: versions
before the tags column created new tables but did not add the new columns of an existing documents table.

Every step of one upgrade, its records and the views land in one transaction. Two processes cannot upgrade at once
(DuckDB gives one process at a time the file for writing; on PostgreSQL the transaction holds the sidecar's write
lock); threads of one process take turns on a lock.

The steps are written in DuckDB's DDL, which PostgreSQL runs through postgres.ddl; PostgreSQL's views are
schema.POSTGRES_VIEWS, after the few DuckDB functions they use (postgres.COMPAT_FUNCTIONS), and its tables get the
change counter's triggers (postgres.CHANGE_COUNTER).

A change of the schema is a new step at the end of STEPS; a step once released is never edited. The views are
not steps: they are recreated whenever a step is applied or their definition (schema.VIEWS) changed.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rag_pipeline.sidecar import postgres
from rag_pipeline.sidecar.chat_tables import ChatStore
from rag_pipeline.sidecar.connection import Connection, SidecarFile, insert_rows, now, records
from rag_pipeline.sidecar.schema import (
    DUCKDB_VIEWS,
    POSTGRES_VIEWS,
    SOURCE_FILE_COLUMNS,
    VIEWS_VERSION,
    refresh_links,
)

DEFAULT_SOURCE = "default"  # the source that documents of a sidecar from before named sources join
VIEWS_STATE_KEY = "views_version"  # the state row naming the version of the views the sidecar holds


@dataclass(frozen=True)
class Step:
    name: str
    sql: str  # idempotent DDL
    marks: tuple[str, ...]  # tables and table.columns whose presence shows an unrecorded sidecar has this step
    # (none: a step made after steps were recorded, which an unrecorded sidecar never has)
    data: Callable[[Connection], None] | None = None  # moves existing rows, after the DDL


def move_into_default_source(con: Connection) -> None:
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
        insert_rows(con, "source_files", SOURCE_FILE_COLUMNS, members, replace=True)
        insert_rows(con, "sources", ["name", "kind", "roots", "synced_at"], [(DEFAULT_SOURCE, "roots", roots, None)],
                    replace=True)
    con.execute("UPDATE documents SET sources = ? WHERE sources IS NULL", [[DEFAULT_SOURCE]])
    if con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = 'source_errors' "
                   "AND table_schema = current_schema()").fetchone()[0]:
        con.execute("INSERT INTO refusals SELECT ?, path, reason, seen_at FROM source_errors", [DEFAULT_SOURCE])
        con.execute("DROP TABLE source_errors")


STEPS: tuple[Step, ...] = (
    Step("0001_initial", """
        CREATE TABLE IF NOT EXISTS documents (sha VARCHAR PRIMARY KEY, shard VARCHAR NOT NULL, paths VARCHAR[] NOT NULL,
            doc_type VARCHAR, bytes BIGINT, status VARCHAR, stage VARCHAR, error VARCHAR, converter VARCHAR,
            pages INTEGER, chars INTEGER, title VARCHAR, redactions INTEGER, chunks INTEGER, convert_ms DOUBLE,
            redact_ms DOUBLE, chunk_ms DOUBLE, first_seen_at TIMESTAMP, updated_at TIMESTAMP);
        CREATE TABLE IF NOT EXISTS source_errors (path VARCHAR PRIMARY KEY, reason VARCHAR, seen_at TIMESTAMP);
        """, marks=("documents",)),  # source_errors is gone once 0006 moved it
    Step("0002_chunk_catalogue", """
        ALTER TABLE documents ADD COLUMN IF NOT EXISTS rel_path VARCHAR;
        ALTER TABLE documents ADD COLUMN IF NOT EXISTS chunk_set VARCHAR;
        CREATE TABLE IF NOT EXISTS chunks (
            chunk_id VARCHAR PRIMARY KEY, sha VARCHAR NOT NULL, shard VARCHAR NOT NULL, chunk_set VARCHAR NOT NULL,
            chunk_index INTEGER, heading_path VARCHAR, line_start INTEGER, page INTEGER, chars INTEGER);
        CREATE TABLE IF NOT EXISTS redactions (sha VARCHAR NOT NULL, shard VARCHAR NOT NULL, kind VARCHAR NOT NULL,
            count INTEGER, PRIMARY KEY (sha, kind));
        CREATE TABLE IF NOT EXISTS runs (run_id VARCHAR, asset VARCHAR, shards VARCHAR, added INTEGER,
            skipped INTEGER, purged INTEGER, failed INTEGER, seconds DOUBLE, finished_at TIMESTAMP);
        """, marks=("documents.rel_path", "documents.chunk_set", "chunks", "redactions", "runs")),
    Step("0003_first_heading_and_ingested_at", """
        ALTER TABLE documents ADD COLUMN IF NOT EXISTS first_heading VARCHAR;
        ALTER TABLE documents ADD COLUMN IF NOT EXISTS ingested_at TIMESTAMP;
        """, marks=("documents.first_heading", "documents.ingested_at")),
    Step("0004_eval_runs", """
        CREATE TABLE IF NOT EXISTS eval_runs (run_id VARCHAR, golden VARCHAR, index_version VARCHAR,
            collection VARCHAR, questions INTEGER, metrics JSON, finished_at TIMESTAMP);
        """, marks=("eval_runs",)),
    Step("0005_tags", "ALTER TABLE documents ADD COLUMN IF NOT EXISTS tags VARCHAR[];", marks=("documents.tags",)),
    Step("0006_named_sources", """
        ALTER TABLE documents ADD COLUMN IF NOT EXISTS sources VARCHAR[];
        CREATE TABLE IF NOT EXISTS sources (name VARCHAR PRIMARY KEY, kind VARCHAR, roots VARCHAR[],
            synced_at TIMESTAMP);
        CREATE TABLE IF NOT EXISTS source_files (source VARCHAR NOT NULL, path VARCHAR NOT NULL, root VARCHAR,
            sha VARCHAR NOT NULL, bytes BIGINT, doc_type VARCHAR, tags VARCHAR[], PRIMARY KEY (source, path));
        CREATE TABLE IF NOT EXISTS refusals (source VARCHAR NOT NULL, path VARCHAR NOT NULL, reason VARCHAR,
            seen_at TIMESTAMP);
        CREATE TABLE IF NOT EXISTS uploads (path VARCHAR PRIMARY KEY, source VARCHAR NOT NULL, sha VARCHAR NOT NULL,
            filename VARCHAR, bytes BIGINT, uploaded_by VARCHAR, uploaded_at TIMESTAMP);
        CREATE TABLE IF NOT EXISTS run_documents (run_id VARCHAR, stage VARCHAR, sha VARCHAR, action VARCHAR);
        """, marks=("documents.sources", "sources", "source_files", "refusals", "uploads", "run_documents"),
         data=move_into_default_source),
    Step("0007_document_fields", """
        CREATE TABLE IF NOT EXISTS document_fields (sha VARCHAR NOT NULL, name VARCHAR NOT NULL,
            position INTEGER NOT NULL, kind VARCHAR NOT NULL, text_value VARCHAR, number_value DOUBLE,
            date_value TIMESTAMP, origin VARCHAR, PRIMARY KEY (sha, name, position));
        CREATE TABLE IF NOT EXISTS field_errors (sha VARCHAR NOT NULL, origin VARCHAR, error VARCHAR);
        CREATE TABLE IF NOT EXISTS rosters (name VARCHAR PRIMARY KEY, path VARCHAR, key VARCHAR, document_key VARCHAR,
            authoritative VARCHAR[], sha VARCHAR, rows INTEGER, problems VARCHAR[], loaded_at TIMESTAMP);
        CREATE TABLE IF NOT EXISTS roster_values (roster VARCHAR NOT NULL, key VARCHAR NOT NULL,
            name VARCHAR NOT NULL, position INTEGER NOT NULL, kind VARCHAR NOT NULL, text_value VARCHAR,
            number_value DOUBLE, date_value TIMESTAMP, authoritative BOOLEAN);
        CREATE TABLE IF NOT EXISTS reconciliation (roster VARCHAR, key VARCHAR, sha VARCHAR, path VARCHAR,
            field VARCHAR, status VARCHAR, document_value VARCHAR, roster_value VARCHAR);
        CREATE TABLE IF NOT EXISTS enrichments (sha VARCHAR NOT NULL, field VARCHAR NOT NULL, model VARCHAR NOT NULL,
            schema_hash VARCHAR NOT NULL, method VARCHAR, value JSON, error VARCHAR, created_at TIMESTAMP,
            PRIMARY KEY (sha, field, model, schema_hash));
        """, marks=("document_fields", "field_errors", "rosters", "roster_values", "reconciliation", "enrichments")),
    Step("0008_state", "CREATE TABLE IF NOT EXISTS state (key VARCHAR PRIMARY KEY, value VARCHAR);",
         marks=("state",)),
    Step("0009_roster_links", """
        CREATE TABLE IF NOT EXISTS roster_links (sha VARCHAR NOT NULL, roster VARCHAR NOT NULL, key VARCHAR NOT NULL);
        """, marks=("roster_links",)),  # filled from the roster_matches view once the views exist
    Step("0010_chat_sessions", """
        CREATE TABLE IF NOT EXISTS chat_sessions (id VARCHAR PRIMARY KEY, owner VARCHAR NOT NULL,
            created_at TIMESTAMP, updated_at TIMESTAMP);
        CREATE TABLE IF NOT EXISTS chat_turns (session_id VARCHAR NOT NULL, turn INTEGER NOT NULL, message VARCHAR,
            answer VARCHAR, record JSON, created_at TIMESTAMP, PRIMARY KEY (session_id, turn));
        """, marks=("chat_sessions", "chat_turns")),
    Step("0011_chat_own_file", "", marks=(), data=lambda con: move_chat_out(con)),
    Step("0012_source_body_facts", "ALTER TABLE sources ADD COLUMN IF NOT EXISTS body_facts BOOLEAN DEFAULT true;",
         marks=()),
    Step("0013_upload_names", "ALTER TABLE uploads ADD COLUMN IF NOT EXISTS upload_name VARCHAR;", marks=()),
)



def move_chat_out(con: Connection) -> None:
    """Chat sessions and turns move to the chat file beside the sidecar (chat_tables.py says why). On PostgreSQL
    they stay where they are: the chat store is the sidecar's own database there."""
    if isinstance(con, postgres.PostgresConnection):
        return
    (sidecar_path,) = con.execute(
        "SELECT path FROM duckdb_databases() WHERE database_name = current_database()").fetchone()
    sessions = con.execute("SELECT id, owner, created_at, updated_at FROM chat_sessions").fetchall()
    turns = con.execute("SELECT session_id, turn, message, answer, record, created_at FROM chat_turns").fetchall()
    if sessions or turns:
        ChatStore.beside(Path(sidecar_path)).import_rows(sessions, turns)
    con.execute("DROP TABLE chat_turns; DROP TABLE chat_sessions")


_locks: dict[Path | str, threading.Lock] = {}
_locks_lock = threading.Lock()


def upgrade(sidecar: SidecarFile) -> list[str]:
    """Bring the sidecar to the current schema; the names of the steps it applied (none when it was current)."""
    with _locks_lock:
        lock = _locks.setdefault(sidecar.path.resolve() if sidecar.url is None else sidecar.url, threading.Lock())
    with lock, sidecar.transaction() as con:
        return migrate(con)


def migrate(con: Connection) -> list[str]:
    """In the caller's transaction: record the steps an unrecorded sidecar has, apply the missing ones in order,
    and recreate the views when a step was applied or they are older than schema.VIEWS."""
    on_postgres = isinstance(con, postgres.PostgresConnection)
    columns = con.execute("SELECT table_name, column_name FROM information_schema.columns "
                          "WHERE table_schema = current_schema()").fetchall()
    present = {table for table, _ in columns} | {f"{table}.{column}" for table, column in columns}
    if "schema_migrations" in present:
        done = {name for (name,) in con.execute("SELECT name FROM schema_migrations").fetchall()}
    else:
        con.execute("CREATE TABLE schema_migrations (name VARCHAR PRIMARY KEY, applied_at TIMESTAMP)")
        found = [step.name for step in itertools.takewhile(
            lambda step: step.marks and set(step.marks) <= present, STEPS)]
        insert_rows(con, "schema_migrations", ["name", "applied_at"], [(name, None) for name in found])
        done = set(found)
    pending = [step for step in STEPS if step.name not in done]
    for step in pending:
        if step.sql:
            con.execute(postgres.ddl(step.sql) if on_postgres else step.sql)
        if step.data is not None:
            step.data(con)
        con.execute("INSERT INTO schema_migrations VALUES (?, ?)", [step.name, now()])
    stored = con.execute("SELECT value FROM state WHERE key = ?", [VIEWS_STATE_KEY]).fetchone()
    if pending or stored is None or stored[0] != VIEWS_VERSION:
        if on_postgres:
            con.execute(postgres.COMPAT_FUNCTIONS + POSTGRES_VIEWS + postgres.CHANGE_COUNTER)
        else:
            con.execute(DUCKDB_VIEWS)
        refresh_links(con)
        insert_rows(con, "state", ["key", "value"], [(VIEWS_STATE_KEY, VIEWS_VERSION)], replace=True)
    return [step.name for step in pending]
