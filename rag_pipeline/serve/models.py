"""The HTTP API's request and response bodies (pydantic).

The request models validate every POST body (FastAPI does it before the endpoint runs; what their validation
errors mean to a caller is serve/http_errors.py's input_error); the response models document the answers in
/openapi.json.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    create_model,
)

from rag_pipeline.index.vector_store import FILTER_KEYS
from rag_pipeline.retrieve.retriever import Mode
from rag_pipeline.structured.operations import AGGREGATES, COMPARISONS, NAMES

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
UploadName = Annotated[str | None, Field(description="an upload's file name as its client gave it (text only, never a "
                                                  "path); absent or null for other documents")]
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
# A nested query (a semi-join's {"in": {...}}, a set operation's queries): an object of this same form, checked by
# the query parser (structured/request.py), whose errors name the part (queries[1]: ..., where 'state' in: ...).
NestedQuery = dict[str, Any]
WhereValue = WhereScalar | list[WhereScalar] | dict[str, WhereScalar | list[WhereScalar] | StrictBool | NestedQuery]


class Aggregate(StrictBody):
    """group_by's aggregate of each group: count (of documents), or sum|avg|min|max|count_distinct of a field."""

    op: Literal[AGGREGATES]  # type: ignore[valid-type]
    field: FilterKey | None = None


class QueryRequest(StrictBody):
    """POST /query: one typed metadata operation (no SQL). `where` maps fields to a value (equals, ignoring case;
    on a list field: contains), a list (any of), {gte|gt|lte|lt|contains|in|eq: ...}, {"empty": true|false} or
    {"in": QUERY} (a semi-join: any value another query produces); or is a list of "F=V" strings as the CLI takes.
    `queries`: the two queries of intersect, union or except."""

    op: Literal[NAMES]  # type: ignore[valid-type]  # structured/operations.py
    field: FilterKey | None = None
    by: FilterKey | None = None
    returns: FilterKey | None = Field(None, alias="return", description="argmax/argmin: the field returned")
    where: dict[FilterKey, WhereValue] | list[Annotated[str, Field(max_length=1000)]] | None = None
    aggregate: Aggregate | None = None
    having: Annotated[dict[Literal[COMPARISONS], StrictInt | StrictFloat],  # type: ignore[valid-type]
                      Field(min_length=1)] | None = None
    queries: Annotated[list[NestedQuery], Field(min_length=2, max_length=2)] | None = None
    limit: Annotated[int, Field(strict=True, ge=1, le=1000)] | None = None

    def body(self) -> dict[str, Any]:
        """The query tool's JSON form of the request (`return` under its own name)."""
        return self.model_dump(exclude_none=True, by_alias=True)


class ChatRequest(StrictBody):
    """POST /chat: a message, the session it continues (omit to start one), and filters for its searches."""

    message: Annotated[String, Field(min_length=1, max_length=4000)]
    session_id: Annotated[String, Field(pattern=r"^[0-9a-f]{32}$")] | None = None
    filters: Filters | None = Field(None, description=FILTERS_DESCRIPTION)


class ChatResponse(BaseModel):
    """POST /chat with Accept: application/json (the `done` event of the stream)."""

    answer: str
    session_id: str
    citations: list[dict[str, Any]] = Field(description="passages [n] and documents a metadata result counted [Dn] "
                                                        "(an upload's also carry its upload_name)")
    trajectory: list[dict[str, Any]] = Field(description="each tool call: tool, args, summary, ms, refused")
    exit_reason: Literal["answered", "cap_reached", "fallback", "planned", "cannot_answer"]
    llm_calls: int
    tokens: dict[str, int]
    timings_ms: dict[str, float]
    question: str
    guardrails: dict[str, Any]
    exact: dict[str, Any] | None = Field(description="the exact answer of the last metadata result (op, operation, "
                                                     "answer), or null")


class QueryResponse(BaseModel):
    """POST /query: the rows, the documents they counted (to cite), and whether the limit cut them."""

    op: str
    operation: str = Field(description="what was computed, in words: \"sum of population over 48 documents matching "
                                       "kind = state\"")
    rows: list[dict[str, Any]]
    documents: list[dict[str, str]] = Field(description="id and path (and an upload's upload_name) of every document "
                                                        "counted (up to the limit)")
    truncated: bool
    total_documents: int
    timings_ms: dict[str, float]
    withheld: list[dict[str, Any]] = Field(description="each value withheld as a prompt injection (shown in its row as "
                                                       "the withheld marker): row, key, rules")


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
    upload_name: UploadName = None
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
    upload_name: UploadName = None


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
    upload_name: UploadName = None
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


KeyName = Annotated[String, Field(max_length=64, description="letters, digits, '.', '_' or '-' (at most 64)")]
KeyLabels = Annotated[list[Annotated[String, Field(max_length=200)]], Field(max_length=100)]


class KeyRequest(StrictBody):
    """POST /keys: a new API key's name, role and scope (tags, sources; none: everything)."""

    name: KeyName
    role: Literal["reader", "ingester", "admin"] = "reader"
    tags: KeyLabels = []
    sources: KeyLabels = []


class KeyInfo(BaseModel):
    """An API key as listed: never its token or its digest."""

    name: str
    role: Literal["reader", "ingester", "admin"]
    tags: list[str]
    sources: list[str]
    created_at: str


class KeysResponse(BaseModel):
    """GET /keys: the keys of the keys file (not the RAG_API_KEY one)."""

    keys: list[KeyInfo]


class KeyCreated(KeyInfo):
    """POST /keys (201): the new key and its token, shown this once (only its SHA-256 is stored)."""

    token: str


class KeyRevoked(BaseModel):
    """DELETE /keys/{name}: the revoked key's name; its token stops working at once."""

    revoked: str


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


class FieldInfo(BaseModel):
    name: str
    type: str
    documents: int = Field(description="documents with a value (0 for a built-in: every document has one)")
    origins: list[str]
    builtin: bool
    filterable: bool
    synonyms: list[str]
    enriched_by: str | None
    description: str


class FieldsResponse(BaseModel):
    """GET /fields."""

    fields: list[FieldInfo]


class ChatTurn(BaseModel):
    turn: int
    message: str
    answer: str
    citations: list[dict[str, Any]] | None
    trajectory: list[dict[str, Any]] | None
    exit_reason: str | None
    created_at: str


class ChatSessionResponse(BaseModel):
    """GET /chat/{id}: the session's turns."""

    session_id: str
    turns: list[ChatTurn]


class ChatDeleted(BaseModel):
    """DELETE /chat/{id}."""

    session_id: str
    deleted: bool


# --- the server-sent events of POST /ask and POST /chat: each is `event: NAME` and `data: ONE JSON LINE` ----------

class AnswerSource(BaseModel):
    """A passage the answer may cite as [number]."""

    number: int
    path: str
    upload_name: UploadName = None
    heading: str
    page: int | None
    line_start: int | None
    sha: str
    chunk_id: str
    score: float
    text: str
    paths: list[str] = Field(description="every path the document is stored under")


class AskAnswer(BaseModel):
    """The "done" event of POST /ask: the answer with its sources, citations and guardrail report."""

    question: str
    answer: str
    generator: str
    sources: list[AnswerSource]
    citations: list[int] = Field(description="the source numbers the answer cites")
    timings_ms: dict[str, float]
    warnings: list[str]
    guardrails: dict[str, Any]


class TokenData(BaseModel):
    text: str = Field(description="the next piece of the answer's text")


class SessionData(BaseModel):
    session_id: str


class StepData(BaseModel):
    """A tool call of the chat agent (as it starts: tool and args; a planned step also has the rest)."""

    tool: str
    args: dict[str, Any]
    summary: str | None = None
    ms: float | None = None
    refused: bool | None = None


class ObservationData(BaseModel):
    """What a tool call returned, in one line (`error` when it was refused or failed)."""

    tool: str
    args: dict[str, Any]
    summary: str
    error: str | None
    findings: list[dict[str, Any]]
    ms: float


class AskTokenEvent(BaseModel):
    event: Literal["token"]
    data: TokenData


class AskDoneEvent(BaseModel):
    event: Literal["done"]
    data: AskAnswer


class StreamErrorEvent(BaseModel):
    """The last event of a stream that failed after it began."""

    event: Literal["error"]
    data: ErrorDetail


class ChatSessionEvent(BaseModel):
    event: Literal["session"]
    data: SessionData


class ChatStepEvent(BaseModel):
    event: Literal["step"]
    data: StepData


class ChatObservationEvent(BaseModel):
    event: Literal["observation"]
    data: ObservationData


class ChatTokenEvent(BaseModel):
    event: Literal["token"]
    data: TokenData


class ChatDoneEvent(BaseModel):
    event: Literal["done"]
    data: ChatResponse


class AskEvent(RootModel[Annotated[AskTokenEvent | AskDoneEvent | StreamErrorEvent, Field(discriminator="event")]]):
    """One server-sent event of POST /ask: "token" events, then "done"; "error" if the stream fails midway."""


class ChatEvent(RootModel[Annotated[ChatSessionEvent | ChatStepEvent | ChatObservationEvent | ChatTokenEvent |
                                    ChatDoneEvent | StreamErrorEvent, Field(discriminator="event")]]):
    """One server-sent event of POST /chat: "session", then "step" and "observation" per tool call, "token"
    events, then "done"; "error" if the stream fails midway."""


STREAM_MODELS = (AskEvent, ChatEvent)  # the /openapi.json components that no route names as its response_model
