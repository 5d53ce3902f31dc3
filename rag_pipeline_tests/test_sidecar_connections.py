"""Connections of one process to the sidecar's DuckDB file: a burst of them shares one database instance; the file is
let go once they are idle (another process then opens it) or at once on release(); read-write and read-only
connections of many threads take turns without a configuration clash."""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rag_pipeline.sidecar.connection import SidecarFile

# Another process: opens the file read-write as soon as it can (trying every 10 ms for argv[2] s), adds a row.
OTHER_WRITER = """
import sys, time, duckdb
deadline = time.monotonic() + float(sys.argv[2])
print("trying", flush=True)
while True:
    try:
        con = duckdb.connect(sys.argv[1])
        break
    except duckdb.IOException:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.01)
con.execute("INSERT INTO t VALUES (2)")
con.close()
"""


def instance_threads(sidecar: SidecarFile) -> int:
    with sidecar.connect() as con:
        return int(con.execute("SELECT current_setting('threads')").fetchone()[0])


def test_a_burst_shares_one_instance_and_another_process_gets_the_file_once_it_is_idle(tmp_path: Path) -> None:
    sidecar = SidecarFile(tmp_path / "sidecar.duckdb")
    with sidecar.connect() as con:
        default_threads = int(con.execute("SELECT current_setting('threads')").fetchone()[0])
        con.execute("SET GLOBAL threads = 7")  # a setting of the database instance, not of one connection
        con.execute("CREATE TABLE t (x INTEGER)")
        con.execute("INSERT INTO t VALUES (1)")
    assert instance_threads(sidecar) == 7  # the next connection of the burst: the same instance

    other = subprocess.run([sys.executable, "-c", OTHER_WRITER, str(sidecar.path), "10"], capture_output=True,
                           text=True, timeout=60)
    assert other.returncode == 0, other.stderr  # this process let the file go while it was idle
    with sidecar.connect() as con:
        assert con.execute("SELECT x FROM t ORDER BY x").fetchall() == [(1,), (2,)]
    assert instance_threads(sidecar) == default_threads  # a new instance, which sees the other process's row


def test_a_steady_stream_of_writes_still_lets_another_process_in(tmp_path: Path) -> None:
    """Writes 30 ms apart never leave the file idle for KEEP_OPEN_SECONDS; it still goes at the first idle moment
    after KEEP_AT_MOST_SECONDS, and another process trying meanwhile gets it."""
    sidecar = SidecarFile(tmp_path / "sidecar.duckdb")
    with sidecar.connect() as con:
        con.execute("CREATE TABLE t (x INTEGER)")
    other = subprocess.Popen([sys.executable, "-c", OTHER_WRITER, str(sidecar.path), "8"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    assert other.stdout.readline() == "trying\n"
    written = 0
    deadline = time.monotonic() + 12
    while other.poll() is None and time.monotonic() < deadline:
        with sidecar.connect() as con:
            con.execute("INSERT INTO t VALUES (1)")
        written += 1
        time.sleep(0.03)
    _, err = other.communicate(timeout=30)
    assert other.returncode == 0, err
    with sidecar.connect() as con:
        assert con.execute("SELECT x, count(*) FROM t GROUP BY x ORDER BY x").fetchall() == [(1, written), (2, 1)]


def test_release_checkpoints_and_frees_the_file_at_once(tmp_path: Path) -> None:
    sidecar = SidecarFile(tmp_path / "sidecar.duckdb")
    with sidecar.transaction() as con:
        con.execute("CREATE TABLE t (x INTEGER)")
        con.execute("INSERT INTO t VALUES (1)")
    wal = sidecar.path.with_name(sidecar.path.name + ".wal")
    assert wal.exists()  # the write is in the log of the instance still kept open
    sidecar.release()
    assert not wal.exists()  # checkpointed into the file: a copy of the file alone has the row
    other = subprocess.run([sys.executable, "-c", "import sys, duckdb; duckdb.connect(sys.argv[1]).close()",
                            str(sidecar.path)], capture_output=True, text=True, timeout=60)
    assert other.returncode == 0, other.stderr  # no retry needed: the file is free now


def test_read_write_and_read_only_connections_of_many_threads_take_turns(tmp_path: Path) -> None:
    sidecar = SidecarFile(tmp_path / "sidecar.duckdb")
    with sidecar.connect() as con:
        con.execute("CREATE TABLE t (x INTEGER)")

    def write_then_read(worker: int) -> list[int]:
        seen = []
        for step in range(15):
            with sidecar.transaction() as con:
                con.execute("INSERT INTO t VALUES (?)", [worker * 100 + step])
            with sidecar.read_only() as con:  # right after a write: the kept read-write instance must go first
                seen.append(con.execute("SELECT count(*) FROM t").fetchone()[0])
        return seen

    with ThreadPoolExecutor(4) as pool:
        seen = list(pool.map(write_then_read, range(4)))
    assert all(counts == sorted(counts) and counts[0] >= 1 for counts in seen)
    with sidecar.read_only() as con:
        assert con.execute("SELECT count(*) FROM t").fetchone()[0] == 60
    with sidecar.connect() as con, pytest.raises(RuntimeError, match="read-only connection .* inside a read-write"):
        with sidecar.read_only():
            pass
    with sidecar.connect() as outer, sidecar.connect() as inner:  # nested in one mode: one instance, both usable
        inner.execute("INSERT INTO t VALUES (-1)")
        assert outer.execute("SELECT count(*) FROM t").fetchone()[0] == 61
