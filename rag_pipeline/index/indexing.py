"""Index stages of the shard sync: embeddings -> vector_index -> metadata_sidecar, and the shard status check.

Like the document stages (rag_pipeline.sync), each reconciles what it holds for a shard with its input:
the embeddings stage with the chunk files, the vector index with the embedding files (by point counts per
document, so a half-written document is rewritten), the sidecar catalogue with the chunk files.
"""

from __future__ import annotations

import io
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime

import numpy as np
from tqdm import tqdm

from rag_pipeline.chunking import Chunk
from rag_pipeline.embed import Embedder, EmbeddingCache, embed_texts
from rag_pipeline.index.sidecar import Sidecar
from rag_pipeline.index.sparse import encode_document
from rag_pipeline.index.vector_store import IndexedDocument, IndexPoint, VectorStore, label_payload
from rag_pipeline.settings import Settings
from rag_pipeline.sources import Manifest
from rag_pipeline.sync import StageReport, describe, label_changes, read_chunks, reconcile, stored_tags, stores

EMBED_SLICE = 256  # texts per embedding call: bounds memory and lost work on a crash, drives the progress bar
UPSERT_BATCH = 1024


def contextual_text(document_name: str, chunk: Chunk) -> str:
    """What gets embedded: "path > heading path" on the first line, then the chunk text."""
    context = " > ".join(part for part in (document_name, chunk.heading_path) if part)
    return f"{context}\n{chunk.text}" if context else chunk.text


def document_name(row: dict | None, sha: str) -> str:
    """The document's path relative to its root, for the embedded context line."""
    return row["rel_path"] if row and row.get("rel_path") else describe(row, sha)


def sync_embeddings(
    settings: Settings, embedder: Embedder, cache: EmbeddingCache, shards: Iterable[str], sidecar: Sidecar,
    *, progress: bool = False,
) -> StageReport:
    """Embed the chunks of new documents, batched across documents, reusing cached vectors."""
    started = time.perf_counter()
    report = StageReport("embeddings", sorted(shards))
    all_stores = stores(settings)
    chunk_store, vectors_store = all_stores["chunks"], all_stores["embeddings"]
    todo = reconcile(report, chunk_store.shas, vectors_store.shas, vectors_store)
    known = sidecar.documents_by_sha([sha for _, sha in todo])
    totals = {"computed": 0, "cached": 0, "seconds": 0.0, "chunks": 0}
    batch: list[tuple[str, str, int]] = []  # (shard, sha, chunk count) of the documents in `texts`
    texts: list[str] = []

    def embed_batch() -> None:
        """Embed the pending texts and write the vectors of every document they complete."""
        vectors, stats = embed_texts(embedder, texts, cache)
        totals["computed"] += stats.computed
        totals["cached"] += stats.cached
        totals["seconds"] += stats.seconds
        offset = 0
        for shard, sha, count in batch:
            buffer = io.BytesIO()
            np.save(buffer, vectors[offset:offset + count].reshape(count, embedder.dimension))
            vectors_store.write_bytes(shard, sha, "npy", buffer.getvalue())
            report.added.append(sha)
            offset += count
        bar.update(len(texts))
        batch.clear()
        texts.clear()

    expected = sum((known.get(sha) or {}).get("chunks") or 0 for _, sha in todo)
    with tqdm(total=expected, desc="embed", unit="chunk", disable=not progress or not todo) as bar:
        for shard, sha in todo:
            pieces = read_chunks(settings, shard, sha)
            name = document_name(known.get(sha), sha)
            texts.extend(contextual_text(name, chunk) for chunk in pieces)
            batch.append((shard, sha, len(pieces)))
            totals["chunks"] += len(pieces)
            if len(texts) >= EMBED_SLICE:
                embed_batch()
        if batch:
            embed_batch()
    report.chunks = totals["chunks"]
    report.seconds = time.perf_counter() - started
    report.stats = {
        "vectors_computed": totals["computed"], "vectors_cached": totals["cached"],
        "embed_seconds": round(totals["seconds"], 3),
        "chunks_per_second": round(report.chunks / report.seconds, 1) if report.seconds else 0.0,
    }
    return report


def read_vectors(settings: Settings, shard: str, sha: str) -> np.ndarray:
    return np.load(stores(settings)["embeddings"].path(shard, sha, "npy"))


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
    report.stats = {"points_upserted": upserted, "points_deleted": deleted, "collection_points": store.count(),
                    "optimize_seconds": round(optimize_seconds, 3)}
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


def sync_catalogue(settings: Settings, shards: Iterable[str], sidecar: Sidecar) -> StageReport:
    """Store every document's chunk and redaction rows in the sidecar; drop rows of vanished documents."""
    started = time.perf_counter()
    report = StageReport("metadata_sidecar", sorted(shards))
    all_stores = stores(settings)
    chunk_store, redacted = all_stores["chunks"], all_stores["redacted"]
    chunk_set = settings.chunking_id
    replaced: list[str] = []
    chunk_rows: list[dict] = []
    redaction_rows: list[dict] = []
    for shard in report.shards:
        wanted = chunk_store.shas(shard)
        held = sidecar.catalogued_shas(shard, chunk_set)
        vanished = sorted(sidecar.catalogued_shas(shard) - wanted)
        report.purged += vanished
        report.skipped += len(wanted & held)
        for sha in sorted(wanted - held):
            report.added.append(sha)
            chunk_rows += [
                {"chunk_id": c.chunk_id, "sha": sha, "shard": shard, "chunk_set": chunk_set,
                 "chunk_index": c.chunk_index, "heading_path": c.heading_path, "line_start": c.line_start,
                 "page": c.page, "chars": len(c.text)}
                for c in read_chunks(settings, shard, sha)
            ]
            counts = redacted.read_json(shard, sha, "json")["counts"]
            redaction_rows += [{"sha": sha, "shard": shard, "kind": kind, "count": n} for kind, n in counts.items()]
        replaced += vanished
    replaced += report.added
    sidecar.replace_catalogue(replaced, chunk_rows, redaction_rows)
    finished = datetime.now(UTC).replace(tzinfo=None)
    sidecar.upsert([{"sha": sha, "chunk_set": chunk_set, "ingested_at": finished} for sha in report.added])
    report.chunks = len(chunk_rows)
    report.seconds = time.perf_counter() - started
    return report


def pending_shards(settings: Settings, manifest: Manifest, sidecar: Sidecar, store: VectorStore) -> list[str]:
    """Shards whose stored state (sidecar, any stage's artifacts, the vector index) differs from the manifest."""
    documents = manifest.documents()
    known = sidecar.documents()
    all_stores = stores(settings)
    pending = []
    for shard in settings.shard_keys:
        wanted = {sha for sha in documents if settings.shard_of(sha) == shard}
        stored = {sha for sha, row in known.items() if row["shard"] == shard}
        converted = wanted - all_stores["markdown"].shas(shard, "error.json")
        relabelled = any(any(label_changes(known[sha], documents[sha])) for sha in wanted & stored)
        in_sync = (
            wanted == stored
            and not relabelled
            and all_stores["raw"].shas(shard) == wanted
            and all_stores["markdown"].shas(shard) == wanted
            and all(all_stores[stage].shas(shard) == converted for stage in ("redacted", "chunks", "embeddings"))
            and sidecar.catalogued_shas(shard, settings.chunking_id) == converted
            and index_matches(store.shard_state(shard), {sha: known[sha] for sha in converted & stored})
        )
        if not in_sync:
            pending.append(shard)
    return pending


def index_matches(state: dict[str, IndexedDocument], rows: dict[str, dict]) -> bool:
    """True when the index holds exactly each document's chunk count, under its current paths and tags."""
    expected = {sha: (row["chunks"], sorted(row["paths"]), stored_tags(row))
                for sha, row in rows.items() if row["chunks"]}
    return {sha: (held.points, sorted(held.paths), sorted(held.tags)) for sha, held in state.items()} == expected
