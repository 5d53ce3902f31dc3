"""The deterministic planner: reads a question against the field registry (field names, declared synonyms and the
values present in the sidecar) and plans tool calls without an LLM.

Counting, listing, grouping, top-n and lookup questions become `query_metadata` calls; the rest `semantic_search`;
a compound question ("list the puzzle projects, and for the fishing one describe its theme") is split into clauses
and planned clause by clause. Values found in a clause become where filters (a value named in the question, a year
for a date field or the `year` field, comparisons like "after 2022" or "more than 100").
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rag_pipeline.fields.registry import RegistryField
from rag_pipeline.ingest.formats import FORMATS
from rag_pipeline.structured.operations import BY_NAME as OPERATIONS_BY_NAME

SEMANTIC_SEARCH = "semantic_search"
QUERY_METADATA = "query_metadata"
DEFAULT_TOP = 5
NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
                "ten": 10, "twenty": 20}
TYPE_WORDS = {word: fmt.doc_type for fmt in FORMATS for word in fmt.words}  # "slides" -> pptx
NOT_VALUES = {"id", "path", "ingested_at", "chars", "pages", "folder"}  # values a question names only with the field
UNNAMED = {"id", "path", "pages", "chars", "ingested_at"}  # built-ins whose names are ordinary words in questions
MONTHS = {month: number for number, month in enumerate(
    "january february march april may june july august september october november december".split(), start=1)}
# Ways questions name common document properties, beside their names and declared synonyms.
DEFAULT_SYNONYMS = {"author": ["wrote", "written by", "writer", "authors"], "created": ["created", "made"],
                    "modified": ["modified", "updated", "changed"], "title": ["called", "named"],
                    "type": ["file type", "document type", "format"], "folder": ["folder", "directory"]}
_CLAUSE = re.compile(r"(?:;|,?\s+and\s+(?=(?:then\s+)?(?:for|describe|explain|what|how|why|tell|summari[sz]e|"
                     r"who|where|when|which|list|show|give)\b))", re.IGNORECASE)


def cues(operation: str) -> str:
    """The words that ask for an operation (structured/operations.py), as a regex alternation."""
    return "|".join(re.escape(cue) for cue in OPERATIONS_BY_NAME[operation].cues)


_COUNT = re.compile(rf"\b({cues('count')})\b")
_TOP = re.compile(rf"\b({cues('top_n')})\b")
_GROUP = re.compile(rf"\b(?:{cues('group_by')})\s+(?:the\s+|their\s+)?([a-z][a-z _-]*)")
# What a question counts or lists must be documents (not "sessions" or "levels" inside one document's text).
_DOCUMENTS = (r"(?:documents?|docs|files?|projects?|reports?|contracts?|pages|pitch(?:es)?|notes|games|decks|"
              r"presentations|pdfs|entries|ones|those|these|them)")
_COUNTED = re.compile(rf"\b(?:{cues('count')})\s+(?:(?:the|all|of)\s+)*(?:[\w-]+\s+){{0,3}}?" + _DOCUMENTS + r"\b")
_LISTED = re.compile(r"^(?:list|show|name|give me|find)\b|\b(?:which|what)\s+(?:[\w-]+\s+){0,3}?" + _DOCUMENTS +
                     r"\b")
_YEAR = re.compile(r"\b(19\d{2}|20\d{2})\b")
_COMPARE = re.compile(r"\b(after|since|from|before|until|more than|over|above|greater than|at least|less than|"
                      r"fewer than|under|below|at most)\s+(\d+(?:\.\d+)?)")
_BETWEEN = re.compile(r"\bbetween\s+(\d+(?:\.\d+)?)\s+and\s+(\d+(?:\.\d+)?)")


@dataclass(frozen=True)
class Action:
    """One tool call: `semantic_search` {"query", "filters"?} or `query_metadata` {"op", "field"?, "by"?, "where"?,
    "limit"?}."""

    tool: str
    args: dict[str, Any]

    def key(self) -> str:
        """Identical calls have the same key (the loop refuses a repeated one)."""
        import json

        return json.dumps([self.tool, self.args], sort_keys=True, default=str)


@dataclass
class FieldCatalog:
    """What the planner knows: every queryable field and, for fields with few values, the values present."""

    fields: Mapping[str, RegistryField]
    values: Mapping[str, Sequence[str]] = field(default_factory=dict)  # field -> values present (lower case kept)

    def phrases(self) -> list[tuple[str, str]]:
        """(phrase, field) for every way a question names a field: its name (with spaces), plural, synonyms."""
        found = []
        for name, spec in self.fields.items():
            if name in UNNAMED:
                continue
            words = [name.replace("_", " "), *DEFAULT_SYNONYMS.get(name, [])]
            if spec.spec is not None:
                words += [synonym.lower() for synonym in spec.spec.synonyms]
            if name.endswith("er"):  # publisher: publishes, published
                words += [name[:-2] + "es", name[:-2] + "ed"]
            for word in words:
                found += [(word, name), (word + "s", name)]
        return sorted(found, key=lambda item: -len(item[0]))


def word_pattern(phrase: str, plural: bool = False) -> re.Pattern[str]:
    """The phrase as whole words (a hyphen may follow: "citrus-themed"; with `plural`, an s may too)."""
    return re.compile(rf"(?<![\w-]){re.escape(phrase)}{'s?' if plural else ''}(?!\w)", re.IGNORECASE)


def split_clauses(question: str) -> list[str]:
    """A compound question's clauses (one clause when it is not compound)."""
    parts = [part.strip(" ,.?") for part in _CLAUSE.split(question) if part and part.strip(" ,.?")]
    return parts or [question.strip()]


def mentioned_fields(text: str, catalog: FieldCatalog) -> list[tuple[int, str]]:
    """(position, field) of every field the text names, longest phrases first, not overlapping."""
    taken: list[tuple[int, int]] = []
    found = []
    for phrase, name in catalog.phrases():
        for match in word_pattern(phrase).finditer(text):
            if any(start < match.end() and match.start() < end for start, end in taken):
                continue
            taken.append((match.start(), match.end()))
            found.append((match.start(), name))
    return sorted(found)


def mentioned_values(text: str, catalog: FieldCatalog, named: set[str]) -> dict[str, str | list[str]]:
    """field -> the value the text names, or the values (any of them: "racing games or platformers"); longest
    first; a value of several fields goes to a field the text also names, else to the one with most documents."""
    candidates: list[tuple[str, list[str]]] = []
    index: dict[str, list[str]] = {}
    for name, values in catalog.values.items():
        if name in NOT_VALUES:
            continue
        for value in values:
            if len(value) >= 2:
                index.setdefault(value.lower(), []).append(name)
    for value in sorted(index, key=len, reverse=True):
        candidates.append((value, index[value]))
    found: dict[str, list[str]] = {}
    taken: list[tuple[int, int]] = []
    for value, fields in candidates:
        match = word_pattern(value, plural=True).search(text)
        if match is None or any(start < match.end() and match.start() < end for start, end in taken):
            continue
        choice = [name for name in fields if name in named] or sorted(
            fields, key=lambda name: (-catalog.fields[name].documents if name in catalog.fields else 0, name))
        name = choice[0]
        taken.append((match.start(), match.end()))
        found.setdefault(name, []).append(original_value(catalog, name, value))
    for word, doc_type in sorted(TYPE_WORDS.items(), key=lambda item: -len(item[0])):
        if "type" not in found and word_pattern(word).search(text) and "type" in catalog.fields:
            found["type"] = [doc_type]
    return {name: values[0] if len(values) == 1 else values for name, values in found.items()}


def original_value(catalog: FieldCatalog, name: str, lowered: str) -> str:
    return next((value for value in catalog.values.get(name, ()) if value.lower() == lowered), lowered)


def number_in(text: str) -> int | None:
    """How many a top-n question asks for ("top 3", "which five", "2 largest"), within 1..100; a year is not one."""
    words = r"(\d{1,3}|" + "|".join(NUMBER_WORDS) + r")"
    match = re.search(r"\b(?:top|first|the|which|what|list)\s+" + words + r"\b(?!-)", text) or \
        re.search(r"\b" + words + r"\s+(?:largest|biggest|highest|most|latest|newest)", text)
    if match is None:
        return None
    word = match.group(1)
    return min(max(int(word) if word.isdigit() else NUMBER_WORDS[word], 1), 100)


def field_named(phrase: str, catalog: FieldCatalog) -> str | None:
    """The field named at the start of a phrase ("publisher", "themes of ...", "file type does ..."; one leading
    word may come first), if any."""
    phrase = phrase.strip().lower()
    for candidate, name in catalog.phrases():
        if re.match(rf"(?:[a-z]+\s+)?{re.escape(candidate)}(?!\w)", phrase):
            return name
    return None


def subject_fields(catalog: FieldCatalog) -> set[str]:
    """Fields whose values name single documents (a title, a project id): at least 80% of their values are distinct."""
    return {name for name, values in catalog.values.items()
            if name in catalog.fields and catalog.fields[name].kind == "string"
            and len(values) >= 2 and len(values) >= 0.8 * catalog.fields[name].documents}


def where_clauses(text: str, catalog: FieldCatalog, named: list[str]) -> dict[str, Any]:
    """The filters a clause states: named values, years and comparisons on the fields it names."""
    where: dict[str, Any] = dict(mentioned_values(text, catalog, set(named)))
    numeric = [name for name in named if catalog.fields[name].kind in ("number", "date")]
    dates = [name for name in numeric if catalog.fields[name].kind == "date"]
    target = dates[0] if dates else ("year" if "year" in catalog.fields else None)
    months = re.search(r"\bbetween\s+(" + "|".join(MONTHS) + r")\s+and\s+(" + "|".join(MONTHS) + r")\s+(\d{4})", text)
    if months and dates:
        year = months.group(3)
        where[dates[0]] = {"gte": f"{year}-{MONTHS[months.group(1)]:02d}", "lte": f"{year}-{MONTHS[months.group(2)]:02d}"}
        return where
    between = _BETWEEN.search(text)
    if between and (numeric or target):
        low, high = sorted((between.group(1), between.group(2)), key=float)
        where[numeric[0] if numeric else target] = {"gte": low, "lte": high}
        return where
    bounds: dict[str, dict[str, str]] = {}
    date_field = dates[0] if dates else (target if target and catalog.fields[target].kind == "date" else None)
    for month in re.finditer(r"\b(after|since|before|until)\s+(" + "|".join(MONTHS) + r")\s+(\d{4})", text):
        if date_field:  # "signed after March 2023": a bound at that month
            operator = {"after": "gt", "since": "gte", "before": "lt", "until": "lte"}[month.group(1)]
            bounds.setdefault(date_field, {})[operator] = f"{month.group(3)}-{MONTHS[month.group(2)]:02d}"
            text = text.replace(month.group(0), " ")
    for compare in _COMPARE.finditer(text):  # every comparison, on the field named before it (else the date)
        word, value = compare.group(1), compare.group(2)
        before = [name for position, name in mentioned_fields(text[:compare.start()], catalog)
                  if catalog.fields[name].kind in ("number", "date")]
        name = before[-1] if before else (target if _YEAR.fullmatch(value) else numeric[0] if numeric else None)
        if name is None:
            continue
        if word == "from" and _YEAR.fullmatch(value):  # "documents from 2023": that year
            where[name] = value if catalog.fields[name].kind == "date" else int(value)
            continue
        operator = {"after": "gt", "more than": "gt", "over": "gt", "above": "gt", "greater than": "gt",
                    "since": "gte", "from": "gte", "at least": "gte", "before": "lt", "less than": "lt",
                    "fewer than": "lt", "under": "lt", "below": "lt", "until": "lte", "at most": "lte"}[word]
        bounds.setdefault(name, {})[operator] = value
    where.update(bounds)
    year = _YEAR.search(text)
    if year and target and target not in where and target not in bounds and not any(
            year.group(1) in compare.group(0) for compare in _COMPARE.finditer(text)):
        where[target] = year.group(1) if catalog.fields[target].kind == "date" else int(year.group(1))
    return where


def plan_clause(clause: str, catalog: FieldCatalog) -> Action:
    """One tool call for one clause."""
    text = clause.lower()
    if re.search(r"\b(not|except|excluding|without|other than)\b", text):  # the tool has no negation: search
        return Action(SEMANTIC_SEARCH, {"query": standalone(clause)})
    named = [name for _, name in mentioned_fields(text, catalog)]
    where = where_clauses(text, catalog, named)
    subjects = subject_fields(catalog) & set(where)
    asked = [name for name in named if name not in where and name not in subjects]
    group = _GROUP.search(text)
    group_field = field_named(group.group(1), catalog) if group else None
    if _TOP.search(text):
        ranked = [name for name in named if catalog.fields[name].kind in ("number", "date")]
        if ranked:
            where.pop(ranked[0], None)
            return Action(QUERY_METADATA, compact({"op": "top_n", "field": ranked[0], "where": where,
                                                   "limit": number_in(text) or DEFAULT_TOP}))
    if group_field and (_COUNT.search(text) or re.search(r"\b(per|each|breakdown|grouped|split)\b", text)):
        if not isinstance(where.get(group_field), dict):  # a range on the grouped field stays a filter
            where.pop(group_field, None)
        return Action(QUERY_METADATA, compact({"op": "group_by", "by": group_field, "where": where}))
    if subjects and asked:  # "what is the budget of Ember Hollow", "when was Kite Season signed"
        return Action(QUERY_METADATA, {"op": "lookup", "field": asked[0], "where": {
            name: value for name, value in where.items() if name in subjects}})
    listed = [name for name, value in where.items() if isinstance(value, list) and len(value) >= 3]
    if _COUNT.search(text) and listed:  # "how many are released, in development or cancelled": one count each
        return Action(QUERY_METADATA, {"op": "group_by", "by": listed[0], "where": where})
    if _COUNTED.search(text):
        return Action(QUERY_METADATA, compact({"op": "count", "where": where}))
    asking = re.search(r"\b(which|what|who)\b", text)  # "which publishers ...", "who wrote the contracts"
    if asking and asked and (field_named(text[asking.end():], catalog) == asked[0] or asking.group(1) == "who"):
        return Action(QUERY_METADATA, compact({"op": "distinct", "field": asked[0], "where": where}))
    if where and _LISTED.search(text):
        return Action(QUERY_METADATA, compact({"op": "list", "field": "title" if "title" in catalog.fields else None,
                                               "where": where}))
    query = standalone(clause)
    # A clause that points back at a value ("for the fishing one, ...") searches only documents with that value;
    # other values a question mentions only rank the passages (a filter would drop documents that do not state
    # the field: a contract has no theme).
    filterable = {name: value for name, value in where.items() if query != clause.strip()
                  and catalog.fields[name].spec is not None and catalog.fields[name].spec.filterable}
    return Action(SEMANTIC_SEARCH, compact({"query": query, "filters": filterable}))


def standalone(clause: str) -> str:
    """A clause that points back ("for the fishing one, describe its theme") as a question of its own ("describe
    the theme of the fishing one"): the passages are ranked and answered against this text."""
    match = re.match(r"^(?:and\s+)?(?:for|of|about)\s+(the\s+.+?\s+(?:one|ones|project|document))\s*,?\s+(.+)$",
                     clause.strip(), re.IGNORECASE)
    if match is None:
        return clause.strip()
    rest = re.sub(r"\b(its|their)\b", "the", match.group(2))
    subject = re.sub(r"^the\s+|\s+(?:one|ones)$", "", match.group(1))
    return f"{rest} of {subject}"


def compact(args: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in args.items() if value not in (None, {}, [])}


def plan(question: str, catalog: FieldCatalog) -> list[Action]:
    """The tool calls that answer `question`, in order (identical calls once)."""
    question = " ".join(question.split())[:4000]
    actions: list[Action] = []
    for clause in split_clauses(question):
        action = plan_clause(clause, catalog)
        if action.key() not in {done.key() for done in actions}:
            actions.append(action)
    return actions
