"""Dagster's SQLite event log, with its database engines kept between events (dagster.yaml names it).

Dagster's SqliteEventLogStorage builds a SQLAlchemy engine for every connection (NullPool): each event costs one for
its run's database, and an asset event one more for the index database, each with SQLAlchemy's first-connect
set-up. A run over a range of shards records one materialisation per shard and step, so the sample corpus's ingest
writes ~180 events and built ~530 engines: ~2 s of its ~10 s run. This storage keeps one engine, holding one
idle connection, for each of the databases it used last (the index and the latest runs'). What it stores, and
where, is Dagster's own (<instance dir>/history/runs unless `base_dir` is given): a home can switch between the two
classes either way.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import sqlalchemy as db
from dagster import DagsterInstance, Field, StringSource
from dagster._config.config_schema import UserConfigSchema
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log import SqliteEventLogStorage
from dagster._core.storage.sqlite import SQLITE_BUSY_TIMEOUT_SECONDS
from dagster._serdes import ConfigurableClassData
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.pool import QueuePool

KEPT_DATABASES = 5  # the index and the runs written or read last; a webserver reading many runs keeps no more open
_STORAGES: weakref.WeakSet[KeptEngineEventLogStorage] = weakref.WeakSet()


class KeptEngineEventLogStorage(SqliteEventLogStorage):
    """SqliteEventLogStorage that reuses one engine (and its idle connection) per database for its last
    KEPT_DATABASES databases, instead of building an engine for every connection.

    Without `base_dir` it opens when Dagster registers its instance (the first thing an instance does with its event
    log), in <instance dir>/history/runs, where Dagster's default event log is: right for DAGSTER_HOME, a home given
    by path, and `dagster dev`'s temporary home alike."""

    def __init__(self, base_dir: str | None = None, inst_data: ConfigurableClassData | None = None):
        self._engines: OrderedDict[str, Engine] = OrderedDict()  # shard -> engine, the last used last
        self._tables: set[str] = set()  # tables seen to exist in the index (Dagster's migrations only add tables)
        self._inst_data = inst_data
        if base_dir is not None:
            super().__init__(base_dir, inst_data)
        _STORAGES.add(self)

    @classmethod
    def config_type(cls) -> UserConfigSchema:
        return {"base_dir": Field(StringSource, is_required=False)}

    @classmethod
    def from_config_value(  # ty: ignore[invalid-method-override]
        cls, inst_data: ConfigurableClassData | None, config_value: Mapping[str, Any]
    ) -> KeptEngineEventLogStorage:
        return cls(inst_data=inst_data, **config_value)

    def register_instance(self, instance: DagsterInstance) -> None:
        if not hasattr(self, "_base_dir"):
            super().__init__(os.path.join(instance.root_directory, "history", "runs"), self._inst_data)
        super().register_instance(instance)

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        with self._db_lock:
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn, conn.begin():
                yield conn

    def _engine(self, shard: str) -> Engine:
        """The kept engine of `shard`'s database (called under the storage's lock)."""
        engine = self._engines.pop(shard, None)
        if engine is None:
            # One connection stays in the pool (any thread may use it: the storage's lock serialises them);
            # Dagster's migration check opens a second one for a moment.
            engine = db.create_engine(self.conn_string_for_shard(shard), poolclass=QueuePool, pool_size=1,
                                      connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS,
                                                    "check_same_thread": False})
        self._engines[shard] = engine
        while len(self._engines) > KEPT_DATABASES:
            self._engines.popitem(last=False)[1].dispose()
        return engine

    def store_event(self, event: EventLogEntry) -> None:
        """Store as Dagster does, then touch the run's database file: a watcher (the UI following a run) waits for
        it to change, which a write over a kept connection leaves to the next checkpoint."""
        super().store_event(event)
        try:
            os.utime(self.path_for_shard(event.run_id))
        except OSError:
            pass  # the watcher then sees the event at the next write or checkpoint

    def has_table(self, table_name: str) -> bool:
        """Whether the index has the table. Dagster asks before every asset event's tags; a table it has seen
        is not asked for again."""
        if table_name in self._tables:
            return True
        found = super().has_table(table_name)
        if found:
            self._tables.add(table_name)
        return found

    def wipe(self) -> None:
        self.dispose_engines()
        super().wipe()
        self.dispose_engines()  # a connection another thread opened to a deleted file meanwhile

    def dispose(self) -> None:
        super().dispose()
        self.dispose_engines()

    def dispose_engines(self) -> None:
        """Close the kept connections."""
        with self._db_lock:
            for engine in self._engines.values():
                engine.dispose()
            self._engines.clear()


def _forget_inherited_state() -> None:
    """In a forked child, drop the parent's pooled connections without using them (a SQLite connection must not
    cross a fork), and the lock another thread of the parent may have held at the fork."""
    for storage in list(_STORAGES):
        for engine in storage._engines.values():
            engine.dispose(close=False)
        storage._engines.clear()
        if hasattr(storage, "_db_lock"):
            storage._db_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_inherited_state)
