"""`rag-pipeline` command line: the parser, the entry point and the exit codes. Every command takes --data-dir and
--json (one JSON object on stdout); the commands themselves are in the modules beside this one."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import warnings
from importlib.metadata import version
from pathlib import Path

from rag_pipeline.errors import (
    ConfigError,
    Forbidden,
    IngestFailed,
    InputError,
    NotAuthenticated,
    RagError,
    Unavailable,
)
from rag_pipeline.index.generations import load_settings
from rag_pipeline.serve.cli.admin import run_keys_create, run_keys_list, run_keys_revoke, run_mcp, run_serve
from rag_pipeline.serve.cli.corpus import (
    run_forget,
    run_ingest,
    run_manifest,
    run_reindex,
    run_remove,
    run_sources,
    run_upload,
)
from rag_pipeline.serve.cli.quality import run_beir, run_eval, run_guard_eval
from rag_pipeline.serve.cli.questions import run_ask, run_chat, run_fields, run_inspect, run_query, run_search
from rag_pipeline.serve.cli.quick_exit import QuickExit
from rag_pipeline.structured.operations import NAMES as OPERATION_NAMES
from rag_pipeline.structured.operations import operation_help

DESCRIPTION = "`rag-pipeline` command line. Every command takes --data-dir and --json (one JSON object on stdout)."


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--data-dir", default=os.environ.get("RAG_DATA_DIR", ".rag_data"),
                        help="data directory (default: $RAG_DATA_DIR, else ./.rag_data)")
    common.add_argument("--json", action="store_true", help="print one JSON object on stdout; logs go to stderr")
    parser = argparse.ArgumentParser(prog="rag-pipeline", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"%(prog)s {version('rag_pipeline')}")
    commands = parser.add_subparsers(dest="command", required=True)
    ingest = commands.add_parser("ingest", parents=[common],
                                 help="discover, diff by SHA and materialise the affected shards through Dagster")
    ingest.add_argument("roots", nargs="*", help="folders of documents, added to the source's roots (none: the "
                                                 "source's configured roots; no --source either: every configured "
                                                 "source)")
    ingest.add_argument("--source", default=None, metavar="NAME",
                        help="the source to sync (default with roots: `default`); see RAG_SOURCES_FILE")
    ingest.add_argument("--replace", action="store_true",
                        help="sync the source to exactly these roots: documents only its other roots held are purged "
                             "(they are named in the output)")
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
        "query", parents=[common], help=f"exact answers over document fields: {', '.join(OPERATION_NAMES)} (no SQL: "
                                        "typed operations on allowlisted fields)")
    metadata.add_argument("op", nargs="?", choices=OPERATION_NAMES, metavar="OP", help=operation_help())
    metadata.add_argument("--field", default=None, help="the field of distinct, top_n (largest first), list and "
                                                        "lookup (only that field), sum, avg, min, max, count_distinct, "
                                                        "argmax and argmin")
    metadata.add_argument("--by", default=None, help="the field group_by counts per value (top_n --by: the most "
                                                     "common values)")
    metadata.add_argument("--return", dest="returns", default=None, metavar="F2",
                          help="argmax/argmin: the field returned of the best documents (default: their title)")
    metadata.add_argument("--where", action="append", default=[], metavar="F=V",
                          help="repeatable, ANDed: F=V (on a list field: contains V; text ignores case), F=V1|V2 (any "
                               "of), F>=V, F<=V, F>V, F<V (numbers and dates; a date may be YYYY or YYYY-MM), F~V "
                               "(contains), term=NAME (a term the sources file declares)")
    metadata.add_argument("--limit", type=int, default=None, help="rows (default 100, top_n 10; at most 1000)")
    metadata.add_argument("--json-body", default=None, metavar="JSON",
                          help="the whole query as the JSON body POST /query takes (instead of OP and the options "
                               "above; '-' reads it from stdin): set operations, semi-joins ({\"in\": QUERY}), "
                               "group_by's aggregate and having")
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
    beir.add_argument("--modes", default="dense,sparse,hybrid,hybrid-rrf,hybrid-dbsf,blend",
                      help="comma-separated: dense, sparse, hybrid (the configured RAG_FUSION), hybrid-rrf, "
                           "hybrid-dbsf, hybrid-adaptive, blend (hybrid-rerank is added when RAG_RERANK_MODEL_PATH "
                           "is set)")
    beir.add_argument("--depth", type=int, default=300, help="chunks retrieved per query")
    beir.set_defaults(run=run_beir)
    guard = commands.add_parser("guard-eval", parents=[common],
                                help="ingest the prompt-injection corpus into its own data dir and report attack "
                                     "success and false-positive rates per guardrail layer")
    guard.add_argument("--cases", default=str(Path(__file__).resolve().parents[3] / "golden" / "attacks" /
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
    serve.add_argument("--keyless-loopback", action="store_true",
                       help="without any API key, answer requests made on this machine (loopback, no proxy) "
                            "instead of refusing to start (RAG_API_KEYLESS_LOOPBACK); never behind a reverse proxy")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--allow-empty", action="store_true",
                       help="start even when the data dir does not exist or holds no index yet (it is created; an "
                            "index is served once an ingest, an upload or Dagster switches one on)")
    serve.set_defaults(run=run_serve)
    mcp = commands.add_parser("mcp", parents=[common],
                              help="serve the MCP tools (search, ask, query_metadata, list_fields, get_document) on "
                                   "stdio, for an agent or IDE that starts this command; the API serves them at /mcp")
    mcp.set_defaults(run=run_mcp)
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


# A deliberate error's exit code: 2 for bad input, configuration or credentials (fix the call), 1 for the rest. The
# most specific class of the error's MRO that is listed here wins.
EXIT_CODES: dict[type[RagError], int] = {RagError: 1, InputError: 2, ConfigError: 2, NotAuthenticated: 2, Forbidden: 2,
                                         Unavailable: 1, IngestFailed: 1}


def exit_code(error: RagError) -> int:
    return next(EXIT_CODES[kind] for kind in type(error).__mro__ if kind in EXIT_CODES)


def main(argv: list[str] | None = None) -> int:
    """Run the command in `argv`. Without `argv` (the `rag-pipeline` program itself: the command is sys.argv's), the
    process ends right after the command, without the interpreter's teardown (see quick_exit)."""
    args = build_parser().parse_args(argv)
    quick_exit = QuickExit() if argv is None else None
    code = run_command(args)
    if quick_exit is not None:
        quick_exit.code = code
    return code


def run_command(args: argparse.Namespace) -> int:
    """The parsed command's exit code; a RagError becomes its message on stderr (and JSON on stdout with --json)."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # no model-loading bars in the output
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    warnings.filterwarnings("ignore", message=".*is currently in beta")
    try:
        settings = load_settings(data_dir=args.data_dir)  # once: every command gets these
        return args.run(args, settings)
    except RagError as error:
        prefix = "ingest failed: " if isinstance(error, IngestFailed) else ""
        print(f"rag-pipeline: {prefix}{error}", file=sys.stderr)
        if args.json:  # one JSON object on stdout, even for an error
            print(json.dumps({"error": {"code": error.code, "message": str(error)}}))
        return exit_code(error)
