"""POST /search and POST /ask: the best chunks for a query, and the answer grounded in them (server-sent events).

The bodies' omitted top_k is the server's RAG_TOP_K, also in the OpenAPI document, so this router is made per app.
"""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations, and the body models are made
# per app (local names).

import itertools
from collections.abc import Iterator
from typing import Any

import anyio.to_thread
from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse, Response, StreamingResponse

from rag_pipeline.generate.answerer import Answerer
from rag_pipeline.generate.result import Answer
from rag_pipeline.retrieve.retriever import RetrievalResult, Retriever
from rag_pipeline.serve import models
from rag_pipeline.serve.dependencies import Reader, ServicesDep
from rag_pipeline.serve.http_errors import ERROR_RESPONSES
from rag_pipeline.serve.models import AskRequest, SearchRequest, SearchResponse
from rag_pipeline.serve.openapi import event_stream_content
from rag_pipeline.serve.sse import Event, event_stream


def router(default_top_k: int) -> APIRouter:
    """The routes, with `default_top_k` for a body that omits top_k."""
    routes = APIRouter()
    SearchBody = models.with_default_top_k(SearchRequest, default_top_k)
    AskBody = models.with_default_top_k(AskRequest, default_top_k)

    @routes.post("/search", response_model=SearchResponse, responses=ERROR_RESPONSES)
    async def search(body: SearchBody, scope: Reader, services: ServicesDep) -> Response:
        """The best `top_k` chunks for the query (hybrid retrieval, optional rerank and semantic cache)."""
        def run() -> tuple[Retriever, RetrievalResult, dict[str, Any]]:  # one worker-thread hop per request
            paths = services.paths.current()
            retriever = services.runtime.retriever()
            result = retriever.search(body.query, body.top_k, paths.filters(body.filters), scope)
            return retriever, result, paths.json(result.to_json())  # the contract's JSON, as `search --json` has it

        retriever, result, shown = await anyio.to_thread.run_sync(run, limiter=services.search_threads)
        services.metrics.observe_retrieval(result, retriever.cache is not None)
        return JSONResponse(shown)

    @routes.post("/ask", response_class=StreamingResponse, responses={
        200: {"content": event_stream_content("AskEvent"),
              "description": 'server-sent events (AskEvent): "token" ({"text"}) events, then "done" (the answer with '
                             'its sources, citations and guardrail report); "error" if the stream fails midway'},
        **ERROR_RESPONSES})
    async def ask(body: AskBody, scope: Reader, services: ServicesDep) -> Response:
        """The answer to the question, streamed as it is written, grounded in the retrieved chunks."""
        answerer: Answerer = await run_in_threadpool(services.runtime.answerer)
        paths = await run_in_threadpool(services.paths.current)
        pieces = answerer.stream(body.question, body.top_k, paths.filters(body.filters), scope)
        first = await run_in_threadpool(next, pieces)  # retrieval errors surface here, before the stream starts

        def events() -> Iterator[Event]:  # each piece as it is generated
            for piece in itertools.chain([first], pieces):
                yield ("done", paths.json(piece.to_json())) if isinstance(piece, Answer) else \
                    ("token", {"text": paths.text(piece)})

        return event_stream(events(), "answer")

    return routes
