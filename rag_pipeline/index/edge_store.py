"""Embedded vector store: a qdrant-edge shard on disk, Qdrant's engine in-process with no server.

A shard can be open in one process only. An exclusive lock file next to the shard turns a second process's
attempt into a clear `StoreLocked` error; within a process, every opener of a path shares one store,
which closes when the last of them closes it.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from rag_pipeline.errors import StoreLocked
from rag_pipeline.file_lock import LockHeld, acquire
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

FULL_SCAN_THRESHOLD_KB = 10_000  # Qdrant's default: below this size a segment is searched exactly
# Segments the optimizer keeps before it merges the smallest: the upper bound of Qdrant's default, which is half the
# core count between 2 and 8. With 2, once a later ingest's small segment passed the indexing threshold, the
# optimizer merged it into the collection's largest segment and rebuilt that whole graph (288 s at 231k points, for
# 230 new ones); with room for more segments it indexes the new one alone (docs/scaling-out.md).
SEGMENTS = 8
SCROLL_PAGE = 1_000

_open_stores: dict[Path, EdgeStore] = {}
_registry_lock = threading.Lock()


def open_edge_store(path: Path, collection: str, dimension: int, hnsw: HnswSettings) -> EdgeStore:
    """The store at `path`, shared with any other opener in this process; pair every call with close()."""
    path = path.resolve()
    with _registry_lock:
        store = _open_stores.get(path)
        if store is None:
            store = _open_stores[path] = EdgeStore(path, collection, dimension, hnsw)
        store.openers += 1
        return store


class EdgeStore(VectorStore):
    """A qdrant-edge shard at `path`, created with the collection's layout on first open."""

    def __init__(self, path: Path, collection: str, dimension: int, hnsw: HnswSettings) -> None:
        self.path = path
        self.collection = collection
        self.dimension = dimension
        self.openers = 0
        self.holders = 0  # openers that only keep the store from other processes (VectorStore.holding)
        self._hnsw = hnsw
        self._search_params = qe.SearchParams(hnsw_ef=hnsw.ef)
        self._lock_fd = _lock(path)
        try:
            _finish_compaction(path)
            self._shard = _open_shard(path, dimension, hnsw)
        except BaseException:
            os.close(self._lock_fd)
            raise

    def upsert(self, points: Sequence[IndexPoint]) -> None:
        for start in range(0, len(points), BATCH_SIZE):
            batch = [_point(point) for point in points[start : start + BATCH_SIZE]]
            self._shard.update(qe.UpdateOperation.upsert_points(batch))

    def delete_shas(self, shas: Sequence[str]) -> None:
        if shas:
            condition = qe.FieldCondition("sha", match=qe.MatchAny(list(shas)))
            self._shard.update(qe.UpdateOperation.delete_points_by_filter(qe.Filter(must=[condition])))

    def relabel(self, sha: str, paths: list[str], tags: list[str], sources: list[str], fields: list[str]) -> None:
        payload = label_payload(paths, tags, sources, fields)
        self._shard.update(qe.UpdateOperation.set_payload_by_filter(_filter({"sha": sha}), payload))

    def shard_state(self, shard: str) -> dict[str, IndexedDocument]:
        state: dict[str, IndexedDocument] = {}
        offset = None
        while True:
            request = qe.ScrollRequest(
                offset=offset, limit=SCROLL_PAGE, filter=_filter({"shard": shard}),
                with_payload=LABEL_FIELDS
            )
            records, offset = self._shard.scroll(request)
            for record in records:
                count_point(state, record.payload)
            if offset is None:
                return state

    def shard_chunks(self, shard: str) -> dict[str, IndexedChunk]:
        chunks: dict[str, IndexedChunk] = {}
        offset = None
        while True:
            request = qe.ScrollRequest(offset=offset, limit=SCROLL_PAGE, filter=_filter({"shard": shard}),
                                       with_payload=["sha", TEXT_FIELD])
            records, offset = self._shard.scroll(request)
            for record in records:
                chunks[str(record.id)] = IndexedChunk(record.payload["sha"], text_digest(record.payload[TEXT_FIELD]))
            if offset is None:
                return chunks

    def get(self, ids: Sequence[str]) -> list[Hit]:
        records = self._shard.retrieve(list(ids), with_payload=True, with_vector=False)
        return [Hit(str(record.id), 0.0, record.payload or {}) for record in records]

    def count(self, *, shard: str | None = None, sha: str | Sequence[str] | None = None,
              filters: Filters | None = None) -> int:
        return self._shard.count(qe.CountRequest(exact=True, filter=_filter(count_conditions(shard, sha, filters))))

    def search_dense(
        self, vector: Sequence[float], top_k: int = 10, filters: Filters | None = None, *, with_vectors: bool = False
    ) -> list[Hit]:
        query = qe.Query.Nearest(list(vector), using=DENSE)
        return self._query(
            top_k, with_vectors, query=query, filter=_filter(filters), params=self._search_params
        )

    def search_sparse(
        self, vector: SparseVector, top_k: int = 10, filters: Filters | None = None, *, with_vectors: bool = False
    ) -> list[Hit]:
        query = qe.Query.Nearest(_sparse(vector), using=SPARSE)
        return self._query(top_k, with_vectors, query=query, filter=_filter(filters))

    def _search_hybrid(self, query: HybridQuery) -> list[Hit]:
        condition = _filter(query.filters)
        prefetches = [
            qe.Prefetch(
                query.prefetch,
                query=qe.Query.Nearest(list(query.dense), using=DENSE),
                params=self._search_params,
                filter=condition,
            ),
            qe.Prefetch(query.prefetch, query=qe.Query.Nearest(_sparse(query.sparse), using=SPARSE), filter=condition),
        ]
        fusion = qe.Fusion.Rrf(k=query.rrf_k, weights=query.weights) if query.fusion == "rrf" else qe.Fusion.Dbsf()
        return self._query(query.top_k, query.with_vectors, query=fusion, prefetches=prefetches)

    def optimize(self) -> None:
        """Run the segment optimizers (merging, HNSW building, vacuum), which qdrant-edge never runs by itself."""
        self._shard.optimize()

    @contextmanager
    def holding(self) -> Iterator[None]:
        with _registry_lock:
            self.holders += 1
        try:
            yield
        finally:
            with _registry_lock:
                self.holders -= 1

    def compact(self) -> None:
        """Rewrite the shard with its live points only, in a new folder swapped in for the old one. Deleting a point
        leaves its payload (the chunk's text) in the segment files until an optimizer vacuums them and in the
        write-ahead log until later writes overwrite it; the new shard's files never held it. Refused (StoreLocked)
        while another opener in this process uses the store (an ingest's hold does not count: it uses nothing)."""
        with _registry_lock:
            if self.openers - self.holders > 1:
                raise StoreLocked(f"the embedded vector store {self.path} is still open in this process")
            fresh, retired = _compaction_paths(self.path)
            shutil.rmtree(fresh, ignore_errors=True)
            shard = _open_shard(fresh, self.dimension, self._hnsw)
            try:
                offset = None
                while True:
                    request = qe.ScrollRequest(offset=offset, limit=SCROLL_PAGE, with_payload=True, with_vector=True)
                    records, offset = self._shard.scroll(request)
                    if records:
                        shard.update(qe.UpdateOperation.upsert_points(
                            [qe.Point(record.id, record.vector, record.payload) for record in records]))
                    if offset is None:
                        break
                shard.optimize()
                shard.flush()
            finally:
                shard.close()
            self._shard.close()
            os.replace(self.path, retired)
            os.replace(fresh, self.path)
            shutil.rmtree(retired)
            self._shard = _open_shard(self.path, self.dimension, self._hnsw)

    def info(self) -> dict[str, Any]:
        shard = self._shard.info()
        return {"collection": self.collection, "backend": "embedded", "path": str(self.path),
                "points": shard.points_count, "segments": shard.segments_count,
                "indexed_vectors": shard.indexed_vectors_count, "status": "ok",
                "payload_indexes": sorted(shard.payload_schema), "index_version": self.index_version()}

    def index_version(self) -> str:
        try:
            return self._version_path.read_text().strip() or "0"
        except FileNotFoundError:
            return "0"

    def mark_changed(self) -> str:
        version = new_index_version()
        temporary = self._version_path.with_suffix(".tmp")
        temporary.write_text(version + "\n")
        temporary.replace(self._version_path)
        return version

    @property
    def _version_path(self) -> Path:
        """The index version lives in a file next to the shard (qdrant-edge has no collection metadata)."""
        return self.path.with_name(self.path.name + ".version")

    def drop(self) -> None:
        """Close the shard and delete its folder, version and lock files. Refused (StoreLocked) while another
        opener in this process still uses it."""
        with _registry_lock:
            if self.openers > 1:
                raise StoreLocked(f"the embedded vector store {self.path} is still open in this process")
            self.openers = 0
            _open_stores.pop(self.path, None)
            self._shard.close()
            shutil.rmtree(self.path, ignore_errors=True)
            self._version_path.unlink(missing_ok=True)
            self.path.with_name(self.path.name + ".lock").unlink(missing_ok=True)
            os.close(self._lock_fd)

    def close(self) -> None:
        with _registry_lock:
            self.openers -= 1
            if self.openers > 0:
                return
            del _open_stores[self.path]
            self._shard.close()
            os.close(self._lock_fd)

    def _query(self, limit: int, with_vectors: bool, **request: Any) -> list[Hit]:
        with_vector = [DENSE] if with_vectors else False
        points = self._shard.query(qe.QueryRequest(limit, with_payload=True, with_vector=with_vector, **request))
        return [
            Hit(str(point.id), point.score, point.payload or {}, _dense(point.vector) if with_vectors else None)
            for point in points
        ]


def _lock(path: Path) -> int:
    """File descriptor holding the exclusive lock of the shard at path, recording this process in the file."""
    try:
        return acquire(path.with_name(path.name + ".lock"), wait=False, record=True)
    except LockHeld as held:
        raise StoreLocked(
            f"the embedded vector store {path} is open in {held.holder}. It allows one process at a time: "
            "stop that process, or use a Qdrant server: set RAG_QDRANT_URL"
        ) from None


def _compaction_paths(path: Path) -> tuple[Path, Path]:
    """(the folder a compaction builds the new shard in, the folder the old shard moves to before it is deleted)."""
    return path.with_name(path.name + ".compacting"), path.with_name(path.name + ".retired")


def _finish_compaction(path: Path) -> None:
    """After a compaction killed between its two renames, put the old shard back (a later one compacts again)."""
    _, retired = _compaction_paths(path)
    if retired.is_dir() and not path.exists():
        os.replace(retired, path)
    shutil.rmtree(retired, ignore_errors=True)


def _open_shard(path: Path, dimension: int, hnsw: HnswSettings) -> qe.EdgeShard:
    config = qe.EdgeConfig(
        vectors={DENSE: qe.EdgeVectorParams(size=dimension, distance=qe.Distance.Cosine)},
        sparse_vectors={SPARSE: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)},
        hnsw_config=qe.HnswIndexConfig(
            m=hnsw.m, ef_construct=hnsw.ef_construct, full_scan_threshold=FULL_SCAN_THRESHOLD_KB
        ),
        optimizers=qe.EdgeOptimizersConfig(default_segment_number=SEGMENTS),
    )
    if path.is_dir() and any(path.iterdir()):
        shard = qe.EdgeShard.load(str(path), config)
        _add_missing_indexes(shard)  # shards created before an index was added to the layout
        return shard
    shard = qe.EdgeShard.create(str(path), config)
    for field in KEYWORD_FIELDS:
        shard.update(qe.UpdateOperation.create_field_index(field, qe.PayloadSchemaType.Keyword))
    shard.update(qe.UpdateOperation.create_field_index(PREFIX_FIELD, qe.KeywordIndexParams(prefix=True)))
    text_index = qe.TextIndexParams(tokenizer=qe.TokenizerType.Word, lowercase=True)
    shard.update(qe.UpdateOperation.create_field_index(TEXT_FIELD, text_index))
    return shard


def _add_missing_indexes(shard: qe.EdgeShard) -> None:
    """Create the keyword indexes and the prefix index on paths that an existing shard lacks (filters work without
    them, by reading payloads, but slower)."""
    schema = shard.info().payload_schema
    for field in KEYWORD_FIELDS:
        if field not in schema:
            shard.update(qe.UpdateOperation.create_field_index(field, qe.PayloadSchemaType.Keyword))
    prefix_index = schema.get(PREFIX_FIELD)
    if prefix_index is None or prefix_index.params is None or not getattr(prefix_index.params, "prefix", False):
        shard.update(qe.UpdateOperation.create_field_index(PREFIX_FIELD, qe.KeywordIndexParams(prefix=True)))


def _filter(filters: Filters | None) -> qe.Filter | None:
    conditions = parse_filters(filters)
    if not conditions:
        return None
    return qe.Filter(must=[qe.FieldCondition(condition.key, match=_match(condition)) for condition in conditions])


def _match(condition: Condition) -> qe.MatchValue | qe.MatchAny | qe.MatchPrefix:
    if condition.kind == "prefix":
        return qe.MatchPrefix(condition.values[0])
    if condition.kind == "any":
        return qe.MatchAny(list(condition.values))
    return qe.MatchValue(condition.values[0])


def _dense(vector: Any) -> tuple[float, ...] | None:
    """The dense vector of a point's named vectors (qdrant-edge gives a list of floats)."""
    if isinstance(vector, dict):
        vector = vector.get(DENSE)
    return tuple(vector) if vector is not None else None


def _sparse(vector: SparseVector) -> qe.SparseVector:
    return qe.SparseVector(vector.indices, vector.values)


def _point(point: IndexPoint) -> qe.Point:
    return qe.Point(point.id, {DENSE: list(point.dense), SPARSE: _sparse(point.sparse)}, point.payload)
