"""GET /openapi.json's document: FastAPI's, generated from the routes and their models, plus the schemas of the
server-sent events of POST /ask, POST /chat and POST /v1/chat/completions (their routes name them in `responses`; no route returns them as a
response_model, so FastAPI would leave them out)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic.json_schema import models_json_schema

from rag_pipeline.serve.models import STREAM_MODELS
from rag_pipeline.serve.openai_models import ChatCompletionChunk

COMPONENT = "#/components/schemas/{model}"


def openapi_document(app: FastAPI) -> dict[str, Any]:
    """The app's OpenAPI document (built once)."""
    if app.openapi_schema is None:
        document = get_openapi(title=app.title, version=app.version, summary=app.summary, routes=app.routes)
        _, streams = models_json_schema([(model, "serialization") for model in (*STREAM_MODELS, ChatCompletionChunk)], ref_template=COMPONENT)
        schemas = document.setdefault("components", {}).setdefault("schemas", {})
        schemas.update({name: schema for name, schema in streams["$defs"].items() if name not in schemas})
        app.openapi_schema = document
    return app.openapi_schema


def event_stream_content(model: str) -> dict[str, Any]:
    """A `responses` content entry of a route that streams `model` events."""
    return {"text/event-stream": {"schema": {"$ref": COMPONENT.format(model=model)}}}
