"""Facts a document states in its body, as typed fields (origin `body`), deterministically and offline:

- `Key: value` lines and bullets ("- Population: 98315", "Owner: Ada Lovelace");
- definition lists ("Term" then ": definition");
- two-column tables: a table of keys and values becomes one field per row; a table of things with a measure
  ("| City | Population |") becomes a list field of its first column, named after its section;
- short sections that hold only a list under a heading ("## Bordering states" then "Arkansas, Louisiana");
- the definitional first sentence ("Austin is a city in Texas."): `kind` (city) and `name` (Austin), when its
  subject is the document's title and the document has no front matter (a document that declares its fields
  says what it is there; its prose would only add guesses such as "a game set in..." -> kind: set).

Values are typed as the stated fields are (fields/values.py): numbers (a unit after a number is recorded as the
field's unit: "2333 km", "266807 square miles"), ISO dates, lists (comma-separated short items), else text. A value
"Guadalupe Peak (2667 m)" is the text and a number field named with its unit (`highest_point_m`). Facts never
fail a document: text that is not a fact is ignored. Front matter and document properties win over body facts;
roster columns win over both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rag_pipeline.fields.registry import stored_name
from rag_pipeline.fields.values import DocumentFields, FieldValue, field_name, text_kind, typed_value

ORIGIN = "body"
MAX_KEY_WORDS = 5
MAX_VALUE_CHARS = 300
MAX_ITEM_WORDS = 6
MAX_LIST_LINES = 60  # a "list-only section" longer than this is content, not a fact
MAX_FACTS = 200  # per document
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_KEY_VALUE = re.compile(r"^\s*(?:[-*+]\s+)?(?:\*\*)?([A-Za-z][A-Za-z0-9 ()/&'.-]{0,60}?)(?:\*\*)?\s*:\s+(.+?)\s*$")
_BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+(.+?)\s*$")
_DEFINITION = re.compile(r"^:\s+(.+?)\s*$")
_TABLE_ROW = re.compile(r"^\s*\|(.+)\|\s*$")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)*\|?\s*$")
_NUMBER_UNIT = re.compile(r"^([+-]?\d[\d,]*(?:\.\d+)?)\s*([A-Za-z²³%$€£][A-Za-z²³%/ ]{0,30})?$")
_TRAILING_MEASURE = re.compile(r"^(.+?)\s*\(\s*([+-]?\d[\d,]*(?:\.\d+)?)\s*([A-Za-z²³%]{1,12})\s*\)$")
_DEFINITIONAL = re.compile(r"^(?:The\s+)?(.+?)\s+is\s+an?\s+([a-z][a-z -]{1,40}?)(?=\s+(?:in|of|on|at|that|which|"
                           r"located|from|with|for|near|founded|based|and|,)\b|[,.;])", re.IGNORECASE)
# Units a number may be stated in, and how a field named with one spells it (length_km, area_sq_miles).
UNIT_SLUGS = {"km": "km", "kilometers": "km", "kilometres": "km", "m": "m", "meters": "m", "metres": "m",
              "mi": "mi", "miles": "mi", "km²": "km2", "km2": "km2", "sq km": "km2", "square kilometers": "km2",
              "square kilometres": "km2", "square miles": "sq_miles", "sq mi": "sq_miles", "sq miles": "sq_miles",
              "ft": "ft", "feet": "ft", "kg": "kg", "g": "g", "%": "pct", "percent": "pct", "usd": "usd",
              "$": "usd", "eur": "eur", "€": "eur", "gbp": "gbp", "£": "gbp", "k": "k", "h": "h", "hours": "h",
              "min": "min", "minutes": "min", "s": "s", "seconds": "s", "ms": "ms", "days": "days", "years": "years",
              "mb": "mb", "gb": "gb", "tb": "tb", "w": "w", "kw": "kw", "mw": "mw"}
_KEYS_HEADER = {"key", "field", "property", "attribute", "name", "item", "fact", "parameter", "setting"}
_VALUES_HEADER = {"value", "values", "detail", "details", "", "description", "data"}
# Prose, not a list: a line that ends a sentence, or one sentence running into another ("St. Francis, White"
# is a list; "It is large. The river flows" is not).
# Words after the noun of a definitional sentence that start a describing clause ("a game set in ...").
CLAUSE = {"set", "made", "built", "where", "about", "whose", "who", "run", "told", "seen", "played"}
_SENTENCE = re.compile(r"[.!?]\s+[A-Z][a-z]*\s+[a-z]|[.!?]$")


@dataclass
class Section:
    heading: str | None
    lines: list[str]


def with_body_facts(stated: DocumentFields, markdown: str, title: str | None) -> DocumentFields:
    """The stated fields and the body's facts under the names (as stored) the document does not state."""
    names = {stored_name(name) for name in stated.values}
    merged = DocumentFields(dict(stated.values), list(stated.errors))
    prose = not any(value.origin == "front_matter" for value in stated.values.values())
    for name, value in body_facts(markdown, title, prose=prose).values.items():
        if stored_name(name) not in names:
            merged.values[name] = value
    return merged


def body_facts(markdown: str, title: str | None = None, *, prose: bool = True) -> DocumentFields:
    """The facts the Markdown states (see the module's docstring; `prose`: with the definitional first sentence);
    never raises."""
    facts = DocumentFields()
    sections = split_sections(markdown)
    for section in sections:
        if section.heading is not None and list_only(section):
            add_list(facts, section.heading, list_items(section))
            continue
        tables = parse_tables(section.lines)
        for header, rows in tables:
            table_facts(facts, section.heading, header, rows)
        previous = ""
        for line in section.lines:
            if _TABLE_ROW.match(line):
                previous = ""
                continue
            definition = _DEFINITION.match(line)
            if definition and previous:
                add(facts, previous, definition.group(1))
            elif (match := _KEY_VALUE.match(line)) and len(match.group(1).split()) <= MAX_KEY_WORDS:
                add(facts, match.group(1), match.group(2))
            previous = line.strip() if line.strip() and not line.lstrip().startswith(("-", "*", "#", "|")) else ""
        if len(facts.values) >= MAX_FACTS:
            break
    if prose:
        definitional(facts, sections, title)
    return facts


def split_sections(markdown: str) -> list[Section]:
    sections = [Section(None, [])]
    fence = False
    for line in markdown.split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
            continue
        if fence:
            continue
        heading = _HEADING.match(line)
        if heading:
            sections.append(Section(heading.group(2), []))
        else:
            sections[-1].lines.append(line)
    return sections


def list_only(section: Section) -> bool:
    """A section whose content is one list: bullets, or one line of comma-separated short items, or a table of
    things (its first column)."""
    lines = [line for line in section.lines if line.strip()]
    if not lines or len(lines) > MAX_LIST_LINES:
        return False
    if all(_BULLET.match(line) and not _KEY_VALUE.match(line) for line in lines):
        return all(short(_BULLET.match(line).group(1)) for line in lines)
    if len(lines) == 1:
        items = split_items(lines[0])
        if _SENTENCE.search(lines[0]) or not all(short(item) for item in items):
            return False
        # one item is a list under a plural heading ("## Rivers" then "Colorado")
        return len(items) >= 2 or (len(items) == 1 and len(items[0].split()) <= 4
                                   and section.heading is not None and section.heading.rstrip().endswith("s"))
    return False


def list_items(section: Section) -> list[str]:
    lines = [line for line in section.lines if line.strip()]
    if len(lines) == 1 and not _BULLET.match(lines[0]):
        return split_items(lines[0])
    return [_BULLET.match(line).group(1).strip() for line in lines]


def split_items(text: str) -> list[str]:
    return [item.strip() for item in re.split(r"\s*[,;]\s*|\s+and\s+", text.strip().rstrip(".")) if item.strip()]


def short(text: str) -> bool:
    return 0 < len(text.split()) <= MAX_ITEM_WORDS and len(text) <= 80 and not text.endswith(":")


def parse_tables(lines: list[str]) -> list[tuple[list[str], list[list[str]]]]:
    """The Markdown tables of the lines: (header cells, rows of cells)."""
    tables = []
    index = 0
    while index < len(lines) - 1:
        header = _TABLE_ROW.match(lines[index])
        if header and _TABLE_RULE.match(lines[index + 1]):
            rows = []
            index += 2
            while index < len(lines) and (row := _TABLE_ROW.match(lines[index])):
                rows.append([cell.strip() for cell in row.group(1).split("|")])
                index += 1
            tables.append(([cell.strip() for cell in header.group(1).split("|")], rows))
        else:
            index += 1
    return tables


def table_facts(facts: DocumentFields, heading: str | None, header: list[str], rows: list[list[str]]) -> None:
    """A two-column table: keys and values (one field per row), or things and a measure (a list field of the
    things, named after the section or the first column's header)."""
    if len(header) != 2 or not rows or any(len(row) != 2 for row in rows):
        return
    first, second = (cell.lower().strip("* ") for cell in header)
    if first in _KEYS_HEADER or second in _VALUES_HEADER:
        for key, value in rows:
            add(facts, key.strip("* "), value)
        return
    things = [row[0].strip("* ") for row in rows if row[0].strip("* ")]
    if things and all(text_kind(thing)[0] == "string" for thing in things):
        add_list(facts, heading or f"{header[0]}s", things)


def add(facts: DocumentFields, key: str, raw: str) -> None:
    """One fact: typed, with a unit after a number kept as the field's unit and a measure in parentheses as a
    number field of its own."""
    raw = raw.strip().strip("*").strip()
    name = field_name(key)
    if name is None or not raw or len(raw) > MAX_VALUE_CHARS or name in facts.values or not fact_key(key) \
            or (len(raw.split()) > MAX_ITEM_WORDS and _SENTENCE.search(raw)):
        return  # "Figure 1: ...", "Q: ...", "WordStar (1978): it was the first ...": prose, not a fact
    measure = _TRAILING_MEASURE.match(raw)
    if measure and measure.group(3).lower() in UNIT_SLUGS:
        number_name = field_name(f"{key} {UNIT_SLUGS[measure.group(3).lower()]}")
        if number_name and number_name not in facts.values:
            facts.values[number_name] = FieldValue("number", float(measure.group(2).replace(",", "")), ORIGIN)
        raw = measure.group(1)
    number = _NUMBER_UNIT.match(raw)
    if number:
        unit = (number.group(2) or "").strip().lower()
        if not unit or unit in UNIT_SLUGS or len(unit.split()) <= 5:  # "53.3 people per square mile": a rate
            named = field_name(f"{key} {UNIT_SLUGS[unit]}") if unit in UNIT_SLUGS else name
            if named is not None and named not in facts.values:
                facts.values[named] = FieldValue("number", float(number.group(1).replace(",", "")), ORIGIN)
            return
    items = split_items(raw) if "," in raw or ";" in raw else []
    if len(items) >= 2 and all(short(item) for item in items) and not _SENTENCE.search(raw):
        facts.values[name] = FieldValue("list", [without_measure(item) for item in items], ORIGIN)
        return
    try:
        value = typed_value(raw, ORIGIN, infer_text=True)
    except ValueError:
        return
    if value is not None:
        facts.values[name] = value


def fact_key(key: str) -> bool:
    """Whether a key reads as a field's name: words of two letters or more, no digits or parentheses."""
    return len(key.strip()) >= 2 and not re.search(r"[\d()]", key)


def add_list(facts: DocumentFields, heading: str, items: list[str]) -> None:
    name = field_name(heading)
    if name is not None and name not in facts.values and items:
        facts.values[name] = FieldValue("list", [without_measure(item) for item in items], ORIGIN)


def without_measure(item: str) -> str:
    """A list item without the measure in parentheses after it ("Salton Sea (932 km²)" -> "Salton Sea")."""
    measure = _TRAILING_MEASURE.match(item)
    return measure.group(1) if measure and measure.group(3).lower() in UNIT_SLUGS else item


def definitional(facts: DocumentFields, sections: list[Section], title: str | None) -> None:
    """'Austin is a city in the U.S. state of Texas.' -> kind: city, name: Austin (when the subject starts the
    title)."""
    if not title or "kind" in facts.values:
        return
    text = " ".join(line.strip() for section in sections[:2] for line in section.lines if line.strip())
    match = _DEFINITIONAL.match(text)
    if match is None:
        return
    subject = re.sub(r"^the\s+", "", match.group(1).strip(), flags=re.IGNORECASE)
    if not normalised(title).startswith(normalised(subject)) or len(subject.split()) > MAX_KEY_WORDS:
        return
    words = match.group(2).strip().lower().split()
    described = next((i for i, word in enumerate(words) if i and (word.endswith(("ed", "ly")) or word in CLAUSE)),
                     len(words))  # "a game set in", "a puzzle game made entirely of": the noun ends before
    noun = words[described - 1]
    facts.values["kind"] = FieldValue("string", noun, ORIGIN)
    facts.values.setdefault("name", FieldValue("string", subject, ORIGIN))


def normalised(text: str) -> str:
    return " ".join(re.sub(r"^the\s+", "", text.lower()).replace(",", " ").split())
