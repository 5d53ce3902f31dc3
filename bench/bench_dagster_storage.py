"""Dagster instance storage benchmark: SQLite (dagster.yaml, the default: its event log keeps its engines) against
Dagster's own SQLite event log ("sqlite-own": dagster.yaml without `event_log_storage`) and PostgreSQL
(deploy/dagster-postgres.yaml on a throwaway server from Debian's binaries, stopped by PID at the end).

(a) Per-partition event overhead: one run (single-run backfill, partition-range tags as
    rag_pipeline.defs.partitions.shard_run_tags makes them) materialises a trivial shard-partitioned asset over
    N = 1, 16 and 256 partitions; printed: median wall time, time / N, the marginal cost per partition
    ((t_N - t_1) / (N - 1)) and the event-log rows the run wrote.
(b) The real ingest graph with RAG_SHARD_HEX_DIGITS=2 (256 shards) on a copy of golden/corpus: first ingest and
    a no-change re-ingest, each with a fresh data dir per storage; "dagster" = wall time minus the stages' own
    seconds (run setup, events, checks, the corpus_summary run). An in-memory (ephemeral) instance is the baseline.

    .venv/bin/python bench/bench_dagster_storage.py [--repeats 3] [--pg-fast] [--skip-ingest]

PostgreSQL runs with its default (durable: fsync on) settings unless --pg-fast (fsync/synchronous_commit off).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# The shard partitions are fixed when rag_pipeline.defs is imported: 256 shards for part (b).
os.environ["RAG_SHARD_HEX_DIGITS"] = "2"

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import dagster as dg  # noqa: E402
import yaml  # noqa: E402
from dagster._core.storage.tags import ASSET_PARTITION_RANGE_END_TAG, ASSET_PARTITION_RANGE_START_TAG  # noqa: E402

warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=DeprecationWarning)

from rag_pipeline.defs.ingest_runner import QUIET_LOGS, dagster_instance, ingest  # noqa: E402
from rag_pipeline.defs.partitions import shard_run_tags  # noqa: E402
from rag_pipeline_tests.pg_server import FAST_SETTINGS, running_postgres  # noqa: E402

CORPUS = REPO / "golden" / "corpus"
CONFIGS = {"sqlite": REPO / "dagster.yaml", "sqlite-own": REPO / "dagster.yaml",
           "postgres": REPO / "deploy" / "dagster-postgres.yaml"}
STORAGES = ("ephemeral", "sqlite-own", "sqlite", "postgres")


def instance_config(storage: str) -> str:
    """The dagster.yaml of `storage` ("sqlite-own": the repo's without its event log class)."""
    config = yaml.safe_load(CONFIGS[storage].read_text())
    if storage == "sqlite-own":
        del config["event_log_storage"]
    return yaml.safe_dump(config)


@contextmanager
def dagster_home(work: Path, storage: str) -> Iterator[Path | None]:
    """Point DAGSTER_HOME at a fresh dir with the storage's dagster.yaml (unset for the ephemeral baseline)."""
    previous = os.environ.pop("DAGSTER_HOME", None)
    home = None
    if storage != "ephemeral":
        home = Path(tempfile.mkdtemp(prefix=f"home_{storage}_", dir=work))
        (home / "dagster.yaml").write_text(instance_config(storage))
        os.environ["DAGSTER_HOME"] = str(home)
    try:
        yield home
    finally:
        os.environ.pop("DAGSTER_HOME", None)
        if previous is not None:
            os.environ["DAGSTER_HOME"] = previous




def trivial_asset(count: int) -> tuple[dg.AssetsDefinition, list[str]]:
    """A shard-partitioned asset that does nothing but report a materialisation per partition."""
    width = 1 if count <= 16 else 2
    keys = [format(index, f"0{width}x") for index in range(16**width)][:count]

    @dg.asset(name=f"trivial_{count}", partitions_def=dg.StaticPartitionsDefinition(keys),
              backfill_policy=dg.BackfillPolicy.single_run())
    def trivial(context) -> dg.MaterializeResult:  # noqa: ANN001 (a nested asset: dagster cannot resolve the hint)
        return dg.MaterializeResult(metadata={"partitions": len(context.partition_keys)})

    return trivial, keys


def timed(action: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    value = action()
    return time.perf_counter() - started, value


def partition_overhead(repeats: int) -> dict[int, tuple[float, int]]:
    """{N: (median seconds of one N-partition run, event-log rows of that run)} on the current instance."""
    figures = {}
    with dagster_instance() as instance:
        for count in (1, 16, 256):
            asset, keys = trivial_asset(count)
            tags = shard_run_tags(keys)
            dg.materialize([asset], instance=instance, tags=tags, run_config=QUIET_LOGS)  # warm-up (schema, caches)
            seconds, rows = [], 0
            for _ in range(repeats):
                elapsed, result = timed(lambda: dg.materialize([asset], instance=instance, tags=tags,  # noqa: B023
                                                               run_config=QUIET_LOGS))
                assert result.success  # type: ignore[attr-defined]
                seconds.append(elapsed)
                rows = len(instance.get_records_for_run(result.run_id, limit=100_000).records)  # type: ignore[attr-defined]
            figures[count] = (statistics.median(seconds), rows)
    return figures


def ingest_timings(work: Path, storage: str) -> dict[str, float]:
    corpus = work / f"corpus_{storage}"
    shutil.copytree(CORPUS, corpus)
    data_dir = work / f"data_{storage}"
    with dagster_home(work, storage):
        first_seconds, first = timed(lambda: ingest([corpus], data_dir))
        again_seconds, again = timed(lambda: ingest([corpus], data_dir))
        covered = 0
        with dagster_instance() as instance:
            for run_id in first["run_ids"] if os.environ.get("DAGSTER_HOME") else []:  # type: ignore[index]
                run = instance.get_run_by_id(run_id)
                start, end = run.tags[ASSET_PARTITION_RANGE_START_TAG], run.tags[ASSET_PARTITION_RANGE_END_TAG]
                covered += int(end, 16) - int(start, 16) + 1
    assert not again["shards"], again  # type: ignore[index]
    stages = sum(first["stage_seconds"].values())  # type: ignore[index]
    return {"first": first_seconds, "dagster": first_seconds - stages, "again": again_seconds,
            "shards": len(first["shards"]), "covered": covered, "runs": len(first["run_ids"]),  # type: ignore[index]
            "docs": first["added"]}  # type: ignore[index]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per partition count (median)")
    parser.add_argument("--pg-fast", action="store_true", help="PostgreSQL with fsync/synchronous_commit off")
    parser.add_argument("--skip-ingest", action="store_true", help="only part (a)")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench_dagster_storage_"))
    overhead: dict[str, dict[int, tuple[float, int]]] = {}
    ingests: dict[str, dict[str, float]] = {}
    try:
        with running_postgres(settings=FAST_SETTINGS if args.pg_fast else None) as server:
            os.environ.update(server.dagster_env())
            print(f"PostgreSQL on 127.0.0.1:{server.port} (pid {server.pid}, "
                  f"{'fsync off' if args.pg_fast else 'default durable settings'})", file=sys.stderr)
            for storage in STORAGES:
                with dagster_home(work, storage):
                    overhead[storage] = partition_overhead(args.repeats)
            if not args.skip_ingest:
                # warm-up: load docling and the embedding model so no storage pays for it
                warm = work / "warm"
                warm.mkdir()
                shutil.copy(next(CORPUS.rglob("*.md")), warm)
                with dagster_home(work, "ephemeral"):
                    ingest([warm], work / "data_warm")
                for storage in STORAGES:
                    ingests[storage] = ingest_timings(work, storage)
                    print(f"ingest on {storage} done", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print("(a) trivial shard-partitioned asset, one single-run backfill over N partitions "
          f"(median of {args.repeats})")
    print(f"{'storage':10} {'N':>4} {'run s':>8} {'ms / N':>8} {'marginal ms':>12} {'events':>7} {'events/N':>9}")
    for storage, figures in overhead.items():
        base = figures[1][0]
        for count, (seconds, rows) in figures.items():
            marginal = f"{(seconds - base) / (count - 1) * 1000:12.2f}" if count > 1 else f"{'-':>12}"
            print(f"{storage:10} {count:>4} {seconds:8.3f} {seconds / count * 1000:8.2f} {marginal} "
                  f"{rows:>7} {rows / count:9.2f}")
    if ingests:
        some = next(iter(ingests.values()))
        print(f"\n(b) ingest of golden/corpus ({int(some['docs'])} documents in {int(some['shards'])} of 256 shards; "
              f"{int(ingests['sqlite']['runs'])} run(s) covering {int(ingests['sqlite']['covered'])} partitions x 7 "
              "assets; see shard_runs)")
        print(f"{'storage':10} {'first s':>8} {'dagster s':>10} {'re-ingest s':>12}")
        for storage, figures in ingests.items():
            print(f"{storage:10} {figures['first']:8.2f} {figures['dagster']:10.2f} {figures['again']:12.2f}")


if __name__ == "__main__":
    main()
