"""Corpus rules (RAG_CORPUS_RULES, a YAML file) that discovery obeys for ingest and the manifest alike:

    include: ["docs/**", "handbook/*.md"]   # globs on the root-relative path; none given: everything
    exclude: ["docs/drafts/**"]
    types: [md, pdf]                        # document types to ingest; none given: every accepted type
    min_bytes: 10
    max_bytes: 20000000
    tags:                                   # glob -> tag (or list of tags) for the files it matches
      "handbook/**": policy
      "legal/**": [legal, contract]

A file the rules leave out is excluded (not refused), with the rule that decided it as the reason. A document's
tags are those of every pattern one of its paths matches; they land in the sidecar and in every chunk's payload
(filter key `tags`), and a change of the rules re-tags indexed documents without re-embedding them.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from rag_pipeline.errors import ConfigError
from rag_pipeline.ingest.formats import DOC_TYPES

KEYS = ("include", "exclude", "types", "min_bytes", "max_bytes", "tags")
TAG = re.compile(r"\w[\w.:/-]*")  # (whole) a word character, then word characters, dots, colons, slashes, dashes


def ignoring_pattern(rel_path: str, patterns: Sequence[str]) -> str | None:
    """The first pattern that matches the root-relative POSIX path, or None. Glob match; "dir/**" also matches
    dir itself and all below it, and "**/x" also matches x at the top."""
    for pattern in patterns:
        if fnmatch.fnmatchcase(rel_path, pattern):
            return pattern
        if pattern.startswith("**/") and fnmatch.fnmatchcase(rel_path, pattern[3:]):
            return pattern
        if pattern.endswith("/**"):
            prefix = pattern[:-3]
            if "*" not in prefix and "?" not in prefix and (rel_path == prefix or rel_path.startswith(prefix + "/")):
                return pattern
    return None


def is_ignored(rel_path: str, patterns: Sequence[str]) -> bool:
    return ignoring_pattern(rel_path, patterns) is not None



@dataclass(frozen=True)
class CorpusRules:
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    min_bytes: int = 0
    max_bytes: int | None = None
    tags: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (glob, tags) in file order
    source: str = "corpus rules"  # named in every reason

    def tags_for(self, rel_path: str) -> tuple[str, ...]:
        """The sorted tags of every tag pattern the root-relative path matches."""
        return tuple(sorted({tag for pattern, tags in self.tags if ignoring_pattern(rel_path, [pattern])
                             for tag in tags}))

    def exclusion(self, rel_path: str, doc_type: str, size: int) -> str | None:
        """Why the rules leave this file out, or None when they keep it."""
        if self.include and ignoring_pattern(rel_path, self.include) is None:
            return f"matches no include pattern of {self.source}"
        pattern = ignoring_pattern(rel_path, self.exclude)
        if pattern:
            return f"excluded by pattern {pattern!r} of {self.source}"
        if self.types and doc_type not in self.types:
            return f"type {doc_type} is not in the types of {self.source} ({', '.join(self.types)})"
        if size < self.min_bytes:
            return f"{size:,} bytes is below min_bytes {self.min_bytes:,} of {self.source}"
        if self.max_bytes is not None and size > self.max_bytes:
            return f"{size:,} bytes is above max_bytes {self.max_bytes:,} of {self.source}"
        return None


def load_rules(path: str | Path) -> CorpusRules:
    """The rules in `path`; ConfigError naming the file and every problem."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as error:
        raise ConfigError(f"{path}: cannot read the corpus rules: {error}") from error
    return parse_rules(raw, str(path))


def parse_rules(raw: object, source: str) -> CorpusRules:
    """Corpus rules from a mapping of KEYS (`source` names where they come from, in errors and reasons)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: the corpus rules must be a mapping of {', '.join(KEYS)}")
    problems = [f"unknown key {key!r} (allowed: {', '.join(KEYS)})" for key in raw if key not in KEYS]
    lists = {}
    for key in ("include", "exclude", "types"):
        value = raw.get(key) or []
        if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
            problems.append(f"{key} must be a list of strings")
            value = []
        lists[key] = tuple(item.strip() for item in value)
    unknown_types = sorted(set(lists["types"]) - set(DOC_TYPES))
    if unknown_types:
        problems.append(f"unknown type(s) {', '.join(unknown_types)} (allowed: {', '.join(sorted(DOC_TYPES))})")
    bounds = {}
    for key in ("min_bytes", "max_bytes"):
        value = raw.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            problems.append(f"{key} must be a whole number of bytes >= 0, got {value!r}")
            value = None
        bounds[key] = value
    tags = parse_tags(raw.get("tags"), problems)
    if problems:
        raise ConfigError(f"{source}: " + "; ".join(problems))
    return CorpusRules(lists["include"], lists["exclude"], lists["types"], bounds["min_bytes"] or 0,
                       bounds["max_bytes"], tags, source=source)


def parse_tags(raw: object, problems: list[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The `tags` mapping (glob -> tag or list of tags) as pairs; problems appended to `problems`."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        problems.append("tags must be a mapping of glob: tag (or a list of tags)")
        return ()
    pairs = []
    for pattern, value in raw.items():
        values = [value] if isinstance(value, str) else value
        if not isinstance(pattern, str) or not pattern.strip():
            problems.append(f"tag pattern {pattern!r} must be a non-empty glob")
        elif not isinstance(values, list) or not values or not all(isinstance(tag, str) and TAG.fullmatch(tag)
                                                                   for tag in values):
            problems.append(f"tags of {pattern!r} must be a tag or a list of tags (letters, digits, _ . : / -), "
                            f"got {value!r}")
        else:
            pairs.append((pattern.strip(), tuple(values)))
    return tuple(pairs)


def configured_rules(rules_path: Path | None) -> CorpusRules | None:
    """The rules of RAG_CORPUS_RULES, or None when unset."""
    return load_rules(rules_path) if rules_path else None
