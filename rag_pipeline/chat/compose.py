"""The deterministic final step: exact sentences from metadata results (numbers stated as counted, documents
cited), then the extractive answer over the passages the searches gathered."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rag_pipeline.structured.query import QueryResult

LISTED = 10  # documents or values named in a sentence before "and N more"


def conditions(where: dict[str, Any] | None) -> str:
    """The where clauses in words: "genre = puzzle, year >= 2022"."""
    parts = []
    for name, value in (where or {}).items():
        if isinstance(value, dict):
            symbols = {"gte": ">=", "gt": ">", "lte": "<=", "lt": "<", "contains": "contains", "eq": "=", "in": "in"}
            parts += [f"{name} {symbols.get(op, op)} {bound}" for op, bound in value.items()]
        elif isinstance(value, list):
            parts.append(f"{name} in ({', '.join(map(str, value))})")
        else:
            parts.append(f"{name} = {value}")
    return ", ".join(parts)


def names(items: list[str]) -> str:
    shown = ", ".join(items[:LISTED])
    return shown + (f" and {len(items) - LISTED} more" if len(items) > LISTED else "")


def document_label(row: dict[str, Any]) -> str:
    """A document's title (as a list row, or in a lookup row's fields), else its file name."""
    title = row.get("title") or ((row.get("fields") or {}).get("title") or {}).get("value")
    return str(title or str(row.get("path", "")).rsplit("/", 1)[-1])


def describe(args: dict[str, Any], result: QueryResult, first_citation: int) -> str:
    """One or two sentences stating a metadata result exactly; documents are cited as [D1], [D2], ... numbered
    from `first_citation`."""
    where = conditions(args.get("where"))
    scope = f" matching {where}" if where else ""
    if not result.rows and result.op != "count":
        return f"No document{scope} has a value for that."
    cite = "".join(f"[D{first_citation + index}]" for index in range(min(len(result.documents), 3)))
    return SENTENCES[result.op](args, result, scope, cite)


def sentence(text: str) -> str:
    """A sentence whose citations may be empty: no space before its full stop."""
    return text.replace(" .", ".")


def counted(args: dict[str, Any], result: QueryResult, scope: str, cite: str) -> str:
    return sentence(f"{result.rows[0]['count']} documents{scope} {cite}.")


def listed(args: dict[str, Any], result: QueryResult, scope: str, cite: str) -> str:
    labels = [document_label(row) for row in result.rows]
    return sentence(f"{result.total_documents} documents{scope}: {names(labels)} {cite}.")


def distinct_values(args: dict[str, Any], result: QueryResult, scope: str, cite: str) -> str:
    values = [str(row["value"]) for row in result.rows]
    return sentence(f"The {args.get('field')} values{scope} are: {names(values)} {cite}.")


def groups(args: dict[str, Any], result: QueryResult, scope: str, cite: str) -> str:
    counts = [f"{row['value']}: {row['count']}" for row in result.rows]
    return sentence(f"Documents per {args.get('by') or args.get('field')}{scope}: {names(counts)} {cite}.")


def ranked(args: dict[str, Any], result: QueryResult, scope: str, cite: str) -> str:
    if not args.get("field"):  # top_n --by: the most common values
        return groups(args, result, scope, cite)
    largest = [f"{document_label(row)} ({row['value']})" for row in result.rows]
    return sentence(f"Largest {args.get('field')}{scope}: {names(largest)} {cite}.")


def looked_up(args: dict[str, Any], result: QueryResult, scope: str, cite: str) -> str:
    sentences = []
    for row in result.rows[:LISTED]:
        label = document_label(row)
        if "field" in row:
            value = row["value"]
            shown = ", ".join(map(str, value)) if isinstance(value, list) else value
            sentences.append(f"The {row['field']} of {label} is {shown if shown is not None else 'not recorded'}.")
        else:
            fields = ", ".join(f"{name}: {entry['value']}" for name, entry in sorted(row["fields"].items())
                               if name not in ("id", "path"))
            sentences.append(f"{label}: {fields}.")
    if not sentences:
        return f"No document{scope}."
    return " ".join(sentences) + (f" {cite}" if cite else "")


# The sentence of each operation of structured/operations.py (test_operations.py checks every one has one).
SENTENCES: dict[str, Callable[[dict[str, Any], QueryResult, str, str], str]] = {
    "count": counted, "list": listed, "distinct": distinct_values, "group_by": groups, "top_n": ranked,
    "lookup": looked_up,
}
