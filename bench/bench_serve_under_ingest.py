"""The HTTP API while it ingests: /healthz and POST /search under concurrent clients during an ingest started over
HTTP (POST /ingest), on real documents.

A base data dir holds the sample corpus (golden/corpus) indexed once. For each client count a copy of it is served
by `rag-pipeline serve` in its own process, with RAG_ROOTS naming the sample corpus and the documents to ingest
(default: the shared datasets' documents, PDF, DOCX, HTML; --big-text-mb adds a generated text file of that size).
POST /ingest starts the ingest; while it runs, the clients send the golden questions to /search and a prober GETs
/healthz every 0.25 s. Per phase it prints: the ingest's seconds and outcome, the searches, their 5xx count and
latency (p50, p95, max), and /healthz latency (p50, p95, max; probes over 1 s).

    .venv/bin/python bench/bench_serve_under_ingest.py [--work DIR] [--clients 8,32] [--documents DIR]
                                                       [--big-text-mb 0] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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
import yaml

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import httpx  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SAMPLE_CORPUS = REPO / "golden" / "corpus"
DOCUMENTS = REPO.parent / "shared" / "datasets" / "documents"
PROBE_INTERVAL_S = 0.25


def questions() -> list[str]:
    golden = yaml.safe_load((REPO / "golden" / "sample_golden.yaml").read_text())
    return [question["question"] for question in golden["questions"]]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def base_index(work: Path) -> Path:
    """The sample corpus indexed once (reused when present)."""
    data_dir = work / "base"
    if not (data_dir / "sidecar.duckdb").exists():
        subprocess.run([sys.executable, "-m", "rag_pipeline", "ingest", str(SAMPLE_CORPUS), "--data-dir",
                        str(data_dir), "--json"], check=True, stdout=subprocess.DEVNULL, cwd=REPO)
    return data_dir


def to_ingest(work: Path, documents: Path, big_text_mb: int) -> Path:
    folder = work / "incoming"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(documents, folder, ignore=shutil.ignore_patterns("groundtruth", "README.md"))
    if big_text_mb:
        line = "The pump seals are inspected every month and the valves are greased every quarter.\n"
        (folder / "big.txt").write_text(line * (big_text_mb * 1024 * 1024 // len(line)))
    return folder


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p95": 0.0, "max": 0.0}
    return {"p50": float(np.percentile(values, 50)), "p95": float(np.percentile(values, 95)),
            "max": float(max(values))}


def serve(data_dir: Path, roots: list[Path]) -> tuple[str, subprocess.Popen]:
    port = free_port()
    env = {**os.environ, "RAG_ROOTS": ",".join(map(str, roots))}
    server = subprocess.Popen([sys.executable, "-m", "rag_pipeline", "serve", "--port", str(port), "--data-dir",
                               str(data_dir), "--keyless-loopback", "--allow-empty"], cwd=REPO, env=env, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                return url, server
        except httpx.TransportError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the API server did not start")
        time.sleep(0.2)


def phase(base: Path, incoming: Path, clients: int, queries: list[str]) -> dict[str, Any]:
    """One server under `clients` searching clients and a /healthz prober while it ingests `incoming`."""
    with tempfile.TemporaryDirectory(prefix="bench-serve-") as folder:
        data_dir = Path(folder) / "data"
        shutil.copytree(base, data_dir)
        url, server = serve(data_dir, [SAMPLE_CORPUS, incoming])
        try:
            search_ms: list[float] = []
            health_ms: list[float] = []
            statuses: dict[int, int] = {}
            lock = threading.Lock()
            running = threading.Event()
            running.set()

            def client(offset: int) -> None:
                with httpx.Client(timeout=120) as session:
                    index = offset
                    while running.is_set():
                        begin = time.perf_counter()
                        response = session.post(f"{url}/search", json={"query": queries[index % len(queries)]})
                        with lock:
                            search_ms.append((time.perf_counter() - begin) * 1000)
                            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
                        index += clients

            def prober() -> None:
                with httpx.Client(timeout=30) as session:
                    while running.is_set():
                        begin = time.perf_counter()
                        session.get(f"{url}/healthz")
                        health_ms.append((time.perf_counter() - begin) * 1000)
                        time.sleep(PROBE_INTERVAL_S)

            threads = [threading.Thread(target=client, args=(offset,)) for offset in range(clients)]
            threads.append(threading.Thread(target=prober))
            for thread in threads:
                thread.start()
            started = time.perf_counter()
            job = httpx.post(f"{url}/ingest", timeout=30).json()
            while (state := httpx.get(f"{url}/ingest/{job['id']}", timeout=30).json())["status"] in ("queued",
                                                                                                       "running"):
                time.sleep(0.5)
            ingest_s = time.perf_counter() - started
            running.clear()
            for thread in threads:
                thread.join()
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=60)
    figures = {"clients": clients, "ingest_s": round(ingest_s, 1), "ingest_status": state["status"],
               "ingest_added": (state.get("summary") or {}).get("added"), "ingest_error": state.get("error"),
               "searches": len(search_ms), "statuses": statuses,
               "search_5xx": sum(count for status, count in statuses.items() if status >= 500),
               "search_ms": percentiles(search_ms), "healthz_probes": len(health_ms),
               "healthz_ms": percentiles(health_ms), "healthz_over_1s": sum(value > 1000 for value in health_ms)}
    print(f"\n{clients} clients during an HTTP ingest ({figures['ingest_s']} s, {state['status']}, "
          f"{figures['ingest_added']} added)")
    searched = figures["search_ms"]
    print(f"  /search   {figures['searches']} requests, statuses {statuses}, 5xx {figures['search_5xx']}, ms p50 "
          f"{searched['p50']:.1f} p95 {searched['p95']:.1f} max {searched['max']:.1f}")
    print(f"  /healthz  {figures['healthz_probes']} probes, ms p50 {figures['healthz_ms']['p50']:.1f} p95 "
          f"{figures['healthz_ms']['p95']:.1f} max {figures['healthz_ms']['max']:.1f}, over 1 s: "
          f"{figures['healthz_over_1s']}")
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", default=".bench/serve_under_ingest")
    parser.add_argument("--clients", default="8,32")
    parser.add_argument("--documents", default=str(DOCUMENTS))
    parser.add_argument("--big-text-mb", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    base = base_index(work)
    incoming = to_ingest(work, Path(args.documents), args.big_text_mb)
    figures = [phase(base, incoming, int(count), questions()) for count in args.clients.split(",")]
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
