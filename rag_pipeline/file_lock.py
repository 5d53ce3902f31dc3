"""Exclusive locks between processes on a lock file (fcntl.flock; released when the process dies), optionally
recording who holds them so that a process refused the lock, or one that only asks (`holder_elsewhere`), can say by
whom.

Not the filelock package: it truncates the lock file on every attempt, which would erase the holder's record.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class LockHeld(Exception):
    """Another process holds the lock; `holder` is what it recorded ("pid 123 (rag-pipeline ingest ...)")."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(f"{path} is held by {holder}")
        self.holder = holder


def this_process() -> str:
    """How a holder records itself: its pid and command line (on one line)."""
    return f"pid {os.getpid()} ({' '.join(' '.join(sys.orig_argv).split())})"


def acquire(path: Path, *, wait: bool = True, record: bool = False, mode: int = 0o644,
            patience_s: float = 0.0) -> int:
    """A file descriptor holding the exclusive lock on `path` (created, with its folder, if missing): waits for it,
    or with wait=False raises LockHeld naming the holder (after trying for `patience_s`: a process that only asks
    who holds it takes the lock for an instant). With `record`, the holder is written into the file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, mode)
    deadline = time.monotonic() + patience_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            break
        except BlockingIOError:
            if time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            holder = os.read(fd, 4096).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise LockHeld(path, holder) from None
    if record:
        os.ftruncate(fd, 0)
        os.write(fd, f"{this_process()}\n".encode())
    return fd


@contextmanager
def locked(path: Path, *, wait: bool = True, record: bool = False, mode: int = 0o644,
           patience_s: float = 0.0) -> Iterator[None]:
    """Hold the lock on `path` for the block (see acquire)."""
    fd = acquire(path, wait=wait, record=record, mode=mode, patience_s=patience_s)
    try:
        yield
    finally:
        os.close(fd)


def holder_elsewhere(path: Path) -> str | None:
    """What the holder of the lock on `path` recorded, when a process other than this one holds it; None when the
    lock is free, held by this process, or its holder has not recorded itself yet."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 4096).decode(errors="replace").strip()
            return None if not holder or holder.startswith(f"pid {os.getpid()} ") else holder
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
