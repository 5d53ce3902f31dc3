"""The vector store interface: one Qdrant collection of chunks with a dense and a BM25 sparse vector.

Two backends implement it with the same collection layout and query semantics: `EdgeStore` (qdrant-edge,
embedded, on disk under the data dir, one process at a time) and `ServerStore` (qdrant-client against a
Qdrant server, or its in-process `:memory:` mode). This module imports neither; `index.factory` picks one.
"""

from __future__ import annotations

import hashlib
import re
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, NamedTuple

from rag_pipeline.errors import ConfigError, InputError, StoreUnavailable

DENSE = "dense"
SPARSE = "bm25"
FIELDS_FIELD = "fields"  # the filterable document fields of a chunk, as "name=value" labels
KEYWORD_FIELDS = ("path", "sha", "shard", "doc_type", "heading_path", "tags", "sources", FIELDS_FIELD)  # indexed
PREFIX_FIELD = "paths"  # keyword index with prefix matching: serves exact `paths` and `path_prefix` filters
# Filter keys: exact match (a value, or any of a list of values) on a payload field (on the list fields `paths`
# and `tags`: any element; `source` matches any element of `sources`), and `path_prefix`, which matches a point
# when any of its paths starts with the given string (character-wise, case-sensitive).
FILTER_KEYS = ("path", "paths", "sha", "shard", "doc_type", "heading_path", "tags", "source", "path_prefix")
PATH_PREFIX = "path_prefix"
SOURCES_FIELD = "sources"  # the payload field of the sources that hold a document
FILTER_FIELDS = {"source": SOURCES_FIELD}  # filter keys named differently from their payload field
TEXT_FIELD = "text"
BATCH_SIZE = 256


@dataclass(frozen=True)
class SparseVector:
    indices: list[int]
    values: list[float]


@dataclass(frozen=True)
class IndexPoint:
    """One chunk to index: id is the chunk id (a UUID string), payload holds its text and metadata."""

    id: str
    dense: Sequence[float]
    sparse: SparseVector
    payload: dict[str, Any]


@dataclass(frozen=True)
class Hit:
    id: str
    score: float
    payload: dict[str, Any]
    vector: tuple[float, ...] | None = field(default=None, repr=False)  # the dense vector, when asked for


class IndexedDocument(NamedTuple):
    """What the index holds of one document: its point count, and the paths, tags, sources and field labels on its
    points (all empty when its points disagree, e.g. after a relabel that failed part way, so they match no
    document's labels)."""

    points: int
    paths: list[str]
    tags: list[str]
    sources: list[str] = []
    fields: list[str] = []


LABEL_FIELDS = ["sha", "paths", "tags", SOURCES_FIELD, FIELDS_FIELD]  # the payload a shard state reads


def count_point(state: dict[str, IndexedDocument], payload: Mapping[str, Any]) -> None:
    """Add one point (its `sha`, `paths`, `tags`, `sources` and `fields` payload) to a shard state."""
    labels = (payload["paths"], payload.get("tags") or [], payload.get(SOURCES_FIELD) or [],
              payload.get(FIELDS_FIELD) or [])
    held = state.get(payload["sha"])
    if held is None:
        state[payload["sha"]] = IndexedDocument(1, *labels)
    elif (held.paths, held.tags, held.sources, held.fields) == labels:
        state[payload["sha"]] = IndexedDocument(held.points + 1, *labels)
    else:
        state[payload["sha"]] = IndexedDocument(held.points + 1, [], [], [], [])


def label_payload(paths: list[str], tags: list[str], sources: list[str], fields: list[str]) -> dict[str, Any]:
    """The payload that follows the sources, their trees and rules, and the document's filterable fields (a
    roster or an enrichment can change them), rather than a document's bytes."""
    return {"paths": paths, "path": paths[0], "tags": tags, SOURCES_FIELD: sources, FIELDS_FIELD: fields}


def text_digest(text: str) -> str:
    """The content hash of a chunk's text, which the index check compares with the chunk artifact's."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class IndexedChunk(NamedTuple):
    """One point as the index check sees it: its document and the hash of its text."""

    sha: str
    text_digest: str


@dataclass(frozen=True)
class Condition:
    """One validated filter condition: `kind` is "value" (one exact value), "any" (any of values) or "prefix"."""

    key: str
    kind: Literal["value", "any", "prefix"]
    values: tuple[str, ...]


FilterValue = str | Sequence[str]
# A request's filters (filter key -> value), or conditions already parsed (a request's filters and a Scope).
Filters = Mapping[str, FilterValue] | Sequence[Condition]
FusionMethod = Literal["rrf", "dbsf"]


@dataclass(frozen=True)
class Scope:
    """What an API key may see, ANDed with a request's filters inside every search leg: chunks with any of `tags`
    (when given) that lie in any of `sources` (payload `sources`, when given). A request's filters can narrow it,
    never widen it."""

    tags: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()

    def conditions(self) -> list[Condition]:
        fields = (("tags", self.tags), (SOURCES_FIELD, self.sources))
        return [Condition(key, "any", values) for key, values in fields if values]


def filter_values(key: str, value: FilterValue) -> tuple[str, ...]:
    """A filter's value as the values any of which may match; InputError unless a string or a non-empty list of
    strings."""
    values = (value,) if isinstance(value, str) else tuple(value) if isinstance(value, (list, tuple)) else ()
    if not values or not all(isinstance(item, str) for item in values):
        raise InputError(f"filter {key!r} needs a string or a non-empty list of strings, got {value!r}")
    return values


def count_conditions(shard: str | None, sha: str | Sequence[str] | None, filters: Filters | None) -> list[Condition]:
    """The conditions of a count (`VectorStore.count`): one shard and/or document (or any of several), and
    `filters`."""
    by_location = {key: value for key, value in (("shard", shard), ("sha", sha)) if value is not None}
    return parse_filters(by_location) + parse_filters(filters)


def parse_filters(filters: Filters | None) -> list[Condition]:
    """The conditions of `filters` (all must hold; parsed conditions pass through); ValueError for an unknown key or
    an unusable value."""
    if isinstance(filters, Sequence):
        return list(filters)
    conditions = []
    for key, value in (filters or {}).items():
        if key not in FILTER_KEYS:
            raise InputError(f"unknown filter field {key!r}; allowed: {', '.join(FILTER_KEYS)}")
        values = filter_values(key, value)
        if key == PATH_PREFIX:
            if len(values) != 1:
                raise InputError(f"filter {key!r} takes one prefix, got {value!r}")
            conditions.append(Condition(PREFIX_FIELD, "prefix", values))
        else:
            conditions.append(Condition(FILTER_FIELDS.get(key, key), "value" if len(values) == 1 else "any", values))
    return conditions


def qdrant_rrf_k(rrf_k: int) -> int:
    """Qdrant's RRF constant for our (the paper's) k: Qdrant scores rank r with 1 / (k + r - 1)."""
    return rrf_k + 1


def check_fusion(fusion: str, rrf_k: int, weights: Sequence[float] | None) -> list[float] | None:
    """Validate hybrid fusion parameters; the leg weights (dense, sparse) as a list, or None."""
    if fusion not in ("rrf", "dbsf"):
        raise ConfigError(f"unknown fusion {fusion!r}; allowed: rrf, dbsf")
    if fusion == "rrf" and (not isinstance(rrf_k, int) or rrf_k < 1):
        raise ConfigError(f"rrf_k must be a positive integer, got {rrf_k!r}")
    if weights is None:
        return None
    if fusion != "rrf":
        raise ConfigError("leg weights apply to RRF fusion only (Qdrant's DBSF takes no weights)")
    if len(weights) != 2 or any(weight <= 0 for weight in weights):
        raise ConfigError(f"weights must be two positive numbers (dense, sparse), got {weights!r}")
    return [float(weight) for weight in weights]


@dataclass(frozen=True)
class HybridQuery:
    """A validated hybrid search: a dense and a sparse leg of `prefetch` points each (both filtered), fused by
    `fusion` with Qdrant's RRF constant `rrf_k` and the legs' `weights` (rrf only)."""

    dense: Sequence[float]
    sparse: SparseVector
    top_k: int
    filters: Filters | None
    prefetch: int
    fusion: FusionMethod
    rrf_k: int
    weights: list[float] | None
    with_vectors: bool


@dataclass(frozen=True)
class HnswSettings:
    m: int = 16
    ef_construct: int = 100
    ef: int = 128


def new_index_version() -> str:
    """A fresh index version: sortable by time, unique across writers."""
    return f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%S.%fZ')}-{uuid.uuid4().hex[:8]}"


def is_connection_error(error: BaseException) -> bool:
    """True when the error (or one it was raised from) means the store's server could not be reached."""
    kinds: list[type[BaseException]] = [ConnectionError, TimeoutError]
    try:
        import httpx

        kinds.append(httpx.TransportError)
    except ImportError:  # pragma: no cover
        pass
    try:
        from qdrant_client.http.exceptions import ResponseHandlingException

        kinds.append(ResponseHandlingException)
    except ImportError:  # pragma: no cover
        pass
    seen = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, tuple(kinds)):
            return True
        if type(current).__name__ in ("RpcError", "_InactiveRpcError"):  # grpc, without importing it
            return True
        current = current.__cause__ or current.__context__
    return False


def store_unreachable(where: str, error: BaseException) -> StoreUnavailable:
    """The error of a store server that cannot be reached: names the store (`where`) and the setting to fix."""
    return StoreUnavailable(f"vector store unreachable: {where}: {error}. Start the Qdrant server, or point "
                            "RAG_QDRANT_URL at a reachable one (unset it to use the embedded store)")


def collection_name(model_id: str, dimension: int) -> str:
    """Collection of one embedding model, e.g. 'chunks__sentence-transformers_all-minilm-l6-v2__384'."""
    model = re.sub(r"[^a-z0-9_-]+", "_", model_id.lower()).strip("_")
    return f"chunks__{model}__{dimension}"


class VectorStore(ABC):
    """Chunks of one collection.

    `filters` (see FILTER_KEYS and parse_filters) apply inside every search leg. `with_vectors` fills Hit.vector
    with the point's dense vector.
    """

    collection: str
    dimension: int

    @abstractmethod
    def upsert(self, points: Sequence[IndexPoint]) -> None:
        """Insert or overwrite points by id."""

    @abstractmethod
    def delete_shas(self, shas: Sequence[str]) -> None:
        """Delete every point of these documents."""

    @abstractmethod
    def relabel(self, sha: str, paths: list[str], tags: list[str], sources: list[str], fields: list[str]) -> None:
        """Set payload `paths`, `path` (the first one), `tags` and `sources` on every point of a document."""

    @abstractmethod
    def shard_state(self, shard: str) -> dict[str, IndexedDocument]:
        """sha -> what the index holds of every document with points in the shard."""

    @abstractmethod
    def shard_chunks(self, shard: str) -> dict[str, IndexedChunk]:
        """point id -> (sha, hash of the text) of every point in the shard."""

    @abstractmethod
    def drop(self) -> None:
        """Delete the whole collection (an old index generation) and close the store."""

    @abstractmethod
    def get(self, ids: Sequence[str]) -> list[Hit]:
        """The points with these ids (score 0), in no particular order; missing ids are skipped."""

    @abstractmethod
    def count(self, *, shard: str | None = None, sha: str | Sequence[str] | None = None,
              filters: Filters | None = None) -> int:
        """Exact number of points, optionally of one shard and/or document (or any of several), and of those
        `filters` allow."""

    @abstractmethod
    def search_dense(
        self, vector: Sequence[float], top_k: int = 10, filters: Filters | None = None, *, with_vectors: bool = False
    ) -> list[Hit]:
        """Nearest points by cosine similarity of the dense vector."""

    @abstractmethod
    def search_sparse(
        self, vector: SparseVector, top_k: int = 10, filters: Filters | None = None, *, with_vectors: bool = False
    ) -> list[Hit]:
        """Best points by BM25 (query weights times the IDF Qdrant computes)."""

    def search_hybrid(
        self, dense: Sequence[float], sparse: SparseVector, top_k: int = 10, filters: Filters | None = None,
        prefetch: int = 50, fusion: FusionMethod = "rrf", rrf_k: int = 60, weights: tuple[float, float] | None = None,
        *, with_vectors: bool = False,
    ) -> list[Hit]:
        """One query: the best `prefetch` dense and the best `prefetch` sparse points (both legs filtered), fused
        inside Qdrant.

        rrf: score = sum over legs of 1 / (rrf_k + rank / weight), rank 1-based: with weight 1 the RRF of the
        original paper (Cormack et al., k=60). Qdrant's own constant is one more (its formula is
        1 / (rank / weight + k - 1)), so the backends send k = rrf_k + 1. dbsf: each leg's scores normalised by
        mean ± 3 sample standard deviations, then summed. `weights` (dense, sparse) apply to rrf only.
        """
        leg_weights = check_fusion(fusion, rrf_k, weights)
        return self._search_hybrid(HybridQuery(dense, sparse, top_k, filters, prefetch, fusion, qdrant_rrf_k(rrf_k),
                                               leg_weights, with_vectors))

    @abstractmethod
    def _search_hybrid(self, query: HybridQuery) -> list[Hit]:
        """The hybrid search of a validated query, in the backend's API."""

    @abstractmethod
    def optimize(self) -> None:
        """Bring indexes up to date after a bulk load."""

    def compact(self) -> None:
        """Make deleted points' payloads leave the store's files (RAG_COMPACT_AFTER_PURGE). Nothing by default: a
        Qdrant server vacuums deleted points by itself and keeps its write-ahead log to itself."""

    @contextmanager
    def holding(self) -> Iterator[None]:
        """Mark this opener, for the block, as one that only keeps the store from other processes (an ingest's
        hold): compaction does not wait for it. Nothing by default (a server store is shared)."""
        yield

    @abstractmethod
    def info(self) -> dict[str, Any]:
        """Collection facts for operators: points, segments, indexed vectors, payload indexes, index version."""

    @abstractmethod
    def index_version(self) -> str:
        """An opaque version of the collection's contents ("0" before the first change): caches keyed on it
        are invalid once it differs."""

    @abstractmethod
    def mark_changed(self) -> str:
        """Record that the contents changed (a new index version, returned); called by every writer."""

    @abstractmethod
    def close(self) -> None:
        """Release the store."""
