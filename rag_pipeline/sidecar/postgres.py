"""The sidecar on a PostgreSQL server (RAG_SIDECAR_URL=postgresql://...): what every worker and API replica shares.

The repositories' SQL is written once, in the subset DuckDB and PostgreSQL share; what differs is said here, once:

- `PostgresConnection` gives a psycopg2 connection DuckDB's connection API (`execute(sql, params)` with `?`
  placeholders returning a cursor, `interrupt()` from another thread), and reads JSON columns as text as DuckDB does;
- COMPAT_FUNCTIONS gives PostgreSQL the few DuckDB functions the SQL uses (list_contains, list_has_any, len,
  regexp_extract, contains) as SQL functions, and its aggregates fsum and favg (exact: summed as numeric) and
  arg_max and arg_min (of a text by a timestamp);
- `ddl` maps DuckDB's type names in the migration steps (DOUBLE) to PostgreSQL's;
- `upsert_sql` writes DuckDB's INSERT OR REPLACE as INSERT ... ON CONFLICT DO UPDATE;
- CHANGE_COUNTER: a sequence every write statement advances (statement triggers), the state that says the sidecar
  changed (DuckDB's is its file's mtime and size); chat turns, kept in a file of their own on DuckDB, do not
  advance it.

Connections are pooled per process (kept idle between operations, never used by two at once). Writes from many
processes: every write transaction first takes one transaction-scoped advisory lock, so the read-modify-write steps
of the repositories (merging document rows, numbering chat turns, recomputing roster links) never lose an update;
they are short, and reads never wait on them. The metadata query tool's read-only transactions plan without nested
loops: the planner cannot estimate the views' rows, and a nested loop over them is what makes a query slow; and
without JIT compilation, which a nested loop it cannot avoid (costed as disabled) would trigger on every statement.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg2
import psycopg2.errors
import psycopg2.extensions
import psycopg2.extras

from rag_pipeline.errors import StoreUnavailable

WRITE_LOCK = 0x5241_4753_4944_4543  # the advisory lock every write transaction takes ("RAGSIDEC")
CONNECT_TIMEOUT_SECONDS = 10
MAX_IDLE_CONNECTIONS = 8  # per process: connections kept open between operations
READ_ONLY_MEMORY = "64MB"  # work_mem of the metadata query tool's connections
Interrupted = psycopg2.errors.QueryCanceled
PRIMARY_KEYS = {  # the conflict targets of INSERT OR REPLACE
    "documents": ("sha",), "chunks": ("chunk_id",), "redactions": ("sha", "kind"), "sources": ("name",),
    "source_files": ("source", "path"), "uploads": ("path",), "document_fields": ("sha", "name", "position"),
    "rosters": ("name",), "enrichments": ("sha", "field", "model", "schema_hash"), "state": ("key",),
    "chat_sessions": ("id",), "chat_turns": ("session_id", "turn"), "schema_migrations": ("name",),
}
COMPAT_FUNCTIONS = """
CREATE OR REPLACE FUNCTION list_contains(text[], text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT $2 = ANY($1)';
CREATE OR REPLACE FUNCTION list_contains(double precision[], double precision) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT $2 = ANY($1)';
CREATE OR REPLACE FUNCTION list_has_any(text[], text[]) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT $1 && $2';
CREATE OR REPLACE FUNCTION len(anyarray) RETURNS integer
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS 'SELECT cardinality($1)';
CREATE OR REPLACE FUNCTION contains(text, text) RETURNS boolean
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS 'SELECT strpos($1, $2) > 0';
CREATE OR REPLACE FUNCTION regexp_extract(text, text, integer DEFAULT 0) RETURNS text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
    AS $$SELECT coalesce((regexp_match($1, '(' || $2 || ')'))[$3 + 1], '')$$;
CREATE OR REPLACE FUNCTION fsum_step(numeric, double precision) RETURNS numeric
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS 'SELECT CASE WHEN $2 IS NULL THEN $1 ELSE coalesce($1, 0) + $2::numeric END';
CREATE OR REPLACE FUNCTION fsum_final(numeric) RETURNS double precision
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT $1::double precision';
CREATE OR REPLACE AGGREGATE fsum(double precision) (SFUNC = fsum_step, STYPE = numeric, FINALFUNC = fsum_final);
CREATE OR REPLACE FUNCTION favg_step(numeric[], double precision) RETURNS numeric[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS 'SELECT CASE WHEN $2 IS NULL THEN $1 ELSE ARRAY[$1[1] + $2::numeric, $1[2] + 1] END';
CREATE OR REPLACE FUNCTION favg_final(numeric[]) RETURNS double precision
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT CASE WHEN $1[2] > 0 THEN ($1[1] / $1[2])::double precision END';
CREATE OR REPLACE AGGREGATE favg(double precision) (SFUNC = favg_step, STYPE = numeric[], INITCOND = '{0,0}',
    FINALFUNC = favg_final);
DO $$BEGIN CREATE TYPE text_at AS (arg text, val timestamp); EXCEPTION WHEN duplicate_object THEN NULL; END$$;
CREATE OR REPLACE FUNCTION arg_max_step(text_at, text, timestamp) RETURNS text_at LANGUAGE sql IMMUTABLE
    PARALLEL SAFE AS 'SELECT CASE WHEN $3 IS NULL OR ($1).val >= $3 THEN $1 ELSE ROW($2, $3)::text_at END';
CREATE OR REPLACE FUNCTION arg_min_step(text_at, text, timestamp) RETURNS text_at LANGUAGE sql IMMUTABLE
    PARALLEL SAFE AS 'SELECT CASE WHEN $3 IS NULL OR ($1).val <= $3 THEN $1 ELSE ROW($2, $3)::text_at END';
CREATE OR REPLACE FUNCTION text_at_arg(text_at) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS 'SELECT ($1).arg';
CREATE OR REPLACE AGGREGATE arg_max(text, timestamp) (SFUNC = arg_max_step, STYPE = text_at, FINALFUNC = text_at_arg);
CREATE OR REPLACE AGGREGATE arg_min(text, timestamp) (SFUNC = arg_min_step, STYPE = text_at, FINALFUNC = text_at_arg);
"""
CHANGE_COUNTER = """
CREATE SEQUENCE IF NOT EXISTS sidecar_changes;
CREATE OR REPLACE FUNCTION sidecar_changed() RETURNS trigger LANGUAGE plpgsql AS
    $$BEGIN PERFORM nextval('sidecar_changes'); RETURN NULL; END$$;
DO $$DECLARE t record; BEGIN
    FOR t IN SELECT table_name FROM information_schema.tables
             WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'
                 AND table_name NOT IN ('chat_sessions', 'chat_turns') LOOP
        EXECUTE format('CREATE OR REPLACE TRIGGER sidecar_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE '
                       'ON %I FOR EACH STATEMENT EXECUTE FUNCTION sidecar_changed()', t.table_name);
    END LOOP;
END$$;
"""
_DOUBLE = re.compile(r"\bDOUBLE\b(?!\s+PRECISION)")


def is_postgres_url(location: object) -> bool:
    return isinstance(location, str) and location.startswith(("postgresql://", "postgres://"))


def ddl(sql: str) -> str:
    """A migration step's DDL (DuckDB's type names) for PostgreSQL."""
    return _DOUBLE.sub("DOUBLE PRECISION", sql)


def upsert_sql(table: str, columns: Sequence[str]) -> str:
    """INSERT OR REPLACE of `columns` into `table`, as PostgreSQL writes it (VALUES %s: psycopg2's execute_values)."""
    keys = PRIMARY_KEYS[table]
    updates = ", ".join(f"{column} = EXCLUDED.{column}" for column in columns if column not in keys)
    action = f"DO UPDATE SET {updates}" if updates else "DO NOTHING"
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES %s ON CONFLICT ({', '.join(keys)}) {action}"


class PostgresConnection:
    """A psycopg2 connection with DuckDB's connection API (what the repositories and the query compiler call)."""

    def __init__(self, raw: psycopg2.extensions.connection) -> None:
        self.raw = raw
        self.cursor = raw.cursor()

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> Any:
        """Run one statement (or several, without parameters); `?` placeholders; returns the cursor."""
        if params:
            self.cursor.execute(sql.replace("%", "%%").replace("?", "%s"), list(params))
        else:
            self.cursor.execute(sql)
        return self.cursor

    def insert_rows(self, table: str, columns: Sequence[str], rows: Sequence[Any], *, replace: bool) -> None:
        names = ", ".join(columns)
        sql = upsert_sql(table, columns) if replace else f"INSERT INTO {table} ({names}) VALUES %s"
        values = [tuple(row[column] for column in columns) if isinstance(row, dict) else tuple(row) for row in rows]
        psycopg2.extras.execute_values(self.cursor, sql, values, page_size=1000)

    def interrupt(self) -> None:
        """Cancel the running statement (from another thread); it raises `Interrupted`."""
        self.raw.cancel()


def _open(url: str) -> psycopg2.extensions.connection:
    try:
        raw = psycopg2.connect(url, connect_timeout=CONNECT_TIMEOUT_SECONDS, application_name="rag_pipeline")
    except psycopg2.OperationalError as error:
        raise StoreUnavailable(f"the metadata sidecar's PostgreSQL server is unreachable: {error}") from error
    psycopg2.extras.register_default_json(raw, loads=lambda text: text)  # JSON columns read as text (as DuckDB)
    psycopg2.extras.register_default_jsonb(raw, loads=lambda text: text)
    return raw


_idle: dict[tuple[int, str], list[psycopg2.extensions.connection]] = {}  # (process, url) -> idle connections
_idle_lock = threading.Lock()


@contextmanager
def _borrowed(url: str, *, read_only: bool) -> Iterator[psycopg2.extensions.connection]:
    """A connection of this process's pool (opened when none is idle) in the given mode; back to the pool when the
    block ends cleanly and the connection is idle, else closed."""
    key = (os.getpid(), url)
    with _idle_lock:
        idle = _idle.get(key)
        raw = idle.pop() if idle else None
    raw = raw or _open(url)
    reusable = False
    try:
        raw.set_session(readonly=read_only, autocommit=not read_only)
        yield raw
        reusable = raw.get_transaction_status() == psycopg2.extensions.TRANSACTION_STATUS_IDLE
    finally:
        with _idle_lock:
            idle = _idle.setdefault(key, [])
            if reusable and not raw.closed and len(idle) < MAX_IDLE_CONNECTIONS:
                idle.append(raw)
                raw = None
        if raw is not None:
            raw.close()


@contextmanager
def connect(url: str) -> Iterator[PostgresConnection]:
    """A read-write connection; each statement commits on its own."""
    with _borrowed(url, read_only=False) as raw:
        yield PostgresConnection(raw)


@contextmanager
def transaction(url: str) -> Iterator[PostgresConnection]:
    """One write transaction holding the sidecar's write lock: committed when the block ends, rolled back when it
    raises."""
    with _borrowed(url, read_only=False) as raw:
        raw.autocommit = False
        con = PostgresConnection(raw)
        try:
            con.execute("SELECT pg_advisory_xact_lock(?)", [WRITE_LOCK])
            yield con
        except BaseException:
            raw.rollback()
            raise
        raw.commit()


@contextmanager
def read_only(url: str) -> Iterator[PostgresConnection]:
    """A read-only transaction (the metadata query tool's): it can read the sidecar's tables and change nothing."""
    with _borrowed(url, read_only=True) as raw:
        con = PostgresConnection(raw)
        try:  # the views' row counts are unknown to the planner: no nested loops over them; and no JIT, which a
            # nested loop that cannot be avoided (a join on list_contains), costed as disabled, would trigger
            con.execute(f"SET LOCAL work_mem = '{READ_ONLY_MEMORY}'; SET LOCAL enable_nestloop = off; "
                        "SET LOCAL jit = off")
            yield con
        finally:
            raw.rollback()


def change_count(url: str) -> int:
    """How far the sidecar's change counter has advanced: a new value after any write."""
    with connect(url) as con:
        return con.execute("SELECT last_value + (CASE WHEN is_called THEN 1 ELSE 0 END) FROM sidecar_changes"
                           ).fetchone()[0]
