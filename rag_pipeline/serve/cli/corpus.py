"""`rag-pipeline ingest`, `reindex`, `upload`, `remove`, `forget`, `sources` and `manifest`: what the index is made of."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from rag_pipeline.chat.citation_text import named_place
from rag_pipeline.errors import InputError
from rag_pipeline.serve.cli.data_dir import require_data_dir
from rag_pipeline.settings import Settings


def check_roots(roots: list[str]) -> None:
    missing = [root for root in roots if not Path(root).is_dir()]
    if missing:
        raise InputError(f"not a directory: {', '.join(missing)}")


def start_conversions_early(args: argparse.Namespace, settings: Settings) -> bool:
    """Start docling's conversion workers now when the folders hold work for them, before Dagster is imported: their
    import of docling (~2.4 s of a core) then overlaps Dagster's and the discovery. Not with shard workers
    (RAG_INGEST_WORKERS > 1): they need this process's forkserver for their own preload."""
    from rag_pipeline.ingest.convert import conversions_ahead, start_conversion_workers

    roots = args.roots or ([] if args.source else settings.roots)  # a named source's roots are in the sidecar
    if settings.ingest_workers > 1 or not conversions_ahead(settings, roots):
        return False
    start_conversion_workers()
    return True


def run_ingest(args: argparse.Namespace, settings: Settings) -> int:
    """Discover, diff by SHA and materialise the changed shards through Dagster in this process."""
    check_roots(args.roots)
    start_conversions_early(args, settings)
    from rag_pipeline.defs.ingest_runner import ingest

    summary = ingest(args.roots, settings.data_dir, source=args.source, progress=True, add_roots=not args.replace)
    if args.json:
        print(json.dumps(summary))
    else:
        print_ingest_summary(summary, settings)
    return 0


def run_reindex(args: argparse.Namespace, settings: Settings) -> int:
    """Build the target generation from the recorded sources (walks no folder) and switch to it when complete."""
    from rag_pipeline.defs.ingest_runner import ingest

    summary = ingest(data_dir=settings.data_dir, rediscover=False, progress=True)
    if args.json:
        print(json.dumps(summary))
    else:
        print_ingest_summary(summary, settings)
    return 0


def run_upload(args: argparse.Namespace, settings: Settings) -> int:
    """Store each file in the upload source (refusals reported per file), then sync the source in this process.
    Exit 2 when every file was refused (nothing is synced)."""
    from rag_pipeline.defs.ingest_runner import ingest
    from rag_pipeline.ingest.uploads import store_upload, upload_source

    upload_source(settings, args.source)
    documents, rejected = [], []
    for name in args.files:
        try:
            data = Path(name).read_bytes()
        except OSError as error:
            rejected.append({"filename": name, "error": {"code": "unreadable_file",
                                                         "message": f"{name}: {error.strerror or error}"}})
            continue
        try:
            documents.append(store_upload(settings, args.source, Path(name).name, data,
                                          uploaded_by=f"cli:{os.environ.get('USER', '?')}").to_json())
        except InputError as error:
            rejected.append({"filename": name, "error": {"code": error.code, "message": error.message}})
    for refusal in rejected:
        print(f"rag-pipeline: refused {refusal['filename']}: {refusal['error']['message']}", file=sys.stderr)
    if not documents:
        output = {"source": args.source, "documents": [], "rejected": rejected, "ingest": None}
        print(json.dumps(output) if args.json else "nothing stored: every file was refused")
        return 2
    summary = ingest(data_dir=settings.data_dir, source=args.source, progress=not args.json)
    if args.json:
        print(json.dumps({"source": args.source, "documents": documents, "rejected": rejected, "ingest": summary}))
    else:
        for document in documents:
            note = " (already stored)" if document["duplicate"] else ""
            print(f"{document['id']}  {document['doc_type']:5} {named_place(document['path'], document)}{note}")
        print_ingest_summary(summary, settings)
    return 0


def run_remove(args: argparse.Namespace, settings: Settings) -> int:
    """Delete the upload source's files of the document, then sync the source in this process (it purges them)."""
    from rag_pipeline.defs.ingest_runner import ingest
    from rag_pipeline.ingest.uploads import remove_document

    removed = remove_document(settings, args.source, args.id)
    summary = ingest(data_dir=settings.data_dir, source=args.source, progress=not args.json)
    if args.json:
        print(json.dumps({"id": args.id, "removed_paths": removed, "ingest": summary}))
    else:
        for path in removed:
            print(f"removed {path}")
        print_ingest_summary(summary, settings)
    return 0


def run_forget(args: argparse.Namespace, settings: Settings) -> int:
    """Forget a source's recorded files, then sync what the other sources hold (which purges the rest)."""
    from rag_pipeline.defs.ingest_runner import ingest

    summary = ingest(data_dir=settings.data_dir, forget=args.source, rediscover=False, progress=not args.json)
    if args.json:
        print(json.dumps(summary))
    else:
        print_ingest_summary(summary, settings)
    return 0


def run_sources(args: argparse.Namespace, settings: Settings) -> int:
    """Every source with its kind, roots and totals."""
    from rag_pipeline.ingest.uploads import sources_overview

    require_data_dir(settings)
    overview = sources_overview(settings, with_roots=True)
    if args.json:
        print(json.dumps({"sources": overview}))
        return 0
    print(f"{'source':20} {'kind':8} {'documents':>9} {'pending':>7} {'failed':>6} {'chunks':>7}  roots")
    for entry in overview:
        print(f"{entry['name']:20} {entry['kind'] or '?':8} {entry['documents']:>9} {entry['pending']:>7} "
              f"{entry['failed']:>6} {entry['chunks']:>7}  {', '.join(entry['roots'])}")
    return 0


def run_manifest(args: argparse.Namespace, settings: Settings) -> int:
    """The dry run: every file under the roots, included or not and why, before anything is converted."""
    from rag_pipeline.ingest.manifest import configured_report, format_report

    check_roots(args.roots)
    report = configured_report(settings, args.roots, save_cache=False)
    print(json.dumps(report) if args.json else format_report(report))
    return 0


def print_ingest_summary(summary: dict[str, Any], settings: Settings) -> None:
    from rag_pipeline.sidecar import Sidecar

    print(f"{'type':6} {'documents':>9} {'failed':>6} {'chunks':>7} {'redactions':>10}")
    for row in Sidecar(settings.sidecar_location).totals_by_type():
        print(f"{row['doc_type']:6} {row['documents']:>9} {row['failed']:>6} {row['chunks']:>7} "
              f"{row['redactions']:>10}")
    print(f"added {summary['added']}, unchanged {summary['unchanged']}, moved {summary['moved']}, "
          f"retagged {summary['retagged']}, purged {summary['purged']}, reindexed {summary['reindexed']}, "
          f"chunks written {summary['chunks']}, failed {len(summary['failed'])} in {summary['seconds']:.1f} s")
    generation = summary.get("generation") or {}
    if generation.get("switched"):
        print(f"index generation {generation['target']} is now active (was {generation.get('previous') or 'none'})")
    elif generation.get("target") and generation.get("active") != generation.get("target"):
        print(f"index generation {generation['target']} is being built ({len(generation.get('pending_shards', []))} "
              f"shards pending); queries use {generation.get('active') or 'nothing yet'}")
    for failure in summary["failed"]:
        print(f"  failed: {failure['path']}: {failure['error']}")
    for path in summary["purged_paths"]:
        print(f"  purged: {path}")
    if summary["purged"] > len(summary["purged_paths"]):
        print(f"  purged: ... and {summary['purged'] - len(summary['purged_paths'])} more")
