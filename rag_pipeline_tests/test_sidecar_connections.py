"""Connections of one process to the sidecar's DuckDB file: inside a kept() block the read-write ones share one
database instance and the file is free again (checkpointed) when the block ends; outside one, every connection opens
and closes the file itself; read-write and read-only connections of many threads take turns without a configuration
clash, inside a block or not; a connection waits for another process's hold on the file, trying again soon and then
less often; rows are inserted in one statement without pandas."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import duckdb
import pytest

from rag_pipeline.errors import StoreUnavailable
from rag_pipeline.sidecar import connection
from rag_pipeline.sidecar.connection import SidecarFile

REPO = Path(__file__).resolve().parents[1]

# Another process: opens the file read-write at its first try (no retry), adds a row.
OTHER_WRITER = "import sys, duckdb; con = duckdb.connect(sys.argv[1]); con.execute('INSERT INTO t VALUES (2)')"


def instance_threads(sidecar: SidecarFile) -> int:
    with sidecar.connect() as con:
        return int(con.execute("SELECT current_setting('threads')").fetchone()[0])


def mark_instance(sidecar: SidecarFile) -> int:
    """Set a setting of the database instance (not of one connection); the instance's default before."""
    with sidecar.connect() as con:
        default = int(con.execute("SELECT current_setting('threads')").fetchone()[0])
        con.execute("SET GLOBAL threads = 7")
        con.execute("CREATE TABLE IF NOT EXISTS t (x INTEGER)")
        con.execute("INSERT INTO t VALUES (1)")
    return default


def other_process_writes(sidecar: SidecarFile, *, expect: bool = True) -> None:
    other = subprocess.run([sys.executable, "-c", OTHER_WRITER, str(sidecar.path)], capture_output=True, text=True,
                           timeout=60)
    if expect:
        assert other.returncode == 0, other.stderr
    else:
        assert other.returncode != 0 and "lock" in other.stderr, other.stderr


def test_a_kept_block_shares_one_instance_and_frees_the_file_when_it_ends(tmp_path: Path) -> None:
    sidecar = SidecarFile(tmp_path / "sidecar.duckdb")
    wal = sidecar.path.with_name(sidecar.path.name + ".wal")
    with sidecar.kept():
        default = mark_instance(sidecar)
        assert instance_threads(sidecar) == 7  # the next connection of the block: the same instance
        assert wal.exists()  # its writes are in the log of the instance still open
        other_process_writes(sidecar, expect=False)  # the cost of a block: the file is held until it ends
    assert not wal.exists()  # the block's end closed it: checkpointed into the file
    other_process_writes(sidecar)  # and free at once
    assert instance_threads(sidecar) == default
    with sidecar.connect() as con:
        assert con.execute("SELECT x FROM t ORDER BY x").fetchall() == [(1,), (2,)]


def test_outside_a_kept_block_every_connection_opens_the_file_itself(tmp_path: Path) -> None:
    sidecar = SidecarFile(tmp_path / "sidecar.duckdb")
    default = mark_instance(sidecar)
    other_process_writes(sidecar)  # a server's or another command's calls leave the file free between them
    assert instance_threads(sidecar) == default


def test_read_write_and_read_only_connections_of_many_threads_take_turns(tmp_path: Path) -> None:
    sidecar = SidecarFile(tmp_path / "sidecar.duckdb")
    with sidecar.connect() as con:
        con.execute("CREATE TABLE t (x INTEGER)")

    def write_then_read(worker: int) -> list[int]:
        seen = []
        for step in range(15):
            with sidecar.transaction() as con:
                con.execute("INSERT INTO t VALUES (?)", [worker * 100 + step])
            with sidecar.read_only() as con:  # the kept read-write instance, if any, must close first
                seen.append(con.execute("SELECT count(*) FROM t").fetchone()[0])
        return seen

    for block in (nullcontext, sidecar.kept):  # the threads' writes outside a kept block, then inside one
        with ThreadPoolExecutor(4) as pool, block():
            seen = list(pool.map(write_then_read, range(4)))
        assert all(counts == sorted(counts) and counts[0] >= 1 for counts in seen)
    with sidecar.read_only() as con:
        assert con.execute("SELECT count(*) FROM t").fetchone()[0] == 120
    with sidecar.kept(), sidecar.connect(), pytest.raises(RuntimeError, match="read-only connection .* inside"):
        with sidecar.read_only():
            pass
    with sidecar.kept(), sidecar.kept(), sidecar.connect() as outer, sidecar.connect() as inner:
        inner.execute("INSERT INTO t VALUES (-1)")  # nested blocks and connections of one mode: one instance
        assert outer.execute("SELECT count(*) FROM t").fetchone()[0] == 121
    other_process_writes(sidecar)  # the outer block's end let the file go


def test_a_block_that_ends_while_another_thread_is_connected_lets_go_after_that_connection(tmp_path: Path) -> None:
    sidecar = SidecarFile(tmp_path / "sidecar.duckdb")
    mark_instance(sidecar)
    connected, done = threading.Event(), threading.Event()

    def hold_a_connection() -> None:
        with sidecar.connect() as con:
            con.execute("INSERT INTO t VALUES (3)")
            connected.set()
            done.wait(timeout=30)

    with ThreadPoolExecutor(1) as pool:
        with sidecar.kept():
            holder = pool.submit(hold_a_connection)
            assert connected.wait(timeout=30)
        other_process_writes(sidecar, expect=False)  # the block is over, but the thread's cursor is still open
        done.set()
        holder.result(timeout=30)
    other_process_writes(sidecar)  # its close let the file go
    with sidecar.connect() as con:
        assert con.execute("SELECT x FROM t ORDER BY x").fetchall() == [(1,), (2,), (3,)]


def test_a_connection_waits_for_another_process_s_hold_trying_soon_then_less_often(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sidecar = SidecarFile(tmp_path / "sidecar.duckdb")
    mark_instance(sidecar)
    holder = subprocess.Popen(  # a shard worker's transaction, held until this test lets it go
        [sys.executable, "-c", "import sys, duckdb; con = duckdb.connect(sys.argv[1]); "
         "con.execute('INSERT INTO t VALUES (3)'); print('held', flush=True); sys.stdin.readline(); con.close()",
         str(sidecar.path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdin is not None and holder.stdout is not None and holder.stdout.readline() == "held\n"
    pauses: list[float] = []

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 7:
            holder.stdin.write("go\n")  # type: ignore[union-attr]
            holder.stdin.flush()  # type: ignore[union-attr]
        time.sleep(seconds)

    monkeypatch.setattr(connection, "time", SimpleNamespace(monotonic=time.monotonic, sleep=pause))
    with sidecar.connect() as con:
        assert sorted(row[0] for row in con.execute("SELECT x FROM t").fetchall()) == [1, 3]
    assert holder.wait(timeout=60) == 0
    assert pauses[:7] == [0.01, 0.02, 0.04, 0.08, 0.16, 0.2, 0.2]  # soon after a short hold ends, then 5 a second
    assert set(pauses[7:]) <= {0.2}


def test_many_rows_of_dicts_or_tuples_are_inserted_typed_without_importing_pandas() -> None:
    """In a fresh interpreter (the test process may have pandas loaded): NULLs, lists and a replaced row; tuples of
    another length than the columns are refused, not cut short."""
    script = """
import sys, duckdb
from rag_pipeline.sidecar.connection import insert_rows
print("numpy" in sys.modules)
con = duckdb.connect()
con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name VARCHAR, tags VARCHAR[], score DOUBLE)")
columns = ["id", "name", "tags", "score"]
insert_rows(con, "t", columns, [(1, "a", ["x", "y"], 0.5), (2, None, [], None)])
insert_rows(con, "t", columns, [{"id": 2, "name": "b", "tags": ["z"], "score": 1}, {"id": 3, "name": "c", "tags": None,
            "score": 2.5}], replace=True)
print(con.execute("SELECT * FROM t ORDER BY id").fetchall())
print("pandas" in sys.modules)
try:
    insert_rows(con, "t", columns, [(4, "d", [], 1.0, "extra"), (5, "e", [], 2.0)])
except ValueError as error:
    print(error)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:4] == [
        "False",  # the sidecar's readers need no numpy: only an insert of many rows imports it
        "[(1, 'a', ['x', 'y'], 0.5), (2, 'b', ['z'], 1.0), (3, 'c', None, 2.5)]",
        "False",
        "rows for 4 columns (id, name, tags, score) hold another number of values",
    ]


def test_a_file_busy_in_this_process_past_the_wait_is_a_store_error_naming_it(tmp_path: Path) -> None:
    """Another thread attaching or detaching the file (DuckDB's ResourceInUse) is retried; past the wait it is the
    sidecar's StoreUnavailable (a 503 naming the file), not DuckDB's own exception (a 500)."""
    attempts: list[float] = []

    def busy() -> Any:
        attempts.append(time.monotonic())
        raise duckdb.ResourceInUseException("database is being attached")

    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="sidecar.duckdb stayed busy in this process for 0.2 s"):
        connection.open_retrying(busy, tmp_path / "sidecar.duckdb", 0.2)
    assert len(attempts) > 2 and time.monotonic() - started >= 0.2  # not before the wait is over
