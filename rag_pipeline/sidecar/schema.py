"""The sidecar's current shape: the columns its repositories write, and its views.

The tables are what the migration steps (migrations.py) leave; these constants name the columns the repositories
read and write, and test_sidecar.py checks that a migrated sidecar has exactly the documents columns below.
"""

from __future__ import annotations

import hashlib
from typing import Any

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
CHUNK_COLUMNS = ["chunk_id", "sha", "shard", "chunk_set", "chunk_index", "heading_path", "line_start", "page", "chars"]
REDACTION_COLUMNS = ["sha", "shard", "kind", "count"]
SOURCE_FILE_COLUMNS = ["source", "path", "root", "sha", "bytes", "doc_type", "tags"]
REFUSAL_COLUMNS = ["source", "path", "reason", "seen_at"]
SOURCE_COLUMNS = ["name", "kind", "roots", "synced_at", "body_facts"]
UPLOAD_COLUMNS = ["path", "source", "sha", "filename", "bytes", "uploaded_by", "uploaded_at", "upload_name"]
FIELD_COLUMNS = ["sha", "name", "position", "kind", "text_value", "number_value", "date_value", "origin"]
FIELD_ERROR_COLUMNS = ["sha", "origin", "error"]
ENRICHMENT_COLUMNS = ["sha", "field", "model", "schema_hash", "method", "value", "error", "created_at"]
ROSTER_VALUE_COLUMNS = ["roster", "key", "name", "position", "kind", "text_value", "number_value", "date_value",
                        "authoritative"]
RECONCILIATION_COLUMNS = ["roster", "key", "sha", "path", "field", "status", "document_value", "roster_value"]
RUN_DOCUMENT_COLUMNS = ["run_id", "stage", "sha", "action"]

# Fields in one long, typed form (one row per value; a list has one row per element): the built-in facts of every
# document, its stated and enriched fields, and the roster's columns joined by key, authoritative ones replacing
# what the document states (a document whose key field holds several values joins no row: its key is ambiguous).
# `effective_fields` is what the metadata query tool reads. Which document joins which
# roster row is kept in the table roster_links (refreshed from the view roster_matches whenever fields or rosters
# are written), so a query does not redo the join.
# fields_in_use: the stored fields, those found in a body (origin `body`) only of documents a source with
# body_facts holds.
VIEWS = """
CREATE OR REPLACE VIEW builtin_fields AS
    SELECT sha, 'id' AS name, 'string' AS kind, sha AS text_value, CAST(NULL AS DOUBLE PRECISION) AS number_value,
        CAST(NULL AS TIMESTAMP) AS date_value, 'builtin' AS origin FROM documents
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
    UNION ALL SELECT sha, 'ingested_at', 'date', replace(CAST(date_trunc('second', ingested_at) AS VARCHAR), ' ', 'T'),
        NULL, ingested_at, 'builtin' FROM documents WHERE ingested_at IS NOT NULL;
CREATE OR REPLACE VIEW fields_in_use AS
    SELECT sha, name, kind, text_value, number_value, date_value, origin FROM document_fields WHERE origin <> 'body'
    UNION ALL SELECT sha, name, kind, text_value, number_value, date_value, origin FROM document_fields
        WHERE origin = 'body' AND sha IN (SELECT d.sha FROM documents d JOIN sources s
                                          ON list_contains(d.sources, s.name) WHERE s.body_facts);
CREATE OR REPLACE VIEW own_fields AS
    SELECT * FROM builtin_fields
    UNION ALL SELECT * FROM fields_in_use;
CREATE OR REPLACE VIEW roster_matches AS
    SELECT m.sha, m.roster, m.key FROM (
        SELECT f.sha, r.name AS roster, min(f.text_value) AS key FROM rosters r
        JOIN own_fields f ON f.name = r.document_key GROUP BY f.sha, r.name HAVING count(*) = 1) m
    JOIN (SELECT DISTINCT roster, key FROM roster_values) k ON k.roster = m.roster AND k.key = m.key;
CREATE OR REPLACE VIEW roster_fields AS
    SELECT m.sha, v.name, v.kind, v.text_value, v.number_value, v.date_value, 'roster:' || m.roster AS origin,
        v.authoritative FROM roster_links m JOIN roster_values v ON v.roster = m.roster AND v.key = m.key;
"""
# The effective fields: stated and built-in ones unless an authoritative roster column replaces them, the
# authoritative columns, and the other columns where the document states nothing. One definition serves the view
# (every document) and the table function effective_of(shas) (a few documents, filtered before the joins): a
# DuckDB table macro, a PostgreSQL SQL function.
EFFECTIVE = """SELECT f.sha, f.name, f.kind, f.text_value, f.number_value, f.date_value, f.origin FROM own_fields f
        WHERE NOT EXISTS (SELECT 1 FROM roster_fields a WHERE a.authoritative AND a.sha = f.sha AND a.name = f.name)
        {only_f}
    UNION ALL
    SELECT sha, name, kind, text_value, number_value, date_value, origin FROM roster_fields
        WHERE authoritative{only}
    UNION ALL
    SELECT r.sha, r.name, r.kind, r.text_value, r.number_value, r.date_value, r.origin FROM roster_fields r
        WHERE NOT r.authoritative AND NOT EXISTS (SELECT 1 FROM own_fields o WHERE o.sha = r.sha AND o.name = r.name)
        {only_r}"""
VIEWS += f"CREATE OR REPLACE VIEW effective_fields AS {EFFECTIVE.format(only='', only_f='', only_r='')};\n"
DUCKDB_VIEWS = VIEWS + ("CREATE OR REPLACE MACRO effective_of(shas) AS TABLE " + EFFECTIVE.format(
    only=" AND list_contains(shas, sha)", only_f="AND list_contains(shas, f.sha)",
    only_r="AND list_contains(shas, r.sha)") + ";\n")
POSTGRES_VIEWS = VIEWS + (
    "CREATE OR REPLACE FUNCTION effective_of(shas text[]) RETURNS TABLE (sha varchar, name varchar, kind varchar, "
    "text_value varchar, number_value double precision, date_value timestamp, origin text) LANGUAGE sql STABLE "
    "AS $$" + EFFECTIVE.format(only=" AND sha = ANY(shas)", only_f="AND f.sha = ANY(shas)",
                               only_r="AND r.sha = ANY(shas)") + "$$;\n")
# Stored in the state table when the views are (re)created: a sidecar whose views are older is given these.
VIEWS_VERSION = hashlib.sha256((DUCKDB_VIEWS + POSTGRES_VIEWS).encode()).hexdigest()[:16]


def refresh_links(con: Any, shas: list[str] | None = None) -> None:
    """Recompute roster_links (of these documents, or of all) from the roster_matches view, in the caller's
    transaction."""
    if shas is None:
        con.execute("DELETE FROM roster_links")
        con.execute("INSERT INTO roster_links SELECT sha, roster, key FROM roster_matches")
    else:
        con.execute("DELETE FROM roster_links WHERE list_contains(?, sha)", [shas])
        con.execute("INSERT INTO roster_links SELECT sha, roster, key FROM roster_matches WHERE list_contains(?, sha)",
                    [shas])
