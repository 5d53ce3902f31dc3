"""The MCP server (Model Context Protocol, on the official SDK's low-level Server), so agents and IDEs can use the
index as tools: `search`, `ask`, `query_metadata`, `list_fields`, `get_document`. Every result carries its
citations (the passages' path, heading, page, line, score and text; the documents a metadata result counted).

`rag-pipeline mcp` serves it on stdio, for the local user (every document, as the CLI). The API serves it as
streamable HTTP at /mcp (`McpHttp`, stateless: every request stands alone), behind the API's screening: the caller's
API key needs the reader role (401/403 otherwise, before any MCP message is read) and its scope limits what every
tool reads. Paths are shown as the HTTP API shows them (serve/public_paths.py).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio.to_thread
import mcp.types as types
from jsonschema import Draft202012Validator
from mcp.server import Server, ServerRequestContext
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from rag_pipeline.chat.citation_text import sources_text
from rag_pipeline.errors import InputError, NotFound, RagError
from rag_pipeline.index.vector_store import Scope as KeyScope
from rag_pipeline.serve.auth import bearer
from rag_pipeline.serve.dependencies import Services
from rag_pipeline.serve.routes.conversation import chat_service
from rag_pipeline.structured.operations import arguments_schema
from rag_pipeline.structured.query import load_registry

MCP_PATH = "/mcp"
SCOPE_STATE = "mcp_key_scope"  # the request state's entry holding the caller's key scope (HTTP only)
MAX_TOP_K = 20
INSTRUCTIONS = ("Tools over a document index. `search` finds passages, `ask` answers a question with numbered "
                "citations, `query_metadata` gives exact answers over document fields (counts, lists, groups: use "
                "`list_fields` for the fields), `get_document` shows one document's fields and, with a query, its "
                "best passages. Cite the paths the results give.")
TOOLS = [
    types.Tool(name="search", description="The passages of the index that best match a query, best first, each "
               "numbered with its path, heading, page, line, score and text.", input_schema={
                   "type": "object", "required": ["query"], "additionalProperties": False, "properties": {
                       "query": {"type": "string", "minLength": 1, "maxLength": 4000},
                       "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_TOP_K, "default": 5},
                       "filters": {"type": "object", "description": "field: value (or a list of values); fields: "
                                   "path, path_prefix, doc_type, tags and the filterable document fields"}}}),
    types.Tool(name="ask", description="The answer to a question from the documents, citing passages [n] and the "
               "documents a metadata result counted [Dn], followed by its sources.", input_schema={
                   "type": "object", "required": ["question"], "additionalProperties": False,
                   "properties": {"question": {"type": "string", "minLength": 1, "maxLength": 4000}}}),
    types.Tool(name="query_metadata", description="An exact answer over the documents' fields (no SQL): one "
               "operation, its field or grouping, conditions and a limit. Rows, and the documents counted (to cite).",
               input_schema=arguments_schema()),
    types.Tool(name="list_fields", description="The document fields query_metadata and filters know: type, "
               "documents that have them, origins, whether they filter searches.",
               input_schema={"type": "object", "additionalProperties": False, "properties": {}}),
    types.Tool(name="get_document", description="One document by its path (as the results show it): its fields "
               "and, with a query, its best passages for it.", input_schema={
                   "type": "object", "required": ["path"], "additionalProperties": False, "properties": {
                       "path": {"type": "string", "minLength": 1, "maxLength": 4000},
                       "query": {"type": "string", "maxLength": 4000},
                       "top_k": {"type": "integer", "minimum": 1, "maximum": MAX_TOP_K, "default": 3}}}),
]
SCHEMAS = {tool.name: tool.input_schema for tool in TOOLS}
VALIDATORS = {name: Draft202012Validator(schema) for name, schema in SCHEMAS.items()}


class RagTools:
    """What the tools do, over one set of services, within a key's scope (None: every document)."""

    def __init__(self, services: Services) -> None:
        self.services = services

    def call(self, name: str, args: dict[str, Any], scope: KeyScope | None) -> tuple[str, dict[str, Any]]:
        """(the text for the model, the structured result) of one tool call."""
        tool = {"search": self.search, "ask": self.ask, "query_metadata": self.query_metadata,
                "list_fields": self.list_fields, "get_document": self.get_document}.get(name)
        if tool is None:
            raise NotFound(f"no tool {name!r}", code="unknown_tool")
        problem = next(VALIDATORS[name].iter_errors(args), None)
        if problem is not None:
            where = ".".join(map(str, problem.absolute_path)) or "arguments"
            raise InputError(f"{name}: {where}: {problem.message}", code="invalid_arguments")
        result = tool(args, scope)
        return json.dumps(result, ensure_ascii=False, default=str) if name != "ask" else \
            result["answer"] + sources_text(result["citations"]), result

    def search(self, args: dict[str, Any], scope: KeyScope | None) -> dict[str, Any]:
        paths = self.services.paths.current()
        result = self.services.runtime.retriever().search(args["query"], int(args.get("top_k", 5)),
                                                          paths.filters(args.get("filters")), scope)
        shown = paths.json(result.to_json())
        return {"results": [{"number": number, **hit} for number, hit in enumerate(shown["results"], start=1)],
                "warnings": shown["warnings"]}

    def ask(self, args: dict[str, Any], scope: KeyScope | None) -> dict[str, Any]:
        paths = self.services.paths.current()
        turn = chat_service(self.services).stream_unsaved(args["question"], [], None, scope)
        done = next(data for event, data in turn if event == "done")
        return paths.json({key: done[key] for key in ("answer", "citations", "exit_reason")})

    def query_metadata(self, args: dict[str, Any], scope: KeyScope | None) -> dict[str, Any]:
        paths = self.services.paths.current()
        request = dict(args)
        if "where" in request:
            request["where"] = paths.where(request["where"])
        return paths.json(self.services.query_runner.run_json(request, scope).to_json())

    def list_fields(self, args: dict[str, Any], scope: KeyScope | None) -> dict[str, Any]:
        registry = load_registry(self.services.settings, self.services.sidecar, scope)
        return {"fields": [field.to_json() for field in registry.values()]}

    def get_document(self, args: dict[str, Any], scope: KeyScope | None) -> dict[str, Any]:
        paths = self.services.paths.current()
        where = paths.where({"path": args["path"]})
        found = self.services.query_runner.run_json({"op": "lookup", "where": where, "limit": 1}, scope).to_json()
        if not found["rows"]:
            raise NotFound(f"no document {args['path']!r} (paths as the results show them)", code="unknown_document")
        document: dict[str, Any] = {"document": found["rows"][0], "documents": found["documents"]}
        if args.get("query"):
            hits = self.services.runtime.retriever().search(args["query"], int(args.get("top_k", 3)),
                                                            paths.filters({"path": args["path"]}), scope)
            document["passages"] = hits.to_json()["results"]
        return paths.json(document)


def mcp_server(services: Services, scope_of: Callable[[ServerRequestContext[Any]], KeyScope | None]) -> Server[Any]:
    """The MCP server over `services`; `scope_of` gives a request's key scope."""
    tools = RagTools(services)

    async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
                         ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=TOOLS)

    async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        scope = scope_of(ctx)
        try:
            text, result = await anyio.to_thread.run_sync(tools.call, params.name, dict(params.arguments or {}),
                                                          scope, limiter=services.search_threads)
        except RagError as error:
            paths = await anyio.to_thread.run_sync(services.paths.current)  # it may read the sidecar: off the loop
            message = paths.message(error.message)
            return types.CallToolResult(content=[types.TextContent(text=f"{error.code}: {message}")], is_error=True)
        return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=result)

    return Server("rag_pipeline", instructions=INSTRUCTIONS, on_list_tools=list_tools, on_call_tool=call_tool,
                  get_tool_input_schema=SCHEMAS.get)


def local_scope(ctx: ServerRequestContext[Any]) -> None:
    """On stdio the caller is the local user: every document."""
    return None


def request_scope(ctx: ServerRequestContext[Any]) -> KeyScope | None:
    """The key scope McpHttp checked for this request (an AttributeError, never everything, if it did not)."""
    request = ctx.request
    if not isinstance(request, Request):
        raise RuntimeError("an MCP call over HTTP without its request")
    return getattr(request.state, SCOPE_STATE)


class McpHttp:
    """The MCP server as streamable HTTP at /mcp on the API: each request's key is checked (reader role) before the
    SDK reads it, and its scope kept in the request's state for the tools."""

    def __init__(self, services: Services) -> None:
        self.services = services
        # the API's middleware screens Host and Origin (middleware/hosts.py, origins.py)
        self.manager = StreamableHTTPSessionManager(
            app=mcp_server(services, request_scope), stateless=True, json_response=True,
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False))

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        async with self.manager.run():
            yield

    def route(self) -> Route:
        return Route(MCP_PATH, self, methods=["GET", "POST", "DELETE"], include_in_schema=False)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        credentials = await bearer(request)
        key_scope = self.services.auth.authorize(request, credentials, "reader")  # RagError: the API's 401/403
        setattr(request.state, SCOPE_STATE, key_scope)
        await self.manager.handle_request(scope, receive, send)


async def serve_stdio(services: Services) -> None:
    """The MCP server on this process's stdin and stdout until the client closes them."""
    from mcp.server.stdio import stdio_server

    server = mcp_server(services, local_scope)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())
