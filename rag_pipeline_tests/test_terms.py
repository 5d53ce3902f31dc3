"""Business terms declared once in the sources file (fields/terms.py): the metadata query tool expands
`where: {"term": NAME}` (nested queries too, and `rag-pipeline query --where term=NAME`), the planner reads them
in questions (a qualifier of a class, a condition alone, a name of the whole collection), and the agent's prompt
lists them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rag_pipeline import components
from rag_pipeline.chat.planner import field_catalog, plan
from rag_pipeline.components import load_settings
from rag_pipeline.errors import InputError
from rag_pipeline.fields.terms import Term, with_terms
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar
from rag_pipeline.structured.query import QueryRunner

TERMS = {"big budget project": "budget_k > 400", "flagship": "status = released and budget_k >= 500",
         "the whole catalogue": "all"}
BIG = Term("big budget project", ("big", "budget", "project"), {"budget_k": {"gt": 400}})


@pytest.fixture(scope="module")
def with_declared_terms(catalog: Settings, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """The catalog's sidecar read through a copy of its sources file that declares TERMS."""
    declared = yaml.safe_load(catalog.sources_file.read_text())
    declared["terms"] = TERMS
    sources = tmp_path_factory.mktemp("terms") / "sources.yaml"
    sources.write_text(yaml.safe_dump(declared))
    for name in ("roster.csv", "docs"):
        (sources.parent / name).symlink_to(catalog.sources_file.parent / name)
    return load_settings(data_dir=catalog.data_dir, sources_file=sources)


def test_a_term_expands_to_its_clauses_in_nested_queries_too() -> None:
    body = {"op": "intersect", "queries": [
        {"op": "distinct", "field": "publisher", "where": {"term": "Big  Budget Project"}},
        {"op": "distinct", "field": "publisher", "where": {"genre": "racing"}}]}
    assert with_terms(body, (BIG,))["queries"][0]["where"] == {"budget_k": {"gt": 400}}
    with pytest.raises(InputError) as unknown:
        with_terms({"op": "count", "where": {"term": "blockbuster"}}, (BIG,))
    assert unknown.value.code == "unknown_term" and "'big budget project'" in str(unknown.value)
    with pytest.raises(InputError, match="sets 'budget_k'"):
        with_terms({"op": "count", "where": {"term": "big budget project", "budget_k": 3}}, (BIG,))


def test_the_query_tool_and_the_cli_honour_terms(with_declared_terms: Settings) -> None:
    runner = QueryRunner(with_declared_terms, Sidecar(with_declared_terms.sidecar_path))
    flagship = runner.run_json({"op": "list", "field": "title", "where": {"term": "flagship"}})
    spelled = runner.run_json({"op": "list", "field": "title",
                               "where": {"status": "released", "budget_k": {"gte": 500}}})
    assert flagship.rows == spelled.rows and flagship.rows
    env = {**os.environ, "RAG_SOURCES_FILE": str(with_declared_terms.sources_file)}
    cli = subprocess.run([sys.executable, "-m", "rag_pipeline", "query", "count", "--where", "term=big budget project",
                          "--data-dir", str(with_declared_terms.data_dir), "--json"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert cli.returncode == 0, cli.stderr
    expected = runner.run_json({"op": "count", "where": {"budget_k": {"gt": 400}}}).rows[0]["count"]
    assert json.loads(cli.stdout)["rows"] == [{"count": expected}] and expected > 0


def test_the_planner_reads_terms_in_questions(with_declared_terms: Settings) -> None:
    catalogue = field_catalog(with_declared_terms, Sidecar(with_declared_terms.sidecar_path), None,
                              components.embedder(with_declared_terms))
    big = plan("How many big budget projects are there?", catalogue)[0]
    assert big.args == {"op": "count", "where": {"folder": "projects", "budget_k": {"gt": 400}}}
    flagship = plan("Which flagship projects are there?", catalogue)[0]
    assert flagship.args["where"] == {"folder": "projects", "status": "released", "budget_k": {"gte": 500}}
    whole = plan("How many projects are in the whole catalogue?", catalogue)[0]
    assert whole.args == {"op": "count", "where": {"folder": "projects"}}


def test_the_agent_prompt_lists_the_terms(with_declared_terms: Settings) -> None:
    from rag_pipeline.chat.agent import SYSTEM

    assert "{terms}" in SYSTEM  # filled from the catalog's terms in ChatAgent._loop
    catalogue = field_catalog(with_declared_terms, Sidecar(with_declared_terms.sidecar_path))
    assert {term.phrase for term in catalogue.reader.lexicon.terms} == set(TERMS)


def test_an_undeclared_term_is_refused_with_the_declared_ones(with_declared_terms: Settings) -> None:
    runner = QueryRunner(with_declared_terms, Sidecar(with_declared_terms.sidecar_path))
    with pytest.raises(InputError) as refused:
        runner.run_json({"op": "count", "where": {"term": "indie darling"}})
    assert refused.value.code == "unknown_term" and "'flagship'" in str(refused.value)
    assert Path(with_declared_terms.sources_file).exists()
