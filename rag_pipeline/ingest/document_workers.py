"""The per-document work of a stage (redaction, chunking) shared out among worker processes, one per usable core,
when a step has enough documents to pay for starting them; a smaller step, or one worker, runs in its own process.

That work is pure Python (regular expressions, the tokenizer's offsets, small files) and holds the GIL, so a step
used one core however many the machine has. Workers take the documents in batches; a batch whose worker dies or runs
past RAG_CONVERT_TIMEOUT_S is sent again one document at a time, so that only a document that kills its worker (or
hangs it, which costs up to twice the limit) comes back `Lost`; in process nothing bounds a document's time. An
exception in a worker, building its handler too, is raised again in the step with the worker's traceback, as it
would be in process.

Workers fork from this process's forkserver (ingest/worker_pool.py). Where none runs yet, it is started with these
stages' modules (start_document_workers starts it ahead, while the first stages run): a later docling pool of the
same process then imports docling in each worker itself.
"""

from __future__ import annotations

import functools
import math
import os
import pickle
import traceback
from collections.abc import Callable, Sequence
from typing import TypeVar

from rag_pipeline.cpu import usable_cores
from rag_pipeline.settings import Settings

Job = TypeVar("Job")
Result = TypeVar("Result")
Handler = Callable[[list[Job]], list[Result]]

# Below this many documents a step runs in its own process: starting the workers costs ~0.5 s of a core (a fresh
# forkserver's imports), about what 300 SciFact abstracts take to redact and chunk on one core.
MIN_POOLED_DOCUMENTS = 500
BATCH_DOCUMENTS = 64  # documents per job: a job's pipe round trip is then negligible, the last batch short
# As conversions' preload ("__main__": see worker_pool.start_forkserver).
PRELOAD = ["__main__", "rag_pipeline.ingest.redact", "rag_pipeline.ingest.chunk"]


def document_workers(settings: Settings, documents: int) -> int:
    """How many worker processes a step of `documents` documents uses: RAG_DOCUMENT_WORKERS, else the usable cores,
    at most the usable cores (more would only share them) and one per batch; 1 (in the step's process) below
    MIN_POOLED_DOCUMENTS."""
    if documents < MIN_POOLED_DOCUMENTS:
        return 1
    cores = usable_cores()
    return min(settings.document_workers or cores, cores, math.ceil(documents / BATCH_DOCUMENTS))


def start_document_workers() -> None:
    """Start the forkserver the workers fork from now: its imports (~0.5 s of a core) then overlap the stages before
    redaction instead of delaying it (no effect once this process's forkserver runs)."""
    from rag_pipeline.ingest.worker_pool import start_forkserver  # deferred: see per_document

    start_forkserver(PRELOAD)


def per_document(settings: Settings, make_handler: Callable[[], Handler], jobs: Sequence[Job],
                 lost: Callable[[Job, str], Result]) -> list[Result]:
    """Each job's result, in the order of `jobs`. `make_handler()` (picklable) builds, once per process, the handler
    that turns a list of jobs into their results; `lost(job, reason)` is the result of a job whose worker died or
    was stopped (called in this process)."""
    workers = document_workers(settings, len(jobs))
    if workers < 2:
        return list(make_handler()(list(jobs)))
    # Deferred: multiprocessing registers exit handlers when it loads, which the CLI's quick exit would skip if it
    # loaded while a command is parsed (serve/cli/quick_exit.py); this module is imported there through the stages.
    from rag_pipeline.ingest.worker_pool import Lost, WorkerPool

    batches = [range(start, min(start + BATCH_DOCUMENTS, len(jobs))) for start in range(0, len(jobs), BATCH_DOCUMENTS)]
    answers: dict[int, Result] = {}
    guarded = functools.partial(_guarded_handler, make_handler)
    with WorkerPool(workers, guarded, settings.convert_timeout_s, preload=PRELOAD) as pool:
        resend: list[int] = []
        for index, answer in pool.run([[jobs[position] for position in batch] for batch in batches]):
            if isinstance(answer, Lost):
                resend.extend(batches[index])
            else:
                answers.update(zip(batches[index], _results(answer), strict=True))
        for index, answer in pool.run([[jobs[position]] for position in resend]):
            job = jobs[resend[index]]
            answers[resend[index]] = lost(job, answer.reason) if isinstance(answer, Lost) else _results(answer)[0]
    return [answers[position] for position in range(len(jobs))]


def _guarded_handler(make_handler: Callable[[], Handler]) -> Callable[[list[Job]], list[Result] | Exception]:
    """A worker's handler: `make_handler()`'s, whose exception (or the one building it) is sent back to be raised in
    the step (see _sendable)."""
    try:
        handle = make_handler()
    except Exception as error:  # noqa: BLE001 (raised again by the step for every batch)
        failed = _sendable(error)
        return lambda _batch: failed

    def guarded(batch: list[Job]) -> list[Result] | Exception:
        try:
            return handle(batch)
        except Exception as error:  # noqa: BLE001 (raised again by the step: see _results)
            return _sendable(error)
    return guarded


def _sendable(error: Exception) -> Exception:
    """`error` with the worker's traceback as a note (pickling drops tracebacks), or a RuntimeError saying the same
    when the exception cannot cross the pipe (an exception that does not pickle would kill the worker instead)."""
    where = f"in document worker {os.getpid()}:\n{''.join(traceback.format_exception(error))}"
    try:
        error.add_note(where)
        pickle.loads(pickle.dumps(error))
    except Exception:  # noqa: BLE001 (any failure to pickle or unpickle means the same)
        return RuntimeError(f"{type(error).__name__}: {error}\n{where}")
    return error


def _results(answer: list[Result] | Exception) -> list[Result]:
    if isinstance(answer, Exception):
        raise answer
    return answer
