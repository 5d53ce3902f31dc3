"""Named sources (RAG_SOURCES_FILE, a YAML file): what the index is made of.

    sources:
      handbook:
        roots: [/srv/handbook, ../wiki]      # relative roots are relative to this file's folder
        rules: {include: ["**/*.md"], tags: {"legal/**": legal}}   # the corpus rules keys (ingest/corpus_rules.py)
      inbox:
        uploads: true                        # an upload area: <data dir>/uploads/inbox
        body_facts: false                    # no fields from its documents' bodies (default: RAG_BODY_FACTS)
    roster: [...]                            # canonical master data joined onto documents (structured/roster.py)
    fields: {...}                            # field declarations: types, filters, enrichment (fields/registry.py)

Every document records the sources that hold it. Syncing a source replaces that source's files only: a document
leaves the index when no source holds it any more. Without a file, RAG_ROOTS (or the roots given to
`rag-pipeline ingest`) form the source `default`, with RAG_CORPUS_RULES.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rag_pipeline.errors import ConfigError, InputError, NotFound
from rag_pipeline.ingest.corpus_rules import CorpusRules, configured_rules, parse_rules
from rag_pipeline.settings import Settings
from rag_pipeline.sources_file import SECTIONS, read_sources_file

DEFAULT_SOURCE = "default"
SOURCE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
SOURCE_KEYS = ("roots", "rules", "uploads", "body_facts")


@dataclass(frozen=True)
class SourceSpec:
    """One source: its roots (an upload area's single root is its folder under the data dir), its rules, and
    whether facts stated in its documents' bodies are fields."""

    name: str
    roots: tuple[Path, ...]
    rules: CorpusRules | None = None
    uploads: bool = False
    body_facts: bool = True

    @property
    def kind(self) -> str:
        return "uploads" if self.uploads else "roots"


def check_source_name(name: str) -> str:
    """The name if it is a valid source name (letters, digits, '.', '_', '-'; at most 64), else InputError."""
    if not isinstance(name, str) or not SOURCE_NAME.fullmatch(name):
        raise InputError(f"invalid source name {name!r}: use letters, digits, '.', '_' or '-' (at most 64, "
                         "starting with a letter or digit)", code="invalid_source")
    return name


def upload_root(settings: Settings, name: str) -> Path:
    """The folder of an upload source's files."""
    return (settings.data_dir / "uploads" / check_source_name(name)).resolve()


def load_sources_file(path: Path, settings: Settings) -> dict[str, SourceSpec]:
    """The sources of the file; ConfigError naming the file and every problem."""
    raw = read_sources_file(path)
    if not isinstance(raw, dict) or not isinstance(raw.get("sources"), dict) or not raw["sources"]:
        raise ConfigError(f"{path}: the sources file needs a `sources:` mapping of NAME: {{roots: [...], rules: "
                          "{...}} or NAME: {uploads: true}")
    problems = [f"{path}: unknown top-level key {key!r} (allowed: {', '.join(SECTIONS)})"
                for key in raw if key not in SECTIONS]
    specs: dict[str, SourceSpec] = {}
    for name, entry in raw["sources"].items():
        where = f"{path}: source {name!r}"
        if not isinstance(name, str) or not SOURCE_NAME.fullmatch(name):
            problems.append(f"{where}: invalid name (letters, digits, '.', '_', '-'; at most 64)")
            continue
        if not isinstance(entry, dict):
            problems.append(f"{where}: needs a mapping with roots (and rules), or uploads: true")
            continue
        unknown = [key for key in entry if key not in SOURCE_KEYS]
        if unknown:
            problems.append(f"{where}: unknown key(s) {', '.join(map(repr, unknown))} (allowed: "
                            f"{', '.join(SOURCE_KEYS)})")
            continue
        try:
            rules = parse_rules(entry["rules"], f"{path} (source {name})") if entry.get("rules") is not None \
                else None
        except ConfigError as error:
            problems.append(error.message)
            continue
        uploads, roots = entry.get("uploads", False), entry.get("roots")
        body_facts = entry.get("body_facts", settings.body_facts)
        if not isinstance(body_facts, bool):
            problems.append(f"{where}: body_facts must be true or false, got {body_facts!r}")
            continue
        if uploads is True:
            if roots:
                problems.append(f"{where}: an upload source has no roots (its files live under the data dir)")
                continue
            specs[name] = SourceSpec(name, (upload_root(settings, name),), rules, uploads=True, body_facts=body_facts)
        elif uploads is not False:
            problems.append(f"{where}: uploads must be true or false, got {uploads!r}")
        elif not isinstance(roots, list) or not roots or not all(isinstance(root, str) and root for root in roots):
            problems.append(f"{where}: roots must be a non-empty list of folders")
        else:
            specs[name] = SourceSpec(name, tuple((path.parent / Path(root).expanduser()).resolve() for root in roots),
                                     rules, body_facts=body_facts)
    if problems:
        raise ConfigError("; ".join(problems))
    return specs


def configured_sources(settings: Settings) -> dict[str, SourceSpec]:
    """The sources to sync when none is named: those of RAG_SOURCES_FILE, plus `default` from RAG_ROOTS when the
    file does not define it."""
    specs = load_sources_file(settings.sources_file, settings) if settings.sources_file else {}
    if settings.roots and DEFAULT_SOURCE not in specs:
        specs[DEFAULT_SOURCE] = SourceSpec(DEFAULT_SOURCE, tuple(Path(root).resolve() for root in settings.roots),
                                           configured_rules(settings.corpus_rules), body_facts=settings.body_facts)
    return specs


def resolve_source(settings: Settings, name: str, roots: Sequence[str | Path] | None = None,
                   stored_roots: Mapping[str, Sequence[str]] | None = None) -> SourceSpec:
    """The source `name` to sync: with `roots`, exactly those roots (under the file's rules for that source, else
    RAG_CORPUS_RULES); without, the file's roots, else the roots it was last synced with (`stored_roots`)."""
    check_source_name(name)
    configured = configured_sources(settings)
    spec = configured.get(name)
    if roots:
        if spec is not None and spec.uploads:
            raise InputError(f"source {name!r} is an upload area: upload files to it (rag-pipeline upload) instead "
                             "of giving roots", code="upload_source")
        rules = spec.rules if spec is not None else configured_rules(settings.corpus_rules)
        return SourceSpec(name, tuple(Path(root).resolve() for root in roots), rules,
                          body_facts=spec.body_facts if spec is not None else settings.body_facts)
    if spec is not None:
        return spec
    if stored_roots and name in stored_roots:
        return SourceSpec(name, tuple(Path(root) for root in stored_roots[name]),
                          configured_rules(settings.corpus_rules), body_facts=settings.body_facts)
    known = sorted(set(configured) | set(stored_roots or ()))
    raise NotFound(f"unknown source {name!r}: it is not in RAG_SOURCES_FILE and was never synced with roots"
                   + (f" (known: {', '.join(known)})" if known else ""), code="unknown_source")
