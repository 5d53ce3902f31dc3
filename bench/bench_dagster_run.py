"""Runs of the Dagster code location as the UI, the sensors and the schedule launch them, with its executor (each
step forked from a preloaded forkserver, defs/step_executor.py) and with Dagster's default multiprocess executor
(each step a spawned interpreter), in turn: `dagster asset materialize` of the seven ingest assets over every shard
of a fresh copy of the corpus (the sample corpus by default) into a fresh data dir and DAGSTER_HOME. Prints each
run's seconds (its event log's start to end), the seconds its steps spent starting (STEP_WORKER_STARTING to
STEP_START) and the process's wall, then the ratio of the executors' median run seconds.

    .venv/bin/python bench/bench_dagster_run.py [--corpus DIR] [--rounds R] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dagster as dg

REPO = Path(__file__).resolve().parents[1]
SAMPLE_CORPUS = REPO / "golden" / "corpus"
INGEST_ASSETS = "raw_documents,markdown_documents,redacted_documents,chunks,embeddings,vector_index,metadata_sidecar"
# The code location with Dagster's default executor in place of its own (the baseline): its only Definitions.
SPAWNED_LOCATION = """import dagster as dg

import rag_pipeline.definitions


def spawned(forked: dg.Definitions) -> dg.Definitions:
    return dg.Definitions(assets=forked.assets, asset_checks=forked.asset_checks, resources=forked.resources,
                          executor=dg.multiprocess_executor)


defs = spawned(rag_pipeline.definitions.defs())
"""


def shard_range() -> str:
    """Every shard partition, first to last, as `--partition-range` takes them."""
    from rag_pipeline.defs.partitions import SHARDS

    keys = SHARDS.get_partition_keys()
    return f"{keys[0]}...{keys[-1]}"


def run_seconds(home: Path) -> tuple[float, float]:
    """(run seconds, step start-up seconds) of the one run recorded in `home`, from its event log."""
    with dg.DagsterInstance.from_config(str(home)) as instance:
        [run] = instance.get_runs()
        assert run.status == dg.DagsterRunStatus.SUCCESS, f"run {run.run_id} ended {run.status}"
        events = [(entry.timestamp, entry.dagster_event.event_type_value) for entry in instance.all_logs(run.run_id)
                  if entry.dagster_event]
    starting: float | None = None
    start_up = 0.0
    for timestamp, kind in events:
        if kind == "STEP_WORKER_STARTING":
            starting = timestamp
        elif kind == "STEP_START" and starting is not None:
            start_up, starting = start_up + timestamp - starting, None
    return events[-1][0] - events[0][0], start_up


def one_run(executor: str, corpus: Path, work: Path, partitions: str) -> dict:
    """A fresh run of the ingest assets with `executor` ("forked": the code location's; "spawned": Dagster's)."""
    run_dir = work / executor
    shutil.rmtree(run_dir, ignore_errors=True)
    (run_dir / "home").mkdir(parents=True)
    shutil.copy(REPO / "dagster.yaml", run_dir / "home" / "dagster.yaml")
    shutil.copytree(corpus, run_dir / "corpus")
    target = ["-m", "rag_pipeline.definitions"] if executor == "forked" else ["-f", str(work / "spawned_location.py")]
    env = {**os.environ, "DAGSTER_HOME": str(run_dir / "home"), "RAG_DATA_DIR": str(run_dir / "data"),
           "RAG_ROOTS": str(run_dir / "corpus"), "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    subprocess.run([str(Path(sys.executable).with_name("dagster")), "asset", "materialize", *target,
                    "--select", INGEST_ASSETS, "--partition-range", partitions], env=env, cwd=REPO, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - started
    seconds, start_up = run_seconds(run_dir / "home")
    print(f"{executor:<8} run {seconds:6.2f} s   steps starting {start_up:6.2f} s   wall {wall:6.2f} s", flush=True)
    return {"executor": executor, "run_seconds": round(seconds, 3), "step_start_seconds": round(start_up, 3),
            "wall_seconds": round(wall, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=SAMPLE_CORPUS, help="a folder of documents to ingest")
    parser.add_argument("--rounds", type=int, default=3, help="pairs of runs, the executors in turn")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    if not args.corpus.is_dir():
        parser.error(f"--corpus {args.corpus}: not a folder")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    partitions = shard_range()
    runs = []
    with tempfile.TemporaryDirectory(prefix="bench_dagster_run_") as temp:
        work = Path(temp)
        (work / "spawned_location.py").write_text(SPAWNED_LOCATION)
        for _ in range(args.rounds):
            runs += [one_run(executor, args.corpus, work, partitions) for executor in ("spawned", "forked")]
    median = {executor: statistics.median(run["run_seconds"] for run in runs if run["executor"] == executor)
              for executor in ("spawned", "forked")}
    ratio = median["forked"] / median["spawned"]
    print(f"median run: spawned {median['spawned']:.2f} s, forked {median['forked']:.2f} s; forked/spawned "
          f"{ratio:.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"median_run_seconds": median, "ratio": round(ratio, 3), "runs": runs},
                                        indent=2))


if __name__ == "__main__":
    main()
