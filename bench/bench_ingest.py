"""Ingest benchmark: the SciFact corpus written out as text files, ingested through the Dagster path.

Prints wall time, docs/s, chunks/s, the pure embedding (model) time of the same chunks in the same run and
their ratio (goal: wall <= 1.3x embedding), per-stage seconds, then the time of a no-change re-ingest. With
--rebuild-overlap N it then changes RAG_CHUNK_OVERLAP to N, which makes a new index generation, and prints the
cost of building it while the old one serves, of its final check and of the switch. --json writes every figure
printed as one JSON object.

    .venv/bin/python bench/bench_ingest.py [--limit N] [--corpus FILE] [--work DIR] [--rebuild-overlap N]
                                           [--json PATH]
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

from rag_pipeline.defs.ingest_runner import ingest  # noqa: E402

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
    parser.add_argument("--json", type=Path, default=None, help="write every figure to this JSON file")
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
    report = {"documents": documents, "chunks": chunks, "wall_seconds": wall, "docs_per_s": documents / wall,
              "chunks_per_s": chunks / wall, "embedding_seconds": summary["embed_seconds"],
              "embedding_chunks_per_s": chunks / summary["embed_seconds"],
              "wall_per_embedding": wall / summary["embed_seconds"], "stage_seconds": summary["stage_seconds"],
              "no_change_reingest": {"seconds": again["seconds"], "added": again["added"],
                                     "shards_run": len(again["shards"])}}
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
        report["rebuild"] = {"chunk_overlap": args.rebuild_overlap, "seconds": rebuilt["seconds"],
                             "documents": rebuilt["reindexed"], "chunks": rebuilt["chunks"],
                             "vectors_computed": rebuilt["vectors_computed"],
                             "vectors_cached": rebuilt["vectors_cached"],
                             "check_seconds": generation["check_seconds"], "points": generation["points"],
                             "switch_ms": generation["switch_ms"], "dropped": generation["dropped"],
                             "stage_seconds": rebuilt["stage_seconds"]}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
