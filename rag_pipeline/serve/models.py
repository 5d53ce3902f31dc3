"""The HTTP API's request and response bodies (pydantic), and what a body's validation errors mean to a caller.

The request models validate every POST body (FastAPI does it before the endpoint runs); the response models
document the answers in /openapi.json. `input_error` turns pydantic's errors into the API's one error: an
InputError whose code names the field (empty_query, invalid_top_k, unknown_filter_field, ...).
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterable, Sequence
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictFloat, StrictInt, StrictStr, create_model

from rag_pipeline.errors import InputError
from rag_pipeline.index.vector_store import FILTER_KEYS
from rag_pipeline.retrieve.retriever import Mode
from rag_pipeline.structured.operations import NAMES

MAX_API_TOP_K = 100


def _unicode(text: str) -> str:
    """`text`, if it is valid Unicode: JSON's escapes can spell a lone surrogate, which no UTF-8 text holds."""
    try:
        text.encode()
    except UnicodeEncodeError:
        raise ValueError("it holds a lone surrogate (not valid Unicode)") from None
    return text


def _not_blank(text: str) -> str:
    if not text.strip():
        raise ValueError("it is blank")
    return text


String = Annotated[StrictStr, AfterValidator(_unicode)]
Text = Annotated[String, AfterValidator(_not_blank)]
TopK = Annotated[int, Field(strict=True, ge=1, le=MAX_API_TOP_K, description="how many results (1 to 100)")]
FilterValue = String | Annotated[list[String], Field(min_length=1)]
# The keys are FILTER_KEYS or a document field declared filterable (which the retriever checks: it knows the
# declarations); a key that can be neither is refused here.
FilterKey = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,63}$")]
Filters = dict[FilterKey, FilterValue]
FILTERS_DESCRIPTION = ("field: value (or a list of values, any of which matches); every condition must hold. Fields: "
                       f"{', '.join(FILTER_KEYS)}, and the document fields declared filterable (GET /fields)")


class StrictBody(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SearchRequest(StrictBody):
    """POST /search. An omitted top_k is the server's RAG_TOP_K."""

    query: Text
    top_k: TopK = 5
    filters: Filters | None = Field(None, description=FILTERS_DESCRIPTION)


class AskRequest(StrictBody):
    """POST /ask. An omitted top_k is the server's RAG_TOP_K."""

    question: Text
    top_k: TopK = 5
    filters: Filters | None = Field(None, description=FILTERS_DESCRIPTION)


WhereScalar = Annotated[String | StrictInt | StrictFloat, Field(union_mode="left_to_right")]
WhereValue = WhereScalar | list[WhereScalar] | dict[str, WhereScalar | list[WhereScalar]]


class QueryRequest(StrictBody):
    """POST /query: one typed metadata operation (no SQL). `where` maps fields to a value (equals; on a list field:
    contains), a list (any of) or {gte|gt|lte|lt|contains|in: ...}; or is a list of "F=V" strings as the CLI takes."""

    op: Literal[NAMES]  # type: ignore[valid-type]  # structured/operations.py
    field: FilterKey | None = None
    by: FilterKey | None = None
    where: dict[FilterKey, WhereValue] | list[Annotated[str, Field(max_length=1000)]] | None = None
    limit: Annotated[int, Field(strict=True, ge=1, le=1000)] | None = None


class ChatRequest(StrictBody):
    """POST /chat: a message, the session it continues (omit to start one), and filters for its searches."""

    message: Annotated[String, Field(min_length=1, max_length=4000)]
    session_id: Annotated[String, Field(pattern=r"^[0-9a-f]{32}$")] | None = None
    filters: Filters | None = Field(None, description=FILTERS_DESCRIPTION)


class ChatResponse(BaseModel):
    """POST /chat with Accept: application/json (the `done` event of the stream)."""

    answer: str
    session_id: str
    citations: list[dict[str, Any]] = Field(description="passages [n] and documents a metadata result counted [Dn]")
    trajectory: list[dict[str, Any]] = Field(description="each tool call: tool, args, summary, ms, refused")
    exit_reason: Literal["answered", "cap_reached", "fallback", "planned"]
    llm_calls: int
    tokens: dict[str, int]
    timings_ms: dict[str, float]
    question: str
    guardrails: dict[str, Any]


class QueryResponse(BaseModel):
    """POST /query: the rows, the documents they counted (to cite), and whether the limit cut them."""

    op: str
    rows: list[dict[str, Any]]
    documents: list[dict[str, str]] = Field(description="id and path of every document counted (up to the limit)")
    truncated: bool
    total_documents: int
    timings_ms: dict[str, float]


class IngestRequest(StrictBody):
    """POST /ingest: no fields (or no body at all). The server syncs its configured roots (RAG_ROOTS); a request
    naming paths is refused (paths_not_accepted)."""


def with_default_top_k(model: type[StrictBody], top_k: int) -> type[StrictBody]:
    """`model` (SearchRequest or AskRequest) whose omitted top_k is `top_k`: the server's setting, also in the
    OpenAPI document."""
    return create_model(model.__name__, __base__=model, __module__=__name__, __doc__=model.__doc__,
                        top_k=(TopK, top_k))


class SearchHit(BaseModel):
    path: str | None
    header: str
    line_start: int | None
    page: int | None
    chunk_id: str
    sha: str | None
    doc_type: str | None
    tags: list[str]
    score: float
    text: str


class SearchResponse(BaseModel):
    """POST /search: the results, best first, and how the search went."""

    results: list[SearchHit]
    timings_ms: dict[str, float] = Field(description="milliseconds per stage: embed, cache, hyde, search, ...")
    warnings: list[str] = Field(description="why the search degraded (e.g. a BM25-only fallback); empty if not")
    mode: Mode
    fragments: list[str]
    cache_hit: bool
    reranked: bool


class ErrorDetail(BaseModel):
    code: str = Field(description="stable machine-readable name, e.g. empty_query, body_too_large")
    message: str


class ErrorResponse(BaseModel):
    """Every error, whatever the status."""

    error: ErrorDetail


class IngestJobResponse(BaseModel):
    """POST /ingest (202) and GET /ingest/{id}: an ingest run and, once finished, its summary or error. A sync
    that an upload or a removal asked for is `queued` while another ingest runs, and names its `source`."""

    id: str
    status: Literal["queued", "running", "succeeded", "failed"]
    roots: list[str]
    source: str | None = Field(None, description="the source it syncs; null: the configured roots or sources")
    started_at: float = Field(description="when it was asked for (Unix time)")
    finished_at: float | None
    summary: dict[str, Any] | None
    error: str | None


class IngestRef(BaseModel):
    """The sync of the source that an upload or removal started or queued: poll GET /ingest/{id}."""

    id: str
    status: Literal["queued", "running", "succeeded", "failed"]


class UploadedDocument(BaseModel):
    id: str = Field(description="the SHA-256 of the bytes: the document id")
    filename: str = Field(description="the stored (sanitised) name, with the extension of the sniffed type")
    path: str
    bytes: int
    doc_type: str
    duplicate: bool = Field(description="the same bytes were already stored in the source: nothing new stored")


class RejectedFile(BaseModel):
    filename: str
    error: ErrorDetail


class UploadResponse(BaseModel):
    """POST /sources/{name}/documents (202): the stored files, the refused ones, and the sync it started."""

    source: str
    documents: list[UploadedDocument]
    rejected: list[RejectedFile]
    ingest: IngestRef


class RemoveResponse(BaseModel):
    """DELETE /sources/{name}/documents/{id} (202): the deleted files, and the sync that purges the document."""

    id: str
    removed_paths: list[str]
    ingest: IngestRef


class SourceDocument(BaseModel):
    model_config = ConfigDict(extra="allow")  # uploads add filename and uploaded_at

    id: str
    paths: list[str] = Field(description="its paths in this source")
    all_paths: list[str] = Field(description="its paths in every source")
    doc_type: str | None
    bytes: int | None
    status: Literal["pending", "ok", "failed"]
    stage: str | None
    error: str | None
    chunks: int | None
    ingested_at: str | None


class Refusal(BaseModel):
    path: str
    reason: str | None


class SourceDocumentsResponse(BaseModel):
    """GET /sources/{name}/documents: what the source holds (uploads not synced yet are pending), and the files
    its last scan refused."""

    source: str
    kind: str
    documents: list[SourceDocument]
    refused: list[Refusal]


class SourceSummary(BaseModel):
    name: str
    kind: Literal["roots", "uploads"] | None
    configured: bool
    documents: int
    pending: int
    failed: int
    chunks: int
    synced_at: str | None


class SourcesResponse(BaseModel):
    """GET /sources: every source, configured or synced (no filesystem paths)."""

    sources: list[SourceSummary]


class StoreHealth(BaseModel):
    collection: str
    backend: str
    ok: bool
    points: int | None = None
    index_version: str | None = None
    error: str | None = None


class EmbedderHealth(BaseModel):
    ok: bool
    model: str | None
    error: str | None = None


class LlmHealth(BaseModel):
    model_config = ConfigDict(extra="allow")  # the client's status: url, model, reachable, model_available, error
    configured: bool


class RerankerHealth(BaseModel):
    configured: bool
    model: str | None


class CacheHealth(BaseModel):
    enabled: bool


class HealthResponse(BaseModel):
    """GET /healthz: "down" (503) when the store is, "degraded" when searches fall back to BM25 only."""

    status: Literal["ok", "degraded", "down"]
    store: StoreHealth
    embedder: EmbedderHealth
    llm: LlmHealth
    reranker: RerankerHealth
    semantic_cache: CacheHealth
    hyde: str


# What a failed field means: its error code and the rule it broke.
FIELD_RULES = {
    "query": ("empty_query", "must be a non-empty string"),
    "question": ("empty_question", "must be a non-empty string"),
    "top_k": ("invalid_top_k", f"must be an integer from 1 to {MAX_API_TOP_K}"),
    "filters": ("invalid_filters", "must be an object of field: value"),
    "op": ("invalid_op", f"must be one of {', '.join(NAMES)}"),
    "field": ("invalid_field", "must be a field name"),
    "by": ("invalid_field", "must be a field name"),
    "where": ("invalid_where", "must map fields to values, or be a list of 'F=V' strings"),
    "limit": ("invalid_limit", "must be an integer from 1 to 1000"),
    "message": ("invalid_message", "must be a non-empty string of at most 4000 characters"),
    "session_id": ("invalid_session_id", "must be a session id returned by POST /chat"),
}
_short = reprlib.Repr()  # a bad value, cut short and a few levels deep (a body can nest deeply)
_short.maxlevel, _short.maxstring, _short.maxother = 3, 60, 60


def input_error(errors: Sequence[dict[str, Any]], allowed: Iterable[str] = ()) -> InputError:
    """The InputError of a request body that failed validation: its first problem, body-level first (not JSON,
    not an object), then unknown fields, then the fields in order. `allowed` names the body's fields."""
    errors = sorted(errors, key=lambda error: 0 if len(error["loc"]) < 2 or error["type"] == "json_invalid"
                    else 1 if error["type"] == "extra_forbidden" else 2)
    first = errors[0]
    loc, kind = tuple(first["loc"])[1:], first["type"]  # loc[0] is "body"
    if kind == "json_invalid":
        return InputError(f"the body is not valid JSON: {first.get('ctx', {}).get('error', first['msg'])}"
                          f" (at character {loc[0] if loc else 0})", code="invalid_json")
    if not loc:
        return InputError("the body must be a JSON object", code="invalid_body")
    if kind == "extra_forbidden":
        unknown = [str(error["loc"][-1]) for error in errors if error["type"] == "extra_forbidden"]
        if "roots" in unknown:
            return InputError("the API takes no filesystem paths: POST /ingest syncs the roots the server is "
                              "configured with (RAG_ROOTS); send an empty body or {}", code="paths_not_accepted")
        return InputError(f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed)) or 'none'}",
                          code="unknown_field")
    field = str(loc[0])
    if field == "filters" and len(loc) > 2:
        if loc[-1] == "[key]":
            unknown = [str(error["loc"][2]) for error in errors if tuple(error["loc"])[-1:] == ("[key]",)]
            return InputError(f"unknown filter field(s) {', '.join(unknown)}; allowed: {', '.join(FILTER_KEYS)} and "
                              "the document fields declared filterable", code="unknown_filter_field")
        return InputError(f"filter {loc[1]!r} needs a string or a non-empty list of strings, "
                          f"got {_short.repr(first.get('input'))}")  # the same words as the retriever's check
    code, rule = FIELD_RULES.get(field, ("invalid_request", "is invalid"))
    got = "" if kind == "missing" else f", got {_short.repr(first.get('input'))}"
    return InputError(f"'{field}' {rule}: {first['msg'].removeprefix('Value error, ')}{got}", code=code)
