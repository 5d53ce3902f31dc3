"""The sources (their roots and last sync), the files each held at its last sync, the files its scan refused, and
the uploads stored into upload sources."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from rag_pipeline.sidecar.connection import SidecarFile, insert_rows, now
from rag_pipeline.sidecar.schema import REFUSAL_COLUMNS, SOURCE_COLUMNS, SOURCE_FILE_COLUMNS, UPLOAD_COLUMNS

SELECT_SOURCE_FILES = f"SELECT {', '.join(SOURCE_FILE_COLUMNS)} FROM source_files"


class SourceTables(SidecarFile):
    def record_source(self, name: str, kind: str, roots: list[str], files: list[dict[str, Any]],
                      refusals: list[tuple[str, str]], body_facts: bool = True) -> bool:
        """Replace what the source holds (its files as SOURCE_FILE_COLUMNS dicts, the refusals of its scan, and
        whether its documents' body facts are fields); True when its files changed. Unchanged files are not
        rewritten (a no-change sync stays cheap)."""
        stamp = now()
        incoming = sorted((row["path"], row["sha"], sorted(row["tags"] or [])) for row in files)
        with self.transaction() as con:
            stored = sorted((path, sha, sorted(tags or [])) for path, sha, tags in con.execute(
                "SELECT path, sha, tags FROM source_files WHERE source = ?", [name]).fetchall())
            changed = stored != incoming
            if changed:
                con.execute("DELETE FROM source_files WHERE source = ?", [name])
                insert_rows(con, "source_files", SOURCE_FILE_COLUMNS, files)
            con.execute("DELETE FROM refusals WHERE source = ?", [name])
            insert_rows(con, "refusals", REFUSAL_COLUMNS, [(name, path, reason, stamp) for path, reason in refusals])
            insert_rows(con, "sources", SOURCE_COLUMNS, [(name, kind, roots, stamp, body_facts)], replace=True)
        return changed

    def forget_source(self, name: str) -> None:
        """Delete everything recorded of a source (its files, refusals and roots) in one transaction."""
        with self.transaction() as con:
            for table, column in (("source_files", "source"), ("refusals", "source"), ("sources", "name")):
                con.execute(f"DELETE FROM {table} WHERE {column} = ?", [name])

    def sources(self) -> dict[str, dict[str, Any]]:
        """name -> {kind, roots, synced_at} of every source synced so far."""
        return {row["name"]: row for row in self._rows("SELECT * FROM sources ORDER BY name")}

    def source_files(self, exclude: Iterable[str] = ()) -> list[dict[str, Any]]:
        """Every source's recorded files (SOURCE_FILE_COLUMNS dicts), except those of the `exclude` sources."""
        return self._rows(SELECT_SOURCE_FILES + " WHERE NOT list_contains(?, source) ORDER BY path, source",
                          [list(exclude)])

    def source_files_of(self, name: str) -> list[dict[str, Any]]:
        """The files the source `name` held at its last sync (SOURCE_FILE_COLUMNS dicts), by path."""
        return self._rows(SELECT_SOURCE_FILES + " WHERE source = ? ORDER BY path", [name])

    def source_errors(self, exclude: Iterable[str] = ()) -> list[dict[str, Any]]:
        """Discovery refusals of each source's latest scan (source, path, reason), except the `exclude` sources'."""
        return self._rows("SELECT source, path, reason FROM refusals WHERE NOT list_contains(?, source) "
                          "ORDER BY path, source", [list(exclude)])

    def totals_by_source(self) -> list[dict[str, Any]]:
        """Documents, failures and chunks per source (a document counts under each source that holds it)."""
        return self._rows(
            "SELECT s.name AS source, s.kind, count(d.sha) AS documents, "
            "count(d.sha) FILTER (WHERE d.status = 'failed') AS failed, "
            "count(d.sha) FILTER (WHERE d.status = 'pending') AS pending, coalesce(sum(d.chunks), 0) AS chunks "
            "FROM sources s LEFT JOIN documents d ON list_contains(d.sources, s.name) GROUP BY s.name, s.kind "
            "ORDER BY s.name")

    def record_upload(self, path: str, source: str, sha: str, filename: str, size: int,
                      uploaded_by: str | None, upload_name: str | None = None) -> datetime:
        """One stored upload (its path under the source's upload folder, its stored `filename` and the
        `upload_name` the client gave it); returns its uploaded_at."""
        stamp = now()
        with self.connect() as con:
            insert_rows(con, "uploads", UPLOAD_COLUMNS,
                        [(path, source, sha, filename, size, uploaded_by, stamp, upload_name)], replace=True)
        return stamp

    def upload_names(self) -> dict[str, str]:
        """Stored path -> the name its client gave it, of every upload recorded with one."""
        rows = self._rows("SELECT path, upload_name FROM uploads WHERE upload_name IS NOT NULL")
        return {row["path"]: row["upload_name"] for row in rows}

    def uploads(self, source: str, sha: str | None = None) -> list[dict[str, Any]]:
        """The recorded uploads of a source (of the bytes `sha` only, when given), oldest first."""
        if sha is None:
            return self._rows("SELECT * FROM uploads WHERE source = ? ORDER BY uploaded_at, path", [source])
        return self._rows("SELECT * FROM uploads WHERE source = ? AND sha = ? ORDER BY uploaded_at, path",
                          [source, sha])

    def delete_uploads(self, paths: Iterable[str]) -> None:
        paths = list(paths)
        if paths:
            with self.connect() as con:
                con.execute("DELETE FROM uploads WHERE list_contains(?, path)", [paths])
