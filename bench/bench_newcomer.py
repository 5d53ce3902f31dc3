"""A newcomer's path, timed step by step: a fresh data dir, the demo ingest of the sample corpus, `serve`, then one
question through each way in: the web page's HTTP path (GET / and its files, then POST /chat streamed as the page
reads it), the official `openai` client (/v1/chat/completions, streamed), the MCP SDK's client over streamable HTTP
(/mcp, the `ask` tool), and `rag-pipeline mcp` on stdio (after the server stopped: the embedded store allows one
process). Prints the seconds of each step (and their answers' first words).

    .venv/bin/python bench/bench_newcomer.py [--work DIR] [--question TEXT] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import anyio  # noqa: E402
import httpx  # noqa: E402
import openai  # noqa: E402  (imported here: the steps time the questions, not the clients' imports)
from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SAMPLE_CORPUS = REPO / "golden" / "corpus"
QUESTION = "who do I page for a SEV1 outage?"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def timed(steps: dict[str, float], name: str, run: Callable[[], Any]) -> Any:
    started = time.perf_counter()
    result = run()
    steps[name] = round(time.perf_counter() - started, 3)
    shown = f"  {str(result)[:70]!r}" if isinstance(result, str) else ""
    print(f"{name:<28} {steps[name]:8.2f} s{shown}", flush=True)
    return result


def ingest(data_dir: Path) -> str:
    subprocess.run([sys.executable, "-m", "rag_pipeline", "ingest", str(SAMPLE_CORPUS), "--data-dir", str(data_dir),
                    "--json"], check=True, stdout=subprocess.DEVNULL, cwd=REPO)
    return "ingested"


def start_server(data_dir: Path, port: int, log: Path) -> subprocess.Popen:
    """`rag-pipeline serve --keyless-loopback`, once /healthz answers ok."""
    server = subprocess.Popen([sys.executable, "-m", "rag_pipeline", "serve", "--keyless-loopback", "--port",
                               str(port), "--data-dir", str(data_dir)], cwd=REPO, stdout=log.open("wb"),
                              stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"serve exited with {server.returncode}; see {log}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).json().get("status") == "ok":
                return server
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.2)
    raise SystemExit(f"serve did not become healthy; see {log}")


def page_path(url: str, question: str) -> str:
    """What the page does: load it and its files, then POST /chat and read the stream to its "done" event."""
    for path in ("/", "/static/page.js", "/static/page.css"):
        httpx.get(url + path, timeout=30).raise_for_status()
    done = None
    with httpx.stream("POST", f"{url}/chat", json={"message": question}, timeout=300,
                      headers={"Accept": "text/event-stream", "Origin": url}) as response:
        response.raise_for_status()
        event = ""
        for line in response.iter_lines():
            if line.startswith("event:"):
                event = line[6:].strip()
            elif line.startswith("data:") and event == "done":
                done = json.loads(line[5:])
    assert done is not None, "no done event"
    return done["answer"]


def openai_path(url: str, question: str) -> str:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused-keyless-loopback", max_retries=0, timeout=300)
    stream = client.chat.completions.create(model="rag-pipeline", stream=True,
                                            messages=[{"role": "user", "content": question}])
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


async def mcp_ask(client: Any, question: str) -> str:
    result = await client.call_tool("ask", {"question": question})
    assert not result.is_error, result.content
    return result.content[0].text


def mcp_http_path(url: str, question: str) -> str:
    async def run() -> str:
        async with Client(f"{url}/mcp") as client:
            return await mcp_ask(client, question)

    return anyio.run(run)


def mcp_stdio_path(data_dir: Path, question: str) -> str:
    server = StdioServerParameters(command=sys.executable, args=["-m", "rag_pipeline", "mcp", "--data-dir",
                                                                 str(data_dir)], env=dict(os.environ), cwd=REPO)

    async def run() -> str:
        async with Client(server, read_timeout_seconds=300) as client:
            return await mcp_ask(client, question)

    return anyio.run(run)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None, help="where the fresh data dir goes (default: a temp dir)")
    parser.add_argument("--question", default=QUESTION)
    parser.add_argument("--json", type=Path, default=None, help="also write the timings here")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="newcomer-", dir=args.work))
    data_dir, port = work / "data", free_port()
    url = f"http://127.0.0.1:{port}"
    print(f"data dir {data_dir}; load average {os.getloadavg()[0]:.2f}", flush=True)
    steps: dict[str, float] = {}
    timed(steps, "demo ingest", lambda: ingest(data_dir))
    server = timed(steps, "serve until healthy", lambda: start_server(data_dir, port, work / "serve.log"))
    try:
        timed(steps, "page: first answer", lambda: page_path(url, args.question))
        timed(steps, "page: second answer", lambda: page_path(url, args.question))
        timed(steps, "openai client", lambda: openai_path(url, args.question))
        timed(steps, "mcp over http", lambda: mcp_http_path(url, args.question))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)
    timed(steps, "mcp on stdio (with start)", lambda: mcp_stdio_path(data_dir, args.question))
    steps["total"] = round(sum(steps.values()), 3)
    print(f"{'total':<28} {steps['total']:8.2f} s; load average {os.getloadavg()[0]:.2f}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(steps, indent=2) + "\n")


if __name__ == "__main__":
    main()
