"""`rag-pipeline inspect`: what the sidecar and the vector store hold, as tables or JSON.

    inspect documents [--status ok|pending|failed] [--type pdf] [--tag TAG] [--path SUBSTRING] [--limit N]
    inspect chunks PATH_OR_SHA          a document's chunks: index, heading path, line, page, size, text
    inspect fields PATH_OR_SHA          a document's fields (value, type, origin), field errors and reconciliation
                                        (a value flagged as a prompt injection withheld)
    inspect reconciliation [--status S] the rosters' reconciliation: MATCH, MISMATCH, NOT_STATED, ...
    inspect failures                    failed documents and refused files, with the reasons
    inspect redactions                  redaction totals by kind
    inspect collection                  the collection queries use (points, segments, indexed vectors, payload
                                        indexes, index version) and the index generations
"""

from __future__ import annotations

import argparse
from typing import Any

from rag_pipeline.errors import NotFound
from rag_pipeline.ingest.chunk import read_chunks
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar
from rag_pipeline.structured.roster import STATUSES
from rag_pipeline.structured.withheld import withhold_flagged

TEXT_PREVIEW = 80


def add_arguments(parser: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    """The views as sub-commands (each also takes the common --data-dir and --json)."""
    views = parser.add_subparsers(dest="view", required=True)
    documents = views.add_parser("documents", parents=[common], help="documents with status, type, chunks, errors")
    documents.add_argument("--status", choices=("ok", "pending", "failed"))
    documents.add_argument("--type", dest="doc_type", help="md, txt, pdf, docx, html, pptx")
    documents.add_argument("--tag", help="only documents with this tag (from the corpus rules)")
    documents.add_argument("--path", help="only paths containing this substring")
    documents.add_argument("--limit", type=int, default=1000)
    chunks = views.add_parser("chunks", parents=[common], help="a document's chunks with heading paths and pages")
    chunks.add_argument("document", help="a path (or a unique suffix of one) or a sha (or its prefix)")
    fields = views.add_parser("fields", parents=[common], help="a document's fields with type and origin, its field "
                                                               "errors and its reconciliation with the rosters")
    fields.add_argument("document", help="a path (or a unique suffix of one) or a sha (or its prefix)")
    reconciliation = views.add_parser("reconciliation", parents=[common],
                                      help="per document and authoritative roster column: the document's claim "
                                           "against the roster")
    reconciliation.add_argument("--status", choices=STATUSES)
    views.add_parser("failures", parents=[common], help="failed documents and refused files with the reasons")
    views.add_parser("redactions", parents=[common], help="redaction totals by kind")
    views.add_parser("collection", parents=[common], help="the vector collection: points, segments, index status")


def inspect(settings: Settings, args: argparse.Namespace) -> tuple[list[dict[str, Any]] | dict[str, Any], str]:
    """(rows or an object, a title) for the chosen view; NotFound when a document is not found."""
    sidecar = Sidecar(settings.sidecar_location)
    if args.view == "documents":
        return documents(sidecar, args.status, args.doc_type, args.path, args.limit, tag=args.tag), "documents"
    if args.view == "chunks":
        sha, row = find_document(sidecar, args.document)
        return chunk_rows(settings, sidecar, sha), f"chunks of {', '.join(row['paths'])} ({sha[:12]})"
    if args.view == "fields":
        sha, row = find_document(sidecar, args.document)
        return field_rows(sidecar, sha), f"fields of {', '.join(row['paths'])} ({sha[:12]})"
    if args.view == "reconciliation":
        return sidecar.reconciliation(args.status), "reconciliation"
    if args.view == "failures":
        failed = [{"path": row["path"], "kind": "failed", "reason": row["error"]}
                  for row in documents(sidecar, "failed", None, None, 100_000)]
        refused = [{"path": row["path"], "kind": "refused", "reason": row["reason"]} for row in sidecar.source_errors()]
        return failed + refused, "failures"
    if args.view == "redactions":
        return sidecar.redaction_totals(), "redactions by kind"
    from rag_pipeline import components  # here: the CLI's parser imports this module for every command

    registry = components.generations(settings)
    with registry.query_store() as store:
        info = store.info()
    info["active_generation"] = registry.active_id()
    info["target_generation"] = registry.target().id
    info["generations"] = ", ".join(generation.describe() for generation in registry.all().values())
    return info, "collection"


def documents(sidecar: Sidecar, status: str | None, doc_type: str | None, path: str | None,
              limit: int, *, tag: str | None = None) -> list[dict[str, Any]]:
    rows = []
    for sha, row in sorted(sidecar.documents().items(), key=lambda item: item[1]["paths"][0]):
        if status and row["status"] != status or doc_type and row["doc_type"] != doc_type:
            continue
        if path and not any(path in candidate for candidate in row["paths"]):
            continue
        if tag and tag not in (row["tags"] or []):
            continue
        rows.append({"path": row["paths"][0], "copies": len(row["paths"]) - 1, "paths": list(row["paths"]),
                     "sources": ",".join(row["sources"] or []), "type": row["doc_type"],
                     "tags": ",".join(row["tags"] or []), "status": row["status"], "chunks": row["chunks"],
                     "pages": row["pages"], "redactions": row["redactions"], "sha": sha[:12],
                     "error": row["error"] or ""})
    return rows[:limit]


def find_document(sidecar: Sidecar, key: str) -> tuple[str, dict[str, Any]]:
    """The one document whose sha starts with `key` or one of whose paths ends with it."""
    found = {sha: row for sha, row in sidecar.documents().items()
             if sha.startswith(key) or any(path == key or path.endswith("/" + key.lstrip("/")) for path in row["paths"])}
    if len(found) != 1:
        raise NotFound(f"{'no' if not found else str(len(found))} documents match {key!r}"
                          + ("; give a longer path or sha" if found else ""))
    return next(iter(found.items()))


def chunk_rows(settings: Settings, sidecar: Sidecar, sha: str) -> list[dict[str, Any]]:
    catalogue = sidecar.chunk_catalogue(sha, settings.chunking_id)
    texts = {}
    if catalogue:
        texts = {chunk.chunk_index: chunk.text for chunk in read_chunks(settings, catalogue[0]["shard"], sha)}
    return [{"index": row["chunk_index"], "heading": row["heading_path"], "line": row["line_start"],
             "page": row["page"], "chars": row["chars"],
             "text": " ".join(texts.get(row["chunk_index"], "").split())[:TEXT_PREVIEW]} for row in catalogue]


def field_rows(sidecar: Sidecar, sha: str) -> list[dict[str, Any]]:
    """A document's effective fields (rosters applied), then its field errors and reconciliation rows; a value
    flagged as a prompt injection is withheld (structured/withheld.py), as in the query tool's answers."""
    rows = [{"field": name, "value": value, "type": kind, "origin": origin}
            for name, (value, kind, origin) in document_fields(sidecar, sha).items()]
    rows += [{"field": "(error)", "value": row["error"], "type": "", "origin": row["origin"]}
             for row in sidecar.field_errors_of(sha)]
    reconciliation = sidecar.reconciliation_of(sha)
    withhold_flagged(reconciliation)
    rows += [{"field": row["field"], "value": f"{row['status']}: document {row['document_value']!r}, roster "
                                              f"{row['roster_value']!r}", "type": "reconciliation",
              "origin": f"roster:{row['roster']}"}
             for row in reconciliation]
    withhold_flagged(rows)
    return rows


def document_fields(sidecar: Sidecar, sha: str) -> dict[str, tuple[Any, str, str]]:
    """name -> (value, type, origin) of one document's effective fields (lists gathered), every field shown (the
    query tool's lookup hides fields declared queryable: false; an operator's view does not)."""
    fields: dict[str, tuple[Any, str, str]] = {}
    for row in sidecar.effective_fields_of(sha):
        if row["name"] in fields and row["kind"] == "list":
            fields[row["name"]][0].append(row["text_value"])
        elif row["name"] not in fields:
            value = [row["text_value"]] if row["kind"] == "list" else row["text_value"]
            fields[row["name"]] = (value, row["kind"], row["origin"])
    return fields


def cell_text(value: Any) -> str:
    """A table cell: lists joined with commas, NULL empty."""
    if value is None:
        return ""
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)


def format_rows(rows: list[dict[str, Any]] | dict[str, Any], title: str) -> str:
    """A plain-text table (or key: value lines for an object)."""
    if isinstance(rows, dict):
        width = max(len(key) for key in rows)
        return "\n".join([title] + [f"  {key:<{width}}  {value}" for key, value in rows.items()])
    if not rows:
        return f"{title}: none"
    columns = list(rows[0])
    cells = [[cell_text(row.get(column)) for column in columns] for row in rows]  # a list row may lack a field
    widths = [max(len(column), *(len(line[index]) for line in cells)) for index, column in enumerate(columns)]
    lines = [f"{title} ({len(rows)})", "  ".join(column.ljust(width) for column, width in zip(columns, widths))]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip() for line in cells]
    return "\n".join(lines)
