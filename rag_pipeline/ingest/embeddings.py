"""The embeddings stage: embed the chunks of new documents ("path > heading path" + text), batched across
documents, through the embedding cache; one .npy of vectors per document."""

from __future__ import annotations

import io
import time
from collections.abc import Iterable

import numpy as np
from tqdm import tqdm

from rag_pipeline.embed.embedder import Embedder, EmbeddingCache, embed_texts
from rag_pipeline.ingest.chunk import document_name, read_chunks
from rag_pipeline.ingest.chunkers import contextual_text
from rag_pipeline.ingest.sha_range import ALL_DOCUMENTS, ShaRange
from rag_pipeline.ingest.stage import StageReport, reconcile, stores
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar

EMBED_SLICE = 256  # texts per embedding call: bounds memory and lost work on a crash, drives the progress bar


def sync_embeddings(
    settings: Settings, embedder: Embedder, cache: EmbeddingCache, shards: Iterable[str], sidecar: Sidecar,
    *, progress: bool = False, documents: ShaRange = ALL_DOCUMENTS,
) -> StageReport:
    """Embed the chunks of new documents (of `documents`), batched across documents, reusing cached vectors."""
    started = time.perf_counter()
    report = StageReport("embeddings", sorted(shards), documents)
    all_stores = stores(settings)
    chunk_store, vectors_store = all_stores["chunks"], all_stores["embeddings"]
    todo = reconcile(report, chunk_store.shas, vectors_store.shas, vectors_store)
    known = sidecar.documents_by_sha([sha for _, sha in todo])
    batch: list[tuple[str, str, int]] = []  # (shard, sha, chunk count) of the documents in `texts`
    texts: list[str] = []

    def embed_batch() -> None:
        """Embed the pending texts, EMBED_SLICE at a time (a long document's too), and write the vectors of every
        document they complete."""
        parts = []
        for first in range(0, len(texts), EMBED_SLICE):
            part, stats = embed_texts(embedder, texts[first:first + EMBED_SLICE], cache)
            parts.append(part)
            report.figures.vectors_computed += stats.computed
            report.figures.vectors_cached += stats.cached
            report.figures.embed_seconds += stats.seconds
            bar.update(len(part))
        vectors = np.concatenate(parts) if parts else np.empty((0, embedder.dimension), dtype=np.float32)
        offset = 0
        for shard, sha, count in batch:
            buffer = io.BytesIO()
            np.save(buffer, vectors[offset:offset + count].reshape(count, embedder.dimension))
            vectors_store.write_bytes(shard, sha, "npy", buffer.getvalue())
            report.added.append(sha)
            offset += count
        batch.clear()
        texts.clear()

    expected = sum((known.get(sha) or {}).get("chunks") or 0 for _, sha in todo)
    with tqdm(total=expected, desc="embed", unit="chunk", disable=not progress or not todo) as bar:
        for shard, sha in todo:
            pieces = read_chunks(settings, shard, sha)
            name = document_name(settings, known.get(sha), sha)
            texts.extend(contextual_text(name, chunk) for chunk in pieces)
            batch.append((shard, sha, len(pieces)))
            report.chunks += len(pieces)
            if len(texts) >= EMBED_SLICE:
                embed_batch()
        if batch:
            embed_batch()
    report.figures.embed_seconds = round(report.figures.embed_seconds, 3)
    report.seconds = time.perf_counter() - started
    return report


def read_vectors(settings: Settings, shard: str, sha: str) -> np.ndarray:
    return np.load(stores(settings)["embeddings"].path(shard, sha, "npy"))

