"""The redacted stage: every converted document's text, title and stated fields pass through the redaction rules
(ingest/redaction_rules.py) before anything is chunked, each field's value with its name as context. An independent
detector (ingest/secret_check.py) reads what comes out; a document in which it still finds a secret fails alone:
it gets no redacted output, its status is `failed` with where the secret is and its kind (never the secret), and
the other documents go on."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial

from rag_pipeline.fields.registry import (
    EXTRACT_ERRORS,
    EXTRACTED_ORIGINS,
    FieldSpec,
    declared_fields,
    declared_values,
    field_rows,
)
from rag_pipeline.fields.values import DocumentFields, FieldValue, scalar_text
from rag_pipeline.ingest.artifacts import DROPPED, ArtifactStore
from rag_pipeline.ingest.body_facts import with_body_facts
from rag_pipeline.ingest.converters import first_heading
from rag_pipeline.ingest.document_workers import per_document
from rag_pipeline.ingest.redaction_rules import redact_value, redact_with
from rag_pipeline.ingest.secret_check import find_leaks
from rag_pipeline.ingest.sha_range import ALL_DOCUMENTS, ShaRange
from rag_pipeline.ingest.stage import StageReport, describe, reconcile, stores
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar

NAME_HELD_A_SECRET = "a field whose name holds a secret was dropped"


def value_texts(value: FieldValue) -> list[str]:
    """A field value as the texts the rules and the detector read: a list's items, any other value as text."""
    return list(value.value) if value.kind == "list" else [scalar_text(value.value)]


def redact_field(settings: Settings, name: str, value: FieldValue) -> FieldValue | None:
    """A field value redacted with its name as context (`db_password: X` loses X as `password: X` in a body does);
    a number or date that a rule changes becomes the redacted text. None when the name itself holds a secret."""
    cleaned = [redact_value(settings, name, text) for text in value_texts(value)]
    if any(text is None for text in cleaned):
        return None
    if value.kind == "list":
        return FieldValue("list", cleaned, value.origin)
    if value.kind == "string" or cleaned != value_texts(value):
        return FieldValue("string", cleaned[0], value.origin)
    return value


def stated_fields(extracted: dict | None, titles: dict[str, str], specs: Mapping[str, FieldSpec],
                  settings: Settings, body: str | None = None) -> DocumentFields:
    """A document's stated fields, redacted like its text (each value with its field's name as context; a field
    whose name holds a secret is dropped), and the facts its redacted `body` states under names it does not state
    otherwise (origin `body`), with the declared types applied; `title` falls back to the (redacted) first
    heading."""
    fields = DocumentFields.from_json(extracted)
    for name, value in list(fields.values.items()):
        cleaned = redact_field(settings, name, value)
        if cleaned is None:
            del fields.values[name]
            fields.errors.append(NAME_HELD_A_SECRET)
        else:
            fields.values[name] = cleaned
    heading = titles.get("first_heading") or titles.get("title")
    if "title" not in fields.values and heading:
        fields.values["title"] = FieldValue("string", heading, "heading")
    if body is not None:
        fields = with_body_facts(fields, body, titles.get("title") or heading)
    return declared_values(fields, specs)


def surviving_secrets(text: str, named: Mapping[str, FieldValue | str]) -> list[str]:
    """Where the independent detector still finds a secret: "<kind> on line <n>" of the text and "<kind> in field
    <name>" of the named values (fields, titles), each read as "name: value" so that the name is context. Never
    the secret itself."""
    found = {f"{leak.kind} on line {leak.line}" for leak in find_leaks(text)}
    for name, value in named.items():
        for item in value_texts(value) if isinstance(value, FieldValue) else [value]:
            for leak in find_leaks(f"{name}: {item}"):
                found.add(f"{leak.kind} in {'a field name' if leak.text in name else f'field {name}'}")
    return sorted(found)


def withheld(where: list[str]) -> str:
    """The error of a document withheld because a secret survived its redaction."""
    return (f"a secret survived redaction ({', '.join(where)}): the document is withheld, nothing of it is chunked "
            "or indexed; remove the secret from the file (or extend the redaction rules) and ingest again")


def released_secrets(redacted: ArtifactStore, released: Iterable[tuple[str, str]],
                     paths: Mapping[str, str]) -> list[str]:
    """The blocking check `no_secret_survives`: the independent detector over what the stage released downstream,
    read back from the artifacts (each document's redacted text and fields). A document the detector flags is
    withheld before release, so this fails only if something went out without passing it."""
    failures = []
    for shard, sha in released:
        fields = DocumentFields.from_json(redacted.read_json(shard, sha, "json")["fields"])
        where = surviving_secrets(redacted.read_text(shard, sha, "md"), fields.values)
        if where:
            failures.append(f"{paths.get(sha, sha)}: released with a secret ({', '.join(where)})")
    return failures


@dataclass
class RedactedDocument:
    """What redacting one document gave: its sidecar row (None when its Markdown was dropped), its field rows and
    extraction errors, why it failed (withheld for a secret, or no Markdown left), and what the check
    `no_secret_survives` found in what it released."""

    sha: str
    row: dict | None
    field_rows: list[dict] = field(default_factory=list)
    field_errors: list[dict] = field(default_factory=list)
    failure: str | None = None
    check_failures: list[str] = field(default_factory=list)


def redaction_handler(settings: Settings) -> Callable[[list[tuple[str, str, str]]], list[RedactedDocument]]:
    """A handler of (shard, sha, path) jobs, for ingest/document_workers.py."""
    specs = declared_fields(settings)
    return lambda jobs: [redact_document(settings, specs, *job) for job in jobs]


def redact_document(settings: Settings, specs: Mapping[str, FieldSpec], shard: str, sha: str,
                    path: str) -> RedactedDocument:
    """Redact one converted document and its title and fields into the redacted store (`path` names it in
    messages); a document in which the detector still finds a secret is withheld (<sha>.error.json)."""
    markdown, redacted = stores(settings)["markdown"], stores(settings)["redacted"]
    if not markdown.exists(shard, sha, "md"):
        return RedactedDocument(sha, None, failure=(
            f"{path}: its unredacted Markdown was dropped (RAG_KEEP_UNREDACTED=false); "
            "delete its raw and markdown artifacts to convert the source again"))
    begin = time.perf_counter()
    text = markdown.read_text(shard, sha, "md")
    result = redact_with(settings, text)
    elapsed_ms = (time.perf_counter() - begin) * 1000
    converted_json = markdown.read_json(shard, sha, "json")
    titles = {key: cleaned for key, found in (("title", converted_json.get("title")),
                                              ("first_heading", first_heading(text)))
              if found and (cleaned := redact_value(settings, key, found))}
    fields = stated_fields(converted_json.get("fields"), titles, specs, settings, result.text)
    where = surviving_secrets(result.text, {**titles, **fields.values})
    if where:
        return withheld_document(redacted, shard, sha, path, withheld(where))
    redacted.write_json(shard, sha, "json", {"counts": result.counts, "fields": fields.to_json()})
    redacted.write_text(shard, sha, "md", result.text)
    row = {"sha": sha, "stage": "redacted", "redactions": sum(result.counts.values()), "redact_ms": elapsed_ms,
           "title": titles.get("title"), "first_heading": titles.get("first_heading")}
    return RedactedDocument(sha, row, field_rows(sha, fields.values),
                            [{"sha": sha, "origin": EXTRACT_ERRORS, "error": error} for error in fields.errors],
                            check_failures=released_secrets(redacted, [(shard, sha)], {sha: path}))


def lost_redaction(settings: Settings, job: tuple[str, str, str], reason: str) -> RedactedDocument:
    """A document whose redaction worker died or was stopped: withheld (<sha>.error.json, whatever part of its
    output the worker wrote removed first)."""
    shard, sha, path = job
    redacted = stores(settings)["redacted"]
    redacted.delete_documents(shard, [sha])
    return withheld_document(redacted, shard, sha, path, f"the redaction did not finish: {reason}")


def withheld_document(redacted: ArtifactStore, shard: str, sha: str, path: str, error: str) -> RedactedDocument:
    """A document that gets no redacted output: <sha>.error.json (not retried until its bytes change) and a failed
    row."""
    redacted.write_json(shard, sha, "error.json", {"path": path, "error": error})
    return RedactedDocument(sha, {"sha": sha, "status": "failed", "stage": "redacted", "error": error, "title": None,
                                  "first_heading": None}, failure=f"{path}: {error}")


def sync_redacted(settings: Settings, shards: Iterable[str], sidecar: Sidecar,
                  *, documents: ShaRange = ALL_DOCUMENTS) -> StageReport:
    """Redact secrets and PII from every new Markdown document (of `documents`) and its title and fields; counts
    per kind go to <sha>.json. Documents are redacted in worker processes when there are many
    (ingest/document_workers.py).

    A document in which the independent detector (secret_check) still finds a secret fails alone: no redacted
    output, <sha>.error.json and status `failed` naming where the secret is and its kind; it is not retried (its
    bytes must change). So does a document whose worker died or ran past RAG_CONVERT_TIMEOUT_S. Without
    keep_unredacted, the raw and Markdown artifacts of every redacted, withheld or unconvertible document are
    dropped.
    """
    started = time.perf_counter()
    report = StageReport("redacted", sorted(shards), documents)
    raw, markdown, redacted = (stores(settings)[stage] for stage in ("raw", "markdown", "redacted"))

    def converted(shard: str) -> set[str]:
        return markdown.shas(shard, "md") | markdown.shas(shard, DROPPED)

    def done(shard: str) -> set[str]:  # .md is written last
        return redacted.shas(shard, "md") | redacted.shas(shard, "error.json")

    todo = reconcile(report, converted, done, redacted)
    known = sidecar.documents_by_sha([sha for _, sha in todo])
    jobs = [(shard, sha, describe(known.get(sha), sha)) for shard, sha in todo]
    rows = []
    field_rows_by_sha: dict[str, list[dict]] = {}
    field_errors: list[dict] = []
    outcomes = per_document(settings, partial(redaction_handler, settings), jobs, partial(lost_redaction, settings))
    for outcome in outcomes:
        sha = outcome.sha
        if outcome.row is not None:
            rows.append(outcome.row)
        if outcome.failure is not None:
            report.failed[sha] = outcome.failure
            continue
        report.added.append(sha)
        field_rows_by_sha[sha] = outcome.field_rows
        field_errors += outcome.field_errors
        report.check_failures += outcome.check_failures
    sidecar.upsert(rows)
    sidecar.replace_fields([row for rows_of in field_rows_by_sha.values() for row in rows_of], list(field_rows_by_sha),
                           origins=EXTRACTED_ORIGINS, errors=field_errors)
    if not settings.keep_unredacted:
        drop_unredacted(raw, markdown, redacted, report.shards, documents)
    report.seconds = time.perf_counter() - started
    return report


def drop_unredacted(raw: ArtifactStore, markdown: ArtifactStore, redacted: ArtifactStore,
                    shards: list[str], documents: ShaRange = ALL_DOCUMENTS) -> None:
    """Drop the raw bytes and Markdown of every redacted, withheld or unconvertible document of the shards (of
    `documents`). Kept: the Markdown's page map (<sha>.json, its title dropped) and recorded conversion failures
    (<sha>.error.json)."""
    for shard in shards:
        released = documents.select(redacted.shas(shard))
        done = released | documents.select(markdown.shas(shard, "error.json"))
        raw.drop_documents(shard, sorted(done - raw.shas(shard, DROPPED)))
        page_maps = sorted(released - markdown.shas(shard, DROPPED))
        for sha in page_maps:
            page_map = {**markdown.read_json(shard, sha, "json"), "title": None, "fields": None}
            markdown.write_json(shard, sha, "json", page_map)
        markdown.drop_documents(shard, page_maps, keep=("json",))
