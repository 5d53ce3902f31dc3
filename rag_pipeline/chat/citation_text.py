"""An answer's citations as text: the "Sources:" list that closes an answer where only text travels (the
OpenAI-compatible API, the MCP tools), and the place of one citation (the CLI's too). An upload is named as its
client named it (`upload_name`, which the API and the CLI add: serve/upload_names.py), its path after it."""

from __future__ import annotations

from typing import Any

SOURCES_HEADING = "\n\nSources:\n"


def sources_text(citations: list[dict[str, Any]]) -> str:
    """The "Sources:" list closing an answer: each citation's number or label and where it is."""
    lines = []
    for citation in citations:
        mark = citation.get("label") or citation.get("number")
        where = [named_place(str(citation.get("path") or ""), citation)]
        if citation.get("page"):
            where.append(f"page {citation['page']}")
        if citation.get("line_start"):
            where.append(f"line {citation['line_start']}")
        if citation.get("heading"):
            where.append(str(citation["heading"]))
        lines.append(f"[{mark}] " + ", ".join(where))
    return SOURCES_HEADING + "\n".join(lines) if lines else ""


def named_place(place: str, cited: dict[str, Any]) -> str:
    """Where a citation is, as people read it: `NAME (place)` for an upload with a name, else the place."""
    name = cited.get("upload_name")
    return f"{name} ({place})" if name else place
