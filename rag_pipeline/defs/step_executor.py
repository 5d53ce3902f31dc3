"""The executor of the code location's runs: Dagster's default executor, whose multiprocess mode forks each step
from a forkserver that has imported what a step needs, unless the run's config chooses otherwise.

A run worker (one process per run: the UI's, the sensors', the schedule's) starts that forkserver at its first step;
it imports Dagster's step execution, its instance storages and this code location once. Dagster's default start
method spawns a fresh interpreter per step that imports them all again, ~2.5 s before every step. The forkserver is
the process's own: where one already runs (an in-process ingest with shard workers starts one), Dagster's preload
does not apply. The run config keeps Dagster's options: `in_process`, `max_concurrent`, `tag_concurrency_limits`,
`retries`, and a `start_method` of its own (`spawn`). Off Linux, steps are spawned as Dagster does by default."""

import pkgutil
import sys

import dagster as dg

import rag_pipeline.defs

# Dagster modules a step's process imports before it runs (its instance, the storages named in dagster.yaml or
# deploy/dagster-postgres.yaml, and the code location's loader). The forkserver skips a module that fails to import
# (it only costs time): test_step_executor imports each of them.
DAGSTER_STEP_MODULES = [
    "dagster._cli",
    "dagster._core.instance.factory",
    "dagster._core.storage.root",
    "dagster._core.storage.migration.utils",
    "dagster._core.storage.sqlite_storage",
    "dagster._core.storage.legacy_storage",
    "dagster._core.storage.runs.sqlite.sqlite_run_storage",
    "dagster._core.storage.schedules.sqlite.sqlite_schedule_storage",
    "dagster._core.storage.local_compute_log_manager",
    "dagster._core.scheduler",
    "dagster_postgres",
    "dagster._core.definitions.repository_definition.repository_data_builder",
    "dagster._core.workspace.autodiscovery",
    "dagster.components.core.snapshot",
    "tomlkit",
    "upath.implementations.local",
]


def step_preload_modules() -> list[str]:
    """What the forkserver imports: Dagster's step modules, then the code location and every module of defs/."""
    own = [f"{rag_pipeline.defs.__name__}.{module.name}" for module in pkgutil.iter_modules(rag_pipeline.defs.__path__)]
    return [*DAGSTER_STEP_MODULES, "rag_pipeline.definitions", *own]


def forked_by_default(config: dict) -> dict:
    """Dagster's default executor config, with the preloaded forkserver in multiprocess mode on Linux unless the
    run's config chooses a start method. Elsewhere Dagster's spawn stays: on macOS a forked process that makes HTTP
    requests can crash (Dagster kept spawn as its default for that, dagster-io/dagster#6676)."""
    multiprocess = config.get("multiprocess")
    if multiprocess is None or "start_method" in multiprocess or sys.platform != "linux":
        return config
    forkserver = {"forkserver": {"preload_modules": step_preload_modules()}}
    return {"multiprocess": {**multiprocess, "start_method": forkserver}}


step_executor = dg.multi_or_in_process_executor.configured(
    forked_by_default, name="forkserver_or_in_process",
    config_schema=dg.multi_or_in_process_executor.config_schema.as_field())
