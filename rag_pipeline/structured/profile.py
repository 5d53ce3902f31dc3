"""The profile of a corpus's fields, for reading questions against it: which values each field holds (and in how
many documents of each class), which fields name classes of documents ("kind: city", "folder: contracts"), which
fields name single documents (a name, a title), and which fields of one class hold the names of another's documents
(a city's `state` names states; a state's `borders` names states). Read from the sidecar by the metadata query
tool's module (profile_rows); computed once per state of the sidecar (and of the sources file) and key scope.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from rag_pipeline.index.vector_store import Scope
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar
from rag_pipeline.structured.query import StateCache, declarations_state, profile_rows

MAX_CLASSES = 40  # a field with more distinct values does not name classes of documents
MIN_CLASS_SHARE = 0.25  # ... nor one that fewer than this share of the documents have
MAX_FIELD_VALUES = 20_000  # fields with more distinct values are not read into the profile (ids, free text)
SUBJECT_DISTINCT = 0.8  # a field whose values are this distinct over its documents names them
REFERENCE_SHARE = 0.6  # a field refers to a class when this share of its values are that class's names
UNCLASSED = ""  # the class of a document no class field classifies


def normal(text: str) -> str:
    """How values and question phrases are compared: lower case, punctuation and runs of space folded."""
    kept = "".join(char if char.isalnum() or char in " '-&" else " " for char in str(text).lower())
    return " ".join(kept.replace("'s ", " ").split())


@dataclass
class FieldProfile:
    name: str
    kind: str
    documents: int
    distinct: int
    values: dict[str, str] = field(default_factory=dict)  # normal form -> the stored value (most common spelling)


@dataclass
class Profile:
    documents: int
    fields: dict[str, FieldProfile]
    class_fields: list[str]  # fields whose values name classes of documents, most documents first
    classes: dict[str, dict[str, int]]  # class value (normal form) -> field -> documents of that class having it
    class_sizes: dict[str, int]  # class value -> documents
    class_field_of: dict[str, str]  # class value -> its class field
    subjects: list[str]  # fields whose values name single documents: the names other documents use first
    readable_subjects: list[str]  # the same, codes ("P-017") last: how an answer names documents
    occurrences: dict[str, list[tuple[str, str, int]]]  # value (normal) -> (field, class, documents)
    references: dict[tuple[str, str], str]  # (class, field) -> the class whose documents' names the field holds

    def fields_of(self, klass: str | None) -> dict[str, int]:
        """Field -> documents having it, among the documents of `klass` (every field without a class)."""
        if klass is None:
            return {name: profile.documents for name, profile in self.fields.items()}
        return self.classes.get(klass, {})

    def class_of_value(self, value: str) -> str | None:
        """The class a word names, in its singular or plural form ("city", "cities"; "project", "projects")."""
        for candidate in (value, singular(value), value + "s", value + "es", value[:-1] + "ies"):
            if candidate in self.class_sizes:
                return candidate
        return None


def singular(word: str) -> str:
    """An English plural's singular, for the regular endings (cities -> city, boxes -> box, states -> state)."""
    for suffix, replacement in (("ies", "y"), ("sses", "ss"), ("xes", "x"), ("ches", "ch"), ("shes", "sh")):
        if word.endswith(suffix) and len(word) > len(suffix) + 1:
            return word[: -len(suffix)] + replacement
    if word.endswith("s") and not word.endswith(("ss", "us", "is")) and len(word) > 3:
        return word[:-1]
    return word


_profiles = StateCache()


def corpus_profile(settings: Settings, sidecar: Sidecar, scope: Scope | None = None) -> Profile:
    """The profile of the documents `scope` lets a key see, reused while the sidecar and sources file are unchanged."""
    return _profiles.get((sidecar.location, scope), declarations_state(settings, sidecar),
                         lambda: build_profile(sidecar, scope))


def build_profile(sidecar: Sidecar, scope: Scope | None) -> Profile:
    total, stats, rows, presence = profile_rows(sidecar, scope, MAX_FIELD_VALUES)
    fields = {name: FieldProfile(name, kind, documents, distinct) for name, kind, documents, distinct in stats}
    values_of: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))  # field -> value -> shas
    spellings: dict[str, dict[str, Counter]] = defaultdict(lambda: defaultdict(Counter))
    for name, sha, text in rows:
        key = normal(text)
        if key:
            values_of[name][key].add(sha)
            spellings[name][key][text] += 1
    for name, values in spellings.items():
        fields[name].values = {key: counts.most_common(1)[0][0] for key, counts in values.items()}
    class_fields = sorted(
        (name for name, profile in fields.items() if profile.kind == "string" and 2 <= profile.distinct <= MAX_CLASSES
         and profile.documents >= MIN_CLASS_SHARE * total and name not in ("name", "folder", "source")
         or name == "folder" and 2 <= profile.distinct <= MAX_CLASSES),
        key=lambda name: -fields[name].documents)
    class_of_sha: dict[str, str] = {}
    class_field_of: dict[str, str] = {}
    for name in class_fields:  # the first class field that classifies a document gives its class
        for value, shas in values_of[name].items():
            class_field_of.setdefault(value, name)
            for sha in shas:
                class_of_sha.setdefault(sha, value)
    classes: dict[str, Counter] = defaultdict(Counter)
    for sha, name in presence:
        classes[class_of_sha.get(sha, UNCLASSED)][name] += 1
    class_sizes = Counter(class_of_sha.values())
    occurrences: dict[str, Counter] = defaultdict(Counter)
    for name, values in values_of.items():
        for value, shas in values.items():
            for sha in shas:
                occurrences[value][(name, class_of_sha.get(sha, UNCLASSED))] += 1
    unique = [name for name, profile in fields.items() if profile.kind == "string" and profile.documents >= 2
              and profile.distinct >= SUBJECT_DISTINCT * profile.documents
              and name not in ("id", "name", "folder", "type")]
    names_of = class_names(unique, values_of, class_of_sha)
    references = reference_fields(fields, classes, values_of, class_of_sha, names_of, unique)
    # A field whose values are all names of another class's documents (a state's capital names a city) refers
    # to them; the fields left name their own documents (a name, a title, an id).
    def main_class(name: str) -> str:
        return max(classes, key=lambda klass: classes[klass].get(name, 0))

    subjects = sorted((name for name in unique if (main_class(name), name) not in references),
                      key=lambda name: -fields[name].documents)
    names_of = class_names(subjects, values_of, class_of_sha)
    references = reference_fields(fields, classes, values_of, class_of_sha, names_of, subjects)
    # The names other documents use come first ("Missouri" in a state's rivers, not the title "Missouri River").
    referenced = set().union(*(values_of[name].keys() for _, name in references))
    subjects.sort(key=lambda name: (-len(referenced & values_of[name].keys()), -fields[name].documents))
    readable = sorted(subjects, key=lambda name: coded(values_of[name]))
    return Profile(total, fields, class_fields, {klass: dict(counts) for klass, counts in classes.items()},
                   dict(class_sizes), class_field_of, subjects, readable,
                   {value: [(name, klass, count) for (name, klass), count in counts.most_common()]
                    for value, counts in occurrences.items()}, references)


def coded(values: dict[str, set[str]]) -> bool:
    """Whether most of a field's values are codes (they hold a digit: "P-017", "INV-2024-3"), not names."""
    return sum(any(char.isdigit() for char in value) for value in values) > len(values) / 2


def class_names(subjects: list[str], values_of: dict[str, dict[str, set[str]]],
                class_of_sha: dict[str, str]) -> dict[str, set[str]]:
    """Class -> the (normal) names its documents have in the given fields."""
    names: dict[str, set[str]] = defaultdict(set)
    for name in subjects:
        for value, shas in values_of[name].items():
            for sha in shas:
                names[class_of_sha.get(sha, UNCLASSED)].add(value)
    return names


def reference_fields(fields: dict[str, FieldProfile], classes: dict[str, Counter],
                     values_of: dict[str, dict[str, set[str]]], class_of_sha: dict[str, str],
                     names_of: dict[str, set[str]], subjects: list[str]) -> dict[tuple[str, str], str]:
    """(class, field) -> the class whose documents' names the field's values are (for most of them)."""
    references: dict[tuple[str, str], str] = {}
    for klass, present in classes.items():
        for name in present:
            if name not in values_of or fields[name].kind not in ("string", "list"):
                continue
            held = {value for value, shas in values_of[name].items()
                    if any(class_of_sha.get(sha, UNCLASSED) == klass for sha in shas)}
            others = {other: len(held & names) for other, names in names_of.items()
                      if not (other == klass and name in subjects)}
            best = max(others, key=lambda other: others[other], default=None)
            if best is not None and held and others[best] >= REFERENCE_SHARE * len(held):
                references[(klass, name)] = best
    return references
