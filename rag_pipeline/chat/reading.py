"""Reading an exact question as a small tree of typed operations, without an LLM.

A question is read left to right as noun phrases over sets of documents ("the largest state", "cities in Texas",
"the state with the lowest point") joined by relation words ("that border", "in", "through"), around what is asked
of them (how many, how many per value of a field, the total or the average of a field, a field's value, their
names). Every phrase must be explained by the corpus (classes, fields, values, declared terms) or by English; a
content word nothing explains, or a value that fits no field of the set it qualifies, makes the question one we
cannot answer exactly (`Unmapped`), never a guess.

Where the words allow several readings (a value that names a state and a river, a relation that could go through
two fields), every reading is made (`Reader.readings`); the planner runs them all and answers only when they agree.
A thing and its measure (highest_point, highest_point_m) are one reading, not two (`Parse.thing_or_measure`).

A reading compiles to the metadata query tool's JSON form (structured/operations.py): a semi-join for a set
qualified by another set, argmax/argmin for a superlative, count/sum/avg/group_by for an aggregate.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from dataclasses import field as dataclass_field
from typing import Any

from rag_pipeline.chat.lexicon import (
    EMPTY_VERBS,
    HOW_ADJECTIVES,
    QUANTITY_NOUNS,
    QUESTION_WORDS,
    RELATION_SYNONYMS,
    RELATION_WORDS,
    STOP,
    UNIT_FACTORS,
    Lexicon,
    Span,
    field_words,
)
from rag_pipeline.structured.profile import UNCLASSED, singular

PREPOSITIONS = frozenset(("in", "of", "on", "at", "from", "for", "with", "by", "to", "into", "within", "that", "which",
                          "who", "whose", "where"))
EVERY = 1000  # the rows a list or set answer asks for: all of them (the query tool's most)
MAX_READINGS = 12  # readings made of one question (each costs a few milliseconds of queries)
NOT_ASKABLE = ("id", "path", "chars", "pages", "ingested_at", "name")
DATES = ("date",)
COPULAS = ("is", "are", "was", "were")
DISTINCT_WORDS = ("different", "distinct", "unique", "separate")
HAVING_WORDS = ("have", "has", "with")  # "publishers with more than 5 documents": a condition on each group


class Unmapped(Exception):
    """The question cannot be mapped with confidence; the message says what could not be mapped."""


class Ambiguous(Exception):
    """A choice the words do not decide: `key` names it, `options` are the ways to read it."""

    def __init__(self, key: str, options: list[Any]) -> None:
        super().__init__(key)
        self.key, self.options = key, options


@dataclass
class Selection:
    """A set of documents: of a class (None: any), with where clauses, ranked by a superlative."""

    klass: str | None = None
    where: dict[str, Any] = dataclass_field(default_factory=dict)
    rank: tuple[str, str] | None = None  # (argmax | argmin, field)
    limit: int | None = None  # the N best of a ranking ("the 3 largest")
    produces: str | None = None  # inside a semi-join: the field whose values it gives (default: the names)
    named: bool = False  # a value names its documents ("texas", "the city springfield")
    counted: tuple[str, str, Selection] | None = None  # ranked by how many of another set's documents name each
    excluded: dict[str, Any] | None = None  # "not released": the where clauses of the documents taken out


@dataclass
class Reading:
    """What a question asks: an aggregate over a selection, a field of it, or its documents."""

    answer: str  # count | count_distinct | sum | avg | groups | values
    selection: Selection
    field: str | None = None  # the asked field (None: the documents' names); for groups, the grouping field
    aggregate: tuple[str, str | None] | None = None  # groups: what each group gives (op, field); None: a count
    having: dict[str, float] | None = None  # groups: the condition on what each group gives
    choices: dict[str, Any] = dataclass_field(default_factory=dict)  # how its ambiguous words were read


class Reader:
    """Reads questions against one corpus (its Lexicon)."""

    def __init__(self, lexicon: Lexicon) -> None:
        self.lexicon = lexicon
        self.profile = lexicon.profile

    def readings(self, question: str) -> list[Reading]:
        """Every reading of the question (at most MAX_READINGS); Unmapped when there is none."""
        spans = self.lexicon.spans(self.fronted(self.lexicon.tokens(question)))
        pending: list[dict[str, Any]] = [{}]
        found: list[Reading] = []
        refusals: list[Unmapped] = []
        tried = 0
        while pending and tried < MAX_READINGS:
            forced = pending.pop(0)
            tried += 1
            try:
                reading = Parse(self, spans, forced).question()
            except Ambiguous as ambiguous:
                pending += [{**forced, ambiguous.key: option} for option in ambiguous.options]
                continue
            except Unmapped as unmapped:
                refusals.append(unmapped)
                continue
            reading.choices = forced
            found.append(reading)
        if not found:
            raise refusals[0] if refusals else Unmapped("the question can be read in too many ways")
        return found

    def fronted(self, tokens: list[str]) -> list[str]:
        """A question asked after a statement ("sacramento is the capital of which state") in the usual order
        ("which state is sacramento the capital of")."""
        klass = self.profile.class_of_value
        if len(tokens) > 4 and tokens[0] in ("which", "what") and tokens[2] in COPULAS and tokens[3] == "the" \
                and klass(tokens[1]) is not None and klass(tokens[1]) == klass(tokens[4]):
            return tokens[3:]  # "what state is the state with the most rivers": the state with the most rivers
        copulas = [index for index, token in enumerate(tokens) if token in COPULAS]
        for index in range(1, len(tokens) - 1):
            if tokens[index] in ("which", "what") and self.profile.class_of_value(tokens[index + 1]) is not None \
                    and copulas and copulas[0] < index and tokens[0] not in QUESTION_WORDS:
                copula = copulas[0]
                return tokens[index: index + 2] + [tokens[copula]] + tokens[:copula] + tokens[copula + 1: index] \
                    + tokens[index + 2:]
        return tokens

    # --- the corpus's facts ----------------------------------------------------------------------------------
    def class_field(self, klass: str) -> str:
        return self.profile.class_field_of[klass]

    def subject(self, klass: str | None, readable: bool = False) -> str:
        """The field that names the documents of `klass`: the one other documents use for them, or (`readable`)
        the one an answer names them by (a name or title before a code)."""
        present = self.profile.fields_of(klass)
        most = max(present.values(), default=1)
        for name in self.profile.readable_subjects if readable else self.profile.subjects:
            if name in present and present[name] >= 0.9 * most:
                return name
        if "name" in present:  # no field names them all: their file names do
            return "name"
        raise Unmapped(f"no field names the {klass or 'documents'}")

    def fields_of(self, klass: str | None, kinds: tuple[str, ...] = ("string", "number", "date", "list")) -> list[str]:
        present = self.profile.fields_of(klass)
        return [name for name in present if name in self.profile.fields and self.profile.fields[name].kind in kinds
                and name not in NOT_ASKABLE]

    def kind(self, name: str) -> str:
        known = self.profile.fields.get(name)
        return known.kind if known is not None else "string"  # `type` where no document is visible

    def named_by(self, relation: str, candidates: list[str]) -> list[str]:
        """The candidate fields the relation's words name (border, bordering, neighboring -> borders)."""
        words = [RELATION_SYNONYMS.get(word, word) for word in relation.split()]
        stems = {singular(word).removesuffix("ing") for word in words if word not in STOP}
        return [name for name in candidates
                if stems & {singular(part).removesuffix("ing") for part in field_words(name)[0].split()}]

    def class_named(self, name: str) -> bool:
        """A field named after a class of documents (rivers, state): it holds names of such documents."""
        return self.profile.class_of_value(field_words(name)[0]) is not None

    def only_class_with(self, name: str) -> str | None:
        """The one class whose documents have the field (None when several or no class have it)."""
        having = [klass for klass, present in self.profile.classes.items() if name in present]
        return having[0] if len(having) == 1 and having[0] != UNCLASSED else None


class Parse:
    """One reading of a question: a cursor over its spans, with the choices `forced` made."""

    def __init__(self, reader: Reader, spans: list[Span], forced: dict[str, Any]) -> None:
        self.reader = reader
        self.lexicon = reader.lexicon
        self.spans = spans
        self.forced = forced
        self.at = 0
        self.used: set[int] = set()
        self.pending = ""  # relation words said before the head they relate ("the neighboring states of X")
        self.head_field: list[str] | None = None  # a field said as the head ("which publishers ...")
        self.enumerated: dict[str, list[str]] = {}  # field -> values a question lists ("released, ... or cancelled")
        self.enumerating = False  # the last thing read was a value: another may follow it without a relation
        self.counting = False  # the question asks how many
        self.vocabulary: set[str] = set()  # the declared synonyms' words of the fields read so far
        self.aggregate_said = self.find_aggregate()  # "combined", "in total" said after the field
        self.asked_plural = False  # the asked field was said in the plural ("the highest points of ...")
        self.conjunction = "or"  # how the values a modifier lists combine: "and" (all of) or "or" (any of)
        self.ranked_by_age = False  # the ranking came from "earliest"/"latest" (a date asked may be what it ranks)
        self.ranked_field_asked = False  # "the largest budget of ...": the ranking's field is what is asked
        self.how_of_field: str | None = None  # "how high is ...": the quantity asked of the field
        self.wants_number = False  # the asked field is added up, averaged or measured ("how high")

    def find_aggregate(self) -> str | None:
        """A total or an average said anywhere but the start ("the area of the states combined")."""
        for index, span in enumerate(self.spans[1:], start=1):
            if span.has("sum") and not (index + 1 < len(self.spans) and self.spans[index + 1].has("count")):
                self.used.add(index)
                return "sum"
            if span.has("avg"):
                self.used.add(index)
                return "avg"
        return None

    def choose(self, key: str, options: list[Any]) -> Any:
        if not options:
            raise Unmapped(f"nothing fits {key}")
        if len(options) == 1:
            return options[0]
        if key in self.forced:
            return self.forced[key]
        raise Ambiguous(key, options)

    # --- cursor ----------------------------------------------------------------------------------------------
    def peek(self, offset: int = 0) -> Span | None:
        index = self.at + offset
        return self.spans[index] if index < len(self.spans) else None

    def take(self) -> Span:
        span = self.spans[self.at]
        self.used.add(self.at)
        self.at += 1
        return span

    def filler(self, span: Span | None) -> bool:
        return span is not None and (span.has("scope") or span.has("question") or (
            span.has("word") and (span.text in STOP or span.text in RELATION_WORDS or span.text in EMPTY_VERBS
                                  or singular(span.text) in self.vocabulary)))

    def skip_filler(self) -> str:
        """Skip stop words, question words, relation words and scope phrases; the relation words, joined."""
        relation = []
        while self.filler(self.peek()):
            span = self.take()
            if span.text in RELATION_WORDS or span.text in ("that", "which", "who", "whose"):
                relation.append(span.text)
        return " ".join(relation)

    def spans_before(self, span: Span) -> str:
        """The word right before a span."""
        index = next(position for position, candidate in enumerate(self.spans) if candidate is span)
        return self.spans[index - 1].text if index else ""

    def spans_text(self, start: int, end: int) -> list[str]:
        return [span.text for span in self.spans[start:end]]

    def next_meaningful(self) -> Span | None:
        index = self.at
        while index < len(self.spans) and self.filler(self.spans[index]):
            index += 1
        return self.spans[index] if index < len(self.spans) else None

    # --- the question ----------------------------------------------------------------------------------------
    def question(self) -> Reading:
        if not self.spans:
            raise Unmapped("the question is empty")
        answer, asked, how = "values", None, None
        said_before: list[str] = []  # relation words before anything else ("what are the neighboring states")
        while self.filler(self.peek()) and self.peek().text not in ("how", "where"):
            if (text := self.take().text) in RELATION_WORDS and text not in PREPOSITIONS:
                said_before.append(text)
        span = self.peek()
        if span is not None and span.text == "how":
            self.take()
            if (nxt := self.peek()) is not None and nxt.text in HOW_ADJECTIVES and not nxt.has("count"):
                how = HOW_ADJECTIVES[self.take().text]  # how big, how long, how high
        span = self.peek()
        if span is not None and span.has("count") and how is None:
            self.take()
            answer = "count"
            self.counting = True
            asked = self.asked_quantity()  # how many people (live in ...): the population
            if asked is not None:
                answer = "values"
            elif (counted := self.counted_field()) is not None:
                answer, asked = "count_distinct", counted  # "how many (different) publishers"
        elif span is not None and (span.has("sum") or span.has("avg")) and (nxt := self.peek(1)) is not None \
                and nxt.has("count"):
            self.take()  # "the total number of documents": a count
            self.take()
            answer = "count"
            self.counting = True
        elif span is not None and (span.has("sum") or span.has("avg")):
            answer = "sum" if span.has("sum") else "avg"
            self.take()
            self.skip_filler()
            asked = self.asked_field(required=True)
        elif span is not None and span.text == "where" and how is None:
            self.take()
            asked = ("where",)
        else:
            asked = self.asked_field(required=False)  # "how high is the highest point of ...": its field
            if asked is not None and asked[0] == "field" and (grouped := self.grouped_by_condition(asked)):
                return grouped
        self.pending = " ".join(said_before + [word for word in self.skip_filler().split() if word not in PREPOSITIONS])
        selection = self.selection(optional=asked is not None)
        self.modifiers(selection)
        grouped = self.tail(selection)
        if asked is None and self.head_field:
            asked = ("field", *self.head_field)
        if asked is None and answer == "values":
            asked = self.trailing_field(selection)
        reading = Reading(answer, selection)
        self.how_of_field = how if asked is not None and how is not None else None
        self.wants_number = answer in ("sum", "avg") or self.aggregate_said is not None or self.how_of_field is not None
        if grouped is not None:
            if answer in ("sum", "avg") and asked is not None:  # "the total budget per publisher"
                measured = self.resolve_field(asked, selection)
                if self.reader.kind(measured) != "number":
                    raise Unmapped(f"{measured!r} is not a number to add up")
                reading.aggregate = (answer, measured)
            elif answer != "count":
                raise Unmapped("a breakdown per value of something other than a count")
            reading.answer, reading.field = "groups", grouped
        elif asked == ("where",):
            reading.field = self.where_field(selection)
        elif asked is not None:
            reading.field = self.resolve_field(asked, selection)
            self.ranked_by_name(reading)
            if self.ranked_by_age and selection.rank is not None and self.reader.kind(reading.field) == "date":
                selection.rank = (selection.rank[0], reading.field)  # "when was the earliest project signed"
        elif self.ranked_field_asked and selection.rank is not None:
            reading.field = selection.rank[1]  # "the largest budget of a released project": that budget
        elif how is not None:
            reading.field = self.partner_of_value(selection) or self.quantity(how, selection.klass)
        if reading.answer == "count":
            listed = [name for name, values in self.enumerated.items() if len(values) >= 3]
            if listed:  # "how many are released, in development or cancelled": one count each
                reading.answer, reading.field = "groups", listed[0]
        if reading.answer == "values" and reading.field is not None and self.aggregate_said is not None:
            reading.answer = self.aggregate_said  # "the area of all the states combined"
        if self.counting and reading.answer == "values" and asked is not None and asked[0] == "quantity" \
                and not selection.named and selection.rank is None and reading.field is not None:
            self.total_of_many(reading)  # "how many people live in the country": a total
        if reading.answer in ("sum", "avg") and (reading.field is None or self.reader.kind(reading.field) != "number"):
            raise Unmapped(f"{reading.field!r} is not a number to add up")
        self.check_explained()
        return reading

    def total_of_many(self, reading: Reading) -> None:
        """'How many <quantity>' of documents no value names: the total of the field over them, over one class
        (several classes with the field are several readings: a total over all of them would add up overlaps)."""
        selection = reading.selection
        reading.answer = "sum"
        if selection.klass is None:
            having = [klass for klass, present in self.reader.profile.classes.items() if reading.field in present
                      and klass != UNCLASSED]
            if having:
                selection.klass = self.choose(f"total@{reading.field}", sorted(having))

    def ranked_by_name(self, reading: Reading) -> None:
        """A field whose name is a superlative ('highest point') asked of several documents: the one whose
        partner number is the largest ('the highest point in the us'); 'how high' of it: that number, the largest
        one when asked of several ('how high is the highest point in the us')."""
        name = reading.field
        if name is None:
            return
        field_kind = self.reader.kind(name)
        if field_kind == "string":
            measure = self.measure_of(name, reading.selection.klass)
        elif field_kind == "number" and self.how_of_field:
            measure = name  # the measure itself was asked (thing_or_measure)
        else:
            return
        if measure is None:
            return
        if self.how_of_field:
            reading.field = measure  # "how high is the highest point of florida"
        superlative = self.lexicon.readings(field_words(name)[0].split()[0], 1)
        direction = next((detail[0] for kind, detail in superlative if kind == "superlative"), None)
        if direction is not None and not reading.selection.named and reading.selection.rank is None \
                and reading.answer == "values" and not self.asked_plural:
            reading.selection.rank = ("argmax" if direction == "max" else "argmin", measure)

    def partner_of_value(self, selection: Selection) -> str | None:
        """'how high is guadalupe peak': the number field measuring the field the value was found in."""
        for name in selection.where:
            if name in self.reader.profile.fields and self.reader.kind(name) == "string" \
                    and name not in self.reader.profile.subjects[:1]:
                measure = self.measure_of(name, selection.klass)
                if measure is not None:
                    return measure
        return None

    def measure_of(self, name: str, klass: str | None) -> str | None:
        """The number field of the class that measures a string field: the one named by the same words
        (highest_point -> highest_point_m), else the one whose name starts with the same word (highest_point ->
        highest_elevation_m); None unless there is exactly one."""
        words = field_words(name)[0]
        numbers = self.reader.fields_of(klass, ("number",))
        partners = [other for other in numbers if field_words(other)[0] == words] \
            or [other for other in numbers if field_words(other)[0].split()[0] == words.split()[0]]
        return partners[0] if len(partners) == 1 else None

    def asked_quantity(self) -> tuple[str, ...] | None:
        """After 'how many': a quantity noun ('how many people') asks for that field of what follows."""
        span = self.peek()
        if span is not None and (span.has("quantity") or (span.has("field") and not span.has("value"))) \
                and not span.has("class"):
            self.take()
            return ("quantity", span.get("quantity")) if span.has("quantity") else ("field", *span.get("field"))
        return None

    def asked_field(self, required: bool) -> tuple[str, ...] | None:
        """'what is the population of ...', 'which publishers ...': a field named before what it is asked of."""
        while (span := self.peek()) is not None and ((span.has("word") and span.text in STOP)
                                                     or (span.has("number") and (nxt := self.peek(1)) is not None
                                                         and nxt.has("field") and not nxt.has("class"))):
            self.take()  # "name the 50 capitals": the number restates how many there are
        span = self.peek()
        if span is None:
            return None
        if span.has("field") and not span.has("class") and not span.has("value"):
            self.take()
            self.asked_plural = singular(span.text.split()[-1]) != span.text.split()[-1]
            return ("field", *span.get("field"))
        if span.has("quantity") and not span.has("class") and not span.has("value"):
            self.take()
            return ("quantity", span.get("quantity"))
        if required:
            raise Unmapped(f"which field to aggregate: {span.text!r} is not one")
        return None

    def counted_field(self) -> tuple[str, ...] | None:
        """'how many (different) publishers': a field whose distinct values are counted (not a class of
        documents)."""
        start = self.at
        while (span := self.peek()) is not None and span.text in DISTINCT_WORDS:
            self.take()
        span = self.peek()
        if span is not None and span.has("field") and not span.has("class") and not span.has("value") \
                and not span.has("quantity"):
            self.take()
            return ("field", *span.get("field"))
        self.at = start
        return None

    def grouped_by_condition(self, asked: tuple[str, ...]) -> Reading | None:
        """'which publishers have more than 5 documents', 'which genres have an average budget above 300
        thousand': the asked field's values grouped, with a condition on each group's count (or aggregate)."""
        start = self.at
        if not set(self.skip_filler().split()) & set(HAVING_WORDS):
            self.at = start
            return None
        aggregate: tuple[str, str | None] = ("count", None)
        span = self.peek()
        if span is not None and (span.has("sum") or span.has("avg")):
            self.take()
            self.skip_filler()
            measured = self.peek()
            if measured is None or not measured.has("field"):
                raise Unmapped("which field to aggregate per group")
            self.take()
            aggregate = ("sum" if span.has("sum") else "avg",
                         self.pick_field(measured.get("field"), None, "", key=f"field@{measured.start}",
                                         kinds=("number",)))
        comparative = self.peek()
        if comparative is None or not comparative.has("comparative"):
            self.at = start
            return None
        self.take()
        bound = self.number_or_date()
        if bound is None or bound[0] == "month":
            self.at = start
            return None
        if aggregate[0] == "count":
            counted = self.peek()
            if counted is None or not counted.has("class"):
                self.at = start
                return None
            self.take()
            number = bound[1]
        else:
            number = self.in_field_units(aggregate[1], bound[1], scaled=bound[0] == "scaled")
        self.skip_filler()
        if self.peek() is not None:
            self.at = start
            return None
        by = self.resolve_field(asked, Selection(None))
        if self.reader.kind(by) not in ("string", "list"):
            raise Unmapped(f"{by!r} is not a field to group by")
        self.check_explained()
        return Reading("groups", Selection(None), by, aggregate=None if aggregate[0] == "count" else aggregate,
                       having={comparative.get("comparative"): number})

    def resolve_field(self, asked: tuple[str, ...], selection: Selection) -> str:
        partner = self.partner_of_value(selection)
        if partner is not None and asked[0] == "field" and any(  # "the elevation of death valley": its partner
                set(field_words(name)[0].split()) & set(field_words(partner)[0].split()) for name in asked[1:]):
            return partner
        klass = selection.klass
        if klass is None and asked[0] == "field" and len(asked) == 2:
            klass = selection.klass = self.reader.only_class_with(asked[1])
        if asked[0] == "quantity":
            return self.quantity(asked[1], klass)
        return self.pick_field(self.thing_or_measure(list(asked[1:]), klass), klass, "", key=f"field@{asked[1]}")

    def thing_or_measure(self, candidates: list[str], klass: str | None) -> list[str]:
        """When the candidates the class has are one string field and one or more numbers with a unit, all named by
        the same words (highest_point: a name; highest_point_m: its height), the string field, unless the asked field
        is added up, averaged or measured ('how high is the highest point of florida'), or its words are themselves a
        quantity ('depth'): then the numbers. Otherwise `candidates` unchanged."""
        profile = self.reader.profile
        present = profile.fields_of(klass)
        words = {name: field_words(name) for name in candidates if name in present}
        if len(words) < 2 or len({said for said, _ in words.values()}) != 1:
            return candidates
        if klass is None and not any(set(words) <= set(fields) for fields in profile.classes.values()):
            return candidates  # no class has them all: not a thing and its measure
        kind = self.reader.kind
        things = [name for name, (_, unit) in words.items() if unit is None and kind(name) == "string"]
        measures = [name for name, (_, unit) in words.items() if unit is not None and kind(name) == "number"]
        if len(things) != 1 or len(things) + len(measures) != len(words):
            return candidates
        said = next(iter(words.values()))[0]
        return measures if self.wants_number or said in QUANTITY_NOUNS else things

    def quantity(self, quantity: str, klass: str | None) -> str:
        numeric = self.reader.fields_of(klass, ("number", "date"))
        names = self.lexicon.quantity_fields(quantity, numeric)
        if not names:
            raise Unmapped(f"no field of the {klass or 'documents'} measures their {quantity}")
        return self.choose(f"quantity@{quantity}@{klass}", names)

    def where_field(self, selection: Selection) -> str:
        """'where is X': the field of X's documents that refers to other documents (a city's state)."""
        references = sorted(name for (klass, name), _ in self.reader.profile.references.items()
                            if klass == selection.klass)
        if not references:
            raise Unmapped(f"nothing says where the {selection.klass or 'documents'} are")
        return self.choose(f"where@{selection.klass}", references)

    def tail(self, selection: Selection) -> str | None:
        """After the main phrase: 'per publisher' / 'of each file type' (the grouping field), '... by population'
        after a superlative (what it ranks by), and filler."""
        self.skip_filler()
        span = self.peek()
        if span is not None and span.has("grouping"):
            self.take()
            self.skip_filler()
            target = self.peek()
            if target is None or not (target.has("field") or target.has("class")):
                raise Unmapped("a breakdown by something that is not a field")
            self.take()
            if target.has("field"):
                return self.pick_field(target.get("field"), selection.klass, "", key=f"field@{target.start}")
            inner = Selection(target.get("class"))
            return self.link(selection, inner, "")
        if span is not None and self.at and self.spans[self.at - 1].text == "by" and self.counting \
                and span.has("field") and selection.rank is None:
            self.take()  # "count documents by file type"
            return self.pick_field(span.get("field"), selection.klass, "", key=f"field@{span.start}")
        if span is not None and self.at and self.spans[self.at - 1].text == "by" and selection.rank is not None \
                and (span.has("field") or span.has("quantity")):
            self.take()
            name = self.pick_field(span.get("field"), selection.klass, "", key=f"field@{span.start}") \
                if span.has("field") else self.quantity(span.get("quantity"), selection.klass)
            selection.rank = (selection.rank[0], self.rankable(name, selection.klass))
            self.skip_filler()
        if selection.rank is not None and not selection.rank[1]:
            raise Unmapped("'top' by what")
        return None

    def trailing_field(self, selection: Selection) -> tuple[str, ...] | None:
        """'when was kite season signed': a field said at the end is what is asked; one named with a superlative
        ('what state has the highest elevation') ranks the documents instead."""
        span = self.peek()
        if span is not None and span.has("field") and not span.has("class") and not span.has("value"):
            self.take()
            self.skip_filler()
            if self.superlative_named(span) is not None and not selection.named and selection.rank is None:
                self.rank_by_named_field(selection, span)
                return None
            return ("field", *span.get("field"))
        return None

    def superlative_named(self, span: Span) -> str | None:
        """'max' or 'min' for a field phrase that starts with a superlative ('highest elevation', 'lowest point')."""
        first = span.text.split()[0]
        return next((detail[0] for kind, detail in self.lexicon.readings(first, 1) if kind == "superlative"
                     and detail[1] is not None), None)

    def rank_by_named_field(self, selection: Selection, span: Span) -> None:
        direction = self.superlative_named(span)
        name = self.pick_field(span.get("field"), selection.klass, "", key=f"field@{span.start}")
        selection.rank = ("argmax" if direction == "max" else "argmin", self.rankable(name, selection.klass))

    def check_explained(self) -> None:
        """Every word is part of the reading, filler, or a word of a used field's declared synonyms."""
        used_fields = {name for index in self.used for name in (self.spans[index].get("field") or [])}
        vocabulary = set().union(*(self.lexicon.synonym_words.get(name, set()) for name in used_fields))
        unexplained = [span.text for index, span in enumerate(self.spans)
                       if index not in self.used and not self.filler(span) and singular(span.text) not in vocabulary]
        if unexplained:
            raise Unmapped(f"could not map {', '.join(repr(text) for text in unexplained)}")

    # --- sets of documents -----------------------------------------------------------------------------------
    def selection(self, optional: bool = False) -> Selection:
        """A noun phrase naming documents: [superlative] [number] [terms] [qualifiers] (class | value)
        [modifiers]. With `optional` (a field was asked: 'which publishers appear ...'), no head means every
        document."""
        superlative, limit, terms, qualifiers, ranked_by = None, None, [], [], None
        while (span := self.peek()) is not None:
            if span.has("superlative") and not span.has("class"):
                superlative = self.take().get("superlative")
                if (after := self.peek()) is not None and after.has("count"):  # the highest number of citizens
                    self.take()
                if (after := self.peek()) is not None and after.has("field") and not after.has("class") \
                        and not after.has("value") and self.before_head(1):
                    ranked_by = self.take()  # "the most recently signed projects": ranked by signed
                    self.ranked_field_asked = (after := self.peek()) is not None and after.text == "of"
            elif span.has("number") and limit is None and not span.has("value") and self.before_head(1):
                limit = int(self.take().get("number"))
            elif span.has("term") and not span.has("class"):
                terms.append([detail for kind, detail in self.take().readings if kind == "term"])
            elif span.has("value") and not span.has("class") and self.before_head(1) \
                    and not self.names_following_class(span):
                qualifiers.append(self.take())  # "texas cities", "citrus themed projects", "released projects"
            elif span.has("field") and not span.has("class") and not span.has("value") and qualifiers \
                    and self.before_head(1):
                qualifiers.append(self.take())  # the field a qualifier is a value of ("citrus themed")
            elif span.has("word") and span.text in STOP:
                self.take()
            else:
                break
        span = self.peek()
        if span is not None and span.has("class") and not (span.has("value") and self.value_reading_fits(span)):
            self.take()
            selection = Selection(span.get("class"))
            if (nxt := self.peek()) is not None and nxt.has("class") and nxt.get("class") is None:
                self.take()  # "press pages", "contract documents"
            elif selection.klass is None and (nxt := self.next_meaningful()) is not None and nxt.has("class") \
                    and nxt.get("class") is not None and not nxt.has("field"):
                self.skip_filler()  # "documents tagged press": the class said after a generic noun
                selection.klass = self.take().get("class")
            nxt = self.peek()
            if nxt is not None and nxt.has("value") and not nxt.has("class") and self.names_document(nxt,
                                                                                                     selection.klass):
                self.take()  # "the city springfield"
                name = self.subject_holding(nxt, selection.klass)
                selection.where[name] = self.stored(name, nxt.text)
                selection.named = True
        elif span is not None and span.has("value") and not self.names_document(span, None):
            self.take()  # "how many pdfs": the documents that have the value
            selection = Selection(None)
            self.constrain(selection, span, "", None, self.field_said_after(span))
        elif span is not None and span.has("value"):
            self.take()
            selection = self.named(span, self.class_after(span))
            self.enumerating = True
            self.pending = ""  # "works on quarry kings": words before a named document relate nothing
        elif span is not None and span.has("field") and not span.has("class") and self.head_field is None \
                and not optional:  # "the capitals ...": the values of a field, of the documents that have it
            self.take()
            holder = self.reader.only_class_with(span.get("field")[0]) if len(span.get("field")) == 1 else None
            target = self.reader.profile.references.get((holder, span.get("field")[0]))
            if target is not None and (superlative is not None or terms):
                # "the largest capital": the documents the field names (cities), ranked as such
                inner = Selection(holder, produces=span.get("field")[0])
                selection = Selection(target, {self.reader.subject(target): {"in": inner}})
            else:
                self.head_field = span.get("field")
                selection = Selection(holder)
        elif optional:
            selection = Selection(None)
        else:
            raise Unmapped(f"could not map {span.text!r}" if span is not None else "the question names no documents")
        self.qualify(selection, qualifiers)
        for choices in terms:
            self.apply_term(selection, self.fitting_term(choices, selection))
        self.modifiers(selection)
        if superlative is not None and ranked_by is not None:
            name = self.pick_field(ranked_by.get("field"), selection.klass, "", key=f"field@{ranked_by.start}")
            selection.rank = ("argmax" if superlative[0] == "max" else "argmin", self.rankable(name, selection.klass))
            selection.limit = limit
        elif superlative is not None:
            self.rank(selection, superlative, limit)
        elif limit is not None:
            selection.limit = limit
        return selection

    def before_head(self, offset: int) -> bool:
        """Whether a class noun (the head) comes after the span at `offset` - 1, past qualifiers."""
        index = self.at + offset
        while index < len(self.spans):
            span = self.spans[index]
            if span.has("class") and span.get("class") is not None or span.has("class") and not span.has("value"):
                return True
            if not (span.has("value") or span.has("field") or (span.has("word") and span.text in STOP)
                    or span.has("term") or span.has("superlative") or span.has("number")):
                return False
            index += 1
        return False

    def names_following_class(self, span: Span) -> bool:
        """Whether the value names a document of the class noun right after it ("mississippi river")."""
        after = self.peek(1)
        return after is not None and after.has("class") and any(
            occurrence_class == after.get("class") and name in self.reader.profile.subjects
            for name, occurrence_class, _ in span.get("value"))

    def value_reading_fits(self, span: Span) -> bool:
        """A span that is a class noun and a value ("press": the folder and a word) is a class noun here."""
        return False

    def qualify(self, selection: Selection, qualifiers: list[Span]) -> None:
        """Values (and the fields they are values of) said before the head qualify it."""
        fields = [span for span in qualifiers if span.has("field") and not span.has("value")]
        for span in qualifiers:
            if span.has("value"):
                self.constrain(selection, span, "", None, [name for field_span in fields
                                                           for name in field_span.get("field")])

    def class_after(self, value: Span) -> str | None:
        """A class noun right after a value ("the mississippi river") says which documents the value names."""
        nxt = self.peek()
        if nxt is not None and nxt.has("class") and nxt.get("class") is not None and \
                any(occurrence_class == nxt.get("class") for _, occurrence_class, _ in value.get("value")):
            self.take()
            return nxt.get("class")
        return None

    def named(self, value: Span, klass: str | None) -> Selection:
        """The documents a value names (by a field that names documents), of `klass` or of one of its classes."""
        subjects = self.reader.profile.subjects
        classes = sorted({occurrence_class for name, occurrence_class, _ in value.get("value")
                          if name in subjects and (klass is None or occurrence_class == klass)})
        if not classes:
            raise Unmapped(f"{value.text!r} names no document")
        chosen = self.choose(f"names@{value.start}", classes)
        selection = Selection(chosen if chosen != UNCLASSED else None, named=True)
        name = self.subject_holding(value, selection.klass)
        selection.where[name] = self.stored(name, value.text)
        return selection

    def subject_holding(self, value: Span, klass: str | None) -> str:
        """The field naming documents that holds the value (a title, an id), for documents of `klass`."""
        subjects = self.reader.profile.subjects
        holding = [name for name in subjects if any(
            name == field_name and (klass is None or occurrence_class == (klass or UNCLASSED))
            for field_name, occurrence_class, _ in value.get("value"))]
        return holding[0] if holding else self.reader.subject(klass)

    def names_document(self, value: Span, klass: str | None) -> bool:
        return any(name in self.reader.profile.subjects and (klass is None or occurrence_class == klass)
                   for name, occurrence_class, _ in value.get("value"))

    def fitting_term(self, terms: list[Any], selection: Selection) -> Any:
        """Of the terms a word starts ("major": major city, major river), the one for the selection's class, or
        one of a single word."""
        for term in terms:
            if len(term.words) == 1 or (selection.klass is not None
                                        and self.reader.profile.class_of_value(term.words[-1]) == selection.klass):
                return term
        raise Unmapped(f"{terms[0].words[0]!r} is a declared term for other documents than the "
                       f"{selection.klass or 'documents'}")

    def apply_term(self, selection: Selection, term: Any) -> None:
        present = self.reader.profile.fields_of(selection.klass)
        for name, clause in term.where.items():
            if name not in present:
                raise Unmapped(f"the term {term.phrase!r} names the field {name!r}, which the "
                               f"{selection.klass or 'documents'} do not have")
            selection.where[name] = clause

    # --- modifiers ---------------------------------------------------------------------------------------------
    def modifiers(self, selection: Selection) -> None:
        """What follows a set's head and qualifies it."""
        while self.modifier(selection):
            pass

    def modifier(self, selection: Selection) -> bool:
        start = self.at
        enumerating, self.enumerating = self.enumerating, False
        relation = self.skip_filler()
        self.conjunction = "and" if "and" in self.spans_text(start, self.at) else "or"
        said_field = None
        while (span := self.peek()) is not None and span.has("field") and not span.has("class") \
                and not span.has("value") and self.relates_onward():
            said_field = self.take()  # a field said as the relation: "border texas", "whose capital is x"
            relation = f"{relation} {said_field.text} {self.skip_filler()}".strip()
        if self.pending:
            relation, self.pending = f"{self.pending} {relation}".strip(), ""
        span = self.peek()
        explicit = self.at > start or bool(relation)
        if span is None:
            self.at = start
            return False
        if span.has("not"):
            self.take()
            relation = (relation + " " + self.skip_filler()).strip()
            nxt = self.peek()
            if nxt is not None and (nxt.has("class") or nxt.has("field")):
                selection.where[self.field_for_empty(selection, nxt, relation)] = {"empty": True}
                return True
            if nxt is not None and nxt.has("value") and selection.excluded is None and not selection.rank:
                self.take()  # "projects that are not released": those that are, taken out
                excluded = Selection(selection.klass)
                self.constrain(excluded, nxt, relation, self.class_after(nxt), self.field_said_after(nxt))
                selection.excluded = excluded.where
                return True
            raise Unmapped("a negation the query tool cannot express")
        if span.has("superlative") and span.get("superlative")[1] is None and explicit and \
                self.class_after_filler(1):
            self.take()  # "the state that borders the most states": ranked by how many it names
            self.skip_filler()
            inner = self.selection()
            direction = "argmax" if span.get("superlative")[0] == "max" else "argmin"
            counted = self.counted_link(selection, inner, relation)
            if counted is not None:  # "the state with the most cities": the cities' state most often named
                selection.counted = (direction, counted, inner)
                return True
            name = self.link(selection, inner, relation, ranking=True)
            if self.reader.kind(name) != "list":
                raise Unmapped("a count of related documents the query tool cannot rank by")
            selection.rank = (direction, name)
            return True
        if span.has("superlative") and (nxt := self.peek(1)) is not None and explicit and \
                (nxt.has("field") or nxt.has("quantity") or nxt.has("count")) and not nxt.has("class"):
            self.take()  # "with the largest population", "has the highest point", "the most people"
            if nxt.has("count"):
                self.take()
            field_span = self.take()
            name = self.quantity(field_span.get("quantity"), selection.klass) if field_span.has("quantity") and \
                not field_span.has("field") else self.pick_field(field_span.get("field"), selection.klass, "",
                                                                 key=f"field@{field_span.start}")
            direction = span.get("superlative")[0]
            selection.rank = ("argmax" if direction == "max" else "argmin", self.rankable(name, selection.klass))
            return True
        if span.has("superlative") and said_field is not None and span.get("superlative")[1] == "age":
            self.take()  # "were modified most recently": ranked by the date said
            name = self.pick_field(said_field.get("field"), selection.klass, "", key=f"field@{said_field.start}",
                                   kinds=("date", "number"))
            selection.rank = ("argmax" if span.get("superlative")[0] == "max" else "argmin", name)
            return True
        if span.has("superlative") and explicit and span.get("superlative")[1] is not None \
                and not self.class_after_filler(1):
            self.take()  # "that is the largest", "the longest one"
            if (nxt := self.peek()) is not None and nxt.text in ("one", "ones"):
                self.take()
            self.rank(selection, span.get("superlative"), selection.limit)
            return True
        if said_field is None and span.has("field") and not span.has("class") and not span.has("value") \
                and explicit and self.superlative_named(span) is not None and not self.relates_onward():
            self.take()  # "the state with the lowest point", "the state that contains the highest point"
            self.rank_by_named_field(selection, span)
            return True
        if span.has("comparative") or span.has("date_comparative") or span.text == "between":
            if self.comparison(selection, said_field):
                return True
        if said_field is None and span.has("field") and not span.has("class") and not span.has("value") and \
                self.comparison_follows():
            said_field = self.take()  # "a budget above 300 thousand", "signed after 2020"
            self.skip_filler()
            if self.comparison(selection, said_field):
                return True
            raise Unmapped(f"a comparison on {said_field.text!r}")
        if span.has("number") and not span.has("value") and said_field is not None:
            self.take()  # "with population 10000", "signed in 2025"
            self.set_number(selection, said_field, span.get("number"), "eq")
            return True
        if span.has("number") and not span.has("value") and 1000 <= span.get("number") <= 2999 and explicit:
            self.take()  # "projects from 2023": the year of a date field, or a field named year
            self.set_year(selection, int(span.get("number")))
            return True
        if span.has("value") and not span.has("class") and (explicit or enumerating):
            self.take()
            if not set(relation.split()) - PREPOSITIONS:  # "the states that iowa borders": the verb after it
                relation = f"{relation} {self.relation_after()}".strip()
            named_fields = said_field.get("field") if said_field is not None else self.field_said_after(span)
            self.constrain(selection, span, relation, self.class_after(span), named_fields or [])
            self.enumerating = True
            return True
        if (span.has("class") or span.has("superlative") or span.has("term")) and explicit and relation:
            inner = self.selection()
            selection.where[self.link(selection, inner, relation)] = {"in": inner}
            return True
        self.at = start
        return False

    def relation_after(self) -> str:
        """The relation words right after the cursor, up to what follows them ("borders" in "that iowa borders",
        "border" in "does iowa border")."""
        words = []
        index = self.at
        while index < len(self.spans) and self.filler(self.spans[index]):
            text = self.spans[index].text
            if text in RELATION_WORDS and text not in PREPOSITIONS:
                words.append(text)
            index += 1
        return " ".join(words)

    def class_after_filler(self, offset: int) -> bool:
        index = self.at + offset
        while index < len(self.spans) and self.filler(self.spans[index]):
            index += 1
        return index < len(self.spans) and self.spans[index].has("class") and \
            self.spans[index].get("class") is not None

    def counted_link(self, outer: Selection, inner: Selection, relation: str) -> str | None:
        """The field of `inner`'s documents that names `outer`'s (a city's state), when `outer`'s documents have
        no list of them: "the state with the most cities" counts the cities naming each state."""
        references = self.reader.profile.references
        if any(klass == outer.klass and target == inner.klass and self.reader.kind(name) == "list"
               for (klass, name), target in references.items()):
            return None
        reverse = sorted(name for (klass, name), target in references.items()
                         if klass == inner.klass and target == outer.klass)
        named = self.reader.named_by(relation, reverse)
        return self.choose(f"counted@{inner.klass}", named or reverse) if reverse else None

    def relates_onward(self) -> bool:
        """Whether what follows the field at the cursor (past filler) is something it can relate to: a value, a
        set of documents, a superlative or a negation."""
        index = self.at + 1
        while index < len(self.spans) and self.filler(self.spans[index]):
            index += 1
        if index >= len(self.spans):
            return False
        after = self.spans[index]
        if after.has("number") and not after.has("value"):
            return True
        return any(after.has(kind) for kind in ("value", "class", "superlative", "term", "not")) \
            and not (after.has("field") and not after.has("class") and not after.has("value"))

    def comparison_follows(self) -> bool:
        index = self.at + 1
        while index < len(self.spans) and self.filler(self.spans[index]) and self.spans[index].text != "between":
            index += 1
        if index >= len(self.spans):
            return False
        after = self.spans[index]
        return after.has("comparative") or after.has("date_comparative") or after.text == "between"

    def field_said_after(self, value: Span) -> list[str]:
        """A field that holds the value named right after it ('the puzzle genre', 'p-004 among their keywords'),
        consumed ('when was p-017 signed': `signed` does not hold p-017, it is what is asked)."""
        start = self.at
        self.skip_filler()
        span = self.peek()
        holding = {name for name, _, _ in value.get("value")}
        if span is not None and span.has("field") and not span.has("class") and not span.has("value") \
                and (holding & set(span.get("field")) or not self.names_document(value, None)) \
                and not self.relates_onward():
            self.take()
            return span.get("field")
        self.at = start
        return []

    # --- comparisons -------------------------------------------------------------------------------------------
    def comparison(self, selection: Selection, said_field: Span | None) -> bool:
        """'more than 5 ...', 'above 300 thousand', 'after march 2023', 'between 2022 and 2024' on the field said
        before or after it (or the class's only number field)."""
        start = self.at
        span = self.take()
        if span.text == "between":
            low = self.number_or_date()
            if low is None or (self.peek() is None or self.peek().text != "and"):
                self.at = start
                return False
            self.take()
            high = self.number_or_date(year=low[1] if low[0] == "month" else None)
            if high is None:
                self.at = start
                return False
            if low[0] == "month" and low[1][0] is None and high[0] == "month":
                low = ("month", (high[1][0], low[1][1]))
            name = self.compared_field(selection, said_field, low[0])
            self.set_bound(selection, name, "gte", low)
            self.set_bound(selection, name, "lte", high)
            return True
        operator = span.get("comparative") or span.get("date_comparative")
        bound = self.number_or_date()
        if bound is None:
            self.at = start
            return False
        name = self.compared_field(selection, said_field, bound[0])
        self.set_bound(selection, name, operator, bound)
        return True

    def number_or_date(self, year: int | None = None) -> tuple[str, Any] | None:
        """('number', N) with a multiplier ('300 thousand'), ('year', Y), ('month', (Y, M)) or None."""
        span = self.peek()
        if span is None:
            return None
        if span.has("month"):
            self.take()
            month = span.get("month")
            nxt = self.peek()
            if nxt is not None and nxt.has("number"):
                self.take()
                return "month", (int(nxt.get("number")), month)
            if year is not None:
                return "month", (year, month)
            return "month", (None, month)
        if span.has("number") and not span.has("value"):
            self.take()
            number = span.get("number")
            nxt = self.peek()
            if nxt is not None and nxt.has("multiplier"):
                self.take()
                number *= nxt.get("multiplier")
                return "scaled", number
            if number.is_integer() and 1000 <= number <= 2999:
                return "year", int(number)
            return "number", number
        return None

    def compared_field(self, selection: Selection, said_field: Span | None, kind: str) -> str:
        after = self.peek()
        if said_field is None and after is not None and (after.has("field") or after.has("quantity")) \
                and not after.has("class"):
            said_field = self.take()
        if said_field is not None:
            if said_field.has("quantity") and not said_field.has("field"):
                return self.quantity(said_field.get("quantity"), selection.klass)
            return self.pick_field(said_field.get("field"), selection.klass, "", key=f"field@{said_field.start}",
                                   kinds=("number", "date"))
        wanted = ("date",) if kind == "month" else ("number", "date")
        candidates = self.reader.fields_of(selection.klass, wanted)
        if kind == "year":
            years = [name for name in candidates if field_words(name)[0] == "year"]
            candidates = years or [name for name in candidates if self.reader.kind(name) == "date"]
        return self.choose("compared", candidates)

    def set_bound(self, selection: Selection, name: str, operator: str, bound: tuple[str, Any]) -> None:
        kind, value = bound
        clause = selection.where.setdefault(name, {})
        if not isinstance(clause, dict):
            raise Unmapped(f"two conditions on {name!r}")
        if self.reader.kind(name) == "date":
            if kind == "month":
                year, month = value
                if year is None:
                    raise Unmapped("a month without a year")
                clause[operator] = f"{year}-{month:02d}"
            elif kind == "year":
                clause[operator] = str(value)
            else:
                raise Unmapped(f"{name!r} is a date, not a number")
        else:
            if kind == "month":
                raise Unmapped(f"{name!r} is a number, not a date")
            clause[operator] = self.in_field_units(name, value, scaled=kind == "scaled")

    def in_field_units(self, name: str, value: float, scaled: bool) -> float:
        """A number said in full ('300 thousand') in the unit of a field named with one (budget_k: thousands)."""
        unit = self.lexicon.fields.units.get(name)
        factor = UNIT_FACTORS.get(unit or "", 1.0)
        if scaled and factor != 1.0:
            value = value / factor
        return int(value) if float(value).is_integer() else value

    def set_number(self, selection: Selection, said_field: Span, number: float, operator: str) -> None:
        name = self.pick_field(said_field.get("field"), selection.klass, "", key=f"field@{said_field.start}",
                               kinds=("number", "date"))
        if self.reader.kind(name) == "date":
            if not (number.is_integer() and 1000 <= number <= 2999):
                raise Unmapped(f"{name!r} is a date: {number:g} is not a year")
            selection.where[name] = str(int(number))
        else:
            selection.where[name] = int(number) if number.is_integer() else number

    def set_year(self, selection: Selection, year: int) -> None:
        candidates = self.reader.fields_of(selection.klass, ("number", "date"))
        years = [name for name in candidates if field_words(name)[0] == "year"]
        dates = [name for name in candidates if self.reader.kind(name) == "date"]
        name = self.choose("year", years or dates)
        selection.where[name] = year if self.reader.kind(name) == "number" else str(year)

    # --- ranking and emptiness ---------------------------------------------------------------------------------
    def field_for_empty(self, selection: Selection, span: Span, relation: str) -> str:
        """'states with no rivers', 'states that border no other states': the list field that would hold them."""
        self.take()
        if span.has("field") and not span.has("class"):
            while (nxt := self.peek()) is not None and nxt.has("class") and nxt.get("class") is not None:
                self.take()  # "no bordering state"
            return self.pick_field(span.get("field"), selection.klass, relation, key=f"field@{span.start}")
        inner = Selection(span.get("class"))
        lists = [name for name in self.reader.fields_of(selection.klass, ("list",))
                 if self.reader.profile.references.get((selection.klass, name)) == inner.klass]
        named = self.reader.named_by(relation, lists)
        if span.has("field"):
            named = named or [name for name in span.get("field") if name in lists]
        if not (named or lists):
            raise Unmapped(f"no field of the {selection.klass or 'documents'} lists {inner.klass or 'documents'}")
        return self.choose(f"empty@{span.start}", named or lists)

    def rank(self, selection: Selection, superlative: tuple[str, str | None], limit: int | None) -> None:
        direction, quantity = superlative
        op = "argmax" if direction == "max" else "argmin"
        if quantity is None:
            if (by := self.next_meaningful()) is not None and self.at < len(self.spans) and \
                    any(span.text == "by" for span in self.spans[self.at: self.spans.index(by)]) and \
                    (by.has("field") or by.has("quantity")):
                selection.rank, selection.limit = (op, ""), limit  # "top 3 projects by budget": tail() names it
                return
            raise Unmapped("'most' of what")
        if quantity == "age":  # a field named for age (year, founded) before any other date
            self.ranked_by_age = True
            named = self.lexicon.quantity_fields("age", self.reader.fields_of(selection.klass, ("number", "date")),
                                                 by_meaning=False)
            name = self.choose("age", named or self.reader.fields_of(selection.klass, ("date",)))
        else:
            name = self.quantity(quantity, selection.klass)
        selection.rank, selection.limit = (op, name), limit

    def rankable(self, name: str, klass: str | None) -> str:
        """A field a superlative can rank by: numbers and dates, lists by their length, and a string field by
        the number field of the same documents that measures it (highest_point -> highest_elevation_m)."""
        kind = self.reader.kind(name)
        if kind in ("number", "date", "list"):
            return name
        measure = self.measure_of(name, klass)
        if measure is not None:
            return measure
        raise Unmapped(f"nothing ranks {name!r}")

    # --- resolution --------------------------------------------------------------------------------------------
    def pick_field(self, candidates: list[str], klass: str | None, relation: str, key: str,
                   kinds: tuple[str, ...] = ("string", "number", "date", "list")) -> str:
        present = self.reader.profile.fields_of(klass)
        fitting = [name for name in candidates if name in present and name not in NOT_ASKABLE
                   and self.reader.kind(name) in kinds]
        if not fitting:
            raise Unmapped(f"the {klass or 'documents'} have no field {' or '.join(candidates)}")
        named = self.reader.named_by(relation, fitting) if relation else []
        chosen = self.choose(key, named or fitting)
        self.vocabulary |= self.lexicon.synonym_words.get(chosen, set())
        return chosen

    def constrain(self, selection: Selection, value: Span, relation: str, value_class: str | None,
                  said: list[str] | None = None) -> None:
        """Qualify `selection` by a value: a field of its documents that holds it, the documents the value names
        (through a field that names other documents), or - said with a relation like 'of', 'called' - the
        documents themselves. A field said next to the value, or the relation's words, choose among several."""
        klass = selection.klass
        subjects = self.reader.profile.subjects
        options: list[tuple[str, Any]] = []
        if value_class is None:
            holding = sorted({name for name, occurrence_class, _ in value.get("value")
                              if (klass is None or occurrence_class == (klass or UNCLASSED))
                              and name not in subjects})
            declared = [name for name in holding if name in self.lexicon.declared]
            named = [name for name in holding if name in (said or ())]  # "fishing among their keywords"
            options += [("field", name) for name in named or declared or holding]  # then the fields declared
        named_classes = sorted({occurrence_class for name, occurrence_class, _ in value.get("value")
                                if name in subjects and (value_class is None or occurrence_class == value_class)})
        for other in named_classes:
            if other == (klass or UNCLASSED) and value_class is None:
                if not set(relation.split()) - {"of", "called", "named", "is", "that", "which", "whose", "as"}:
                    options.append(("self", self.subject_holding(value, klass)))
                continue
            inner = Selection(other if other != UNCLASSED else None, named=True)
            subject = self.subject_holding(value, inner.klass)
            inner.where[subject] = self.stored(subject, value.text)
            try:
                options.append(("link", (inner, self.link(selection, inner, relation))))
            except Unmapped:
                continue
        references = self.reader.profile.references
        for name in self.reader.named_by(relation, self.reader.fields_of(klass, ("string", "list"))):
            if ("field", name) not in options and references.get((klass or UNCLASSED, name)) in named_classes:
                options.append(("field", name))  # "how many states border hawaii": none does, and that is the answer
        if said:
            options = [option for option in options if option[0] == "field" and option[1] in said] or options
        elif named_classes:  # the value names documents: only fields a relation word or a class noun name link
            options = [option for option in options if option[0] == "self" or self.plain_or_named(option, relation)]
        if not options:
            raise Unmapped(f"how {value.text!r} relates to the {klass or 'documents'}")
        named = self.relation_named(options, relation)
        if named and len(named_classes) > 1 and value.start > 0 and self.spans_before(value) == "the":
            # "next to the mississippi": a state and a river; the relation fits both readings, so both are made
            named = named + [option for option in options if option not in named and self.plain_or_named(option, "")]
        selves = [option for option in options if option[0] == "self"]
        if selves and relation and not set(relation.split()) - {"of", "called", "named", "as"}:
            named = selves  # "the state of nevada", "the city called springfield"
        kind, detail = self.choose(f"value@{value.start}", named or options)
        if kind in ("field", "self"):
            self.add_value(selection, detail, value.text)
        else:
            inner, name = detail
            selection.where[name] = {"in": inner}

    def stored(self, name: str, text: str) -> str:
        """A value as the field stores it (the question's words are folded: "atlanta georgia"; a format's word is
        its type: "markdown" -> md)."""
        if name == "type" and text in self.lexicon.format_words:
            return self.lexicon.format_words[text]
        if name not in self.reader.profile.fields:
            return text
        values = self.reader.profile.fields[name].values
        return values.get(text) or values.get(singular(text)) or text  # "platformers" -> platformer

    def add_value(self, selection: Selection, name: str, value: str) -> None:
        """A value for a field; a second value for the same field makes it 'any of' ("racing or platformers")."""
        self.vocabulary |= self.lexicon.synonym_words.get(name, set())
        value = self.stored(name, value)
        present = selection.where.get(name)
        both = self.reader.kind(name) == "list" and self.conjunction == "and"
        if present is not None and self.conjunction == "and" and not both \
                and any(span.text == "both" for span in self.spans):
            if not isinstance(present, str):
                raise Unmapped(f"three values that {name!r} should all hold")
            selection.where[name] = {"all_of": [present, value]}  # "both puzzle and racing": values in both sets
        elif present is None:
            selection.where[name] = value
        elif isinstance(present, dict) and "contains" in present and both:
            present["contains"].append(value)
        elif isinstance(present, str) and both:
            selection.where[name] = {"contains": [present, value]}
        elif isinstance(present, list):
            present.append(value)
        elif isinstance(present, str):
            selection.where[name] = [present, value]
        else:
            raise Unmapped(f"two conditions on {name!r}")
        self.enumerated.setdefault(name, []).append(value)

    def plain_or_named(self, option: tuple[str, Any], relation: str) -> bool:
        """An option through a field named after a class (rivers, state: plain containment, which 'in', 'has',
        'through' express) or through one the relation's words name (borders for 'bordering')."""
        kind, detail = option
        name = detail if kind == "field" else detail[1]
        if kind == "link" and detail[0].produces:
            name = detail[0].produces
        return self.reader.class_named(name) or bool(self.reader.named_by(relation, [name]))

    def relation_named(self, options: list[tuple[str, Any]], relation: str) -> list[tuple[str, Any]]:
        """The options whose field the relation's words name."""
        if not relation:
            return []
        named = []
        for kind, detail in options:
            name = detail if kind == "field" else detail[1] if kind == "link" else None
            produced = detail[0].produces if kind == "link" else None
            if name and (self.reader.named_by(relation, [name]) or (produced and
                                                                    self.reader.named_by(relation, [produced]))):
                named.append((kind, detail))
        return named

    def link(self, outer: Selection, inner: Selection, relation: str, ranking: bool = False) -> str:
        """The field of `outer`'s documents whose values are names of `inner`'s documents; or, the other way
        round, `outer`'s names among the values a field of `inner`'s documents holds (then `inner` is made to
        produce that field's values). The relation's words choose when both ways or several fields exist."""
        references = self.reader.profile.references
        forward = [("forward", name) for (klass, name), target in sorted(references.items())
                   if klass == outer.klass and target == inner.klass]
        reverse = [] if ranking else [("reverse", name) for (klass, name), target in sorted(references.items())
                                      if klass == inner.klass and target == outer.klass]
        named = [option for option in forward + reverse if self.reader.named_by(relation, [option[1]])]
        if not named and self.reader.named_by(relation, self.reader.fields_of(outer.klass, ("string", "list"))):
            # "states that border the longest river": the relation said names a field that does not hold rivers
            raise Unmapped(f"{relation!r} does not relate the {inner.klass or 'documents'} to the "
                           f"{outer.klass or 'documents'}")
        options = named or [option for option in forward + reverse if self.reader.class_named(option[1])]
        if not options:
            raise Unmapped(f"how the {inner.klass or 'documents'} relate to the {outer.klass or 'documents'}")
        way, name = self.choose(f"link@{inner.klass}@{self.at}", options)
        if way == "forward":
            return name
        inner.produces = name
        return self.reader.subject(outer.klass)


def compile_reading(reading: Reading, reader: Reader, inner: bool = False) -> dict[str, Any]:
    """The metadata query tool's JSON form of a reading (`inner`: a query whose values another one matches, so
    documents are named as other documents name them)."""
    selection = reading.selection
    split = next(((name, clause["all_of"]) for name, clause in selection.where.items()
                  if isinstance(clause, dict) and "all_of" in clause), None)
    if split is not None or selection.excluded is not None:
        return compile_set_operation(reading, reader, inner, split)
    where = compile_where(selection, reader)
    if reading.answer == "count":
        if selection.rank is not None:
            raise Unmapped("a count of a ranked selection")
        return {"op": "count", "where": where}
    if reading.answer in ("sum", "avg", "count_distinct"):
        return {"op": reading.answer, "field": reading.field, "where": where}
    if reading.answer == "groups":
        query = {"op": "group_by", "by": reading.field, "where": where}
        if reading.aggregate is not None:
            op, measured = reading.aggregate
            query["aggregate"] = {"op": op, "field": measured}
        if reading.having:
            query["having"] = reading.having
        return query
    if selection.counted is not None:
        direction, by, inner = selection.counted
        if direction != "argmax" or reading.field is not None:
            raise Unmapped("the fewest related documents, or a field of the most named one")
        inner_where = compile_where(inner, reader)
        if selection.where:  # the outer's own conditions: only its documents are counted
            inner_where[by] = {"in": compile_reading(Reading("values", Selection(selection.klass,
                                                                                 dict(selection.where))), reader,
                                                     inner=True)}
        return {"op": "top_n", "by": by, "where": inner_where, "limit": 1}
    if selection.rank is not None:
        op, rank_field = selection.rank
        returned = reading.field or selection.produces or reader.subject(selection.klass, readable=not inner)
        query: dict[str, Any] = {"op": op, "field": rank_field, "return": returned, "where": where}
        if selection.limit:
            query["limit"] = selection.limit
        return query
    if reading.field is None and selection.produces is None:  # the documents themselves, named by their subject
        return {"op": "list", "field": reader.subject(selection.klass, readable=not inner), "where": where,
                "limit": EVERY}
    returned = reading.field or selection.produces
    if selection.named and reading.field is not None:
        return {"op": "lookup", "field": returned, "where": where, "limit": EVERY}
    return {"op": "distinct", "field": returned, "where": where, "limit": EVERY}


def compile_set_operation(reading: Reading, reader: Reader, inner: bool,
                          split: tuple[str, list[str]] | None) -> dict[str, Any]:
    """Values (or documents) in both of two sets ("publishers with both puzzle and racing games"), or those of a
    set without the ones a negated value names ("citrus themed projects not released")."""
    if reading.answer != "values" or reading.selection.rank is not None:
        raise Unmapped("a count or a ranking over a set operation")
    selection = replace(reading.selection, excluded=None)
    if split is not None:
        name, values = split
        parts = [replace(selection, where={**selection.where, name: value}) for value in values]
        return {"op": "intersect", "queries": [compile_reading(replace(reading, selection=part), reader, inner)
                                               for part in parts]}
    taken_out = replace(selection, where={**selection.where, **reading.selection.excluded})
    return {"op": "except", "queries": [compile_reading(replace(reading, selection=part), reader, inner)
                                        for part in (selection, taken_out)]}


def compile_where(selection: Selection, reader: Reader) -> dict[str, Any]:
    where: dict[str, Any] = {}
    if selection.klass is not None and selection.klass != UNCLASSED:
        class_field = reader.class_field(selection.klass)
        where[class_field] = reader.profile.fields[class_field].values.get(selection.klass, selection.klass)
    for name, clause in selection.where.items():
        if isinstance(clause, dict) and isinstance(clause.get("in"), Selection):
            inner: Selection = clause["in"]
            where[name] = {"in": compile_reading(Reading("values", inner, inner.produces), reader, inner=True)}
        else:
            where[name] = clause
    return where
