"""What one document may be and become: cheap checks of a file's structure before it is converted, and the size of
its converted text after, so that a hostile or broken file fails fast and alone with the limit it broke and the
setting that sets it.

- An HTML page's element nesting, as docling's parser (html.parser, which nests unclosed tags) would build it, by a
  streaming scan that stops at the limit (RAG_MAX_HTML_DEPTH): docling walks the tree recursively, in time that
  grows with the square of the depth, and fails past ~500 levels.
- A DOCX or PPTX container's uncompressed size and compression ratio, from its ZIP directory (RAG_MAX_UNZIPPED_BYTES,
  RAG_MAX_ZIP_RATIO): a ZIP bomb is refused before anything inflates it.
- A PDF's page count (RAG_MAX_PDF_PAGES).
- The converted text's length (RAG_MAX_DOCUMENT_CHARS), which bounds what every later stage holds for the document
  (its chunks, vectors and points).

Every docling conversion also runs in a worker process with a time limit (ingest/convert.py, RAG_CONVERT_TIMEOUT_S).
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from rag_pipeline.settings import Settings

SCAN_BYTES = 1 << 20  # what the HTML scan reads at a time
# Elements without an end tag (html.parser's tree builder in BeautifulSoup does not nest inside them).
VOID_ELEMENTS = frozenset("area base basefont bgsound br col command embed frame hr image img input isindex keygen "
                          "link menuitem meta nextid param source spacer track wbr".split())


@dataclass(frozen=True)
class ConversionLimits:
    """The limits one document's conversion is held to (Settings: RAG_MAX_HTML_DEPTH, RAG_MAX_UNZIPPED_BYTES,
    RAG_MAX_ZIP_RATIO, RAG_MAX_PDF_PAGES, RAG_MAX_DOCUMENT_CHARS)."""

    html_depth: int
    unzipped_bytes: int
    zip_ratio: float
    pdf_pages: int
    document_chars: int

    @classmethod
    def of(cls, settings: Settings) -> ConversionLimits:
        return cls(settings.max_html_depth, settings.max_unzipped_bytes, settings.max_zip_ratio,
                   settings.max_pdf_pages, settings.max_document_chars)

    def text_refusal(self, chars: int) -> str | None:
        """Why a converted text of `chars` characters is refused (None: it is not)."""
        if chars > self.document_chars:
            return (f"too large once converted: {chars:,} characters exceed the limit of {self.document_chars:,} "
                    "per document (RAG_MAX_DOCUMENT_CHARS)")
        return None


class _DepthExceeded(Exception):
    pass


class _NestingScan(HTMLParser):
    """Follows the open elements the way BeautifulSoup's html.parser tree builder nests them: a start tag opens an
    element (not a void one), an end tag closes back to its element when one is open, else it is ignored."""

    def __init__(self, limit: int) -> None:
        super().__init__(convert_charrefs=False)
        self.limit = limit
        self.open: list[str] = []
        self.counts: dict[str, int] = {}
        self.deepest = 0

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag in VOID_ELEMENTS:
            return
        self.open.append(tag)
        self.counts[tag] = self.counts.get(tag, 0) + 1
        self.deepest = max(self.deepest, len(self.open))
        if len(self.open) > self.limit:
            raise _DepthExceeded

    def handle_startendtag(self, tag: str, attrs: object) -> None:
        pass  # <x/>: nothing stays open

    def handle_endtag(self, tag: str) -> None:
        if not self.counts.get(tag):
            return
        while True:
            closed = self.open.pop()
            self.counts[closed] -= 1
            if closed == tag:
                return


def html_nesting(path: Path, limit: int) -> int:
    """The deepest element nesting of an HTML file, scanned in pieces; limit + 1 as soon as it passes `limit`."""
    scan = _NestingScan(limit)
    try:
        with path.open("rb") as handle:
            while piece := handle.read(SCAN_BYTES):
                scan.feed(piece.decode("utf-8", errors="replace"))
        scan.close()
    except _DepthExceeded:
        return limit + 1
    return scan.deepest


def html_depth_refusal(path: Path, limits: ConversionLimits) -> str | None:
    if html_nesting(path, limits.html_depth) > limits.html_depth:
        return (f"too deeply nested: its elements nest more than {limits.html_depth} levels deep "
                "(RAG_MAX_HTML_DEPTH)")
    return None


def zip_bomb_refusal(path: Path, limits: ConversionLimits) -> str | None:
    """A ZIP bomb, from the container's directory: more uncompressed bytes, or a higher compression ratio, than the
    limits allow."""
    with zipfile.ZipFile(path) as archive:
        members = archive.infolist()
    unzipped = sum(member.file_size for member in members)
    compressed = sum(member.compress_size for member in members)
    if unzipped > limits.unzipped_bytes:
        return (f"too large unzipped: its parts hold {unzipped:,} bytes uncompressed, over the limit of "
                f"{limits.unzipped_bytes:,} (RAG_MAX_UNZIPPED_BYTES)")
    ratio = unzipped / max(compressed, 1)
    if ratio > limits.zip_ratio:
        return (f"a ZIP bomb: its parts inflate {ratio:,.0f} times ({compressed:,} bytes to {unzipped:,}), over the "
                f"limit of {limits.zip_ratio:g} (RAG_MAX_ZIP_RATIO)")
    return None


def pdf_pages_refusal(path: Path, limits: ConversionLimits) -> str | None:
    import pypdfium2

    try:
        pdf = pypdfium2.PdfDocument(path)
    except Exception:
        return None  # not readable: conversion reports why
    try:
        pages = len(pdf)
    finally:
        pdf.close()
    if pages > limits.pdf_pages:
        return f"too many pages: {pages:,} over the limit of {limits.pdf_pages:,} (RAG_MAX_PDF_PAGES)"
    return None
