"""`rag-pipeline` command line. Every command takes --data-dir and --json (one JSON object on stdout)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rag_pipeline.errors import (
    ConfigError,
    Forbidden,
    IngestFailed,
    InputError,
    NotAuthenticated,
    RagError,
    Unavailable,
)
from rag_pipeline.settings import Settings

if TYPE_CHECKING:
    from rag_pipeline.retrieve.retriever import Retriever


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--data-dir", default=os.environ.get("RAG_DATA_DIR", ".rag_data"),
                        help="data directory (default: $RAG_DATA_DIR, else ./.rag_data)")
    common.add_argument("--json", action="store_true", help="print one JSON object on stdout; logs go to stderr")
    parser = argparse.ArgumentParser(prog="rag-pipeline", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    ingest = commands.add_parser("ingest", parents=[common],
                                 help="discover, diff by SHA and materialise the affected shards through Dagster")
    ingest.add_argument("roots", nargs="*", help="folders of documents: the source is synced to exactly these "
                                                 "(none: the source's configured roots; no --source either: every "
                                                 "configured source)")
    ingest.add_argument("--source", default=None, metavar="NAME",
                        help="the source to sync (default with roots: `default`); see RAG_SOURCES_FILE")
    ingest.set_defaults(run=run_ingest)
    reindex = commands.add_parser("reindex", parents=[common],
                                  help="build the index generation the settings describe (model, chunk and sparse "
                                       "settings) from what every source holds, then switch queries to it")
    reindex.set_defaults(run=run_reindex)

    upload = commands.add_parser("upload", parents=[common],
                                 help="store files in an upload source (type from the bytes, stored once per "
                                      "source), then sync that source")
    upload.add_argument("source", help="an upload source of RAG_SOURCES_FILE (`NAME: {uploads: true}`)")
    upload.add_argument("files", nargs="+", metavar="FILE")
    upload.set_defaults(run=run_upload)
    remove = commands.add_parser("remove", parents=[common],
                                 help="delete an upload source's stored files of a document, then sync the source "
                                      "(which purges it)")
    remove.add_argument("source")
    remove.add_argument("id", help="the document id: the SHA-256 of its bytes")
    remove.set_defaults(run=run_remove)
    forget = commands.add_parser("forget", parents=[common],
                                 help="drop a source that is no longer configured: its documents leave the index "
                                      "unless another source holds them")
    forget.add_argument("source")
    forget.set_defaults(run=run_forget)
    sources = commands.add_parser("sources", parents=[common],
                                  help="every source (configured or synced): kind, roots, documents, pending, "
                                       "failed, chunks")
    sources.set_defaults(run=run_sources)

    manifest = commands.add_parser("manifest", parents=[common],
                                   help="dry run: every file under the roots with included/refused/excluded and why, "
                                        "plus coverage, before anything is converted")
    manifest.add_argument("roots", nargs="+", help="folders of documents")
    manifest.set_defaults(run=run_manifest)

    metadata = commands.add_parser(
        "query", parents=[common], help="exact answers over document fields: count, list, distinct, group_by, top_n, "
                                        "lookup (no SQL: typed operations on allowlisted fields)")
    metadata.add_argument("op", choices=("count", "list", "distinct", "group_by", "top_n", "lookup"))
    metadata.add_argument("--field", default=None, help="the field of distinct, top_n (largest first), list and "
                                                        "lookup (only that field)")
    metadata.add_argument("--by", default=None, help="the field group_by counts per value (top_n --by: the most "
                                                     "common values)")
    metadata.add_argument("--where", action="append", default=[], metavar="F=V",
                          help="repeatable, ANDed: F=V (on a list field: contains V), F=V1|V2 (any of), F>=V, F<=V, "
                               "F>V, F<V (numbers and dates; a date may be YYYY or YYYY-MM), F~V (contains)")
    metadata.add_argument("--limit", type=int, default=None, help="rows (default 100, top_n 10; at most 1000)")
    metadata.set_defaults(run=run_query)
    chat = commands.add_parser("chat", parents=[common],
                               help="a conversation: the agent routes each question between semantic search and the "
                                    "metadata query tool (an interactive session without a message)")
    chat.add_argument("message", nargs="?", help="one message (omit for an interactive session with history)")
    chat.add_argument("--session", default=None, help="continue this session (its id is printed with each answer)")
    chat.set_defaults(run=run_chat)
    fields = commands.add_parser("fields", parents=[common],
                                 help="the fields the query tool knows: type, documents, origins, filterable")
    fields.set_defaults(run=run_fields)

    query = argparse.ArgumentParser(add_help=False)
    query.add_argument("--top-k", type=int, default=None, help="number of passages (default: $RAG_TOP_K, else 5)")
    query.add_argument("--filter", action="append", default=[], metavar="KEY=VALUE",
                       help="payload filter, repeatable: path, paths, sha, shard, doc_type, heading_path, "
                            "tags, source, path_prefix, or a document field declared filterable (a key given twice "
                            "matches any of its values)")
    search = commands.add_parser("search", parents=[common, query], help="hybrid search of the index")
    search.add_argument("query")
    search.set_defaults(run=run_search)
    ask = commands.add_parser("ask", parents=[common, query], help="answer a question with cited sources")
    ask.add_argument("question")
    ask.set_defaults(run=run_ask)
    evaluate = commands.add_parser("eval", parents=[common], help="retrieval and answer metrics on a golden set")
    evaluate.add_argument("--golden", default=None, help="golden YAML (default: $RAG_EVAL_GOLDEN_PATH, else "
                                                         "golden/sample_golden.yaml)")
    evaluate.add_argument("--top-k", type=int, default=10)
    evaluate.add_argument("--granularity", choices=("file", "chunk"), default="file")
    evaluate.add_argument("--no-answers", action="store_true", help="retrieval metrics only")
    evaluate.add_argument("--chat", action="store_true",
                          help="also /chat next to /ask: routing and answer accuracy per question kind")
    evaluate.add_argument("--paraphrases", default=None,
                          help="with --chat: other phrasings of the golden questions (YAML: id -> [text, ...])")
    evaluate.add_argument("--conversations", default=None,
                          help="with --chat: multi-turn and compound conversations (YAML, see "
                               "golden/catalog_conversations.yaml)")
    evaluate.add_argument("--gate", action="store_true",
                          help="exit 1 unless Recall@5 and NDCG@10 pass the quality gate (the floors RAG_EVAL_MIN_*, "
                               "and at most RAG_EVAL_MAX_DROP below the latest recorded evaluation of the set)")
    evaluate.set_defaults(run=run_eval)
    beir = commands.add_parser("beir", parents=[common],
                               help="ingest a BEIR dataset into its own data dir and score every retrieval mode")
    beir.add_argument("dataset_dir")
    beir.add_argument("--split", default="test")
    beir.add_argument("--modes", default="dense,sparse,hybrid,hybrid-dbsf,blend",
                      help="comma-separated: dense, sparse, hybrid, hybrid-dbsf, blend (hybrid-rerank is added when "
                           "RAG_RERANK_MODEL_PATH is set)")
    beir.add_argument("--depth", type=int, default=300, help="chunks retrieved per query")
    beir.set_defaults(run=run_beir)
    guard = commands.add_parser("guard-eval", parents=[common],
                                help="ingest the prompt-injection corpus into its own data dir and report attack "
                                     "success and false-positive rates per guardrail layer")
    guard.add_argument("--cases", default=str(Path(__file__).resolve().parents[2] / "golden" / "attacks" /
                                              "cases.yaml"), help="cases.yaml of the attack corpus")
    guard.add_argument("--top-k", type=int, default=5)
    guard.set_defaults(run=run_guard_eval)
    inspect = commands.add_parser("inspect",
                                  help="documents, chunks, failures, redactions and the collection, from the sidecar "
                                       "and the store")
    from rag_pipeline.serve.inspect import add_arguments

    add_arguments(inspect, common)
    inspect.set_defaults(run=run_inspect)
    serve = commands.add_parser("serve", parents=[common], help="run the HTTP API")
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on; other than loopback only once an API key exists")
    serve.add_argument("--port", type=int, default=8000)
    serve.set_defaults(run=run_serve)
    add_keys_commands(commands.add_parser("keys", help="API keys of the HTTP API (hashed in <data dir>/api_keys.yaml "
                                                       "or $RAG_API_KEYS_FILE)"), common)
    return parser


def add_keys_commands(keys: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    from rag_pipeline.serve.keys import ROLES

    actions = keys.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", parents=[common], help="create a key and print its token (shown once)")
    create.add_argument("name", help="letters, digits, '.', '_' or '-' (at most 64)")
    create.add_argument("--role", choices=ROLES, default="reader",
                        help="reader: search and ask; ingester: also ingest; admin: everything (default: reader)")
    create.add_argument("--tag", dest="tags", action="extend", nargs="+", default=[], metavar="TAG",
                        help="the key sees only chunks with one of these tags")
    create.add_argument("--source", dest="sources", action="extend", nargs="+", default=[], metavar="NAME",
                        help="the key sees only chunks of these sources (payload `sources`)")
    create.set_defaults(run=run_keys_create)
    listing = actions.add_parser("list", parents=[common], help="the keys (names, roles, scopes; never tokens)")
    listing.set_defaults(run=run_keys_list)
    revoke = actions.add_parser("revoke", parents=[common], help="delete a key: its token stops working at once")
    revoke.add_argument("name")
    revoke.set_defaults(run=run_keys_revoke)


def parse_filters(items: list[str]) -> dict[str, str | list[str]] | None:
    """KEY=VALUE arguments as a filters mapping; a key given twice becomes a list (any of the values)."""
    filters: dict[str, list[str]] = {}
    for item in items:
        key, separator, value = item.partition("=")
        if not separator or not key or not value:
            raise InputError(f"--filter takes KEY=VALUE, got {item!r}")
        filters.setdefault(key.strip(), []).append(value)
    return {key: values[0] if len(values) == 1 else values for key, values in filters.items()} or None


def check_roots(roots: list[str]) -> None:
    missing = [root for root in roots if not Path(root).is_dir()]
    if missing:
        raise InputError(f"not a directory: {', '.join(missing)}")


def run_ingest(args: argparse.Namespace, settings: Settings) -> int:
    """Discover, diff by SHA and materialise the changed shards through Dagster in this process."""
    from rag_pipeline.defs.ingest_runner import ingest

    check_roots(args.roots)
    summary = ingest(args.roots, settings.data_dir, source=args.source, progress=True)
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
            print(f"{document['id']}  {document['doc_type']:5} {document['path']}{note}")
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


@contextmanager
def opened_retriever(args: argparse.Namespace, settings: Settings) -> Iterator[tuple[Retriever, int]]:
    """(the configured retriever, top_k) for `search` and `ask`; the retriever is closed on exit."""
    from rag_pipeline.components import open_retriever

    retriever = open_retriever(settings)
    try:
        yield retriever, args.top_k if args.top_k is not None else settings.top_k
    finally:
        retriever.close()


def run_search(args: argparse.Namespace, settings: Settings) -> int:
    filters = parse_filters(args.filter)
    with opened_retriever(args, settings) as (retriever, top_k):
        output = retriever.search(args.query, top_k=top_k, filters=filters).to_json()
    if args.json:
        print(json.dumps(output))
    else:
        print_search(output)
    return 0


def run_ask(args: argparse.Namespace, settings: Settings) -> int:
    """Stream the answer's text (readable) or print the final answer object (--json)."""
    from rag_pipeline.components import answerer
    from rag_pipeline.generate.result import Answer

    filters = parse_filters(args.filter)
    with opened_retriever(args, settings) as (retriever, top_k):
        for item in answerer(settings, retriever).stream(args.question, top_k=top_k, filters=filters):
            if isinstance(item, Answer):
                if args.json:
                    print(json.dumps(item.to_json()))
                else:
                    print_sources(item)
            elif not args.json:
                print(item, end="", flush=True)
    return 0


def run_eval(args: argparse.Namespace, settings: Settings) -> int:
    """Metrics of a golden set on the current index; with --gate, exit 1 when the quality gate fails."""
    from rag_pipeline.evaluate.gate import previous_metrics, quality_gate
    from rag_pipeline.evaluate.index_eval import evaluate_index, format_report, headline

    report = evaluate_index(settings, args.golden, top_k=args.top_k, granularity=args.granularity,
                            with_answers=not args.no_answers)
    if args.chat:
        from rag_pipeline.evaluate.index_eval import evaluate_chat_on_index

        report["chat"] = evaluate_chat_on_index(settings, report["golden_path"], args.paraphrases, args.conversations)
    gate = quality_gate(headline(report), previous_metrics(settings, report["golden"]), settings) if args.gate else None
    if gate is not None:
        report["gate"] = {"passed": gate.passed, "details": gate.details}
    print(json.dumps(report) if args.json else format_report(report))
    if gate is not None and not args.json:
        print(f"\nquality gate: {'passed' if gate.passed else 'FAILED'}: {gate.details}")
    return 1 if gate is not None and not gate.passed else 0


def run_beir(args: argparse.Namespace, settings: Settings) -> int:
    """Write the corpus as files under <data dir>/beir/<name>/corpus, ingest it into <data dir>/beir/<name>/data
    (its own collection and sidecar), then score each retrieval mode on the split's queries."""
    from rag_pipeline.components import load_settings, open_retriever
    from rag_pipeline.defs.ingest_runner import ingest
    from rag_pipeline.evaluate.beir import evaluate_modes, format_table, load_beir, write_corpus

    try:
        dataset = load_beir(args.dataset_dir, args.split)
    except OSError as error:
        raise InputError(str(error)) from error
    work = settings.data_dir / "beir" / dataset.name
    documents = write_corpus(dataset, work / "corpus")
    summary = ingest([work / "corpus"], work / "data", progress=not args.json)
    settings = load_settings(data_dir=work / "data", semantic_cache=False)  # the dataset's own deployment
    variants = {"dense": {"retrieval_mode": "dense"}, "sparse": {"retrieval_mode": "sparse"},
                "hybrid": {"retrieval_mode": "hybrid", "fusion": "rrf"},
                "hybrid-dbsf": {"retrieval_mode": "hybrid", "fusion": "dbsf", "fusion_weights": None},
                "blend": {"retrieval_mode": "blend"}}
    modes = [mode.strip() for mode in args.modes.split(",") if mode.strip()]
    unknown = [mode for mode in modes if mode not in variants]
    if unknown:
        raise InputError(f"unknown mode(s) {', '.join(unknown)}; allowed: {', '.join(variants)}")
    if settings.rerank_model_path:
        variants["hybrid-rerank"] = {"retrieval_mode": "hybrid"}
        modes.append("hybrid-rerank")

    def open_mode(mode: str):
        overrides = {**variants[mode], "rerank_model_path": settings.rerank_model_path if mode.endswith("rerank")
                     else None}
        return open_retriever(settings.model_copy(update=overrides), semantic_cache=False)

    report = evaluate_modes(dataset, open_mode, modes, depth=args.depth,
                            progress=None if args.json else lambda mode: print(f"scoring {mode}", file=sys.stderr))
    report["ingest"] = {"documents": documents, "seconds": summary["seconds"], "added": summary["added"],
                        "chunks": summary["chunks"], "failed": len(summary["failed"])}
    print(json.dumps(report) if args.json else format_table(report))
    return 0


def run_guard_eval(args: argparse.Namespace, settings: Settings) -> int:
    """Ingest the attack corpus into <data dir>/guard_eval (its own collection and sidecar), run the ablation."""
    from rag_pipeline.components import answerer, load_settings, open_retriever
    from rag_pipeline.defs.ingest_runner import ingest
    from rag_pipeline.evaluate.guardrail_ablation import evaluate, format_table, load_cases

    cases_path = Path(args.cases)
    try:
        cases = load_cases(cases_path)
    except OSError as error:
        raise InputError(f"{cases_path}: {error.strerror or error}") from error
    data_dir = settings.data_dir / "guard_eval"
    summary = ingest([cases_path.parent / "docs"], data_dir, progress=not args.json)
    if summary["failed"]:
        print(f"rag-pipeline: {len(summary['failed'])} attack documents failed to ingest: {summary['failed']}",
              file=sys.stderr)
    settings = load_settings(data_dir=data_dir, semantic_cache=False)  # the attack corpus's own deployment
    retriever = open_retriever(settings, semantic_cache=False)
    try:
        report = evaluate(answerer(settings, retriever), cases, top_k=args.top_k,
                          progress=None if args.json else lambda name: print(f"running: {name}", file=sys.stderr))
    finally:
        retriever.close()
    print(json.dumps(report) if args.json else format_table(report))
    return 0


def print_search(output: dict[str, Any]) -> None:
    for warning in output["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    for rank, result in enumerate(output["results"], start=1):
        where = f"{result['path']}:{result['line_start']}" + (f" (page {result['page']})" if result["page"] else "")
        print(f"{rank:>2}. {result['score']:.4f}  {where}  {result['header']}")
        for other in result["paths"][1:]:
            print(f"    also at {other}")
        print(f"    {' '.join(result['text'].split())[:200]}")
    timings = ", ".join(f"{stage} {value:.1f}" for stage, value in output["timings_ms"].items() if value)
    print(f"({len(output['results'])} results, {output['mode']}; ms: {timings})")


def print_sources(answer: Any) -> None:
    print()
    for warning in answer.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for source in answer.sources:
        page = f", page {source.page}" if source.page else ""
        print(f"[{source.number}] {source.path}:{source.line_start}{page}  {source.heading}")
        for other in source.paths[1:]:
            print(f"    also at {other}")


def print_ingest_summary(summary: dict[str, Any], settings: Settings) -> None:
    from rag_pipeline.sidecar import Sidecar

    print(f"{'type':6} {'documents':>9} {'failed':>6} {'chunks':>7} {'redactions':>10}")
    for row in Sidecar(settings.sidecar_path).totals_by_type():
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


def run_query(args: argparse.Namespace, settings: Settings) -> int:
    """One typed metadata query; a table of its rows (or the result JSON)."""
    from rag_pipeline.sidecar import Sidecar
    from rag_pipeline.structured.query import QueryRunner

    body = {"op": args.op, "field": args.field, "by": args.by, "where": args.where, "limit": args.limit}
    result = QueryRunner(settings, Sidecar(settings.sidecar_path)).run_json(body)
    if args.json:
        print(json.dumps(result.to_json(), default=str))
        return 0
    from rag_pipeline.serve.inspect import format_rows

    rows = [{key: ", ".join(map(str, value)) if isinstance(value, list) else
             json.dumps(value, default=str) if isinstance(value, dict) else value
             for key, value in row.items() if key != "id"} for row in result.rows]
    more = " (truncated: raise --limit)" if result.truncated else ""
    print(format_rows(rows, f"{args.op} over {result.total_documents} document(s){more}"))
    return 0


def run_chat(args: argparse.Namespace, settings: Settings) -> int:
    """One turn (or a REPL with readline editing and history), through the same service as POST /chat."""
    from rag_pipeline import components
    from rag_pipeline.chat.turn import ChatService
    from rag_pipeline.llm import build_llm
    from rag_pipeline.sidecar import Sidecar

    retriever = components.open_retriever(settings)
    try:
        service = ChatService(settings, components.answerer(settings, retriever), Sidecar(settings.sidecar_path),
                              build_llm(settings))
        session = args.session
        if args.message is not None:
            result = print_turn(service, args.message, session, args.json)
            return 0 if result else 1
        import readline  # noqa: F401 - line editing and history for input()

        print("rag-pipeline chat: ask a question; an empty line or Ctrl-D ends the session", file=sys.stderr)
        while True:
            try:
                message = input("you> ").strip()
            except (EOFError, KeyboardInterrupt):
                print(file=sys.stderr)
                return 0
            if not message:
                return 0
            try:
                result = print_turn(service, message, session, args.json)
            except RagError as error:
                print(f"rag-pipeline: {error}", file=sys.stderr)
                continue
            session = result["session_id"]
    finally:
        retriever.close()


def print_turn(service, message: str, session: str | None, as_json: bool) -> dict:
    """Run one turn: stream its steps and answer to the terminal (or print the done object as JSON)."""
    from rag_pipeline.chat.memory import LOCAL_OWNER

    done: dict = {}
    for event, data in service.stream(message, LOCAL_OWNER, session):
        if as_json:
            if event == "done":
                done = data
                print(json.dumps(data, default=str))
            continue
        if event == "step":
            print(f"  -> {data['tool']} {json.dumps(data['args'], default=str)}", file=sys.stderr)
        elif event == "observation":
            print(f"  <- {data['summary']}", file=sys.stderr)
        elif event == "token":
            print(data["text"], end="", flush=True)
        elif event == "done":
            done = data
            print()
            for citation in data["citations"]:
                label = citation.get("label") or f"[{citation.get('number')}]"
                print(f"  {label} {citation['path']}")
            print(f"  (session {data['session_id']}, {data['exit_reason']}, {len(data['trajectory'])} tool call(s))",
                  file=sys.stderr)
    return done


def run_fields(args: argparse.Namespace, settings: Settings) -> int:
    from rag_pipeline.serve.inspect import format_rows
    from rag_pipeline.sidecar import Sidecar
    from rag_pipeline.structured.query import load_registry

    registry = [field.to_json() for field in load_registry(settings, Sidecar(settings.sidecar_path)).values()]
    if args.json:
        print(json.dumps({"fields": registry}))
        return 0
    rows = [{"field": f["name"], "type": f["type"], "documents": f["documents"] if not f["builtin"] else "all",
             "origins": ", ".join(f["origins"]), "filterable": "yes" if f["filterable"] else "",
             "enriched_by": f["enriched_by"] or ""} for f in registry]
    print(format_rows(rows, f"{len(rows)} fields"))
    return 0


def run_inspect(args: argparse.Namespace, settings: Settings) -> int:
    from rag_pipeline.serve.inspect import format_rows, inspect

    rows, title = inspect(settings, args)
    print(json.dumps(rows, default=str) if args.json else format_rows(rows, title))
    return 0


def run_serve(args: argparse.Namespace, settings: Settings) -> int:
    from rag_pipeline.serve.app import serve
    from rag_pipeline.serve.keys import Keyring, check_bind
    from rag_pipeline.serve.middleware.access_log import access_log

    check_bind(args.host, Keyring(settings))
    access_log.setLevel(logging.INFO)
    serve(settings, host=args.host, port=args.port)
    return 0


def run_keys_create(args: argparse.Namespace, settings: Settings) -> int:
    from rag_pipeline.serve.keys import create_key

    key, token = create_key(settings.api_keys_path, args.name, args.role, tuple(args.tags), tuple(args.sources))
    if args.json:
        print(json.dumps({"name": key.name, "token": token, "role": key.role, "tags": list(key.tags),
                          "sources": list(key.sources)}))
    else:
        print(f"created API key {key.name!r} (role {key.role}{scope_text(key.to_json())}); its token, shown only "
              "now:", file=sys.stderr)
        print(token)
    return 0


def run_keys_list(args: argparse.Namespace, settings: Settings) -> int:
    from rag_pipeline.serve.keys import read_keys

    keys = [key.to_json() for key in read_keys(settings.api_keys_path)]
    if args.json:
        print(json.dumps({"keys": keys}))
    for key in [] if args.json else keys:
        print(f"{key['name']:24} {key['role']:8} {key['created_at']}{scope_text(key)}")
    return 0


def scope_text(key: dict[str, Any]) -> str:
    return "".join(f", {field}: {', '.join(key[field])}" for field in ("tags", "sources") if key[field])


def run_keys_revoke(args: argparse.Namespace, settings: Settings) -> int:
    from rag_pipeline.serve.keys import revoke_key

    revoke_key(settings.api_keys_path, args.name)
    print(json.dumps({"revoked": args.name}) if args.json else f"revoked API key {args.name!r}")
    return 0


# A deliberate error's exit code: 2 for bad input, configuration or credentials (fix the call), 1 for the rest. The
# most specific class of the error's MRO that is listed here wins.
EXIT_CODES: dict[type[RagError], int] = {RagError: 1, InputError: 2, ConfigError: 2, NotAuthenticated: 2, Forbidden: 2,
                                         Unavailable: 1, IngestFailed: 1}


def exit_code(error: RagError) -> int:
    return next(EXIT_CODES[kind] for kind in type(error).__mro__ if kind in EXIT_CODES)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no model-loading bars in the output
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    warnings.filterwarnings("ignore", message=".*is currently in beta")
    try:
        from rag_pipeline.components import load_settings

        settings = load_settings(data_dir=args.data_dir)  # once: every command gets these
        return args.run(args, settings)
    except RagError as error:
        prefix = "ingest failed: " if isinstance(error, IngestFailed) else ""
        print(f"rag-pipeline: {prefix}{error}", file=sys.stderr)
        if args.json:  # one JSON object on stdout, even for an error
            print(json.dumps({"error": {"code": error.code, "message": str(error)}}))
        return exit_code(error)
