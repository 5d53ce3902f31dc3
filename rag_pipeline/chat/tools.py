"""The agent's two tools. `semantic_search` retrieves passages (no answer per search); `query_metadata` is the typed
metadata query tool. Both run inside the API key's scope; both observations are scanned for prompt injection like
retrieved chunks (a quarantined passage never reaches a model; a flagged metadata value is withheld by the query
tool and reported)."""

from __future__ import annotations

import json
import logging
import math
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

log = logging.getLogger(__name__)

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
        """Run one call; a call the tools refuse (or that fails on hostile arguments) is an observation saying
        so, never an error of the request: the arguments may come from a model."""
        started = time.perf_counter()
        try:
            check_arguments(args)
            if tool == SEMANTIC_SEARCH:
                observation = self._search(dict(args))
            elif tool == QUERY_METADATA:
                observation = self._query(dict(args))
            else:
                raise InputError(f"unknown tool {tool!r}; the tools are {', '.join(TOOLS)}")
        except RagError as error:  # a bad call is an observation the model (or the planner) can act on
            observation = Observation(tool, safe_arguments(args), f"refused: {error}", error=str(error))
        except (TypeError, ValueError, UnicodeError) as error:
            log.warning("tool %s failed on its arguments: %s", tool, error)
            observation = Observation(tool, safe_arguments(args), "refused: the arguments are not usable",
                                      error="the arguments are not usable")
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
        """The metadata query, ANDed with the request's filters (which the model cannot replace)."""
        result = self.runner.run_json(args, self.scope, bound=request_where(self.filters))
        text = json.dumps(result.rows[:SHOWN_ROWS], default=str)
        found = scan_text(text, "metadata result")
        findings = [{"path": "metadata result", "findings": [item.rule for item in found],
                     "quarantined": quarantined(found)}] if found else []
        findings += [{"path": "metadata result", "field": item["key"], "findings": item["rules"], "quarantined": True,
                      "withheld": True} for item in result.withheld]
        summary = summarise(result) + (f"; {len(result.withheld)} value(s) withheld as prompt injections"
                                       if result.withheld else "")
        return Observation(QUERY_METADATA, args, summary, result=result, findings=findings,
                           payloads=[item.payload for item in found if item.payload])


MAX_ARGUMENT_CHARS = 2000
# The search filters a request may carry, as the metadata fields they mean (chunk-level ones have no equivalent).
FILTER_AS_FIELD = {"doc_type": "type", "path": "path", "paths": "path", "sha": "id", "tags": "tags",
                   "source": "source"}


def check_arguments(value: Any, depth: int = 0) -> None:
    """Arguments a model (or a client) wrote: plain JSON values, text that is valid Unicode, bounded size."""
    if depth > 24:  # a nested query is a few levels per subquery (where, field, in)
        raise InputError("the arguments are nested too deeply")
    if isinstance(value, str):
        if len(value) > MAX_ARGUMENT_CHARS:
            raise InputError(f"an argument is longer than {MAX_ARGUMENT_CHARS} characters")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            raise InputError("an argument is not valid Unicode text") from error
    elif isinstance(value, float) and not math.isfinite(value):
        raise InputError("an argument is not a finite number")
    elif isinstance(value, Mapping):
        for key, item in value.items():
            check_arguments(str(key), depth + 1)
            check_arguments(item, depth + 1)
    elif isinstance(value, (list, tuple)):
        if len(value) > 1000:
            raise InputError("an argument list is too long")
        for item in value:
            check_arguments(item, depth + 1)
    elif value is not None and not isinstance(value, (bool, int, float)):
        raise InputError(f"an argument of type {type(value).__name__} is not JSON")


def safe_arguments(args: Any) -> dict[str, Any]:
    """Arguments fit to be recorded in the trajectory (refused ones are kept only as a short, escaped text)."""
    try:
        check_arguments(args)
        return dict(args) if isinstance(args, Mapping) else {"value": str(args)[:200]}
    except RagError:
        return {"unusable": ascii(args)[:200]}


def request_where(filters: Mapping[str, Any]) -> dict[str, Any]:
    """The request's search filters as metadata where clauses; InputError for a filter that has no document-level
    meaning (heading_path, shard, path_prefix), so the metadata tool never counts more than the request allows."""
    where = {}
    for key, value in filters.items():
        name = FILTER_AS_FIELD.get(key, key if key not in ("heading_path", "shard", "path_prefix") else None)
        if name is None:
            raise InputError(f"the request's filter {key!r} has no meaning for query_metadata; search only")
        where[name] = list(value) if isinstance(value, (list, tuple)) else value
    return where


def file_name(hit: Hit) -> str:
    return str(hit.payload.get("path", "")).rsplit("/", 1)[-1]


def summarise(result: QueryResult) -> str:
    """One line about a metadata result."""
    if result.op == "count":
        return f"count = {result.rows[0]['count']}"
    more = " (truncated)" if result.truncated else ""
    return f"{len(result.rows)} row(s) over {result.total_documents} document(s){more}"
