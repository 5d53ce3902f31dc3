"""/chat next to /ask on a golden set: routing accuracy (did the agent use the right tool) and answer accuracy per
question kind, plus multi-turn and compound conversations (golden/catalog_conversations.yaml).

Aggregation answers are exact: the agent's first metadata call must give the expected result. Semantic answers
(and /ask's answers to every kind) count as correct when they contain the expected answer (for aggregation, its
number or value)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from rag_pipeline.chat.memory import LOCAL_OWNER
from rag_pipeline.chat.turn import ChatService
from rag_pipeline.errors import ConfigError
from rag_pipeline.evaluate.aggregation import answer_of, is_correct
from rag_pipeline.evaluate.answers import contains
from rag_pipeline.evaluate.golden import GoldenQuestion
from rag_pipeline.generate.answerer import Answerer
from rag_pipeline.structured.operations import OPERATIONS
from rag_pipeline.structured.query import QueryRunner

EXPECTED_TOOL = {"aggregation": "query_metadata", "semantic": "semantic_search"}
FORM_OF_OP = {operation.name: operation.answer for operation in OPERATIONS}


def expected_text(question: GoldenQuestion) -> str | None:
    """What an answer must contain: the expected answer, or an aggregation's number or single value."""
    if question.kind != "aggregation":
        return question.expected_answer
    form, value = next(iter((question.expected or {}).items()))
    return str(value) if form in ("count", "value") and not isinstance(value, list) else None


def first_metadata(done: dict[str, Any]) -> dict[str, Any] | None:
    return next((step["args"] for step in done["trajectory"] if step["tool"] == "query_metadata"
                 and not step["refused"]), None)


def same_result(runner: QueryRunner, got: dict[str, Any] | None, truth: dict[str, Any]) -> bool:
    """Whether the call `got` gives the result the golden query `truth` gives."""
    if got is None:
        return False
    form = FORM_OF_OP[truth["op"]]
    try:
        return answer_of(runner.run_json(got), form) == answer_of(runner.run_json(truth), form)
    except Exception:  # a call the tool refuses is a wrong answer
        return False


def evaluate_chat(questions: Sequence[GoldenQuestion], chat: ChatService, answerer: Answerer, runner: QueryRunner,
                  paraphrases: dict[str, list[str]] | None = None,
                  conversations: Path | None = None) -> dict[str, Any]:
    """Routing and answer accuracy per kind for /chat and /ask; conversations turn by turn."""
    started = time.perf_counter()
    rows = []
    calls = []
    turn_ms = []
    for question in questions:
        if question.kind not in EXPECTED_TOOL:
            continue
        for text in [question.question, *(paraphrases or {}).get(question.id, [])]:
            begin = time.perf_counter()
            done = chat.turn(text, LOCAL_OWNER)
            turn_ms.append((time.perf_counter() - begin) * 1000)
            tools = [step["tool"] for step in done["trajectory"]]
            calls.append(len(tools))
            if question.kind == "aggregation":
                args = first_metadata(done)
                correct = args is not None and is_correct(question, answer_of(
                    runner.run_json(args), next(iter(question.expected or {})))) if args else False
            else:
                correct = bool(question.expected_answer) and contains(done["answer"], question.expected_answer) > 0
            expected = expected_text(question)
            asked = answerer.answer(text).answer
            rows.append({"id": question.id, "kind": question.kind, "text": text, "tools": tools,
                         "routed": bool(tools) and tools[0] == EXPECTED_TOOL[question.kind], "chat_correct": correct,
                         "ask_correct": bool(expected) and contains(asked, expected) > 0,
                         "exit_reason": done["exit_reason"]})
    report: dict[str, Any] = {"by_kind": {}, "questions": len(rows)}
    for kind in sorted({row["kind"] for row in rows}):
        kind_rows = [row for row in rows if row["kind"] == kind]
        report["by_kind"][kind] = {
            "questions": len(kind_rows),
            "chat_routing_accuracy": sum(row["routed"] for row in kind_rows) / len(kind_rows),
            "chat_answer_accuracy": sum(row["chat_correct"] for row in kind_rows) / len(kind_rows),
            "ask_answer_accuracy": sum(row["ask_correct"] for row in kind_rows) / len(kind_rows)}
    report["average_tool_calls"] = sum(calls) / len(calls) if calls else 0.0
    ordered = sorted(turn_ms)
    report["turn_ms_p50"] = ordered[len(ordered) // 2] if ordered else 0.0
    report["turn_ms_p95"] = ordered[int(0.95 * (len(ordered) - 1))] if ordered else 0.0
    report["misrouted"] = [row for row in rows if not row["routed"]][:30]
    if conversations is not None:
        report["conversations"] = evaluate_conversations(conversations, chat, runner)
    report["seconds"] = round(time.perf_counter() - started, 2)
    return report


def evaluate_conversations(path: Path, chat: ChatService, runner: QueryRunner) -> dict[str, Any]:
    """Each conversation turn by turn in one session: tools used in order, the metadata result, the answer text."""
    try:
        cases = yaml.safe_load(Path(path).read_text())["conversations"]
    except (OSError, yaml.YAMLError, KeyError, TypeError) as error:
        raise ConfigError(f"{path}: cannot read the conversations: {error}") from error
    turns = []
    for case in cases:
        session = None
        for number, turn in enumerate(case["turns"], start=1):
            done = chat.turn(turn["message"], LOCAL_OWNER, session)
            session = done["session_id"]
            tools = [step["tool"] for step in done["trajectory"]]
            checks = {"tools": tools == list(turn["tools"])}
            if "query" in turn:
                checks["result"] = same_result(runner, first_metadata(done), turn["query"])
            if "contains" in turn:
                checks["answer"] = contains(done["answer"], turn["contains"]) > 0
            turns.append({"conversation": case["id"], "turn": number, "tools": tools, "checks": checks,
                          "passed": all(checks.values())})
    if not turns:
        raise ConfigError(f"{path}: no conversation turns")
    return {"turns": len(turns), "passed": sum(turn["passed"] for turn in turns),
            "routing_accuracy": sum(turn["checks"]["tools"] for turn in turns) / len(turns),
            "failures": [turn for turn in turns if not turn["passed"]]}
