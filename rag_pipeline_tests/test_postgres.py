"""Dagster instance storage in PostgreSQL: deploy/dagster-postgres.yaml against a real server (Debian's binaries)."""

from __future__ import annotations

import shutil
from pathlib import Path

import dagster as dg
import psycopg2
import pytest
import yaml
from sqlalchemy import event
from sqlalchemy.pool import Pool

from rag_pipeline.defs.assets import INGEST_ASSETS, corpus_summary
from rag_pipeline.defs.ingest_runner import ingest

from .conftest import REPO
from .pg_server import PostgresServer, postgres_server  # noqa: F401  (postgres_server is a fixture)
from .sidecar_backends import fresh_database
from .test_step_executor import assert_step_forked

SQLITE_CONFIG = REPO / "dagster.yaml"
POSTGRES_CONFIG = REPO / "deploy" / "dagster-postgres.yaml"


def test_postgres_config_matches_default_apart_from_storage() -> None:
    """The two instance configs differ only in their storage: SQLite stays the default (with its event log's engines
    kept), PostgreSQL is `storage: postgres`."""
    default = yaml.safe_load(SQLITE_CONFIG.read_text())
    postgres = yaml.safe_load(POSTGRES_CONFIG.read_text())
    assert "storage" not in default
    assert default.pop("event_log_storage")["class"] == "KeptEngineEventLogStorage"
    assert set(postgres.pop("storage")) == {"postgres"}
    assert postgres == default


@pytest.fixture
def postgres_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, postgres_server: PostgresServer) -> Path:  # noqa: F811
    """A DAGSTER_HOME holding deploy/dagster-postgres.yaml, with DAGSTER_PG_* pointing at the test server."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(POSTGRES_CONFIG, home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    for name, value in postgres_server.dagster_env().items():
        monkeypatch.setenv(name, value)
    return home


@pytest.mark.slow
def test_a_run_forks_its_steps_on_postgres_storage(postgres_home: Path, monkeypatch: pytest.MonkeyPatch,
                                                    postgres_server: PostgresServer) -> None:  # noqa: F811
    """The code location's executor with the instance's storage in PostgreSQL (a database of its own, so that the
    other tests count only their runs): steps forked from the forkserver."""
    monkeypatch.setenv("DAGSTER_PG_DB", fresh_database(postgres_server).rsplit("/", 1)[1])
    assert_step_forked(postgres_home)


@pytest.mark.slow
def test_postgres_instance_loads(postgres_home: Path) -> None:
    with dg.DagsterInstance.get() as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"
        concurrency = instance.get_concurrency_config()
        assert concurrency.run_queue_config.max_concurrent_runs == 4
        assert concurrency.pool_config.default_pool_limit == 1
        assert concurrency.pool_config.pool_granularity.value == "op"


@pytest.mark.slow
def test_ingest_records_runs_and_materialisations_in_postgres(
    postgres_home: Path, postgres_server: PostgresServer, corpus: Path, data_dir: Path,  # noqa: F811
) -> None:
    opened = []
    count = lambda dbapi_connection, _: opened.append(dbapi_connection.get_dsn_parameters()["dbname"])  # noqa: E731
    event.listen(Pool, "connect", count)
    try:
        summary = ingest([corpus], data_dir)
    finally:
        event.remove(Pool, "connect", count)
    assert summary["added"] > 0 and summary["chunks"] > 0 and len(summary["run_ids"]) == 1
    shards, [run_id] = summary["shards"], summary["run_ids"]
    assert shards
    # ... and closes them when it ends (a server runs many ingests): only this check's own connection is left.
    check = psycopg2.connect(**postgres_server.connect_kwargs())
    try:
        with check.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
            assert cursor.fetchone()[0] == 1
    finally:
        check.close()

    with dg.DagsterInstance.get() as instance:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        run = instance.get_run_by_id(run_id)
        assert run is not None and run.status == dg.DagsterRunStatus.SUCCESS
        assert instance.get_runs_count() == 1  # the shard run, which ends with the corpus_summary refresh

        for asset in INGEST_ASSETS:
            key = asset.key
            assert set(shards) <= instance.get_materialized_partitions(key), key
            records = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=key, asset_partitions=list(shards)), limit=1000
            ).records
            assert {record.partition_key for record in records} == set(shards), key
            assert {record.run_id for record in records} == {run_id}, key
        latest = instance.get_latest_materialization_event(corpus_summary.key)
        assert latest is not None and latest.run_id == run_id

    # Nothing went to SQLite under DAGSTER_HOME.
    assert not [path for path in postgres_home.rglob("*.db")]

    # The rows are in PostgreSQL itself.
    connection = psycopg2.connect(**postgres_server.connect_kwargs())
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT status FROM runs WHERE run_id = %s", (run_id,))
            assert cursor.fetchall() == [("SUCCESS",)]
            cursor.execute(
                "SELECT count(*) FROM event_logs WHERE run_id = %s AND dagster_event_type = 'ASSET_MATERIALIZATION'",
                (run_id,),
            )
            # one per asset per shard of the run's range (the range may include unchanged shards in between)
            assert cursor.fetchone()[0] >= len(INGEST_ASSETS) * len(shards)
            cursor.execute("SELECT count(*) FROM event_logs WHERE run_id = %s", (run_id,))
            events = cursor.fetchone()[0]
        # The runner keeps its connections: fewer than one per event (only Dagster's table check before an asset
        # event's tags opens one for a moment), where dagster-postgres's own opens ~3.7 per event.
        connections = opened.count(postgres_server.dagster_env()["DAGSTER_PG_DB"])
        assert 0 < connections <= events, (connections, events)
    finally:
        connection.close()

    again = ingest([corpus], data_dir)
    assert again["shards"] == [] and again["added"] == 0 and again["run_ids"] == []
    with dg.DagsterInstance.get() as instance:
        assert instance.get_runs_count() == 1  # an ingest with nothing to do launches no run
