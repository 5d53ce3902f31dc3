"""The code location's executor: every job forks its steps from a forkserver that preloaded what a step needs.

A real run through Dagster's multiprocess executor shows where its step ran: in a process forked from a forkserver
that had imported the code location and the PostgreSQL storage (which nothing a spawned step imports would bring
in for a SQLite instance). It runs on the default instance config here, and on deploy/dagster-postgres.yaml in
test_postgres. The forkserver skips a preload module that fails to import, so each one is imported here in a fresh
interpreter.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg

from rag_pipeline.definitions import defs
from rag_pipeline.defs.step_executor import step_executor, step_preload_modules
from rag_pipeline_tests.conftest import REPO

DEFS_FOLDER = REPO / "rag_pipeline" / "defs"
PRELOADED = ("dagster_postgres", "rag_pipeline.defs.sensors")


@dg.asset
def step_process() -> dg.MaterializeResult:
    """Where this step runs: its parent's command line and which preloaded modules it found."""
    parent = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return dg.MaterializeResult(metadata={"parent": parent, **{name: name in sys.modules for name in PRELOADED}})


@dg.asset(deps=[step_process])
def next_step() -> None:
    """A second step, forked from the same forkserver."""


def step_job() -> dg.JobDefinition:
    """The two assets as a job with the code location's executor (a module-level function: reconstructable)."""
    job = dg.define_asset_job("step_job", executor_def=step_executor)
    return dg.Definitions(assets=[step_process, next_step], jobs=[job]).resolve_job_def("step_job")


def test_every_preload_module_imports_in_a_fresh_interpreter() -> None:
    modules = step_preload_modules()
    own = {f"rag_pipeline.defs.{path.stem}" for path in DEFS_FOLDER.glob("*.py") if path.stem != "__init__"}
    assert own <= set(modules), own - set(modules)
    assert "rag_pipeline.definitions" in modules
    script = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    result = subprocess.run([sys.executable, "-c", script, *modules], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


def test_every_job_of_the_code_location_forks_its_steps() -> None:
    repository = defs().get_repository_def()
    jobs = repository.get_all_jobs()
    assert {"ingest_job", "corpus_summary_job", "eval_job", "__ASSET_JOB"} <= {job.name for job in jobs}
    for job in jobs:
        assert job.executor_def is step_executor, f"{job.name} runs with {job.executor_def.name}"


def where_step_job_ran(home: str) -> dict:
    """Run step_job on the instance of DAGSTER_HOME `home`; step_process's metadata."""
    with dg.DagsterInstance.from_config(home) as instance:
        with dg.execute_job(dg.reconstructable(step_job), instance=instance) as result:
            assert result.success
        event = instance.get_latest_materialization_event(dg.AssetKey("step_process"))
    return {label: entry.value for label, entry in event.asset_materialization.metadata.items()}


def assert_step_forked(home: Path) -> None:
    """step_job's step ran in a process forked from the preloaded forkserver. The job runs in a process of its own,
    as a run worker is: a process has one forkserver, and this one's may already run (with the conversion workers'
    preload) when the test starts."""
    script = ("import json, sys\nfrom rag_pipeline_tests.test_step_executor import where_step_job_ran\n"
              "print(json.dumps(where_step_job_ran(sys.argv[1])))")
    result = subprocess.run([sys.executable, "-c", script, str(home)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    where = json.loads(result.stdout.strip().splitlines()[-1])
    assert "multiprocessing.forkserver" in where["parent"], where
    assert all(where[name] is True for name in PRELOADED), where


def test_a_run_forks_its_steps_from_the_preloaded_forkserver(tmp_path: Path) -> None:
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    assert_step_forked(home)
