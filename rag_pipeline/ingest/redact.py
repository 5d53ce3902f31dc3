"""The redacted stage: every converted document's text, title and stated fields pass through the redaction rules
(ingest/redaction_rules.py) before anything is chunked; an independent detector (ingest/secret_check.py) checks
what comes out, and a document it still flags gets no redacted output (a check failure)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping

from rag_pipeline.fields.registry import (
    EXTRACT_ERRORS,
    EXTRACTED_ORIGINS,
    FieldSpec,
    declared_fields,
    declared_values,
    field_rows,
)
from rag_pipeline.fields.values import DocumentFields, FieldValue
from rag_pipeline.ingest.artifacts import DROPPED, ArtifactStore
from rag_pipeline.ingest.body_facts import with_body_facts
from rag_pipeline.ingest.redaction_rules import redact_with
from rag_pipeline.ingest.secret_check import find_leaks
from rag_pipeline.ingest.stage import StageReport, describe, reconcile, stores
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar


def stated_fields(extracted: dict | None, titles: dict[str, str], specs: Mapping[str, FieldSpec],
                  settings: Settings, body: str | None = None) -> DocumentFields:
    """A document's stated fields, redacted like its text (field names are not), and the facts its redacted
    `body` states under names it does not state otherwise (origin `body`), with the declared types applied;
    `title` falls back to the (redacted) first heading."""
    fields = DocumentFields.from_json(extracted)

    def clean(text: str) -> str:
        return redact_with(settings, text).text

    for name, value in list(fields.values.items()):
        if value.kind == "list":
            fields.values[name] = FieldValue("list", [clean(item) for item in value.value], value.origin)
        elif value.kind == "string":
            fields.values[name] = FieldValue("string", clean(value.value), value.origin)
    heading = titles.get("first_heading") or titles.get("title")
    if "title" not in fields.values and heading:
        fields.values["title"] = FieldValue("string", heading, "heading")
    if body is not None:
        fields = with_body_facts(fields, body, titles.get("title") or heading)
    return declared_values(fields, specs)


def sync_redacted(settings: Settings, shards: Iterable[str], sidecar: Sidecar) -> StageReport:
    """Redact secrets and PII from every new Markdown document; counts per kind go to <sha>.json.

    A document in which the independent checker (secret_check) still finds a secret is a check failure and gets
    no redacted output, so it blocks its shard on every run until the rules catch the secret. Without
    keep_unredacted, the raw and Markdown artifacts of every redacted (or unconvertible) document are dropped.
    """
    started = time.perf_counter()
    report = StageReport("redacted", sorted(shards))
    raw, markdown, redacted = (stores(settings)[stage] for stage in ("raw", "markdown", "redacted"))

    def converted(shard: str) -> set[str]:
        return markdown.shas(shard, "md") | markdown.shas(shard, DROPPED)

    todo = reconcile(report, converted, lambda shard: redacted.shas(shard, "md"), redacted)  # .md is written last
    known = sidecar.documents_by_sha([sha for _, sha in todo])
    specs = declared_fields(settings)
    rows = []
    field_rows_by_sha: dict[str, list[dict]] = {}
    field_errors: list[dict] = []
    for shard, sha in todo:
        path = describe(known.get(sha), sha)
        if not markdown.exists(shard, sha, "md"):
            report.failed[sha] = (f"{path}: its unredacted Markdown was dropped (RAG_KEEP_UNREDACTED=false); "
                                  "delete its raw and markdown artifacts to convert the source again")
            continue
        begin = time.perf_counter()
        result = redact_with(settings, markdown.read_text(shard, sha, "md"))
        elapsed_ms = (time.perf_counter() - begin) * 1000
        row = known.get(sha) or {}
        titles = {key: redact_with(settings, row[key]).text for key in ("title", "first_heading") if row.get(key)}
        fields = stated_fields(markdown.read_json(shard, sha, "json").get("fields"), titles, specs, settings,
                               result.text)
        field_text = "\n".join(json.dumps(value.value) for value in fields.values.values())
        leaks = find_leaks(result.text) + find_leaks(field_text)
        if leaks:
            report.check_failures.append(
                f"{path}: {len(leaks)} secret(s) survived redaction "
                f"({', '.join(sorted({f'{leak.kind} on line {leak.line}' for leak in leaks}))})")
            rows.append({"sha": sha, **titles})
            continue
        redacted.write_json(shard, sha, "json", {"counts": result.counts, "fields": fields.to_json()})
        redacted.write_text(shard, sha, "md", result.text)
        report.added.append(sha)
        field_rows_by_sha[sha] = field_rows(sha, fields.values)
        field_errors += [{"sha": sha, "origin": EXTRACT_ERRORS, "error": error} for error in fields.errors]
        rows.append({"sha": sha, "stage": "redacted", "redactions": sum(result.counts.values()),
                     "redact_ms": elapsed_ms, **titles})
    sidecar.upsert(rows)
    sidecar.replace_fields([row for rows_of in field_rows_by_sha.values() for row in rows_of], list(field_rows_by_sha),
                           origins=EXTRACTED_ORIGINS, errors=field_errors)
    if not settings.keep_unredacted:
        drop_unredacted(raw, markdown, redacted, report.shards)
    report.seconds = time.perf_counter() - started
    return report


def drop_unredacted(raw: ArtifactStore, markdown: ArtifactStore, redacted: ArtifactStore,
                    shards: list[str]) -> None:
    """Drop the raw bytes and Markdown of every redacted or unconvertible document of the shards. Kept: the
    Markdown's page map (<sha>.json, its title dropped) and recorded conversion failures (<sha>.error.json)."""
    for shard in shards:
        done = redacted.shas(shard) | markdown.shas(shard, "error.json")
        for sha in sorted(done - raw.shas(shard, DROPPED)):
            raw.drop(shard, sha)
        for sha in sorted(redacted.shas(shard) - markdown.shas(shard, DROPPED)):
            page_map = {**markdown.read_json(shard, sha, "json"), "title": None, "fields": None}
            markdown.write_json(shard, sha, "json", page_map)
            markdown.drop(shard, sha, keep=("json",))
