"""The MCP server through the official MCP SDK's own client, over both transports: stdio (the real
`rag-pipeline mcp` command in a subprocess) and streamable HTTP (/mcp on a real uvicorn server, with API keys and
their scopes). Every tool is called on the sample index; results carry citations."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from rag_pipeline.components import load_settings
from rag_pipeline.serve.keys import create_key
from rag_pipeline.structured.operations import arguments_schema
from rag_pipeline_tests.test_api import running_api

SEV1 = "who do I page for a SEV1 outage?"
RUNBOOK = "default/ops/incident-runbook.md"
TOOLS = {"search", "ask", "query_metadata", "list_fields", "get_document"}


@pytest.fixture(scope="module")
def keyed_api(sample_index: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory
              ) -> Iterator[tuple[str, dict[str, str]]]:
    _, data_dir = sample_index
    keys_file = tmp_path_factory.mktemp("mcp_keys") / "api_keys.yaml"
    tokens = {"reader": create_key(keys_file, "reader")[1],
              "elsewhere": create_key(keys_file, "elsewhere", tags=("no-such-tag",))[1]}
    with running_api(load_settings(data_dir=data_dir, api_keys_file=keys_file)) as url:
        yield url, tokens


@asynccontextmanager
async def http_client(url: str, token: str) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=120) as http:
        async with Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client:
            yield client


async def call(client: Client, tool: str, arguments: dict[str, Any]) -> tuple[str, Any]:
    """(the text, the structured result) of a tool call that succeeded."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return result.content[0].text, result.structured_content


async def check_every_tool(client: Client) -> None:
    """What each tool gives on the sample index, whatever the transport."""
    listed = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(listed) == TOOLS
    assert listed["query_metadata"].input_schema == arguments_schema()  # made from the operation list

    _, found = await call(client, "search", {"query": SEV1, "top_k": 3})
    first = found["results"][0]
    assert (first["number"], first["path"]) == (1, RUNBOOK) and "incident commander" in first["text"]
    assert {"header", "line_start", "page", "score"} <= set(first)

    text, answered = await call(client, "ask", {"question": SEV1})
    assert "incident commander" in text and f"Sources:\n[1] {RUNBOOK}, line " in text
    cited = answered["citations"][0]
    assert (cited["kind"], cited["number"], cited["path"]) == ("passage", 1, RUNBOOK) and cited["text"]

    _, grouped = await call(client, "query_metadata", {"op": "group_by", "by": "type"})
    assert {row["value"]: row["count"] for row in grouped["rows"]}["md"] == 5
    assert grouped["documents"] and all(document["path"].startswith("default/") for document in grouped["documents"])

    _, fields = await call(client, "list_fields", {})
    assert {"path", "type", "tags"} <= {field["name"] for field in fields["fields"]}

    _, document = await call(client, "get_document", {"path": RUNBOOK, "query": "SEV1"})
    assert document["document"]["path"] == RUNBOOK and document["passages"][0]["path"] == RUNBOOK

    refused = await client.call_tool("search", {"top_k": 3})
    assert refused.is_error and "invalid_arguments" in refused.content[0].text
    missing = await client.call_tool("get_document", {"path": "default/no/such.md"})
    assert missing.is_error and "unknown_document" in missing.content[0].text


def test_stdio_runs_the_real_command(sample_index: tuple[Path, Path], tmp_path: Path) -> None:
    _, data_dir = sample_index
    copy = tmp_path / "data"
    shutil.copytree(data_dir, copy)  # the command opens the embedded store: not the one the HTTP tests' server holds
    server = StdioServerParameters(command=sys.executable, args=["-m", "rag_pipeline", "mcp", "--data-dir", str(copy)],
                                   env=dict(os.environ))

    async def session() -> None:
        async with Client(server, read_timeout_seconds=120) as client:
            await check_every_tool(client)

    anyio.run(session)


def test_http_with_a_key(keyed_api: tuple[str, dict[str, str]]) -> None:
    url, tokens = keyed_api

    async def session() -> None:
        async with http_client(url, tokens["reader"]) as client:
            await check_every_tool(client)

    anyio.run(session)


def test_http_applies_the_keys_scope(keyed_api: tuple[str, dict[str, str]]) -> None:
    url, tokens = keyed_api

    async def session() -> None:
        async with http_client(url, tokens["elsewhere"]) as client:  # a key that sees no document
            _, found = await call(client, "search", {"query": SEV1})
            assert found["results"] == []
            text, answered = await call(client, "ask", {"question": SEV1})
            assert answered["citations"] == [] and "incident commander" not in text
            _, counted = await call(client, "query_metadata", {"op": "count"})
            assert counted["rows"][0]["count"] == 0
            missing = await client.call_tool("get_document", {"path": RUNBOOK})
            assert missing.is_error and "unknown_document" in missing.content[0].text

    anyio.run(session)


def test_http_refuses_a_bad_key(keyed_api: tuple[str, dict[str, str]]) -> None:
    url, _ = keyed_api
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}}
    for headers in ({}, {"Authorization": "Bearer rag_not-a-key"}):
        response = httpx.post(f"{url}/mcp", json=initialize, headers={
            "Accept": "application/json, text/event-stream", **headers})
        assert response.status_code == 401 and response.headers["www-authenticate"] == "Bearer"
        assert response.json()["error"]["code"] in ("not_authenticated", "invalid_api_key")

    async def session() -> None:
        async with http_client(url, "rag_not-a-key") as client:
            await client.list_tools()

    with pytest.raises(BaseExceptionGroup) as refused:  # the SDK's client cannot connect
        anyio.run(session)
    assert refused.group_contains(MCPError, match="error response")
