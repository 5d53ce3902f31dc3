"""The layout's rules, checked on the source: the packages form a declared order of layers and every import runs
down it (or within a layer), no two packages of a layer import each other, only the Dagster layer imports
Dagster, no module of rag_pipeline imports another that (directly or not) imports it back, and only the sidecar
package runs SQL on the sidecar."""

from __future__ import annotations

import ast
import re
import tempfile
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rag_pipeline"
# Dagster's entry point for the code location (pyproject [tool.dagster], workspace.yaml): it only loads defs/.
CODE_LOCATION = "rag_pipeline.definitions"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported_modules(path: Path) -> set[str]:
    """Every module an import statement of the file names, at any depth (function-level imports included);
    `from package import name` counts as an import of package.name when that is a module, else of package."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            submodules = {f"{node.module}.{alias.name}" for alias in node.names} & MODULES.keys()
            names.update(submodules)
            if len(submodules) < len(node.names):  # names defined in the module itself
                names.add(node.module)
    return names


def internal_graph() -> dict[str, set[str]]:
    """rag_pipeline module -> the rag_pipeline modules it imports."""
    return {name: {target for target in imported_modules(path) if target in MODULES and target != name}
            for name, path in MODULES.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first == last), or None."""
    state: dict[str, str] = {}  # "open" while on the DFS stack, "done" after
    stack: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        stack.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                return stack[stack.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        stack.pop()
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module)):
            return cycle
    return None


# The layers, lowest first: a module may import modules of its own layer and of the layers below, never above.
LAYERS: tuple[frozenset[str], ...] = tuple(frozenset(layer) for layer in (
    # configuration, errors, shared utilities
    {"settings", "errors", "retry", "sources_file", "file_lock", "atomic_file", "cpu"},
    {"fields"},  # field kinds, typed values, the field registry
    {"embed", "index", "sidecar"},  # local embedders, the vector store, the metadata sidecar
    {"llm"},  # model servers (chat and embeddings; implements embed's interface)
    {"ingest", "retrieve", "generate", "structured"},  # the stages of ingest, query time, exact answers
    {"components"},  # assembles the configured components from the settings
    {"chat", "evaluate"},  # the agent and planner; quality measurement
    {"defs", "serve", "definitions", "__main__"},  # the Dagster layer; the HTTP API, the CLI
))


def package_of(module: str) -> str:
    """rag_pipeline.ingest.convert -> ingest; rag_pipeline.settings -> settings."""
    return module.split(".")[1]


def layer_of(module: str) -> int:
    package = package_of(module)
    return next(index for index, layer in enumerate(LAYERS) if package in layer)


def test_every_package_has_a_layer() -> None:
    packages = {package_of(name) for name in MODULES if name != "rag_pipeline"}
    assert packages == set().union(*LAYERS)


def test_every_import_runs_down_the_layers() -> None:
    upward = sorted(f"{name} -> {target}" for name, targets in internal_graph().items() if name != "rag_pipeline"
                    for target in targets if target != "rag_pipeline" and layer_of(target) > layer_of(name))
    assert upward == []


def test_no_two_packages_import_each_other() -> None:
    edges = {(package_of(name), package_of(target)) for name, targets in internal_graph().items()
             if name != "rag_pipeline" for target in targets if target != "rag_pipeline"}
    mutual = sorted(f"{a} <-> {b}" for a, b in edges if a < b and (b, a) in edges)
    assert mutual == []


def test_the_layer_check_catches_an_upward_import() -> None:
    assert layer_of("rag_pipeline.ingest.convert") > layer_of("rag_pipeline.fields.values")
    assert layer_of("rag_pipeline.serve.cli") > layer_of("rag_pipeline.chat.turn")


def test_only_the_dagster_layer_imports_dagster() -> None:
    offenders = {
        name: sorted(target for target in imported_modules(path) if target.split(".")[0].startswith("dagster"))
        for name, path in MODULES.items()
        if not name.startswith("rag_pipeline.defs") and name != CODE_LOCATION
    }
    assert {name: targets for name, targets in offenders.items() if targets} == {}


def test_the_library_does_not_import_the_dagster_layer() -> None:
    """The library (and the serving layer on it) reaches Dagster only through the in-process ingest runner."""
    allowed = {"rag_pipeline.defs.ingest_runner"}
    offenders = {
        name: sorted(target for target in targets if target.startswith("rag_pipeline.defs") and target not in allowed)
        for name, targets in internal_graph().items() if not name.startswith("rag_pipeline.defs")
        and name != CODE_LOCATION
    }
    assert {name: targets for name, targets in offenders.items() if targets} == {}


def test_no_import_cycles() -> None:
    assert find_cycle(internal_graph()) is None


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


SIDECAR_PACKAGE = "rag_pipeline.sidecar"
# Modules outside the sidecar package that may import duckdb, and why.
DUCKDB_ALLOWED = {
    "rag_pipeline.structured.query": "the metadata query compiler: it owns its SQL and runs it on Sidecar.read_only()",
    "rag_pipeline.structured.roster": "reads a roster CSV or Parquet file with an in-memory DuckDB, not the sidecar",
}
SIDECAR_SQL_ALLOWED = {"rag_pipeline.structured.query"}  # the one module outside the package with SQL on the sidecar
SIDECAR_CONNECTIONS = {"connect", "read_only", "transaction"}  # Sidecar's connection methods (no arguments)


def sidecar_relations() -> set[str]:
    """The names of the sidecar's tables, views and table macros (of a new sidecar: what the migrations make) and
    of the chat file beside it."""
    from rag_pipeline.sidecar import ChatStore, Sidecar

    names: set[str] = set()
    with tempfile.TemporaryDirectory() as folder:
        sidecar = Sidecar(Path(folder) / "sidecar.duckdb")
        for store in (sidecar, ChatStore.beside(sidecar.path)):
            with store.connect() as con:
                names |= {name for (name,) in con.execute(
                    "SELECT table_name FROM information_schema.tables UNION SELECT function_name FROM "
                    "duckdb_functions() WHERE function_type = 'table_macro' AND NOT internal").fetchall()}
    return names


def sidecar_access(source: str, relations: set[str]) -> list[tuple[str, str]]:
    """(kind, what) of each way the source reaches the sidecar's database: imports of duckdb ("duckdb"), connections
    opened the way Sidecar opens them, without arguments ("connection"; a SQLAlchemy `engine.connect()` is another
    database), and string literals (f-string parts included) with SQL naming one of the sidecar's relations
    ("sql")."""
    naming = re.compile(rf"\b(?:FROM|JOIN|INTO|UPDATE|TABLE)\s+({'|'.join(sorted(relations))})\b")
    found: list[tuple[str, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [("duckdb", alias.name) for alias in node.names if alias.name.split(".")[0] == "duckdb"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "duckdb":
            found.append(("duckdb", node.module or ""))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in SIDECAR_CONNECTIONS and not node.args and not node.keywords and \
                ast.unparse(node.func.value) != "engine":
            found.append(("connection", f"{ast.unparse(node.func)}()"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (match := naming.search(node.value)):
            found.append(("sql", match.group(0)))
    return found


def test_no_module_outside_the_sidecar_package_runs_sql_on_the_sidecar() -> None:
    """The sidecar is reached through its typed repository methods (the seam another database plugs into); only the
    metadata query compiler writes its own SQL, and duckdb is imported only where the reason is given above."""
    assert set(DUCKDB_ALLOWED) | SIDECAR_SQL_ALLOWED <= MODULES.keys()
    relations = sidecar_relations()
    assert {"documents", "chunks", "effective_fields", "effective_of", "chat_turns"} <= relations
    offenders = {}
    for name, path in MODULES.items():
        if name == SIDECAR_PACKAGE or name.startswith(SIDECAR_PACKAGE + ".") or name in SIDECAR_SQL_ALLOWED:
            continue
        found = [(kind, what) for kind, what in sidecar_access(path.read_text(), relations)
                 if not (kind == "duckdb" and name in DUCKDB_ALLOWED)]
        if found:
            offenders[name] = found
    assert offenders == {}


def test_the_sidecar_access_finder_finds_sql() -> None:
    source = '''
import duckdb
from duckdb import connect
with self.sidecar.connect() as con, Sidecar(path).read_only() as ro:
    con.execute(f"DELETE FROM chunks WHERE sha = {sha!r}")
rows = sidecar._rows("SELECT name, kind FROM effective_of(?)", [[sha]])
sqlite3.connect(path).execute("SELECT * FROM embeddings")  # another database: neither counts
with engine.connect() as conn: pass  # a SQLAlchemy engine's: neither
"""Read the rows from documents and chunks."""  # prose is not SQL
'''
    assert sorted(sidecar_access(source, {"documents", "chunks", "effective_of"})) == [
        ("connection", "Sidecar(path).read_only()"), ("connection", "self.sidecar.connect()"), ("duckdb", "duckdb"),
        ("duckdb", "duckdb"), ("sql", "FROM chunks"), ("sql", "FROM effective_of")]
