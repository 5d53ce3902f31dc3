"""Search filters on document fields: a declared filterable field (`--filter genre=puzzle`) becomes a condition on
the chunk payload's `fields` labels, beside the built-in payload filters."""

from __future__ import annotations

from collections.abc import Mapping

from rag_pipeline.errors import InputError
from rag_pipeline.fields.values import FieldKind, scalar_text, text_kind
from rag_pipeline.index.vector_store import FIELDS_FIELD, FILTER_KEYS, Condition, Filters, filter_values


def label_value(kind: FieldKind, value: str) -> str:
    """A filter value as the points' labels spell it (numbers without a trailing .0, dates in ISO form)."""
    inferred, parsed = text_kind(value)
    return scalar_text(parsed) if inferred == kind and kind in ("number", "date") else value.strip()


def field_conditions(filters: Filters | None, filterable: Mapping[str, FieldKind]
                     ) -> tuple[Filters | None, list[Condition]]:
    """Split search filters into the built-in ones (left to parse_filters) and conditions on the declared filterable
    fields (a point matches when its document's field has the value; on a list field, contains it)."""
    if filters is None or not isinstance(filters, Mapping):
        return filters, []
    builtin, conditions = {}, []
    for key, value in filters.items():
        if key in FILTER_KEYS:
            builtin[key] = value
            continue
        if key not in filterable:
            allowed = ", ".join([*FILTER_KEYS, *sorted(filterable)])
            raise InputError(f"unknown filter field {key!r}; allowed: {allowed} (a document field is a filter when "
                             "it is declared filterable: true)", code="unknown_filter_field")
        labels = tuple(f"{key}={label_value(filterable[key], item)}" for item in filter_values(key, value))
        conditions.append(Condition(FIELDS_FIELD, "value" if len(labels) == 1 else "any", labels))
    return builtin, conditions
