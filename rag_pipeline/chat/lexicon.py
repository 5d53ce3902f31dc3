"""The words of a question, read against a corpus: which spans name values of fields, classes of documents, fields,
business terms, superlatives, comparisons, counting and the like. Built from the corpus profile
(structured/profile.py), the field registry and the declared terms; knows English, never a particular corpus.

Fields are found by their names (without unit suffixes: `length_km` is "length"), their declared synonyms, the
forms of those words (border, borders, bordering), and, for a word nothing else explains, by meaning: the packaged
embedding model's nearest field name, when it is near enough.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rag_pipeline.embed.embedder import Embedder
from rag_pipeline.fields.terms import Term
from rag_pipeline.ingest.formats import FORMATS
from rag_pipeline.structured.operations import BY_NAME
from rag_pipeline.structured.profile import UNCLASSED, Profile, normal, singular

# Unit suffixes a field name may end with: `length_km` measures length in km.
UNITS = {"km": "km", "km2": "km²", "m": "m", "mi": "miles", "miles": "miles", "sq_miles": "square miles",
         "sq_km": "km²", "usd": "USD", "eur": "EUR", "k": "thousand", "kg": "kg", "g": "g", "pct": "%",
         "percent": "%", "ms": "ms", "s": "s", "h": "h", "ft": "ft", "cm": "cm", "mm": "mm"}
# Units of measure a question may ask in (general English): known words, so a question in them is an exact one.
UNIT_WORDS = frozenset((
    "km", "kilometer", "kilometers", "kilometre", "kilometres", "mile", "miles", "meter", "meters", "metre",
    "metres", "m", "feet", "foot", "ft", "yard", "yards", "inch", "inches", "cm", "mm", "square", "sq", "acre",
    "acres", "hectare", "hectares", "km2", "kg", "kilogram", "kilograms", "gram", "grams", "pound", "pounds",
    "lb", "lbs", "ton", "tons", "tonne", "tonnes", "liter", "liters", "litre", "litres", "gallon", "gallons",
    "dollar", "dollars", "usd", "euro", "euros", "eur"))  # not time: "how many days did the trial last" is a text's
# What an adjective measures (general English): "the longest X" ranks X by length.
QUANTITIES: dict[str, tuple[str, ...]] = {
    "size": ("size", "area", "surface", "extent"),
    "length": ("length", "distance"),
    "height": ("height", "elevation", "altitude"),
    "population": ("population", "inhabitants", "people", "residents", "citizens", "populations"),
    "density": ("density", "population density"),
    "age": ("age", "year", "created", "founded"),
    "price": ("price", "cost", "budget", "amount", "value"),
    "weight": ("weight", "mass"),
    "speed": ("speed", "velocity"),
    "depth": ("depth",),
}
SUPERLATIVES: dict[str, tuple[str, str | None]] = {  # word -> (max or min, the quantity it ranks by; None: a count)
    "largest": ("max", "size"), "biggest": ("max", "size"), "greatest": ("max", "size"), "smallest": ("min", "size"),
    "tiniest": ("min", "size"), "longest": ("max", "length"), "shortest": ("min", "length"),
    "highest": ("max", "height"), "tallest": ("max", "height"), "lowest": ("min", "height"),
    "most populous": ("max", "population"), "most populated": ("max", "population"),
    "least populous": ("min", "population"), "least populated": ("min", "population"),
    "densest": ("max", "density"), "most dense": ("max", "density"), "least dense": ("min", "density"),
    "sparsest": ("min", "density"), "most sparsely populated": ("min", "density"),
    "deepest": ("max", "depth"), "heaviest": ("max", "weight"), "lightest": ("min", "weight"),
    "most expensive": ("max", "price"), "cheapest": ("min", "price"), "least expensive": ("min", "price"),
    "oldest": ("min", "age"), "earliest": ("min", "age"), "newest": ("max", "age"), "latest": ("max", "age"),
    "most recent": ("max", "age"), "most recently": ("max", "age"), "last": ("max", "age"), "fastest": ("max", "speed"),
    "slowest": ("min", "speed"), "most": ("max", None), "fewest": ("min", None), "least": ("min", None),
    "top": ("max", None), "maximum": ("max", None), "minimum": ("min", None), "max": ("max", None),
    "min": ("min", None),
}
# Nouns that name a quantity, whatever the corpus calls its field: "how many people" asks for the population.
QUANTITY_NOUNS = {noun: quantity for quantity, nouns in QUANTITIES.items() for noun in nouns}
# Words that say the same relation, and the word a field for it would be named by (general English).
RELATION_SYNONYMS = {"adjacent": "border", "adjoin": "border", "adjoins": "border", "adjoining": "border",
                     "neighbor": "border", "neighbors": "border", "neighboring": "border", "neighbour": "border",
                     "neighbours": "border", "neighbouring": "border", "next": "border", "surround": "border",
                     "surrounds": "border", "surrounding": "border", "bordering": "border", "borders": "border",
                     "bordered": "border"}
# Words that name a field by another word (general English): "who wrote it" asks for its author.
FIELD_SYNONYMS = {"wrote": "author", "written": "author", "writer": "author", "costs": "price", "cost": "price",
                  "priced": "price"}
# What "how big", "how long" ... ask for.
HOW_ADJECTIVES = {"big": "size", "large": "size", "small": "size", "long": "length", "high": "height",
                  "tall": "height", "deep": "depth", "old": "age", "heavy": "weight", "expensive": "price",
                  "dense": "density", "populous": "population", "populated": "population"}
COMPARATIVES = {"more than": "gt", "greater than": "gt", "over": "gt", "above": "gt", "bigger than": "gt",
                "larger than": "gt", "higher than": "gt", "longer than": "gt", "at least": "gte",
                "less than": "lt", "fewer than": "lt", "under": "lt", "below": "lt", "smaller than": "lt",
                "lower than": "lt", "shorter than": "lt", "at most": "lte", "no more than": "lte"}
COUNTING = BY_NAME["count"].cues
SUMMING = BY_NAME["sum"].cues
AVERAGING = BY_NAME["avg"].cues
NEGATIONS = ("no", "not", "none", "without", "except", "excluding", "other than", "never")
# Phrases that name the whole collection: "in the catalogue", "overall" filter nothing. What else names it (a
# country, a company) is the corpus's to say: a term declared as `all` in the sources file (fields/terms.py).
SCOPES = ("in the catalogue", "in the catalog", "in the collection", "in the corpus", "in total", "overall", "of all",
          "in all", "there", "all", "the catalogue", "the catalog", "catalogue", "catalog", "the collection",
          "collection", "the corpus", "corpus", "the index", "we have", "do we have")
SCOPE_PREFIXES = ("", "the ", "in ", "in the ", "of ", "of the ", "across ", "across the ", "throughout ",
                  "throughout the ")
# A follow-up's pointer to the documents of the turn before ("how many of those are there"): its filters are carried
# over by the chat agent, so here it reads as "the documents".
BACK_REFERENCES = ("those", "these", "them")
GENERIC_NOUNS = ("document", "documents", "doc", "docs", "file", "files", "item", "items", "entry", "entries",
                 "record", "records", "one", "ones", "page", "pages", "note", "notes")
QUESTION_WORDS = ("what", "which", "who", "whom", "where", "when", "whats", "what's", "name", "names", "list",
                  "show", "give", "tell")
STOP = frozenset(("the", "a", "an", "is", "are", "was", "were", "be", "been", "do", "does", "did", "me", "please",
                  "i", "you", "we", "can", "could", "would", "will", "it", "its", "their", "they", "them", "of",
                  "to", "for", "and", "or", "by", "at", "on", "in", "from", "about", "there", "exist", "exists",
                  "found", "any", "some", "all", "each", "every", "that", "which", "who", "whose", "with", "has",
                  "have", "having", "had", "as", "than", "this", "these", "those", "into", "s", "so", "also",
                  "other", "another", "located", "situated", "lie", "lies", "known", "us", "one", "different",
                  "distinct", "various", "unique", "separate", "individual", "respective"))
# Words that relate one set to another (the field between them is chosen by the words): general English.
RELATION_WORDS = frozenset(("in", "of", "on", "at", "from", "through", "thru", "across", "along", "into", "within",
                            "with", "has", "have", "having", "contain", "contains", "containing", "include",
                            "includes", "border", "borders", "bordering", "bordered", "adjacent", "adjoin",
                            "adjoining", "adjoins", "next", "neighbor", "neighbors", "neighboring", "neighbour",
                            "neighbours", "neighbouring", "surround", "surrounding", "surrounds", "run", "runs",
                            "running", "ran", "flow", "flows", "flowing", "pass", "passes", "passing", "cross",
                            "crosses", "crossing", "traverse", "traverses", "traversed", "traversing", "go",
                            "goes", "going", "located", "lie", "lies", "situated", "found", "stay", "stays",
                            "wash", "washed", "by", "for", "under", "within", "live", "lives", "living", "called",
                            "named", "whose", "where", "towards", "to", "among", "amongst", "during", "behind",
                            "belonging", "about", "regarding", "concerning", "per"))
# How questions name the built-in fields worth asking about.
BUILTIN_PHRASES = {"type": ("type", "doc type", "file type", "document type", "format", "file format"), "folder": ("folder", "directory"),
                   "tags": ("tag",), "source": ("source",)}
# Verbs that carry no condition of their own in "which years do the projects span" (general English).
EMPTY_VERBS = frozenset(("span", "spans", "cover", "covers", "covered", "appear", "appears", "appearing", "use",
                         "uses", "used", "hold", "holds", "mention", "mentions", "mentioned", "exist", "exists",
                         "work", "works", "working", "still", "currently", "now", "get", "gets", "make", "makes",
                         "belong", "belongs", "tagged", "labelled", "labeled", "marked", "dated", "listed",
                         "date", "dates", "value", "values", "state", "states", "stated", "say", "says", "said",
                         "specify", "specifies", "specified", "come", "comes", "coming", "both"))
# Number words and multipliers.
MULTIPLIERS = {"thousand": 1e3, "k": 1e3, "million": 1e6, "mn": 1e6, "billion": 1e9, "bn": 1e9}
UNIT_FACTORS = {"thousand": 1e3, "million": 1e6, "billion": 1e9}
NUMBER_WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
                "ten": 10, "twenty": 20, "fifty": 50, "hundred": 100}
MONTHS = {month: number for number, month in enumerate(
    "january february march april may june july august september october november december".split(), start=1)}
DATE_COMPARATIVES = {"after": "gt", "since": "gte", "before": "lt", "until": "lte", "till": "lte"}
GROUPING = BY_NAME["group_by"].cues
MEANING_THRESHOLD = 0.55  # cosine between a word and a field name for the word to name the field by meaning


@dataclass(frozen=True)
class Span:
    """A run of question tokens [start, end) and what it may mean (several readings when it is ambiguous)."""

    start: int
    end: int
    text: str
    readings: tuple[tuple[str, Any], ...]  # (kind, detail): value, class, field, term, superlative, ...

    def has(self, kind: str) -> bool:
        return any(reading[0] == kind for reading in self.readings)

    def get(self, kind: str) -> Any:
        return next((detail for reading, detail in self.readings if reading == kind), None)

    def known(self) -> bool:
        """Whether the corpus or the question grammar gives the words any meaning (not only a plain word)."""
        return any(kind != "word" for kind, _ in self.readings)


@dataclass
class FieldPhrases:
    """The ways questions name each field, and the unit a field's name carries."""

    phrases: dict[str, set[str]] = field(default_factory=dict)  # phrase -> fields
    units: dict[str, str] = field(default_factory=dict)  # field -> unit

    def add(self, phrase: str, name: str) -> None:
        phrase = normal(phrase)
        if phrase:
            self.phrases.setdefault(phrase, set()).add(name)


def field_words(name: str) -> tuple[str, str | None]:
    """(the words of a field's name without a unit suffix, the unit): length_km -> ("length", "km")."""
    parts = name.removeprefix("doc_").split("_")
    for size in (2, 1):
        unit = "_".join(parts[-size:])
        if len(parts) > size and unit in UNITS:
            return " ".join(parts[:-size]), UNITS[unit]
    return " ".join(parts), None


def word_forms(phrase: str) -> set[str]:
    """A phrase and the forms its last word takes in questions: border -> borders, bordering, bordered."""
    words = phrase.split()
    last = words[-1]
    stem = singular(last)
    forms = {last, stem, stem + "s", stem + "es", stem + "ing", stem + "ed"}
    if stem.endswith("y"):
        forms.add(stem[:-1] + "ies")
    if stem.endswith("e"):
        forms.update({stem[:-1] + "ing", stem + "d"})
    if stem.endswith("er") and len(stem) > 4:  # publisher: publish, publishes, published, publishing
        verb = stem[:-2]
        forms.update({verb, verb + "es", verb + "s", verb + "ing", verb + "ed"})
    return {" ".join([*words[:-1], form]) for form in forms}


class Lexicon:
    """Reads questions against one corpus profile (and its registry's declared synonyms and the terms)."""

    def __init__(self, profile: Profile, synonyms: dict[str, Sequence[str]], terms: Sequence[Term],
                 embedder: Embedder | None = None) -> None:
        self.profile = profile
        self.declared = set(synonyms)  # the fields the sources file declares
        self.terms = list(terms)
        self.embedder = embedder
        self.fields = FieldPhrases()
        for name, phrases in BUILTIN_PHRASES.items():
            if name in profile.fields:
                for phrase in phrases:
                    for form in word_forms(phrase):
                        self.fields.add(form, name)
        for name in profile.fields:
            if name in ("id", "path", "name", "folder", "source", "tags", "type", "chars", "pages", "ingested_at"):
                continue
            words, unit = field_words(name)
            if unit:
                self.fields.units[name] = unit
            for form in word_forms(words):
                self.fields.add(form, name)
            for synonym in synonyms.get(name, ()):
                for form in word_forms(normal(synonym)):
                    self.fields.add(form, name)
        for (_, name), target in profile.references.items():
            words, _ = field_words(name)
            for noun in {target, singular(target), target + "s"}:
                if noun not in words.split():
                    self.fields.add(f"{words} {noun}", name)  # "capital city", "capital cities"
        self.format_words = {word: fmt.doc_type for fmt in FORMATS for word in fmt.words}
        # The words of each field's declared synonyms ("kind of game" for genre: "game" is genre's word too).
        self.synonym_words = {name: {singular(word) for synonym in names for word in normal(synonym).split()}
                              for name, names in synonyms.items() if names}

    # --- spans --------------------------------------------------------------------------------------------------
    def tokens(self, question: str) -> list[str]:
        """The question's words (a hyphenated word is split unless it is a value: "citrus-themed", "p-004")."""
        words = []
        for word in normal(question.replace("?", " ")).split():
            if "-" in word and word not in self.profile.occurrences:
                words += [part for part in word.split("-") if part]
            else:
                words.append(word)
        return words

    def spans(self, tokens: list[str]) -> list[Span]:
        """The question's spans, longest readings first; every token belongs to exactly one span."""
        spans: list[Span] = []
        index = 0
        while index < len(tokens):
            for size in range(min(6, len(tokens) - index), 0, -1):
                text = " ".join(tokens[index: index + size])
                readings = self.readings(text, size)
                if readings and size > 1 and self.names_then_class(tokens[index: index + size]):
                    continue  # "colorado river": the river named colorado, not a value "colorado river"
                if readings:
                    spans.append(Span(index, index + size, text, tuple(readings)))
                    index += size
                    break
            else:
                spans.append(Span(index, index + 1, tokens[index], (("word", tokens[index]),)))
                index += 1
        for position, span in enumerate(spans):  # "over" is a comparison before a number, else a relation word
            if span.has("comparative") and not (position + 1 < len(spans) and spans[position + 1].has("number")):
                spans[position] = Span(span.start, span.end, span.text, (("word", span.text),))
        return spans

    def names_then_class(self, words: list[str]) -> bool:
        """Whether the words are a document's name followed by its class noun ("mississippi river")."""
        klass = self.profile.class_of_value(words[-1])
        name = " ".join(words[:-1])
        return klass is not None and any(field_name in self.profile.subjects and occurrence_class == klass
                                         for field_name, occurrence_class, _ in self.profile.occurrences.get(name, ()))

    def readings(self, text: str, size: int) -> list[tuple[str, Any]]:
        """Every meaning `text` can have, most specific first."""
        found: list[tuple[str, Any]] = []
        profile = self.profile
        if text in SUPERLATIVES:
            found.append(("superlative", SUPERLATIVES[text]))
        if text in COMPARATIVES:
            found.append(("comparative", COMPARATIVES[text]))
        for words, kind in ((COUNTING, "count"), (SUMMING, "sum"), (AVERAGING, "avg"), (NEGATIONS, "not")):
            if text in words:
                found.append((kind, text))
        for term in self.terms:
            if not term.where:  # a name of the whole collection
                if any(text == prefix + term.phrase for prefix in SCOPE_PREFIXES):
                    found.append(("scope", text))
            elif text == term.phrase or (size == len(term.words) - 1 and text == " ".join(term.words[:-1])):
                found.append(("term", term))
        number = re.fullmatch(r"(\d+(?:\.\d+)?)(k|m|bn)?", text)
        if number:
            found.append(("number", float(number.group(1)) * MULTIPLIERS.get(number.group(2) or "", 1)))
        elif text in NUMBER_WORDS:
            found.append(("number", float(NUMBER_WORDS[text])))
        if text in MULTIPLIERS and size == 1:
            found.append(("multiplier", MULTIPLIERS[text]))
        if text in MONTHS:
            found.append(("month", MONTHS[text]))
        if text in DATE_COMPARATIVES:
            found.append(("date_comparative", DATE_COMPARATIVES[text]))
        if text in GROUPING:
            found.append(("grouping", text))
        klass = profile.class_of_value(text)
        if klass is not None:
            found.append(("class", klass))
        if text in GENERIC_NOUNS or text in BACK_REFERENCES:
            found.append(("class", None))
        if text in self.format_words:  # a format is a value of `type` even where no document has it: "0 pdfs"
            found.append(("value", profile.occurrences.get(self.format_words[text]) or [("type", UNCLASSED, 0)]))
        if text in self.fields.phrases:
            found.append(("field", sorted(self.fields.phrases[text])))
        if text in QUANTITY_NOUNS:
            found.append(("quantity", QUANTITY_NOUNS[text]))
        synonym = FIELD_SYNONYMS.get(text)
        if synonym and synonym in self.fields.phrases and text not in self.fields.phrases:
            found.append(("field", sorted(self.fields.phrases[synonym])))
        occurrences = profile.occurrences.get(text) or (profile.occurrences.get(singular(text)) if size == 1 else None)
        if occurrences and not (size == 1 and text in STOP and text not in profile.class_sizes):
            found.append(("value", occurrences))
        if text in SCOPES:
            found.append(("scope", text))
        if size == 1 and text in QUESTION_WORDS:
            found.append(("question", text))
        if size == 1 and text in HOW_ADJECTIVES:
            found.append(("how", HOW_ADJECTIVES[text]))
        if size == 1 and text in UNIT_WORDS and not found:
            found.append(("unit", text))
        return found

    # --- fields by meaning --------------------------------------------------------------------------------------
    def field_by_meaning(self, words: str, candidates: Sequence[str]) -> str | None:
        """The candidate field whose name is nearest in meaning to `words` (cosine of the packaged model's vectors),
        when it is near enough and clearly nearer than the next one."""
        if self.embedder is None or not candidates:
            return None
        names = list(candidates)
        vectors = self.embedder.embed_queries([field_words(name)[0] for name in names] + [words])
        scores = vectors[:-1] @ vectors[-1]
        order = np.argsort(-scores)
        best = float(scores[order[0]])
        runner_up = float(scores[order[1]]) if len(order) > 1 else -1.0
        if best >= MEANING_THRESHOLD and best - runner_up >= 0.05:
            return names[int(order[0])]
        return None

    def quantity_fields(self, quantity: str, candidates: Sequence[str], by_meaning: bool = True) -> list[str]:
        """The numeric fields among `candidates` that measure `quantity` ("size" -> area_sq_miles): those whose
        name says it (the fewest extra words first), else the only one, else (`by_meaning`) the nearest in
        meaning."""
        nouns = QUANTITIES.get(quantity, (quantity,))
        named = [name for name in candidates if set(field_words(name)[0].split()) & set(nouns)
                 or field_words(name)[0] in nouns]
        if named:
            fewest = min(len(field_words(name)[0].split()) for name in named)
            return [name for name in named if len(field_words(name)[0].split()) == fewest]
        if len(candidates) == 1 and quantity == "size":  # "the biggest city": its one measure
            return list(candidates)
        nearest = self.field_by_meaning(" ".join(nouns[:2]), candidates) if by_meaning else None
        return [nearest] if nearest else []
