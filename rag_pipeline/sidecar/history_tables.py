"""What runs did: each ingest stage's counts and actions per document, each evaluation's metrics, and the state a
run leaves for the next (key -> value)."""

from __future__ import annotations

import json
from typing import Any

from rag_pipeline.sidecar.connection import SidecarFile, insert_rows, now
from rag_pipeline.sidecar.schema import RUN_DOCUMENT_COLUMNS


class HistoryTables(SidecarFile):
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
            insert_rows(con, "run_documents", RUN_DOCUMENT_COLUMNS, rows)

    def run_actions(self, run_ids: list[str]) -> dict[tuple[str, str], set[str]]:
        """(stage, action) -> the SHAs it applied to in these runs."""
        actions: dict[tuple[str, str], set[str]] = {}
        for row in self._rows("SELECT stage, action, sha FROM run_documents WHERE list_contains(?, run_id)",
                              [run_ids]):
            actions.setdefault((row["stage"], row["action"]), set()).add(row["sha"])
        return actions

    def record_eval(self, run_id: str, golden: str, index_version: str, collection: str, questions: int,
                    metrics: dict[str, float]) -> None:
        """One evaluation's mean metrics, for the history the eval report compares against."""
        with self.connect() as con:
            con.execute("INSERT INTO eval_runs VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [run_id, golden, index_version, collection, questions, json.dumps(metrics), now()])

    def eval_history(self, golden: str, limit: int = 20) -> list[dict[str, Any]]:
        """The latest evaluations of a golden set, newest first, metrics decoded."""
        rows = self._rows("SELECT run_id, golden, index_version, collection, questions, metrics, finished_at "
                          "FROM eval_runs WHERE golden = ? ORDER BY finished_at DESC LIMIT ?", [golden, limit])
        return [{**row, "metrics": json.loads(row["metrics"])} for row in rows]

    def get_state(self, key: str) -> str | None:
        rows = self._rows("SELECT value FROM state WHERE key = ?", [key])
        return rows[0]["value"] if rows else None

    def set_state(self, key: str, value: str) -> None:
        with self.connect() as con:
            insert_rows(con, "state", ["key", "value"], [(key, value)], replace=True)
