"""The sources file (RAG_SOURCES_FILE): one YAML mapping whose sections configure several layers.

    sources: {...}   # named sets of roots and upload areas (ingest/sources.py)
    roster: [...]    # master data joined onto documents (structured/roster.py)
    fields: {...}    # field declarations: types, filters, enrichment (fields/registry.py)
    terms: {...}     # business terms: "major city: population > 150000" (fields/terms.py)

Each layer reads its own section through `read_sources_file`, so the file's format lives in one place.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from rag_pipeline.errors import ConfigError

SECTIONS = ("sources", "roster", "fields", "terms")


def read_sources_file(path: Path) -> dict:
    """The parsed YAML of the sources file (empty when the file is empty); ConfigError when it cannot be read."""
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"{path}: cannot read the sources file (RAG_SOURCES_FILE): {error}") from error
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the sources file must be a mapping with a `sources:` key")
    return raw


def sources_file_mtime(path: Path) -> int:
    """The file's modification time (ns), the key of caches that read it again when it changes; ConfigError when
    it cannot be read."""
    try:
        return path.stat().st_mtime_ns
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the sources file (RAG_SOURCES_FILE): {error}") from error
