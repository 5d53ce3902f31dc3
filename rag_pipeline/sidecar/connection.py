"""Connections to the sidecar: its DuckDB file (the default), or a PostgreSQL server when its location is a
postgresql:// URL (postgres.py).

DuckDB allows one writer process at a time, so every operation takes its own short-lived connection (in a burst of
calls marked with SidecarFile.kept(), a cursor of one connection kept for the burst) and retries briefly when another
process holds the file lock (or another thread of this one is opening or closing the file: the API's threads read it
while an ingest writes it).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import duckdb

from rag_pipeline.errors import StoreUnavailable
from rag_pipeline.sidecar import postgres

if TYPE_CHECKING:
    import numpy as np

LOCK_RETRY_SECONDS = 10.0
# Another process's hold on the file is usually one short transaction (shard workers write their rows a stage at a
# time): try again soon, then less often (a failed attempt costs ~8 ms of a core).
LOCK_RETRY_FIRST_PAUSE_S, LOCK_RETRY_LONGEST_PAUSE_S = 0.01, 0.2
READ_ONLY_CONFIG = {"enable_external_access": False, "lock_configuration": True, "threads": 1, "max_memory": "512MB"}
READ_ONLY_WAIT_SECONDS = 5.0
READ_WRITE, READ_ONLY = "read-write", "read-only"


Connection = duckdb.DuckDBPyConnection | postgres.PostgresConnection
Interrupted = (duckdb.InterruptException, postgres.Interrupted)  # what a statement stopped by interrupt() raises


def records(cursor: Any) -> list[dict[str, Any]]:
    """Rows of an executed query as dicts (NULL stays None)."""
    names = [column[0] for column in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def now() -> datetime:
    """The current UTC time without a zone (how the sidecar stores timestamps)."""
    return datetime.now(UTC).replace(tzinfo=None)


def file_state(path: Path) -> tuple:
    """What changes whenever the file (or its write-ahead log) is written."""
    def stat(file: Path) -> tuple[int, int] | None:
        try:
            info = file.stat()
        except OSError:
            return None
        return info.st_mtime_ns, info.st_size
    return stat(path), stat(path.with_name(path.name + ".wal"))


def insert_rows(con: Connection, table: str, columns: Sequence[str], rows: Sequence[Any],
                *, replace: bool = False) -> None:
    """Insert `rows` (dicts or tuples in `columns` order) into `table` as one statement; `replace`: a row whose
    primary key is stored replaces it."""
    if not rows:
        return
    if isinstance(con, postgres.PostgresConnection):
        con.insert_rows(table, columns, rows, replace=replace)
        return
    names = ", ".join(columns)
    if len(rows) == 1:  # a plain statement: a scan of registered rows failed ("pandas_scan does not exist") while
        row = rows[0]   # the API's threads were reading the file
        values = [row[column] for column in columns] if isinstance(row, dict) else list(row)
        con.execute(f"INSERT {'OR REPLACE ' if replace else ''}INTO {table} ({names}) VALUES "
                    f"({', '.join('?' * len(columns))})", values)
        return
    con.register("incoming", column_arrays(columns, rows))
    con.execute(f"INSERT {'OR REPLACE ' if replace else ''}INTO {table} ({names}) SELECT {names} FROM incoming")
    con.unregister("incoming")


def column_arrays(columns: Sequence[str], rows: Sequence[Any]) -> dict[str, np.ndarray]:
    """`rows` (all dicts, or all tuples in `columns` order) as one object array per column: DuckDB scans a dict of
    NumPy arrays as a table, as fast as a pandas DataFrame of the same rows and without pandas's import (0.2-0.4 s
    of every writing process: the CLI, each shard worker, the API)."""
    import numpy as np  # here: the sidecar's readers (light CLI commands) need no numpy

    if isinstance(rows[0], dict):
        return {column: np.fromiter((row[column] for row in rows), dtype=object, count=len(rows))
                for column in columns}
    if any(len(row) != len(columns) for row in rows):
        raise ValueError(f"rows for {len(columns)} columns ({', '.join(columns)}) hold another number of values")
    return {column: np.fromiter((row[index] for row in rows), dtype=object, count=len(rows))
            for index, column in enumerate(columns)}


class ModeGate:
    """The connections of one process to one DuckDB file.

    They all need the same configuration (DuckDB refuses to open a file twice with different ones), so read-write
    and read-only connections take turns: any number of one mode at a time; a mode that is waiting stops new
    connections of the other mode (neither starves).

    Inside `keeping()` blocks, read-write connections are cursors of one kept connection, which holds the file's
    database instance: DuckDB starts an instance in 11-20 ms and a cursor in microseconds. It closes when the last
    block ends and no connection is open, or at once when read-only connections are due (the next read-write one
    opens it again). Outside such blocks every connection opens and closes the file itself."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._mode: str | None = None
        self._open = 0
        self._waiting: dict[str, int] = {}
        self._local = threading.local()  # the mode this thread holds
        self._keepers = 0  # keeping() blocks under way in this process
        self._opening = threading.Lock()  # one thread opens the kept connection; the others take cursors of it
        self._kept: duckdb.DuckDBPyConnection | None = None

    @contextmanager
    def keeping(self) -> Iterator[None]:
        """Read-write connections opened in the block (by any thread) share one kept connection."""
        with self._condition:
            self._keepers += 1
        try:
            yield
        finally:
            with self._condition:
                self._keepers -= 1
                if not self._keepers and not self._open:
                    self._close_kept()

    @contextmanager
    def connection(self, mode: str, timeout: float, path: Path,
                   opener: Callable[[], duckdb.DuckDBPyConnection]) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection of `mode` (READ_WRITE or READ_ONLY) that `opener` opens, waiting up to `timeout` s for the
        other mode's connections to close."""
        held = getattr(self._local, "mode", None)
        if held is not None:  # this thread holds the gate already: nest in the same mode only
            if held != mode:
                raise RuntimeError(f"a {mode} connection to {path} opened inside a {held} one")
            with self._opened(mode, timeout, path, opener) as con:
                yield con
            return
        self._enter(mode, timeout, path)
        self._local.mode = mode
        try:
            with self._opened(mode, timeout, path, opener) as con:
                yield con
        finally:
            self._local.mode = None
            self._leave()

    def _enter(self, mode: str, timeout: float, path: Path) -> None:
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
            if mode != READ_WRITE:
                self._close_kept()
            self._mode, self._open = mode, self._open + 1

    def _leave(self) -> None:
        with self._condition:
            self._open -= 1
            try:
                if not self._open and not self._keepers:
                    self._close_kept()  # a block that ended while connections were open
            finally:
                self._condition.notify_all()

    @contextmanager
    def _opened(self, mode: str, timeout: float, path: Path,
                opener: Callable[[], duckdb.DuckDBPyConnection]) -> Iterator[duckdb.DuckDBPyConnection]:
        with self._opening:
            if mode == READ_WRITE and (self._keepers or self._kept is not None):
                if self._kept is None:
                    self._kept = open_retrying(opener, path, timeout)
                con = self._kept.cursor()
            else:
                con = None
        if con is None:
            con = open_retrying(opener, path, timeout)
        try:
            yield con
        finally:
            con.close()

    def _close_kept(self) -> None:
        with self._opening:
            kept, self._kept = self._kept, None
        if kept is not None:
            kept.close()

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
    pause = LOCK_RETRY_FIRST_PAUSE_S
    while True:
        try:
            return opener()
        except duckdb.ResourceInUseException as exc:
            if time.monotonic() > deadline:
                raise StoreUnavailable(f"the metadata sidecar {path} stayed busy in this process for {timeout:g} s: "
                                       f"{exc}") from exc
            time.sleep(0.01)
        except duckdb.IOException as exc:
            if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                raise StoreUnavailable(f"the metadata sidecar {path} is locked by another process: {exc}") from exc
            time.sleep(pause)
            pause = min(pause * 2, LOCK_RETRY_LONGEST_PAUSE_S)


class SidecarFile:
    """The sidecar at `location` (a DuckDB file's path, or a postgresql:// URL) and its connections: the base of
    every repository of the sidecar."""

    def __init__(self, location: Path | str) -> None:
        self.url = location if postgres.is_postgres_url(location) else None
        self.location = location
        self.path = Path(location) if self.url is None else None

    @contextmanager
    def connect(self) -> Iterator[Connection]:
        """A read-write connection (retried briefly while another process holds the file)."""
        if self.url is not None:
            with postgres.connect(self.url) as con:
                yield con
            return
        with gate_for(self.path).connection(READ_WRITE, LOCK_RETRY_SECONDS, self.path,
                                            lambda: duckdb.connect(str(self.path))) as con:
            yield con

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A read-write connection inside one transaction: committed when the block ends, rolled back when it
        raises. On PostgreSQL it holds the sidecar's write lock (one writing transaction at a time, as DuckDB)."""
        if self.url is not None:
            with postgres.transaction(self.url) as con:
                yield con
            return
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

    @contextmanager
    def read_only(self) -> Iterator[Connection]:
        """A read-only connection with external access off and its configuration locked (what the metadata query
        tool runs on): it can read the sidecar's tables and nothing else, and change nothing."""
        if self.url is not None:
            with postgres.read_only(self.url) as con:
                yield con
            return
        with gate_for(self.path).connection(
                READ_ONLY, READ_ONLY_WAIT_SECONDS, self.path,
                lambda: duckdb.connect(str(self.path), read_only=True, config=READ_ONLY_CONFIG)) as con:
            yield con

    @contextmanager
    def kept(self) -> Iterator[None]:
        """For a burst of sidecar calls (an ingest step's bookkeeping): the block's read-write connections share
        one, which saves DuckDB's 11-20 ms instance start per call. The file stays held from the first connection to the
        end of the block, so keep the block to sidecar work. Nothing to keep on PostgreSQL."""
        if self.path is None:
            yield
            return
        with gate_for(self.path).keeping():
            yield

    def data_state(self) -> Any:
        """What changes whenever the sidecar is written (its file's state; PostgreSQL's change counter)."""
        return file_state(self.path) if self.url is None else postgres.change_count(self.url)

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """The rows of one read, as dicts (for the repositories' own SQL)."""
        with self.connect() as con:
            return records(con.execute(sql, list(params)))
