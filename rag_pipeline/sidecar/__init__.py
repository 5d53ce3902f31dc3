"""The metadata sidecar: exact per-document state (paths, status, errors, counts, timings), sources, document
fields and rosters and run history, in one DuckDB file, chat sessions in a file of their own beside it
(chat_tables.py); or all of it in a PostgreSQL database every worker and API replica shares, when the location is
a postgresql:// URL (RAG_SIDECAR_URL).

    connection.py       connections (read-write and read-only take turns; retried while the file is locked)
    postgres.py         the PostgreSQL backend: DuckDB's connection API over psycopg2, and the dialect's differences
    schema.py           the columns the repositories write, and the views
    migrations.py       the schema as named steps, applied in order and recorded (any older sidecar upgrades)
    *_tables.py         typed repository methods, by concept; `Sidecar` gathers them

Only this package (and the metadata query compiler, structured/query.py, which owns its SQL and reads through
`Sidecar.read_only`) writes SQL against the sidecar: this is the seam another database plugs into.
"""

from __future__ import annotations

from pathlib import Path

from rag_pipeline.sidecar.chat_tables import ChatStore
from rag_pipeline.sidecar.connection import records
from rag_pipeline.sidecar.document_tables import DocumentTables
from rag_pipeline.sidecar.field_tables import FieldTables
from rag_pipeline.sidecar.history_tables import HistoryTables
from rag_pipeline.sidecar.migrations import upgrade
from rag_pipeline.sidecar.schema import DOCUMENT_COLUMNS
from rag_pipeline.sidecar.source_tables import SourceTables


class Sidecar(DocumentTables, SourceTables, FieldTables, HistoryTables):
    """The DuckDB file at `location` (or the PostgreSQL database at a postgresql:// URL); created, or upgraded to
    the current schema, when opened."""

    def __init__(self, location: Path | str) -> None:
        super().__init__(location)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        upgrade(self)


__all__ = ["DOCUMENT_COLUMNS", "ChatStore", "Sidecar", "records"]
