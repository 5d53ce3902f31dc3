"""The vector_index stage: upsert new documents' points, delete purged documents' points, relabel (paths, tags,
sources) moved or re-tagged documents in place, and check the shard's points against the chunk artifacts.

A document is rewritten whenever the ids or the text hashes of its points differ from its chunk artifact (a
half-written document, or chunks made differently), and the check compares every point's id and text hash with
the artifacts, so stale text cannot pass it."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime

from rag_pipeline.fields.registry import filterable_fields
from rag_pipeline.index.sparse import CONTEXT_RADIUS, encode_document
from rag_pipeline.index.vector_store import (
    IndexedChunk,
    IndexedDocument,
    IndexPoint,
    VectorStore,
    label_payload,
    text_digest,
)
from rag_pipeline.ingest.chunk import document_name, read_chunks
from rag_pipeline.ingest.chunkers import Chunk, contextual_text, neighbourhood_texts
from rag_pipeline.ingest.embeddings import read_vectors
from rag_pipeline.ingest.redaction_rules import redact_path
from rag_pipeline.ingest.stage import StageFigures, StageReport, describe, stored_sources, stored_tags, stores
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar

UPSERT_BATCH = 1024
LABEL_BATCH = 20_000  # sidecar rows read at a time: one read for many small shards, bounded memory for big ones
FIELD_LABELS = "field_labels"  # the keys labelled_rows adds to a sidecar row: the filterable fields' labels,
SHOWN_PATHS = "shown_paths"  # and the paths as the points show them (secrets in them redacted)
MAX_REPORTED = 50  # check violations listed per run


def row_labels(row: dict) -> tuple[list[str], list[str], list[str], list[str]]:
    """A sidecar row's (paths, tags, sources, field labels) as the points carry them (rows from `labelled_rows`)."""
    return list(row[SHOWN_PATHS]), stored_tags(row), stored_sources(row), list(row.get(FIELD_LABELS) or [])


def shown_paths(settings: Settings, paths: list[str]) -> list[str]:
    """A document's paths as its points carry them (payload `path`, `paths`: what search results and citations
    show): secrets in them redacted. The sidecar keeps the real paths, by which the files are found."""
    return [redact_path(settings, path) for path in paths]


def labelled_rows(settings: Settings, sidecar: Sidecar, shas: list[str]) -> dict[str, dict]:
    """The sidecar rows of these documents, each with the "name=value" labels of its filterable fields and its
    shown paths."""
    with sidecar.kept():
        rows = sidecar.documents_by_sha(shas)
        labels = sidecar.field_labels(list(rows), filterable_fields(settings))
    return {sha: {**row, FIELD_LABELS: labels.get(sha, []), SHOWN_PATHS: shown_paths(settings, row["paths"])}
            for sha, row in rows.items()}


def points_label_changes(held: IndexedDocument, row: dict) -> tuple[bool, bool]:
    """(paths or sources differ, tags or field labels differ) between a document's points and its sidecar row."""
    paths, tags, sources, fields = row_labels(row)
    moved = sorted(held.paths) != sorted(paths) or sorted(held.sources) != sources
    return moved, sorted(held.tags) != tags or sorted(held.fields) != fields


def build_points(settings: Settings, shard: str, sha: str, row: dict, pieces: list[Chunk],
                 ingested_at: str) -> Iterator[IndexPoint]:
    """A document's points, one at a time (a point's vector as a list of floats takes ~10 KB)."""
    vectors = read_vectors(settings, shard, sha)
    name = document_name(settings, row, sha)
    contexts = neighbourhood_texts(pieces, CONTEXT_RADIUS)
    return (
        IndexPoint(
            id=chunk.chunk_id,
            dense=vector.tolist(),
            sparse=encode_document(contextual_text(name, chunk), context),
            payload={
                "text": chunk.text, "window_text": chunk.window_text, **label_payload(*row_labels(row)),
                "heading_path": chunk.heading_path, "line_start": chunk.line_start, "page": chunk.page,
                "chunk_index": chunk.chunk_index, "sha": sha, "shard": shard, "doc_type": row["doc_type"],
                "ingested_at": ingested_at,
            },
        )
        for chunk, vector, context in zip(pieces, vectors, contexts, strict=True)
    )


def shard_batch(by_shard: dict[str, set[str]], first: str, limit: int) -> list[str]:
    """Shard `first` and the shards after it (in `by_shard`'s order) whose documents together fit in `limit` (the
    first one whatever its size)."""
    shards = list(by_shard)
    batch: list[str] = []
    documents = 0
    for shard in shards[shards.index(first):]:
        if batch and documents + len(by_shard[shard]) > limit:
            break
        batch.append(shard)
        documents += len(by_shard[shard])
    return batch


def chunk_digests(pieces: list[Chunk]) -> dict[str, str]:
    """{chunk id: text hash}: what a document's points must hold."""
    return {chunk.chunk_id: text_digest(chunk.text) for chunk in pieces}


def expected_chunks(settings: Settings, shard: str, documents: Iterable[str]) -> dict[str, dict[str, str]]:
    """sha -> {chunk id: text hash} of the chunk artifact of each of `documents` that has one in the shard."""
    chunked = stores(settings)["chunks"].shas(shard) & set(documents)
    return {sha: chunk_digests(read_chunks(settings, shard, sha)) for sha in sorted(chunked)}


def held_chunks(store: VectorStore, shard: str) -> dict[str, dict[str, str]]:
    """sha -> {point id: text hash} of the points the index holds in the shard."""
    held: dict[str, dict[str, str]] = {}
    for point_id, chunk in store.shard_chunks(shard).items():
        held.setdefault(chunk.sha, {})[point_id] = chunk.text_digest
    return held


def sync_vector_index(settings: Settings, store: VectorStore, shards: Iterable[str], sidecar: Sidecar,
                      also_relabel: Sequence[VectorStore] = ()) -> StageReport:
    """Upsert new documents' points, delete purged documents' points, rewrite documents whose points differ from
    their chunks, and relabel (paths, tags, sources) the points of documents that were moved, copied, re-tagged
    or joined or left a source, without re-embedding them. `also_relabel`: other generations' stores (the active
    one while a new one is built), whose points get the same labels, so a key's scope holds there too."""
    started = time.perf_counter()
    report = StageReport("vector_index", sorted(shards))
    vectors_store = stores(settings)["embeddings"]
    ingested_at = datetime.now(UTC).isoformat(timespec="seconds")
    pending: list[IndexPoint] = []
    upserted = deleted = 0
    expected_by_shard: dict[str, dict[str, dict[str, str]]] = {}
    wanted_by_shard = {shard: vectors_store.shas(shard) for shard in report.shards}
    labelled: dict[str, dict] = {}
    loaded: list[str] = []  # the shards whose rows `labelled` holds
    for shard, wanted in wanted_by_shard.items():
        if shard not in loaded:  # the rows of this shard and the next ones, about LABEL_BATCH documents at a time
            loaded = shard_batch(wanted_by_shard, shard, LABEL_BATCH)
            labelled = labelled_rows(settings, sidecar, sorted(sha for name in loaded for sha in wanted_by_shard[name]))
        state = store.shard_state(shard)
        held = held_chunks(store, shard)
        vanished = sorted(set(state) - wanted)
        if vanished:
            store.delete_shas(vanished)
            deleted += sum(state[sha].points for sha in vanished)
            report.purged += vanished
        rows = {sha: labelled[sha] for sha in sorted(wanted) if sha in labelled}
        chunked = stores(settings)["chunks"].shas(shard)
        expected: dict[str, dict[str, str]] = {}
        expected_by_shard[shard] = expected
        for sha in sorted(wanted):
            row = rows.get(sha)
            if row is None:  # purged from the sidecar by a later raw run; its vectors go next time
                continue
            pieces = read_chunks(settings, shard, sha) if sha in chunked else None  # once: check and points
            if pieces is not None:
                expected[sha] = chunk_digests(pieces)
            have = held.get(sha, {})
            moved, retagged = points_label_changes(state.get(sha, IndexedDocument(0, [], [], [], [])), row)
            if have != expected.get(sha, {}):
                if have:  # partly written or chunked differently: rewrite the document's points
                    store.delete_shas([sha])
                    deleted += len(have)
                if pieces is None:  # its chunk artifact vanished under its points: this fails, naming the file
                    pieces = read_chunks(settings, shard, sha)
                for point in build_points(settings, shard, sha, row, pieces, ingested_at):
                    pending.append(point)
                    if len(pending) >= UPSERT_BATCH:
                        store.upsert(pending)
                        upserted, pending = upserted + len(pending), []
                report.added.append(sha)
            elif have and (moved or retagged):
                store.relabel(sha, *row_labels(row))
                report.moved += [sha] if moved else []
                report.retagged += [sha] if retagged else []
            else:
                report.skipped += 1
        for other in also_relabel:
            if relabel_to_match(other, shard, rows):
                other.mark_changed()
    if pending:
        store.upsert(pending)
        upserted += len(pending)
    if upserted or deleted or report.moved or report.retagged:
        store.mark_changed()
    optimize_seconds = 0.0
    compact = bool(report.purged) and settings.compact_after_purge  # points of vanished documents were deleted
    if upserted or compact:
        begin = time.perf_counter()
        if compact:
            store.compact()  # optimizes the rewritten shard too
        else:
            store.optimize()
        optimize_seconds = time.perf_counter() - begin
    report.check_failures = chunk_mismatches(store, expected_by_shard, sidecar)
    report.chunks = upserted
    report.seconds = time.perf_counter() - started
    report.figures = StageFigures(points_upserted=upserted, points_deleted=deleted, collection_points=store.count(),
                                  optimize_seconds=round(optimize_seconds, 3))
    return report


def relabel_to_match(store: VectorStore, shard: str, rows: dict[str, dict]) -> int:
    """Give the store's points of the shard the labels (paths, tags, sources) of their sidecar rows; how many
    documents it relabelled."""
    relabelled = 0
    for sha, held in store.shard_state(shard).items():
        row = rows.get(sha)
        if row is not None and any(points_label_changes(held, row)):
            store.relabel(sha, *row_labels(row))
            relabelled += 1
    return relabelled


def field_labels_digest(settings: Settings, sidecar: Sidecar) -> str:
    """A digest of every document's filterable field labels (what the points should carry)."""
    names = filterable_fields(settings)
    labels = sidecar.field_labels(list(sidecar.document_shas()), names)
    return hashlib.sha256(json.dumps([names, sorted(labels.items())]).encode()).hexdigest()


def sync_field_labels(settings: Settings, sidecar: Sidecar, live: Sequence[VectorStore]) -> int:
    """Relabel the points whose filterable field labels differ from their documents' effective fields (a roster or
    an enrichment changed them, or a field became filterable), when the labels changed since the last sync; how
    many documents' points it relabelled."""
    with sidecar.kept():
        digest = field_labels_digest(settings, sidecar)
        if sidecar.get_state(FIELD_LABELS) == digest:
            return 0
        by_shard = {shard: set(shas) for shard, shas in sorted(sidecar.shas_by_shard().items())}
    changed = [0] * len(live)  # documents relabelled, per store
    shards = list(by_shard)
    try:
        while shards:  # the rows of about LABEL_BATCH documents at a time, in one read, for every store
            batch = shard_batch(by_shard, shards[0], LABEL_BATCH)
            del shards[:len(batch)]
            rows = labelled_rows(settings, sidecar, sorted(sha for shard in batch for sha in by_shard[shard]))
            for position, store in enumerate(live):
                changed[position] += sum(relabel_to_match(store, shard, rows) for shard in batch)
    except BaseException:  # part way: any store may hold relabelled points, which its readers (the semantic
        for store in live:  # cache) must see
            store.mark_changed()
        raise
    for store, count in zip(live, changed):
        if count:
            store.mark_changed()
    sidecar.set_state(FIELD_LABELS, digest)
    return sum(changed)


def chunk_mismatches(store: VectorStore, expected_by_shard: dict[str, dict[str, dict[str, str]]],
                     sidecar: Sidecar) -> list[str]:
    """Every difference between the points of the shards and the chunk artifacts (`expected_by_shard`: shard ->
    sha -> {chunk id: text hash}): chunks without a point, points without a chunk, and points whose text differs
    from their chunk's."""
    problems: list[tuple[str, str]] = []  # (sha, what)
    for shard, expected in expected_by_shard.items():
        held: dict[str, IndexedChunk] = store.shard_chunks(shard)
        wanted = {point_id: (sha, digest) for sha, chunks in expected.items() for point_id, digest in chunks.items()}
        for point_id, (sha, digest) in wanted.items():
            point = held.get(point_id)
            if point is None:
                problems.append((sha, f"chunk {point_id} has no point"))
            elif point.text_digest != digest or point.sha != sha:
                problems.append((sha, f"point {point_id} holds other text than its chunk"))
        problems += [(point.sha, f"point {point_id} belongs to no chunk of the document")
                     for point_id, point in held.items() if point_id not in wanted]
    if not problems:
        return []
    rows = sidecar.documents_by_sha(sorted({sha for sha, _ in problems}))
    listed = [f"{describe(rows.get(sha), sha)}: {what}" for sha, what in problems[:MAX_REPORTED]]
    if len(problems) > MAX_REPORTED:
        listed.append(f"... and {len(problems) - MAX_REPORTED} more")
    return listed
