"""Vector store on a Qdrant server (or cluster) through qdrant-client; any number of processes may use it.

qdrant-client's `:memory:` location runs the same API in-process, which is how this backend is tested.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from qdrant_client import QdrantClient, models

from rag_pipeline.index.vector_store import (  # the collection layout both backends share
    BATCH_SIZE,
    DENSE,
    KEYWORD_FIELDS,
    LABEL_FIELDS,
    PREFIX_FIELD,
    SPARSE,
    TEXT_FIELD,
    Condition,
    Filters,
    Hit,
    HnswSettings,
    HybridQuery,
    IndexedChunk,
    IndexedDocument,
    IndexPoint,
    SparseVector,
    VectorStore,
    count_conditions,
    count_point,
    label_payload,
    new_index_version,
    parse_filters,
    text_digest,
)

TIMEOUT_SECONDS = 60
SCROLL_PAGE = 1_000
INDEX_VERSION_KEY = "rag_index_version"  # collection metadata key


@functools.cache
def shared_memory_client() -> QdrantClient:
    """One process-wide `:memory:` client for RAG_QDRANT_URL=":memory:": its data lives as long as the process."""
    return QdrantClient(location=":memory:")


def connect(*, url: str | None, api_key: str | None, location: str | None) -> QdrantClient:
    """A client for the server at `url` (TLS when it is https://), or for a client `location` such as ":memory:"."""
    if location:
        return QdrantClient(location=location)
    return QdrantClient(url=url, api_key=api_key, timeout=TIMEOUT_SECONDS)


class ServerStore(VectorStore):
    """The collection on the client's server, created with its payload indexes if missing."""

    def __init__(self, client: QdrantClient, collection: str, dimension: int, hnsw: HnswSettings,
                 *, owns_client: bool = True) -> None:
        self.client = client
        self.owns_client = owns_client
        self.collection = collection
        self.dimension = dimension
        self._search_params = models.SearchParams(hnsw_ef=hnsw.ef)
        if not client.collection_exists(collection):
            self._create(hnsw)
        else:
            self._add_missing_indexes()

    def _create(self, hnsw: HnswSettings) -> None:
        self.client.create_collection(
            self.collection,
            vectors_config={
                DENSE: models.VectorParams(
                    size=self.dimension,
                    distance=models.Distance.COSINE,
                    hnsw_config=models.HnswConfigDiff(m=hnsw.m, ef_construct=hnsw.ef_construct),
                )
            },
            sparse_vectors_config={SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)},
        )
        for field in KEYWORD_FIELDS:
            self.client.create_payload_index(self.collection, field, models.PayloadSchemaType.KEYWORD)
        prefix_index = models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, prefix=True)
        self.client.create_payload_index(self.collection, PREFIX_FIELD, prefix_index)
        text_index = models.TextIndexParams(
            type=models.TextIndexType.TEXT, tokenizer=models.TokenizerType.WORD, lowercase=True
        )
        self.client.create_payload_index(self.collection, TEXT_FIELD, text_index)

    def _add_missing_indexes(self) -> None:
        """Create the keyword indexes and the prefix index on paths that an existing collection lacks (filters work
        without them, but slower)."""
        if type(getattr(self.client, "_client", None)).__name__ == "QdrantLocal":
            return  # the in-process mode keeps no payload indexes
        schema = self.client.get_collection(self.collection).payload_schema or {}
        for field in KEYWORD_FIELDS:
            if field not in schema:
                self.client.create_payload_index(self.collection, field, models.PayloadSchemaType.KEYWORD)
        prefix_index = schema.get(PREFIX_FIELD)
        if prefix_index is None or not getattr(prefix_index.params, "prefix", False):
            params = models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, prefix=True)
            self.client.create_payload_index(self.collection, PREFIX_FIELD, params)

    def upsert(self, points: Sequence[IndexPoint]) -> None:
        for start in range(0, len(points), BATCH_SIZE):
            batch = [_point(point) for point in points[start : start + BATCH_SIZE]]
            self.client.upsert(self.collection, batch, wait=True)

    def delete_shas(self, shas: Sequence[str]) -> None:
        if shas:
            condition = models.FieldCondition(key="sha", match=models.MatchAny(any=list(shas)))
            selector = models.FilterSelector(filter=models.Filter(must=[condition]))
            self.client.delete(self.collection, selector, wait=True)

    def relabel(self, sha: str, paths: list[str], tags: list[str], sources: list[str], fields: list[str]) -> None:
        payload = label_payload(paths, tags, sources, fields)
        self.client.set_payload(self.collection, payload, points=_filter({"sha": sha}), wait=True)

    def shard_state(self, shard: str) -> dict[str, IndexedDocument]:
        state: dict[str, IndexedDocument] = {}
        offset = None
        while True:
            records, offset = self.client.scroll(
                self.collection,
                scroll_filter=_filter({"shard": shard}),
                limit=SCROLL_PAGE,
                offset=offset,
                with_payload=LABEL_FIELDS,
            )
            for record in records:
                count_point(state, record.payload)
            if offset is None:
                return state

    def shard_chunks(self, shard: str) -> dict[str, IndexedChunk]:
        chunks: dict[str, IndexedChunk] = {}
        offset = None
        while True:
            records, offset = self.client.scroll(self.collection, scroll_filter=_filter({"shard": shard}),
                                                 limit=SCROLL_PAGE, offset=offset, with_payload=["sha", TEXT_FIELD])
            for record in records:
                chunks[str(record.id)] = IndexedChunk(record.payload["sha"], text_digest(record.payload[TEXT_FIELD]))
            if offset is None:
                return chunks

    def get(self, ids: Sequence[str]) -> list[Hit]:
        records = self.client.retrieve(self.collection, list(ids), with_payload=True)
        return [Hit(str(record.id), 0.0, record.payload or {}) for record in records]

    def count(self, *, shard: str | None = None, sha: str | Sequence[str] | None = None,
              filters: Filters | None = None) -> int:
        count_filter = _filter(count_conditions(shard, sha, filters))
        return self.client.count(self.collection, count_filter=count_filter, exact=True).count

    def search_dense(
        self, vector: Sequence[float], top_k: int = 10, filters: Filters | None = None, *, with_vectors: bool = False
    ) -> list[Hit]:
        return self._query(
            top_k, with_vectors, query=list(vector), using=DENSE, query_filter=_filter(filters),
            search_params=self._search_params,
        )

    def search_sparse(
        self, vector: SparseVector, top_k: int = 10, filters: Filters | None = None, *, with_vectors: bool = False
    ) -> list[Hit]:
        return self._query(top_k, with_vectors, query=_sparse(vector), using=SPARSE, query_filter=_filter(filters))

    def _search_hybrid(self, query: HybridQuery) -> list[Hit]:
        condition = _filter(query.filters)
        prefetches = [
            models.Prefetch(
                query=list(query.dense), using=DENSE, limit=query.prefetch, filter=condition, params=self._search_params
            ),
            models.Prefetch(query=_sparse(query.sparse), using=SPARSE, limit=query.prefetch, filter=condition),
        ]
        fusion: models.RrfQuery | models.FusionQuery
        if query.fusion == "rrf":
            fusion = models.RrfQuery(rrf=models.Rrf(k=query.rrf_k, weights=query.weights))
        else:
            fusion = models.FusionQuery(fusion=models.Fusion.DBSF)
        return self._query(query.top_k, query.with_vectors, query=fusion, prefetch=prefetches)

    def optimize(self) -> None:
        """Nothing to do: the server runs its optimizers by itself."""

    def info(self) -> dict[str, Any]:
        collection = self.client.get_collection(self.collection)
        return {"collection": self.collection, "backend": "server", "points": collection.points_count,
                "segments": collection.segments_count, "indexed_vectors": collection.indexed_vectors_count,
                "status": str(getattr(collection.status, "value", collection.status)),
                "payload_indexes": sorted(collection.payload_schema or {}),
                "index_version": str((collection.config.metadata or {}).get(INDEX_VERSION_KEY, "0"))}

    def index_version(self) -> str:
        metadata = self.client.get_collection(self.collection).config.metadata or {}
        return str(metadata.get(INDEX_VERSION_KEY, "0"))

    def mark_changed(self) -> str:
        version = new_index_version()
        self.client.update_collection(self.collection, metadata={INDEX_VERSION_KEY: version})
        return version

    def drop(self) -> None:
        self.client.delete_collection(self.collection)
        self.close()

    def close(self) -> None:
        if self.owns_client:
            self.client.close()

    def _query(self, limit: int, with_vectors: bool, **request: Any) -> list[Hit]:
        response = self.client.query_points(
            self.collection, limit=limit, with_payload=True, with_vectors=[DENSE] if with_vectors else False,
            **request,
        )
        return [
            Hit(str(point.id), point.score, point.payload or {}, _dense(point.vector) if with_vectors else None)
            for point in response.points
        ]


def _filter(filters: Filters | None) -> models.Filter | None:
    conditions = parse_filters(filters)
    if not conditions:
        return None
    return models.Filter(
        must=[models.FieldCondition(key=condition.key, match=_match(condition)) for condition in conditions]
    )


def _match(condition: Condition) -> models.MatchValue | models.MatchAny | models.MatchPrefix:
    if condition.kind == "prefix":
        return models.MatchPrefix(prefix=condition.values[0])
    if condition.kind == "any":
        return models.MatchAny(any=list(condition.values))
    return models.MatchValue(value=condition.values[0])


def _dense(vector: Any) -> tuple[float, ...] | None:
    """The dense vector of a point's named vectors."""
    if isinstance(vector, dict):
        vector = vector.get(DENSE)
    return tuple(float(value) for value in vector) if vector is not None else None


def _sparse(vector: SparseVector) -> models.SparseVector:
    return models.SparseVector(indices=vector.indices, values=vector.values)


def _point(point: IndexPoint) -> models.PointStruct:
    vector = {DENSE: list(point.dense), SPARSE: _sparse(point.sparse)}
    return models.PointStruct(id=point.id, vector=vector, payload=point.payload)
