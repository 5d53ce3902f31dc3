"""The metadata_sidecar stage, the end of a document's ingest: its chunk and redaction rows in the DuckDB sidecar
(for exact questions), rows of vanished documents dropped, and its status `ok`. A document catalogued for the
first time is `completed` (what the ingest summary counts as added); one re-catalogued (new chunk settings) is not.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import UTC, datetime

from rag_pipeline.ingest.chunk import read_chunks
from rag_pipeline.ingest.stage import StageReport, stores
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar


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
    with sidecar.kept():
        catalogued = sidecar.catalogued_by_shard(chunk_set)
        pending, stored = sidecar.pending_shas(report.shards), sidecar.catalogued_shas(report.shards)
    for shard in report.shards:
        wanted = chunk_store.shas(shard)
        held = catalogued.get(shard, set()) - pending[shard]  # a kill left it half-done
        vanished = sorted(stored[shard] - wanted)
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
    with sidecar.kept():
        sidecar.replace_catalogue(replaced, chunk_rows, redaction_rows)
        finished = datetime.now(UTC).replace(tzinfo=None)
        before = sidecar.documents_by_sha(report.added)
        report.completed = [sha for sha in report.added if (before.get(sha) or {}).get("ingested_at") is None]
        sidecar.upsert([{"sha": sha, "chunk_set": chunk_set, "ingested_at": finished, "status": "ok",
                         "stage": "catalogue"} for sha in report.added if sha in before])
    report.chunks = len(chunk_rows)
    report.seconds = time.perf_counter() - started
    return report

