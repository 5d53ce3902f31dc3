"""Query benchmark on the ingested SciFact index: latency per stage, then the HTTP API under concurrent load.

Part 1 runs every SciFact test query through the configured retriever in this process, once per retrieval
mode, and prints p50/p95 per stage (embed, search, rerank, postprocess, total) after a warm-up.
Part 2 starts `rag-pipeline serve` on 127.0.0.1 in its own process, sends the queries from N concurrent
clients (a bounded number of requests), prints throughput and latency percentiles, and stops the server.

    .venv/bin/python bench/bench_query.py [--work DIR] [--modes hybrid,dense] [--clients 8] [--requests 600]
                                          [--rerank-model CROSS_ENCODER_DIR]

--work is bench_ingest.py's work directory: its data/ is reused when present, else the corpus is ingested first.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx  # noqa: E402

from rag_pipeline.components import open_retriever  # noqa: E402
from rag_pipeline.settings import Settings  # noqa: E402

DATASET = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "scifact"
STAGES = ("embed", "cache", "hyde", "search", "rerank", "postprocess", "total")


def test_queries() -> list[str]:
    wanted = {line.split("\t")[0] for line in (DATASET / "qrels" / "test.tsv").read_text().splitlines()[1:]}
    queries = [json.loads(line) for line in (DATASET / "queries.jsonl").read_text().splitlines()]
    return [query["text"] for query in queries if query["_id"] in wanted]


def ensure_index(work: Path) -> Path:
    data_dir = work / "data"
    if not (data_dir / "sidecar.duckdb").exists():
        subprocess.run([sys.executable, str(Path(__file__).with_name("bench_ingest.py")), "--work", str(work)],
                       check=True)
    return data_dir


def percentiles(values: list[float]) -> str:
    return f"p50 {np.percentile(values, 50):7.2f}  p95 {np.percentile(values, 95):7.2f}  mean {np.mean(values):7.2f}"


def stage_latency(settings: Settings, queries: list[str], mode: str, top_k: int) -> None:
    retriever = open_retriever(settings.model_copy(update={"retrieval_mode": mode}))
    try:
        for query in queries[:20]:  # warm-up: model, caches, HNSW pages
            retriever.search(query, top_k=top_k)
        timings: dict[str, list[float]] = {stage: [] for stage in STAGES}
        started = time.perf_counter()
        for query in queries:
            result = retriever.search(query, top_k=top_k)
            for stage in STAGES:
                timings[stage].append(result.timings_ms.get(stage, 0.0))
        wall = time.perf_counter() - started
        print(f"\nmode {mode}: {len(queries)} queries, top_k {top_k}, {len(queries) / wall:.1f} queries/s "
              f"(one thread), {retriever.store.count()} points")
        for stage in STAGES:
            if any(timings[stage]):
                print(f"  {stage:12} ms  {percentiles(timings[stage])}")
    finally:
        retriever.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def http_load(data_dir: Path, queries: list[str], clients: int, requests: int, top_k: int) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "rag_pipeline", "serve", "--port", str(port),
                               "--data-dir", str(data_dir)], stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{url}/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the API server did not start")
            time.sleep(0.2)
        with httpx.Client() as warm:
            for query in queries[:20]:
                warm.post(f"{url}/search", json={"query": query, "top_k": top_k})
        latencies: list[float] = []
        errors = []
        counter = iter(range(requests))
        lock = threading.Lock()

        def client() -> None:
            with httpx.Client(timeout=60) as session:
                while True:
                    with lock:
                        index = next(counter, None)
                    if index is None:
                        return
                    begin = time.perf_counter()
                    response = session.post(f"{url}/search", json={"query": queries[index % len(queries)],
                                                                   "top_k": top_k})
                    elapsed = (time.perf_counter() - begin) * 1000
                    with lock:
                        latencies.append(elapsed)
                        if response.status_code != 200:
                            errors.append(response.status_code)

        threads = [threading.Thread(target=client) for _ in range(clients)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - started
        print(f"\nHTTP POST /search: {clients} concurrent clients, {requests} requests, {len(errors)} errors")
        print(f"  throughput   {requests / wall:.1f} requests/s")
        print(f"  latency ms   {percentiles(latencies)}")
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=None, help="bench_ingest.py work directory")
    parser.add_argument("--modes", default="hybrid,dense,sparse,blend")
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=600)
    parser.add_argument("--rerank-model", default=None,
                        help="a CrossEncoder directory: also time the hybrid mode with reranking")
    args = parser.parse_args()
    data_dir = ensure_index(args.work or Path(tempfile.mkdtemp(prefix="bench_query_")))
    settings = Settings(data_dir=data_dir)
    queries = test_queries()
    print(f"SciFact test queries: {len(queries)}")
    for mode in args.modes.split(","):
        stage_latency(settings, queries, mode.strip(), args.top_k)
    if args.rerank_model:
        print(f"\nwith reranking by {args.rerank_model}:", end="")
        stage_latency(settings.model_copy(update={"rerank_model_path": args.rerank_model}), queries, "hybrid",
                      args.top_k)
    if args.clients:
        http_load(data_dir, queries, args.clients, args.requests, args.top_k)


if __name__ == "__main__":
    main()
