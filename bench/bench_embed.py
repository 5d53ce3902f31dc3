"""Benchmark the packaged embedding model on SciFact abstracts at several batch sizes.

Usage: HF_HUB_OFFLINE=1 python bench/bench_embed.py [--n 2000] [--batch-sizes 16,32,64,128] [--threads N]
"""

from __future__ import annotations

import argparse
import json
import time
from itertools import islice
from pathlib import Path

import torch

from rag_pipeline.embedder import SentenceTransformerEmbedder

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "scifact" / "corpus.jsonl"
MAX_CHARS = 1000


def load_texts(path: Path, n: int) -> list[str]:
    """Title and abstract of the first n documents, each cut at MAX_CHARS."""
    with path.open(encoding="utf-8") as lines:
        records = [json.loads(line) for line in islice(lines, n)]
    return [f"{record['title']}\n{record['text']}"[:MAX_CHARS] for record in records]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="number of abstracts")
    parser.add_argument("--batch-sizes", default="16,32,64,128")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (default: torch's own)")
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    texts = load_texts(args.corpus, args.n)
    started = time.perf_counter()
    embedder = SentenceTransformerEmbedder()
    print(f"model loaded in {time.perf_counter() - started:.2f}s; {len(texts)} texts; torch threads {torch.get_num_threads()}")
    embedder.embed_documents(texts[:32])  # warm-up outside the timings

    print(f"{'batch':>6} {'seconds':>9} {'texts/s':>8}")
    for batch_size in (int(size) for size in args.batch_sizes.split(",")):
        embedder.batch_size = batch_size
        started = time.perf_counter()
        embedder.embed_documents(texts)
        seconds = time.perf_counter() - started
        print(f"{batch_size:>6} {seconds:>9.2f} {len(texts) / seconds:>8.1f}")


if __name__ == "__main__":
    main()
