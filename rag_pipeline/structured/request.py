"""A metadata query as a typed value: parsed from its JSON form against the fields registry, and stated in words.

The JSON form (the HTTP body, the CLI's flags or --json-body, the agent's tool call):
    {"op", "field"?, "by"?, "return"?, "where"?, "aggregate"?, "having"?, "queries"?, "limit"?}
`where` maps fields to a value (equals; on a list field: contains), a list (any of), {"gte"|"gt"|"lte"|"lt": V}
(a range of numbers or dates; a date given as YYYY or YYYY-MM covers that year or month), {"contains": V or [V, ...]}
(an element of a list field or a substring of a string; several: every one), {"empty": true|false} (no value for
the field / some value), {"in": QUERY} (any value another query produces: a semi-join) or {"contains": QUERY} (a
list field holding every value QUERY produces); or it is a list of "F=V" strings (the CLI form). Text compares
ignoring case and runs of spaces (structured/query.py). Queries nest at most MAX_DEPTH deep under the top one.

Every field is checked against the registry and every value against its field's type; an InputError names the
part that is wrong (`queries[1]: op must be one of ...`, `where 'state' in: ...`) with a stable code. No SQL here:
structured/query.py compiles the typed query to parameterised SQL.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from rag_pipeline.errors import InputError
from rag_pipeline.fields.registry import RegistryField
from rag_pipeline.fields.values import text_kind
from rag_pipeline.structured.operations import AGGREGATES, BY_NAME, COMPARISONS, NAMES, SET_OPERATIONS
from rag_pipeline.structured.roster import STATUSES

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000  # rows of a result, and values a subquery may produce
DEFAULT_TOP_N = 10
MAX_DEPTH = 5  # levels of queries under the top one ("states that border states that border states that border X")
MAX_SUBQUERIES = 12  # queries in one request's tree besides the top one
RANGE_KEYS = ("gte", "gt", "lte", "lt")
CLAUSE_KEYS = ("eq", "in", "contains", "empty", *RANGE_KEYS)
REQUEST_KEYS = ("op", "field", "by", "return", "where", "aggregate", "having", "queries", "limit")
RECONCILIATION_KEYS = ("status", "field", "roster")  # reconciliation's own where keys (the rest: document fields)
ARGUMENT_CODES = {"field": "invalid_field", "by": "invalid_field", "return": "invalid_field", "where": "invalid_where",
                  "aggregate": "invalid_aggregate", "having": "invalid_having", "queries": "invalid_queries",
                  "limit": "invalid_limit"}
FIELD_KINDS_OF = {"sum": ("number",), "avg": ("number",), "min": ("number", "date"), "max": ("number", "date"),
                  "argmax": ("number", "date", "list"), "argmin": ("number", "date", "list"),
                  "top_n": ("number", "date")}  # the field types an operation (or aggregate) reads
VALUE_PRODUCERS = "distinct, list --field, lookup --field, argmax/argmin, group_by or a set operation of values"
SYMBOLS = {"gte": ">=", "gt": ">", "lte": "<=", "lt": "<", "eq": "="}
AGGREGATE_WORDS = {"count": "count", "sum": "sum", "avg": "average", "min": "minimum", "max": "maximum",
                   "count_distinct": "number of distinct values"}
_CLI_CLAUSE = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)\s*(>=|<=|!=|=|>|<|~)(.*)$", re.DOTALL)
_PARTIAL_DATE = re.compile(r"^(\d{4})(?:-(\d{2}))?$")

ClauseKind = Literal["eq", "in", "all", "contains", "range", "empty"]


@dataclass(frozen=True)
class Clause:
    """One where condition on a field. `kind`: eq (one value), in (any of the values), all (a list field holding
    every value; a string field containing every one), contains (a substring of a string field), range ((operator,
    bound) pairs), empty (values[0]: the field has no value, or False: some value). With `subquery`, the values of
    in/all are what that query produces (run first). `shown`: the condition in words."""

    field: str
    kind: ClauseKind
    values: tuple[Any, ...] = ()
    subquery: MetadataQuery | None = None
    shown: str = ""


@dataclass(frozen=True)
class Aggregate:
    """group_by's aggregate of each group: count (documents), or sum|avg|min|max|count_distinct of `field`."""

    op: str
    field: str | None = None


@dataclass(frozen=True)
class MetadataQuery:
    op: str  # an operation of structured/operations.py
    field: str | None = None
    by: str | None = None
    where: tuple[Clause, ...] = ()
    limit: int | None = None
    returns: str | None = None  # argmax/argmin: the field returned (the JSON key `return`)
    aggregate: Aggregate | None = None  # group_by
    having: tuple[tuple[str, float], ...] = ()  # group_by: (comparison, number) on the aggregate
    queries: tuple[MetadataQuery, ...] = ()  # intersect, union, except
    findings: tuple[tuple[str, tuple[str, ...]], ...] = ()  # reconciliation: (status|field|roster, any of)


def produces(query: MetadataQuery) -> Literal["values", "documents"] | None:
    """What a query's rows are when another query uses them: values (of a field), documents, or neither."""
    if query.op in SET_OPERATIONS:
        return produces(query.queries[0])
    if query.op in ("distinct", "group_by", "argmax", "argmin") or (query.op == "top_n" and query.by):
        return "values"
    if query.op in ("list", "lookup"):
        return "values" if query.field else "documents" if query.op == "list" else None
    return None


def check_field(name: Any, registry: Mapping[str, RegistryField], role: str) -> RegistryField:
    if not isinstance(name, str) or name not in registry:
        raise InputError(f"{role} {name!r} is not a queryable field; known fields: {', '.join(sorted(registry))}",
                         code="unknown_field")
    return registry[name]


def date_bounds(text: str) -> tuple[datetime, datetime]:
    """[start, end) of a date given as YYYY, YYYY-MM or an ISO date (the whole day) or datetime (that instant)."""
    text = str(text).strip()
    partial = _PARTIAL_DATE.match(text)
    if partial:
        year, month = int(partial.group(1)), int(partial.group(2) or 0)
        if month:
            if not 1 <= month <= 12:
                raise ValueError(f"{text!r} is not a date")
            end = datetime(year + month // 12, month % 12 + 1, 1)
            return datetime(year, month, 1), end
        return datetime(year, 1, 1), datetime(year + 1, 1, 1)
    kind, value = text_kind(text)
    if kind != "date":
        raise ValueError(f"{text!r} is not a date (use YYYY, YYYY-MM, YYYY-MM-DD or an ISO datetime)")
    start = datetime.fromisoformat(value)
    if len(text) == 10:
        return start, datetime.fromordinal(start.toordinal() + 1)
    return start, start


def typed_input(value: Any, spec: RegistryField, clause_field: str) -> Any:
    """A where value read as the field's type: a float for numbers, (start, end) for dates, a string otherwise."""
    if isinstance(value, (dict, list, bool)) or value is None:
        raise InputError(f"where {clause_field!r}: a value must be a string, number or date, got {value!r}",
                         code="invalid_where")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            raise InputError(f"where {clause_field!r}: the value is not valid Unicode text (a lone surrogate)",
                             code="invalid_where") from error
    try:
        if spec.kind == "number":
            kind, parsed = text_kind(str(value))
            if kind != "number":
                raise ValueError(f"{value!r} is not a number")
            return parsed
        if spec.kind == "date":
            return date_bounds(value)
    except ValueError as error:
        raise InputError(f"where {clause_field!r} ({spec.kind}): {error}", code="invalid_where") from error
    text = str(value).strip()
    if isinstance(value, float) and value.is_integer():
        text = str(int(value))
    return text


class _Parser:
    """Parses one request's tree of queries against the registry, counting its subqueries."""

    def __init__(self, registry: Mapping[str, RegistryField]) -> None:
        self.registry = registry
        self.subqueries = 0

    def query(self, body: Any, depth: int = 0) -> MetadataQuery:
        if not isinstance(body, Mapping):
            raise InputError(f'a query must be an object {{"op": ...}}, got {str(body)[:80]!r}',
                             code="invalid_subquery" if depth else "invalid_body")
        unknown = [str(key) for key in body if key not in REQUEST_KEYS]
        if unknown:
            raise InputError(f"unknown key(s) {', '.join(unknown)}; a query takes {', '.join(REQUEST_KEYS)}",
                             code="unknown_field")
        op = body.get("op")
        if op not in BY_NAME:
            raise InputError(f"op must be one of {', '.join(NAMES)}, got {op!r}", code="invalid_op")
        operation = BY_NAME[op]
        for key in ("return", "aggregate", "having", "queries"):
            if body.get(key) is not None and key not in operation.arguments:
                raise InputError(f"{op} takes no {key} (it takes {', '.join(operation.arguments)})",
                                 code=ARGUMENT_CODES[key])
        limit = body.get("limit")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or
                                  not 1 <= limit <= MAX_LIMIT):
            raise InputError(f"limit must be an integer from 1 to {MAX_LIMIT}, got {limit!r}", code="invalid_limit")
        if op in SET_OPERATIONS:
            return self.set_operation(op, body, limit, depth)
        raw_where = body.get("where") or {}
        findings: tuple[tuple[str, tuple[str, ...]], ...] = ()
        if op == "reconciliation" and isinstance(raw_where, Mapping):
            findings = self.findings(raw_where)
            raw_where = {name: value for name, value in raw_where.items() if name not in RECONCILIATION_KEYS}
        clauses = self.where(raw_where, depth)
        names = {key: body.get(key) for key in ("field", "by", "return")}
        for key, name in names.items():
            if name is not None:
                check_field(name, self.registry, key)
        query = MetadataQuery(op, names["field"], names["by"], clauses, limit, names["return"], findings=findings)
        given = {"field": query.field, "by": query.by, "where": clauses or None}
        for group in operation.required:
            if all(given[argument] is None for argument in group):
                if group == ("where",):
                    raise InputError(f"{op} needs a where clause naming the document (e.g. --where id=SHA or --where "
                                     "path=...)", code="missing_where")
                raise InputError(f"{op} needs --{group[0]} FIELD ({operation.summary})", code="missing_field")
        if op in FIELD_KINDS_OF and query.field is not None:
            self.check_kind(op, query.field, f"{op} --field")
        if op == "group_by":
            aggregate = self.aggregate(body.get("aggregate"))
            query = replace(query, aggregate=aggregate, having=self.having(body.get("having"), aggregate))
        return query

    def check_kind(self, op: str, name: str, role: str) -> None:
        kind = self.registry[name].kind
        if kind not in FIELD_KINDS_OF[op]:
            raise InputError(f"{role} needs a {' or '.join(FIELD_KINDS_OF[op])} field ({name} is {kind})",
                             code="invalid_field")

    def nested(self, body: Any, at: str, depth: int) -> MetadataQuery:
        """A query inside another one (`at` says where), its errors prefixed with where it is."""
        if depth + 1 > MAX_DEPTH:
            raise InputError(f"{at}: queries nest at most {MAX_DEPTH} levels deep", code="query_too_deep")
        self.subqueries += 1
        if self.subqueries > MAX_SUBQUERIES:
            raise InputError(f"{at}: a request holds at most {MAX_SUBQUERIES} subqueries", code="too_many_subqueries")
        try:
            return self.query(body, depth + 1)
        except InputError as error:
            raise InputError(f"{at}: {error.message}", code=error.code) from error

    def set_operation(self, op: str, body: Mapping[str, Any], limit: int | None, depth: int) -> MetadataQuery:
        for key in ("field", "by", "where"):
            if body.get(key):
                raise InputError(f"{op} takes queries (and limit), not {key}: put it in the queries",
                                 code=ARGUMENT_CODES[key])
        raw = body.get("queries")
        if not isinstance(raw, list) or len(raw) != 2:
            raise InputError(f"{op} needs queries: a list of two queries", code="invalid_queries")
        parts = tuple(self.nested(item, f"queries[{index}]", depth) for index, item in enumerate(raw))
        kinds = [produces(part) for part in parts]
        if kinds[0] is None or kinds[0] != kinds[1]:
            raise InputError(f"{op}: both queries must produce values ({VALUE_PRODUCERS}) or both documents (list), "
                             f"not {parts[0].op} and {parts[1].op}", code="invalid_queries")
        return MetadataQuery(op, limit=limit, queries=parts)

    def where(self, raw: Any, depth: int) -> tuple[Clause, ...]:
        if isinstance(raw, Mapping):
            return tuple(self.clause(name, value, depth) for name, value in raw.items())
        if isinstance(raw, list) and all(isinstance(item, str) for item in raw):
            return tuple(self.cli_clause(item) for item in raw)
        raise InputError("where must map fields to values, or be a list of 'FIELD=VALUE' strings",
                         code="invalid_where")

    def clause(self, name: str, value: Any, depth: int = 0) -> Clause:
        """One where entry of the JSON form."""
        spec = check_field(name, self.registry, "where field")
        if isinstance(value, list):
            if not value or len(value) > MAX_LIMIT:
                raise InputError(f"where {name!r}: 'any of' needs 1 to {MAX_LIMIT} values", code="invalid_where")
            return Clause(name, "in", tuple(typed_input(item, spec, name) for item in value),
                          shown=f"{name} in ({', '.join(map(str, value))})")
        if isinstance(value, Mapping):
            unknown = [key for key in value if key not in CLAUSE_KEYS]
            if unknown or not value:
                raise InputError(f"where {name!r}: use one of {', '.join(CLAUSE_KEYS)}", code="invalid_where")
            if set(value) & set(RANGE_KEYS):
                if set(value) - set(RANGE_KEYS):
                    raise InputError(f"where {name!r}: a range takes only {', '.join(RANGE_KEYS)}",
                                     code="invalid_where")
                if spec.kind not in ("number", "date"):
                    raise InputError(f"where {name!r}: a range needs a number or date field ({name} is {spec.kind})",
                                     code="invalid_where")
                return Clause(name, "range", tuple((key, typed_input(value[key], spec, name)) for key in RANGE_KEYS
                                                   if key in value),
                              shown=", ".join(f"{name} {SYMBOLS[key]} {value[key]}" for key in RANGE_KEYS
                                              if key in value))
            if len(value) != 1:
                raise InputError(f"where {name!r}: one of eq, in, contains or empty at a time", code="invalid_where")
            (key, inner), = value.items()
            if key == "empty":
                if not isinstance(inner, bool):
                    raise InputError(f"where {name!r}: empty takes true or false", code="invalid_where")
                return Clause(name, "empty", (inner,), shown=f"{name} is {'empty' if inner else 'not empty'}")
            if key in ("in", "contains") and isinstance(inner, Mapping):
                return self.semi_join(name, key, inner, depth)
            if key == "in":
                if not isinstance(inner, list):
                    raise InputError(f"where {name!r}: 'in' takes a list or a query", code="invalid_where")
                return self.clause(name, inner, depth)
            if key == "contains":
                return self.contains(name, inner)
            value = inner
        return Clause(name, "eq", (typed_input(value, spec, name),), shown=f"{name} = {value}")

    def contains(self, name: str, inner: Any) -> Clause:
        kind = self.registry[name].kind
        if kind not in ("list", "string"):
            raise InputError(f"where {name!r}: contains needs a list or string field", code="invalid_where")
        items = inner if isinstance(inner, list) else [inner]
        if not items or len(items) > MAX_LIMIT or any(
                not isinstance(item, (str, int, float)) or isinstance(item, bool) for item in items):
            raise InputError(f"where {name!r}: contains takes a string or a list of strings, got {inner!r}",
                             code="invalid_where")
        texts = tuple(typed_input(item, self.registry[name], name) for item in items)
        shown = f"{name} contains {' and '.join(texts)}"
        if len(texts) > 1:
            return Clause(name, "all", texts, shown=shown)
        return Clause(name, "contains" if kind == "string" else "eq", texts, shown=shown)

    def semi_join(self, name: str, key: str, inner: Mapping[str, Any], depth: int) -> Clause:
        """`{"in": QUERY}` (any value QUERY produces) or, on a list field, `{"contains": QUERY}` (every one)."""
        if key == "contains" and self.registry[name].kind != "list":
            raise InputError(f"where {name!r}: contains QUERY needs a list field", code="invalid_where")
        at = f"where {name!r} {key}"
        subquery = self.nested(inner, at, depth)
        if produces(subquery) != "values":
            raise InputError(f"{at}: {subquery.op} does not produce values (use {VALUE_PRODUCERS})",
                             code="invalid_subquery")
        return Clause(name, "in" if key == "in" else "all", subquery=subquery,
                      shown=f"{name} {key} ({stated(subquery, self.registry)})")

    def cli_clause(self, text: str) -> Clause:
        """`F=V` (equals; on a list field: contains), `F=V1|V2` (any of), `F>=V`, `F<=V`, `F>V`, `F<V` (range) or
        `F~V` (contains)."""
        match = _CLI_CLAUSE.match(text.strip())
        if not match or match.group(2) == "!=":
            raise InputError(f"--where {text!r}: use FIELD=VALUE, FIELD=V1|V2, FIELD>=V, FIELD<=V, FIELD>V, FIELD<V "
                             "or FIELD~V", code="invalid_where")
        name, operator, value = match.group(1), match.group(2), match.group(3).strip()
        if operator == "=":
            alternatives = value.split("|")
            return self.clause(name, alternatives if len(alternatives) > 1 else value)
        if operator == "~":
            return self.clause(name, {"contains": value})
        return self.clause(name, {{">=": "gte", "<=": "lte", ">": "gt", "<": "lt"}[operator]: value})

    def aggregate(self, raw: Any) -> Aggregate | None:
        if raw is None:
            return None
        if not isinstance(raw, Mapping) or set(raw) - {"op", "field"} or raw.get("op") not in AGGREGATES:
            raise InputError(f'aggregate must be {{"op": {"|".join(AGGREGATES)}, "field": F}}, got {raw!r}',
                             code="invalid_aggregate")
        op, name = raw["op"], raw.get("field")
        if op == "count":
            if name is not None:
                raise InputError("aggregate count counts documents and takes no field (count_distinct counts a "
                                 "field's values)", code="invalid_aggregate")
            return Aggregate(op)
        if name is None:
            raise InputError(f"aggregate {op} needs a field", code="invalid_aggregate")
        check_field(name, self.registry, "aggregate field")
        if op in FIELD_KINDS_OF:
            self.check_kind(op, name, f"aggregate {op}")
        return Aggregate(op, name)

    def having(self, raw: Any, aggregate: Aggregate | None) -> tuple[tuple[str, float], ...]:
        if raw is None:
            return ()
        if not isinstance(raw, Mapping) or not raw or any(
                key not in COMPARISONS or isinstance(bound, bool) or not isinstance(bound, (int, float))
                for key, bound in raw.items()):
            raise InputError(f"having must be {{{'|'.join(COMPARISONS)}: N}} (numbers), got {raw!r}",
                             code="invalid_having")
        if aggregate is not None and aggregate.field and self.registry[aggregate.field].kind == "date" and \
                aggregate.op in ("min", "max"):
            raise InputError(f"having compares numbers; the {aggregate.op} of {aggregate.field} is a date",
                             code="invalid_having")
        return tuple((key, float(bound)) for key, bound in raw.items())

    def findings(self, raw: Mapping[str, Any]) -> tuple[tuple[str, tuple[str, ...]], ...]:
        """reconciliation's own where keys: status (of STATUSES), field and roster; a value or any of a list."""
        found = []
        for key in RECONCILIATION_KEYS:
            if key not in raw:
                continue
            values = raw[key] if isinstance(raw[key], list) else [raw[key]]
            if not values or not all(isinstance(value, str) and value.strip() for value in values):
                raise InputError(f"where {key!r}: reconciliation takes a name or a list of names",
                                 code="invalid_where")
            values = [value.strip().upper() if key == "status" else value.strip() for value in values]
            wrong = [value for value in values if key == "status" and value not in STATUSES]
            if wrong:
                raise InputError(f"where 'status': {wrong[0]!r} is not one of {', '.join(STATUSES)}",
                                 code="invalid_where")
            found.append((key, tuple(values)))
        return tuple(found)


def parse_request(body: Mapping[str, Any], registry: Mapping[str, RegistryField]) -> MetadataQuery:
    """A query (and the queries inside it) from its JSON form. InputError names the first bad part."""
    return _Parser(registry).query({key: value for key, value in body.items() if value is not None}
                                   if isinstance(body, Mapping) else body)


def parse_clause(name: str, value: Any, registry: Mapping[str, RegistryField]) -> Clause:
    """One where entry of the JSON form (e.g. a request's filter ANDed to every query of a tree)."""
    return _Parser(registry).clause(name, value)


def with_clauses(query: MetadataQuery, clauses: tuple[Clause, ...]) -> MetadataQuery:
    """`query` with `clauses` ANDed to it and to every query inside it (what a request's filters bound)."""
    if not clauses:
        return query
    if query.op in SET_OPERATIONS:
        return replace(query, queries=tuple(with_clauses(part, clauses) for part in query.queries))
    where = tuple(replace(clause, subquery=with_clauses(clause.subquery, clauses)) if clause.subquery else clause
                  for clause in query.where)
    return replace(query, where=where + clauses)


def stated(query: MetadataQuery, registry: Mapping[str, RegistryField], documents: int | None = None) -> str:
    """The operation in words, from the typed query: "sum of population over 48 documents matching kind = state"
    (without `documents`: "sum of population matching kind = state", as a part of another query's statement)."""
    op, name = query.op, query.field or query.by
    if op in SET_OPERATIONS:
        what = "documents" if produces(query) == "documents" else "values"
        first, second = (f"({stated(part, registry)})" for part in query.queries)
        phrase = {"intersect": f"{what} in both {first} and {second}",
                  "union": f"{what} in either {first} or {second}",
                  "except": f"{what} in {first} but not in {second}"}[op]
    elif op in ("argmax", "argmin"):
        counted = registry[query.field].kind == "list" if query.field in registry else False
        extreme = ("most" if op == "argmax" else "fewest") if counted else \
            ("largest" if op == "argmax" else "smallest")
        best = f"the best {query.limit}" if query.limit and query.limit > 1 else "the document(s)"
        phrase = f"{query.returns or 'title'} of {best} with the {extreme} {query.field}"
    elif op == "group_by":
        aggregate = query.aggregate or Aggregate("count")
        phrase = f"documents per {name}" if aggregate.op == "count" else \
            f"{AGGREGATE_WORDS[aggregate.op]} of {aggregate.field} per {name}"
    elif op == "reconciliation":
        phrase = "roster reconciliation rows" + "".join(
            f"{' with' if index == 0 else ','} {key} = {' or '.join(values)}"
            for index, (key, values) in enumerate(query.findings))
    else:
        phrase = {"count": "count of documents", "list": f"list of {name}" if name else "list of documents",
                  "distinct": f"distinct values of {name}",
                  "top_n": f"top {query.limit or DEFAULT_TOP_N} by {query.field}" if query.field else
                  f"most common values of {query.by}",
                  "lookup": f"lookup of {name}" if name else "lookup of every field",
                  "count_distinct": f"number of distinct values of {name}"}.get(op) or \
            f"{AGGREGATE_WORDS[op]} of {name}"
    if documents is not None and op != "count":  # a count states its number itself
        phrase += f" over {documents} document{'' if documents == 1 else 's'}"
    conditions = ", ".join(clause.shown for clause in query.where)
    phrase += f" matching {conditions}" if conditions else ""
    if query.having:
        measure = (query.aggregate or Aggregate("count")).op
        phrase += "; only groups with " + " and ".join(f"{measure} {SYMBOLS[key]} {number:g}"
                                                        for key, number in query.having)
    return phrase
