"""Files replaced whole: the new content goes to a temporary file on the same file system, which is then renamed
over the target, so a reader (or the next process after a kill) sees the old file or the new one, never part of
either, and a failed write leaves no temporary file behind."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def replace_file(target: Path, write: Callable[[Path], None], *, mode: int = 0o600, durable: bool = False,
                 temporary_dir: Path | None = None) -> None:
    """`write(temporary path)`, then the temporary file (permissions `mode`) becomes `target`. `durable`: the content
    and the rename are on disk when this returns (a power loss leaves the old file or the new one).
    `temporary_dir`: where the temporary file is made (default: beside `target`; it must be on the same file
    system), for a target in a folder others watch or read."""
    handle, name = tempfile.mkstemp(dir=temporary_dir or target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(handle)
    temporary = Path(name)
    try:
        write(temporary)
        os.chmod(temporary, mode)
        if durable:
            with temporary.open("rb") as written:
                os.fsync(written.fileno())
        os.replace(temporary, target)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    if durable:
        folder = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


def write_atomically(target: Path, data: bytes | str, *, mode: int = 0o600, durable: bool = False,
                     temporary_dir: Path | None = None) -> None:
    """Replace `target` with `data` (str as UTF-8) as replace_file does."""
    content = data.encode("utf-8") if isinstance(data, str) else data
    replace_file(target, lambda temporary: temporary.write_bytes(content), mode=mode, durable=durable,
                 temporary_dir=temporary_dir)
