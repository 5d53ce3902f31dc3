"""The chunks stage: every new redacted document split into chunks (ingest/chunkers.py) written as <sha>.jsonl,
sized to the embedding model's window."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial

from tokenizers import Tokenizer

from rag_pipeline.embed.model_files import max_seq_length, model_dir, model_tokenizer, special_token_count
from rag_pipeline.errors import ConfigError
from rag_pipeline.ingest.chunkers import Chunk, chunk_document, context_line, contextual_text
from rag_pipeline.ingest.document_workers import per_document
from rag_pipeline.ingest.redaction_rules import redact_path
from rag_pipeline.ingest.sha_range import ALL_DOCUMENTS, ShaRange
from rag_pipeline.ingest.stage import StageReport, describe, reconcile, stores
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar

CHECK_BATCH = 256  # chunks tokenized at a time by the size check


@dataclass(frozen=True)
class ChunkedDocument:
    """What chunking one document gave: its chunks written, its sidecar row, the chunks over their size limit (the
    check `chunk_sizes_within_limit`), or why it failed."""

    sha: str
    chunks: int
    row: dict
    oversized: str | None = None
    failure: str | None = None


def chunking_handler(settings: Settings) -> Callable[[list[tuple[str, str, str, str]]], list[ChunkedDocument]]:
    """A handler of (shard, sha, source name, path) jobs, for ingest/document_workers.py: the tokenizer is loaded
    once per process."""
    tokenizer, size = chunk_budget(settings)
    return lambda jobs: [chunk_one(settings, tokenizer, size, *job) for job in jobs]


def chunk_one(settings: Settings, tokenizer: Tokenizer | None, size: int, shard: str, sha: str, source_name: str,
              path: str) -> ChunkedDocument:
    """Chunk one redacted document into <sha>.jsonl (one Chunk per line); `source_name` is its path as the context
    line shows it before redaction, `path` names it in messages."""
    markdown, redacted, chunks = (stores(settings)[stage] for stage in ("markdown", "redacted", "chunks"))
    begin = time.perf_counter()
    name = redact_path(settings, source_name)
    conversion = markdown.read_json(shard, sha, "json")  # (no line_origins: converted before they were kept)
    pieces = chunk_document(
        sha, redacted.read_text(shard, sha, "md"),
        line_pages=conversion["line_pages"], line_origins=conversion.get("line_origins"),
        chunker=settings.chunker, chunk_size=size, chunk_overlap=settings.chunk_overlap,
        sentence_window=settings.sentence_window, tokenizer=tokenizer, document_name=name,
    )
    elapsed_ms = (time.perf_counter() - begin) * 1000
    oversized = oversized_chunks(pieces, name, tokenizer, size, settings.chunk_overlap)
    message = None
    if oversized:
        unit = "word pieces with their context line" if tokenizer else "characters"
        limit = size if tokenizer else size + settings.chunk_overlap
        message = f"{path}: chunks {oversized} exceed {limit} {unit}"
    chunks.write_text(shard, sha, "jsonl", "".join(json.dumps(c.to_dict(), ensure_ascii=False) + "\n" for c in pieces))
    return ChunkedDocument(sha, len(pieces), {"sha": sha, "stage": "chunks", "chunks": len(pieces),
                                              "chunk_ms": elapsed_ms}, message)


def lost_chunking(settings: Settings, job: tuple[str, str, str, str], reason: str) -> ChunkedDocument:
    """A document whose chunking worker died or was stopped: failed, without chunks (any its worker wrote are
    removed), so that the next ingest tries it again."""
    shard, sha, _, path = job
    stores(settings)["chunks"].delete_documents(shard, [sha])
    error = f"the chunking did not finish: {reason}"
    return ChunkedDocument(sha, 0, {"sha": sha, "status": "failed", "stage": "chunks", "error": error},
                           failure=f"{path}: {error}")


def sync_chunks(settings: Settings, shards: Iterable[str], sidecar: Sidecar,
                *, documents: ShaRange = ALL_DOCUMENTS) -> StageReport:
    """Chunk every new redacted document (of `documents`) into <sha>.jsonl (one Chunk per line), in worker
    processes when there are many (ingest/document_workers.py). A document whose worker died or ran past
    RAG_CONVERT_TIMEOUT_S fails alone and gets no chunks: the next ingest tries it again."""
    started = time.perf_counter()
    report = StageReport("chunks", sorted(shards), documents)
    redacted, chunks = stores(settings)["redacted"], stores(settings)["chunks"]
    todo = reconcile(report, lambda shard: redacted.shas(shard, "md"), chunks.shas, chunks)
    known = sidecar.documents_by_sha([sha for _, sha in todo])
    jobs = [(shard, sha, source_name(known.get(sha), sha), describe(known.get(sha), sha)) for shard, sha in todo]
    rows = []
    for outcome in per_document(settings, partial(chunking_handler, settings), jobs, partial(lost_chunking, settings)):
        rows.append(outcome.row)
        if outcome.failure is not None:
            report.failed[outcome.sha] = outcome.failure
            continue
        if outcome.oversized:
            report.check_failures.append(outcome.oversized)
        report.added.append(outcome.sha)
        report.chunks += outcome.chunks
    sidecar.upsert(rows)
    report.seconds = time.perf_counter() - started
    return report


def source_name(row: dict | None, sha: str) -> str:
    """The document's path relative to its root (its first path, else its SHA, when the sidecar has none)."""
    return row["rel_path"] if row and row.get("rel_path") else describe(row, sha)


def document_name(settings: Settings, row: dict | None, sha: str) -> str:
    """The document's path relative to its root as the embedded context line shows it (secrets in it redacted)."""
    return redact_path(settings, source_name(row, sha))


def chunk_budget(settings: Settings) -> tuple[Tokenizer | None, int]:
    """(the embedding model's tokenizer for the tokens chunker, else None; the chunk size): a token chunk size is
    capped so that the embedded text fits the model's window with its special tokens."""
    if settings.chunker != "tokens":
        return None, settings.chunk_size
    directory = model_dir(settings.embedding_model_path)
    try:
        tokenizer = model_tokenizer(directory)
    except FileNotFoundError as error:
        raise ConfigError(f"RAG_CHUNKER=tokens: {error}; set RAG_CHUNKER=recursive") from error
    return tokenizer, min(settings.chunk_size, max_seq_length(directory) - special_token_count(directory))


def oversized_chunks(pieces: list[Chunk], name: str, tokenizer: Tokenizer | None, size: int,
                     overlap: int) -> list[int]:
    """Indexes of the chunks over their limit: chunk_size word pieces of embedded text (tokens chunker; a long
    context line may take at most half), else chunk_size + overlap characters of chunk text."""
    if tokenizer is None:
        return [chunk.chunk_index for chunk in pieces if len(chunk.text) > size + overlap]
    oversized = []
    for first in range(0, len(pieces), CHECK_BATCH):  # a slice of encodings at a time: bounded memory
        batch = pieces[first:first + CHECK_BATCH]
        encoded = tokenizer.encode_batch([contextual_text(name, chunk) for chunk in batch], add_special_tokens=False)
        oversized += [chunk.chunk_index for chunk, encoding in zip(batch, encoded)
                      if len(encoding.ids) > size and len(encoding.ids) - len(tokenizer.encode(
                          context_line(name, chunk.heading_path), add_special_tokens=False).ids) > size // 2]
    return oversized


def read_chunks(settings: Settings, shard: str, sha: str) -> list[Chunk]:
    store = stores(settings)["chunks"]
    lines = store.read_text(shard, sha, "jsonl").split("\n")
    return [Chunk.from_dict(json.loads(line)) for line in lines if line]

