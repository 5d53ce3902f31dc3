"""The deterministic final step: exact sentences from metadata results (numbers stated as counted, with the unit a
field's name carries; every value and document of a set, up to the result's row limit; documents cited; the newer
operations open with the operation they performed), then the extractive answer over the passages the searches
gathered."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rag_pipeline.structured.query import QueryResult

# Units a field's name may end with (`length_km`, `area_sq_miles`, `price_usd`): a number of that field is stated
# with its unit. Single letters that are often not units (c, f, t) are left out.
UNITS = {"km": "km", "m": "m", "cm": "cm", "mm": "mm", "mi": "mi", "miles": "miles", "km2": "km²", "m2": "m²",
         "sq_km": "km²", "sq_mi": "sq mi", "sq_miles": "sq mi", "kg": "kg", "g": "g", "lb": "lb", "lbs": "lb",
         "usd": "USD", "eur": "EUR", "gbp": "GBP", "pct": "%", "percent": "%", "ms": "ms", "s": "s", "seconds": "s",
         "minutes": "min", "hours": "hours", "days": "days", "years": "years", "kb": "KB", "mb": "MB", "gb": "GB",
         "tb": "TB", "kwh": "kWh"}


def conditions(where: dict[str, Any] | list[str] | None) -> str:
    """The where clauses in words: "genre = puzzle, year >= 2022" (a semi-join's query in brackets)."""
    if isinstance(where, list):  # the CLI form: "F=V" strings
        return ", ".join(where)
    parts = []
    for name, value in (where or {}).items():
        if isinstance(value, dict):
            symbols = {"gte": ">=", "gt": ">", "lte": "<=", "lt": "<", "contains": "contains", "eq": "=", "in": "in"}
            for op, bound in value.items():
                if op == "empty":
                    parts.append(f"{name} is {'empty' if bound else 'not empty'}")
                else:
                    shown = query_words(bound) if isinstance(bound, dict) else bound
                    parts.append(f"{name} {symbols.get(op, op)} {shown}")
        elif isinstance(value, list):
            parts.append(f"{name} in ({', '.join(map(str, value))})")
        else:
            parts.append(f"{name} = {value}")
    return ", ".join(parts)


def query_words(body: dict[str, Any]) -> str:
    """A nested query in brackets: "(distinct name where kind = state)"."""
    named = " ".join(str(body[key]) for key in ("op", "field", "by") if body.get(key))
    where = conditions(body.get("where"))
    return f"({named}{' where ' + where if where else ''})"


def every(items: list[str], truncated: bool = False) -> str:
    """Every item, and a note when the result's limit cut the list."""
    return ", ".join(items) + (" (the first ones only: the limit cut the rest)" if truncated else "")


def unit_of(field: str | None) -> str | None:
    """The unit a field's name ends with (`length_km` -> km, `area_sq_miles` -> sq mi), if any."""
    parts = str(field or "").lower().split("_")
    if len(parts) < 2:
        return None
    two = "_".join(parts[-2:])
    return UNITS[two] if len(parts) > 2 and two in UNITS else UNITS.get(parts[-1])


def number(value: Any, field: str | None = None) -> str:
    """A number as a sentence states it: integers in full, others to two decimals (three significant digits below
    one), with the field's unit; anything else as it is."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, float) and not value.is_integer():
        shown = f"{value:.2f}".rstrip("0").rstrip(".") if abs(value) >= 1 else f"{value:.3g}"
    else:
        shown = str(int(value))
    unit = unit_of(field)
    return shown if unit is None else f"{shown}%" if unit == "%" else f"{shown} {unit}"


def document_label(row: dict[str, Any]) -> str:
    """A document's title (as a list row, or in a lookup row's fields), else its file name."""
    title = row.get("title") or ((row.get("fields") or {}).get("title") or {}).get("value")
    return str(title or str(row.get("path", "")).rsplit("/", 1)[-1])


def describe(args: dict[str, Any], result: QueryResult, first_citation: int) -> str:
    """One or two sentences stating a metadata result exactly; documents are cited as [D1], [D2], ... numbered
    from `first_citation`."""
    where = conditions(args.get("where"))
    scope = f" matching {where}" if where else ""
    if not result.rows and (result.op in ("list", "distinct", "top_n", "lookup") or (
            result.op == "group_by" and not (args.get("aggregate") or args.get("having")))):
        return f"No document{scope} has a value for that."
    cite = "".join(f"[D{first_citation + index}]" for index in range(min(len(result.documents), 3)))
    return SENTENCES[result.op](args, result, scope, cite)


def sentence(text: str) -> str:
    """A sentence whose citations may be empty: no space before its full stop."""
    return text.replace(" .", ".")


def stated(result: QueryResult, answer: str, cite: str) -> str:
    """The operation performed, then its answer: "Sum of population over 48 documents matching kind = state:
    12345 [D1]."."""
    operation = result.operation[:1].upper() + result.operation[1:]
    return sentence(f"{operation}: {answer or 'none'} {cite}.")


def counted(args: dict[str, Any], result: QueryResult, scope: str, cite: str) -> str:
    return sentence(f"{result.rows[0]['count']} documents{scope} {cite}.")


def listed(args: dict[str, Any], result: QueryResult, scope: str, cite: str) -> str:
    labels = [document_label(row) for row in result.rows]
    return sentence(f"{result.total_documents} documents{scope}: {every(labels, result.truncated)} {cite}.")


def distinct_values(args: dict[str, Any], result: QueryResult, scope: str, cite: str) -> str:
    values = [number(row["value"], args.get("field")) for row in result.rows]
    return sentence(f"The {args.get('field')} values{scope} are: {every(values, result.truncated)} {cite}.")


def groups(args: dict[str, Any], result: QueryResult, scope: str, cite: str) -> str:
    if args.get("aggregate") or args.get("having"):
        return aggregated_groups(args, result, scope, cite)
    counts = [f"{row['value']}: {row['count']}" for row in result.rows]
    return sentence(f"Documents per {args.get('by') or args.get('field')}{scope}: "
                    f"{every(counts, result.truncated)} {cite}.")


def aggregated_groups(args: dict[str, Any], result: QueryResult, scope: str, cite: str) -> str:
    aggregate = args.get("aggregate") or {}
    measure = aggregate.get("op", "count")
    shown = [f"{row['value']}: {number(row[measure], aggregate.get('field'))}" if measure != "count" else
             f"{row['value']}: {row['count']}" for row in result.rows]
    return stated(result, every(shown, result.truncated), cite)


def ranked(args: dict[str, Any], result: QueryResult, scope: str, cite: str) -> str:
    if not args.get("field"):  # top_n --by: the most common values
        return groups(args, result, scope, cite)
    largest = [f"{document_label(row)} ({number(row['value'], args.get('field'))})" for row in result.rows]
    return sentence(f"Largest {args.get('field')}{scope}: {every(largest, result.truncated)} {cite}.")


def looked_up(args: dict[str, Any], result: QueryResult, scope: str, cite: str) -> str:
    sentences = []
    for row in result.rows:
        label = document_label(row)
        if "field" in row:
            value = row["value"]
            shown = ", ".join(map(str, value)) if isinstance(value, list) else number(value, row["field"])
            sentences.append(f"The {row['field']} of {label} is {shown if value is not None else 'not recorded'}.")
        else:
            fields = ", ".join(f"{name}: {entry['value']}" for name, entry in sorted(row["fields"].items())
                               if name not in ("id", "path"))
            sentences.append(f"{label}: {fields}.")
    if not sentences:
        return f"No document{scope}."
    return " ".join(sentences) + (f" {cite}" if cite else "")


def aggregated(args: dict[str, Any], result: QueryResult, scope: str, cite: str) -> str:
    """sum, avg, min, max (a value) and count_distinct (a count)."""
    if not result.rows:
        return stated(result, "", cite)
    if "count" in result.rows[0]:
        return stated(result, str(result.rows[0]["count"]), cite)
    return stated(result, number(result.rows[0]["value"], args.get("field")), cite)


def best(args: dict[str, Any], result: QueryResult, scope: str, cite: str) -> str:
    """argmax/argmin: every tied document's returned value, with the value it was ranked by."""
    shown = []
    for row in result.rows:
        value = ", ".join(map(str, row["value"])) if isinstance(row["value"], list) else number(
            row["value"], args.get("return"))
        shown.append(f"{value} ({args.get('field')} {number(row['field_value'], args.get('field'))})")
    return stated(result, every(shown, result.truncated), cite)


def combined(args: dict[str, Any], result: QueryResult, scope: str, cite: str) -> str:
    """intersect, union, except: every value (or document) of the set."""
    items = [document_label(row) if "id" in row else number(row["value"]) for row in result.rows]
    return stated(result, every(items, result.truncated), cite)


def reconciled(args: dict[str, Any], result: QueryResult, scope: str, cite: str) -> str:
    """reconciliation: each finding, the document's value against the roster's."""
    findings = []
    for row in result.rows:
        about = document_label(row) if row.get("path") else f"roster row {row['key']}"
        if row["field"] is None:
            findings.append(f"{about}: {row['status']}")
        else:
            findings.append(f"{about}: {row['field']} is {row['document_value'] or 'not stated'} in the document, "
                            f"{row['roster_value'] or 'absent'} in the roster ({row['status']})")
    return stated(result, "; ".join(findings) + (" (the first ones only)" if result.truncated else ""), cite)


# The sentence of each operation of structured/operations.py (test_operations.py checks every one has one).
SENTENCES: dict[str, Callable[[dict[str, Any], QueryResult, str, str], str]] = {
    "count": counted, "list": listed, "distinct": distinct_values, "group_by": groups, "top_n": ranked,
    "lookup": looked_up, "sum": aggregated, "avg": aggregated, "min": aggregated, "max": aggregated,
    "count_distinct": aggregated, "argmax": best, "argmin": best, "intersect": combined, "union": combined,
    "except": combined, "reconciliation": reconciled,
}
