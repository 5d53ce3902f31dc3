"""Rosters: canonical master data (a CSV or Parquet file) joined onto documents by key, and its reconciliation.

    roster:                                  # in RAG_SOURCES_FILE; paths relative to the file's folder
      - path: projects.csv
        key: project_id                      # the roster column holding the key
        document_key: project_id             # the document field holding the same key
        authoritative: [publisher, genre]    # the roster's value IS the field's value for joined documents

Joined documents get every roster column as a field: an authoritative column replaces what the document states,
the others fill in fields the document does not state (the `effective_fields` view of the sidecar does the join,
so a query always sees the current roster). Reconciliation compares, per joined document and authoritative column,
the document's own claim with the roster: MATCH, MISMATCH, NOT_STATED (the document is silent; the roster supplies
the value), MISSING_IN_ROSTER (the document's key is not in the roster), ROSTER_ONLY (a roster row no document
has) and AMBIGUOUS_KEY (the document's key field holds several values: it joins no row). A roster column named like
a built-in field (name, type, path, ...) is the field roster_<column>. Cells are redacted as document fields are, with
their column's name as context, before they are stored.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from rag_pipeline.errors import ConfigError
from rag_pipeline.fields.registry import BUILTIN_FIELDS, FieldSpec, declared_fields, field_rows
from rag_pipeline.fields.values import FieldKind, FieldValue, coerce, field_name, text_kind, typed_value
from rag_pipeline.ingest.redact import redact_field, surviving_secrets
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar
from rag_pipeline.sources_file import read_sources_file

ROSTER_KEYS = ("path", "key", "document_key", "authoritative")
STATUSES = ("MATCH", "MISMATCH", "NOT_STATED", "MISSING_IN_ROSTER", "ROSTER_ONLY", "AMBIGUOUS_KEY")
WARNINGS = ("MISMATCH", "MISSING_IN_ROSTER", "ROSTER_ONLY", "AMBIGUOUS_KEY")
MAX_ROSTER_ROWS = 1_000_000


@dataclass(frozen=True)
class RosterSpec:
    name: str  # the file's stem: names the roster in the sidecar and in `origin` (roster:<name>)
    path: Path
    key: str
    document_key: str
    authoritative: tuple[str, ...]


@dataclass
class RosterReport:
    """What loading the rosters did."""

    rosters: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> {path, rows, reloaded, problems}
    removed: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATUSES, 0))
    reconciliation: list[dict[str, Any]] = field(default_factory=list)
    changed: bool = False  # a roster's content (or the set of rosters) changed

    @property
    def warnings(self) -> int:
        return sum(self.counts[status] for status in WARNINGS)


def roster_specs(settings: Settings) -> list[RosterSpec]:
    """The rosters of RAG_SOURCES_FILE (none without one); ConfigError naming the file, entry and problem."""
    if settings.sources_file is None:
        return []
    path = Path(settings.sources_file)
    raw = read_sources_file(path).get("roster") or []
    if not isinstance(raw, list):
        raise ConfigError(f"{path}: `roster:` must be a list of {{path, key, document_key, authoritative}}")
    specs, problems, names = [], [], set()
    for index, entry in enumerate(raw, start=1):
        where = f"{path}: roster #{index}"
        if not isinstance(entry, dict):
            problems.append(f"{where}: needs a mapping with {', '.join(ROSTER_KEYS)}")
            continue
        unknown = [key for key in entry if key not in ROSTER_KEYS]
        missing = [key for key in ("path", "key", "document_key") if not isinstance(entry.get(key), str)
                   or not entry[key].strip()]
        authoritative = entry.get("authoritative") or []
        if unknown:
            problems.append(f"{where}: unknown key(s) {', '.join(map(repr, unknown))} "
                            f"(allowed: {', '.join(ROSTER_KEYS)})")
        if missing:
            problems.append(f"{where}: {', '.join(missing)} must be given as text")
        if not isinstance(authoritative, list) or not all(isinstance(item, str) for item in authoritative):
            problems.append(f"{where}: authoritative must be a list of column names")
        if unknown or missing or problems:
            continue
        file = (path.parent / Path(entry["path"]).expanduser()).resolve()
        if file.suffix.lower() not in (".csv", ".parquet"):
            problems.append(f"{where}: {file} must be a .csv or .parquet file")
            continue
        columns = [field_name(column) for column in authoritative]
        bad = [column for column, name in zip(authoritative, columns) if name is None or name in BUILTIN_FIELDS]
        if bad:
            problems.append(f"{where}: authoritative column(s) {', '.join(map(repr, bad))} cannot be fields (a "
                            f"built-in name, or no usable name)")
            continue
        if file.stem in names:
            problems.append(f"{where}: another roster is also named {file.stem!r} (rosters are named by file stem)")
            continue
        names.add(file.stem)
        specs.append(RosterSpec(file.stem, file, entry["key"], field_name(entry["document_key"]) or "",
                                tuple(columns)))
    if problems:
        raise ConfigError("; ".join(problems))
    return specs


def read_table(path: Path) -> list[dict[str, Any]]:
    """Every row of a CSV (all columns as text) or Parquet file."""
    con = duckdb.connect(config={"threads": 1})
    try:
        reader = "read_parquet(?)" if path.suffix.lower() == ".parquet" else "read_csv(?, all_varchar = true)"
        cursor = con.execute(f"SELECT * FROM {reader} LIMIT {MAX_ROSTER_ROWS + 1}", [str(path)])
        names = [column[0] for column in cursor.description]
        return [dict(zip(names, row)) for row in cursor.fetchall()]
    finally:
        con.close()


def column_field(column: str) -> str | None:
    """The field a roster column fills: its name as a field name, prefixed roster_ when that is a built-in's."""
    name = field_name(column)
    return f"roster_{name}" if name in BUILTIN_FIELDS else name


def column_kinds(table: list[dict[str, Any]], declared: Mapping[str, FieldSpec]) -> dict[str, FieldKind]:
    """Each column's type: declared, else number or date when every non-empty text cell reads as one, else string
    (so a code like 02134 stays text when one cell of its column is not a number)."""
    kinds: dict[str, FieldKind] = {}
    for column in table[0] if table else {}:
        name = column_field(column)
        spec = declared.get(name or "")
        if spec is not None and spec.kind is not None:
            kinds[column] = spec.kind
            continue
        found = {text_kind(str(cell))[0] if isinstance(cell, str) else typed_value(cell, "roster", infer_text=True).kind
                 for cell in (record[column] for record in table) if cell is not None and str(cell).strip()}
        kinds[column] = found.pop() if len(found) == 1 else "string"
    return kinds


def roster_value(raw: Any, kind: FieldKind) -> FieldValue | None:
    """A roster cell as a value of its column's type; None when empty; ValueError when it is not one."""
    value = typed_value(raw, "roster", infer_text=False)
    return None if value is None else coerce(value, kind)


def read_roster(spec: RosterSpec, declared: Mapping[str, FieldSpec],
                settings: Settings) -> tuple[list[dict[str, Any]], list[str], int]:
    """(roster_values rows, problems, rows read) of one roster; ConfigError when the file or a named column is
    missing. A row without a key, a duplicate key or an unreadable cell is a problem; the rest is loaded. Every cell
    is redacted with its column's name as context (a column `password` or `api_token` makes its cells secrets, as
    `password: X` does in a body), and a cell in which the independent detector still finds a secret is withheld
    (a problem naming the row, the column and the kind, never the secret)."""
    try:
        table = read_table(spec.path)
    except (OSError, duckdb.Error) as error:
        raise ConfigError(f"roster {spec.path}: cannot read it: {' '.join(str(error).split())[:300]}") from error
    if len(table) > MAX_ROSTER_ROWS:
        raise ConfigError(f"roster {spec.path}: more than {MAX_ROSTER_ROWS:,} rows")
    columns = {column_field(column): column for column in (table[0] if table else {})}
    if table and spec.key not in (table[0]):
        raise ConfigError(f"roster {spec.path}: no key column {spec.key!r} (columns: {', '.join(table[0])})")
    absent = [column for column in spec.authoritative if column not in columns]
    if table and absent:
        raise ConfigError(f"roster {spec.path}: no authoritative column(s) {', '.join(map(repr, absent))}")
    kinds = column_kinds(table, declared)
    clean = CellRedactor(settings)
    rows, problems, seen = [], [], set()
    for line, record in enumerate(table, start=2):
        key = str(record.get(spec.key) or "").strip()
        if not key:
            problems.append(f"{spec.path.name} row {line}: no {spec.key}")
            continue
        if key in seen:
            problems.append(f"{spec.path.name} row {line}: duplicate {spec.key} {key!r} (the first row is used)")
            continue
        seen.add(key)
        values = {}
        for name, column in columns.items():
            if name is None or column == spec.key:
                continue
            try:
                value = roster_value(record[column], kinds[column])
            except ValueError as error:
                problems.append(f"{spec.path.name} row {line}: column {column!r} ({kinds[column]}): {error}")
                continue
            if value is None:
                continue
            value, problem = clean(name, value)
            if problem:
                problems.append(f"{spec.path.name} row {line}: column {column!r}: {problem}")
            if value is not None:
                values[name] = value
        for row in field_rows(key, values):
            authoritative = row["name"] in spec.authoritative
            rows.append({"roster": spec.name, "key": row.pop("sha"), **row, "authoritative": authoritative})
    return rows, problems, len(table)


class CellRedactor:
    """Roster cells redacted with their column's name as context and read by the independent detector, each
    distinct (column, value) once (a roster repeats its values)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._done: dict[tuple[str, FieldValue], tuple[FieldValue | None, str | None]] = {}

    def __call__(self, name: str, value: FieldValue) -> tuple[FieldValue | None, str | None]:
        """(the value to store, None when withheld; the problem to report, if any)."""
        hashable = FieldValue(value.kind, tuple(value.value) if value.kind == "list" else value.value, value.origin)
        if (name, hashable) not in self._done:
            self._done[name, hashable] = self._clean(name, value)
        return self._done[name, hashable]

    def _clean(self, name: str, value: FieldValue) -> tuple[FieldValue | None, str | None]:
        cleaned = redact_field(self.settings, name, value)
        if cleaned is None:
            return None, "its column name holds a secret: the cell is withheld"
        if cleaned.kind != value.kind:
            return None, f"a secret was redacted from this {value.kind} cell: the cell is withheld"
        where = surviving_secrets("", {name: cleaned})
        if where:
            return None, f"a secret survived redaction ({', '.join(where)}): the cell is withheld"
        return cleaned, None


def stored_secrets(sidecar: Sidecar) -> list[str]:
    """The roster's blocking check `no_secret_survives`: the independent detector over every stored roster value
    (read as "column: value"); a cell it flags is withheld at load, so this fails only if one got in without
    passing it."""
    failures = []
    for name in sidecar.rosters():
        for row in sidecar.roster_values_of(name):
            where = surviving_secrets("", {row["name"]: row["text_value"] or ""})
            if where:
                failures.append(f"roster {name} key {row['key']!r}: stored with a secret ({', '.join(where)})")
    return failures


def roster_digest(spec: RosterSpec, declared: Mapping[str, FieldSpec], settings: Settings) -> str:
    """What a loaded roster depends on: the file's bytes, its entry, the declared field types and how its cells are
    redacted (a roster stored before cells were redacted has another digest, so it is loaded again)."""
    content = hashlib.sha256(spec.path.read_bytes()).hexdigest()
    kinds = sorted((name, item.kind) for name, item in declared.items())
    redaction = ("cells redacted", settings.pii_policy, sorted(settings.role_email_prefixes))
    return hashlib.sha256(f"{content}{spec!r}{kinds!r}{redaction!r}".encode()).hexdigest()


def stale_rosters(settings: Settings, sidecar: Sidecar) -> list[str]:
    """Rosters to (re)load or drop: configured ones whose file or entry changed (or are missing), and stored ones
    no longer configured."""
    specs = roster_specs(settings)
    declared = declared_fields(settings)
    stored = {name: row["sha"] for name, row in sidecar.rosters().items()}
    stale = [spec.name for spec in specs
             if not spec.path.is_file() or stored.get(spec.name) != roster_digest(spec, declared, settings)]
    return stale + sorted(set(stored) - {spec.name for spec in specs})


def load_rosters(settings: Settings, sidecar: Sidecar) -> RosterReport:
    """Load every configured roster whose file (or declaration) changed, drop rosters no longer configured, and
    recompute the reconciliation table."""
    report = RosterReport()
    specs = roster_specs(settings)
    declared = declared_fields(settings)
    stored = sidecar.rosters()
    for spec in specs:
        if not spec.path.is_file():
            raise ConfigError(f"roster {spec.path}: no such file")
        digest = roster_digest(spec, declared, settings)
        previous = stored.get(spec.name)
        if previous is not None and previous["sha"] == digest:
            report.rosters[spec.name] = {"path": str(spec.path), "rows": previous["rows"], "reloaded": False,
                                         "problems": list(previous["problems"] or [])}
            continue
        rows, problems, count = read_roster(spec, declared, settings)
        sidecar.replace_roster(spec.name, {"name": spec.name, "path": str(spec.path), "key": spec.key,
                                           "document_key": spec.document_key, "authoritative": list(spec.authoritative),
                                           "sha": digest, "rows": count, "problems": problems}, rows)
        report.rosters[spec.name] = {"path": str(spec.path), "rows": count, "reloaded": True, "problems": problems}
        report.changed = True
    report.removed = sorted(set(stored) - {spec.name for spec in specs})
    for name in report.removed:
        sidecar.replace_roster(name, None, [])
        report.changed = True
    with sidecar.kept():
        sidecar.refresh_roster_links()
        report.reconciliation = reconcile(sidecar)
        sidecar.replace_reconciliation(report.reconciliation)
    for row in report.reconciliation:
        report.counts[row["status"]] += 1
    return report


def claim(values: list[str]) -> str | None:
    """A field's values as one comparable text (a list's elements sorted, joined by '; ')."""
    return "; ".join(sorted(values)) if values else None


def reconcile(sidecar: Sidecar) -> list[dict[str, Any]]:
    """Per roster, joined document and authoritative column: the document's claim against the roster's value."""
    result: list[dict[str, Any]] = []
    for name, roster in sidecar.rosters().items():
        columns = list(roster["authoritative"] or [])
        keyed = sidecar.documents_keyed_by(roster["document_key"])
        roster_rows: dict[str, dict[str, list[str]]] = {}
        for row in sidecar.roster_values_of(name):
            roster_rows.setdefault(row["key"], {}).setdefault(row["name"], []).append(row["text_value"])
        claims: dict[str, dict[str, list[str]]] = {}
        for row in sidecar.own_values(columns, [row["sha"] for row in keyed]):
            claims.setdefault(row["sha"], {}).setdefault(row["name"], []).append(row["text_value"])
        keys_of: dict[str, list[str]] = {}
        for row in keyed:
            keys_of.setdefault(row["sha"], []).append(row["key"])
        for row in keyed:
            if len(keys_of[row["sha"]]) > 1:
                if row["key"] == keys_of[row["sha"]][0]:
                    result += [{"roster": name, "key": claim(keys_of[row["sha"]]), "sha": row["sha"],
                                "path": row["path"], "field": column, "status": "AMBIGUOUS_KEY",
                                "document_value": claim(claims.get(row["sha"], {}).get(column, [])),
                                "roster_value": None} for column in columns]
                continue
            for column in columns:
                stated = claim(claims.get(row["sha"], {}).get(column, []))
                if row["key"] not in roster_rows:
                    status, canonical = "MISSING_IN_ROSTER", None
                else:
                    canonical = claim(roster_rows[row["key"]].get(column, []))
                    status = "NOT_STATED" if stated is None else "MATCH" if stated == canonical else "MISMATCH"
                result.append({"roster": name, "key": row["key"], "sha": row["sha"], "path": row["path"],
                               "field": column, "status": status, "document_value": stated, "roster_value": canonical})
        held = {row["key"] for row in keyed}
        for key in sorted(set(roster_rows) - held):
            for column in columns:
                result.append({"roster": name, "key": key, "sha": None, "path": None, "field": column,
                               "status": "ROSTER_ONLY", "document_value": None,
                               "roster_value": claim(roster_rows[key].get(column, []))})
    return result
