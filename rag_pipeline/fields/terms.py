"""Business terms: words a question may use for a condition on fields, declared once in the sources file.

    terms:
      major city: population > 150000      # "major" before "city"/"cities" adds population > 150000
      major river: length_km > 750
      bestseller: copies_sold >= 1000000   # a term alone: documents that satisfy the condition
      flagship: status = released          # = for a value (case-insensitive), != is not offered
      the united states: all               # a name of the whole collection: "rivers in the united states" filters
                                           # nothing ("in", "of", "across" and "the" before it too)

A condition is FIELD OP VALUE with OP one of > >= < <= =, or several joined by "and". When the term's last word
names a class of documents in the corpus (city, river, contract), the words before it qualify that class; otherwise
the whole term stands for the documents matching the condition. The deterministic planner, the agent (its prompt
lists them) and the metadata query tool (`where: {"term": NAME}`, `rag-pipeline query --where term=NAME`: with_terms)
all honour them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from rag_pipeline.errors import ConfigError, InputError
from rag_pipeline.fields.values import FIELD_NAME, text_kind
from rag_pipeline.settings import Settings
from rag_pipeline.sources_file import read_sources_file, sources_file_mtime

_CONDITION = re.compile(r"\s*([a-z][a-z0-9_]*)\s*(>=|<=|>|<|=)\s*(.+?)\s*$")
OPERATORS = {">": "gt", ">=": "gte", "<": "lt", "<=": "lte"}
ALL = "all"  # the condition of a term that names the whole collection


@dataclass(frozen=True)
class Term:
    """One business term: its words (lower case), and the where clauses (the query tool's JSON form) it means."""

    phrase: str
    words: tuple[str, ...]
    where: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"term": self.phrase, "where": self.where}


def parse_condition(text: str, where: str) -> dict[str, Any]:
    """`population > 150000 and state = Texas` as where clauses (`all`: none, the whole collection); ConfigError
    naming `where` when it is not one."""
    clauses: dict[str, Any] = {}
    if str(text).strip().lower() == ALL:
        return clauses
    for part in re.split(r"\s+and\s+", str(text).strip()):
        match = _CONDITION.fullmatch(part)
        if match is None or not FIELD_NAME.fullmatch(match.group(1)):
            raise ConfigError(f"{where}: {part!r} is not a condition FIELD OP VALUE (OP one of > >= < <= =)")
        name, operator, raw = match.groups()
        raw = raw.strip().strip("'\"")
        kind, value = text_kind(raw)
        if operator == "=":
            clauses[name] = value if kind == "number" else raw
        else:
            if kind not in ("number", "date"):
                raise ConfigError(f"{where}: {operator} needs a number or a date, got {raw!r}")
            clauses.setdefault(name, {})[OPERATORS[operator]] = value
    return clauses


@lru_cache(maxsize=8)
def _declared(path: Path, mtime_ns: int) -> tuple[Term, ...]:
    raw = read_sources_file(path).get("terms") or {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: `terms:` must map each term to a condition (major city: population > 150000)")
    terms = []
    for phrase, condition in raw.items():
        words = tuple(re.findall(r"[a-z0-9]+", str(phrase).lower()))
        if not words:
            raise ConfigError(f"{path}: term {phrase!r} has no words")
        terms.append(Term(" ".join(words), words, parse_condition(condition, f"{path}: term {phrase!r}")))
    return tuple(terms)


def declared_terms(settings: Settings) -> tuple[Term, ...]:
    """The business terms of RAG_SOURCES_FILE (none without one); re-read when the file changes."""
    path = settings.sources_file
    if path is None:
        return ()
    return _declared(Path(path), sources_file_mtime(Path(path)))


def with_terms(body: Any, terms: tuple[Term, ...]) -> Any:
    """A query's JSON form with every `where: {"term": NAME}` (or the CLI's `term=NAME`) replaced by the term's
    clauses, in nested queries too; InputError (unknown_term) for a term the sources file does not declare, or
    one that sets a field the where sets itself."""
    if isinstance(body, list):
        return [with_terms(item, terms) for item in body]
    if not isinstance(body, dict):
        return body
    expanded = {key: with_terms(value, terms) for key, value in body.items()}
    where = expanded.get("where")
    if isinstance(where, dict) and "term" in where:
        where = dict(where)
        term = term_named(where.pop("term"), terms)
        for name, clause in term.where.items():
            if name in where:
                raise InputError(f"where 'term': {term.phrase!r} sets {name!r}, and so does the where itself",
                                 code="unknown_term")
            where[name] = clause
        expanded["where"] = where
    elif isinstance(where, list):
        expanded["where"] = [clause for item in where for clause in (
            cli_clauses(term_named(item.split("=", 1)[1], terms))
            if isinstance(item, str) and item.split("=", 1)[0].strip() == "term" and "=" in item else [item])]
    return expanded


def term_named(named: Any, terms: tuple[Term, ...]) -> Term:
    phrase = " ".join(re.findall(r"[a-z0-9]+", str(named).lower()))
    term = next((term for term in terms if term.phrase == phrase), None)
    if term is None:
        declared = ", ".join(repr(term.phrase) for term in terms) or "none"
        raise InputError(f"where 'term': {str(named)[:80]!r} is not a declared term (declared: {declared})",
                         code="unknown_term")
    return term


def cli_clauses(term: Term) -> list[str]:
    """The term's clauses in the CLI's `F=V` / `F>V` form."""
    symbols = {value: key for key, value in OPERATORS.items()}
    clauses = []
    for name, clause in term.where.items():
        if isinstance(clause, dict):
            clauses += [f"{name}{symbols[op]}{value}" for op, value in clause.items()]
        else:
            clauses.append(f"{name}={clause}")
    return clauses
