"""Benchmark rag_pipeline.ingest.convert over the dataset documents with one DocumentConverter.

With --workers N it instead times a step's conversion (ingest/convert.py: conversions) of the documents (the
first --limit of them, each --repeat times) with RAG_CONVERT_WORKERS=N (every document for docling converts in a
worker process), twice in this process: cold (the worker pool's forkserver started inside the timing: a CLI
ingest) and warm (a long-lived process: the API, the Dagster code server). Run it once per N to compare.

Usage: HF_HUB_OFFLINE=1 python bench/bench_convert.py [--repeat N] [--documents DIR] [--workers N [--limit M]]
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from pathlib import Path

from rag_pipeline.ingest.convert import conversions
from rag_pipeline.ingest.converters import DocumentConverter
from rag_pipeline.settings import Settings

DOCUMENTS = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "documents"
DOC_TYPES = {".md": "md", ".txt": "txt", ".pdf": "pdf", ".docx": "docx", ".html": "html", ".pptx": "pptx"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1, help="convert every document N times")
    parser.add_argument("--documents", type=Path, default=DOCUMENTS)
    parser.add_argument("--workers", type=int, default=None, help="time a step's conversion with N workers")
    parser.add_argument("--limit", type=int, default=None, help="with --workers: the first M documents only")
    args = parser.parse_args()

    paths = sorted(path for path in args.documents.iterdir() if path.suffix in DOC_TYPES)
    if args.workers is not None:
        time_step(paths[:args.limit] * args.repeat, args.workers)
        return
    converter = DocumentConverter()
    started = time.perf_counter()
    converter.docling  # noqa: B018 - build the docling converter outside the timings
    print(f"docling converter built in {time.perf_counter() - started:.2f}s")

    files: dict[str, int] = defaultdict(int)
    seconds: dict[str, float] = defaultdict(float)
    pages: dict[str, int] = defaultdict(int)
    for _ in range(args.repeat):
        for path in paths:
            doc_type = DOC_TYPES[path.suffix]
            started = time.perf_counter()
            doc = converter.convert(path, doc_type)
            seconds[doc_type] += time.perf_counter() - started
            files[doc_type] += 1
            pages[doc_type] += doc.page_count or 0

    print(f"{'type':<6} {'files':>6} {'seconds':>9} {'docs/s':>8} {'pages/s':>8}")
    for doc_type in sorted(files) + ["all"]:
        n = sum(files.values()) if doc_type == "all" else files[doc_type]
        s = sum(seconds.values()) if doc_type == "all" else seconds[doc_type]
        pages_per_second = f"{pages[doc_type] / s:8.1f}" if doc_type == "pdf" else f"{'':>8}"
        print(f"{doc_type:<6} {n:>6} {s:>9.2f} {n / s:>8.1f} {pages_per_second}")


def time_step(paths: list[Path], workers: int) -> None:
    """Wall time of converting `paths` as one step would, cold then warm."""
    settings, converter = Settings(convert_workers=workers), DocumentConverter()
    jobs = [(path, DOC_TYPES[path.suffix]) for path in paths]
    pooled = sum(doc_type not in ("md", "txt") for _, doc_type in jobs)
    print(f"{len(jobs)} documents, RAG_CONVERT_WORKERS={workers}: {pooled} in worker processes")
    for label in ("cold", "warm"):
        started = time.perf_counter()
        failed = sum(outcome.converted is None for _, outcome in conversions(settings, converter, jobs))
        seconds = time.perf_counter() - started
        print(f"{label}: {seconds:6.2f} s  {len(jobs) / seconds:6.1f} docs/s  ({failed} failed)")


if __name__ == "__main__":
    main()
