"""The metadata query tool: typed operations over document fields (structured/request.py parses them), compiled to
parameterised SQL on a read-only sidecar connection (DuckDB with external access off, or a PostgreSQL read-only
transaction), a row limit and a time limit. The SQL is what DuckDB and PostgreSQL both run (sidecar/postgres.py gives
PostgreSQL the DuckDB functions and aggregates it uses). No SQL text is ever taken from a caller or a model: field
names are checked against the registry and every value is a bound parameter. A request's queries (the top one, its
subqueries and a set operation's two) run on one connection, each step an intermediate table the others reuse
(Scratch).

Operations (documents are the unit; only fully ingested documents count):
    count                  how many documents match             rows: [{"count": N}]
    list     [--field F]   the matching documents               rows: [{"id", "path", <fields>}] by path
    distinct  --field F    the values of F                      rows: [{"value"}]
    group_by  --by F       documents per value of F             rows: [{"value", "count"}] (a list counts each element)
              + aggregate  an aggregate of another field        rows: [{"value", "count", "<sum|avg|...>"}], largest
              + having     only the groups whose aggregate passes   first
    top_n     --field F    documents with the largest F         rows: [{"id", "path", "value"}] (number or date F)
    top_n     --by F       the most common values of F          rows: [{"value", "count"}]
    lookup   [--field F]   the fields of the matching documents rows: [{"id", "path", "fields", ...}]
    sum|avg|min|max --field F                                   rows: [{"value"}] (none when no document has F)
    count_distinct --field F                                    rows: [{"count": N}]
    argmax|argmin --field F [--return F2]  the best documents, every tied one (--limit N: down to the N-th best)
                                                                rows: [{"id", "path", "value" (F2), "field_value"}]
    intersect|union|except  queries [A, B]                      rows: [{"value"}] sorted, or [{"id", "path"}]
    reconciliation  where status/field/roster                   rows: [{"id", "path", "roster", "key", "field",
                                                                        "status", "document_value", "roster_value"}]
Where clauses: see structured/request.py. Text (string and list fields) compares case-insensitively with runs of
spaces as one, and a word's other grammatical number matches when only that one is stored ("states" finds "state").
A value flagged as a prompt injection is withheld from the rows (structured/withheld.py; the result's `withheld`).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rag_pipeline.errors import InputError, QueryTimeout
from rag_pipeline.fields.registry import RegistryField, build_registry, declared_fields
from rag_pipeline.fields.terms import declared_terms, with_terms
from rag_pipeline.fields.values import FieldKind
from rag_pipeline.index.vector_store import Scope
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar, records
from rag_pipeline.sidecar.connection import Connection, Interrupted, file_state
from rag_pipeline.sidecar.postgres import PostgresConnection
from rag_pipeline.structured.operations import SET_OPERATIONS
from rag_pipeline.structured.request import (
    DEFAULT_LIMIT,
    DEFAULT_TOP_N,
    MAX_LIMIT,
    Aggregate,
    Clause,
    MetadataQuery,
    parse_clause,
    parse_request,
    produces,
    stated,
    typed_input,
    with_clauses,
)
from rag_pipeline.structured.withheld import withhold_flagged

CONNECT_RETRY_SECONDS = 5.0
NORMAL_TEXT = r"lower(trim(regexp_replace(text_value, '\s+', ' ', 'g')))"  # text as compared: case and spaces folded
_WORDS = re.compile(r"^[^\W\d_]+(?:[ '-][^\W\d_]+)*$")  # text made of words only (not ids, paths, codes or numbers)
OPERATORS = {"gte": ">=", "gt": ">", "lte": "<=", "lt": "<", "eq": "="}


@dataclass
class QueryResult:
    op: str
    rows: list[dict[str, Any]]
    documents: list[dict[str, str]]
    truncated: bool
    total_documents: int = 0
    timings_ms: dict[str, float] = field(default_factory=dict)
    operation: str = ""  # what was computed, in words, from the typed query (request.stated)
    withheld: list[dict[str, Any]] = field(default_factory=list)  # flagged values replaced (structured/withheld.py)

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "operation": self.operation, "rows": self.rows, "documents": self.documents,
                "truncated": self.truncated, "total_documents": self.total_documents, "timings_ms": self.timings_ms,
                "withheld": self.withheld}


REGISTRY_SQL = (
    "SELECT name, kind, count(DISTINCT sha) AS documents, array_agg(DISTINCT origin) AS origins FROM ("
    "  SELECT sha, name, kind, split_part(origin, ':', 1) AS origin FROM fields_in_use"
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
_folded_values = StateCache()  # (sidecar, scope, field) -> its text values as where clauses compare them


def declarations_state(settings: Settings, sidecar: Sidecar) -> tuple:
    """What changes when the sidecar or the declarations (the sources file) change."""
    return sidecar.data_state(), file_state(Path(settings.sources_file)) if settings.sources_file else None


def registry_of(con: Connection, settings: Settings, sidecar: Sidecar,
                scope: Scope | None = None) -> dict[str, RegistryField]:
    """The registry over `con` (a connection to `sidecar`): the stored fields of the documents `scope` lets a key
    see (and every declared one); reused while neither the sidecar nor the declarations changed, since it costs a
    scan of every field row."""
    scoped, params = scope_condition(scope)
    return _registries.get((sidecar.location, scope), declarations_state(settings, sidecar), lambda: build_registry(
        records(con.execute(REGISTRY_SQL.format(scope=scoped), params)), declared_fields(settings)))


def load_registry(settings: Settings, sidecar: Sidecar, scope: Scope | None = None) -> dict[str, RegistryField]:
    """The fields the query tool accepts: built-ins, stored fields (stated, enriched, roster columns of joined
    documents; of the documents in `scope`) and declared ones (minus queryable: false). A connection is opened
    only when the cached registry is out of date."""
    def compute() -> dict[str, RegistryField]:
        with sidecar.read_only() as con:
            return registry_of(con, settings, sidecar, scope)
    return _registries.get((sidecar.location, scope), declarations_state(settings, sidecar), compute)


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


def output_value(kind: FieldKind, text: str | None, number: float | None) -> Any:
    """A stored value as a result shows it: numbers as numbers (integers without .0), the rest as text."""
    if kind == "number" and number is not None:
        return int(number) if float(number).is_integer() else number
    return text


def tidy(number: float | None) -> int | float | None:
    """A computed number as a result shows it: an integer without .0 (a sum of integers stays exact), else 15
    significant digits, which drops binary noise (0.1 + 0.2 is 0.3) and keeps every digit a decimal input had."""
    if number is None:
        return None
    number = float(number)
    if not number.is_integer():
        number = float(f"{number:.15g}")
    return int(number) if number.is_integer() and abs(number) < 2 ** 53 else number


def normal_text(text: str) -> str:
    """Text as where clauses compare it (the Python side of NORMAL_TEXT)."""
    return " ".join(str(text).split()).lower()


def number_variants(text: str) -> tuple[str, ...]:
    """The other grammatical number of a phrase's last word, by the regular English rules ("states" -> "state",
    "cities" -> "city", "city" -> "cities", "boxes" -> "box" or "boxe"); none for text that is not words."""
    if len(text) < 3 or not _WORDS.match(text):
        return ()
    cut = max(text.rfind(" "), text.rfind("-")) + 1
    head, last = text[:cut], text[cut:]
    if len(last) < 3:
        return ()
    if last.endswith("ies") and len(last) > 4:
        forms = [last[:-3] + "y"]
    elif last.endswith(("ses", "xes", "zes", "ches", "shes")):
        forms = [last[:-2], last[:-1]]
    elif last.endswith("s") and not last.endswith(("ss", "us", "is")):
        forms = [last[:-1]]
    elif last.endswith("y") and last[-2] not in "aeiou":
        forms = [last[:-1] + "ies"]
    elif last.endswith(("s", "x", "z", "ch", "sh")):
        forms = [last + "es"]
    else:
        forms = [last + "s"]
    return tuple(head + form for form in forms)


def value_key(value: Any) -> tuple[int, Any]:
    """How produced values compare and sort: numbers by number (first), text folded like where clauses."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return 0, float(value)
    return 1, normal_text(str(value))


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


def profile_rows(sidecar: Sidecar, scope: Scope | None, max_values: int) -> tuple[int, list, list, list]:
    """What a corpus profile (structured/profile.py) is built from, over the documents `scope` lets a key see:
    their number; (name, kind, documents, distinct values) of each field; (name, sha, text) of the string and list
    fields with at most `max_values` distinct values; (sha, name) of every field a document has."""
    scoped, params = scope_condition(scope)
    documents_sql = f"SELECT sha FROM documents WHERE status = 'ok'{scoped}"
    with sidecar.read_only() as con:
        total = con.execute(f"SELECT count(*) FROM ({documents_sql}) visible", params).fetchone()[0]
        stats = con.execute(
            "SELECT name, mode() WITHIN GROUP (ORDER BY kind), count(DISTINCT sha), count(DISTINCT lower(text_value)) "
            "FROM effective_fields "
            f"WHERE sha IN ({documents_sql}) AND name NOT IN ('id', 'path') GROUP BY name", params).fetchall()
        readable = [name for name, kind, _, distinct in stats if kind in ("string", "list") and distinct <= max_values]
        rows = con.execute(
            "SELECT name, sha, text_value FROM effective_fields WHERE list_contains(?, name) "
            f"AND sha IN ({documents_sql}) AND text_value IS NOT NULL", [readable, *params]).fetchall()
        presence = con.execute(
            f"SELECT DISTINCT sha, name FROM effective_fields WHERE sha IN ({documents_sql})", params).fetchall()
    return total, stats, rows, presence


class QueryRunner:
    """Compiles and runs MetadataQuery objects against one sidecar."""

    def __init__(self, settings: Settings, sidecar: Sidecar, timeout_seconds: float | None = None) -> None:
        self.settings = settings
        self.sidecar = sidecar
        self.timeout = timeout_seconds if timeout_seconds is not None else settings.query_timeout_seconds

    def run_json(self, body: Mapping[str, Any], scope: Scope | None = None,
                 bound: Mapping[str, Any] | None = None) -> QueryResult:
        """Parse the request against the registry and run it, on one read-only connection. `bound`: where clauses
        (the JSON form) ANDed to the request's and to every query inside it, which it cannot replace."""
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
                    query = parse_request(with_terms(query, declared_terms(self.settings)), registry)
                if bound:
                    query = with_clauses(query, tuple(parse_clause(name, value, registry)
                                                      for name, value in bound.items()))
                result = self._execute(con, query, registry, scope)
            except (*Interrupted, RuntimeError) as error:  # DuckDB raises a plain RuntimeError inside CREATE ... AS
                if not isinstance(error, Interrupted) and "interrupted" not in str(error).lower():
                    raise
                raise QueryTimeout(f"the query ran longer than {self.timeout:g} s and was stopped") from error
            finally:
                timer.cancel()
        result.withheld = withhold_flagged(result.rows)  # no prompt injection in an exact answer
        result.timings_ms = {"total": round((time.perf_counter() - started) * 1000, 2)}
        return result

    def _execute(self, con: Connection, query: MetadataQuery, registry: Mapping[str, RegistryField],
                 scope: Scope | None) -> QueryResult:
        return Execution(Scratch(con), registry, scope, self.sidecar).result(query)


class Scratch:
    """A connection with a request's intermediate tables: temporary tables on DuckDB; on PostgreSQL, whose read-only
    transaction cannot create tables, materialized common table expressions put before each statement (one that a
    statement does not reference is not evaluated)."""

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


class Execution:
    """One request's queries on one read-only connection. Each step is an intermediate table (Scratch), made once
    per request and reused by every query of the tree that needs it: a field's rows (so the effective_fields view is
    evaluated once per field), `matched` (the documents a where and the scope let through) and `picked` (the values
    of one field of those documents)."""

    def __init__(self, con: Scratch, registry: Mapping[str, RegistryField], scope: Scope | None,
                 sidecar: Sidecar) -> None:
        self.con = con
        self.registry = registry
        self.scope = scope
        self.sidecar = sidecar  # whose state keys the cache of folded values
        self.steps: dict[Any, str] = {}

    # --- steps ---------------------------------------------------------------------------------------------------
    def step(self, key: Any, sql: str, params: list[Any]) -> str:
        """The intermediate table holding `sql`'s rows (made on first use)."""
        if key not in self.steps:
            name = f"step_{len(self.steps)}"
            self.con.create(name, sql, params)
            self.steps[key] = name
        return self.steps[key]

    def matched(self, where: tuple[Clause, ...]) -> str:
        """(sha, path) of the documents the where clauses and the scope let through."""
        if ("matched", where) in self.steps:
            return self.steps[("matched", where)]
        scoped, params = scope_condition(self.scope)
        sql = f"SELECT sha, paths[1] AS path FROM documents WHERE status = 'ok'{scoped}"
        for clause in where:
            condition, clause_params = self.clause_condition(clause)
            sql += f" AND {condition}"
            params += clause_params
        return self.step(("matched", where), sql, params)

    def field_rows(self, name: str) -> str:
        """(sha, text_value, number_value, date_value) of every value of field `name`: read from the sidecar's views
        once per request, however many clauses and queries of the tree use the field."""
        return self.step(("field", name), "SELECT sha, text_value, number_value, date_value FROM "
                         f"{values_table(self.registry[name])} WHERE name = ?", [name])

    def picked(self, where: tuple[Clause, ...], name: str) -> str:
        """(sha, path, text_value, number_value, date_value) of field `name` of the matched documents."""
        matched = self.matched(where)
        return self.step(("picked", where, name), "SELECT f.sha, m.path, f.text_value, f.number_value, f.date_value "
                         f"FROM {self.field_rows(name)} f JOIN {matched} m USING (sha)", [])

    def scalar(self, sql: str, params: list[Any] | None = None) -> Any:
        return self.con.execute(sql, params or []).fetchone()[0]

    def cited(self, table: str, limit: int) -> tuple[list[dict[str, str]], int]:
        """(the documents of `table`'s sha and path, by path, up to `limit`; how many there are)."""
        total = self.scalar(f"SELECT count(DISTINCT sha) FROM {table}")
        documents = records(self.con.execute(f"SELECT DISTINCT sha AS id, path FROM {table} ORDER BY path LIMIT ?",
                                             [limit]))
        return documents, total

    # --- where clauses -------------------------------------------------------------------------------------------
    def clause_condition(self, clause: Clause) -> tuple[str, list[Any]]:
        """The SQL condition on documents.sha of one clause, and its parameters."""
        spec = self.registry[clause.field]
        values = self.subquery_values(clause) if clause.subquery else clause.values
        fields = f"SELECT sha FROM {self.field_rows(clause.field)} WHERE true"
        if clause.kind == "empty":
            return f"sha {'NOT IN' if clause.values[0] else 'IN'} ({fields})", []
        if not values:
            return "false", []
        if clause.kind == "all" and spec.kind == "list":
            wanted = sorted(set(self.stored_forms(clause.field, values)))
            return (f"sha IN ({fields} AND list_contains(?, {NORMAL_TEXT}) GROUP BY sha "
                    f"HAVING count(DISTINCT {NORMAL_TEXT}) = ?)"), [wanted, len(wanted)]
        if clause.kind in ("all", "contains"):  # substrings of a string field
            return f"sha IN ({fields} AND {' AND '.join(['contains(lower(text_value), lower(?))'] * len(values))})", \
                list(values)
        condition, params = self.value_condition(clause, spec, values)
        return f"sha IN ({fields} AND {condition})", params

    def value_condition(self, clause: Clause, spec: RegistryField, values: tuple[Any, ...]) -> tuple[str, list[Any]]:
        """The condition on a field's value rows of an eq, in or range clause."""
        if spec.kind == "date":
            if clause.kind == "range":
                parts, params = [], []
                for operator, (start, end) in values:
                    sql, value = {"gte": (">= ?", start), "gt": (">= ?", end) if end > start else ("> ?", start),
                                  "lte": ("< ?", end) if end > start else ("<= ?", start),
                                  "lt": ("< ?", start)}[operator]
                    parts.append(f"date_value {sql}")
                    params.append(value)
                return " AND ".join(parts), params
            parts, params = [], []
            for start, end in values:
                if end > start:
                    parts.append("(date_value >= ? AND date_value < ?)")
                    params += [start, end]
                else:
                    parts.append("date_value = ?")
                    params.append(start)
            return "(" + " OR ".join(parts) + ")", params
        if spec.kind == "number":
            if clause.kind == "range":
                return " AND ".join(f"number_value {OPERATORS[op]} ?" for op, _ in values), [v for _, v in values]
            return "list_contains(?, number_value)", [list(values)]
        return f"list_contains(?, {NORMAL_TEXT})", [self.stored_forms(clause.field, values)]

    def stored_forms(self, name: str, values: tuple[str, ...]) -> list[str]:
        """Each wanted text as the documents in scope store it: folded (case, spaces), or its other grammatical
        number when only that one is stored (exactly one of them: nothing is guessed when both could be meant)."""
        wanted = [normal_text(value) for value in values]
        variants = {text: number_variants(text) for text in wanted}
        if not any(variants.values()):
            return wanted
        found = self.folded_values(name)
        forms = []
        for text in wanted:
            other = [form for form in variants[text] if form in found]
            forms.append(other[0] if text not in found and len(other) == 1 else text)
        return forms

    def folded_values(self, name: str) -> frozenset[str]:
        """The text values of a field over the documents in scope, folded as where clauses compare them (kept while
        the sidecar is unchanged: reading them costs a scan of the field's rows)."""
        scoped, params = scope_condition(self.scope)

        def compute() -> frozenset[str]:
            return frozenset(text for (text,) in self.con.execute(
                f"SELECT DISTINCT {NORMAL_TEXT} FROM {values_table(self.registry[name])} WHERE name = ? AND sha IN "
                f"(SELECT sha FROM documents WHERE status = 'ok'{scoped})", [name, *params]).fetchall())

        return _folded_values.get((self.sidecar.location, self.scope, name), self.sidecar.data_state(), compute)

    def subquery_values(self, clause: Clause) -> tuple[Any, ...]:
        """The values a semi-join's query produces, read as the clause's field type (values that cannot be one,
        like a word for a number field, match nothing and are left out)."""
        spec = self.registry[clause.field]
        produced = list(dict.fromkeys(value for value, _ in self.produced(clause.subquery)))
        if len(produced) > MAX_LIMIT:
            raise InputError(f"where {clause.field!r}: the subquery produced {len(produced)} values; at most "
                             f"{MAX_LIMIT}", code="subquery_too_large")
        typed = []
        for value in produced:
            try:
                typed.append(typed_input(value, spec, clause.field))
            except InputError:
                continue
        return tuple(typed)

    # --- operations ----------------------------------------------------------------------------------------------
    def result(self, query: MetadataQuery) -> QueryResult:
        """The result of one query, with the operation it performed in words."""
        if query.op in SET_OPERATIONS:
            result = self.set_result(query)
        elif query.op == "reconciliation":
            result = self.reconciliation(query)
        elif query.op in ("sum", "avg", "min", "max", "count_distinct"):
            result = self.aggregate(query)
        elif query.op in ("argmax", "argmin"):
            result = self.best(query)
        elif query.op == "group_by" and (query.aggregate or query.having):
            result = self.aggregated_groups(query)
        else:
            result = self.listing(query)
        result.operation = stated(query, self.registry, result.total_documents)
        return result

    def listing(self, query: MetadataQuery) -> QueryResult:
        """count, list, lookup, distinct, group_by (documents per value) and top_n."""
        con, registry = self.con, self.registry
        matched = self.matched(query.where)
        limit = query.limit or (DEFAULT_TOP_N if query.op == "top_n" else DEFAULT_LIMIT)
        if query.op in ("list", "lookup"):
            listed = records(con.execute(f"SELECT sha, path FROM {matched} ORDER BY path LIMIT ?", [limit + 1]))
            truncated = len(listed) > limit
            listed = listed[:limit]
            fields = fields_of(con, [row["sha"] for row in listed], registry, query.field)
            if query.op == "list":
                rows = [{"id": row["sha"], "path": row["path"],
                         **{n: v["value"] for n, v in fields.get(row["sha"], {}).items()}} for row in listed]
            else:
                rows = [lookup_row(con, row, fields.get(row["sha"], {}), query.field) for row in listed]
            total = self.scalar(f"SELECT count(*) FROM {matched}")
            return QueryResult(query.op, rows, [{"id": row["sha"], "path": row["path"]} for row in listed],
                               truncated, total)
        if query.op == "count":
            counted = matched
            rows, truncated = [{"count": self.scalar(f"SELECT count(*) FROM {matched}")}], False
        else:
            name = query.field if query.op == "top_n" and query.field else (query.by or query.field)
            kind = registry[name].kind
            picked = self.picked(query.where, name)
            counted = f"(SELECT DISTINCT sha, path FROM {picked}) counted"
            if query.op == "top_n" and query.field:
                column = "number_value" if kind == "number" else "date_value"
                ranked = records(con.execute(  # each document's largest value (and its text), largest first
                    f"SELECT sha, path, best, text FROM (SELECT sha, path, {column} AS best, text_value AS text, "
                    f"row_number() OVER (PARTITION BY sha, path ORDER BY {column} DESC) AS rank FROM {picked} "
                    f"WHERE {column} IS NOT NULL) ranked WHERE rank = 1 ORDER BY best DESC, path LIMIT ?", [limit + 1]))
                rows = [{"id": row["sha"], "path": row["path"],
                         "value": output_value(kind, row["text"], row["best"] if kind == "number" else None)}
                        for row in ranked[:limit]]
                total = self.scalar(f"SELECT count(DISTINCT sha) FROM {picked} WHERE {column} IS NOT NULL")
                return QueryResult(query.op, rows, [{"id": row["id"], "path": row["path"]} for row in rows],
                                   len(ranked) > limit, total)
            # Numbers and dates group by value (7, 7.0 and "07" are one number), with text where one does not read
            typed = {"number": "number_value", "date": "date_value"}.get(kind)
            key = f"{typed}, CASE WHEN {typed} IS NULL THEN text_value END" if typed else "text_value"
            grouped = records(con.execute(
                "SELECT min(text_value) AS text_value, max(number_value) AS number_value, count(DISTINCT sha) AS count "
                f"FROM {picked} GROUP BY {key} ORDER BY {'count DESC, ' if query.op != 'distinct' else ''}"
                f"{typed + ', ' if typed else ''}min(text_value) LIMIT ?", [limit + 1]))
            truncated = len(grouped) > limit
            rows = [{"value": output_value(kind, row["text_value"], row["number_value"]),
                     **({"count": row["count"]} if query.op != "distinct" else {})} for row in grouped[:limit]]
        documents, total = self.cited(counted, limit)
        return QueryResult(query.op, rows, documents, truncated or total > limit, total)

    def aggregate(self, query: MetadataQuery) -> QueryResult:
        """sum, avg, min, max or count_distinct of a field over the matched documents that have a value for it."""
        kind = self.registry[query.field].kind
        picked = self.picked(query.where, query.field)
        limit = query.limit or DEFAULT_LIMIT
        column = {"number": "number_value", "date": "date_value"}.get(kind, "text_value")
        # the values aggregated: those that read as the field's type (count_distinct: every value, as distinct)
        valued = picked if query.op == "count_distinct" else \
            f"(SELECT * FROM {picked} WHERE {column} IS NOT NULL) valued"
        documents, total = self.cited(valued, limit)
        if query.op == "count_distinct":  # the values distinct would list: numbers and dates by value
            key = f"{column}, CASE WHEN {column} IS NULL THEN text_value END" if column != "text_value" else column
            rows = [{"count": self.scalar(f"SELECT count(*) FROM (SELECT DISTINCT {key} FROM {picked}) kept")}]
        elif not total:
            rows = []
        elif kind == "date":  # min or max: the date as stated
            rows = [{"value": self.scalar(f"SELECT arg_{query.op}(text_value, date_value) FROM {valued}")}]
        else:  # Kahan-Babuska summation (fsum, favg): no drift over many values
            sql = {"sum": "fsum", "avg": "favg", "min": "min", "max": "max"}[query.op]
            rows = [{"value": tidy(self.scalar(f"SELECT {sql}(number_value) FROM {valued}"))}]
        return QueryResult(query.op, rows, documents, total > limit, total)

    def best(self, query: MetadataQuery) -> QueryResult:
        """argmax/argmin: the documents whose value of the field is the best within the filter (a list field: its
        number of elements, 0 for a document without it), every one tied with the limit-th best; their `return`
        field's value."""
        kind = self.registry[query.field].kind
        picked = self.picked(query.where, query.field)
        column = {"number": "number_value", "date": "date_value"}.get(kind, "text_value")
        extreme, order = ("max", "DESC") if query.op == "argmax" else ("min", "ASC")
        text = f"arg_{extreme}(text_value, {column})" if kind == "date" else "NULL"
        if kind == "list":  # a matched document without the field holds no elements: it ranks with 0
            ranked = self.step(("ranked", query.where, query.field, query.op),
                               f"SELECT m.sha, m.path, count(p.sha) AS score, NULL AS text FROM "
                               f"{self.matched(query.where)} m LEFT JOIN {picked} p ON p.sha = m.sha "
                               "AND p.text_value IS NOT NULL GROUP BY m.sha, m.path", [])
        else:
            ranked = self.step(("ranked", query.where, query.field, query.op),
                               f"SELECT sha, path, {extreme}({column}) AS score, {text} AS text FROM {picked} "
                               f"WHERE {column} IS NOT NULL GROUP BY sha, path", [])
        cut = self.con.execute(f"SELECT score FROM {ranked} ORDER BY score {order} LIMIT 1 OFFSET ?",
                               [(query.limit or 1) - 1]).fetchone()
        best = records(self.con.execute(
            f"SELECT sha, path, score, text FROM {ranked} WHERE score {'>=' if order == 'DESC' else '<='} ? "
            f"ORDER BY score {order}, path LIMIT ?", [cut[0] if cut else None, MAX_LIMIT + 1])) if cut else []
        truncated = len(best) > MAX_LIMIT
        best = best[:MAX_LIMIT]
        returned = query.returns or ("title" if "title" in self.registry else "name")
        fields = fields_of(self.con, [row["sha"] for row in best], self.registry, returned)
        rows = []
        for row in best:
            value = fields.get(row["sha"], {}).get(returned, {}).get("value")
            if value is None and not query.returns:
                value = str(row["path"]).rsplit("/", 1)[-1]
            shown = int(row["score"]) if kind == "list" else row["text"] if kind == "date" else \
                output_value(kind, None, row["score"])
            rows.append({"id": row["sha"], "path": row["path"], "value": value, "field_value": shown})
        total = self.scalar(f"SELECT count(*) FROM {ranked}")
        return QueryResult(query.op, rows, [{"id": row["id"], "path": row["path"]} for row in rows], truncated, total)

    def aggregated_groups(self, query: MetadataQuery) -> QueryResult:
        """group_by with an aggregate of each group (default: count of documents) and a condition on it (having);
        rows {"value", "count", <aggregate op>: N} (count: {"value", "count"}), the largest aggregate first."""
        name = query.by or query.field
        kind = self.registry[name].kind
        aggregate = query.aggregate or Aggregate("count")
        typed = {"number": "number_value", "date": "date_value"}.get(kind)
        key = f"{typed}, CASE WHEN {typed} IS NULL THEN text_value END" if typed else "text_value"
        groups = self.picked(query.where, name)
        if aggregate.op == "count":
            source, measure, measure_text = f"(SELECT DISTINCT * FROM {groups}) members", "count(DISTINCT sha)", "NULL"
        else:
            values = self.picked(query.where, aggregate.field)
            value_kind = self.registry[aggregate.field].kind
            read = {"number": "number", "date": "date"}.get(value_kind, "text")
            column = f"v_{read}"  # the aggregated field's values beside each document's group value
            source = (f"(SELECT DISTINCT g.*, v.text_value AS v_text, v.number_value AS v_number, v.date_value AS "
                      f"v_date FROM {groups} g JOIN {values} v USING (sha) WHERE v.{read}_value IS NOT NULL) members")
            measure = {"sum": "fsum(v_number)", "avg": "favg(v_number)", "min": f"min({column})",
                       "max": f"max({column})", "count_distinct": f"count(DISTINCT {column})"}[aggregate.op]
            measure_text = f"arg_{aggregate.op}(v_text, v_date)" if value_kind == "date" and \
                aggregate.op in ("min", "max") else "NULL"
        having = "".join(f" AND {measure} {OPERATORS[op]} ?" for op, _ in query.having)
        grouped = records(self.con.execute(
            f"SELECT min(text_value) AS text_value, max(number_value) AS number_value, count(DISTINCT sha) AS count, "
            f"{measure} AS measure, {measure_text} AS measure_text, array_agg(DISTINCT sha) AS shas FROM {source} "
            f"GROUP BY {key} HAVING {measure} IS NOT NULL{having} "
            f"ORDER BY measure DESC, {typed + ', ' if typed else ''}min(text_value)",
            [bound for _, bound in query.having]))
        limit = query.limit or DEFAULT_LIMIT
        rows = []
        for row in grouped[:limit]:
            shown = {"value": output_value(kind, row["text_value"], row["number_value"]), "count": row["count"]}
            if aggregate.op != "count":
                shown[aggregate.op] = row["measure_text"] or tidy(row["measure"])
            rows.append(shown)
        shas = sorted({sha for row in grouped for sha in row["shas"]})
        paths = dict(self.con.execute(f"SELECT DISTINCT sha, path FROM {groups} WHERE list_contains(?, sha)",
                                      [shas]).fetchall()) if shas else {}
        documents = sorted(({"id": sha, "path": paths[sha]} for sha in shas), key=lambda doc: doc["path"])
        return QueryResult(query.op, rows, documents[:limit], len(grouped) > limit or len(shas) > limit, len(shas))

    def reconciliation(self, query: MetadataQuery) -> QueryResult:
        """The roster's reconciliation rows (findings first, then MATCH) of the matched documents; rows about no
        document (ROSTER_ONLY) only when neither a where clause nor a key's scope restricts the documents."""
        matched = self.matched(query.where)
        conditions, params = [], []
        columns = {"status": "r.status", "field": "lower(r.field)", "roster": "lower(r.roster)"}
        for key, values in query.findings:
            conditions.append(f"list_contains(?, {columns[key]})")
            params.append([value if key == "status" else value.lower() for value in values])
        unrestricted = not query.where and (self.scope is None or not (self.scope.sources or self.scope.tags))
        found = records(self.con.execute(
            "SELECT r.sha AS id, coalesce(m.path, r.path) AS path, r.roster, r.key, r.field, r.status, "
            f"r.document_value, r.roster_value FROM reconciliation r LEFT JOIN {matched} m ON m.sha = r.sha "
            f"WHERE (m.sha IS NOT NULL OR (r.sha IS NULL AND ?)){''.join(f' AND {c}' for c in conditions)} "
            "ORDER BY r.status = 'MATCH', r.status, r.roster, r.key, r.field, path", [unrestricted, *params]))
        limit = query.limit or DEFAULT_LIMIT
        documents = sorted({row["id"]: {"id": row["id"], "path": row["path"]} for row in found if row["id"]}.values(),
                           key=lambda doc: doc["path"])
        return QueryResult(query.op, found[:limit], documents[:limit], len(found) > limit or len(documents) > limit,
                           len(documents))

    # --- queries inside queries ----------------------------------------------------------------------------------
    def produced(self, query: MetadataQuery) -> list[tuple[Any, dict[str, str]]]:
        """(value, document holding it) of every value a query produces (for a semi-join or a set operation).
        Without an explicit limit a query produces up to MAX_LIMIT rows, and is refused if it would produce more."""
        if query.op in SET_OPERATIONS:
            return self.combined(query)
        explicit = query.limit is not None or query.op in ("argmax", "argmin")
        result = self.result(query if explicit else replace(query, limit=MAX_LIMIT))
        if not explicit and len(result.rows) >= MAX_LIMIT and result.truncated:
            raise InputError(f"a subquery ({query.op}) produces more than {MAX_LIMIT} rows: narrow it with where "
                             "clauses or give it a limit", code="subquery_too_large")
        if result.rows and "id" in result.rows[0]:  # one row per document: list --field, lookup --field, argmax
            key = query.field if query.op == "list" else "value"
            return [(item, {"id": row["id"], "path": row["path"]}) for row in result.rows
                    for item in (row.get(key) if isinstance(row.get(key), list) else [row.get(key)])
                    if item is not None]
        name = query.by or query.field  # distinct, group_by, top_n --by: the documents holding each value
        kind = self.registry[name].kind
        wanted = {value_key(row["value"]): row["value"] for row in result.rows}
        holders = records(self.con.execute(
            f"SELECT DISTINCT sha, path, text_value, number_value FROM {self.picked(query.where, name)} ORDER BY path"))
        pairs = []
        for row in holders:
            key = value_key(output_value(kind, row["text_value"], row["number_value"]))
            if key in wanted:
                pairs.append((wanted[key], {"id": row["sha"], "path": row["path"]}))
        return pairs

    def produced_documents(self, query: MetadataQuery) -> list[dict[str, str]]:
        """The documents a documents-producing query (list without a field, or a set operation of them) gives."""
        if query.op in SET_OPERATIONS:
            first, second = (self.produced_documents(part) for part in query.queries)
            ids = {doc["id"] for doc in second}
            kept = {"intersect": [doc for doc in first if doc["id"] in ids], "except": [
                doc for doc in first if doc["id"] not in ids], "union": first + second}[query.op]
            return list({doc["id"]: doc for doc in kept}.values())
        limit = query.limit or MAX_LIMIT
        found = records(self.con.execute(f"SELECT sha AS id, path FROM {self.matched(query.where)} ORDER BY path "
                                         "LIMIT ?", [limit + 1]))
        if len(found) > limit and query.limit is None:
            raise InputError(f"a subquery (list) produces more than {MAX_LIMIT} documents: narrow it with where "
                             "clauses or give it a limit", code="subquery_too_large")
        return found[:limit]

    def combined(self, query: MetadataQuery) -> list[tuple[Any, dict[str, str]]]:
        """(value, document) of a set operation of values: in both, in either, in the first and not the second
        (values compare like where clauses: numbers by number, text folded; each shown as the first query has
        it); each value with the documents holding it in the queries it is kept from."""
        first, second = (self.produced(part) for part in query.queries)
        keys_first, keys_second = {value_key(v) for v, _ in first}, {value_key(v) for v, _ in second}
        if query.op == "intersect":
            both = keys_first & keys_second
            return [(value, doc) for value, doc in first + second if value_key(value) in both]
        if query.op == "union":
            return first + second
        return [(value, doc) for value, doc in first if value_key(value) not in keys_second]

    def set_result(self, query: MetadataQuery) -> QueryResult:
        limit = query.limit or DEFAULT_LIMIT
        if produces(query) == "documents":
            found = sorted(self.produced_documents(query), key=lambda doc: doc["path"])
            return QueryResult(query.op, found[:limit], found[:limit], len(found) > limit, len(found))
        pairs = self.combined(query)
        values: dict[tuple[int, Any], Any] = {}
        documents: dict[str, dict[str, str]] = {}
        for value, doc in pairs:
            values.setdefault(value_key(value), value)
            documents.setdefault(doc["id"], doc)
        rows = [{"value": values[key]} for key in sorted(values)]
        cited = sorted(documents.values(), key=lambda doc: doc["path"])
        return QueryResult(query.op, rows[:limit], cited[:limit], len(rows) > limit or len(cited) > limit,
                           len(cited))


def fields_of(con: Connection | Scratch, shas: list[str], registry: Mapping[str, RegistryField],
              only: str | None) -> dict[str, dict[str, dict[str, Any]]]:
    """sha -> field name -> {value, type, origin} of these documents (queryable fields only; one field: read where
    values_table says, the cheaper own_fields for a field no roster touches)."""
    if not shas:
        return {}
    found: dict[str, dict[str, dict[str, Any]]] = {}
    cheaper = only in registry and values_table(registry[only]) == "own_fields"
    source = "own_fields WHERE list_contains(?, sha)" if cheaper else "effective_of(?) WHERE true"
    for row in records(con.execute(
            f"SELECT sha, name, kind, text_value, number_value, origin FROM {source} AND name NOT IN ('id', 'path') "
            + ("AND name = ? " if only else "") + "ORDER BY sha, name", [shas] + ([only] if only else []))):
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


def lookup_row(con: Connection | Scratch, row: dict[str, Any], fields: dict[str, dict[str, Any]],
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
