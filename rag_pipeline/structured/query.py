"""The metadata query tool: typed operations over document fields, compiled to parameterised SQL on a read-only
sidecar connection (DuckDB with external access off, or a PostgreSQL read-only transaction), a row limit and a time
limit. The SQL is what DuckDB and PostgreSQL both run (sidecar/postgres.py gives PostgreSQL DuckDB's list_contains,
list_has_any and contains). No SQL text is ever taken from a caller
or a model: field names are checked against the registry and every value is a bound parameter.

Operations (documents are the unit; only fully ingested documents count):
    count                  how many documents match             rows: [{"count": N}]
    list     [--field F]   the matching documents               rows: [{"id", "path", <fields>}] by path
    distinct  --field F    the values of F                      rows: [{"value"}]
    group_by  --by F       documents per value of F             rows: [{"value", "count"}] (a list counts each element)
    top_n     --field F    documents with the largest F         rows: [{"id", "path", "value"}] (number or date F)
    top_n     --by F       the most common values of F          rows: [{"value", "count"}]
    lookup   [--field F]   the fields of the matching documents rows: [{"id", "path", "fields", ...}]
Where clauses (ANDed): equals (on a list field: contains), any of, range (numbers and dates; a date given as YYYY or
YYYY-MM covers that year or month), contains (a list element, or a substring of a string).
A value flagged as a prompt injection is withheld from the rows (structured/withheld.py; the result's `withheld`).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from rag_pipeline.errors import InputError, QueryTimeout
from rag_pipeline.fields.registry import RegistryField, build_registry, declared_fields
from rag_pipeline.fields.values import FieldKind, text_kind
from rag_pipeline.index.vector_store import Scope
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar, records
from rag_pipeline.sidecar.connection import Connection, Interrupted, file_state
from rag_pipeline.sidecar.postgres import PostgresConnection
from rag_pipeline.structured.operations import BY_NAME, NAMES
from rag_pipeline.structured.withheld import withhold_flagged

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
DEFAULT_TOP_N = 10
CONNECT_RETRY_SECONDS = 5.0
RANGE_KEYS = ("gte", "gt", "lte", "lt")
CLAUSE_KEYS = ("eq", "in", "contains", *RANGE_KEYS)
_CLI_CLAUSE = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)\s*(>=|<=|!=|=|>|<|~)(.*)$", re.DOTALL)
_PARTIAL_DATE = re.compile(r"^(\d{4})(?:-(\d{2}))?$")


@dataclass(frozen=True)
class Clause:
    """One where condition on a field: `kind` eq | in | contains | range (bounds as (operator, value) pairs)."""

    field: str
    kind: Literal["eq", "in", "contains", "range"]
    values: tuple[Any, ...]


@dataclass(frozen=True)
class MetadataQuery:
    op: str  # an operation of structured/operations.py
    field: str | None = None
    by: str | None = None
    where: tuple[Clause, ...] = ()
    limit: int | None = None


@dataclass
class QueryResult:
    op: str
    rows: list[dict[str, Any]]
    documents: list[dict[str, str]]
    truncated: bool
    total_documents: int = 0
    timings_ms: dict[str, float] = field(default_factory=dict)
    withheld: list[dict[str, Any]] = field(default_factory=list)  # flagged values replaced (structured/withheld.py)

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "rows": self.rows, "documents": self.documents, "truncated": self.truncated,
                "total_documents": self.total_documents, "timings_ms": self.timings_ms, "withheld": self.withheld}


REGISTRY_SQL = (
    "SELECT name, kind, count(DISTINCT sha) AS documents, array_agg(DISTINCT origin) AS origins FROM ("
    "  SELECT sha, name, kind, split_part(origin, ':', 1) AS origin FROM document_fields"
    "  UNION ALL SELECT l.sha, v.name, v.kind, 'roster' FROM roster_values v JOIN roster_links l USING (roster, key)"
    ") stored WHERE sha IN (SELECT sha FROM documents WHERE true{scope}) GROUP BY name, kind")


class StateCache:
    """Values computed from files, reused while the files' state (file_state) is unchanged."""

    def __init__(self) -> None:
        self._entries: dict[Any, tuple[Any, Any]] = {}

    def get(self, key: Any, state: Any, compute: Callable[[], Any]) -> Any:
        cached = self._entries.get(key)
        if cached is not None and cached[0] == state:
            return cached[1]
        value = compute()
        self._entries[key] = (state, value)
        return value


_registries = StateCache()  # (sidecar, scope) -> registry
_value_sets = StateCache()  # (sidecar, scope) -> named values


def registry_of(con: Connection, settings: Settings, sidecar: Sidecar,
                scope: Scope | None = None) -> dict[str, RegistryField]:
    """The registry over `con` (a connection to `sidecar`): the stored fields of the documents `scope` lets a key
    see (and every declared one); reused while neither the sidecar nor the declarations changed, since it costs a
    scan of every field row."""
    state = (sidecar.data_state(), file_state(Path(settings.sources_file)) if settings.sources_file else None)
    scoped, params = scope_condition(scope)
    return _registries.get((sidecar.location, scope), state, lambda: build_registry(
        records(con.execute(REGISTRY_SQL.format(scope=scoped), params)), declared_fields(settings)))


def load_registry(settings: Settings, sidecar: Sidecar, scope: Scope | None = None) -> dict[str, RegistryField]:
    """The fields the query tool accepts: built-ins, stored fields (stated, enriched, roster columns of joined
    documents; of the documents in `scope`) and declared ones (minus queryable: false)."""
    with sidecar.read_only() as con:
        return registry_of(con, settings, sidecar, scope)


MAX_NAMED_VALUES = 300  # fields with more distinct values are not offered to the planner as nameable values


def named_values(settings: Settings, sidecar: Sidecar, scope: Scope | None = None) -> dict[str, list[str]]:
    """field -> the distinct values of each string or list field with at most MAX_NAMED_VALUES of them, over the
    documents `scope` lets a key see (what a question can name: genres, publishers, themes, document types)."""
    scoped, params = scope_condition(scope)

    def compute() -> dict[str, list[str]]:
        with sidecar.read_only() as con:
            rows = con.execute(
                "SELECT name, array_agg(DISTINCT text_value ORDER BY text_value) FROM effective_fields WHERE kind IN "
                f"('string', 'list') AND sha IN (SELECT sha FROM documents WHERE status = 'ok'{scoped}) "
                f"GROUP BY name HAVING count(DISTINCT text_value) <= {MAX_NAMED_VALUES}", params).fetchall()
        return {name: list(found) for name, found in rows}

    return _value_sets.get((sidecar.location, scope), sidecar.data_state(), compute)


def values_table(spec: RegistryField) -> str:
    """Where a field's values are read: effective_fields when a roster supplies it (the join applies), else the
    cheaper own_fields (the same rows for a field no roster touches)."""
    return "effective_fields" if "roster" in spec.origins else "own_fields"


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
    if isinstance(value, (dict, list)) or value is None:
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
            if isinstance(value, bool):
                raise ValueError(f"{value!r} is not a number")
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


def parse_clause(name: str, value: Any, registry: Mapping[str, RegistryField]) -> Clause:
    """One where entry of the JSON form: V (equals), [V, ...] (any of), {gte|gt|lte|lt: V} (range), {contains: V},
    {eq: V}, {in: [...]}."""
    spec = check_field(name, registry, "where field")
    if isinstance(value, list):
        if not value or len(value) > MAX_LIMIT:
            raise InputError(f"where {name!r}: 'any of' needs 1 to {MAX_LIMIT} values", code="invalid_where")
        return Clause(name, "in", tuple(typed_input(item, spec, name) for item in value))
    if isinstance(value, dict):
        unknown = [key for key in value if key not in CLAUSE_KEYS]
        if unknown or not value:
            raise InputError(f"where {name!r}: use one of {', '.join(CLAUSE_KEYS)}", code="invalid_where")
        if set(value) & set(RANGE_KEYS):
            if set(value) - set(RANGE_KEYS):
                raise InputError(f"where {name!r}: a range takes only {', '.join(RANGE_KEYS)}", code="invalid_where")
            if spec.kind not in ("number", "date"):
                raise InputError(f"where {name!r}: a range needs a number or date field ({name} is {spec.kind})",
                                 code="invalid_where")
            return Clause(name, "range", tuple((key, typed_input(value[key], spec, name)) for key in RANGE_KEYS
                                               if key in value))
        if len(value) != 1:
            raise InputError(f"where {name!r}: one of eq, in or contains at a time", code="invalid_where")
        (key, inner), = value.items()
        if key == "in":
            if not isinstance(inner, list):
                raise InputError(f"where {name!r}: 'in' takes a list", code="invalid_where")
            return parse_clause(name, inner, registry)
        if key == "contains":
            if spec.kind not in ("list", "string"):
                raise InputError(f"where {name!r}: contains needs a list or string field", code="invalid_where")
            if not isinstance(inner, (str, int, float)) or isinstance(inner, bool):
                raise InputError(f"where {name!r}: contains takes one string, got {inner!r}", code="invalid_where")
            return Clause(name, "contains" if spec.kind == "string" else "eq", (str(inner).strip(),))
        value = inner
    return Clause(name, "eq", (typed_input(value, spec, name),))


def parse_cli_clause(text: str, registry: Mapping[str, RegistryField]) -> Clause:
    """`F=V` (equals; on a list field: contains), `F=V1|V2` (any of), `F>=V`, `F<=V`, `F>V`, `F<V` (range) or
    `F~V` (contains)."""
    match = _CLI_CLAUSE.match(text.strip())
    if not match or match.group(2) == "!=":
        raise InputError(f"--where {text!r}: use FIELD=VALUE, FIELD=V1|V2, FIELD>=V, FIELD<=V, FIELD>V, FIELD<V or "
                         "FIELD~V", code="invalid_where")
    name, operator, value = match.group(1), match.group(2), match.group(3).strip()
    if operator == "=":
        alternatives = value.split("|")
        return parse_clause(name, alternatives if len(alternatives) > 1 else value, registry)
    if operator == "~":
        return parse_clause(name, {"contains": value}, registry)
    return parse_clause(name, {{">=": "gte", "<=": "lte", ">": "gt", "<": "lt"}[operator]: value}, registry)


def parse_request(body: Mapping[str, Any], registry: Mapping[str, RegistryField]) -> MetadataQuery:
    """A query from its JSON form {"op", "field"?, "by"?, "where"?, "limit"?}; `where` is a mapping (FIELD: value
    form) or a list of "F=V" strings (the CLI form). InputError names the first bad part."""
    op = body.get("op")
    if op not in BY_NAME:
        raise InputError(f"op must be one of {', '.join(NAMES)}, got {op!r}", code="invalid_op")
    limit = body.get("limit")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT):
        raise InputError(f"limit must be an integer from 1 to {MAX_LIMIT}, got {limit!r}", code="invalid_limit")
    raw_where = body.get("where") or {}
    if isinstance(raw_where, Mapping):
        clauses = tuple(parse_clause(name, value, registry) for name, value in raw_where.items())
    elif isinstance(raw_where, list) and all(isinstance(item, str) for item in raw_where):
        clauses = tuple(parse_cli_clause(item, registry) for item in raw_where)
    else:
        raise InputError("where must map fields to values, or be a list of 'FIELD=VALUE' strings",
                         code="invalid_where")
    names = {key: body.get(key) for key in ("field", "by")}
    for key, name in names.items():
        if name is not None:
            check_field(name, registry, key)
    query = MetadataQuery(op, names["field"], names["by"], clauses, limit)
    given = {"field": query.field, "by": query.by, "where": clauses or None, "limit": limit}
    for group in BY_NAME[op].required:
        if all(given[argument] is None for argument in group):
            if group == ("where",):
                raise InputError(f"{op} needs a where clause naming the document (e.g. --where id=SHA or --where "
                                 "path=...)", code="missing_where")
            raise InputError(f"{op} needs --{group[0]} FIELD ({BY_NAME[op].summary})", code="missing_field")
    if op == "top_n" and query.field is not None and registry[query.field].kind not in ("number", "date"):
        raise InputError(f"top_n --field needs a number or date field ({query.field} is "
                         f"{registry[query.field].kind})", code="invalid_field")
    return query


def condition(clause: Clause, kind: FieldKind) -> tuple[str, list[Any]]:
    """The SQL condition (on effective_fields columns) and parameters of one clause."""
    if clause.kind == "contains":
        return "contains(lower(text_value), lower(?))", [clause.values[0]]
    if kind == "number":
        column = "number_value"
    elif kind == "date":
        if clause.kind == "range":
            parts, params = [], []
            for operator, (start, end) in clause.values:
                sql, value = {"gte": (">= ?", start), "gt": (">= ?", end) if end > start else ("> ?", start),
                              "lte": ("< ?", end) if end > start else ("<= ?", start), "lt": ("< ?", start)}[operator]
                parts.append(f"date_value {sql}")
                params.append(value)
            return " AND ".join(parts), params
        parts, params = [], []
        for start, end in clause.values:
            if end > start:
                parts.append("(date_value >= ? AND date_value < ?)")
                params += [start, end]
            else:
                parts.append("date_value = ?")
                params.append(start)
        return "(" + " OR ".join(parts) + ")", params
    else:
        column = "text_value"
    if clause.kind == "range":
        operators = {"gte": ">=", "gt": ">", "lte": "<=", "lt": "<"}
        return " AND ".join(f"{column} {operators[op]} ?" for op, _ in clause.values), [v for _, v in clause.values]
    if clause.kind == "in":
        return f"list_contains(?, {column})", [list(clause.values)]
    return f"{column} = ?", [clause.values[0]]


def output_value(kind: FieldKind, text: str | None, number: float | None) -> Any:
    """A stored value as a result shows it: numbers as numbers (integers without .0), the rest as text."""
    if kind == "number" and number is not None:
        return int(number) if float(number).is_integer() else number
    return text


def scope_condition(scope: Scope | None) -> tuple[str, list[Any]]:
    """The documents an API key may see: any of its sources and any of its tags."""
    parts, params = [], []
    if scope is not None and scope.sources:
        parts.append("list_has_any(sources, ?)")
        params.append(list(scope.sources))
    if scope is not None and scope.tags:
        parts.append("list_has_any(tags, ?)")
        params.append(list(scope.tags))
    return "".join(f" AND {part}" for part in parts), params


class Scratch:
    """A connection with a query's intermediate tables: temporary tables on DuckDB; on PostgreSQL, whose read-only
    transaction cannot create tables, materialized common table expressions put before each statement."""

    def __init__(self, con: Connection) -> None:
        self.con = con
        self.postgres = isinstance(con, PostgresConnection)
        self.ctes: list[tuple[str, str, list[Any]]] = []

    def create(self, name: str, sql: str, params: list[Any]) -> None:
        if self.postgres:
            self.ctes.append((name, sql, list(params)))
        else:
            self.con.execute(f"CREATE TEMP TABLE {name} AS {sql}", params)

    def execute(self, sql: str, params: list[Any] | None = None) -> Any:
        if not self.ctes:
            return self.con.execute(sql, params)
        prefix = "WITH " + ", ".join(f"{name} AS MATERIALIZED ({cte})" for name, cte, _ in self.ctes)
        return self.con.execute(f"{prefix} {sql}", [value for *_, values in self.ctes for value in values]
                                + list(params or []))


class QueryRunner:
    """Compiles and runs MetadataQuery objects against one sidecar."""

    def __init__(self, settings: Settings, sidecar: Sidecar, timeout_seconds: float | None = None) -> None:
        self.settings = settings
        self.sidecar = sidecar
        self.timeout = timeout_seconds if timeout_seconds is not None else settings.query_timeout_seconds

    def run_json(self, body: Mapping[str, Any], scope: Scope | None = None,
                 bound: Mapping[str, Any] | None = None) -> QueryResult:
        """Parse the request against the registry and run it, on one read-only connection. `bound`: where clauses
        (the JSON form) ANDed to the request's, which it cannot replace."""
        return self.run(body, None, scope, bound)

    def run(self, query: MetadataQuery | Mapping[str, Any], registry: Mapping[str, RegistryField] | None = None,
            scope: Scope | None = None, bound: Mapping[str, Any] | None = None) -> QueryResult:
        """Run a parsed query (or a request body, parsed against the current registry) within the time limit."""
        started = time.perf_counter()
        with self.sidecar.read_only() as con:
            timer = threading.Timer(self.timeout, con.interrupt)
            timer.start()
            try:
                if registry is None:
                    registry = registry_of(con, self.settings, self.sidecar, scope)
                if not isinstance(query, MetadataQuery):
                    query = parse_request(query, registry)
                if bound:
                    query = replace(query, where=query.where + tuple(
                        parse_clause(name, value, registry) for name, value in bound.items()))
                result = self._execute(con, query, registry, scope)
            except Interrupted as error:
                raise QueryTimeout(f"the query ran longer than {self.timeout:g} s and was stopped") from error
            finally:
                timer.cancel()
        result.withheld = withhold_flagged(result.rows)  # no prompt injection in an exact answer
        result.timings_ms = {"total": round((time.perf_counter() - started) * 1000, 2)}
        return result

    def _execute(self, con: Connection, query: MetadataQuery, registry: Mapping[str, RegistryField],
                 scope: Scope | None) -> QueryResult:
        """The query as a few statements over two intermediate tables (Scratch): `matched` (the documents the where
        clauses and the scope let through) and `picked` (the values of the field the operation reads, of those
        documents), so the effective_fields view is evaluated once per clause and once for the field."""
        scoped, params = scope_condition(scope)
        matched = f"SELECT sha, paths[1] AS path FROM documents WHERE status = 'ok'{scoped}"
        for clause in query.where:
            sql, clause_params = condition(clause, registry[clause.field].kind)
            matched += f" AND sha IN (SELECT sha FROM {values_table(registry[clause.field])} WHERE name = ? AND {sql})"
            params += [clause.field, *clause_params]
        con = Scratch(con)
        con.create("matched", matched, params)
        limit = query.limit or (DEFAULT_TOP_N if query.op == "top_n" else DEFAULT_LIMIT)
        if query.op in ("list", "lookup"):
            listed = records(con.execute("SELECT sha, path FROM matched ORDER BY path LIMIT ?", [limit + 1]))
            truncated = len(listed) > limit
            listed = listed[:limit]
            fields = self._fields_of(con, [row["sha"] for row in listed], registry, query.field)
            if query.op == "list":
                rows = [{"id": row["sha"], "path": row["path"],
                         **{n: v["value"] for n, v in fields.get(row["sha"], {}).items()}} for row in listed]
            else:
                rows = [self._lookup_row(con, row, fields.get(row["sha"], {}), query.field) for row in listed]
            total = con.execute("SELECT count(*) FROM matched").fetchone()[0]
            return QueryResult(query.op, rows, [{"id": row["sha"], "path": row["path"]} for row in listed],
                               truncated, total)
        if query.op == "count":
            counted = "matched"
            rows, truncated = [{"count": con.execute("SELECT count(*) FROM matched").fetchone()[0]}], False
        else:
            name = query.field if query.op == "top_n" and query.field else (query.by or query.field)
            kind = registry[name].kind
            con.create("picked", "SELECT f.sha, m.path, f.text_value, f.number_value, f.date_value "
                       f"FROM {values_table(registry[name])} f JOIN matched m USING (sha) WHERE f.name = ?", [name])
            counted = "(SELECT DISTINCT sha, path FROM picked) counted"
            if query.op == "top_n" and query.field:
                column = "number_value" if kind == "number" else "date_value"
                ranked = records(con.execute(  # each document's largest value (and its text), largest first
                    f"SELECT sha, path, best, text FROM (SELECT sha, path, {column} AS best, text_value AS text, "
                    f"row_number() OVER (PARTITION BY sha, path ORDER BY {column} DESC) AS rank FROM picked "
                    f"WHERE {column} IS NOT NULL) ranked WHERE rank = 1 ORDER BY best DESC, path LIMIT ?", [limit + 1]))
                rows = [{"id": row["sha"], "path": row["path"],
                         "value": output_value(kind, row["text"], row["best"] if kind == "number" else None)}
                        for row in ranked[:limit]]
                total = con.execute(f"SELECT count(DISTINCT sha) FROM picked WHERE {column} IS NOT NULL").fetchone()[0]
                return QueryResult(query.op, rows, [{"id": row["id"], "path": row["path"]} for row in rows],
                                   len(ranked) > limit, total)
            # Numbers and dates group by value (7, 7.0 and "07" are one number), with text where one does not read
            typed = {"number": "number_value", "date": "date_value"}.get(kind)
            key = f"{typed}, CASE WHEN {typed} IS NULL THEN text_value END" if typed else "text_value"
            grouped = records(con.execute(
                "SELECT min(text_value) AS text_value, max(number_value) AS number_value, count(DISTINCT sha) AS count "
                f"FROM picked GROUP BY {key} ORDER BY {'count DESC, ' if query.op != 'distinct' else ''}"
                f"{typed + ', ' if typed else ''}min(text_value) LIMIT ?", [limit + 1]))
            truncated = len(grouped) > limit
            rows = [{"value": output_value(kind, row["text_value"], row["number_value"]),
                     **({"count": row["count"]} if query.op != "distinct" else {})} for row in grouped[:limit]]
        total = con.execute(f"SELECT count(*) FROM {counted}").fetchone()[0]
        documents = records(con.execute(f"SELECT sha AS id, path FROM {counted} ORDER BY path LIMIT ?", [limit]))
        return QueryResult(query.op, rows, documents, truncated or total > limit, total)

    @staticmethod
    def _fields_of(con: Connection, shas: list[str], registry: Mapping[str, RegistryField],
                   only: str | None) -> dict[str, dict[str, dict[str, Any]]]:
        """sha -> field name -> {value, type, origin} of these documents (queryable fields only)."""
        if not shas:
            return {}
        found: dict[str, dict[str, dict[str, Any]]] = {}
        for row in records(con.execute(
                "SELECT sha, name, kind, text_value, number_value, origin FROM effective_of(?) "
                "WHERE name NOT IN ('id', 'path') " + ("AND name = ? " if only else "") + "ORDER BY sha, name",
                [shas] + ([only] if only else []))):
            spec = registry.get(row["name"])
            if spec is None:
                continue
            value = output_value(spec.kind, row["text_value"], row["number_value"])
            entry = found.setdefault(row["sha"], {}).get(row["name"])
            if spec.kind == "list":
                if entry is None:
                    found[row["sha"]][row["name"]] = {"value": [value], "type": "list", "origin": row["origin"]}
                else:
                    entry["value"].append(value)
            elif entry is None:
                found[row["sha"]][row["name"]] = {"value": value, "type": spec.kind, "origin": row["origin"]}
        return found

    @staticmethod
    def _lookup_row(con: Connection, row: dict[str, Any], fields: dict[str, dict[str, Any]],
                    only: str | None) -> dict[str, Any]:
        if only:
            entry = fields.get(only)
            return {"id": row["sha"], "path": row["path"], "field": only,
                    "value": entry["value"] if entry else None, "origin": entry["origin"] if entry else None}
        errors = [error for (error,) in con.execute("SELECT error FROM field_errors WHERE sha = ?",
                                                    [row["sha"]]).fetchall()]
        reconciliation = records(con.execute(
            "SELECT roster, field, status, document_value, roster_value FROM reconciliation WHERE sha = ? "
            "ORDER BY roster, field", [row["sha"]]))
        return {"id": row["sha"], "path": row["path"], "fields": fields, "field_errors": errors,
                "reconciliation": reconciliation}
