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
from rag_pipeline.structured.query import QueryRunner
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
    assert len(questions) >= 24 and {q.query["op"] for q in questions} == {"count", "list", "distinct", "group_by",
                                                                           "top_n", "lookup"}
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
    assert report["aggregation"]["questions"] == 37 and report["aggregation"]["accuracy"] == 1.0
    assert set(report["aggregation"]["by_op"]) == {"count", "list", "distinct", "group_by", "top_n", "lookup"}
    assert headline(report)["aggregation_accuracy"] == 1.0
    assert "Aggregation questions" in format_report(report)
