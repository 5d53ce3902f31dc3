"""The sidecar's two backends for tests: a DuckDB file under tmp_path, or a fresh database on the module's real
PostgreSQL server (pg_server.py). `sidecar_location` is parametrised over both; a module using it imports
`postgres_server` too (it starts the server only for the postgres parameter)."""

from __future__ import annotations

import itertools
from pathlib import Path

import psycopg2
import pytest

from .pg_server import PostgresServer

BACKENDS = ["duckdb", pytest.param("postgres", marks=pytest.mark.slow)]
_numbers = itertools.count(1)


def fresh_database(server: PostgresServer) -> str:
    """The URL of a new, empty database on `server`."""
    name = f"sidecar_{next(_numbers)}"
    raw = psycopg2.connect(**server.connect_kwargs())
    try:
        raw.autocommit = True
        with raw.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE {name}")
    finally:
        raw.close()
    return f"postgresql://{server.user}:{server.password}@{server.host}:{server.port}/{name}"


def location_for(backend: str, request: pytest.FixtureRequest, directory: Path) -> Path | str:
    """Where a new sidecar of `backend` goes: a DuckDB file in `directory`, or a fresh PostgreSQL database."""
    if backend == "duckdb":
        return directory / "sidecar.duckdb"
    return fresh_database(request.getfixturevalue("postgres_server"))


@pytest.fixture(params=BACKENDS)
def sidecar_location(request: pytest.FixtureRequest, tmp_path: Path) -> Path | str:
    """A new sidecar's location, on each backend."""
    return location_for(request.param, request, tmp_path)
