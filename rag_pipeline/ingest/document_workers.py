"""The per-document work of a stage (redaction, chunking) shared out among worker processes, one per usable core,
when a step has enough documents to pay for starting them; a smaller step, or one worker, runs in its own process.

That work is pure Python (regular expressions, the tokenizer's offsets, small files) and holds the GIL, so a step
used one core however many the machine has. Workers take the documents in batches; a batch whose worker dies or runs
past RAG_CONVERT_TIMEOUT_S is sent again one document at a time, so that only a document that kills its worker (or
hangs it) comes back `Lost`. An exception in a worker is raised again in the step, as it would be in process.

Workers fork from this process's forkserver (ingest/worker_pool.py). Where none runs yet, it is started with these
stages' modules (start_document_workers starts it ahead, while the first stages run): a later docling pool of the
same process then imports docling in each worker itself.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import TypeVar

from rag_pipeline.cpu import usable_cores
from rag_pipeline.ingest.worker_pool import Lost, WorkerPool, start_forkserver
from rag_pipeline.settings import Settings

Job = TypeVar("Job")
Result = TypeVar("Result")
Handler = Callable[[list[Job]], list[Result]]

# Below this many documents a step runs in its own process: starting the workers costs ~0.5 s of a core (a fresh
# forkserver's imports), about what 300 SciFact abstracts take to redact and chunk on one core.
MIN_POOLED_DOCUMENTS = 500
BATCH_DOCUMENTS = 64  # documents per job: a job's pipe round trip is then negligible, the last batch short
PRELOAD = ["__main__", "rag_pipeline.ingest.redact", "rag_pipeline.ingest.chunk"]


def document_workers(settings: Settings, documents: int) -> int:
    """How many worker processes a step of `documents` documents uses: RAG_DOCUMENT_WORKERS, else the usable cores,
    at most one per batch; 1 (in the step's process) below MIN_POOLED_DOCUMENTS."""
    if documents < MIN_POOLED_DOCUMENTS:
        return 1
    return min(settings.document_workers or usable_cores(), math.ceil(documents / BATCH_DOCUMENTS))


def start_document_workers() -> None:
    """Start the forkserver the workers fork from now: its imports (~0.5 s of a core, more with a heavy `__main__`)
    then overlap the stages before redaction instead of delaying it (no effect once this process's forkserver
    runs)."""
    start_forkserver(PRELOAD)


def per_document(settings: Settings, make_handler: Callable[[], Handler], jobs: Sequence[Job]) -> list[Result | Lost]:
    """Each job's result, in the order of `jobs`. `make_handler()` (picklable) builds, once per process, the handler
    that turns a list of jobs into their results."""
    workers = document_workers(settings, len(jobs))
    if workers < 2:
        return list(make_handler()(list(jobs)))
    batches = [range(start, min(start + BATCH_DOCUMENTS, len(jobs))) for start in range(0, len(jobs), BATCH_DOCUMENTS)]
    answers: dict[int, Result | Lost] = {}
    guarded = functools.partial(_guarded_handler, make_handler)
    with WorkerPool(workers, guarded, settings.convert_timeout_s, preload=PRELOAD) as pool:
        lost: list[int] = []
        for index, answer in pool.run([[jobs[position] for position in batch] for batch in batches]):
            if isinstance(answer, Lost):
                lost.extend(batches[index])
            else:
                answers.update(zip(batches[index], _results(answer)))
        for index, answer in pool.run([[jobs[position]] for position in lost]):
            answers[lost[index]] = answer if isinstance(answer, Lost) else _results(answer)[0]
    return [answers[position] for position in range(len(jobs))]


def _guarded_handler(make_handler: Callable[[], Handler]) -> Callable[[list[Job]], list[Result] | Exception]:
    """A worker's handler: `make_handler()`'s, whose exception is sent back to be raised in the step."""
    handle = make_handler()

    def guarded(batch: list[Job]) -> list[Result] | Exception:
        try:
            return handle(batch)
        except Exception as error:  # noqa: BLE001 (raised again by the step: see _results)
            return error
    return guarded


def _results(answer: list[Result] | Exception) -> list[Result]:
    if isinstance(answer, Exception):
        raise answer
    return answer
