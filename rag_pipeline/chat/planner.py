"""The deterministic planner: each clause of a question becomes one tool call, without an LLM.

An exact question ("how many", "which ...", "the largest ...", a field's value) is read against the corpus
(chat/reading.py) into the metadata query tool's operations; when the words allow several readings, the call
carries them all as alternatives, and the answer stands only if they agree. An exact question that cannot be read
with confidence is not guessed: it becomes a `cannot_answer` step that says what could not be mapped. Anything else
(what a document says, how, why) is a `semantic_search` of the passages.

A compound question ("list the puzzle projects, and for the fishing one describe its theme") is split into
clauses, planned clause by clause.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rag_pipeline.chat.lexicon import EMPTY_VERBS, RELATION_WORDS, STOP, Lexicon
from rag_pipeline.chat.reading import Reader, Unmapped, compile_reading
from rag_pipeline.embed.embedder import Embedder
from rag_pipeline.fields.registry import RegistryField
from rag_pipeline.fields.terms import declared_terms
from rag_pipeline.index.vector_store import Scope
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar
from rag_pipeline.structured.operations import BY_NAME
from rag_pipeline.structured.profile import corpus_profile
from rag_pipeline.structured.query import load_registry

SEMANTIC_SEARCH = "semantic_search"
QUERY_METADATA = "query_metadata"
CANNOT_ANSWER = "cannot_answer"  # a step, not a tool: an exact question that could not be mapped
_CLAUSE = re.compile(r"(?:;|,?\s+and\s+(?=(?:then\s+)?(?:for|describe|explain|what|how|why|tell|summari[sz]e|"
                     r"who|where|when|which|list|show|give)\b))", re.IGNORECASE)
# Words that make a question ask for an exact answer (a count, a total, a ranking, a breakdown).
EXACT_KINDS = ("count", "sum", "avg", "superlative", "grouping", "comparative")
# An exact question with more words than this that the corpus does not know is about the text, not the fields
# ("how many sessions did the team run"): it is searched, not refused.
MAX_UNMAPPED_WORDS = 2
_WORD = re.compile(r"[a-z]+")
# The reconciliation operation's one-word cues ask where documents and the roster disagree ("contradicts").
MISMATCH = re.compile(r"\b(?:%s)(?:s|es|ed|ing)?\b" % "|".join(
    cue for cue in BY_NAME["reconciliation"].cues if " " not in cue))


@dataclass(frozen=True)
class Action:
    """One tool call: `semantic_search` {"query", "filters"?}, `query_metadata` (an operation of
    structured/operations.py, with `alternatives`: other readings that must give the same answer), or
    `cannot_answer` {"question", "reason"}."""

    tool: str
    args: dict[str, Any]
    alternatives: tuple[dict[str, Any], ...] = ()

    def key(self) -> str:
        """Identical calls have the same key (the loop refuses a repeated one)."""
        return json.dumps([self.tool, self.args], sort_keys=True, default=str)


@dataclass
class FieldCatalog:
    """What the planner knows of the corpus a key may see: its queryable fields and a reader of questions."""

    fields: Mapping[str, RegistryField]
    reader: Reader


def field_catalog(settings: Settings, sidecar: Sidecar, scope: Scope | None = None,
                  embedder: Embedder | None = None) -> FieldCatalog:
    """The catalog of the documents `scope` lets a key see: fields, profile, declared synonyms and terms."""
    registry = load_registry(settings, sidecar, scope)
    synonyms = {name: spec.spec.synonyms for name, spec in registry.items() if spec.spec is not None}
    lexicon = Lexicon(corpus_profile(settings, sidecar, scope), synonyms, declared_terms(settings), embedder)
    return FieldCatalog(registry, Reader(lexicon))


def split_clauses(question: str) -> list[str]:
    """A compound question's clauses (one clause when it is not compound)."""
    parts = [part.strip(" ,.?") for part in _CLAUSE.split(question) if part and part.strip(" ,.?")]
    return parts or [question.strip()]


def plan(question: str, catalog: FieldCatalog) -> list[Action]:
    """The tool calls that answer `question`, in order (identical calls once)."""
    question = " ".join(question.split())[:4000]
    actions: list[Action] = []
    for clause in split_clauses(question):
        action = plan_clause(clause, catalog)
        if action.key() not in {done.key() for done in actions}:
            actions.append(action)
    return actions


def plan_clause(clause: str, catalog: FieldCatalog) -> Action:
    """One call for one clause: its readings as a metadata query, `cannot_answer` for an exact question that
    cannot be read, else a passage search."""
    reader = catalog.reader
    finding = roster_finding(clause)
    if finding is not None:
        return Action(QUERY_METADATA, {"op": "reconciliation", "where": {"status": finding}})
    try:
        readings = reader.readings(clause)
        queries = list({json.dumps(compile_reading(reading, reader), sort_keys=True): compile_reading(reading, reader)
                        for reading in readings}.values())
    except Unmapped as unmapped:
        if asks_exactly(clause, reader.lexicon) and len(unknown_words(clause, reader.lexicon)) <= MAX_UNMAPPED_WORDS:
            return Action(CANNOT_ANSWER, {"question": clause, "reason": str(unmapped)})
        return search(clause, catalog)
    return Action(QUERY_METADATA, queries[0], tuple(queries[1:]))


def roster_finding(clause: str) -> str | None:
    """The reconciliation status a question about the roster asks for ("which documents contradict the roster":
    MISMATCH; "... are not in the roster": MISSING_IN_ROSTER; "... only in the roster": ROSTER_ONLY)."""
    words = set(_WORD.findall(clause.lower()))
    if not words & {"roster", "rosters"}:
        return None
    text = " ".join(_WORD.findall(clause.lower()))
    if re.search(r"\b(?:not|missing) (?:in|from|on) the rosters?\b", text):
        return "MISSING_IN_ROSTER"
    if re.search(r"\bonly (?:in|on) the rosters?\b", text):
        return "ROSTER_ONLY"
    if MISMATCH.search(text):
        return "MISMATCH"
    return None


def unknown_words(clause: str, lexicon: Lexicon) -> list[str]:
    """The clause's words that neither the corpus (fields, values, classes, terms) nor the question grammar
    explains: many of them make it a question about the text."""
    return [span.text for span in lexicon.spans(lexicon.tokens(clause))
            if not span.known() and span.text not in STOP and span.text not in RELATION_WORDS
            and span.text not in EMPTY_VERBS]


def asks_exactly(clause: str, lexicon: Lexicon) -> bool:
    """Whether the clause asks for a count, total, ranking or breakdown of things the corpus knows (its classes,
    fields or documents in general), or a field of a document it names ("what is the area of maryland"): "how
    many sessions did the team run" is about a text, not the documents."""
    spans = lexicon.spans(lexicon.tokens(clause))
    named_field = any(span.has("field") or span.has("quantity") for span in spans)
    named_thing = any(span.has("value") or (span.has("class") and span.get("class") is not None) for span in spans)
    if named_field and named_thing and spans and (spans[0].has("question") or spans[0].text == "how"):
        return True
    if named_field and spans and spans[0].has("question") and any(span.has("scope") for span in spans):
        return True  # "where is the lowest point in the country"
    if spans and spans[0].has("question") and any(span.has("class") and span.get("class") is not None
                                                  for span in spans[1:7]):
        return True  # "show me all the major lakes", "which rivers ..."
    for index, span in enumerate(spans):
        if any(span.has(kind) for kind in EXACT_KINDS):
            following = spans[index + 1: index + 4]
            if any(item.has("class") or item.has("field") or item.has("quantity") or item.has("value")
                   or item.has("unit") for item in following):
                return True
    return False


def search(clause: str, catalog: FieldCatalog) -> Action:
    """A passage search; a clause that points back at a value ("for the fishing one, ...") searches only the
    documents with that value of a field declared filterable."""
    query = standalone(clause)
    filters: dict[str, Any] = {}
    if query != clause.strip():
        lexicon = catalog.reader.lexicon
        for span in lexicon.spans(lexicon.tokens(clause)):
            for name, _, _ in span.get("value") or []:
                spec = catalog.fields.get(name)
                if spec is not None and spec.spec is not None and spec.spec.filterable and name not in filters:
                    filters[name] = lexicon.profile.fields[name].values.get(span.text, span.text)
    return Action(SEMANTIC_SEARCH, {"query": query, **({"filters": filters} if filters else {})})


def standalone(clause: str) -> str:
    """A clause that points back ("for the fishing one, describe its theme") as a question of its own ("describe
    the theme of the fishing one"): the passages are ranked and answered against this text."""
    match = re.match(r"^(?:and\s+)?(?:for|of|about)\s+(the\s+.+?\s+(?:one|ones))\s*,?\s+(.+)$", clause.strip(),
                     re.IGNORECASE)
    if match is None:
        return clause.strip()
    rest = re.sub(r"\b(its|their)\b", "the", match.group(2))
    subject = re.sub(r"^the\s+|\s+(?:one|ones)$", "", match.group(1))
    return f"{rest} of {subject}"


def answer_value(result: Any, args: Mapping[str, Any]) -> Any:
    """The answer a metadata result gives, comparable between readings and shown as `exact`: a count, a number,
    the values (one, or a list), or the counts per value."""
    op = result.op
    rows = result.rows
    if op in ("count", "count_distinct"):
        return rows[0]["count"] if rows else 0
    if op == "group_by":
        return {str(row["value"]): row.get("count") for row in rows}
    field = args.get("return") or args.get("field")
    values: list[Any] = []
    for row in rows:
        if "value" in row:
            item = row["value"]
        elif field and field in row:
            item = row[field]
        else:
            item = row.get("path")
        values.extend(item if isinstance(item, list) else [item])
    values = [value for value in values if value is not None]
    if len(values) == 1:
        return values[0]
    return sorted(values, key=lambda value: str(value).lower())


def same_answer(first: Any, second: Any) -> bool:
    """Two readings' answers agree: equal, as sets for lists, case-insensitively for text."""
    def normal(value: Any) -> Any:
        if isinstance(value, dict):
            return {str(key).lower(): item for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return frozenset(normal(item) for item in value)
        if isinstance(value, float) and value.is_integer():
            return int(value)
        return value.lower() if isinstance(value, str) else value
    return normal(first) == normal(second)


def readings_note(alternatives: Sequence[Mapping[str, Any]]) -> str:
    """What the readings were, for the answer that says they disagree."""
    return "; ".join(json.dumps(query, sort_keys=True)[:200] for query in alternatives)
