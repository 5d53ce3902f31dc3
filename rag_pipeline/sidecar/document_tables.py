"""The documents table (one row per distinct content: paths, status, counts, timings) and the catalogue of each
document's chunks and redactions."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rag_pipeline.sidecar.connection import SidecarFile, insert_rows, now, records
from rag_pipeline.sidecar.schema import CHUNK_COLUMNS, DOCUMENT_COLUMNS, REDACTION_COLUMNS

SELECT_DOCUMENTS = f"SELECT {', '.join(DOCUMENT_COLUMNS)} FROM documents"


class DocumentTables(SidecarFile):
    def documents(self, shards: Iterable[str] | None = None) -> dict[str, dict[str, Any]]:
        """sha -> row, for the given shards (all when None)."""
        if shards is None:
            rows = self._rows(SELECT_DOCUMENTS)
        else:
            rows = self._rows(SELECT_DOCUMENTS + " WHERE list_contains(?, shard)", [list(shards)])
        return {row["sha"]: row for row in rows}

    def documents_by_sha(self, shas: list[str]) -> dict[str, dict[str, Any]]:
        return {row["sha"]: row for row in self._rows(SELECT_DOCUMENTS + " WHERE list_contains(?, sha)", [shas])}

    def upsert(self, rows: Iterable[dict[str, Any]]) -> None:
        """Insert or update documents; fields missing from a row keep their stored value."""
        rows = list(rows)
        if not rows:
            return
        with self.transaction() as con:  # read and write in one transaction: a concurrent writer's update is kept
            stored = {row["sha"]: row for row in records(con.execute(
                SELECT_DOCUMENTS + " WHERE list_contains(?, sha)", [[row["sha"] for row in rows]]))}
            merged = []
            stamp = now()
            for row in rows:
                record = {column: None for column in DOCUMENT_COLUMNS}
                record.update(stored.get(row["sha"], {}))
                record.update(row)
                record["first_seen_at"] = record["first_seen_at"] or stamp
                record["updated_at"] = stamp
                merged.append(record)
            insert_rows(con, "documents", list(DOCUMENT_COLUMNS), merged, replace=True)

    def delete(self, shas: Iterable[str]) -> None:
        """Forget documents: their rows, fields and field errors (their enrichment cache stays: the same bytes
        coming back are not enriched again)."""
        shas = list(shas)
        if shas:
            with self.transaction() as con:
                for table in ("documents", "document_fields", "field_errors", "roster_links"):
                    con.execute(f"DELETE FROM {table} WHERE list_contains(?, sha)", [shas])

    def document_shas(self) -> set[str]:
        """Every document's sha."""
        return {row["sha"] for row in self._rows("SELECT sha FROM documents")}

    def shas_by_shard(self) -> dict[str, list[str]]:
        """shard -> the shas of its documents (sorted)."""
        by_shard: dict[str, list[str]] = {}
        for row in self._rows("SELECT shard, sha FROM documents ORDER BY shard, sha"):
            by_shard.setdefault(row["shard"], []).append(row["sha"])
        return by_shard

    def ingested_shards(self) -> dict[str, str]:
        """sha -> shard of every document whose ingest ended well (status ok), by sha."""
        return {row["sha"]: row["shard"] for row in self._rows(
            "SELECT sha, shard FROM documents WHERE status = 'ok' ORDER BY sha")}

    def first_paths(self) -> dict[str, str]:
        """sha -> the first path of every document."""
        return {row["sha"]: row["path"] for row in self._rows("SELECT sha, paths[1] AS path FROM documents")}

    def failed_documents(self) -> list[dict[str, Any]]:
        """The failed documents' first path and error, by path."""
        return self._rows("SELECT paths[1] AS path, error FROM documents WHERE status = 'failed' ORDER BY path")

    def totals_by_type(self) -> list[dict[str, Any]]:
        """Documents, failures and chunks per document type."""
        return self._rows(
            "SELECT doc_type, count(*) AS documents, count(*) FILTER (WHERE status = 'failed') AS failed, "
            "coalesce(sum(chunks), 0) AS chunks, coalesce(sum(redactions), 0) AS redactions "
            "FROM documents GROUP BY doc_type ORDER BY doc_type"
        )

    def totals_by_tag(self) -> list[dict[str, Any]]:
        """Documents and chunks per tag (a document counts under each of its tags), then the untagged ones."""
        return self._rows(
            "SELECT tag, count(*) AS documents, coalesce(sum(chunks), 0) AS chunks FROM ("
            "  SELECT unnest(tags) AS tag, chunks FROM documents) tagged GROUP BY tag "
            "UNION ALL SELECT NULL, count(*), coalesce(sum(chunks), 0) FROM documents WHERE len(tags) = 0 "
            "OR tags IS NULL ORDER BY tag NULLS LAST"
        )

    def most_common_chunk_set(self) -> str | None:
        """The chunking id most documents were chunked with (None before any was chunked)."""
        rows = self._rows("SELECT chunk_set FROM documents WHERE chunk_set IS NOT NULL GROUP BY chunk_set "
                          "ORDER BY count(*) DESC LIMIT 1")
        return rows[0]["chunk_set"] if rows else None

    def _shas_by_shard(self, sql: str, params: list[Any], shards: Iterable[str] = ()) -> dict[str, set[str]]:
        """shard -> the shas of the (shard, sha) rows `sql` returns; each of `shards` is a key, if empty."""
        by_shard: dict[str, set[str]] = {shard: set() for shard in shards}
        for row in self._rows(sql, params):
            by_shard.setdefault(row["shard"], set()).add(row["sha"])
        return by_shard

    def catalogued_shas(self, shards: list[str]) -> dict[str, set[str]]:
        """shard -> documents of it whose chunk rows are stored, however they were chunked, for these shards."""
        return self._shas_by_shard("SELECT DISTINCT shard, sha FROM chunks WHERE list_contains(?, shard)", [shards],
                                   shards)

    def catalogued_by_shard(self, chunk_set: str) -> dict[str, set[str]]:
        """shard -> documents catalogued with this chunking (chunk rows stored, or zero chunks), in one query."""
        return self._shas_by_shard("SELECT DISTINCT shard, sha FROM chunks WHERE chunk_set = ? UNION "
                                   "SELECT shard, sha FROM documents WHERE chunk_set = ? AND chunks = 0",
                                   [chunk_set, chunk_set])

    def pending_shas(self, shards: list[str]) -> dict[str, set[str]]:
        """shard -> documents of it whose ingest has not ended (status pending), for these shards."""
        return self._shas_by_shard(
            "SELECT shard, sha FROM documents WHERE list_contains(?, shard) AND status = 'pending'", [shards], shards)

    def replace_catalogue(self, shas: list[str], chunk_rows: list[dict[str, Any]],
                          redaction_rows: list[dict[str, Any]]) -> None:
        """Replace the chunk and redaction rows of these documents in one transaction."""
        with self.transaction() as con:
            con.execute("DELETE FROM chunks WHERE list_contains(?, sha)", [shas])
            con.execute("DELETE FROM redactions WHERE list_contains(?, sha)", [shas])
            insert_rows(con, "chunks", CHUNK_COLUMNS, chunk_rows)
            insert_rows(con, "redactions", REDACTION_COLUMNS, redaction_rows)

    def chunk_catalogue(self, sha: str, chunk_set: str) -> list[dict[str, Any]]:
        """A document's chunk rows of this chunking (index, heading path, line, page, size, shard), in order."""
        return self._rows("SELECT chunk_index, heading_path, line_start, page, chars, shard FROM chunks "
                          "WHERE sha = ? AND chunk_set = ? ORDER BY chunk_index", [sha, chunk_set])

    def redaction_totals(self) -> list[dict[str, Any]]:
        """Per kind of redaction: its findings and the documents they were in, most findings first."""
        return self._rows("SELECT kind, SUM(count) AS findings, COUNT(DISTINCT sha) AS documents FROM redactions "
                          "GROUP BY kind ORDER BY findings DESC, kind")

