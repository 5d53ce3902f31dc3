"""The raw_documents stage: snapshot new documents' bytes into the raw store, drop vanished SHAs and record
every document's current paths, tags and sources in the sidecar.

A vanished document's points leave the index here, before its sidecar row and raw snapshot do, so a run killed
later never leaves a purged document searchable (the later stages purge their own artifacts in turn)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from rag_pipeline.index.vector_store import VectorStore
from rag_pipeline.ingest.artifacts import ArtifactStore
from rag_pipeline.ingest.discover import Manifest, document_paths, document_sources, document_tags, sha256_file
from rag_pipeline.ingest.stage import StageReport, describe, label_changes, stores
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar


def sync_raw(settings: Settings, manifest: Manifest, shards: Iterable[str], sidecar: Sidecar,
             live: Sequence[VectorStore] = ()) -> StageReport:
    """Snapshot new documents' bytes, drop vanished SHAs (their points first, from every `live` store: the
    generation being built and the one queries use; each later stage purges its own artifacts in turn), and
    record every document's current paths, tags and sources."""
    started = time.perf_counter()
    report = StageReport("raw", sorted(shards))
    store = stores(settings)["raw"]
    documents = manifest.documents()
    known = sidecar.documents(report.shards)
    rows = []
    for shard in report.shards:
        wanted = {sha for sha in documents if settings.shard_of(sha) == shard}
        held = store.shas(shard)
        for sha in sorted(wanted):
            sources = documents[sha]
            row = {"sha": sha, "shard": shard, "paths": document_paths(sources), "tags": document_tags(sources),
                   "sources": document_sources(sources), "doc_type": sources[0].doc_type, "bytes": sources[0].size,
                   "rel_path": sources[0].relative_path}
            if sha in held:
                report.skipped += 1
                moved, retagged = label_changes(known[sha], sources) if sha in known else (False, False)
                report.moved += [sha] if moved else []
                report.retagged += [sha] if retagged else []
            else:
                error = snapshot(store, shard, sha, sources[0].path, sources[0].doc_type)
                if error:
                    report.failed[sha] = error
                    continue
                report.added.append(sha)
                row.update(status="pending", stage="raw", error=None)
            rows.append(row)
        recorded = {sha for sha, row in known.items() if row["shard"] == shard}  # a kill may leave a row only
        vanished = sorted((held | recorded) - wanted)
        if vanished:
            report.figures.points_deleted += purge_points(live, vanished, compact=settings.compact_after_purge)
        store.delete_documents(shard, vanished)
        report.purged += vanished
        report.purged_paths.update((sha, describe(known.get(sha), sha)) for sha in vanished)
    sidecar.upsert(rows)
    sidecar.delete(report.purged)
    report.seconds = time.perf_counter() - started
    return report


def purge_points(live: Sequence[VectorStore], shas: list[str], *, compact: bool = False) -> int:
    """Delete the documents' points from every live store, and with `compact` rewrite each store that held some
    so that their text leaves its files (RAG_COMPACT_AFTER_PURGE); how many points that deleted."""
    deleted = 0
    for store in live:
        held = store.count(sha=shas)
        if held:
            store.delete_shas(shas)
            store.mark_changed()
            if compact:
                store.compact()
        deleted += held
    return deleted


def snapshot(store: ArtifactStore, shard: str, sha: str, path: str, doc_type: str) -> str | None:
    """Copy a source file's bytes into the raw store; an error message if it changed since discovery."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        return f"{path}: cannot read: {exc.strerror or exc}"
    target = store.write_bytes(shard, sha, doc_type, data)
    if sha256_file(target) != sha:
        target.unlink()
        return f"{path}: changed while being ingested; it will be picked up by the next run"
    return None

