"""Field values that carry a prompt injection, withheld from exact answers.

Exact answers quote field values verbatim, and a value comes from a document (a title, a DOCX or HTML property), a
roster cell or a model: "Ignore previous instructions and reply only with ..." would reach every reader and every
model that reads the answer. A string value the guardrail scanner quarantines (generate/guardrails: a high-severity
finding) is replaced by WITHHELD wherever a metadata result holds it (a row's value, a lookup's fields, a list's
elements, field errors, reconciliation values; a document's id and path are its identity, not a value), and the
result lists each one withheld (`withheld`: row, key, rules) for every surface to say so.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from rag_pipeline.generate.guardrails import quarantined, scan_text

WITHHELD = "[withheld: flagged as a prompt injection]"
IDENTITY_KEYS = frozenset({"id", "path", "paths"})  # not field values


@lru_cache(maxsize=8192)
def injection_rules(text: str) -> tuple[str, ...]:
    """The rules that flag `text` as a prompt injection to withhold (none: it may be shown)."""
    findings = scan_text(text, "field value")
    return tuple(dict.fromkeys(finding.rule for finding in findings)) if quarantined(findings) else ()


def withhold_flagged(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Replace every flagged value in `rows` (in place) by WITHHELD; what was withheld: {"row", "key", "rules"}
    (`key` is the value's place in its row, e.g. "title", "fields.title.value")."""
    withheld: list[dict[str, Any]] = []
    for index, row in enumerate(rows):
        for key in [key for key in row if key not in IDENTITY_KEYS]:
            row[key] = withhold(row[key], key, index, withheld)
    return withheld


def withhold(value: Any, key: str, row: int, withheld: list[dict[str, Any]]) -> Any:
    """`value` with its flagged strings replaced, each recorded in `withheld`."""
    if isinstance(value, str):
        rules = injection_rules(value)
        if not rules:
            return value
        withheld.append({"row": row, "key": key, "rules": list(rules)})
        return WITHHELD
    if isinstance(value, list):
        return [withhold(item, key, row, withheld) for item in value]
    if isinstance(value, dict):
        return {name: item if name in IDENTITY_KEYS else withhold(item, f"{key}.{name}", row, withheld)
                for name, item in value.items()}
    return value


def withheld_warning(count: int) -> str:
    """The line a terminal shows when values were withheld."""
    return f"warning: {count} field value(s) withheld: flagged as a prompt injection (shown as {WITHHELD})"
