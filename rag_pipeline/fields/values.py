"""Typed field values: the kinds a document field has (string, number, date, list), a value with its origin, and
how raw values (YAML, document properties, text) become typed ones. Every layer that stores, filters or queries
fields reads them through this module."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Literal

FieldKind = Literal["string", "number", "date", "list"]
FIELD_KINDS: tuple[FieldKind, ...] = ("string", "number", "date", "list")
FIELD_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
MAX_TEXT = 2000  # characters kept of one string value
MAX_ITEMS = 100  # elements kept of one list value
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?")
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_LIST_SEPARATOR = re.compile(r"\s*[,;]\s*")
LIST_PROPERTIES = {"keywords"}  # comma- or semicolon-separated in every format


@dataclass(frozen=True)
class FieldValue:
    """One typed value: `value` is a str (string, date as ISO text), a float (number) or a list of str (list)."""

    kind: FieldKind
    value: Any
    origin: str  # front_matter | docx | pptx | pdf | html | heading | declared (coerced) ...

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "value": self.value, "origin": self.origin}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> FieldValue:
        return cls(data["kind"], data["value"], data["origin"])


@dataclass
class DocumentFields:
    """What one document states: its fields by name and the problems met while reading them."""

    values: dict[str, FieldValue] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def add(self, key: Any, raw: Any, origin: str, *, infer_text: bool) -> None:
        """Add one property under its normalised name; a problem is recorded as an error instead."""
        name = field_name(key)
        if name is None:
            self.errors.append(f"{origin}: key {str(key)[:80]!r} is not a usable field name")
            return
        try:
            value = typed_value(raw, origin, infer_text=infer_text, as_list=name in LIST_PROPERTIES)
        except ValueError as error:
            self.errors.append(f"{origin}: field {name!r}: {error}")
            return
        if value is not None and name not in self.values:
            self.values[name] = value

    def to_json(self) -> dict[str, Any]:
        return {"values": {name: value.to_json() for name, value in self.values.items()}, "errors": self.errors}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> DocumentFields:
        if not data:
            return cls()
        return cls({name: FieldValue.from_json(value) for name, value in data["values"].items()}, list(data["errors"]))


def field_name(key: Any) -> str | None:
    """A property key as a field name: lower case, runs of other characters as `_`; None when nothing usable is left
    (or it does not start with a letter)."""
    name = re.sub(r"[^a-z0-9]+", "_", str(key).strip().lower()).strip("_")
    return name if FIELD_NAME.fullmatch(name) else None


def text_kind(text: str) -> tuple[FieldKind, Any]:
    """A string's inferred type: an ISO date, a number, else a string."""
    text = text.strip()
    if _ISO_DATE.fullmatch(text):
        try:
            return "date", iso_date(datetime.fromisoformat(text.replace("Z", "+00:00")))
        except ValueError:
            pass
    if _NUMBER.fullmatch(text):
        number = float(text)
        if math.isfinite(number):
            return "number", number
    return "string", text


def iso_date(value: date) -> str:
    """A date or datetime as ISO text (no time part when it is midnight; time zones dropped)."""
    if isinstance(value, datetime):
        value = value.replace(tzinfo=None)
        return value.date().isoformat() if value.time() == datetime.min.time() else value.isoformat()
    return value.isoformat()


def scalar_text(item: Any) -> str:
    """A list element as a string (numbers without a trailing .0)."""
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, float) and item.is_integer():
        return str(int(item))
    if isinstance(item, date):
        return iso_date(item)
    if isinstance(item, (dict, list)):
        raise ValueError("a list element is itself a list or mapping")
    return str(item).strip()[:MAX_TEXT]


def typed_value(raw: Any, origin: str, *, infer_text: bool, as_list: bool = False) -> FieldValue | None:
    """A raw property value as a FieldValue; None for an empty value; ValueError for a shape we cannot store."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None
    if isinstance(raw, (list, tuple)):
        items = [text for text in (scalar_text(item) for item in raw if item is not None) if text][:MAX_ITEMS]
        return FieldValue("list", items, origin)
    if isinstance(raw, dict):
        raise ValueError("a nested mapping is not a field value")
    if as_list and isinstance(raw, str):
        return FieldValue("list", [item for item in _LIST_SEPARATOR.split(raw.strip()) if item][:MAX_ITEMS], origin)
    if isinstance(raw, bool):
        return FieldValue("string", "true" if raw else "false", origin)
    if isinstance(raw, (int, float)):
        if not math.isfinite(raw):
            raise ValueError(f"{raw} is not a finite number")
        return FieldValue("number", float(raw), origin)
    if isinstance(raw, date):
        return FieldValue("date", iso_date(raw), origin)
    text = str(raw)[:MAX_TEXT]
    if infer_text:
        kind, value = text_kind(text)
        return FieldValue(kind, value, origin)
    return FieldValue("string", text.strip(), origin)


def coerce(value: FieldValue, kind: FieldKind) -> FieldValue:
    """A value as the declared kind; ValueError naming the value when it does not read as one."""
    if value.kind == kind:
        return value
    if kind == "list":
        items = value.value if value.kind == "list" else (
            [item for item in _LIST_SEPARATOR.split(value.value) if item] if value.kind == "string"
            else [scalar_text(value.value)])
        return FieldValue("list", items, value.origin)
    if value.kind == "list":
        if len(value.value) != 1:
            raise ValueError(f"a list of {len(value.value)} values is not one {kind}")
        value = FieldValue("string", value.value[0], value.origin)
    text = scalar_text(value.value)
    if kind == "string":
        return FieldValue("string", text, value.origin)
    inferred, parsed = text_kind(text)
    if inferred != kind:
        raise ValueError(f"{text[:80]!r} is not a {kind}")
    return FieldValue(kind, parsed, value.origin)
