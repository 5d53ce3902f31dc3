"""The `rag-pipeline` program ends without the interpreter's teardown, and loses nothing by it: its whole output,
its exit code, the exit handlers libraries register during the command, and the stores a real ingest wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rag_pipeline_tests.conftest import REPO

# A command replaced by a probe: it registers an exit handler (as a library does while a command runs), keeps an
# object whose finaliser reports the interpreter's teardown, and prints more than a pipe's buffer holds. argv[2]:
# "program" calls main() as the console script does, "argv" passes the command, "raise" makes the command fail.
PROBE = """
import atexit, sys
from rag_pipeline.serve import cli

class Teardown:
    def __del__(self):
        print("teardown ran", file=sys.stderr, flush=True)

def probe(args, settings):
    global kept
    atexit.register(lambda: print("library handler ran", file=sys.stderr, flush=True))
    kept = Teardown()
    if mode == "raise":
        raise RuntimeError("probe failed")
    if mode == "short":  # stays in stdout's buffer until the final flush; the command succeeds
        print("ok")
        return 0
    print("x" * 300_000)
    return 3

mode = sys.argv[2]
cli.run_sources = probe
sys.argv = ["rag-pipeline", "sources", "--data-dir", sys.argv[1]]
sys.exit(cli.main(sys.argv[1:]) if mode == "argv" else cli.main())
"""


def run_probe(tmp_path: Path, mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "data"), mode], capture_output=True,
                          text=True, timeout=120, cwd=REPO, env={**os.environ, "HF_HUB_OFFLINE": "1"})


def test_the_program_skips_teardown_but_not_its_output_code_or_handlers(tmp_path: Path) -> None:
    done = run_probe(tmp_path, "program")
    assert done.returncode == 3, done.stderr
    assert done.stdout == "x" * 300_000 + "\n"
    assert "library handler ran" in done.stderr
    assert "teardown ran" not in done.stderr


def test_main_called_with_argv_returns_and_python_tears_down_as_usual(tmp_path: Path) -> None:
    """A caller that passes argv (a test, a script) keeps its process: main returns and Python exits as usual."""
    done = run_probe(tmp_path, "argv")
    assert done.returncode == 3, done.stderr
    assert done.stdout == "x" * 300_000 + "\n"
    assert "teardown ran" in done.stderr


def test_output_that_cannot_be_written_is_reported_and_fails_the_exit(tmp_path: Path) -> None:
    """The final flush of a command that succeeded fails (a full disk): the program says so and exits 120, as
    Python's own exit does."""
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "data"), "short"], stdout=full,
                              stderr=subprocess.PIPE, text=True, timeout=120, cwd=REPO,
                              env={**environment, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 120
    assert "rag-pipeline: could not write the output: [Errno 28] No space left on device" in done.stderr


def test_the_cli_imports_nothing_whose_exit_handler_would_be_skipped() -> None:
    """Exit handlers registered before the command runs are skipped by the quick exit: parsing a command must not
    load multiprocessing (which ends the conversion and shard workers at exit) or make a weakref.finalize (which
    removes temporary directories)."""
    check = ("import sys, weakref\n"
             "from rag_pipeline.serve import cli\n"
             "cli.build_parser().parse_args(['ingest', '.'])\n"
             "print('multiprocessing.util' in sys.modules, weakref.finalize._registered_with_atexit)")
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]


def test_a_command_that_raises_exits_as_python_does(tmp_path: Path) -> None:
    """No code to exit with: the traceback and exit status 1 are Python's own."""
    done = run_probe(tmp_path, "raise")
    assert done.returncode == 1
    assert "RuntimeError: probe failed" in done.stderr
    assert "library handler ran" in done.stderr
    assert "teardown ran" in done.stderr


@pytest.mark.slow
def test_an_ingest_ended_quickly_is_complete_for_the_next_process(tmp_path: Path) -> None:
    """A real ingest through the program (docling's workers for the HTML page, the embedded store, the DuckDB
    sidecar, Dagster's SQLite storage), then a search and an exact question in new processes."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "pumps.md").write_text("# Pumps\n\nThe bilge pump seals are inspected every fortnight.\n")
    (corpus / "valves.md").write_text("# Valves\n\nEvery valve is checked monthly by the engineer on duty.\n")
    (corpus / "severity.html").write_text("<html><body><h1>Incident severity</h1><p>A SEV1 incident is a full "
                                          "outage: page the incident commander.</p></body></html>")
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((REPO / "dagster.yaml").read_text())
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "DAGSTER_HOME": str(home)}
    data = tmp_path / "data"

    def program(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "rag_pipeline", *args, "--data-dir", str(data), "--json"],
                              capture_output=True, text=True, timeout=600, cwd=REPO, env=env)

    ingest = program("ingest", str(corpus))
    assert ingest.returncode == 0, ingest.stderr
    assert json.loads(ingest.stdout)["added"] == 3
    assert not list(data.rglob("*.wal")), "a DuckDB file was left for the next process to replay"
    search = program("search", "who is paged for a full outage")
    assert search.returncode == 0, search.stderr
    assert Path(json.loads(search.stdout)["results"][0]["path"]).name == "severity.html"
    count = program("query", "count")
    assert count.returncode == 0, count.stderr
    assert json.loads(count.stdout)["rows"] == [{"count": 3}]
