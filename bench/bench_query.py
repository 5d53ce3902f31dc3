"""Query benchmark on the ingested SciFact index: latency per stage, then the HTTP API under concurrent load.

Part 1 runs every SciFact test query through the configured retriever in this process, once per retrieval
mode, and prints p50/p95 per stage (embed, search, rerank, postprocess, total) after a warm-up.
Part 2 starts `rag-pipeline serve` on 127.0.0.1 in its own process, then for each client count sends the queries
from that many concurrent clients (a bounded number of requests), prints throughput, latency percentiles, errors
and the server's CPU time per request, and stops the server. Both parts print their ratio to the targets.

    .venv/bin/python bench/bench_query.py [--work DIR] [--modes hybrid,dense] [--clients 1,8,32] [--requests 600]
                                          [--rerank-model CROSS_ENCODER_DIR] [--json PATH]

--work is bench_ingest.py's work directory: its data/ is reused when present, else the corpus is ingested first.
--json writes every figure printed as one JSON object.
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
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx  # noqa: E402

from rag_pipeline.components import load_settings, open_retriever  # noqa: E402
from rag_pipeline.settings import Settings  # noqa: E402

DATASET = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "scifact"
STAGES = ("embed", "cache", "hyde", "search", "rerank", "postprocess", "total")
TARGET_HYBRID_P50_MS = 10.0  # in-process hybrid query, total
TARGET_HTTP_P95_MS = {8: 100.0}  # POST /search at this many concurrent clients


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


def percentiles(values: list[float]) -> dict[str, float]:
    return {"p50": float(np.percentile(values, 50)), "p95": float(np.percentile(values, 95)),
            "mean": float(np.mean(values))}


def format_percentiles(figures: dict[str, float]) -> str:
    return f"p50 {figures['p50']:7.2f}  p95 {figures['p95']:7.2f}  mean {figures['mean']:7.2f}"


def stage_latency(settings: Settings, queries: list[str], mode: str, top_k: int) -> dict[str, Any]:
    """The mode's per-stage latency percentiles (ms) over `queries`, one thread, after a warm-up."""
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
        figures = {"queries": len(queries), "top_k": top_k, "queries_per_s": len(queries) / wall,
                   "points": retriever.store.count(),
                   "stages_ms": {stage: percentiles(values) for stage, values in timings.items() if any(values)}}
    finally:
        retriever.close()
    print(f"\nmode {mode}: {len(queries)} queries, top_k {top_k}, {figures['queries_per_s']:.1f} queries/s "
          f"(one thread), {figures['points']} points")
    for stage, stage_figures in figures["stages_ms"].items():
        print(f"  {stage:12} ms  {format_percentiles(stage_figures)}")
    return figures


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process (Linux /proc; None elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def load(url: str, queries: list[str], clients: int, requests: int, top_k: int, server_pid: int) -> dict[str, Any]:
    """`requests` POST /search calls from `clients` concurrent clients: throughput, latency (ms), errors."""
    latencies: list[float] = []
    errors: list[int] = []
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
    cpu_before = cpu_seconds(server_pid)
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    cpu_after = cpu_seconds(server_pid)
    figures = {"clients": clients, "requests": requests, "errors": len(errors),
               "requests_per_s": requests / wall, "latency_ms": percentiles(latencies),
               "server_cpu_ms_per_request": None if cpu_before is None or cpu_after is None
               else (cpu_after - cpu_before) * 1000 / requests}
    print(f"\nHTTP POST /search: {clients} concurrent clients, {requests} requests, {len(errors)} errors")
    print(f"  throughput   {figures['requests_per_s']:.1f} requests/s")
    print(f"  latency ms   {format_percentiles(figures['latency_ms'])}")
    if figures["server_cpu_ms_per_request"] is not None:
        print(f"  server CPU   {figures['server_cpu_ms_per_request']:.2f} ms per request")
    return figures


def http_load(data_dir: Path, queries: list[str], client_counts: list[int], requests: int,
              top_k: int) -> list[dict[str, Any]]:
    """Start the API server once, load it at each client count, stop it."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen([sys.executable, "-m", "rag_pipeline", "serve", "--port", str(port),
                               "--data-dir", str(data_dir), "--keyless-loopback"], stderr=subprocess.DEVNULL)
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
        return [load(url, queries, clients, requests, top_k, server.pid) for clients in client_counts]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)


def targets(report: dict[str, Any]) -> dict[str, dict[str, float]]:
    """Each target met or not: the measured figure, the target and their ratio (at most 1 meets it)."""
    measured = {}
    if "hybrid" in report["modes"]:
        measured["hybrid_p50_ms"] = (report["modes"]["hybrid"]["stages_ms"]["total"]["p50"], TARGET_HYBRID_P50_MS)
    for run in report["http"]:
        if run["clients"] in TARGET_HTTP_P95_MS:
            measured[f"http_p95_ms_{run['clients']}_clients"] = (run["latency_ms"]["p95"],
                                                                 TARGET_HTTP_P95_MS[run["clients"]])
    figures = {name: {"measured": value, "target": target, "ratio": value / target}
               for name, (value, target) in measured.items()}
    if figures:
        print("\ntargets (measured / target; at most 1 meets it):")
        for name, entry in figures.items():
            print(f"  {name:24} {entry['measured']:8.2f} / {entry['target']:6.1f} = {entry['ratio']:.2f}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--work", type=Path, default=None, help="bench_ingest.py work directory")
    parser.add_argument("--modes", default="hybrid,dense,sparse,blend")
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--clients", default="1,8,32", help="concurrent HTTP clients, one run each ('' for none)")
    parser.add_argument("--requests", type=int, default=600, help="HTTP requests per run")
    parser.add_argument("--rerank-model", default=None,
                        help="a CrossEncoder directory: also time the hybrid mode with reranking")
    parser.add_argument("--json", type=Path, default=None, help="write every figure to this JSON file")
    args = parser.parse_args()
    data_dir = ensure_index(args.work or Path(tempfile.mkdtemp(prefix="bench_query_")))
    settings = load_settings(data_dir=data_dir)
    queries = test_queries()
    print(f"SciFact test queries: {len(queries)}")
    report: dict[str, Any] = {"queries": len(queries), "modes": {}, "http": []}
    for mode in (mode.strip() for mode in args.modes.split(",") if mode.strip()):
        report["modes"][mode] = stage_latency(settings, queries, mode, args.top_k)
    if args.rerank_model:
        print(f"\nwith reranking by {args.rerank_model}:", end="")
        report["modes"]["hybrid-rerank"] = stage_latency(
            settings.model_copy(update={"rerank_model_path": args.rerank_model}), queries, "hybrid", args.top_k)
    client_counts = [int(count) for count in args.clients.split(",") if count.strip() and int(count) > 0]
    if client_counts:
        report["http"] = http_load(data_dir, queries, client_counts, args.requests, args.top_k)
    report["targets"] = targets(report)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
