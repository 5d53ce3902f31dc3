"""Runs of the Dagster code location with the executor its runs use (each step forked from a preloaded forkserver,
defs/step_executor.py) and with Dagster's default start method (each step a spawned interpreter, chosen in the run
config), in turn, the order alternating by round, after one untimed run that warms the file cache: `dagster asset
materialize` of the seven ingest assets over every shard of a fresh copy of the corpus (the sample corpus by
default) into a fresh data dir and DAGSTER_HOME. Prints each run's seconds (its event log's start to end), the
seconds its steps spent starting (STEP_WORKER_STARTING to STEP_START) and the process's wall, then the ratio of the
two ways' median run seconds.

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

from rag_pipeline.defs.assets import INGEST_ASSETS
from rag_pipeline.defs.partitions import SHARDS

REPO = Path(__file__).resolve().parents[1]
SAMPLE_CORPUS = REPO / "golden" / "corpus"
SPAWNED = {"execution": {"config": {"multiprocess": {"start_method": {"spawn": {}}}}}}
WAYS = ("spawned", "forked")


def shard_range() -> str:
    """Every shard partition, first to last, as `--partition-range` takes them."""
    keys = SHARDS.get_partition_keys()
    return f"{keys[0]}...{keys[-1]}"


def run_seconds(home: Path) -> tuple[float, float]:
    """(run seconds, step start-up seconds) of the one run recorded in `home`, from its event log."""
    with dg.DagsterInstance.from_config(str(home)) as instance:
        [run] = instance.get_runs()
        assert run.status == dg.DagsterRunStatus.SUCCESS, f"run {run.run_id} ended {run.status}"
        events = [(entry.timestamp, entry.dagster_event.event_type_value, entry.step_key)
                  for entry in instance.all_logs(run.run_id) if entry.dagster_event]
    starting: dict[str, float] = {}
    start_up = 0.0
    for timestamp, kind, step in events:
        if kind == "STEP_WORKER_STARTING":
            starting[step] = timestamp
        elif kind == "STEP_START" and step in starting:
            start_up += timestamp - starting.pop(step)
    return events[-1][0] - events[0][0], start_up


def one_run(way: str, corpus: Path, work: Path, partitions: str) -> dict:
    """A fresh run of the ingest assets, its steps "forked" (the code location's executor) or "spawned"."""
    run_dir = work / way
    shutil.rmtree(run_dir, ignore_errors=True)
    (run_dir / "home").mkdir(parents=True)
    shutil.copy(REPO / "dagster.yaml", run_dir / "home" / "dagster.yaml")
    shutil.copytree(corpus, run_dir / "corpus")
    env = {**os.environ, "DAGSTER_HOME": str(run_dir / "home"), "RAG_DATA_DIR": str(run_dir / "data"),
           "RAG_ROOTS": str(run_dir / "corpus"), "HF_HUB_OFFLINE": "1"}
    command = [str(Path(sys.executable).with_name("dagster")), "asset", "materialize", "-m", "rag_pipeline.definitions",
               "--select", ",".join(asset.key.to_user_string() for asset in INGEST_ASSETS),
               "--partition-range", partitions,
               "--config-json", json.dumps(SPAWNED if way == "spawned" else {})]
    log = run_dir / "dagster.log"
    started = time.perf_counter()
    with log.open("w") as output:
        finished = subprocess.run(command, env=env, cwd=REPO, stdout=output, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - started
    if finished.returncode != 0:
        sys.exit(f"the {way} run failed ({finished.returncode}):\n" + "\n".join(log.read_text().splitlines()[-40:]))
    seconds, start_up = run_seconds(run_dir / "home")
    print(f"{way:<8} run {seconds:6.2f} s   steps starting {start_up:6.2f} s   wall {wall:6.2f} s", flush=True)
    return {"executor": way, "run_seconds": round(seconds, 3), "step_start_seconds": round(start_up, 3),
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
        print("warm-up:", end=" ", flush=True)
        one_run("forked", args.corpus, Path(temp), partitions)
        for round_number in range(args.rounds):
            order = WAYS if round_number % 2 == 0 else WAYS[::-1]
            runs += [one_run(way, args.corpus, Path(temp), partitions) for way in order]
    median = {way: statistics.median(run["run_seconds"] for run in runs if run["executor"] == way) for way in WAYS}
    ratio = median["forked"] / median["spawned"]
    print(f"median run: spawned {median['spawned']:.2f} s, forked {median['forked']:.2f} s; forked/spawned "
          f"{ratio:.2f}x")
    if args.json:
        args.json.write_text(json.dumps({"median_run_seconds": median, "ratio": round(ratio, 3), "runs": runs},
                                        indent=2))


if __name__ == "__main__":
    main()
