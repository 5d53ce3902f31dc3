"""The chunks stage: every new redacted document split into chunks (ingest/chunkers.py) written as <sha>.jsonl,
sized to the embedding model's window."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable

from tokenizers import Tokenizer

from rag_pipeline.embed.model_files import max_seq_length, model_dir, model_tokenizer, special_token_count
from rag_pipeline.errors import ConfigError
from rag_pipeline.ingest.chunkers import Chunk, chunk_document, context_line, contextual_text
from rag_pipeline.ingest.redaction_rules import redact_path
from rag_pipeline.ingest.sha_range import ALL_DOCUMENTS, ShaRange
from rag_pipeline.ingest.stage import StageReport, describe, reconcile, stores
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar

CHECK_BATCH = 256  # chunks tokenized at a time by the size check


def sync_chunks(settings: Settings, shards: Iterable[str], sidecar: Sidecar,
                *, documents: ShaRange = ALL_DOCUMENTS) -> StageReport:
    """Chunk every new redacted document (of `documents`) into <sha>.jsonl (one Chunk per line)."""
    started = time.perf_counter()
    report = StageReport("chunks", sorted(shards), documents)
    all_stores = stores(settings)
    markdown, redacted, chunks = all_stores["markdown"], all_stores["redacted"], all_stores["chunks"]
    todo = reconcile(report, lambda shard: redacted.shas(shard, "md"), chunks.shas, chunks)
    known = sidecar.documents_by_sha([sha for _, sha in todo])
    tokenizer, size = chunk_budget(settings)
    rows = []
    for shard, sha in todo:
        begin = time.perf_counter()
        name = document_name(settings, known.get(sha), sha)
        conversion = markdown.read_json(shard, sha, "json")  # (no line_origins: converted before they were kept)
        pieces = chunk_document(
            sha, redacted.read_text(shard, sha, "md"),
            line_pages=conversion["line_pages"], line_origins=conversion.get("line_origins"),
            chunker=settings.chunker, chunk_size=size, chunk_overlap=settings.chunk_overlap,
            sentence_window=settings.sentence_window, tokenizer=tokenizer, document_name=name,
        )
        elapsed_ms = (time.perf_counter() - begin) * 1000
        oversized = oversized_chunks(pieces, name, tokenizer, size, settings.chunk_overlap)
        if oversized:
            unit = "word pieces with their context line" if tokenizer else "characters"
            limit = size if tokenizer else size + settings.chunk_overlap
            report.check_failures.append(f"{describe(known.get(sha), sha)}: chunks {oversized} exceed {limit} {unit}")
        chunks.write_text(shard, sha, "jsonl", "".join(json.dumps(c.to_dict(), ensure_ascii=False) + "\n"
                                                         for c in pieces))
        report.added.append(sha)
        report.chunks += len(pieces)
        rows.append({"sha": sha, "stage": "chunks", "chunks": len(pieces), "chunk_ms": elapsed_ms})
    sidecar.upsert(rows)
    report.seconds = time.perf_counter() - started
    return report


def document_name(settings: Settings, row: dict | None, sha: str) -> str:
    """The document's path relative to its root as the embedded context line shows it (secrets in it redacted)."""
    return redact_path(settings, row["rel_path"] if row and row.get("rel_path") else describe(row, sha))


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

