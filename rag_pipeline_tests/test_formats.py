"""The format table (ingest/formats.py) is the one place a format is declared: discovery, uploads, conversion,
the corpus rules and the settings all read it, and they agree on every real sample file."""

from __future__ import annotations

from pathlib import Path

import pytest

from rag_pipeline.ingest.converters import DocumentConverter
from rag_pipeline.ingest.corpus_rules import parse_rules
from rag_pipeline.ingest.discover import discover
from rag_pipeline.ingest.formats import (
    BY_EXTENSION,
    FORMATS,
    Head,
    enabled_extensions,
    extension_of,
    format_of_path,
    recognise,
)
from rag_pipeline.ingest.uploads import RefusedUpload, sniff_upload
from rag_pipeline.settings import Settings

from .conftest import DOCUMENTS

SAMPLES = sorted(path for path in (Path(__file__).resolve().parents[1] / "golden" / "corpus").rglob("*")
                 if path.is_file())


def test_every_format_is_declared_once() -> None:
    types = [fmt.doc_type for fmt in FORMATS]
    extensions = [extension for fmt in FORMATS for extension in fmt.extensions]
    assert len(types) == len(set(types)) and len(extensions) == len(set(extensions))
    assert enabled_extensions(Settings().extensions) == set(BY_EXTENSION)  # the default ingests every format
    assert enabled_extensions(["MD", ".pdf", "exe"]) == {"md", "pdf"}


def test_the_samples_cover_every_format() -> None:
    assert {format_of_path(path).doc_type for path in SAMPLES} == {fmt.doc_type for fmt in FORMATS}


@pytest.mark.parametrize("path", SAMPLES, ids=lambda path: path.name)
def test_discovery_uploads_and_conversion_agree_on_a_real_file(path: Path) -> None:
    fmt = format_of_path(path)
    head = Head.read(path=path)
    assert fmt.refusal(head) is None  # discovery accepts the file under its extension
    assert recognise(head, path.name) is fmt  # an upload of the same bytes and name gets the same type
    assert sniff_upload(path.read_bytes(), path.name) == fmt.doc_type
    assert DocumentConverter().convert(path, fmt.doc_type).markdown.strip()


def test_a_file_whose_bytes_do_not_match_its_extension_is_refused_with_the_reason(tmp_path: Path) -> None:
    for name, data, reason in [("a.pdf", b"plain text", "no %PDF- header"),
                               ("b.docx", b"%PDF-1.4 ...", "not a ZIP/Office Open XML container"),
                               ("c.md", b"\x00\x01binary", "NUL bytes"),
                               ("d.txt", b"caf\xe9 au lait\n", "not valid UTF-8")]:
        (tmp_path / name).write_bytes(data)
    manifest = discover([tmp_path])
    refused = {Path(error.path).name: error.reason for error in manifest.errors}
    assert not manifest.files
    assert "no %PDF- header" in refused["a.pdf"] and "Office Open XML" in refused["b.docx"]
    assert "NUL bytes" in refused["c.md"] and "not valid UTF-8" in refused["d.txt"]


def test_corpus_rules_know_the_types_of_the_table() -> None:
    assert parse_rules({"types": [fmt.doc_type for fmt in FORMATS]}, "rules.yaml").types
    with pytest.raises(ValueError, match="unknown type"):
        parse_rules({"types": ["exe"]}, "rules.yaml")


def pe_header() -> bytes:
    """The first bytes of a Windows executable: a DOS header whose e_lfanew (offset 60) points to "PE\\0\\0"."""
    dos = bytearray(b"MZ" + bytes(126))
    dos[60:64] = (128).to_bytes(4, "little")
    return bytes(dos) + b"PE\x00\x00" + bytes(64)


EXECUTABLES = {"ELF": b"\x7fELF\x02\x01\x01" + bytes(57), "Windows PE": pe_header(),
               "Mach-O": b"\xcf\xfa\xed\xfe" + bytes(60)}


@pytest.mark.parametrize("kind", sorted(EXECUTABLES))
def test_an_executable_in_disguise_is_refused(kind: str, tmp_path: Path) -> None:
    """An executable that carries %PDF- (readers accept the header anywhere in the first 1024 bytes) was stored as
    .pdf: it is refused by discovery (text formats refuse its NUL bytes) and by uploads under any name, and a PDF
    must start with its header."""
    polyglot = EXECUTABLES[kind] + b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"
    for name in ("report.pdf", "notes.md", "page.html"):
        (tmp_path / name).write_bytes(polyglot)
    manifest = discover([tmp_path])
    assert not manifest.files
    refused = {Path(error.path).name: error.reason for error in manifest.errors}
    assert refused["report.pdf"] == f"an executable ({kind}), not a document"
    assert "binary content (NUL bytes)" in refused["notes.md"] and "binary content" in refused["page.html"]
    for name in ("report.pdf", "report.txt"):
        with pytest.raises(RefusedUpload, match=rf"is an executable \({kind}\), not a document"):
            sniff_upload(polyglot, name)


def test_a_pdf_must_start_with_its_header_and_a_script_is_text(tmp_path: Path) -> None:
    pdf = (DOCUMENTS / "multi_page.pdf").read_bytes()
    with pytest.raises(RefusedUpload, match="is not UTF-8 text|unsupported"):
        sniff_upload(b"#!/bin/sh\necho hi\n" + pdf, "run.pdf")
    assert sniff_upload(b"\n" + pdf, "a.pdf") == "pdf" and sniff_upload(pdf, "b.pdf") == "pdf"
    assert sniff_upload(b"#!/bin/sh\necho hello\n", "deploy.txt") == "txt"  # readable text, never run
    assert sniff_upload(b"MZ Widgets: the quarterly report\n", "mz.txt") == "txt"  # not a PE header


@pytest.mark.parametrize("name", ["a.tar.gz", ".bashrc", "dir.d/file", "file.", "X.PDF", "noext", "a/b.c/d.MD", "..md",
                                  "a..md", "/x/.hidden.md", ".", "..", "notes.Markdown"])
def test_extension_of_follows_pathlibs_suffix(name: str) -> None:
    assert extension_of(name) == Path(name).suffix.lower().lstrip(".")
