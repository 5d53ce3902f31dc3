"""Files replaced whole (rag_pipeline/atomic_file.py): the target holds the old content or the new, with the asked
permissions whatever the umask; a write that fails, even part way, leaves the old content and no temporary file; a
temporary file a killed process left is neither reused nor removed; a writer that opens the temporary file again
can write it whatever the final mode; the temporary file can be made in another folder (uploads make theirs outside
every source's folder)."""

from __future__ import annotations

import errno
import itertools
import os
import stat
from pathlib import Path

import pytest

from rag_pipeline import atomic_file
from rag_pipeline.atomic_file import replace_file, write_atomically


def test_the_target_is_replaced_with_the_asked_mode(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_text("old")
    write_atomically(target, "new ✓", durable=True)
    assert target.read_text(encoding="utf-8") == "new ✓"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    write_atomically(target, b"\x00bytes", mode=0o640)
    assert target.read_bytes() == b"\x00bytes" and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(path.name for path in tmp_path.iterdir()) == ["state.json"]


def test_a_failed_write_leaves_the_old_content_and_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "model.onnx"
    target.write_text("old")

    def half_then_fail(temporary: Path) -> None:
        temporary.write_text("half of the n")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        replace_file(target, half_then_fail)
    assert target.read_text() == "old"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["model.onnx"]


def test_the_temporary_file_is_made_where_asked(tmp_path: Path) -> None:
    source, incoming = tmp_path / "source", tmp_path / "incoming"
    source.mkdir()
    incoming.mkdir()
    seen = []

    def write(temporary: Path) -> None:
        seen.append((temporary.parent, sorted(source.iterdir())))
        temporary.write_bytes(b"%PDF-1.7")

    replace_file(source / "report.pdf", write, temporary_dir=incoming, durable=True)
    assert seen == [(incoming, [])]  # a watcher of the source folder never sees a partial file
    assert (source / "report.pdf").read_bytes() == b"%PDF-1.7" and not list(incoming.iterdir())


def test_the_asked_mode_holds_under_any_umask(tmp_path: Path) -> None:
    previous = os.umask(0o077)
    try:
        write_atomically(tmp_path / "upload.pdf", b"%PDF", mode=0o640)
        replace_file(tmp_path / "model.onnx", lambda temporary: temporary.write_bytes(b"onnx"), mode=0o644)
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "upload.pdf").stat().st_mode) == 0o640
    assert stat.S_IMODE((tmp_path / "model.onnx").stat().st_mode) == 0o644


def test_a_temporary_file_a_killed_process_left_is_passed_over_and_kept(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(atomic_file, "_TEMPORARY_COUNT", itertools.count())
    leftover = tmp_path / f".state.json.{os.getpid()}.0.tmp"  # a dead process that had this process's id
    leftover.write_text("left by a kill")
    write_atomically(tmp_path / "state.json", "new")
    assert (tmp_path / "state.json").read_text() == "new"
    assert sorted(path.name for path in tmp_path.iterdir()) == [leftover.name, "state.json"]
    assert leftover.read_text() == "left by a kill"


class FillingDisk:
    """The os module as atomic_file sees it, on a disk that fills after one short write."""

    def __init__(self) -> None:
        self.written: list[int] = []

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)

    def write(self, handle: int, data: memoryview) -> int:
        if self.written:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.written.append(os.write(handle, data[:3]))
        return self.written[-1]


def test_a_write_that_fails_part_way_leaves_the_old_content_and_no_temporary_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "chunks.jsonl"
    target.write_text("old")
    disk = FillingDisk()
    monkeypatch.setattr(atomic_file, "os", disk)
    with pytest.raises(OSError, match="No space left"):
        write_atomically(target, b"x" * 100_000)
    assert disk.written == [3]
    assert target.read_text() == "old"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["chunks.jsonl"]


def test_a_writer_that_opens_the_temporary_file_again_may_write_it_whatever_the_final_mode(tmp_path: Path) -> None:
    target, modes = tmp_path / "model.onnx", []

    def write(temporary: Path) -> None:
        modes.append(stat.S_IMODE(temporary.stat().st_mode))  # root would write through 0444 anyway: look at it
        temporary.write_bytes(b"read only once made")

    replace_file(target, write, mode=0o444)
    assert modes == [0o600]
    assert target.read_bytes() == b"read only once made" and stat.S_IMODE(target.stat().st_mode) == 0o444
