"""`rag-pipeline` command line. Every command takes --data-dir and --json (one JSON object on stdout)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import warnings
from pathlib import Path
from typing import Any


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--data-dir", default=os.environ.get("RAG_DATA_DIR", ".rag_data"),
                        help="data directory (default: $RAG_DATA_DIR, else ./.rag_data)")
    common.add_argument("--json", action="store_true", help="print one JSON object on stdout; logs go to stderr")
    parser = argparse.ArgumentParser(prog="rag-pipeline", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    ingest = commands.add_parser("ingest", parents=[common],
                                 help="discover, diff by SHA and materialise the affected shards through Dagster")
    ingest.add_argument("roots", nargs="+", help="folders of documents")
    return parser


def print_ingest_summary(summary: dict[str, Any], data_dir: str) -> None:
    from rag_pipeline.index.sidecar import Sidecar
    from rag_pipeline.settings import Settings

    print(f"{'type':6} {'documents':>9} {'failed':>6} {'chunks':>7} {'redactions':>10}")
    for row in Sidecar(Settings(data_dir=data_dir).sidecar_path).totals_by_type():
        print(f"{row['doc_type']:6} {row['documents']:>9} {row['failed']:>6} {row['chunks']:>7} {row['redactions']:>10}")
    print(f"added {summary['added']}, unchanged {summary['unchanged']}, moved {summary['moved']}, "
          f"purged {summary['purged']}, chunks written {summary['chunks']}, failed {len(summary['failed'])} "
          f"in {summary['seconds']:.1f} s")
    for failure in summary["failed"]:
        print(f"  failed: {failure['path']}: {failure['error']}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    warnings.filterwarnings("ignore", message=".*is currently in beta")
    if args.command == "ingest":
        from rag_pipeline.serve.ingest import IngestFailed, ingest

        missing = [root for root in args.roots if not Path(root).is_dir()]
        if missing:
            print(f"rag-pipeline: not a directory: {', '.join(missing)}", file=sys.stderr)
            return 2
        try:
            summary = ingest(args.roots, args.data_dir, progress=True)
        except IngestFailed as exc:
            print(f"rag-pipeline: ingest failed: {exc}", file=sys.stderr)
            return 1
        if args.json:
            print(json.dumps(summary))
        else:
            print_ingest_summary(summary, args.data_dir)
    return 0
