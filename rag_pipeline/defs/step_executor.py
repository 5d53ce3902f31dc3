"""The executor of the code location's runs: Dagster's multiprocess executor, each step forked from a forkserver
that has imported what a step needs. That is one forkserver per run (the UI's, the sensors', the schedule's), which
imports Dagster's step execution, its instance storages and this code location once; Dagster's default spawns a
fresh interpreter per step that imports them all again, ~2 s before every step."""

import pkgutil

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
    "dagster._core.run_coordinator",
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


step_executor = dg.multiprocess_executor.configured(
    {"start_method": {"forkserver": {"preload_modules": step_preload_modules()}}}, name="forked_multiprocess")
