"""A pool of long-lived worker processes that serve jobs one at a time, for CPU-bound work that holds the GIL.

Each worker builds its handler once (`make_handler()`, e.g. a document converter) and then answers one job at a
time over its own pipe, so the parent always knows which job a worker holds: a job that kills its worker or runs
past the timeout comes back as `Lost` (that job alone), the worker is replaced and the other jobs go on.

Workers are forked from a forkserver that imports the `preload` modules once: forking the parent itself is unsafe
once it runs threads (Dagster, ONNX Runtime), and a spawned worker would import them again (seconds each).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import signal
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any, Generic, TypeVar

Job = TypeVar("Job")
Result = TypeVar("Result")
CONTEXT = multiprocessing.get_context("forkserver")


@dataclass(frozen=True)
class Lost:
    """A job whose worker died or was stopped before answering, and why."""

    reason: str


@dataclass
class _Worker:
    process: BaseProcess
    connection: Connection
    job: int | None = None  # index of the job it holds
    deadline: float = 0.0


def _serve(connection: Connection, make_handler: Callable[[], Callable[[Any], Any]]) -> None:
    """A worker's loop: build the handler, then answer jobs until the parent sends None or goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it stops the workers
    handle = make_handler()
    try:
        while (job := connection.recv()) is not None:
            connection.send(handle(job))
    except EOFError:
        pass


def start_forkserver(preload: Sequence[str]) -> None:
    """Start this process's forkserver now: it imports `preload` in the background, so that the first pool's
    workers do not wait for those imports (no effect once it runs). A `"__main__"` in `preload` is skipped by
    Python 3.11's forkserver (it is never given the main script's path): each worker imports the program's main
    script itself when it starts, as a spawned process does (the `rag-pipeline` console script: a guarded import)."""
    CONTEXT.set_forkserver_preload(list(preload))
    multiprocessing.forkserver.ensure_running()


class WorkerPool(Generic[Job, Result]):
    """`workers` processes running `make_handler()`'s handler (both picklable); `timeout_s` bounds one job."""

    def __init__(self, workers: int, make_handler: Callable[[], Callable[[Job], Result]], timeout_s: float,
                 preload: Sequence[str] = ()) -> None:
        CONTEXT.set_forkserver_preload(list(preload))  # no effect once this process's forkserver runs
        self.make_handler = make_handler
        self.timeout_s = timeout_s
        self._workers = [self._start() for _ in range(workers)]

    def _start(self) -> _Worker:
        parent_end, child_end = CONTEXT.Pipe()
        process = CONTEXT.Process(target=_serve, args=(child_end, self.make_handler), name="rag-worker", daemon=True)
        process.start()
        child_end.close()
        return _Worker(process, parent_end)

    def _replace(self, worker: _Worker) -> _Worker:
        """Kill a worker (if still running) and start a new one in its place."""
        worker.process.kill()
        worker.process.join()
        worker.connection.close()
        new = self._workers[self._workers.index(worker)] = self._start()
        return new

    def run(self, jobs: Sequence[Job]) -> Iterator[tuple[int, Result | Lost]]:
        """(index of the job, its result or Lost) for every job, in the order they finish."""
        queue = deque(range(len(jobs)))
        while queue or any(worker.job is not None for worker in self._workers):
            for worker in self._workers:
                if worker.job is None and queue:
                    if not worker.process.is_alive():  # it died idle (killed from outside): no job was lost
                        worker = self._replace(worker)
                    self._send(worker, queue.popleft(), jobs)
            yield from self._collect()

    def _send(self, worker: _Worker, index: int, jobs: Sequence[Job]) -> None:
        worker.job, worker.deadline = index, time.monotonic() + self.timeout_s
        try:
            worker.connection.send(jobs[index])
        except OSError:  # it died meanwhile: _collect sees its sentinel and reports the job lost
            pass

    def _collect(self) -> Iterator[tuple[int, Result | Lost]]:
        """Wait until a busy worker answers, dies or passes its deadline; yield what came back."""
        busy = [worker for worker in self._workers if worker.job is not None]
        timeout = max(0.0, min(worker.deadline for worker in busy) - time.monotonic())
        ready = set(wait([worker.connection for worker in busy] + [worker.process.sentinel for worker in busy],
                         timeout))
        for worker in busy:
            index = worker.job
            assert index is not None
            if worker.connection in ready or worker.process.sentinel in ready:
                try:
                    result: Result | Lost = worker.connection.recv()
                except (EOFError, OSError):
                    worker.process.join()
                    result = Lost(f"its worker process died ({_exit_reason(worker.process.exitcode)})")
                    self._replace(worker)
            elif time.monotonic() >= worker.deadline:
                result = Lost(f"its worker process was stopped after {self.timeout_s:g} s")
                self._replace(worker)
            else:
                continue
            worker.job = None
            yield index, result

    def close(self) -> None:
        """Stop every worker (those still busy are killed)."""
        for worker in self._workers:
            if worker.job is None and worker.process.is_alive():
                try:
                    worker.connection.send(None)
                except OSError:
                    pass
        for worker in self._workers:
            worker.process.join(timeout=5 if worker.job is None else 0)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join()
            worker.connection.close()
        self._workers = []

    def __enter__(self) -> WorkerPool[Job, Result]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _exit_reason(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        return f"killed by {signal.Signals(-exitcode).name}"
    return f"exit code {exitcode}"
