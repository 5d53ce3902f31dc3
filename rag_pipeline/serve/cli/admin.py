"""`rag-pipeline serve`, `mcp` and `keys`: the HTTP API, the MCP server on stdio and the API keys."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import TYPE_CHECKING, Any

from rag_pipeline.serve.cli.data_dir import require_index
from rag_pipeline.settings import Settings

if TYPE_CHECKING:
    pass

startup_log = logging.getLogger("rag_pipeline.startup")  # the first line serve logs


def run_serve(args: argparse.Namespace, settings: Settings) -> int:
    """Serve the API; its logs (and uvicorn's) are JSON lines on stderr, the first one saying where it listens and
    which index it serves."""
    from rag_pipeline.serve.app import serve
    from rag_pipeline.serve.json_logs import log_json_lines
    from rag_pipeline.serve.keys import Keyring, check_bind
    from rag_pipeline.serve.middleware.access_log import access_log

    if args.keyless_loopback:
        settings = settings.model_copy(update={"api_keyless_loopback": True})
    check_bind(args.host, Keyring(settings), settings.api_keyless_loopback)
    if not args.allow_empty:
        require_index(settings)
    log_json_lines("rag_pipeline", "uvicorn")
    access_log.setLevel(logging.INFO)
    startup_log.setLevel(logging.INFO)
    startup_log.info(json.dumps(served_index(settings, args.host, args.port)))
    serve(settings, host=args.host, port=args.port)
    return 0


def run_mcp(args: argparse.Namespace, settings: Settings) -> int:
    """The MCP server on stdio until the client closes it (stdout carries its messages only; logs go to stderr)."""
    import anyio

    from rag_pipeline.serve.dependencies import build_services
    from rag_pipeline.serve.mcp_server import serve_stdio

    require_index(settings)
    services = build_services(settings)
    services.runtime.start()
    try:
        anyio.run(serve_stdio, services)
    finally:
        services.runtime.close()
    return 0


def served_index(settings: Settings, host: str, port: int) -> dict[str, Any]:
    """The startup line: the URL, the data dir, the active index generation and how many documents it holds."""
    from rag_pipeline.index.generations import GenerationRegistry
    from rag_pipeline.sidecar import Sidecar

    data_dir = settings.data_dir.resolve()
    generation = GenerationRegistry(settings.data_dir).active_id()
    totals = (Sidecar(settings.sidecar_location).totals_by_type()
              if settings.sidecar_url or settings.sidecar_path.is_file() else [])
    documents = sum(row["documents"] - row["failed"] for row in totals)
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}/"
    index = f"generation {generation}, {documents} documents" if generation else "no index yet"
    return {"message": f"serving {data_dir} ({index}) on {url}", "url": url, "data_dir": str(data_dir),
            "generation": generation, "documents": documents}


def run_keys_create(args: argparse.Namespace, settings: Settings) -> int:
    from rag_pipeline.serve.keys import create_key

    key, token = create_key(settings.api_keys_path, args.name, args.role, tuple(args.tags), tuple(args.sources))
    if args.json:
        print(json.dumps({"name": key.name, "token": token, "role": key.role, "tags": list(key.tags),
                          "sources": list(key.sources)}))
    else:
        print(f"created API key {key.name!r} (role {key.role}{scope_text(key.to_json())}); its token, shown only "
              "now:", file=sys.stderr)
        print(token)
    return 0


def run_keys_list(args: argparse.Namespace, settings: Settings) -> int:
    from rag_pipeline.serve.keys import read_keys

    keys = [key.to_json() for key in read_keys(settings.api_keys_path)]
    if args.json:
        print(json.dumps({"keys": keys}))
    for key in [] if args.json else keys:
        print(f"{key['name']:24} {key['role']:8} {key['created_at']}{scope_text(key)}")
    return 0


def scope_text(key: dict[str, Any]) -> str:
    return "".join(f", {field}: {', '.join(key[field])}" for field in ("tags", "sources") if key[field])


def run_keys_revoke(args: argparse.Namespace, settings: Settings) -> int:
    from rag_pipeline.serve.keys import revoke_key

    revoke_key(settings.api_keys_path, args.name)
    print(json.dumps({"revoked": args.name}) if args.json else f"revoked API key {args.name!r}")
    return 0
