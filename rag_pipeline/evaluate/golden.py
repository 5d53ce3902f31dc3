"""Golden question sets (YAML): questions with graded relevance per file, optional expected answers, a kind
(semantic | aggregation | out_of_scope) and tags. An aggregation question has no relevance: it carries the metadata
query that answers it (`query`: {op, field?, by?, where?, limit?}) and its exact answer (`expected`: one of {count},
{values}, {groups}, {documents}, {value}), and is scored by exact-answer accuracy, never as retrieval.
Paths are matched by suffix: "math/trig.md" matches
"/docs/math/trig.md". The loader reports every problem at once, including relevance paths that match no
document (a typo in a golden file must fail loudly)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml

from rag_pipeline.errors import ConfigError

Kind = Literal["semantic", "aggregation", "out_of_scope"]
KINDS = ("semantic", "aggregation", "out_of_scope")
EXPECTED_FORMS = ("count", "values", "groups", "documents", "value")


class GoldenSetError(ConfigError):
    """The golden file is malformed; the message lists every problem."""


@dataclass(frozen=True)
class GoldenQuestion:
    id: str
    question: str
    kind: Kind
    relevance: dict[str, int]  # path suffix -> grade 1..3 (grade 0 entries are dropped)
    expected_answer: str | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)
    query: dict | None = None  # aggregation: the metadata query that answers it
    expected: dict | None = None  # aggregation: the exact answer (one of EXPECTED_FORMS)


@dataclass(frozen=True)
class GoldenSet:
    name: str
    path: Path
    questions: list[GoldenQuestion]


def matches(path: str, suffix: str) -> bool:
    """True when `suffix` names `path`: equal, or a trailing run of whole path components."""
    path, suffix = path.replace("\\", "/"), suffix.replace("\\", "/").lstrip("./")
    return path == suffix or path.endswith("/" + suffix)


def load_golden(path: str | Path, known_paths: Iterable[str] | None = None) -> GoldenSet:
    """The golden set at `path`. With `known_paths` (the indexed documents' paths), every relevance key must
    match exactly one of them."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise GoldenSetError(f"{path}: cannot read the golden set: {error}") from error
    if not isinstance(raw, dict) or not isinstance(raw.get("questions"), list) or not raw["questions"]:
        raise GoldenSetError(f"{path}: expected a mapping with a non-empty 'questions' list")
    known = sorted(set(known_paths)) if known_paths is not None else None
    problems: list[str] = []
    questions: list[GoldenQuestion] = []
    seen: set[str] = set()
    for index, entry in enumerate(raw["questions"], start=1):
        where = f"question #{index}"
        if not isinstance(entry, dict):
            problems.append(f"{where}: not a mapping")
            continue
        qid = str(entry.get("id") or "")
        where = f"question {qid or '#' + str(index)}"
        unknown_keys = sorted(set(entry) - {"id", "question", "kind", "relevance", "expected_files",
                                            "expected_answer", "tags", "query", "expected"})
        if unknown_keys:
            problems.append(f"{where}: unknown field(s) {', '.join(unknown_keys)}")
        if not qid:
            problems.append(f"{where}: missing id")
        elif qid in seen:
            problems.append(f"{where}: duplicate id")
        seen.add(qid)
        text = entry.get("question")
        if not isinstance(text, str) or not text.strip():
            problems.append(f"{where}: missing question text")
        kind = entry.get("kind", "semantic")
        if kind not in KINDS:
            problems.append(f"{where}: unknown kind {kind!r} (allowed: {', '.join(KINDS)})")
        relevance = _relevance(entry, where, problems)
        if kind == "out_of_scope" and relevance:
            problems.append(f"{where}: an out_of_scope question has no relevant files")
        query, expected = entry.get("query"), entry.get("expected")
        if kind == "aggregation":
            if not isinstance(query, dict) or "op" not in query:
                problems.append(f"{where}: an aggregation question needs a `query` with an `op`")
            if not isinstance(expected, dict) or len(expected) != 1 or next(iter(expected)) not in EXPECTED_FORMS:
                problems.append(f"{where}: an aggregation question needs `expected` with one of "
                                f"{', '.join(EXPECTED_FORMS)}")
        elif query is not None or expected is not None:
            problems.append(f"{where}: only aggregation questions have `query` and `expected`")
        if kind not in ("out_of_scope", "aggregation") and not relevance:
            problems.append(f"{where}: needs 'relevance' or 'expected_files' (or kind: out_of_scope)")
        if known is not None:
            for suffix in relevance:
                found = [candidate for candidate in known if matches(candidate, suffix)]
                if not found:
                    problems.append(f"{where}: relevance path {suffix!r} matches no indexed document")
                elif len(found) > 1:
                    problems.append(f"{where}: relevance path {suffix!r} is ambiguous ({len(found)} documents)")
        tags = entry.get("tags") or []
        if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
            problems.append(f"{where}: tags must be a list of strings")
            tags = []
        answer = entry.get("expected_answer")
        questions.append(GoldenQuestion(qid, (text or "").strip(), kind, relevance,
                                        str(answer) if answer is not None else None, tuple(tags),
                                        query if kind == "aggregation" else None,
                                        expected if kind == "aggregation" else None))
    if problems:
        raise GoldenSetError(f"{path}: {len(problems)} problem(s):\n  " + "\n  ".join(problems))
    return GoldenSet(str(raw.get("name") or path.stem), path, questions)


def _relevance(entry: dict, where: str, problems: list[str]) -> dict[str, int]:
    """Graded relevance from `relevance` (suffix -> 0..3) or binary `expected_files` (grade 1)."""
    relevance: dict[str, int] = {}
    graded = entry.get("relevance") or {}
    if not isinstance(graded, dict):
        problems.append(f"{where}: relevance must map path suffixes to grades 0-3")
        graded = {}
    for suffix, grade in graded.items():
        if isinstance(grade, bool) or not isinstance(grade, int) or not 0 <= grade <= 3:
            problems.append(f"{where}: grade of {suffix!r} must be an integer 0-3, got {grade!r}")
        elif grade > 0:
            relevance[str(suffix)] = grade
    files = entry.get("expected_files") or []
    if not isinstance(files, list):
        problems.append(f"{where}: expected_files must be a list")
        files = []
    for suffix in files:
        relevance.setdefault(str(suffix), 1)
    return relevance
