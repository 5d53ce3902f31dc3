"""Shard sync: each ingest stage reconciles its artifacts for a set of shards with its input.

A stage's input is the set of document SHAs its upstream stage holds for a shard. New SHAs are processed,
SHAs the stage holds but its input no longer has are purged, the rest are skipped. Every stage is therefore
idempotent and converges after a crash: re-running it does exactly the work that is still missing.
Raw documents are the root of the chain: their input is the source manifest.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from rag_pipeline.artifacts import ArtifactStore
from rag_pipeline.chunking import Chunk, chunk_document
from rag_pipeline.convert import ConversionError, DocumentConverter
from rag_pipeline.index.sidecar import Sidecar
from rag_pipeline.redact import find_secrets, redact
from rag_pipeline.settings import Settings
from rag_pipeline.sources import Manifest, SourceFile, document_tags, sha256_file

HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)


@dataclass
class StageReport:
    """What one stage did over its shards (SHAs added, purged, moved, re-tagged, failed with their error)."""

    stage: str
    shards: list[str]
    added: list[str] = field(default_factory=list)
    skipped: int = 0
    purged: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)  # paths changed (moved, copied, a copy deleted)
    retagged: list[str] = field(default_factory=list)  # tags changed (the corpus rules or the paths did)
    failed: dict[str, str] = field(default_factory=dict)
    chunks: int = 0
    seconds: float = 0.0
    stats: dict[str, float] = field(default_factory=dict)  # stage-specific figures for the asset metadata
    purged_paths: dict[str, str] = field(default_factory=dict)
    check_failures: list[str] = field(default_factory=list)


def stores(settings: Settings) -> dict[str, ArtifactStore]:
    """Each stage's artifact store. Chunks and embeddings live under folders named after the settings that
    made them (chunking id, embedding model), so changing those settings rebuilds instead of mixing."""
    folders = {
        "raw": "raw", "markdown": "markdown", "redacted": "redacted",
        "chunks": f"chunks/{settings.chunking_id}",
        "embeddings": f"embeddings/{settings.embedding_model_id.replace('/', '__')}/{settings.chunking_id}",
    }
    return {stage: ArtifactStore(settings.artifacts_dir, folder) for stage, folder in folders.items()}


def describe(row: dict[str, Any] | None, sha: str) -> str:
    """The first path of a document, for messages; the SHA when the path is unknown."""
    return row["paths"][0] if row and row.get("paths") else sha


def stored_tags(row: dict[str, Any]) -> list[str]:
    """A sidecar row's tags (NULL in rows written before tags existed)."""
    return sorted(row.get("tags") or [])


def label_changes(row: dict[str, Any], sources: list[SourceFile]) -> tuple[bool, bool]:
    """(paths changed, tags changed) of a stored document against its files in the manifest."""
    return sorted(row["paths"]) != sorted(source.path for source in sources), stored_tags(row) != document_tags(sources)


def sync_raw(settings: Settings, manifest: Manifest, shards: Iterable[str], sidecar: Sidecar) -> StageReport:
    """Snapshot new documents' bytes, drop vanished SHAs (each later stage purges its own artifacts in turn),
    and record every document's current paths and tags."""
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
            paths, tags = [source.path for source in sources], document_tags(sources)
            row = {"sha": sha, "shard": shard, "paths": paths, "tags": tags, "doc_type": sources[0].doc_type,
                   "bytes": sources[0].size, "rel_path": sources[0].relative_path}
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
        for sha in sorted(held - wanted):
            store.delete(shard, sha)
            report.purged.append(sha)
            report.purged_paths[sha] = describe(known.get(sha), sha)
    sidecar.upsert(rows)
    sidecar.delete(report.purged)
    report.seconds = time.perf_counter() - started
    return report


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


def reconcile(
    report: StageReport,
    inputs: Callable[[str], set[str]],
    outputs: Callable[[str], set[str]],
    output_store: ArtifactStore,
) -> list[tuple[str, str]]:
    """Purge outputs whose input vanished; return the (shard, sha) pairs still to process."""
    todo = []
    for shard in report.shards:
        wanted, held = inputs(shard), outputs(shard)
        for sha in sorted(held - wanted):
            output_store.delete(shard, sha)
            report.purged.append(sha)
        todo.extend((shard, sha) for sha in sorted(wanted - held))
        report.skipped += len(wanted & held)
    return todo


def sync_markdown(
    settings: Settings, converter: DocumentConverter, shards: Iterable[str], sidecar: Sidecar,
    *, progress: bool = False,
) -> StageReport:
    """Convert every new raw document to Markdown; failures are recorded (<sha>.error.json) and not retried."""
    started = time.perf_counter()
    report = StageReport("markdown", sorted(shards))
    raw, markdown = stores(settings)["raw"], stores(settings)["markdown"]
    todo = reconcile(report, raw.shas, markdown.shas, markdown)
    known = sidecar.documents_by_sha([sha for _, sha in todo])
    rows = []
    for shard, sha in tqdm(todo, desc="convert", unit="doc", disable=not progress or not todo):
        row = known.get(sha)
        doc_type = row["doc_type"] if row else next((raw.dir / shard).glob(f"{sha}.*")).suffix[1:]
        path = describe(row, sha)
        begin = time.perf_counter()
        try:
            converted = converter.convert(raw.path(shard, sha, doc_type), doc_type)
        except Exception as exc:  # one bad document never stops the others
            reason = str(exc) if isinstance(exc, ConversionError) else f"{type(exc).__name__}: {exc}"
            markdown.write_json(shard, sha, "error.json", {"path": path, "error": reason})
            report.failed[sha] = f"{path}: {reason}"
            rows.append({"sha": sha, "status": "failed", "stage": "markdown", "error": reason})
            continue
        elapsed_ms = (time.perf_counter() - begin) * 1000
        markdown.write_json(shard, sha, "json", {
            "line_pages": converted.line_pages, "page_count": converted.page_count,
            "title": converted.title, "converter": converted.converter,
        })
        markdown.write_text(shard, sha, "md", converted.markdown)
        report.added.append(sha)
        rows.append({"sha": sha, "stage": "markdown", "converter": converted.converter,
                     "pages": converted.page_count, "chars": len(converted.markdown), "title": converted.title,
                     "first_heading": first_heading(converted.markdown), "convert_ms": elapsed_ms})
    sidecar.upsert(rows)
    report.check_failures = unconverted(raw, markdown, report.shards)
    report.seconds = time.perf_counter() - started
    return report


def first_heading(markdown: str) -> str | None:
    match = HEADING.search(markdown)
    return match.group(1).strip() if match else None


def unconverted(raw: ArtifactStore, markdown: ArtifactStore, shards: list[str]) -> list[str]:
    """Documents of the shards with neither non-empty Markdown nor a recorded failure."""
    missing = []
    for shard in shards:
        for sha in sorted(raw.shas(shard)):
            converted = markdown.path(shard, sha, "md")
            failed = markdown.exists(shard, sha, "error.json")
            if not failed and (not converted.is_file() or converted.stat().st_size == 0):
                missing.append(f"{sha}: no Markdown and no recorded failure")
    return missing


def sync_redacted(settings: Settings, shards: Iterable[str], sidecar: Sidecar) -> StageReport:
    """Redact secrets and PII from every new Markdown document; counts per kind go to <sha>.json."""
    started = time.perf_counter()
    report = StageReport("redacted", sorted(shards))
    markdown, redacted = stores(settings)["markdown"], stores(settings)["redacted"]
    todo = reconcile(report, lambda shard: markdown.shas(shard, "md"), redacted.shas, redacted)
    known = sidecar.documents_by_sha([sha for _, sha in todo])
    rows = []
    for shard, sha in todo:
        begin = time.perf_counter()
        result = redact(markdown.read_text(shard, sha, "md"), pii_policy=settings.pii_policy,
                        role_email_prefixes=settings.role_email_prefixes)
        elapsed_ms = (time.perf_counter() - begin) * 1000
        leaks = find_secrets(result.text)
        path = describe(known.get(sha), sha)
        if leaks:
            report.check_failures.append(f"{path}: {len(leaks)} secret(s) survived redaction "
                                         f"({', '.join(sorted({kind for kind, _ in leaks}))})")
        redacted.write_json(shard, sha, "json", {"counts": result.counts})
        redacted.write_text(shard, sha, "md", result.text)
        report.added.append(sha)
        total = sum(result.counts.values())
        rows.append({"sha": sha, "stage": "redacted", "redactions": total, "redact_ms": elapsed_ms})
    sidecar.upsert(rows)
    report.seconds = time.perf_counter() - started
    return report


def sync_chunks(settings: Settings, shards: Iterable[str], sidecar: Sidecar) -> StageReport:
    """Chunk every new redacted document into <sha>.jsonl (one Chunk per line)."""
    started = time.perf_counter()
    report = StageReport("chunks", sorted(shards))
    all_stores = stores(settings)
    markdown, redacted, chunks = all_stores["markdown"], all_stores["redacted"], all_stores["chunks"]
    todo = reconcile(report, lambda shard: redacted.shas(shard, "md"), chunks.shas, chunks)
    known = sidecar.documents_by_sha([sha for _, sha in todo])
    limit = settings.chunk_size + settings.chunk_overlap
    rows = []
    for shard, sha in todo:
        begin = time.perf_counter()
        pieces = chunk_document(
            sha, redacted.read_text(shard, sha, "md"),
            line_pages=markdown.read_json(shard, sha, "json")["line_pages"],
            chunker=settings.chunker, chunk_size=settings.chunk_size,
            chunk_overlap=settings.chunk_overlap, sentence_window=settings.sentence_window,
        )
        elapsed_ms = (time.perf_counter() - begin) * 1000
        path = describe(known.get(sha), sha)
        oversized = [chunk.chunk_index for chunk in pieces if len(chunk.text) > limit]
        if oversized:
            report.check_failures.append(f"{path}: chunks {oversized} exceed {limit} characters")
        chunks.write_text(shard, sha, "jsonl", "".join(json.dumps(c.to_dict(), ensure_ascii=False) + "\n"
                                                         for c in pieces))
        report.added.append(sha)
        report.chunks += len(pieces)
        rows.append({"sha": sha, "stage": "chunks", "status": "ok", "chunks": len(pieces), "chunk_ms": elapsed_ms})
    sidecar.upsert(rows)
    report.seconds = time.perf_counter() - started
    return report


def read_chunks(settings: Settings, shard: str, sha: str) -> list[Chunk]:
    store = stores(settings)["chunks"]
    lines = store.read_text(shard, sha, "jsonl").split("\n")
    return [Chunk.from_dict(json.loads(line)) for line in lines if line]
