"""Source discovery on real files: hashing, dedup of roots and copies, ignore rules, refusals with reasons."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

from rag_pipeline.ingest.corpus_rules import is_ignored
from rag_pipeline.ingest.discover import dedupe_roots, discover

from .conftest import DOCUMENTS


def write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def reasons(manifest) -> dict[str, str]:
    return {Path(error.path).name: error.reason for error in manifest.errors}


def test_hashes_types_and_copies(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write(root / "a.md", "# A\n\ntext")
    write(root / "sub" / "copy.markdown", "# A\n\ntext")
    write(root / "b.htm", "<html><body><p>hi</p></body></html>")
    (root / "c.docx").write_bytes((DOCUMENTS / "lorem_ipsum.docx").read_bytes())
    write(root / "skip.rst", "not an accepted type")
    manifest = discover([root])
    assert not manifest.errors
    by_name = {Path(f.path).name: f for f in manifest.files}
    assert set(by_name) == {"a.md", "copy.markdown", "b.htm", "c.docx"}
    assert by_name["a.md"].sha256 == hashlib.sha256(b"# A\n\ntext").hexdigest()
    assert by_name["copy.markdown"].doc_type == "md" and by_name["b.htm"].doc_type == "html"
    documents = manifest.documents()
    assert len(documents) == 3
    assert [Path(f.path).name for f in documents[by_name["a.md"].sha256]] == ["a.md", "copy.markdown"]


def test_roots_are_deduplicated(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write(root / "inner" / "x.txt", "hello")
    assert dedupe_roots([root, root / "inner", str(root) + "/"]) == [root.resolve()]
    assert len(discover([root, root / "inner"]).files) == 1


def test_ignore_patterns() -> None:
    patterns = ["build/**", "*.tmp.md", "**/drafts/*"]
    assert is_ignored("build", patterns) and is_ignored("build/x/y.md", patterns)
    assert not is_ignored("builds/y.md", patterns)
    assert is_ignored(".DS_Store", ["**/.DS_Store"]) and is_ignored("a/.DS_Store", ["**/.DS_Store"])
    assert is_ignored("notes.tmp.md", patterns)
    assert is_ignored("a/drafts/x.md", patterns)
    assert not is_ignored("a/final/x.md", patterns)


def test_ignored_directories_are_not_walked(tmp_path: Path) -> None:
    root = tmp_path / "root"
    write(root / "keep.md", "keep")
    write(root / "build" / "out.md", "ignored")
    write(root / ".git" / "README.md", "ignored")
    manifest = discover([root], ignore=["build/**", ".git/**"])
    assert [Path(f.path).name for f in manifest.files] == ["keep.md"]


def test_bad_inputs_are_reported_with_reasons(tmp_path: Path) -> None:
    root = tmp_path / "root"
    outside = write(tmp_path / "outside" / "secret.md", "outside the root")
    write(root / "good.md", "# fine")
    write(root / "empty.txt", b"")
    write(root / "junk.md", b"\x00\x01" + random.Random(7).randbytes(500))
    write(root / "latin1.txt", "caf\xe9 cr\xe8me".encode("latin-1"))
    write(root / "fake.pdf", "just text, not a pdf")
    write(root / "fake.docx", b"PK\x03\x04 truncated zip")
    write(root / "big.md", "x" * 2000)
    (root / "escape.md").symlink_to(outside)
    (root / "escape_dir").symlink_to(outside.parent, target_is_directory=True)
    (root / "dangling.md").symlink_to(tmp_path / "missing.md")
    (root / "inside.md").symlink_to(root / "good.md")
    manifest = discover([root], max_file_bytes=1000)
    got = reasons(manifest)
    assert got["empty.txt"] == "empty file"
    assert "binary content" in got["junk.md"]
    assert "bad encoding" in got["latin1.txt"] and "0xe9" in got["latin1.txt"]
    assert "not a PDF" in got["fake.pdf"]
    assert "not a DOCX" in got["fake.docx"]
    assert "too large" in got["big.md"] and "RAG_MAX_FILE_BYTES" in got["big.md"]
    assert "outside the root" in got["escape.md"]
    assert "outside the root" in got["escape_dir"]
    assert "cannot read" in got["dangling.md"]
    assert sorted(Path(f.path).name for f in manifest.files) == ["good.md", "inside.md"]


def test_hash_cache_skips_rehashing_unchanged_files(tmp_path: Path) -> None:
    root = tmp_path / "root"
    path = write(root / "a.md", "first")
    cache: dict = {}
    first = discover([root], cache=cache)
    key = str(path.resolve())
    assert cache[key][2] == first.files[0].sha256
    size, mtime, _ = cache[key]
    cache[key] = (size, mtime, "f" * 64)  # a cached entry is trusted while size and mtime match
    assert discover([root], cache=cache).files[0].sha256 == "f" * 64
    write(path, "second, longer")
    assert discover([root], cache=cache).files[0].sha256 == hashlib.sha256(b"second, longer").hexdigest()
