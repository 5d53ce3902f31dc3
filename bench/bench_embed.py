"""Benchmark the packaged embedding model on each runtime (torch, onnx, onnx-int8, openvino-bf16) with SciFact
abstracts: texts/s and word pieces/s per batch size (int8 and bf16 keep their own), cosine to the torch vectors
(min, mean), and one-query latency p50/p95 (openvino-bf16 embeds queries with the int8 model). The ONNX models are
exported into --onnx-dir on first use (nothing is downloaded).

Usage: HF_HUB_OFFLINE=1 python bench/bench_embed.py [--n 512] [--batch-sizes 16,32,64] [--runtimes torch,onnx-int8]
                                                    [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from itertools import islice
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from rag_pipeline.components import build_embedder  # noqa: E402
from rag_pipeline.embed.model_files import model_dir, model_tokenizer  # noqa: E402

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "scifact" / "corpus.jsonl"
QUERIES = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "scifact" / "queries.jsonl"


def load_texts(path: Path, n: int) -> list[str]:
    """Title and abstract of the first n documents (the model reads at most 256 word pieces of each)."""
    with path.open(encoding="utf-8") as lines:
        records = [json.loads(line) for line in islice(lines, n)]
    return [f"{record['title']}\n\n{record['text']}" for record in records]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=512, help="number of abstracts")
    parser.add_argument("--batch-sizes", default="16,32,64")
    parser.add_argument("--runtimes", default="torch,onnx,onnx-int8,openvino-bf16")
    parser.add_argument("--onnx-dir", type=Path, default=Path(tempfile.gettempdir()) / "rag_bench_onnx")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    texts = load_texts(CORPUS, args.n)
    queries = [json.loads(line)["text"] for line in islice(QUERIES.open(), 200)]
    pieces = sum(min(len(encoding.ids), 254) for encoding in model_tokenizer(model_dir()).encode_batch(texts))
    print(f"{len(texts)} SciFact abstracts, {pieces} word pieces read (at most 254 each); {os.cpu_count()} cores")
    figures: dict[str, dict] = {}
    reference = None
    for runtime in args.runtimes.split(","):
        started = time.perf_counter()
        embedder = build_embedder(runtime=runtime, onnx_cache_dir=str(args.onnx_dir))
        load = time.perf_counter() - started
        embedder.embed_documents(texts[:32])  # warm-up outside the timings
        result: dict = {"load_seconds": round(load, 2), "batches": {}}
        print(f"\n{runtime} (loaded in {load:.2f} s)\n{'batch':>6} {'seconds':>9} {'texts/s':>8} {'pieces/s':>9}")
        for batch_size in (int(size) for size in args.batch_sizes.split(",")):
            embedder.batch_size = batch_size
            started = time.perf_counter()
            vectors = embedder.embed_documents(texts)
            seconds = time.perf_counter() - started
            result["batches"][batch_size] = {"texts_per_s": round(len(texts) / seconds, 1),
                                             "pieces_per_s": round(pieces / seconds)}
            print(f"{batch_size:>6} {seconds:>9.2f} {len(texts) / seconds:>8.1f} {pieces / seconds:>9.0f}")
        if reference is None:
            reference = vectors
        cosines = (vectors * reference).sum(axis=1)
        latencies = []
        for query in queries:
            started = time.perf_counter()
            embedder.embed_query(query)
            latencies.append((time.perf_counter() - started) * 1000)
        result.update(cosine_min=round(float(cosines.min()), 4), cosine_mean=round(float(cosines.mean()), 4),
                      query_ms_p50=round(float(np.percentile(latencies, 50)), 2),
                      query_ms_p95=round(float(np.percentile(latencies, 95)), 2))
        print(f"cosine to {args.runtimes.split(',')[0]}: min {result['cosine_min']} mean {result['cosine_mean']}; "
              f"one query: p50 {result['query_ms_p50']} ms, p95 {result['query_ms_p95']} ms")
        figures[runtime] = result
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
