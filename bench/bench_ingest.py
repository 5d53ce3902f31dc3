"""Ingest benchmark: the SciFact corpus written out as text files, ingested through the Dagster path.

Prints wall time, docs/s, chunks/s, the pure embedding (model) time of the same chunks in the same run and
their ratio (goal: wall <= 1.3x embedding), per-stage seconds, then the time of a no-change re-ingest. With
--rebuild-overlap N it then changes RAG_CHUNK_OVERLAP to N, which makes a new index generation, and prints the
cost of building it while the old one serves, of its final check and of the switch.

    .venv/bin/python bench/bench_ingest.py [--limit N] [--corpus FILE] [--work DIR] [--rebuild-overlap N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from rag_pipeline.defs.runner import ingest  # noqa: E402

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "scifact" / "corpus.jsonl"


def write_corpus(target: Path, limit: int | None, corpus: Path = CORPUS) -> int:
    """One .txt file per abstract: the title, a blank line, the text."""
    target.mkdir(parents=True, exist_ok=True)
    count = 0
    with corpus.open() as handle:
        for line in handle:
            if limit is not None and count >= limit:
                break
            record = json.loads(line)
            (target / f"{record['_id']}.txt").write_text(f"{record['title']}\n\n{record['text']}\n")
            count += 1
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--limit", type=int, default=None, help="first N abstracts only (default: all 5,183)")
    parser.add_argument("--corpus", type=Path, default=CORPUS, help=f"SciFact's corpus.jsonl (default: {CORPUS})")
    parser.add_argument("--work", type=Path, default=None, help="work directory (default: a temporary one)")
    parser.add_argument("--rebuild-overlap", type=int, default=None,
                        help="then rebuild into a new generation with this chunk overlap and time it")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench_ingest_"))
    corpus, data_dir = work / "scifact", work / "data"
    shutil.rmtree(data_dir, ignore_errors=True)
    documents = write_corpus(corpus, args.limit, args.corpus)

    started = time.perf_counter()
    summary = ingest([corpus], data_dir, progress=True)
    wall = time.perf_counter() - started
    again = ingest([corpus], data_dir)

    chunks = summary["chunks"]
    print(f"documents            {documents}")
    print(f"chunks               {chunks}")
    print(f"wall time            {wall:.1f} s")
    print(f"docs/s               {documents / wall:.1f}")
    print(f"chunks/s             {chunks / wall:.1f}")
    print(f"embedding (model)    {summary['embed_seconds']:.1f} s  ({chunks / summary['embed_seconds']:.1f} chunks/s)")
    print(f"wall / embedding     {wall / summary['embed_seconds']:.2f}x")
    for stage, seconds in summary["stage_seconds"].items():
        print(f"  {stage:20} {seconds:.1f} s")
    print(f"no-change re-ingest  {again['seconds']:.2f} s (added {again['added']}, shards run {len(again['shards'])})")
    if args.rebuild_overlap is not None:
        os.environ["RAG_CHUNK_OVERLAP"] = str(args.rebuild_overlap)
        rebuilt = ingest([corpus], data_dir, progress=True)
        generation = rebuilt["generation"]
        print(f"rebuild into a new generation (chunk overlap {args.rebuild_overlap}): {rebuilt['seconds']:.1f} s, "
              f"{rebuilt['reindexed']} documents, {rebuilt['chunks']} chunks, {rebuilt['vectors_computed']} vectors "
              f"computed, {rebuilt['vectors_cached']} cached")
        print(f"  completeness check {generation['check_seconds']:.2f} s over {generation['points']} points; "
              f"switch {generation['switch_ms']:.2f} ms; dropped {', '.join(generation['dropped']) or 'none'}")
        for stage, seconds in rebuilt["stage_seconds"].items():
            print(f"  {stage:20} {seconds:.1f} s")


if __name__ == "__main__":
    main()
