"""The vector_index stage: upsert new documents' points, delete purged documents' points, relabel (paths, tags)
moved or re-tagged documents in place, and check the shard's points against the sidecar's chunk counts.

It reconciles the index with the embedding files by point counts per document, so a half-written document is
rewritten."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

from rag_pipeline.index.sidecar import Sidecar
from rag_pipeline.index.sparse import encode_document
from rag_pipeline.index.vector_store import IndexedDocument, IndexPoint, VectorStore, label_payload
from rag_pipeline.ingest.chunk import read_chunks
from rag_pipeline.ingest.embed import contextual_text, document_name, read_vectors
from rag_pipeline.ingest.stage import StageFigures, StageReport, stored_tags, stores
from rag_pipeline.settings import Settings

UPSERT_BATCH = 1024


def build_points(settings: Settings, shard: str, sha: str, row: dict, ingested_at: str) -> list[IndexPoint]:
    pieces = read_chunks(settings, shard, sha)
    vectors = read_vectors(settings, shard, sha)
    name = document_name(row, sha)
    return [
        IndexPoint(
            id=chunk.chunk_id,
            dense=vector.tolist(),
            sparse=encode_document(contextual_text(name, chunk)),
            payload={
                "text": chunk.text, "window_text": chunk.window_text,
                **label_payload(list(row["paths"]), stored_tags(row)),
                "heading_path": chunk.heading_path, "line_start": chunk.line_start, "page": chunk.page,
                "chunk_index": chunk.chunk_index, "sha": sha, "shard": shard, "doc_type": row["doc_type"],
                "ingested_at": ingested_at,
            },
        )
        for chunk, vector in zip(pieces, vectors, strict=True)
    ]


def sync_vector_index(settings: Settings, store: VectorStore, shards: Iterable[str], sidecar: Sidecar) -> StageReport:
    """Upsert new documents' points, delete purged documents' points, and relabel (paths, tags) the points of
    documents that were moved, copied or re-tagged, without re-embedding them."""
    started = time.perf_counter()
    report = StageReport("vector_index", sorted(shards))
    vectors_store = stores(settings)["embeddings"]
    ingested_at = datetime.now(UTC).isoformat(timespec="seconds")
    pending: list[IndexPoint] = []
    upserted = deleted = 0
    for shard in report.shards:
        wanted = vectors_store.shas(shard)
        state = store.shard_state(shard)
        vanished = sorted(set(state) - wanted)
        if vanished:
            store.delete_shas(vanished)
            deleted += sum(state[sha][0] for sha in vanished)
            report.purged += vanished
        rows = sidecar.documents_by_sha(sorted(wanted))
        for sha in sorted(wanted):
            row = rows.get(sha)
            if row is None:  # purged from the sidecar by a later raw run; its vectors go next time
                continue
            held = state.get(sha, IndexedDocument(0, [], []))
            expected = row["chunks"] or 0
            moved = sorted(held.paths) != sorted(row["paths"])
            retagged = sorted(held.tags) != stored_tags(row)
            if held.points != expected:
                if held.points:  # partly written or chunked differently: rewrite the document's points
                    store.delete_shas([sha])
                    deleted += held.points
                pending += build_points(settings, shard, sha, row, ingested_at)
                report.added.append(sha)
            elif expected and (moved or retagged):
                store.relabel(sha, list(row["paths"]), stored_tags(row))
                report.moved += [sha] if moved else []
                report.retagged += [sha] if retagged else []
            else:
                report.skipped += 1
            if len(pending) >= UPSERT_BATCH:
                store.upsert(pending)
                upserted, pending = upserted + len(pending), []
    if pending:
        store.upsert(pending)
        upserted += len(pending)
    if upserted or deleted or report.moved or report.retagged:
        store.mark_changed()
    optimize_seconds = 0.0
    if upserted:
        begin = time.perf_counter()
        store.optimize()
        optimize_seconds = time.perf_counter() - begin
    report.check_failures = count_mismatches(store, report.shards, sidecar)
    report.chunks = upserted
    report.seconds = time.perf_counter() - started
    report.figures = StageFigures(points_upserted=upserted, points_deleted=deleted, collection_points=store.count(),
                                  optimize_seconds=round(optimize_seconds, 3))
    return report


def count_mismatches(store: VectorStore, shards: Sequence[str], sidecar: Sidecar) -> list[str]:
    """Shards whose point count differs from the chunk count recorded in the sidecar."""
    expected = {row["shard"]: row["chunks"] for row in sidecar.query(
        "SELECT shard, coalesce(sum(chunks), 0) AS chunks FROM documents WHERE status = 'ok' GROUP BY shard")}
    mismatches = []
    for shard in shards:
        points = store.count(shard=shard)
        if points != expected.get(shard, 0):
            mismatches.append(f"shard {shard}: {points} points in the collection, "
                              f"{expected.get(shard, 0)} chunks in the sidecar")
    return mismatches

