"""The ingest job queue of the HTTP API: ingest runs started over HTTP, one at a time, in a worker thread of the
server's process at a lower CPU priority.

In the server's process because the embedded store allows one process: an ingest of another process takes the
store from the server until it ends (serve/runtime.py), so every upload would stop the searches; in this process the
ingest shares the server's store and searches go on. At a lower priority (nice INGEST_NICENESS, on Linux per thread,
inherited by the threads and conversion processes it starts) so that the query path gets the CPU first.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rag_pipeline.errors import Conflict

log = logging.getLogger(__name__)
INGEST_NICENESS = 10  # added to the worker thread's nice value: the query path comes first


@dataclass
class IngestJob:
    id: str
    roots: list[str]
    status: str = "running"  # queued | running | succeeded | failed
    started_at: float = field(default_factory=time.time)  # when it was asked for
    finished_at: float | None = None
    summary: dict[str, Any] | None = None
    error: str | None = None
    source: str | None = None  # the one source it syncs; None: the configured roots or every configured source

    def to_json(self) -> dict[str, Any]:
        """The job as GET /ingest/{id} answers it (models.IngestJobResponse)."""
        return {"id": self.id, "status": self.status, "roots": self.roots, "source": self.source,
                "started_at": self.started_at, "finished_at": self.finished_at, "summary": self.summary,
                "error": self.error}


class IngestJobs:
    """Ingest runs started over HTTP, one at a time, in a worker thread of this process. POST /ingest is refused
    (409 ingest_running) while another runs or waits; an upload's or a removal's sync of its source is queued
    instead, at most one waiting job per source (a second request joins the one already queued)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.jobs: dict[str, IngestJob] = {}
        self._queue: list[IngestJob] = []
        self._working = False  # a worker thread is running jobs
        self._lock = threading.Lock()

    def start(self, roots: list[str] | None) -> IngestJob:
        """Start syncing `roots` (None: every configured source) now; Conflict when an ingest runs or waits."""
        with self._lock:
            busy = [job for job in self.jobs.values() if job.status in ("running", "queued")]
            if busy:
                raise Conflict(f"ingest {busy[0].id} is still {busy[0].status}", code="ingest_running")
            return self._submit(IngestJob(uuid.uuid4().hex, roots or []))

    def enqueue(self, source: str) -> IngestJob:
        """Sync `source` as soon as the running ingest (if any) ends; the job already queued for it if there is one."""
        with self._lock:
            waiting = next((job for job in self._queue if job.source == source), None)
            if waiting is not None:
                return waiting
            return self._submit(IngestJob(uuid.uuid4().hex, [], source=source))

    def _submit(self, job: IngestJob) -> IngestJob:  # under the lock
        job.status = "queued"
        self.jobs[job.id] = job
        self._queue.append(job)
        if not self._working:
            self._working = True
            threading.Thread(target=self._work, args=(self._next_locked(),), name="ingest-worker",
                             daemon=True).start()
        return job

    def _next_locked(self) -> IngestJob | None:
        if not self._queue:
            self._working = False
            return None
        job = self._queue.pop(0)
        job.status = "running"
        return job

    def _work(self, job: IngestJob | None) -> None:
        lower_priority()
        while job is not None:
            self._run(job)
            with self._lock:
                job = self._next_locked()

    def _run(self, job: IngestJob) -> None:
        from rag_pipeline.defs.ingest_runner import ingest  # imports Dagster: only when an ingest is asked for

        try:
            job.summary = ingest(job.roots or None, self.data_dir, source=job.source)
            job.status = "succeeded"
        except Exception as error:
            log.exception("ingest %s failed", job.id)
            job.status, job.error = "failed", f"{type(error).__name__}: {error}"
        job.finished_at = time.time()


def lower_priority() -> None:
    """Raise this thread's nice value by INGEST_NICENESS (Linux schedules threads by their own nice value; elsewhere
    it would apply to the whole server, so nothing changes)."""
    if sys.platform == "linux":
        thread = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, thread, os.getpriority(os.PRIO_PROCESS, thread) + INGEST_NICENESS)
