"""Every operation of the metadata query tool (structured/operations.py) is covered everywhere it must be: the CLI's
choices, the HTTP body model, the agent's instructions and tool schema, the planner's cues, the composer's
sentences, the evaluation's answer forms, and the compiler (each runs on a real ingest). Adding an operation to the
list without the rest fails here."""

from __future__ import annotations

import argparse

import pytest

from rag_pipeline.chat.agent import SYSTEM
from rag_pipeline.chat.compose import SENTENCES, describe
from rag_pipeline.chat.lexicon import Lexicon
from rag_pipeline.evaluate.chat_eval import FORM_OF_OP
from rag_pipeline.serve.cli import build_parser
from rag_pipeline.serve.models import QueryRequest
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar
from rag_pipeline.structured.operations import ARGUMENT_HELP, NAMES, OPERATIONS, arguments_schema, operation_help
from rag_pipeline.structured.profile import Profile
from rag_pipeline.structured.query import QueryRunner


def subparser(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    action = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    return action.choices[name]


def test_the_cli_and_the_http_body_take_every_operation() -> None:
    query = subparser(build_parser(), "query")
    op = next(action for action in query._actions if action.dest == "op")
    assert tuple(op.choices) == NAMES
    assert QueryRequest.model_json_schema()["properties"]["op"]["enum"] == list(NAMES)
    assert arguments_schema()["properties"]["op"]["enum"] == list(NAMES)


def test_every_argument_is_in_the_http_body_the_tool_schema_and_the_cli() -> None:
    arguments = {argument for operation in OPERATIONS for argument in operation.arguments}
    assert arguments == set(ARGUMENT_HELP)
    assert set(QueryRequest.model_json_schema()["properties"]) == {"op", *arguments}
    assert set(arguments_schema()["properties"]) == {"op", *arguments}
    options = {option for action in subparser(build_parser(), "query")._actions for option in action.option_strings}
    # the CLI's flags, and the JSON body for the structured arguments (set operations, aggregates, having)
    assert {"--field", "--by", "--return", "--where", "--limit", "--json-body"} <= options


def test_the_agent_is_told_every_operation() -> None:
    prompt = SYSTEM.format(fields="x (string)", operations=operation_help(), cap=4, marker="<<m>>", terms="")
    assert all(f"{operation.name}: {operation.summary}" in prompt for operation in OPERATIONS)


def test_the_composer_and_the_evaluation_know_every_operation() -> None:
    assert set(SENTENCES) == set(NAMES) == set(FORM_OF_OP)


# How the question reader hears each operation it plans: its lexicon's kind of span, and for rankings the direction.
HEARD_AS = {"count": ("count", None), "sum": ("sum", None), "avg": ("avg", None), "group_by": ("grouping", None),
            "argmax": ("superlative", "max"), "top_n": ("superlative", "max"), "max": ("superlative", "max"),
            "argmin": ("superlative", "min"), "min": ("superlative", "min")}


@pytest.mark.parametrize("operation", [operation for operation in OPERATIONS if operation.name in HEARD_AS],
                         ids=lambda operation: operation.name)
def test_the_planner_hears_every_cue(operation) -> None:
    lexicon = Lexicon(Profile(0, {}, [], {}, {}, {}, [], [], {}, {}), {}, ())
    kind, direction = HEARD_AS[operation.name]
    for cue in operation.cues:
        words = cue.removeprefix("the ")
        readings = dict(lexicon.readings(words, len(words.split())))
        assert kind in readings, cue
        assert direction is None or readings[kind][0] == direction, cue


def test_every_operation_has_cues_and_an_example() -> None:
    assert all(operation.cues for operation in OPERATIONS if operation.name not in ("list", "distinct", "lookup"))
    assert all(operation.example or not operation.required for operation in OPERATIONS)


@pytest.mark.parametrize("operation", OPERATIONS, ids=lambda operation: operation.name)
def test_every_operation_compiles_runs_and_is_stated(catalog: Settings, operation) -> None:
    body = {"op": operation.name, **operation.example}
    result = QueryRunner(catalog, Sidecar(catalog.sidecar_path)).run_json(body)
    assert result.op == operation.name and result.rows and result.documents
    assert result.operation and result.to_json()["operation"] == result.operation
    assert describe(body, result, 1).strip()
    for group in operation.required:  # an operation without what it needs is refused, naming it
        missing = {key: value for key, value in body.items() if key not in group}
        with pytest.raises(ValueError, match=operation.name):
            QueryRunner(catalog, Sidecar(catalog.sidecar_path)).run_json(missing)
