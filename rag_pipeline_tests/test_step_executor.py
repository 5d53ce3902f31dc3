"""The code location's executor: every job forks its steps from a forkserver that preloaded what a step needs,
unless the run's config chooses otherwise.

A real run through Dagster's multiprocess executor shows where its step ran: in a process forked from a forkserver
that had imported the code location and the PostgreSQL storage (which nothing a spawned step imports would bring
in for a SQLite instance). It runs on the default instance config here, and on deploy/dagster-postgres.yaml in
test_postgres. Runs configured `in_process` or with `start_method: spawn` run as Dagster runs them. The forkserver
skips a preload module that fails to import, so each one is imported here in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from rag_pipeline.definitions import defs
from rag_pipeline.defs.step_executor import step_executor, step_preload_modules
from rag_pipeline_tests.conftest import REPO

DEFS_FOLDER = REPO / "rag_pipeline" / "defs"
PRELOADED = ("dagster_postgres", "rag_pipeline.defs.sensors")


@dg.asset
def step_process() -> dg.MaterializeResult:
    """Where this step runs: its parent's command line and which preloaded modules it found."""
    parent = Path(f"/proc/{os.getppid()}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return dg.MaterializeResult(metadata={"parent": parent, "pid": os.getpid(),
                                          **{name: name in sys.modules for name in PRELOADED}})


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


def where_step_job_ran(home: str, run_config_json: str, out: str) -> None:
    """Run step_job with this run config on the instance of DAGSTER_HOME `home`; write step_process's metadata and
    this process's id to `out` (JSON)."""
    with dg.DagsterInstance.from_config(home) as instance:
        run_config = json.loads(run_config_json)
        with dg.execute_job(dg.reconstructable(step_job), instance=instance, run_config=run_config) as result:
            assert result.success
        event = instance.get_latest_materialization_event(dg.AssetKey("step_process"))
    where = {label: entry.value for label, entry in event.asset_materialization.metadata.items()}
    Path(out).write_text(json.dumps({**where, "runner": os.getpid()}))


def run_step_job(home: Path, execution: dict | None = None) -> dict:
    """where_step_job_ran in a process of its own, as a run worker is: a process has one forkserver, and this one's
    may already run (with the conversion workers' preload) when the test starts."""
    out = home / "where.json"
    run_config = {"execution": {"config": execution}} if execution else {}
    script = "import sys\nfrom rag_pipeline_tests.test_step_executor import where_step_job_ran\n" \
             "where_step_job_ran(*sys.argv[1:])"
    result = subprocess.run([sys.executable, "-c", script, str(home), json.dumps(run_config), str(out)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(out.read_text())


def assert_step_forked(home: Path) -> None:
    """step_job's step ran in a process forked from the preloaded forkserver."""
    where = run_step_job(home)
    assert "multiprocessing.forkserver" in where["parent"], where
    assert all(where[name] is True for name in PRELOADED), where


@pytest.fixture
def sqlite_home(tmp_path: Path) -> Path:
    """A DAGSTER_HOME holding the repository's dagster.yaml."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    return home


def test_a_run_forks_its_steps_from_the_preloaded_forkserver(sqlite_home: Path) -> None:
    assert_step_forked(sqlite_home)


def test_a_run_config_keeps_dagsters_executor_options(sqlite_home: Path) -> None:
    """in_process runs the step in the run's process, a start method of the run's own is used as given, the other
    options go through, and an unknown one is an error."""
    in_process = run_step_job(sqlite_home, {"in_process": {}})
    assert in_process["pid"] == in_process["runner"], in_process
    spawned = run_step_job(sqlite_home, {"multiprocess": {"start_method": {"spawn": {}}}})
    assert spawned["pid"] != spawned["runner"] and "multiprocessing.forkserver" not in spawned["parent"], spawned
    assert not any(spawned[name] for name in PRELOADED), spawned

    job = step_job()
    limited = dg.validate_run_config(job, {"execution": {"config": {"multiprocess": {"max_concurrent": 1}}}})
    [resolved] = limited["execution"].values()
    assert resolved["multiprocess"]["max_concurrent"] == 1 and "forkserver" in resolved["multiprocess"]["start_method"]
    with pytest.raises(dg.DagsterInvalidConfigError, match="bogus"):
        dg.validate_run_config(job, {"execution": {"config": {"multiprocess": {"bogus": 1}}}})


def test_other_platforms_keep_dagsters_spawn(monkeypatch: pytest.MonkeyPatch) -> None:
    """Off Linux (macOS: forked HTTP clients can crash) the run's steps are spawned, as Dagster's default does."""
    monkeypatch.setattr(sys, "platform", "darwin")
    [resolved] = dg.validate_run_config(step_job(), {})["execution"].values()
    assert "start_method" not in resolved["multiprocess"], resolved
