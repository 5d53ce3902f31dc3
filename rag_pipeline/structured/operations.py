"""The operations of the metadata query tool, in one list. The HTTP body model (serve/models.py), the CLI's `query`
choices, the agent's tool description, the planner's cue words, the composer's sentences and the evaluation's answer
forms are all derived from (or checked against) it: adding an operation is an entry here, its compiler in
structured/query.py, and its sentence in chat/compose.py (rag_pipeline_tests/test_operations.py fails until every
consumer covers it). No operation takes SQL: each is typed and compiled to parameterised SQL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Argument = Literal["field", "by", "where", "limit"]
AnswerForm = Literal["count", "documents", "values", "groups", "value"]
ARGUMENT_HELP: dict[Argument, str] = {
    "field": "the field the operation reads",
    "by": "the field whose values group the documents",
    "where": "conditions on fields, ANDed: F=V (on a list field: contains V), any of, ranges, contains",
    "limit": "rows returned (default 100, top_n 10; at most 1000)",
}


@dataclass(frozen=True)
class Operation:
    """One operation: what it answers, the arguments it takes (and needs), the shape of its answer, and the words
    that ask for it in a question (the deterministic planner's cues; a few operations are chosen by other signs)."""

    name: str
    summary: str
    arguments: tuple[Argument, ...]
    required: tuple[tuple[Argument, ...], ...] = ()  # each inner tuple: at least one of these must be given
    answer: AnswerForm = "documents"
    cues: tuple[str, ...] = ()
    example: dict[str, Any] = field(default_factory=dict)  # arguments that work on any corpus (built-in fields)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "summary": self.summary, "arguments": list(self.arguments),
                "required": [list(group) for group in self.required], "answer": self.answer,
                "example": {"op": self.name, **self.example}}


OPERATIONS: tuple[Operation, ...] = (
    Operation("count", "how many documents match", ("where",), answer="count",
              cues=("how many", "number of", "count"), example={"where": {"type": "md"}}),
    Operation("list", "the matching documents (with one field, or all of them)", ("field", "where", "limit"),
              example={"field": "name", "where": {"type": "md"}}),
    Operation("distinct", "the distinct values of a field", ("field", "where", "limit"), (("field", "by"),),
              answer="values", example={"field": "type"}),
    Operation("group_by", "documents per value of a field", ("by", "where", "limit"), (("by", "field"),),
              answer="groups", cues=("per", "for each", "for every", "each", "by", "breakdown of", "broken down by",
                                     "grouped by", "split by"), example={"by": "type"}),
    Operation("top_n", "the documents with the largest number or date in a field (--field), or the most common "
                       "values of a field (--by)", ("field", "by", "where", "limit"), (("field", "by"),),
              cues=("top", "largest", "biggest", "highest", "most expensive", "greatest", "latest", "newest",
                    "most recent", "most recently", "last"), example={"field": "chars", "limit": 3}),
    Operation("lookup", "a field's value (or every field) of the documents a condition names", ("field", "where",
                                                                                                "limit"),
              (("where",),), answer="value", example={"field": "type", "where": {"type": "pdf"}}),
)
BY_NAME: dict[str, Operation] = {operation.name: operation for operation in OPERATIONS}
NAMES: tuple[str, ...] = tuple(BY_NAME)


def operation_help() -> str:
    """One line per operation, for help texts and the agent's instructions."""
    return "; ".join(f"{operation.name}: {operation.summary}" for operation in OPERATIONS)


def arguments_schema() -> dict[str, Any]:
    """The JSON schema of the query tool's arguments (the agent's tool schema; the MCP tool's input schema)."""
    return {"type": "object", "required": ["op"], "additionalProperties": False, "properties": {
        "op": {"type": "string", "enum": list(NAMES), "description": operation_help()},
        "field": {"type": "string", "description": ARGUMENT_HELP["field"]},
        "by": {"type": "string", "description": ARGUMENT_HELP["by"]},
        "where": {"type": "object", "description": ARGUMENT_HELP["where"]},
        "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "description": ARGUMENT_HELP["limit"]},
    }}
