"""Files replaced whole (rag_pipeline/atomic_file.py): the target holds the old content or the new, with the asked
permissions; a write that fails leaves the old content and no temporary file; the temporary file can be made in
another folder (uploads make theirs outside every source's folder)."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

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
