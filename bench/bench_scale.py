"""Scale-out benchmark: ingest of the first N SciFact abstracts with 1, 2, ... shard workers (RAG_INGEST_WORKERS),
each worker count on as many cores (`taskset -c 0..W-1`; every shard worker pins itself to one of them).

For each count: a fresh data dir, one ingest in a subprocess, its wall time and docs/s, and the time spent in the
steps whose writes are serialised (raw_documents, vector_index, metadata_sidecar, which run in the ingest process
while no worker runs). Prints docs/s per count and the ratio of the largest count's docs/s to one worker's; --json
writes {"ratio": ..., "runs": [...]}. The ONNX export of the model is made once beforehand, outside the timings.

With --rounds R (default 1), every count runs once per round, the counts in turn (1, 2, 1, 2, ...): each round's
ratio compares runs made a minute apart, so a machine whose speed drifts (other tenants' load) moves both of
them; the ratio printed and written is the median of the rounds' ratios (`round_ratios` lists them all).

With --sidecar-url (a PostgreSQL server's postgresql://user:password@host:port/db, a user that may create
databases), every run gets a fresh database of its own on that server as its sidecar (RAG_SIDECAR_URL), dropped
afterwards; without it, each run's sidecar is DuckDB in its data dir.

    .venv/bin/python bench/bench_scale.py [--workers 1,2] [--limit N] [--corpus FILE] [--work DIR] [--json PATH]
        [--sidecar-url URL] [--rounds R]
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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from bench_ingest import CORPUS, write_corpus

SERIAL_STAGES = ("raw_documents", "vector_index", "metadata_sidecar")


def ingest_once(corpus: Path, data_dir: Path) -> None:
    """In the subprocess: one ingest; prints its summary and wall time as JSON."""
    from rag_pipeline.defs.ingest_runner import ingest

    started = time.perf_counter()
    summary = ingest([corpus], data_dir)
    print(json.dumps({"wall": time.perf_counter() - started, "summary": summary}))


@contextmanager
def fresh_database(server_url: str | None, name: str) -> Iterator[dict[str, str]]:
    """The environment of a run's sidecar: a new database `name` on the PostgreSQL server at `server_url`, dropped
    on exit; none (DuckDB in the data dir) without a server."""
    if server_url is None:
        yield {}
        return
    import psycopg2
    from psycopg2 import sql

    def admin(statement: str) -> None:
        connection = psycopg2.connect(server_url)
        connection.autocommit = True  # CREATE/DROP DATABASE cannot run in a transaction
        try:
            connection.cursor().execute(sql.SQL(statement).format(sql.Identifier(name)))
        finally:
            connection.close()

    admin("DROP DATABASE IF EXISTS {}")
    admin("CREATE DATABASE {}")
    try:
        yield {"RAG_SIDECAR_URL": urlunsplit(urlsplit(server_url)._replace(path=f"/{name}"))}
    finally:
        admin("DROP DATABASE IF EXISTS {}")


def timed_ingest(corpus: Path, data_dir: Path, workers: int, environment: dict[str, str],
                 sidecar_url: str | None = None) -> dict:
    """An ingest with `workers` shard workers on cores 0..workers-1, in a subprocess: its figures."""
    shutil.rmtree(data_dir, ignore_errors=True)
    cores = ",".join(str(core) for core in range(workers))
    command = ["taskset", "-c", cores, sys.executable, __file__, "--ingest-once", str(corpus), str(data_dir)]
    with fresh_database(sidecar_url, f"bench_scale_{os.getpid()}_{data_dir.name}") as sidecar:
        output = subprocess.run(command, env={**environment, **sidecar, "RAG_INGEST_WORKERS": str(workers)},
                                check=True, capture_output=True, text=True).stdout
    result = json.loads(output.strip().splitlines()[-1])
    summary, wall = result["summary"], result["wall"]
    if summary["failed"]:
        raise SystemExit(f"the ingest with {workers} workers failed documents: {summary['failed'][:3]}")
    stages = summary["stage_seconds"]
    return {"workers": workers, "cores": cores, "documents": summary["added"], "chunks": summary["chunks"],
            "wall_seconds": round(wall, 2), "docs_per_s": round(summary["added"] / wall, 2),
            "serial_write_seconds": round(sum(stages.get(stage, 0.0) for stage in SERIAL_STAGES), 2),
            "embed_seconds": summary["embed_seconds"], "stage_seconds": stages, "runs": len(summary["run_ids"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts (default: 1,2)")
    parser.add_argument("--limit", type=int, default=1000, help="first N abstracts (default: 1000)")
    parser.add_argument("--corpus", type=Path, default=CORPUS, help=f"SciFact's corpus.jsonl (default: {CORPUS})")
    parser.add_argument("--work", type=Path, default=None, help="work directory (default: a temporary one)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures to this JSON file")
    parser.add_argument("--sidecar-url", default=None, metavar="URL",
                        help="a PostgreSQL server (postgresql://user:password@host:port/db): each run's sidecar is a "
                             "fresh database there (default: DuckDB in the run's data dir)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run every count this many times, the counts in turn; the ratio is the median of the "
                             "rounds' ratios (default: 1)")
    parser.add_argument("--ingest-once", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ingest_once:
        ingest_once(*args.ingest_once)
        return
    counts = sorted({int(count) for count in args.workers.split(",")})
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    available = len(os.sched_getaffinity(0))
    if counts[-1] > available:
        raise SystemExit(f"{counts[-1]} workers need {counts[-1]} cores; this process may use {available}")
    work = args.work or Path(tempfile.mkdtemp(prefix="bench_scale_"))
    corpus = work / "scifact"
    shutil.rmtree(corpus, ignore_errors=True)
    documents = write_corpus(corpus, args.limit, args.corpus)
    environment = {**{key: value for key, value in os.environ.items() if key != "RAG_SIDECAR_URL"},  # --sidecar-url
                   "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                   "RAG_ONNX_CACHE_DIR": os.environ.get("RAG_ONNX_CACHE_DIR", str(work / "onnx"))}
    warm = work / "warm"  # the ONNX export, made once and outside the timings
    write_corpus(warm / "corpus", 5, args.corpus)
    timed_ingest(warm / "corpus", warm / "data", 1, environment)

    print(f"documents {documents}, sidecar {'PostgreSQL' if args.sidecar_url else 'DuckDB'}, "
          f"load average {os.getloadavg()[0]:.2f} (1 min) at the start")
    runs, round_ratios = [], []
    for round_number in range(1, args.rounds + 1):
        this_round = []
        for workers in counts:
            run = timed_ingest(corpus, work / f"data_{workers}", workers, environment, args.sidecar_url)
            run["sidecar"] = "postgresql" if args.sidecar_url else "duckdb"
            run["load_average"] = round(os.getloadavg()[0], 2)
            run["round"] = round_number
            this_round.append(run)
            print(f"{workers} worker(s) on cores {run['cores']:5}  {run['docs_per_s']:7.2f} docs/s  "
                  f"wall {run['wall_seconds']:7.1f} s  serialised writes {run['serial_write_seconds']:5.1f} s  "
                  f"embedding {run['embed_seconds']:6.1f} s (summed over workers)  load {run['load_average']:.2f}")
        runs += this_round
        round_ratios.append(this_round[-1]["docs_per_s"] / this_round[0]["docs_per_s"])
        print(f"ratio {counts[-1]} / {counts[0]} workers: {round_ratios[-1]:.2f}x"
              + (f" (round {round_number} of {args.rounds})" if args.rounds > 1 else ""))
    ratio = statistics.median(round_ratios)
    if args.rounds > 1:
        print(f"median ratio over {args.rounds} rounds: {ratio:.2f}x (rounds: "
              + ", ".join(f"{value:.2f}x" for value in round_ratios) + ")")
    if args.json:
        args.json.write_text(json.dumps({"ratio": round(ratio, 3), "documents": documents, "runs": runs,
                                         "round_ratios": [round(value, 3) for value in round_ratios]}, indent=2)
                             + "\n")


if __name__ == "__main__":
    main()
