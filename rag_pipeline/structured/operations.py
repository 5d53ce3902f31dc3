"""The operations of the metadata query tool, in one list. The HTTP body model (serve/models.py), the CLI's `query`
choices, the agent's tool description, the planner's cue words, the composer's sentences and the evaluation's answer
forms are all derived from (or checked against) it: adding an operation is an entry here, its compiler in
structured/query.py, and its sentence in chat/compose.py (rag_pipeline_tests/test_operations.py fails until every
consumer covers it). No operation takes SQL: each is typed and compiled to parameterised SQL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Argument = Literal["field", "by", "return", "where", "aggregate", "having", "queries", "limit"]
AnswerForm = Literal["count", "documents", "values", "groups", "value"]
AGGREGATES = ("count", "sum", "avg", "min", "max", "count_distinct")  # group_by's aggregate of each group
COMPARISONS = ("gt", "gte", "lt", "lte", "eq")  # group_by's having
SET_OPERATIONS = ("intersect", "union", "except")
ARGUMENT_HELP: dict[Argument, str] = {
    "field": "the field the operation reads",
    "by": "the field whose values group the documents",
    "return": "argmax/argmin: the field returned of the best documents (default: their title, else file name)",
    "where": "conditions on fields, ANDed: F=V (on a list field: contains V; text ignores case), any of, ranges, "
             "contains, {\"empty\": true}, or {\"in\": QUERY}: any value another query produces",
    "aggregate": "group_by: {\"op\": count|sum|avg|min|max|count_distinct, \"field\": F} of each group "
                 "(default: count of documents)",
    "having": "group_by: the groups whose aggregate is {gt|gte|lt|lte|eq: N}",
    "queries": "intersect/union/except: two queries that both produce values (or both documents)",
    "limit": "rows returned (default 100, top_n 10, argmax/argmin the best only; at most 1000)",
}


@dataclass(frozen=True)
class Operation:
    """One operation: what it answers, the arguments it takes (and needs), the shape of its answer, and the words
    that ask for it in a question (the deterministic planner's cues: chat/lexicon.py reads counting, totals,
    averages and breakdowns by these words; the superlatives of argmax/argmin/top_n/min/max it knows with the
    quantity each ranks by; a few operations are chosen by other signs)."""

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


def _both(where: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """The `queries` of a set operation's example: the types of two sets of documents."""
    return {"queries": [{"op": "distinct", "field": "type", "where": where},
                        {"op": "distinct", "field": "type", "where": other}]}


OPERATIONS: tuple[Operation, ...] = (
    Operation("count", "how many documents match", ("where",), answer="count",
              cues=("how many", "number of", "count of", "count", "how much"), example={"where": {"type": "md"}}),
    Operation("list", "the matching documents (with one field, or all of them)", ("field", "where", "limit"),
              example={"field": "name", "where": {"type": "md"}}),
    Operation("distinct", "the distinct values of a field", ("field", "where", "limit"), (("field", "by"),),
              answer="values", example={"field": "type"}),
    Operation("group_by", "documents per value of a field, or an aggregate of another field per value, optionally "
                          "only the groups whose aggregate passes a condition (having)",
              ("by", "aggregate", "having", "where", "limit"), (("by", "field"),),
              answer="groups", cues=("per", "for each", "for every", "of each", "by each", "each", "breakdown of",
                                     "breakdown by", "broken down by", "grouped by", "split by"),
              example={"by": "type"}),
    Operation("top_n", "the documents with the largest number or date in a field (--field), or the most common "
                       "values of a field (--by)", ("field", "by", "where", "limit"), (("field", "by"),),
              cues=("top", "largest", "biggest", "highest", "most expensive", "greatest", "latest", "newest",
                    "most recent", "most recently", "last"), example={"field": "chars", "limit": 3}),
    Operation("lookup", "a field's value (or every field) of the documents a condition names", ("field", "where",
                                                                                                "limit"),
              (("where",),), answer="value", example={"field": "type", "where": {"type": "pdf"}}),
    Operation("sum", "the sum of a number field over the matching documents", ("field", "where"), (("field",),),
              answer="value", cues=("total", "sum of", "sum", "combined", "altogether", "in all"),
              example={"field": "chars", "where": {"type": "md"}}),
    Operation("avg", "the average of a number field over the matching documents", ("field", "where"), (("field",),),
              answer="value", cues=("average", "mean", "avg"), example={"field": "chars"}),
    Operation("min", "the smallest value of a number or date field over the matching documents", ("field", "where"),
              (("field",),), answer="value", cues=("minimum", "smallest", "lowest", "earliest", "least"),
              example={"field": "chars"}),
    Operation("max", "the largest value of a number or date field over the matching documents", ("field", "where"),
              (("field",),), answer="value", cues=("maximum", "largest", "highest", "latest", "greatest"),
              example={"field": "chars"}),
    Operation("count_distinct", "how many distinct values a field has over the matching documents",
              ("field", "where"), (("field",),), answer="count",
              cues=("how many different", "how many distinct", "number of different", "number of distinct"),
              example={"field": "type"}),
    Operation("argmax", "the document(s) with the largest number or date in a field, or the most elements in a list "
                        "field (all tied ones), and a field of them (--return)", ("field", "return", "where", "limit"),
              (("field",),), answer="values", cues=("the most", "the largest", "the biggest", "the highest",
                                                    "the longest", "the latest"),
              example={"field": "chars", "return": "name"}),
    Operation("argmin", "the document(s) with the smallest number or date in a field, or the fewest elements in a "
                        "list field (all tied ones), and a field of them (--return)",
              ("field", "return", "where", "limit"), (("field",),), answer="values",
              cues=("the fewest", "the least", "the smallest", "the lowest", "the shortest", "the earliest"),
              example={"field": "chars", "return": "name"}),
    Operation("intersect", "the values (or documents) two queries both produce", ("queries", "limit"),
              (("queries",),), answer="values", cues=("both", "in common", "common to", "as well as"),
              example=_both({"chars": {"gte": 0}}, {"chars": {"gte": 1}})),
    Operation("union", "the values (or documents) either of two queries produces", ("queries", "limit"),
              (("queries",),), answer="values", cues=("either", "or both"),
              example=_both({"chars": {"lt": 5000}}, {"chars": {"gte": 5000}})),
    Operation("except", "the values (or documents) the first query produces and the second does not",
              ("queries", "limit"), (("queries",),), answer="values",
              cues=("but not", "except", "excluding", "other than", "not in"),
              example=_both({"chars": {"gte": 0}}, {"chars": {"lt": 0}})),
    Operation("reconciliation", "the roster's findings about documents (where status: MISMATCH, NOT_STATED, "
                                "MISSING_IN_ROSTER, ROSTER_ONLY, MATCH, AMBIGUOUS_KEY; field; roster) with the "
                                "documents concerned", ("where", "limit"), answer="documents",
              cues=("mismatch", "contradict", "disagree", "conflict", "differ", "inconsistent", "not in the roster",
                    "only in the roster"), example={}),
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
        "return": {"type": "string", "description": ARGUMENT_HELP["return"]},
        "where": {"type": "object", "description": ARGUMENT_HELP["where"]},
        "aggregate": {"type": "object", "description": ARGUMENT_HELP["aggregate"], "required": ["op"],
                      "additionalProperties": False,
                      "properties": {"op": {"type": "string", "enum": list(AGGREGATES)}, "field": {"type": "string"}}},
        "having": {"type": "object", "description": ARGUMENT_HELP["having"], "additionalProperties": False,
                   "properties": {key: {"type": "number"} for key in COMPARISONS}},
        "queries": {"type": "array", "items": {"type": "object"}, "minItems": 2, "maxItems": 2,
                    "description": ARGUMENT_HELP["queries"]},
        "limit": {"type": "integer", "minimum": 1, "maximum": 1000, "description": ARGUMENT_HELP["limit"]},
    }}
