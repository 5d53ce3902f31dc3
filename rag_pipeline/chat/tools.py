"""The agent's two tools. `semantic_search` retrieves passages (no answer per search); `query_metadata` is the typed
metadata query tool. Both run inside the API key's scope; both observations are scanned for prompt injection like
retrieved chunks (a quarantined passage never reaches a model; flagged metadata values are reported)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rag_pipeline.chat.planner import QUERY_METADATA, SEMANTIC_SEARCH
from rag_pipeline.errors import InputError, RagError
from rag_pipeline.generate.guardrails import quarantined, scan_text
from rag_pipeline.index.vector_store import Filters, Hit, Scope
from rag_pipeline.retrieve.retriever import Retriever
from rag_pipeline.structured.query import QueryResult, QueryRunner

TOOLS = (SEMANTIC_SEARCH, QUERY_METADATA)
SEARCH_TOP_K = 5
SHOWN_ROWS = 20  # rows of a metadata result a model sees
PASSAGE_CHARS = 700


@dataclass
class Observation:
    """What one tool call returned: passages (search) or a metadata result, a one-line summary, and guardrail
    findings. `error` is set when the call was refused or failed (the loop goes on)."""

    tool: str
    args: dict[str, Any]
    summary: str
    hits: list[Hit] = field(default_factory=list)
    result: QueryResult | None = None
    findings: list[dict[str, Any]] = field(default_factory=list)
    payloads: list[str] = field(default_factory=list)  # what injections in the observation demand (output check)
    error: str | None = None
    ms: float = 0.0

    def for_model(self) -> str:
        """The observation as data for a model: passages or rows as JSON (the caller spotlights it)."""
        if self.error:
            return json.dumps({"error": self.error})
        if self.result is not None:
            return json.dumps({"op": self.result.op, "rows": self.result.rows[:SHOWN_ROWS],
                               "documents_counted": self.result.total_documents,
                               "truncated": self.result.truncated or len(self.result.rows) > SHOWN_ROWS},
                              default=str)
        return json.dumps([{"path": hit.payload.get("path"), "heading": hit.payload.get("heading_path"),
                            "text": str(hit.payload.get("text", ""))[:PASSAGE_CHARS]} for hit in self.hits])

    def to_json(self) -> dict[str, Any]:
        return {"tool": self.tool, "args": self.args, "summary": self.summary, "error": self.error,
                "findings": self.findings, "ms": round(self.ms, 2)}


class Tools:
    """Runs validated tool calls for one request (its filters and the key's scope apply to both tools)."""

    def __init__(self, retriever: Retriever, runner: QueryRunner, scope: Scope | None, filters: Filters | None):
        self.retriever = retriever
        self.runner = runner
        self.scope = scope
        self.filters = dict(filters or {})

    def run(self, tool: str, args: Mapping[str, Any]) -> Observation:
        started = time.perf_counter()
        try:
            if tool == SEMANTIC_SEARCH:
                observation = self._search(dict(args))
            elif tool == QUERY_METADATA:
                observation = self._query(dict(args))
            else:
                raise InputError(f"unknown tool {tool!r}; the tools are {', '.join(TOOLS)}")
        except RagError as error:  # a bad call is an observation the model (or the planner) can act on
            observation = Observation(tool, dict(args), f"refused: {error}", error=str(error))
        observation.ms = (time.perf_counter() - started) * 1000
        return observation

    def _search(self, args: dict[str, Any]) -> Observation:
        query = args.get("query")
        if not isinstance(query, str) or not query.strip():
            raise InputError("semantic_search needs a non-empty `query` string")
        unknown = set(args) - {"query", "filters"}
        if unknown:
            raise InputError(f"semantic_search takes query and filters, not {', '.join(sorted(unknown))}")
        asked = args.get("filters") or {}
        if not isinstance(asked, dict):
            raise InputError("semantic_search filters must map fields to values")
        filters = {name: value if isinstance(value, list) else str(value) for name, value in asked.items()}
        filters.update(self.filters)  # the request's filters cannot be widened
        hits = self.retriever.search(query, top_k=SEARCH_TOP_K, filters=filters or None, scope=self.scope).hits
        kept, findings, payloads = [], [], []
        for hit in hits:
            found = scan_text(str(hit.payload.get("text", "")), str(hit.payload.get("path")))
            payloads += [item.payload for item in found if item.payload]
            if found:
                findings.append({"path": hit.payload.get("path"), "findings": [item.rule for item in found],
                                 "quarantined": quarantined(found)})
            if not quarantined(found):
                kept.append(hit)
        paths = list(dict.fromkeys(file_name(hit) for hit in kept))
        summary = f"{len(kept)} passage(s) from {', '.join(paths[:5]) or 'no document'}" + \
            (f"; {len(hits) - len(kept)} quarantined" if len(kept) < len(hits) else "")
        return Observation(SEMANTIC_SEARCH, args, summary, hits=kept, findings=findings, payloads=payloads)

    def _query(self, args: dict[str, Any]) -> Observation:
        result = self.runner.run_json(args, self.scope)
        text = json.dumps(result.rows[:SHOWN_ROWS], default=str)
        found = scan_text(text, "metadata result")
        findings = [{"path": "metadata result", "findings": [item.rule for item in found],
                     "quarantined": quarantined(found)}] if found else []
        return Observation(QUERY_METADATA, args, summarise(result), result=result, findings=findings,
                           payloads=[item.payload for item in found if item.payload])


def file_name(hit: Hit) -> str:
    return str(hit.payload.get("path", "")).rsplit("/", 1)[-1]


def summarise(result: QueryResult) -> str:
    """One line about a metadata result."""
    if result.op == "count":
        return f"count = {result.rows[0]['count']}"
    more = " (truncated)" if result.truncated else ""
    return f"{len(result.rows)} row(s) over {result.total_documents} document(s){more}"
