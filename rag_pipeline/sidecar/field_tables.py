"""Document fields (typed, one row per value), field errors, the enrichment cache, rosters with their values and
links to documents, and the reconciliation of the rosters with what documents state."""

from __future__ import annotations

from typing import Any

from rag_pipeline.sidecar.connection import SidecarFile, insert_rows, now
from rag_pipeline.sidecar.schema import (
    ENRICHMENT_COLUMNS,
    FIELD_COLUMNS,
    FIELD_ERROR_COLUMNS,
    RECONCILIATION_COLUMNS,
    ROSTER_VALUE_COLUMNS,
    refresh_links,
)


class FieldTables(SidecarFile):
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
        with self.transaction() as con:
            con.execute(f"DELETE FROM document_fields WHERE {condition}", params)
            insert_rows(con, "document_fields", FIELD_COLUMNS, rows)
            if errors is not None:
                con.execute("DELETE FROM field_errors WHERE list_contains(?, sha) AND origin = ?", [shas, error_origin])
                insert_rows(con, "field_errors", FIELD_ERROR_COLUMNS, errors)
            refresh_links(con, shas)

    def replace_field_values(self, name: str, rows: list[dict[str, Any]]) -> bool:
        """Make `rows` (FIELD_COLUMNS dicts) the only values of field `name`; True when that changed anything."""
        incoming = sorted((row["sha"], row["position"], row["kind"], row["text_value"], row["origin"]) for row in rows)
        with self.transaction() as con:
            stored = sorted(con.execute("SELECT sha, position, kind, text_value, origin FROM document_fields "
                                        "WHERE name = ?", [name]).fetchall())
            if stored == incoming:
                return False
            con.execute("DELETE FROM document_fields WHERE name = ?", [name])
            insert_rows(con, "document_fields", FIELD_COLUMNS, rows)
            refresh_links(con)
        return True

    def field_labels(self, shas: list[str], names: list[str]) -> dict[str, list[str]]:
        """sha -> the sorted "name=value" labels of these fields (their effective values: rosters applied)."""
        if not shas or not names:
            return {}
        return {row["sha"]: list(row["labels"]) for row in self._rows(
            "SELECT sha, array_agg(DISTINCT name || '=' || text_value ORDER BY name || '=' || text_value) AS labels "
            "FROM effective_fields WHERE list_contains(?, sha) AND list_contains(?, name) GROUP BY sha",
            [shas, names])}

    def effective_fields_of(self, sha: str) -> list[dict[str, Any]]:
        """A document's effective fields (rosters applied): name, kind, text_value and origin, by name."""
        return self._rows("SELECT name, kind, text_value, origin FROM effective_of(?) ORDER BY name", [[sha]])

    def own_values(self, names: list[str], shas: list[str]) -> list[dict[str, Any]]:
        """The text values (sha, name, text_value) of these fields of these documents as they state them (built-in,
        stated and enriched: no roster applied), by sha and name."""
        return self._rows("SELECT sha, name, text_value FROM own_fields WHERE list_contains(?, name) "
                          "AND list_contains(?, sha) ORDER BY sha, name", [names, shas])

    def field_errors_of(self, sha: str) -> list[dict[str, Any]]:
        """A document's field errors (origin, error)."""
        return self._rows("SELECT origin, error FROM field_errors WHERE sha = ?", [sha])

    def record_enrichments(self, rows: list[dict[str, Any]]) -> None:
        """Cache enrichment results (sha, field, model, schema_hash, method, value JSON, error)."""
        if rows:
            stamp = now()
            with self.connect() as con:
                insert_rows(con, "enrichments", ENRICHMENT_COLUMNS, [{**row, "created_at": stamp} for row in rows],
                            replace=True)

    def cached_enrichments(self, field: str, model: str, schema_hash: str) -> dict[str, dict[str, Any]]:
        """sha -> the cached result (sha, value JSON, error) of enriching `field` with this model and schema."""
        return {row["sha"]: row for row in self._rows(
            "SELECT sha, value, error FROM enrichments WHERE field = ? AND model = ? AND schema_hash = ?",
            [field, model, schema_hash])}

    def unenriched_count(self, field: str, model: str, schema_hash: str) -> int:
        """Ingested documents (status ok) with no cached result of enriching `field` with this model and schema."""
        return self._rows(
            "SELECT count(*) AS n FROM documents d WHERE status = 'ok' AND NOT EXISTS (SELECT 1 FROM enrichments e "
            "WHERE e.sha = d.sha AND e.field = ? AND e.model = ? AND e.schema_hash = ?)",
            [field, model, schema_hash])[0]["n"]

    def rosters(self) -> dict[str, dict[str, Any]]:
        """name -> the stored roster (path, key, document_key, authoritative, sha, rows, problems, loaded_at)."""
        return {row["name"]: row for row in self._rows("SELECT * FROM rosters ORDER BY name")}

    def replace_roster(self, name: str, roster: dict[str, Any] | None, values: list[dict[str, Any]]) -> None:
        """Replace one roster (its rosters row and roster_values) in one transaction; None removes it."""
        with self.transaction() as con:
            con.execute("DELETE FROM roster_values WHERE roster = ?", [name])
            con.execute("DELETE FROM rosters WHERE name = ?", [name])
            if roster is not None:
                con.execute("INSERT INTO rosters VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                            [roster["name"], roster["path"], roster["key"], roster["document_key"],
                             roster["authoritative"], roster["sha"], roster["rows"], roster["problems"], now()])
            insert_rows(con, "roster_values", ROSTER_VALUE_COLUMNS, values)
            refresh_links(con)

    def roster_values_of(self, roster: str) -> list[dict[str, Any]]:
        """A roster's text values (key, name, text_value), by key, column and position."""
        return self._rows("SELECT key, name, text_value FROM roster_values WHERE roster = ? "
                          "ORDER BY key, name, position", [roster])

    def documents_keyed_by(self, field: str) -> list[dict[str, Any]]:
        """Every value of the field `field` of each ingested document (sha, key, first path), by key and path: what
        a roster keyed by that field joins."""
        return self._rows("SELECT f.sha, f.text_value AS key, d.paths[1] AS path FROM own_fields f "
                          "JOIN documents d USING (sha) WHERE f.name = ? AND d.status = 'ok' ORDER BY key, path",
                          [field])

    def refresh_roster_links(self) -> None:
        """Recompute which document joins which roster row (a document's key may be a built-in field that a move
        changed); the roster asset does this on every run."""
        with self.transaction() as con:
            refresh_links(con)

    def replace_reconciliation(self, rows: list[dict[str, Any]]) -> None:
        with self.transaction() as con:
            con.execute("DELETE FROM reconciliation")
            insert_rows(con, "reconciliation", RECONCILIATION_COLUMNS, rows)

    def reconciliation(self, status: str | None = None) -> list[dict[str, Any]]:
        """The reconciliation rows (of one status, when given): mismatches and the other findings before the
        matches, then by status, roster, key and field."""
        return self._rows("SELECT status, roster, key, field, document_value, roster_value, path FROM reconciliation "
                          "WHERE ? IS NULL OR status = ? ORDER BY status = 'MATCH', status, roster, key, field",
                          [status, status])

    def reconciliation_of(self, sha: str) -> list[dict[str, Any]]:
        """A document's reconciliation rows, by field."""
        return self._rows("SELECT * FROM reconciliation WHERE sha = ? ORDER BY field", [sha])
