"""`rag-pipeline search`, `ask`, `query`, `chat`, `fields` and `inspect`: asking the index and reading the sidecar.
Answers name uploads as their clients named them (`upload_name`, serve/upload_names.py), as the API does."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from rag_pipeline.chat.citation_text import named_place
from rag_pipeline.errors import InputError, RagError
from rag_pipeline.serve.cli.data_dir import require_data_dir, require_index
from rag_pipeline.settings import Settings

if TYPE_CHECKING:
    from rag_pipeline.retrieve.retriever import Retriever


def parse_filters(items: list[str]) -> dict[str, str | list[str]] | None:
    """KEY=VALUE arguments as a filters mapping; a key given twice becomes a list (any of the values)."""
    filters: dict[str, list[str]] = {}
    for item in items:
        key, separator, value = item.partition("=")
        if not separator or not key or not value:
            raise InputError(f"--filter takes KEY=VALUE, got {item!r}")
        filters.setdefault(key.strip(), []).append(value)
    return {key: values[0] if len(values) == 1 else values for key, values in filters.items()} or None


@contextmanager
def opened_retriever(args: argparse.Namespace, settings: Settings) -> Iterator[tuple[Retriever, int]]:
    """(the configured retriever, top_k) for `search` and `ask`; the retriever is closed on exit."""
    from rag_pipeline.components import open_retriever

    require_index(settings)
    retriever = open_retriever(settings)
    try:
        yield retriever, args.top_k if args.top_k is not None else settings.top_k
    finally:
        retriever.close()


def with_names(data: Any, settings: Settings) -> Any:
    """An answer (JSON data) with the uploads it cites named (serve/upload_names.py)."""
    from rag_pipeline.serve.upload_names import with_upload_names
    from rag_pipeline.sidecar import Sidecar

    return with_upload_names(data, Sidecar(settings.sidecar_path).upload_names())


def run_search(args: argparse.Namespace, settings: Settings) -> int:
    filters = parse_filters(args.filter)
    with opened_retriever(args, settings) as (retriever, top_k):
        output = with_names(retriever.search(args.query, top_k=top_k, filters=filters).to_json(), settings)
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
                shown = with_names(item.to_json(), settings)
                if args.json:
                    print(json.dumps(shown))
                else:
                    print_sources(shown)
            elif not args.json:
                print(item, end="", flush=True)
    return 0


def print_search(output: dict[str, Any]) -> None:
    for warning in output["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    for rank, result in enumerate(output["results"], start=1):
        where = named_place(cited_place(result["path"], result["line_start"], result["page"]), result)
        print(f"{rank:>2}. {result['score']:.4f}  {where}  {result['header']}")
        for other in result["paths"][1:]:
            print(f"    also at {other}")
        print(f"    {' '.join(result['text'].split())[:200]}")
    timings = ", ".join(f"{stage} {value:.1f}" for stage, value in output["timings_ms"].items() if value)
    print(f"({len(output['results'])} results, {output['mode']}; ms: {timings})")


def cited_place(path: str, line: int | None, page: int | None) -> str:
    """PATH:LINE (page N): the line in the original file when it has one (a converted format: pages only)."""
    return path + (f":{line}" if line else "") + (f" (page {page})" if page else "")


def print_sources(answer: dict[str, Any]) -> None:
    """The answer's sources (its JSON form) after its streamed text."""
    print()
    for warning in answer["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)
    for source in answer["sources"]:
        page = f", page {source['page']}" if source["page"] else ""
        line = f":{source['line_start']}" if source["line_start"] else ""
        print(f"[{source['number']}] {named_place(source['path'] + line, source)}{page}  {source['heading']}")
        for other in source["paths"][1:]:
            print(f"    also at {other}")


def query_body(args: argparse.Namespace) -> dict[str, Any]:
    """The query's JSON form: from --json-body, or from OP and its options."""
    options = {"field": args.field, "by": args.by, "return": args.returns, "where": args.where or None,
               "limit": args.limit}
    if args.json_body is None:
        if args.op is None:
            raise InputError("give an operation (rag-pipeline query OP ...) or the query as --json-body '{...}'",
                             code="invalid_op")
        return {"op": args.op, **options}
    given = [args.op] if args.op else []
    given += [f"--{name}" for name, value in options.items() if value is not None]
    if given:
        raise InputError(f"--json-body holds the whole query: drop {', '.join(given)}", code="invalid_body")
    text = sys.stdin.read() if args.json_body == "-" else args.json_body
    try:
        body = json.loads(text)
    except json.JSONDecodeError as error:
        raise InputError(f"--json-body is not valid JSON: {error}", code="invalid_json") from error
    if not isinstance(body, dict):
        raise InputError('--json-body must be a JSON object {"op": ...}', code="invalid_body")
    return body


def run_query(args: argparse.Namespace, settings: Settings) -> int:
    """One typed metadata query; the operation it performed and a table of its rows (or the result JSON)."""
    from rag_pipeline.sidecar import Sidecar
    from rag_pipeline.structured.query import QueryRunner

    require_index(settings)
    result = QueryRunner(settings, Sidecar(settings.sidecar_location)).run_json(query_body(args))
    if result.withheld:
        from rag_pipeline.structured.withheld import withheld_warning

        print(withheld_warning(len(result.withheld)), file=sys.stderr)
    if args.json:
        print(json.dumps(with_names(result.to_json(), settings), default=str))
        return 0
    from rag_pipeline.serve.inspect import format_rows

    rows = [{key: ", ".join(map(str, value)) if isinstance(value, list) else
             json.dumps(value, default=str) if isinstance(value, dict) else value
             for key, value in row.items() if key != "id"} for row in result.rows]
    more = " (truncated: raise --limit)" if result.truncated else ""
    print(format_rows(rows, f"{result.operation}{more}"))
    return 0


def run_chat(args: argparse.Namespace, settings: Settings) -> int:
    """One turn (or a REPL with readline editing and history), through the same service as POST /chat."""
    from rag_pipeline import components
    from rag_pipeline.chat.memory import ChatMemory
    from rag_pipeline.chat.turn import ChatService
    from rag_pipeline.llm import build_llm
    from rag_pipeline.sidecar import ChatStore, Sidecar

    require_index(settings)
    retriever = components.open_retriever(settings)
    try:
        service = ChatService(settings, components.answerer(settings, retriever),
                              Sidecar(settings.sidecar_location),
                              ChatMemory(ChatStore.beside(settings.sidecar_location), settings.chat_retention_days),
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
        if event == "done":
            data = with_names(data, service.settings)
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
                print(f"  {label} {named_place(citation['path'], citation)}")
            print(f"  (session {data['session_id']}, {data['exit_reason']}, {len(data['trajectory'])} tool call(s))",
                  file=sys.stderr)
    if done:
        print_withheld(done)
    return done


def print_withheld(done: dict) -> None:
    """The warning of a turn whose exact answers withheld flagged values."""
    from rag_pipeline.structured.withheld import withheld_warning

    withheld = [item for item in done["guardrails"].get("observation_findings", []) if item.get("withheld")]
    if withheld:
        print(withheld_warning(len(withheld)), file=sys.stderr)


def run_fields(args: argparse.Namespace, settings: Settings) -> int:
    from rag_pipeline.serve.inspect import format_rows
    from rag_pipeline.sidecar import Sidecar
    from rag_pipeline.structured.query import load_registry

    require_index(settings)
    registry = [field.to_json() for field in load_registry(settings, Sidecar(settings.sidecar_location)).values()]
    if args.json:
        print(json.dumps({"fields": registry}))
        return 0
    rows = [{"field": f["name"], "type": f["type"], "documents": f["documents"] if not f["builtin"] else "all",
             "origins": ", ".join(f["origins"]), "filterable": "yes" if f["filterable"] else "",
             "enriched_by": f["enriched_by"] or ""} for f in registry]
    print(format_rows(rows, f"{len(rows)} fields"))
    return 0


def run_inspect(args: argparse.Namespace, settings: Settings) -> int:
    from rag_pipeline.serve.inspect import cell_text, format_rows, inspect
    from rag_pipeline.structured.withheld import WITHHELD, withheld_warning

    require_data_dir(settings)
    rows, title = inspect(settings, args)
    withheld = sum(WITHHELD in cell_text(row["value"]) for row in rows) if args.view == "fields" else 0
    if withheld:
        print(withheld_warning(withheld), file=sys.stderr)
    print(json.dumps(rows, default=str) if args.json else format_rows(rows, title))
    return 0
