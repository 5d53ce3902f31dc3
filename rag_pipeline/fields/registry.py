"""The fields registry: built-in document facts, the field declarations of the sources file, and the fields the
sidecar holds, each with one type.

    fields:                                  # in RAG_SOURCES_FILE, beside sources: and roster:
      year: {type: number, filterable: true}
      themes: {type: list, filterable: true, synonyms: [theme]}
      author: {queryable: false}            # kept out of the query tool
      mood: {from: classify, labels: {calm: "relaxing, slow play", intense: "fast, competitive action"}}
      summary: {from: lead}

Every front-matter key and document property is a field without a declaration; its type is then the most common
type among its values. A declared type is applied when a document's fields are stored. `filterable` fields are
copied to the chunk payload (search's --filter FIELD=VALUE). `from:` fields are filled by enrichment.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from rag_pipeline.errors import ConfigError
from rag_pipeline.fields.values import (
    FIELD_KINDS,
    FIELD_NAME,
    DocumentFields,
    FieldKind,
    FieldValue,
    coerce,
    scalar_text,
    text_kind,
)
from rag_pipeline.settings import Settings
from rag_pipeline.sources_file import read_sources_file, sources_file_mtime

EnrichMethod = Literal["llm", "classify", "lead"]
ENRICH_METHODS: tuple[EnrichMethod, ...] = ("llm", "classify", "lead")
SPEC_KEYS = ("type", "filterable", "queryable", "synonyms", "description", "from", "labels", "max_labels")
RESERVED_PREFIX = "doc_"  # a stated field named like a built-in one is stored as doc_<name>


@dataclass(frozen=True)
class BuiltinField:
    kind: FieldKind
    description: str


# Facts every document has, computed from the documents table (never stated by a document).
BUILTIN_FIELDS: dict[str, BuiltinField] = {
    "id": BuiltinField("string", "the document id: the SHA-256 of its bytes"),
    "path": BuiltinField("list", "every path that holds the document"),
    "folder": BuiltinField("string", "its folder relative to its source root ('.' at the top)"),
    "name": BuiltinField("string", "its file name"),
    "type": BuiltinField("string", "its document type: md, txt, pdf, docx, html or pptx"),
    "source": BuiltinField("list", "the sources that hold it"),
    "tags": BuiltinField("list", "its tags from the corpus rules"),
    "pages": BuiltinField("number", "pages (PDF) or slides (PPTX)"),
    "chars": BuiltinField("number", "characters of its converted text"),
    "ingested_at": BuiltinField("date", "when its ingest ended"),
}


@dataclass(frozen=True)
class FieldSpec:
    """One declared field."""

    name: str
    kind: FieldKind | None = None
    filterable: bool = False
    queryable: bool = True
    synonyms: tuple[str, ...] = ()
    description: str = ""
    method: EnrichMethod | None = None  # `from:`: filled by enrichment
    labels: Mapping[str, str] = field(default_factory=dict)  # label -> description (classify, and the LLM's choices)
    max_labels: int = 1  # labels a list field may get from classify

    def schema(self) -> dict[str, Any]:
        """What an enrichment of this field depends on (its cache key)."""
        return {"name": self.name, "type": self.kind or "string", "method": self.method,
                "labels": dict(self.labels), "description": self.description, "max_labels": self.max_labels}


def parse_field_spec(name: Any, entry: Any, where: str) -> tuple[FieldSpec | None, list[str]]:
    """One declaration, or the problems that stop it."""
    where = f"{where}: field {name!r}"
    if not isinstance(name, str) or not FIELD_NAME.fullmatch(name):
        return None, [f"{where}: a field name is lower case letters, digits and '_' (starting with a letter)"]
    if name in BUILTIN_FIELDS:
        return None, [f"{where}: {name!r} is a built-in field and cannot be declared"]
    entry = entry or {}
    if not isinstance(entry, dict):
        return None, [f"{where}: needs a mapping (type, filterable, synonyms, from, labels, ...)"]
    problems = [f"{where}: unknown key {key!r} (allowed: {', '.join(SPEC_KEYS)})" for key in entry
                if key not in SPEC_KEYS]
    kind = entry.get("type")
    if kind is not None and kind not in FIELD_KINDS:
        problems.append(f"{where}: type must be one of {', '.join(FIELD_KINDS)}, got {kind!r}")
    method = entry.get("from")
    if method is not None and method not in ENRICH_METHODS:
        problems.append(f"{where}: from must be one of {', '.join(ENRICH_METHODS)}, got {method!r}")
    labels = entry.get("labels") or {}
    if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) and v.strip()
                                               for k, v in labels.items()):
        problems.append(f"{where}: labels must map each label to a description")
        labels = {}
    if method == "classify" and len(labels) < 2:
        problems.append(f"{where}: from: classify needs at least two labels with descriptions")
    synonyms = entry.get("synonyms") or []
    if not isinstance(synonyms, list) or not all(isinstance(item, str) for item in synonyms):
        problems.append(f"{where}: synonyms must be a list of strings")
        synonyms = []
    flags = {key: entry.get(key, default) for key, default in (("filterable", False), ("queryable", True))}
    problems += [f"{where}: {key} must be true or false" for key, value in flags.items() if not isinstance(value, bool)]
    max_labels = entry.get("max_labels", 1)
    if isinstance(max_labels, bool) or not isinstance(max_labels, int) or max_labels < 1:
        problems.append(f"{where}: max_labels must be a positive integer")
    if problems:
        return None, problems
    return FieldSpec(name, kind, flags["filterable"], flags["queryable"], tuple(synonyms),
                     str(entry.get("description") or ""), method, dict(labels), max_labels), []


@lru_cache(maxsize=8)
def _declared(path: Path, mtime_ns: int) -> dict[str, FieldSpec]:
    raw = read_sources_file(path).get("fields") or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: `fields:` must map field names to declarations")
    specs, problems = {}, []
    for name, entry in raw.items():
        spec, found = parse_field_spec(name, entry, str(path))
        problems += found
        if spec is not None:
            specs[name] = spec
    if problems:
        raise ConfigError("; ".join(problems))
    return specs


def declared_fields(settings: Settings) -> dict[str, FieldSpec]:
    """The field declarations of RAG_SOURCES_FILE (none without one); re-read when the file changes."""
    path = settings.sources_file
    if path is None:
        return {}
    return _declared(Path(path), sources_file_mtime(Path(path)))


def filterable_fields(settings: Settings) -> list[str]:
    """The declared fields copied to the chunk payload (search's --filter FIELD=VALUE)."""
    return sorted(name for name, spec in declared_fields(settings).items() if spec.filterable)


def stored_name(name: str) -> str:
    """The name a stated field is stored under: a built-in name gets the prefix doc_."""
    return RESERVED_PREFIX + name if name in BUILTIN_FIELDS else name


def declared_values(fields: DocumentFields, specs: Mapping[str, FieldSpec]) -> DocumentFields:
    """A document's stated fields under their stored names, with the declared types applied; a value that does not
    read as its declared type is kept as stated and recorded as an error."""
    result = DocumentFields(errors=list(fields.errors))
    for name, value in fields.values.items():
        name = stored_name(name)
        spec = specs.get(name)
        if spec is not None and spec.method is not None:
            continue  # an enriched field: enrichment fills it, documents do not
        if spec is not None and spec.kind is not None:
            try:
                value = coerce(value, spec.kind)
            except ValueError as error:
                result.errors.append(f"{value.origin}: field {name!r}: declared {spec.kind}: {error}")
        result.values[name] = value
    return result


@dataclass(frozen=True)
class RegistryField:
    """One field as the query tool sees it."""

    name: str
    kind: FieldKind
    documents: int  # documents that have it (0 for a declared field nothing has yet)
    origins: tuple[str, ...]
    builtin: bool = False
    spec: FieldSpec | None = None

    def to_json(self) -> dict[str, Any]:
        spec = self.spec
        return {"name": self.name, "type": self.kind, "documents": self.documents, "origins": list(self.origins),
                "builtin": self.builtin, "filterable": bool(spec and spec.filterable),
                "synonyms": list(spec.synonyms) if spec else [], "enriched_by": spec.method if spec else None,
                "description": (spec.description if spec else "") or
                               (BUILTIN_FIELDS[self.name].description if self.builtin else "")}


def build_registry(stored: Iterable[Mapping[str, Any]], specs: Mapping[str, FieldSpec]) -> dict[str, RegistryField]:
    """Every queryable field: built-ins, then stored and declared ones by name. `stored` rows are (name, kind,
    documents, origins) counts of the sidecar's effective fields; a field's type is its declared one, else its
    most common stored one."""
    registry = {name: RegistryField(name, builtin.kind, 0, ("builtin",), True) for name, builtin in
                BUILTIN_FIELDS.items()}
    counts: dict[str, dict[str, int]] = {}
    documents: dict[str, int] = {}
    origins: dict[str, set[str]] = {}
    for row in stored:
        name = row["name"]
        if name in BUILTIN_FIELDS:
            continue
        counts.setdefault(name, {})[row["kind"]] = counts.get(name, {}).get(row["kind"], 0) + row["documents"]
        documents[name] = documents.get(name, 0) + row["documents"]
        origins.setdefault(name, set()).update(row["origins"] or [])
    for name in sorted(set(counts) | set(specs)):
        spec = specs.get(name)
        if spec is not None and not spec.queryable:
            continue
        by_kind = counts.get(name, {})
        kind = (spec.kind if spec and spec.kind else None) or \
            (max(sorted(by_kind), key=lambda k: by_kind[k]) if by_kind else "string")
        registry[name] = RegistryField(name, kind, documents.get(name, 0), tuple(sorted(origins.get(name, ()))),
                                       False, spec)
    return registry


EXTRACTED_ORIGINS = ["front_matter", "docx", "pptx", "pdf", "html", "heading", "body"]  # what ingest reads, not enrichment
EXTRACT_ERRORS = "extract"  # the origin of field errors found at ingest


def typed_columns(kind: FieldKind, item: Any) -> dict[str, Any]:
    """The typed columns of one stored value: its text (always), and its number and date when it reads as one."""
    text = scalar_text(item)
    inferred, parsed = text_kind(text)
    return {"text_value": text,
            "number_value": float(item) if kind == "number" else parsed if inferred == "number" else None,
            "date_value": datetime.fromisoformat(parsed) if inferred == "date" else None}


def field_rows(sha: str, values: Mapping[str, FieldValue]) -> list[dict[str, Any]]:
    """A document's fields as sidecar rows (FIELD_COLUMNS): one per value, one per element of a list."""
    rows = []
    for name, value in values.items():
        items = value.value if value.kind == "list" else [value.value]
        for position, item in enumerate(items):
            rows.append({"sha": sha, "name": name, "position": position, "kind": value.kind,
                         **typed_columns(value.kind, item), "origin": value.origin})
    return rows
