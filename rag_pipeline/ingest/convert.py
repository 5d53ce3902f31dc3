"""The markdown stage: convert every new raw document to Markdown (ingest/converters.py) within the conversion limits
(ingest/limits.py). Every document for docling converts in a pool of worker processes (ingest/worker_pool.py), so
that each conversion has a time limit (RAG_CONVERT_TIMEOUT_S) in whatever process the ingest runs (the CLI, the
API, a Dagster run); text files convert in the ingest process, bounded by their size. A document that fails
records why and never stops the others. The title reaches the sidecar through the redacted stage only.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from rag_pipeline.cpu import usable_cores
from rag_pipeline.ingest.artifacts import DROPPED, ArtifactStore
from rag_pipeline.ingest.converters import ConversionError, ConvertedDocument, DocumentConverter, PdfPipeline
from rag_pipeline.ingest.discover import files_since_scan
from rag_pipeline.ingest.formats import format_of
from rag_pipeline.ingest.limits import ConversionLimits
from rag_pipeline.ingest.sha_range import ALL_DOCUMENTS, ShaRange
from rag_pipeline.ingest.stage import StageReport, describe, reconcile, stores
from rag_pipeline.ingest.worker_pool import Lost, WorkerPool, start_forkserver
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar

# Imported once by the workers' forkserver ("__main__": see worker_pool.start_forkserver). The forkserver imports
# docling (~1.4 s of a core; without transformers and torch: see docling_import) once per process, as this process
# would have; each step's workers build docling's pipelines again (~0.3-0.5 s a step, bench/bench_convert.py).
PRELOAD = ["__main__", "rag_pipeline.ingest.convert", "rag_pipeline.ingest.docling_import"]
# The artifacts that end a document's conversion: its Markdown, its recorded failure, or Markdown dropped after
# redaction withheld it.
CONVERTED = ("md", "error.json", DROPPED)


@dataclass(frozen=True)
class Outcome:
    """One document's conversion: the document or why it failed, and the milliseconds it took."""

    converted: ConvertedDocument | None
    error: str | None = None
    convert_ms: float = 0.0


def convert_outcome(converter: DocumentConverter, path: Path, doc_type: str) -> Outcome:
    """Convert one file; a failure is the outcome's error (one bad document never stops the others)."""
    begin = time.perf_counter()
    try:
        converted = converter.convert(path, doc_type)
    except Exception as exc:
        return Outcome(None, str(exc) if isinstance(exc, ConversionError) else f"{type(exc).__name__}: {exc}")
    return Outcome(converted, convert_ms=(time.perf_counter() - begin) * 1000)


def worker_handler(pdf_pipeline: PdfPipeline, limits: ConversionLimits | None = None
                   ) -> Callable[[tuple[Path, str]], Outcome]:
    """A conversion worker's handler: one converter for the worker's life, (path, doc_type) in, Outcome out."""
    converter = DocumentConverter(pdf_pipeline, limits)
    return lambda job: convert_outcome(converter, *job)


def conversions_ahead(settings: Settings, roots: Iterable[Path | str]) -> bool:
    """Whether a file under `roots` that docling converts is new or changed since the last scan, or has neither
    Markdown nor a recorded outcome yet. A look that hashes nothing, so that the CLI can start the conversion
    workers before its own imports: a wrong guess (a file discovery will refuse or a corpus rule exclude, a hash
    cache it cannot read) costs an idle forkserver or a later start, never a result."""
    markdown = stores(settings)["markdown"]
    for _, fmt, sha in files_since_scan(settings, roots):
        if not fmt.uses_docling:
            continue
        if sha is None:
            return True
        shard = settings.shard_of(sha)
        if not any(markdown.exists(shard, sha, suffix) for suffix in CONVERTED):
            return True
    return False


def start_conversion_workers() -> None:
    """Start the forkserver conversion workers fork from now: its import of docling (~1.4 s of a core) then overlaps
    the work before the conversion stage instead of delaying it."""
    start_forkserver(PRELOAD)


def conversions(settings: Settings, converter: DocumentConverter,
                jobs: Sequence[tuple[Path, str]]) -> Iterator[tuple[int, Outcome]]:
    """(index of the job, its outcome) for every (path, doc_type) job, in the order they finish: the documents for
    docling in a pool of RAG_CONVERT_WORKERS worker processes (at most one per document), each stopped after
    RAG_CONVERT_TIMEOUT_S; text files in this process (while the workers start). The largest documents go to the
    workers first: one started last would be the step's tail while the other workers idle."""
    pooled = sorted((index for index, (_, doc_type) in enumerate(jobs) if format_of(doc_type).uses_docling),
                    key=lambda index: file_size(jobs[index][0]), reverse=True)
    texts = (index for index, (_, doc_type) in enumerate(jobs) if not format_of(doc_type).uses_docling)
    if not pooled:
        yield from ((index, convert_outcome(converter, *jobs[index])) for index in texts)
        return
    workers = min(settings.convert_workers or usable_cores(), len(pooled))
    make_handler = functools.partial(worker_handler, converter.pdf_pipeline, converter.limits)
    with WorkerPool(workers, make_handler, settings.convert_timeout_s, preload=PRELOAD) as pool:
        yield from ((index, convert_outcome(converter, *jobs[index])) for index in texts)
        for position, result in pool.run([jobs[index] for index in pooled]):
            if isinstance(result, Lost):
                result = Outcome(None, f"the conversion did not finish: {result.reason}")
            yield pooled[position], result


def file_size(path: Path) -> int:
    """The file's size in bytes; 0 when it cannot be read (its conversion then says why)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def sync_markdown(
    settings: Settings, converter: DocumentConverter, shards: Iterable[str], sidecar: Sidecar,
    *, progress: bool = False, documents: ShaRange = ALL_DOCUMENTS,
) -> StageReport:
    """Convert every new raw document (of `documents`) to Markdown; failures are recorded (<sha>.error.json) and
    not retried."""
    started = time.perf_counter()
    report = StageReport("markdown", sorted(shards), documents)
    raw, markdown = stores(settings)["raw"], stores(settings)["markdown"]
    def complete(shard: str) -> set[str]:  # <sha>.md is written last: a kill before it leaves the document to redo
        return set().union(*(markdown.shas(shard, suffix) for suffix in CONVERTED))

    todo = reconcile(report, raw.shas, complete, markdown)
    known = sidecar.documents_by_sha([sha for _, sha in todo])
    doc_types = [known[sha]["doc_type"] if sha in known else next((raw.dir / shard).glob(f"{sha}.*")).suffix[1:]
                 for shard, sha in todo]
    jobs = [(raw.path(shard, sha, doc_type), doc_type) for (shard, sha), doc_type in zip(todo, doc_types)]
    rows = []
    outcomes = conversions(settings, converter, jobs)
    for index, outcome in tqdm(outcomes, total=len(jobs), desc="convert", unit="doc", disable=not progress or not todo):
        shard, sha = todo[index]
        path = describe(known.get(sha), sha)
        converted = outcome.converted
        if converted is None:
            markdown.write_json(shard, sha, "error.json", {"path": path, "error": outcome.error})
            report.failed[sha] = f"{path}: {outcome.error}"
            rows.append({"sha": sha, "status": "failed", "stage": "markdown", "error": outcome.error})
            continue
        markdown.write_json(shard, sha, "json", {
            "line_pages": converted.line_pages, "line_origins": converted.line_origins,
            "page_count": converted.page_count,
            "title": converted.title, "converter": converted.converter, "fields": converted.fields.to_json(),
        })
        markdown.write_text(shard, sha, "md", converted.markdown)
        report.added.append(sha)
        rows.append({"sha": sha, "stage": "markdown", "converter": converted.converter,
                     "pages": converted.page_count, "chars": len(converted.markdown),
                     "convert_ms": outcome.convert_ms})
    sidecar.upsert(rows)
    report.check_failures = unconverted(raw, markdown, report.shards, documents)
    report.seconds = time.perf_counter() - started
    return report


def unconverted(raw: ArtifactStore, markdown: ArtifactStore, shards: list[str],
                documents: ShaRange = ALL_DOCUMENTS) -> list[str]:
    """Documents of the shards (those of `documents`) with neither non-empty Markdown nor a recorded failure (nor
    dropped Markdown)."""
    missing = []
    for shard in shards:
        for sha in sorted(documents.select(raw.shas(shard))):
            converted = markdown.path(shard, sha, "md")
            done = markdown.exists(shard, sha, "error.json") or markdown.exists(shard, sha, DROPPED)
            if not done and (not converted.is_file() or converted.stat().st_size == 0):
                missing.append(f"{sha}: no Markdown and no recorded failure")
    return missing

