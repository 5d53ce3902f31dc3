"""Files replaced whole: the new content goes to a temporary file on the same file system, which is then renamed
over the target, so a reader (or the next process after a kill) sees the old file or the new one, never part of
either, and a failed write leaves no temporary file behind."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

# Temporary names are this process's id and a count: an ingest writes several files per document, and drawing
# mkstemp's random names and opening the file a second time to write it cost three times the write itself.
_TEMPORARY_COUNT = itertools.count()
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)  # O_EXCL: never through a link


def _new_temporary(folder: Path, target_name: str, mode: int) -> tuple[int, Path]:
    """A new temporary file in `folder` for `target_name`, open for writing, with permissions `mode`: its descriptor
    and path (a name a killed process left with this process's id is skipped)."""
    while True:
        temporary = folder / f".{target_name}.{os.getpid()}.{next(_TEMPORARY_COUNT)}.tmp"
        try:
            handle = os.open(temporary, _NEW_FILE, mode)
        except FileExistsError:
            continue
        try:
            os.fchmod(handle, mode)  # open's mode is narrowed by the umask
        except BaseException:
            os.close(handle)
            temporary.unlink(missing_ok=True)
            raise
        return handle, temporary


def _sync_folder(target: Path) -> None:
    """Put the rename of `target` on disk."""
    folder = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


@contextmanager
def _becoming(target: Path, temporary: Path, durable: bool) -> Iterator[None]:
    """Around the block that writes `temporary`: rename it over `target` when the block ends (then, `durable`,
    put the rename on disk), remove it when the block raises."""
    try:
        yield
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    if durable:
        _sync_folder(target)


def replace_file(target: Path, write: Callable[[Path], None], *, mode: int = 0o600, durable: bool = False,
                 temporary_dir: Path | None = None) -> None:
    """`write(temporary path)`, then the temporary file (permissions `mode`) becomes `target`. `durable`: the content
    and the rename are on disk when this returns (a power loss leaves the old file or the new one).
    `temporary_dir`: where the temporary file is made (default: beside `target`; it must be on the same file
    system), for a target in a folder others watch or read."""
    handle, temporary = _new_temporary(temporary_dir or target.parent, target.name, 0o600)  # writable by `write`
    os.close(handle)
    with _becoming(target, temporary, durable):
        write(temporary)
        os.chmod(temporary, mode)
        if durable:
            with temporary.open("rb") as written:
                os.fsync(written.fileno())


def write_atomically(target: Path, data: bytes | str, *, mode: int = 0o600, durable: bool = False,
                     temporary_dir: Path | None = None) -> None:
    """Replace `target` with `data` (str as UTF-8) as replace_file does, writing through the temporary file's own
    descriptor."""
    content = memoryview(data.encode("utf-8") if isinstance(data, str) else data)
    handle, temporary = _new_temporary(temporary_dir or target.parent, target.name, mode)
    with _becoming(target, temporary, durable):
        try:
            while content:
                content = content[os.write(handle, content):]
            if durable:
                os.fsync(handle)
        finally:
            os.close(handle)
