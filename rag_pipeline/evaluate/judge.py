"""LLM-judged answer metrics (RAGAS-style), each from JSON replies of the configured chat model:

- faithfulness: the answer decomposed into statements, each verified against the context (share supported);
- answer relevance: how directly the answer addresses the question (0-1);
- context precision: per retrieved chunk a relevant / not verdict, rank-weighted (average precision);
- context recall: the expected answer's statements attributable to the context (needs expected_answer).

The judge's raw replies are kept; an unusable reply leaves that metric None with the error recorded.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from rag_pipeline.llm import ChatModel

SYSTEM = "You are a strict evaluator. Reply with JSON only, exactly in the requested form."
STATEMENTS = ("Break the answer into short standalone factual statements.\nQuestion: {question}\nAnswer: {answer}\n"
              'Reply as {{"statements": ["...", "..."]}}.')
VERIFY = ("For each statement, decide whether the context supports it (1) or not (0).\nContext:\n{context}\n\n"
          'Statements:\n{statements}\nReply as {{"verdicts": [1, 0, ...]}}, one per statement, in order.')
RELEVANCE = ("How directly and completely does the answer address the question? 0 = not at all, 1 = fully.\n"
             'Question: {question}\nAnswer: {answer}\nReply as {{"score": 0.0}}.')
CONTEXT_PRECISION = ("For each passage, decide whether it is useful for answering the question (1) or not (0).\n"
                     'Question: {question}\n\n{passages}\nReply as {{"verdicts": [1, 0, ...]}}, one per passage.')
_JSON = re.compile(r"\{.*\}", re.DOTALL)


def parse_json(reply: str, key: str) -> Any:
    match = _JSON.search(reply)
    return json.loads(match.group(0) if match else reply)[key]


def average_precision(verdicts: Sequence[int]) -> float:
    """Rank-weighted share of useful passages: mean of precision@k over the ranks k of useful ones."""
    useful, total = 0, 0.0
    for rank, verdict in enumerate(verdicts, start=1):
        if verdict:
            useful += 1
            total += useful / rank
    return total / useful if useful else 0.0


class Judge:
    """A chat model used as the evaluator."""

    def __init__(self, llm: ChatModel) -> None:
        self.llm = llm
        self.model_id = llm.model_id

    def evaluate(self, question: str, answer: str, contexts: Sequence[str], expected: str | None) -> dict[str, Any]:
        """The four metrics (None where not applicable or unusable), with the raw replies and errors."""
        result: dict[str, Any] = {"faithfulness": None, "answer_relevance": None, "context_precision": None,
                                  "context_recall": None, "raw": {}, "errors": {}}
        context = "\n\n".join(f"[{index}] {text}" for index, text in enumerate(contexts, start=1))
        self._metric(result, "faithfulness",
                     lambda: self._supported_share("faithfulness", question, answer, context, result))
        self._metric(result, "answer_relevance", lambda: self._score(
            "answer_relevance", RELEVANCE.format(question=question, answer=answer), result))
        self._metric(result, "context_precision", lambda: average_precision(self._verdicts(
            "context_precision", CONTEXT_PRECISION.format(question=question, passages=context), len(contexts),
            result)))
        if expected:
            self._metric(result, "context_recall",
                         lambda: self._supported_share("context_recall", question, expected, context, result))
        return result

    def _metric(self, result: dict[str, Any], name: str, compute) -> None:
        try:
            result[name] = compute()
        except Exception as error:  # an unreachable judge or an unusable reply: this metric is unknown
            result["errors"][name] = f"{type(error).__name__}: {error}"

    def _supported_share(self, name: str, question: str, answer: str, context: str,
                         result: dict[str, Any]) -> float | None:
        """Share of the answer's statements the context supports (None for an answer with no statements)."""
        raw = result["raw"]
        reply = self.llm.complete(STATEMENTS.format(question=question, answer=answer), system=SYSTEM)
        raw[f"{name}_statements"] = reply
        statements = [str(statement) for statement in parse_json(reply, "statements")]
        if not statements:
            return None
        listed = "\n".join(f"{index}. {statement}" for index, statement in enumerate(statements, start=1))
        verdict_reply = self.llm.complete(VERIFY.format(context=context, statements=listed), system=SYSTEM)
        raw[f"{name}_verdicts"] = verdict_reply
        verdicts = [int(bool(v)) for v in parse_json(verdict_reply, "verdicts")]
        if len(verdicts) != len(statements):
            raise ValueError(f"{len(verdicts)} verdicts for {len(statements)} statements")
        return sum(verdicts) / len(verdicts)

    def _score(self, name: str, prompt: str, result: dict[str, Any]) -> float:
        reply = self.llm.complete(prompt, system=SYSTEM)
        result["raw"][name] = reply
        return min(1.0, max(0.0, float(parse_json(reply, "score"))))

    def _verdicts(self, name: str, prompt: str, expected: int, result: dict[str, Any]) -> list[int]:
        reply = self.llm.complete(prompt, system=SYSTEM)
        result["raw"][name] = reply
        verdicts = [int(bool(v)) for v in parse_json(reply, "verdicts")]
        if len(verdicts) != expected:
            raise ValueError(f"{len(verdicts)} verdicts for {expected} passages")
        return verdicts
