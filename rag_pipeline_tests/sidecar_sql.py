"""Raw SQL on the sidecar, for tests' assertions only: the library reads it through the repository methods."""

from __future__ import annotations

from typing import Any

from rag_pipeline.sidecar import Sidecar, records


def sql_rows(sidecar: Sidecar, sql: str, params: list[Any] | None = None) -> list[dict[str, Any]]:
    """The rows of one read, as dicts."""
    with sidecar.connect() as con:
        return records(con.execute(sql, params or []))
