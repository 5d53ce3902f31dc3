"""The Dagster instance's SQLite event log with kept engines (rag_pipeline/defs/event_log_storage.py), which the
repo's dagster.yaml names: same files and records as Dagster's own, far fewer connections, a bounded number of open
databases, nothing carried across a fork."""

import multiprocessing
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.events.log import EventLogEntry
from dagster._core.instance.ref import InstanceRef
from dagster._core.storage.event_log import SqliteEventLogStorage
from sqlalchemy import event
from sqlalchemy.pool import Pool

from rag_pipeline.defs.event_log_storage import KEPT_DATABASES, KeptEngineEventLogStorage

from .conftest import REPO

PARTS = dg.StaticPartitionsDefinition([f"{digit:x}" for digit in range(16)])


@dg.asset(partitions_def=PARTS, backfill_policy=dg.BackfillPolicy.single_run())
def numbers(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"partitions": len(context.partition_keys)})


@dg.asset(partitions_def=PARTS, backfill_policy=dg.BackfillPolicy.single_run(), deps=[numbers])
def squares(context: dg.AssetExecutionContext) -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"partitions": len(context.partition_keys)})


RANGE = {"dagster/asset_partition_range_start": "0", "dagster/asset_partition_range_end": "f"}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A DAGSTER_HOME with the repo's dagster.yaml."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


class ConnectionCount:
    """New SQLite connections any SQLAlchemy pool opens in this process while counting, by database file."""

    def __init__(self) -> None:
        self.files: list[Path] = []

    def __call__(self, dbapi_connection: sqlite3.Connection, _: object) -> None:
        [(_, _, file)] = dbapi_connection.execute("PRAGMA database_list").fetchall()
        self.files.append(Path(file))

    def under(self, folder: Path) -> int:
        return sum(file.is_relative_to(folder) for file in self.files)


@pytest.fixture
def connections() -> Iterator[ConnectionCount]:
    count = ConnectionCount()
    event.listen(Pool, "connect", count)
    yield count
    event.remove(Pool, "connect", count)


def log_entry(run_id: str, message: str) -> EventLogEntry:
    return EventLogEntry(error_info=None, level="INFO", user_message=message, run_id=run_id, timestamp=time.time())


def open_databases(folder: Path) -> set[str]:
    """The SQLite files under `folder` this process holds open."""
    names = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(folder)) and target.endswith(".db"):
            names.add(Path(target).name)
    return names


def test_the_repo_instance_uses_it_on_dagsters_own_files(home: Path) -> None:
    with dg.DagsterInstance.get() as instance:
        storage = instance.event_log_storage
        assert isinstance(storage, KeptEngineEventLogStorage) and isinstance(storage, SqliteEventLogStorage)
        assert storage.supports_global_concurrency_limits  # the rag_store_writer pool needs them
    assert (home / "history" / "runs" / "index.db").is_file()  # where Dagster's default event log keeps it


def test_a_ranged_run_records_every_partition_over_a_few_connections(home: Path, connections: ConnectionCount
                                                                     ) -> None:
    """Two steps over 16 partitions write 32 materialisations and their step events: Dagster's own storage opens
    ~190 connections to the event log's databases for it; the kept engines a handful. Another process reads every
    record while this instance is still open."""
    with dg.DagsterInstance.get() as instance:
        result = dg.materialize([numbers, squares], instance=instance, tags=RANGE)
        assert result.success
        opened = connections.under(home / "history" / "runs")
        assert 0 < opened <= 12, opened
        for key in ("numbers", "squares"):
            assert instance.get_materialized_partitions(dg.AssetKey(key)) == set(PARTS.get_partition_keys())
        reader = subprocess.run(
            [sys.executable, "-c", "import dagster as dg\nwith dg.DagsterInstance.get() as i:\n"
             f"    print(len(i.get_materialized_partitions(dg.AssetKey('squares'))))"],
            env=os.environ.copy(), capture_output=True, text=True, timeout=120)
        assert reader.returncode == 0, reader.stderr
        assert reader.stdout.strip() == "16"


def test_at_most_a_few_databases_stay_open(home: Path) -> None:
    runs = home / "history" / "runs"
    with dg.DagsterInstance.get() as instance:
        storage = instance.event_log_storage
        for number in range(3 * KEPT_DATABASES):
            storage.store_event(log_entry(f"run-{number}", "stored"))
        held = open_databases(runs)
        assert 0 < len(held) <= KEPT_DATABASES
        assert f"run-{3 * KEPT_DATABASES - 1}.db" in held  # the latest run's stays open; early ones were closed
        assert all(len(storage.get_logs_for_run(f"run-{number}")) == 1 for number in range(3 * KEPT_DATABASES))
    assert not open_databases(runs)  # disposing the instance closes them


def test_wipe_closes_the_kept_databases_and_storage_goes_on(home: Path) -> None:
    with dg.DagsterInstance.get() as instance:
        storage = instance.event_log_storage
        storage.store_event(log_entry("before", "one"))
        storage.wipe()
        assert not (home / "history" / "runs" / "before.db").exists()
        assert storage.get_logs_for_run("before") == []
        storage.store_event(log_entry("after", "two"))
        assert [entry.user_message for entry in storage.get_logs_for_run("after")] == ["two"]


def write_in_child(queue: multiprocessing.Queue) -> None:
    """Runs in a forked child: store an event with the inherited storage and report the connections it opened."""
    count = ConnectionCount()
    event.listen(Pool, "connect", count)
    storage = CHILD_STORAGE["storage"]
    storage.store_event(log_entry("shared", "from the child"))
    queue.put(len(count.files))


CHILD_STORAGE: dict[str, KeptEngineEventLogStorage] = {}


def test_a_forked_child_opens_its_own_connections(home: Path) -> None:
    """A SQLite connection must not cross a fork: the child of a process holding kept connections opens its own
    (it would reuse the parent's otherwise), and both processes' events are stored."""
    with dg.DagsterInstance.get() as instance:
        storage = instance.event_log_storage
        storage.store_event(log_entry("shared", "from the parent"))
        CHILD_STORAGE["storage"] = storage
        context = multiprocessing.get_context("fork")
        queue = context.Queue()
        child = context.Process(target=write_in_child, args=(queue,))
        child.start()
        opened = queue.get(timeout=60)
        child.join(timeout=60)
        assert child.exitcode == 0
        assert opened >= 1  # the run's database, on a connection of the child's own
        storage.store_event(log_entry("shared", "from the parent again"))
        messages = [entry.user_message for entry in storage.get_logs_for_run("shared")]
        assert messages == ["from the parent", "from the child", "from the parent again"]
    CHILD_STORAGE.clear()


def test_it_follows_the_instance_it_belongs_to_not_dagster_home(tmp_path: Path, home: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A home opened by path (as `dagster dev` opens its temporary home) keeps its events in its own history,
    whatever DAGSTER_HOME says, set or not."""
    other = tmp_path / "other_home"
    other.mkdir()
    shutil.copy(REPO / "dagster.yaml", other / "dagster.yaml")
    for environment in (str(home), None):
        if environment is None:
            monkeypatch.delenv("DAGSTER_HOME")
        with dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(other))) as instance:
            result = dg.materialize([numbers], instance=instance, partition_key="3")
            assert result.success
            assert (other / "history" / "runs" / f"{result.run_id}.db").is_file()
            assert instance.get_materialized_partitions(dg.AssetKey("numbers")) == {"3"}
    assert not (home / "history").exists()


def test_a_watcher_sees_events_another_process_writes(home: Path) -> None:
    """The UI follows a running run by watching its database file (Dagster's watchdog on `<run_id>.db`). A writer
    that keeps its connection leaves the file itself unchanged until a checkpoint, so it touches the file after each
    write; the watcher, which holds a connection of its own, gets every event as it is written."""
    seen: list[str] = []
    with dg.DagsterInstance.get() as instance:
        storage = instance.event_log_storage
        storage.store_event(log_entry("followed", "first"))
        assert len(storage.get_logs_for_run("followed")) == 1  # the watcher's side holds the database open too
        storage.watch("followed", None, lambda entry, _cursor: seen.append(entry.user_message))
        try:
            writer = subprocess.run(
                [sys.executable, "-c", "import time, dagster as dg\n"
                 "from dagster._core.events.log import EventLogEntry\n"
                 "with dg.DagsterInstance.get() as i:\n"
                 "    for n in range(3):\n"
                 "        i.event_log_storage.store_event(EventLogEntry(error_info=None, level='INFO', "
                 "user_message=f'next {n}', run_id='followed', timestamp=time.time()))\n"
                 "        time.sleep(0.3)\n"],
                env=os.environ.copy(), capture_output=True, text=True, timeout=120)
            assert writer.returncode == 0, writer.stderr
            deadline = time.monotonic() + 10
            while len(seen) < 4 and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            storage.end_watch("followed", next(iter(storage._watchers["followed"])))
    assert seen == ["first", "next 0", "next 1", "next 2"]
