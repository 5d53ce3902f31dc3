"""The deterministic final step: exact sentences from metadata results (numbers stated as counted, documents
cited), then the extractive answer over the passages the searches gathered."""

from __future__ import annotations

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
    if result.op == "count":
        return f"{result.rows[0]['count']} documents{scope} {cite}.".replace(" .", ".")
    if result.op == "list":
        labels = [document_label(row) for row in result.rows]
        return f"{result.total_documents} documents{scope}: {names(labels)} {cite}.".replace(" .", ".")
    if result.op == "distinct":
        values = [str(row["value"]) for row in result.rows]
        return f"The {args.get('field')} values{scope} are: {names(values)} {cite}.".replace(" .", ".")
    if result.op == "group_by" or (result.op == "top_n" and not args.get("field")):
        groups = [f"{row['value']}: {row['count']}" for row in result.rows]
        label = args.get("by") or args.get("field")
        return f"Documents per {label}{scope}: {names(groups)} {cite}.".replace(" .", ".")
    if result.op == "top_n":
        ranked = [f"{document_label(row)} ({row['value']})" for row in result.rows]
        return f"Largest {args.get('field')}{scope}: {names(ranked)} {cite}.".replace(" .", ".")
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
