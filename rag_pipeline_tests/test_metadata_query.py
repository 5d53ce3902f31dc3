"""Exact answers on a real ingest of the bundled catalog corpus (golden/catalog: Markdown front matter, DOCX/PPTX
core properties, PDF info, HTML meta, a roster CSV): the metadata query tool's operations, filters and limits, the
roster join and every reconciliation state, field filters in search, the golden aggregation questions, and the
CLI and HTTP contracts. Every test runs on both sidecar backends: DuckDB, and the corpus ingested into a
PostgreSQL sidecar (RAG_SIDECAR_URL) on a real server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb
import httpx
import psycopg2
import pytest

from rag_pipeline.errors import InputError, QueryTimeout
from rag_pipeline.evaluate.aggregation import evaluate_aggregations
from rag_pipeline.evaluate.golden import load_golden
from rag_pipeline.index.vector_store import Scope
from rag_pipeline.serve.keys import create_key
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar
from rag_pipeline.structured.operations import NAMES
from rag_pipeline.structured.profile import build_profile
from rag_pipeline.structured.query import QueryRunner
from rag_pipeline.structured.request import MAX_DEPTH
from rag_pipeline_tests.conftest import ingest_catalog
from rag_pipeline_tests.sidecar_sql import sql_rows
from rag_pipeline_tests.test_api import running_api

from .pg_server import postgres_server  # noqa: F401  (a fixture: the PostgreSQL backend's server)
from .sidecar_backends import BACKENDS, fresh_database

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "golden" / "catalog_golden.yaml"


@pytest.fixture(scope="module", params=BACKENDS)
def catalog(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Settings]:
    """The session's catalog on DuckDB; or the corpus ingested into a fresh PostgreSQL sidecar, RAG_SIDECAR_URL
    set for the module's tests (the CLI's subprocesses read it)."""
    if request.param == "duckdb":
        yield request.getfixturevalue("duckdb_catalog")
        return
    url = fresh_database(request.getfixturevalue("postgres_server"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAG_SIDECAR_URL", url)
        settings = ingest_catalog(tmp_path_factory.mktemp("pg_catalog"))
        assert settings.sidecar_location == url
        assert not settings.sidecar_path.exists()  # the whole ingest wrote PostgreSQL, no DuckDB file
        yield settings


def run(settings: Settings, **body) -> dict:
    return QueryRunner(settings, Sidecar(settings.sidecar_location)).run_json(body).to_json()


def names(result: dict) -> set[str]:
    return {Path(document["path"]).name for document in result["documents"]}


def test_every_property_source_lands_in_the_sidecar(catalog: Settings) -> None:
    origins = {row["origin"] for row in sql_rows(
        Sidecar(catalog.sidecar_location), "SELECT DISTINCT origin FROM document_fields")}
    assert {"front_matter", "docx", "pptx", "pdf", "html"} <= origins
    errors = sql_rows(Sidecar(catalog.sidecar_location),
                      "SELECT d.paths[1] AS path, e.error FROM field_errors e JOIN documents d USING (sha)")
    assert [Path(row["path"]).name for row in errors] == ["brine-and-bramble.md"]
    assert "malformed YAML" in errors[0]["error"]
    broken = run(catalog, op="lookup", where={"name": "brine-and-bramble.md"})["rows"][0]
    assert broken["fields"]["title"] == {"value": "Brine & Bramble", "type": "string", "origin": "heading"}
    assert "themes" not in broken["fields"] and broken["field_errors"]
    chunks = sql_rows(
        Sidecar(catalog.sidecar_location),
        "SELECT count(*) AS n FROM chunks c JOIN documents d USING (sha) WHERE d.paths[1] LIKE '%brine-and-bramble.md'")
    assert chunks[0]["n"] > 0  # the text is ingested all the same


def test_count_list_distinct_group_by_top_n_lookup(catalog: Settings) -> None:
    assert run(catalog, op="count")["rows"] == [{"count": 42}]
    pdfs = run(catalog, op="count", where={"type": "pdf"})
    assert pdfs["rows"] == [{"count": 4}] and len(pdfs["documents"]) == 4
    assert all(set(document) == {"id", "path"} for document in pdfs["documents"])
    citrus = run(catalog, op="list", where=["themes=citrus"], field="title")
    assert len(citrus["rows"]) == 5 and all(set(row) == {"id", "path", "title"} for row in citrus["rows"])
    assert names(citrus) == {Path(row["path"]).name for row in citrus["rows"]}
    years = run(catalog, op="distinct", field="year")["rows"]
    assert [row["value"] for row in years] == sorted(row["value"] for row in years)
    assert all(isinstance(row["value"], int) for row in years)
    by_type = run(catalog, op="group_by", by="type")
    assert {row["value"]: row["count"] for row in by_type["rows"]} == {"md": 24, "docx": 6, "pptx": 4, "pdf": 4,
                                                                       "html": 4}
    themes = run(catalog, op="group_by", by="themes")["rows"]  # a list field: each element counts
    assert sum(row["count"] for row in themes) > 23 and {"value": "citrus", "count": 5} in themes
    top = run(catalog, op="top_n", field="budget_k", limit=3)["rows"]
    assert len(top) == 3 and top[0]["value"] >= top[1]["value"] >= top[2]["value"]
    lookup = run(catalog, op="lookup", field="team", where={"project_id": "P-008"})["rows"]
    assert lookup == [{"id": lookup[0]["id"], "path": lookup[0]["path"], "field": "team", "value": "Heron",
                       "origin": "roster:roster"}]
    both = run(catalog, op="lookup", where={"project_id": "P-003"})["rows"]  # a note and its press page
    assert {Path(row["path"]).name for row in both} == {"lantern-keeper.md", "lantern-keeper-anniversary.html"}
    assert all(row["fields"]["team"]["value"] == "Heron" for row in both)


def test_where_clauses(catalog: Settings) -> None:
    signed_2025 = run(catalog, op="count", where={"signed": "2025"})["rows"][0]["count"]
    spelled = run(catalog, op="count", where={"signed": {"gte": "2025-01-01", "lt": "2026-01-01"}})
    assert signed_2025 == spelled["rows"][0]["count"] > 0
    cli_form = run(catalog, op="count", where=["signed>=2025", "signed<2026"])
    assert cli_form["rows"][0]["count"] == signed_2025
    contracts = run(catalog, op="count", where={"category": "contract", "created": "2025"})["rows"][0]["count"]
    assert contracts == 4
    either = run(catalog, op="count", where={"genre": ["puzzle", "fishing"]})["rows"][0]["count"]
    assert either == run(catalog, op="count", where={"genre": "puzzle"})["rows"][0]["count"] + \
        run(catalog, op="count", where={"genre": "fishing"})["rows"][0]["count"]
    ranged = run(catalog, op="list", where={"year": {"gte": 2023, "lte": 2024}}, field="year")["rows"]
    assert ranged and all(2023 <= row["year"] <= 2024 for row in ranged)
    assert run(catalog, op="count", where={"title": {"contains": "LANTERN"}})["rows"][0]["count"] >= 1
    assert run(catalog, op="count", where={"year": "2021.0"})["rows"] == run(catalog, op="count", where={"year": 2021})[
        "rows"]


def test_refusals_name_the_field(catalog: Settings) -> None:
    for body, match in [
        ({"op": "count", "where": {"secret_column": "x"}}, "'secret_column' is not a queryable field"),
        ({"op": "group_by", "by": "documents; DROP TABLE documents"}, "is not a queryable field"),
        ({"op": "count", "limit": 1001}, "limit must be an integer from 1 to 1000"),
        ({"op": "count", "where": {"year": "soon"}}, "'soon' is not a number"),
        ({"op": "count", "where": {"signed": "next week"}}, "is not a date"),
        ({"op": "count", "where": {"title": {"gte": 3}}}, "a range needs a number or date field"),
        ({"op": "top_n", "field": "title"}, "top_n --field needs a number or date field"),
        ({"op": "lookup"}, "lookup needs a where clause"),
        ({"op": "distinct"}, "distinct needs --field"),
        ({"op": "select *"}, "op must be one of"),
        ({"op": "count", "where": ["year!=2020"]}, "use FIELD=VALUE"),
    ]:
        with pytest.raises(InputError, match=match):
            QueryRunner(catalog, Sidecar(catalog.sidecar_location)).run_json(body)


def test_row_limits_and_truncation(catalog: Settings) -> None:
    everything = run(catalog, op="list", limit=5)
    assert len(everything["rows"]) == 5 and everything["truncated"] and everything["total_documents"] == 42
    assert len(run(catalog, op="list")["rows"]) == 42  # the default limit of 100 holds them all
    counted = run(catalog, op="count", limit=3)
    assert counted["rows"] == [{"count": 42}] and len(counted["documents"]) == 3 and counted["truncated"]
    assert len(run(catalog, op="top_n", field="year")["rows"]) == 10  # top_n's default


def test_the_connection_is_read_only_without_external_access(catalog: Settings) -> None:
    sidecar = Sidecar(catalog.sidecar_location)
    if sidecar.url is not None:  # a read-only transaction (files are the server role's privileges: not a superuser)
        for sql in ("CREATE TABLE x (i INTEGER)", "DELETE FROM documents", "UPDATE state SET value = 'x'",
                    "INSERT INTO state VALUES ('k', 'v')", "CREATE TEMP TABLE t AS SELECT 1",
                    "SET TRANSACTION READ WRITE"):
            with sidecar.read_only() as con, pytest.raises(psycopg2.Error, match="read-only|must be set before"):
                con.execute("SELECT 1")
                con.execute(sql)
        return
    with sidecar.read_only() as con:
        for sql in ("CREATE TABLE x (i INTEGER)", "DELETE FROM documents", "SELECT * FROM read_csv('/etc/passwd')",
                    "SET enable_external_access = true", "COPY documents TO '/tmp/leak.csv'"):
            with pytest.raises(duckdb.Error):
                con.execute(sql)


def test_the_time_limit_stops_a_query(catalog: Settings) -> None:
    class Slow(QueryRunner):
        def _execute(self, con, query, registry, scope):  # a query that would run for minutes
            series = "range(1000000000000)" if self.sidecar.url is None else "generate_series(1, 1000000000000)"
            con.execute(f"SELECT count(*) FROM {series} a").fetchall()

    with pytest.raises(QueryTimeout, match="longer than 0.3 s"):
        Slow(catalog, Sidecar(catalog.sidecar_location), timeout_seconds=0.3).run_json({"op": "count"})


def test_a_scope_limits_what_is_counted(catalog: Settings) -> None:
    runner = QueryRunner(catalog, Sidecar(catalog.sidecar_location))
    assert runner.run_json({"op": "count"}, Scope(sources=("catalog",))).rows == [{"count": 42}]
    assert runner.run_json({"op": "count"}, Scope(sources=("elsewhere",))).rows == [{"count": 0}]
    assert runner.run_json({"op": "count"}, Scope(tags=("legal",))).rows == [{"count": 0}]


def test_roster_join_and_every_reconciliation_state(catalog: Settings) -> None:
    sidecar = Sidecar(catalog.sidecar_location)
    counts = Counter(row["status"] for row in sidecar.reconciliation())
    assert counts["MISMATCH"] == 4 and counts["MISSING_IN_ROSTER"] == 2 and counts["ROSTER_ONLY"] == 2
    assert counts["MATCH"] > 0 and counts["NOT_STATED"] > 0
    mismatched = {(row["key"], row["field"]): (row["document_value"], row["roster_value"]) for row in sql_rows(
        sidecar, "SELECT * FROM reconciliation WHERE status = 'MISMATCH'")}
    assert mismatched[("P-003", "publisher")] == ("Lantern House", "Northwind Interactive")
    assert mismatched[("P-013", "genre")] == ("platformer", "puzzle")
    # Authoritative: the roster's value is the field's value, whatever the document claims.
    assert run(catalog, op="lookup", field="publisher", where={"project_id": "P-003"})["rows"][0]["value"] == \
        "Northwind Interactive"
    # Not authoritative: the roster fills fields the document does not state; a document without a roster row
    # keeps its own values and gets no roster columns.
    assert run(catalog, op="lookup", field="region", where={"project_id": "P-031"})["rows"][0]["value"] is None
    assert run(catalog, op="lookup", field="publisher", where={"project_id": "P-031"})["rows"][0]["origin"] == \
        "front_matter"
    # A roster-only row is never a document.
    assert run(catalog, op="count", where={"project_id": "P-024"})["rows"] == [{"count": 0}]


def test_golden_aggregation_questions_are_exact(catalog: Settings) -> None:
    golden = load_golden(GOLDEN)
    questions = [question for question in golden.questions if question.kind == "aggregation"]
    assert len(questions) >= 24 and {q.query["op"] for q in questions} == set(NAMES)
    report = evaluate_aggregations(questions, QueryRunner(catalog, Sidecar(catalog.sidecar_location)))
    assert report["misses"] == [] and report["accuracy"] == 1.0


def test_search_filters_on_filterable_fields(catalog: Settings) -> None:
    from rag_pipeline.components import open_retriever

    retriever = open_retriever(catalog)
    try:
        fishing = retriever.search("game", top_k=20, filters={"genre": "fishing"}).to_json()["results"]
        # the press page states no genre: the roster's does, and its points carry it
        assert {Path(hit["path"]).name for hit in fishing} == {"deepwater-patience.md",
                                                                "deepwater-patience-launch.html"}
        both = retriever.search("game", top_k=20, filters={"themes": "citrus", "year": "2024.0"}).to_json()
        assert both["results"] and all(Path(hit["path"]).parent.name == "projects" for hit in both["results"])
        with pytest.raises(InputError, match="declared filterable"):
            retriever.search("game", filters={"team": "Heron"})  # a field, but not declared filterable
    finally:
        retriever.close()


def test_cli_query_contract(catalog: Settings) -> None:
    env = {**os.environ, "RAG_SOURCES_FILE": str(catalog.sources_file)}

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "rag_pipeline", "query", *args, "--data-dir",
                               str(catalog.data_dir)], capture_output=True, text=True, env=env, timeout=120)

    done = cli("group_by", "--by", "publisher", "--where", "type=md", "--json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert set(result) >= {"op", "rows", "documents", "truncated"} and result["op"] == "group_by"
    assert all(set(row) == {"value", "count"} for row in result["rows"])
    refused = cli("count", "--where", "salary=1", "--json")
    assert refused.returncode == 2 and json.loads(refused.stdout)["error"]["code"] == "unknown_field"
    table = cli("list", "--where", "themes=citrus", "--field", "title")
    assert table.returncode == 0 and "Marmalade Circuit" in table.stdout
    best = cli("argmin", "--field", "year", "--return", "project_id", "--json")
    assert best.returncode == 0, best.stderr
    assert {row["value"] for row in json.loads(best.stdout)["rows"]} == {"P-003", "P-014"}
    total = cli("sum", "--field", "budget_k", "--where", "type=md")
    assert total.returncode == 0 and "sum of budget_k over 23 documents matching type = md" in total.stdout
    body = {"op": "intersect", "queries": [{"op": "distinct", "field": "publisher", "where": {"genre": "puzzle"}},
                                           {"op": "distinct", "field": "publisher", "where": {"genre": "racing"}}]}
    both = cli("--json-body", json.dumps(body), "--json")
    assert both.returncode == 0, both.stderr
    assert [row["value"] for row in json.loads(both.stdout)["rows"]] == ["Brightfield Games", "Copperleaf Publishing",
                                                                         "Northwind Interactive"]
    for args, code in [(("count", "--json-body", "{}"), "invalid_body"), (("--json-body", "[1", ), "invalid_json"),
                       ((), "invalid_op"), (("--json-body", json.dumps({"op": "sum", "field": "title"})),
                                            "invalid_field")]:
        refused = cli(*args, "--json")
        assert refused.returncode == 2 and json.loads(refused.stdout)["error"]["code"] == code, refused.stdout


def test_http_query_and_fields(catalog: Settings) -> None:
    keys = catalog.data_dir / "api_keys.yaml"
    tokens = {name: create_key(keys, name, "reader", (), sources)[1]
              for name, sources in [("all", ()), ("other", ("elsewhere",))]}
    with running_api(catalog) as url:
        def post(token: str, body: dict) -> httpx.Response:
            return httpx.post(f"{url}/query", json=body, headers={"Authorization": f"Bearer {token}"}, timeout=60)

        counted = post(tokens["all"], {"op": "count", "where": {"type": "pdf"}})
        assert counted.status_code == 200 and counted.json()["rows"] == [{"count": 4}]
        assert post(tokens["other"], {"op": "count"}).json()["rows"] == [{"count": 0}]  # the key's scope
        assert httpx.post(f"{url}/query", json={"op": "count"}, timeout=30).status_code == 401
        for body, code in [({"op": "count", "where": {"secret": 1}}, "unknown_field"),
                           ({"op": "count", "limit": 5000}, "invalid_limit"),
                           ({"op": "count", "sql": "SELECT 1"}, "unknown_field"),
                           ({"op": "drop"}, "invalid_op")]:
            refused = post(tokens["all"], body)
            assert refused.status_code == 400 and refused.json()["error"]["code"] == code, refused.text
        # the operations of issue 25, their JSON forms and their refusals (each code names the part)
        deep: dict = {"op": "distinct", "field": "genre"}
        for _ in range(MAX_DEPTH + 1):
            deep = {"op": "distinct", "field": "genre", "where": {"genre": {"in": deep}}}
        press = {"op": "distinct", "field": "project_id", "where": {"folder": "press"}}
        for body, rows in [
            ({"op": "argmax", "field": "budget_k", "return": "title"}, [("Velvet Drift", 640)]),
            ({"op": "group_by", "by": "publisher", "aggregate": {"op": "count"}, "having": {"gte": 8}},
             [("Lantern House", 8), ("Northwind Interactive", 8)]),
            ({"op": "count", "where": {"type": "md", "project_id": {"in": press}, "themes": {"empty": False}}},
             [(3,)]),
            ({"op": "except", "queries": [press, {"op": "list", "field": "project_id", "where": {"type": "md"}}]},
             [("P-023",)]),
        ]:
            answered = post(tokens["all"], body)
            assert answered.status_code == 200, answered.text
            assert [tuple(row.values())[-2:] if "id" in row else tuple(row.values()) for row in
                    answered.json()["rows"]] == rows, answered.text
            assert answered.json()["operation"]
        for body, code, where in [
            (deep, "query_too_deep", "where 'genre' in: " * MAX_DEPTH),
            ({"op": "list", "where": {"genre": {"in": {"op": "drop"}}}}, "invalid_op", "where 'genre' in: op"),
            ({"op": "union", "queries": [press, {"op": "count"}]}, "invalid_queries", "union: both queries"),
            ({"op": "list", "where": {"genre": {"in": {"op": "count"}}}}, "invalid_subquery", "where 'genre' in"),
            ({"op": "sum", "field": "title"}, "invalid_field", "sum --field"),
            ({"op": "group_by", "by": "genre", "having": {"over": 2}}, "invalid_having", "'having'"),
            ({"op": "group_by", "by": "genre", "aggregate": {"op": "median"}}, "invalid_aggregate", "'aggregate'"),
            ({"op": "union", "queries": [press]}, "invalid_queries", "'queries'"),
            ({"op": "argmax", "field": "year", "return": "no such"}, "invalid_field", "'return'"),
            ({"op": "argmax", "field": "year", "returns": "title"}, "unknown_field", "queries, return, where"),
        ]:
            refused = post(tokens["all"], body)
            assert refused.status_code == 400 and refused.json()["error"]["code"] == code, refused.text
            assert where in refused.json()["error"]["message"], refused.text
        fields = httpx.get(f"{url}/fields", headers={"Authorization": f"Bearer {tokens['all']}"}, timeout=30).json()
        by_name = {field["name"]: field for field in fields["fields"]}
        assert by_name["genre"]["filterable"] and by_name["year"]["type"] == "number"
        assert by_name["mood"]["enriched_by"] == "classify" and by_name["type"]["builtin"]
        assert by_name["project_id"]["documents"] == 27
        # A key scoped to another source sees no stored field of these documents (declared ones are config).
        hidden = httpx.get(f"{url}/fields", headers={"Authorization": f"Bearer {tokens['other']}"}, timeout=30)
        assert "project_id" not in {field["name"] for field in hidden.json()["fields"]}
        refused = post(tokens["other"], {"op": "count", "where": {"project_id": "P-001"}})
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "unknown_field"
        bad = httpx.post(f"{url}/query", content=b'{"op": "count", "where": {"title": "\\ud800"}}', timeout=30,
                         headers={"Authorization": f"Bearer {tokens['all']}", "Content-Type": "application/json"})
        assert bad.status_code == 400, bad.text  # a lone surrogate, escaped in the JSON
        flag = post(tokens["all"], {"op": "count", "where": {"year": True}})
        assert flag.status_code == 400 and flag.json()["error"]["code"] == "invalid_where"

        # Concurrent queries while the same process writes the sidecar: no request fails.
        def hammer(index: int) -> list[int]:
            return [post(tokens["all"], {"op": "group_by", "by": "genre" if index % 2 else "themes"}).status_code
                    for _ in range(8)]

        with ThreadPoolExecutor(6) as pool:
            statuses = pool.map(hammer, range(6))
            sidecar = Sidecar(catalog.sidecar_location)
            for round_ in range(10):
                sidecar.set_state("bench", str(round_))
            assert [status for batch in statuses for status in batch] == [200] * 48


def test_evaluation_slices_by_kind(catalog: Settings) -> None:
    from rag_pipeline.evaluate.index_eval import evaluate_index, format_report, headline

    report = evaluate_index(catalog, GOLDEN, with_answers=False)
    assert report["questions"] == 12 and set(report["retrieval_by_kind"]) == {"semantic"}  # never as retrieval
    assert report["retrieval"]["metrics"]["recall@10"] >= 0.9
    assert report["aggregation"]["questions"] == 58 and report["aggregation"]["accuracy"] == 1.0
    assert set(report["aggregation"]["by_op"]) == set(NAMES)
    assert headline(report)["aggregation_accuracy"] == 1.0
    assert "Aggregation questions" in format_report(report)


# --- the operations of issue 25: aggregates, argmax/argmin, having, set operations, semi-joins, reconciliation ---


def refused(settings: Settings, body: dict, code: str, match: str | None = None) -> InputError:
    with pytest.raises(InputError, match=match) as caught:
        QueryRunner(settings, Sidecar(settings.sidecar_location)).run_json(body)
    assert caught.value.code == code, caught.value
    return caught.value


def test_sum_avg_min_max_and_count_distinct(catalog: Settings) -> None:
    notes = run(catalog, op="list", field="budget_k", where={"type": "md"})["rows"]
    budgets = [row["budget_k"] for row in notes if "budget_k" in row]
    total = run(catalog, op="sum", field="budget_k", where={"type": "md"})
    assert total["rows"] == [{"value": 6430.5}] and sum(budgets) == 6430.5
    assert total["total_documents"] == len(budgets) == len(total["documents"])  # the documents summed are cited
    assert total["operation"] == "sum of budget_k over 23 documents matching type = md"
    whole = run(catalog, op="sum", field="year", where={"type": "md"})["rows"][0]["value"]
    assert isinstance(whole, int) and whole == sum(row["year"] for row in run(
        catalog, op="list", field="year", where={"type": "md"})["rows"] if "year" in row)  # integers stay exact
    average = run(catalog, op="avg", field="budget_k", where={"type": "md"})["rows"][0]["value"]
    assert average == pytest.approx(6430.5 / len(budgets), rel=1e-12)
    assert run(catalog, op="min", field="budget_k")["rows"] == [{"value": min(budgets)}]
    assert run(catalog, op="max", field="budget_k")["rows"] == [{"value": max(budgets)}]
    assert run(catalog, op="min", field="signed")["rows"] == [{"value": "2020-09-30"}]  # a date, as stated
    publishers = run(catalog, op="distinct", field="publisher")["rows"]
    assert run(catalog, op="count_distinct", field="publisher")["rows"] == [{"count": len(publishers)}]
    nothing = run(catalog, op="sum", field="budget_k", where={"type": "pdf"})
    assert nothing["rows"] == [] and nothing["total_documents"] == 0  # no document has the field: no number
    assert run(catalog, op="count_distinct", field="budget_k", where={"type": "pdf"})["rows"] == [{"count": 0}]
    refused(catalog, {"op": "sum", "field": "title"}, "invalid_field", "sum --field needs a number field")
    refused(catalog, {"op": "max", "field": "themes"}, "invalid_field", "number or date")
    refused(catalog, {"op": "avg"}, "missing_field", "avg needs --field")


def test_argmax_and_argmin_return_every_tied_document(catalog: Settings) -> None:
    biggest = run(catalog, op="argmax", field="budget_k", **{"return": "title"})
    assert [(row["value"], row["field_value"]) for row in biggest["rows"]] == [("Velvet Drift", 640)]
    assert set(biggest["rows"][0]) == {"id", "path", "value", "field_value"} and biggest["documents"][0]["path"] == \
        biggest["rows"][0]["path"]
    oldest = run(catalog, op="argmin", field="year", **{"return": "title"})["rows"]  # a tie: both
    assert {row["value"] for row in oldest} == {"Lantern Keeper", "Quarry Kings"} and \
        {row["field_value"] for row in oldest} == {2021}
    default = run(catalog, op="argmin", field="year")["rows"]  # no return: the title
    assert [row["value"] for row in default] == [row["value"] for row in oldest]
    two = run(catalog, op="argmax", field="budget_k", limit=2, **{"return": "project_id"})["rows"]
    assert [row["field_value"] for row in two] == sorted((row["budget_k"] for row in run(
        catalog, op="list", field="budget_k")["rows"] if "budget_k" in row), reverse=True)[:2]
    most = run(catalog, op="argmax", field="platforms", **{"return": "project_id"})["rows"]  # a list: its length
    assert len(most) == 7 and {row["field_value"] for row in most} == {3}
    themes = run(catalog, op="argmax", field="budget_k", **{"return": "themes"})["rows"][0]["value"]
    assert sorted(themes) == ["city", "night"]  # a list field returned whole
    latest = run(catalog, op="argmax", field="signed", where={"genre": "puzzle"})["rows"]
    assert len(latest) == 1 and latest[0]["field_value"].startswith("20")
    assert run(catalog, op="argmax", field="budget_k", where={"type": "pdf"})["rows"] == []
    refused(catalog, {"op": "argmax", "field": "title"}, "invalid_field", "argmax --field needs")
    refused(catalog, {"op": "argmax", "field": "year", "return": "salary"}, "unknown_field", "return 'salary'")


def test_group_by_with_an_aggregate_and_having(catalog: Settings) -> None:
    plain = run(catalog, op="group_by", by="publisher")["rows"]
    having = run(catalog, op="group_by", by="publisher", having={"gt": 5})
    assert having["rows"] == [row for row in plain if row["count"] > 5] and len(having["rows"]) == 3
    assert having["operation"].endswith("; only groups with count > 5")
    members = {row["id"] for value in ("Lantern House", "Northwind Interactive", "Copperleaf Publishing")
               for row in run(catalog, op="list", where={"publisher": value})["rows"]}
    assert {doc["id"] for doc in having["documents"]} == members  # the documents of the groups kept
    sums = run(catalog, op="group_by", by="publisher", aggregate={"op": "sum", "field": "budget_k"},
               where={"type": "md"})["rows"]
    assert all(set(row) == {"value", "count", "sum"} for row in sums)
    assert [row["sum"] for row in sums] == sorted((row["sum"] for row in sums), reverse=True)
    for row in sums:
        assert row["sum"] == run(catalog, op="sum", field="budget_k", where={"type": "md", "publisher": row["value"]}
                                 )["rows"][0]["value"]
    averages = run(catalog, op="group_by", by="genre", aggregate={"op": "avg", "field": "budget_k"},
                   having={"gt": 300, "lte": 600}, where={"type": "md"})["rows"]
    assert averages and all(300 < row["avg"] <= 600 for row in averages)
    latest = run(catalog, op="group_by", by="publisher", aggregate={"op": "max", "field": "signed"})["rows"]
    assert all(len(row["max"]) == 10 for row in latest)  # dates as stated
    distinct = run(catalog, op="group_by", by="themes", aggregate={"op": "count_distinct", "field": "publisher"},
                   having={"gte": 4})["rows"]
    assert distinct == [{"value": "citrus", "count": 5, "count_distinct": 4}]
    assert run(catalog, op="group_by", by="publisher", having={"gt": 100})["rows"] == []
    refused(catalog, {"op": "group_by", "by": "genre", "aggregate": {"op": "sum", "field": "title"}}, "invalid_field")
    refused(catalog, {"op": "group_by", "by": "genre", "aggregate": {"op": "median", "field": "year"}},
            "invalid_aggregate")
    refused(catalog, {"op": "group_by", "by": "genre", "having": {"above": 3}}, "invalid_having")
    refused(catalog, {"op": "count", "having": {"gt": 3}}, "invalid_having", "count takes no having")


def test_set_operations(catalog: Settings) -> None:
    def publishers(genre: str) -> dict:
        return {"op": "distinct", "field": "publisher", "where": {"genre": genre}}

    puzzle = {row["value"] for row in run(catalog, **publishers("puzzle"))["rows"]}
    racing = {row["value"] for row in run(catalog, **publishers("racing"))["rows"]}
    both = run(catalog, op="intersect", queries=[publishers("puzzle"), publishers("racing")])
    assert [row["value"] for row in both["rows"]] == sorted(puzzle & racing) and puzzle != racing
    assert all(set(row) == {"value"} for row in both["rows"])
    either = run(catalog, op="union", queries=[publishers("puzzle"), publishers("racing")])["rows"]
    assert [row["value"] for row in either] == sorted(puzzle | racing)
    only = run(catalog, op="except", queries=[publishers("puzzle"), publishers("racing")])["rows"]
    assert {row["value"] for row in only} == puzzle - racing
    # the documents cited hold a value of the result in a query it is kept from
    cited = {doc["id"] for doc in both["documents"]}
    holders = {row["id"] for genre in ("puzzle", "racing") for row in run(
        catalog, op="list", field="publisher", where={"genre": genre})["rows"] if row["publisher"] in puzzle & racing}
    assert cited == holders
    looked_up = {"op": "lookup", "field": "publisher", "where": {"project_id": "P-008"}}  # one document's value
    one = run(catalog, op="intersect", queries=[{"op": "distinct", "field": "publisher"}, looked_up])
    assert [row["value"] for row in one["rows"]] == ["Copperleaf Publishing"]
    years = run(catalog, op="intersect", queries=[{"op": "distinct", "field": "year"}, {  # numbers compare as numbers
        "op": "lookup", "field": "year", "where": {"project_id": ["P-003", "P-004"]}}])["rows"]
    assert years == [{"value": 2021}, {"value": 2024}]
    citrus = {"op": "list", "where": {"themes": "citrus"}}
    unreleased = run(catalog, op="except", queries=[citrus, {"op": "list", "where": {"status": "released"}}])
    assert names(unreleased) == {"yuzu-yard.md"} and all(set(row) == {"id", "path"} for row in unreleased["rows"])
    assert run(catalog, op="intersect", queries=[citrus, {"op": "list", "where": {"type": "pdf"}}])["rows"] == []
    refused(catalog, {"op": "union", "queries": [publishers("puzzle"), citrus]}, "invalid_queries", "both queries")
    refused(catalog, {"op": "union", "queries": [publishers("puzzle")]}, "invalid_queries", "two queries")
    refused(catalog, {"op": "union", "queries": [publishers("puzzle"), {"op": "count"}]}, "invalid_queries")
    refused(catalog, {"op": "union", "field": "genre", "queries": [citrus, citrus]}, "invalid_field")
    refused(catalog, {"op": "intersect", "queries": [publishers("puzzle"), {"op": "nope"}]}, "invalid_op",
            r"^queries\[1\]: op must be one of")


def test_semi_joins_empty_and_contains(catalog: Settings) -> None:
    press_projects = {"op": "distinct", "field": "project_id", "where": {"folder": "press"}}
    notes = run(catalog, op="list", field="title", where={"type": "md", "project_id": {"in": press_projects}})
    assert {row["title"] for row in notes["rows"]} == {"Deepwater Patience", "Lantern Keeper", "Yuzu Yard"}
    assert "project_id in (distinct values of project_id matching folder = press)" in notes["operation"]
    themes = run(catalog, op="lookup", field="themes", where={"title": {"in": {
        "op": "argmax", "field": "budget_k", "return": "title", "where": {"type": "md"}}}})["rows"]
    assert [(row["path"].rsplit("/", 1)[-1], sorted(row["value"])) for row in themes] == \
        [("velvet-drift.md", ["city", "night"])]
    big = {"op": "group_by", "by": "publisher", "having": {"gt": 5}}
    counted = run(catalog, op="count", where={"type": "md", "publisher": {"in": big}})["rows"][0]["count"]
    assert counted == sum(run(catalog, op="count", where={"type": "md", "publisher": row["value"]})["rows"][0]["count"]
                          for row in run(catalog, **big)["rows"])
    three = {"op": "distinct", "field": "project_id", "where": {"project_id": {"in": {
        "op": "distinct", "field": "project_id", "where": {"folder": "press"}}}}}
    assert run(catalog, op="count", where={"project_id": {"in": {"op": "distinct", "field": "project_id", "where": {
        "project_id": {"in": three}}}}})["rows"] == [{"count": 7}]  # three levels under the top one: allowed
    nowhere = run(catalog, op="count", where={"project_id": {"in": {"op": "distinct", "field": "project_id",
                                                                    "where": {"type": "pdf"}}}})
    assert nowhere["rows"] == [{"count": 0}]  # a subquery producing nothing matches nothing
    years = run(catalog, op="count", where={"year": {"in": {"op": "argmin", "field": "year"}}})["rows"]
    assert years == [{"count": 0}]  # titles are not numbers: they match no year
    oldest = run(catalog, op="count", where={"year": {"in": {"op": "lookup", "field": "year", "where": {
        "project_id": "P-003"}}}})["rows"]
    assert oldest == [{"count": 2}]
    empty = run(catalog, op="list", where={"type": "md", "themes": {"empty": True}})
    assert names(empty) == {"brine-and-bramble.md"}  # its front matter does not parse
    stated_themes = run(catalog, op="count", where={"type": "md", "themes": {"empty": False}})["rows"][0]["count"]
    assert stated_themes == 23
    both = run(catalog, op="list", where={"platforms": {"contains": ["PC", "switch"]}}, field="platforms")["rows"]
    assert len(both) == 8 and all({"PC", "Switch"} <= set(row["platforms"]) for row in both)
    every = run(catalog, op="count", where={"platforms": {"contains": {
        "op": "lookup", "field": "platforms", "where": {"project_id": "P-004"}}}})["rows"]  # PC, Switch, PS5
    assert every == [{"count": 1}]
    # bad subqueries are refused, naming where they are
    deep = {"op": "distinct", "field": "project_id"}
    for _ in range(6):
        deep = {"op": "distinct", "field": "project_id", "where": {"project_id": {"in": deep}}}
    refused(catalog, deep, "query_too_deep", "nest at most 5 levels")
    refused(catalog, {"op": "list", "where": {"genre": {"in": {"op": "explode"}}}}, "invalid_op",
            "^where 'genre' in: op must be one of")
    refused(catalog, {"op": "list", "where": {"genre": {"in": {"op": "count", "where": {"type": "md"}}}}},
            "invalid_subquery", "count does not produce values")
    refused(catalog, {"op": "list", "where": {"genre": {"in": {"op": "list"}}}}, "invalid_subquery")
    refused(catalog, {"op": "list", "where": {"genre": {"in": {"op": "distinct", "field": "x"}}}}, "unknown_field",
            "where 'genre' in: field 'x'")
    refused(catalog, {"op": "list", "where": {"genre": {"in": {"op": "distinct", "field": "genre", "sql": "1"}}}},
            "unknown_field", "unknown key")
    refused(catalog, {"op": "list", "where": {"title": {"contains": {"op": "distinct", "field": "genre"}}}},
            "invalid_where", "needs a list field")
    refused(catalog, {"op": "count", "where": {"themes": {"empty": "yes"}}}, "invalid_where")


def test_the_corpus_profile_counts_documents_and_values(catalog: Settings) -> None:
    profile = build_profile(Sidecar(catalog.sidecar_location), None)
    publishers = {row["value"] for row in run(catalog, op="distinct", field="publisher")["rows"]}
    assert profile.documents == 42 and profile.fields["publisher"].kind == "string"
    assert profile.fields["publisher"].distinct == len(publishers) and \
        set(profile.fields["publisher"].values.values()) == publishers


def test_the_request_filters_bound_every_query_of_the_tree(catalog: Settings) -> None:
    runner = QueryRunner(catalog, Sidecar(catalog.sidecar_location))
    body = {"op": "count", "where": {"project_id": {"in": {"op": "distinct", "field": "project_id"}}}}
    assert runner.run_json(body).rows == [{"count": 27}]
    # the request's filter holds in the subquery too: only press pages' ids, and only press pages counted
    assert runner.run_json(body, bound={"folder": "press"}).rows == [{"count": 4}]


def test_text_matches_ignore_case_spaces_and_number(catalog: Settings) -> None:
    exact = run(catalog, op="count", where={"publisher": "Lantern House"})["rows"]
    for spelled in ("lantern house", "LANTERN  HOUSE", " Lantern House "):
        assert run(catalog, op="count", where={"publisher": spelled})["rows"] == exact
    assert run(catalog, op="count", where={"publisher": ["lantern house", "BRIGHTFIELD GAMES"]})["rows"][0]["count"] \
        == exact[0]["count"] + run(catalog, op="count", where={"publisher": "Brightfield Games"})["rows"][0]["count"]
    assert run(catalog, op="count", where={"themes": "Citrus"})["rows"] == [{"count": 5}]  # a list field
    assert run(catalog, op="count", where=["genre=PUZZLE"])["rows"] == run(catalog, op="count", where={
        "genre": "puzzle"})["rows"]
    assert run(catalog, op="count", where={"genre": "puzzles"})["rows"] == run(catalog, op="count", where={
        "genre": "puzzle"})["rows"]  # only the singular is stored: the plural finds it
    assert run(catalog, op="count", where={"themes": "oceans"})["rows"] == run(catalog, op="count", where={
        "themes": "ocean"})["rows"]
    assert run(catalog, op="count", where={"project_id": "p-008"})["rows"] == [{"count": 1}]
    assert run(catalog, op="count", where={"project_id": "P-00"})["rows"] == [{"count": 0}]  # not a word: as given
    assert run(catalog, op="count", where={"genre": "puzz"})["rows"] == [{"count": 0}]  # equality, not a prefix
    # numbers and dates stay typed
    assert run(catalog, op="count", where={"year": "2021"})["rows"] == run(catalog, op="count", where={
        "year": 2021.0})["rows"]


def test_reconciliation_is_a_query(catalog: Settings) -> None:
    sidecar = Sidecar(catalog.sidecar_location)
    mismatches = run(catalog, op="reconciliation", where={"status": "mismatch"})
    truth = sidecar.reconciliation("MISMATCH")
    assert len(mismatches["rows"]) == len(truth) == 4
    assert {(row["key"], row["field"], row["document_value"], row["roster_value"]) for row in mismatches["rows"]} \
        == {(row["key"], row["field"], row["document_value"], row["roster_value"]) for row in truth}
    assert set(mismatches["rows"][0]) == {"id", "path", "roster", "key", "field", "status", "document_value",
                                          "roster_value"}
    assert {doc["id"] for doc in mismatches["documents"]} == {row["id"] for row in mismatches["rows"]}
    assert mismatches["operation"] == "roster reconciliation rows with status = MISMATCH over 4 documents"
    publisher = run(catalog, op="reconciliation", where={"status": "MISMATCH", "field": "Publisher"})["rows"]
    assert {row["key"] for row in publisher} == {"P-003", "P-008", "P-014"}
    only = run(catalog, op="reconciliation", where={"status": "ROSTER_ONLY"})
    assert {row["key"] for row in only["rows"]} == {"P-024"} and only["documents"] == []
    assert all(row["id"] is None for row in only["rows"])
    # rows about no document only when nothing restricts the documents
    assert run(catalog, op="reconciliation", where={"status": "ROSTER_ONLY", "type": "md"})["rows"] == []
    scoped = QueryRunner(catalog, sidecar).run_json({"op": "reconciliation", "where": {"status": "ROSTER_ONLY"}},
                                                    Scope(sources=("catalog",)))
    assert scoped.rows == []
    notes = run(catalog, op="reconciliation", where={"status": ["MISMATCH", "MISSING_IN_ROSTER"], "type": "md"})
    assert {row["status"] for row in notes["rows"]} == {"MISMATCH", "MISSING_IN_ROSTER"}
    every = run(catalog, op="reconciliation")["rows"]
    assert len(every) == len(sidecar.reconciliation()) and every[-1]["status"] == "MATCH"  # findings first
    refused(catalog, {"op": "reconciliation", "where": {"status": "WRONG"}}, "invalid_where", "not one of")


def test_results_state_their_operation_and_the_composer_lists_everything(catalog: Settings) -> None:
    from rag_pipeline.chat.compose import describe, number, unit_of
    from rag_pipeline.structured.query import QueryResult

    runner = QueryRunner(catalog, Sidecar(catalog.sidecar_location))
    body = {"op": "avg", "field": "budget_k", "where": {"type": "md", "genre": "puzzle"}}
    average = runner.run_json(body)
    assert average.rows[0]["value"] == pytest.approx(152.58333333333334)  # full precision in the result
    assert describe(body, average, 1) == ("Average of budget_k over 6 documents matching type = md, genre = puzzle: "
                                          "152.58 [D1][D2][D3].")  # rounded in the sentence
    body = {"op": "list", "where": {"type": "md"}}
    listed = runner.run_json(body)
    sentence = describe(body, listed, 1)
    assert all(row["title"] in sentence for row in listed.rows) and "more" not in sentence  # all 24, not 10
    body = {"op": "union", "queries": [{"op": "distinct", "field": "themes"}, {"op": "distinct", "field": "genre"}]}
    values = runner.run_json(body)
    assert len(values.rows) > 20 and all(str(row["value"]) in describe(body, values, 1) for row in values.rows)
    body = {"op": "reconciliation", "where": {"status": "MISMATCH"}}
    assert "publisher is Lantern House in the document, Northwind Interactive in the roster (MISMATCH)" in describe(
        body, runner.run_json(body), 1)
    body = {"op": "sum", "field": "budget_k", "where": {"type": "pdf"}}
    assert describe(body, runner.run_json(body), 1) == "Sum of budget_k over 0 documents matching type = pdf: none."
    # a unit in the field's name is stated with its numbers
    assert (unit_of("length_km"), unit_of("area_sq_miles"), unit_of("price_usd"), unit_of("budget_k"),
            unit_of("km")) == ("km", "sq mi", "USD", None, None)
    assert number(1234.5678, "length_km") == "1234.57 km" and number(98315, "population") == "98315"
    longest = QueryResult("argmax", [{"id": "a", "path": "/r/nile.md", "value": "Nile", "field_value": 6650}],
                          [{"id": "a", "path": "/r/nile.md"}], False, 3,
                          operation="name of the document(s) with the largest length_km over 3 documents")
    assert describe({"op": "argmax", "field": "length_km", "return": "name"}, longest, 1) == \
        "Name of the document(s) with the largest length_km over 3 documents: Nile (length_km 6650 km) [D1]."
