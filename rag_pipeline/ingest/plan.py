"""Which shards need a run: those whose stored state (sidecar, any stage's artifacts, the vector index) differs
from the source manifest."""

from __future__ import annotations

from rag_pipeline.index.vector_store import IndexedDocument, VectorStore
from rag_pipeline.ingest.discover import Manifest
from rag_pipeline.ingest.formats import format_of
from rag_pipeline.ingest.stage import label_changes, stored_sources, stored_tags, stores
from rag_pipeline.ingest.vector_index import shown_paths
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar


def pending_shards(settings: Settings, manifest: Manifest, sidecar: Sidecar, store: VectorStore) -> list[str]:
    """Shards whose stored state (sidecar, any stage's artifacts, the vector index) differs from the manifest."""
    documents = manifest.documents()
    with sidecar.kept():
        known, catalogued = sidecar.documents(), sidecar.catalogued_by_shard(settings.chunking_id)
    all_stores = stores(settings)
    pending = []
    for shard in settings.shard_keys:
        wanted = {sha for sha in documents if settings.shard_of(sha) == shard}
        stored = {sha for sha, row in known.items() if row["shard"] == shard}
        converted = wanted - all_stores["markdown"].shas(shard, "error.json")
        released = converted - all_stores["redacted"].shas(shard, "error.json")  # not withheld for a secret
        relabelled = any(any(label_changes(known[sha], documents[sha])) for sha in wanted & stored)
        unfinished = any(known[sha]["status"] == "pending" for sha in wanted & stored)
        in_sync = (
            wanted == stored
            and not relabelled
            and not unfinished
            and all_stores["raw"].shas(shard) == wanted
            and all_stores["markdown"].shas(shard) == wanted
            and all_stores["redacted"].shas(shard) == converted
            and all(all_stores[stage].shas(shard) == released for stage in ("chunks", "embeddings"))
            and catalogued.get(shard, set()) == released
            and index_matches(store.shard_state(shard), {sha: {**known[sha], "paths": shown_paths(
                settings, known[sha]["paths"])} for sha in released & stored})
        )
        if not in_sync:
            pending.append(shard)
    return pending


def index_matches(state: dict[str, IndexedDocument], rows: dict[str, dict]) -> bool:
    """True when the index holds exactly each document's chunk count, under its current (shown) paths, tags and
    sources (a cheap test: the vector_index stage and its check compare chunk ids and text hashes)."""
    expected = {sha: (row["chunks"], sorted(row["paths"]), stored_tags(row), stored_sources(row))
                for sha, row in rows.items() if row["chunks"]}
    return {sha: (held.points, sorted(held.paths), sorted(held.tags), sorted(held.sources))
            for sha, held in state.items()} == expected


def docling_pending(settings: Settings, manifest: Manifest, shards: list[str]) -> bool:
    """Whether a document of `shards` has no converted Markdown yet and a format that docling converts."""
    markdown = stores(settings)["markdown"]
    converted = {shard: markdown.shas(shard) for shard in shards}
    return any(format_of(files[0].doc_type).uses_docling and sha not in converted[settings.shard_of(sha)]
               for sha, files in manifest.documents().items() if settings.shard_of(sha) in converted)


def pending_work(settings: Settings, manifest: Manifest, shards: list[str]) -> dict[str, int]:
    """The documents of `shards` that have no embeddings yet, each with its bytes: what the per-document stages
    (convert, redact, chunk, embed) will process, to share out among shard workers."""
    embedded = stores(settings)["embeddings"]
    done = {shard: embedded.shas(shard) for shard in shards}
    work = {}
    for sha, files in manifest.documents().items():
        shard = settings.shard_of(sha)
        if shard in done and sha not in done[shard]:
            work[sha] = files[0].size
    return work
