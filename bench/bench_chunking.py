"""Chunk size study on a BEIR dataset's train split: for each chunk size (and overlap), a fresh ingest of the
corpus (its own data dir, so no embedding cache is shared) and retrieval quality per mode. Printed per setting:
chunks, ingest seconds, chunks/s, docs/s, nDCG@10 and Recall@100 per mode. Tune on train; report test once.

    .venv/bin/python bench/bench_chunking.py ../shared/datasets/scifact [--chunker tokens|recursive] \
        [--sizes 254:0,128:0] [--split train] [--modes dense,sparse,hybrid] [--work .bench/chunking]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_setting(dataset: Path, chunker: str, size: int, overlap: int, split: str, modes: str, work: Path) -> dict:
    """`rag-pipeline beir --json` with RAG_CHUNKER / RAG_CHUNK_SIZE / RAG_CHUNK_OVERLAP set, in its own data dir."""
    env = {**os.environ, "RAG_CHUNKER": chunker, "RAG_CHUNK_SIZE": str(size), "RAG_CHUNK_OVERLAP": str(overlap),
           "HF_HUB_OFFLINE": "1"}
    command = [str(REPO / ".venv" / "bin" / "rag-pipeline"), "beir", str(dataset), "--split", split,
               "--modes", modes, "--json", "--data-dir", str(work / f"{chunker}-{size}-{overlap}")]
    done = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"chunk size {size}/{overlap}: rag-pipeline beir failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--chunker", default="tokens", choices=["tokens", "recursive"])
    parser.add_argument("--sizes", default="254:0,254:32,192:0,128:0",
                        help="comma-separated SIZE:OVERLAP (word pieces for tokens, characters for recursive)")
    parser.add_argument("--split", default="train")
    parser.add_argument("--modes", default="dense,sparse,hybrid")
    parser.add_argument("--work", type=Path, default=REPO / ".bench" / "chunking")
    args = parser.parse_args()
    settings = [tuple(int(part) for part in item.split(":")) for item in args.sizes.split(",") if item]
    modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    header = "| size | overlap | chunks | ingest s | chunks/s | docs/s | " + " | ".join(
        f"{mode} nDCG@10 | {mode} R@100" for mode in modes) + " |"
    rows = []
    for size, overlap in settings:
        print(f"{args.chunker} chunk size {size}, overlap {overlap}: ingesting and scoring ({args.split})",
              file=sys.stderr, flush=True)
        report = run_setting(args.dataset, args.chunker, size, overlap, args.split, ",".join(modes), args.work)
        ingest = report["ingest"]
        seconds = ingest["seconds"] or float("nan")
        cells = [str(size), str(overlap), str(ingest["chunks"]), f"{seconds:.0f}",
                 f"{ingest['chunks'] / seconds:.1f}", f"{ingest['documents'] / seconds:.1f}"]
        for mode in modes:
            metrics = report["modes"][mode]["metrics"]
            cells += [f"{metrics['ndcg@10']:.3f}", f"{metrics['recall@100']:.3f}"]
        rows.append("| " + " | ".join(cells) + " |")
        print(rows[-1], file=sys.stderr, flush=True)
    print(f"{args.dataset.name} ({args.split} split, {args.chunker} chunker)\n\n{header}\n|" + "---|" * (header.count("|") - 1) + "\n"
          + "\n".join(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
