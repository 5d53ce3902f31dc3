"""Document-to-Markdown conversion on real documents with real docling (no mocks), and its limits."""

from __future__ import annotations

import os
import re
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from rag_pipeline.ingest.convert import conversions
from rag_pipeline.ingest.converters import ConversionError, ConvertedDocument, DocumentConverter
from rag_pipeline.ingest.limits import ConversionLimits, html_nesting
from rag_pipeline.settings import Settings

from .conftest import DOCUMENTS

DOC_TYPES = {".md": "md", ".txt": "txt", ".pdf": "pdf", ".docx": "docx", ".html": "html", ".pptx": "pptx"}


@pytest.fixture(scope="module")
def documents_dir() -> Path:
    return DOCUMENTS


@pytest.fixture(scope="module")
def converter() -> DocumentConverter:
    return DocumentConverter()


@pytest.fixture(scope="module")
def converted(documents_dir: Path, converter: DocumentConverter) -> dict[str, ConvertedDocument]:
    """Every dataset document, converted once by one converter."""
    return {
        path.name: converter.convert(path, DOC_TYPES[path.suffix])
        for path in sorted(documents_dir.iterdir())
        if path.is_file()
    }


def normalise(heading: str) -> str:
    return re.sub(r"\W+", " ", heading.lstrip("#").replace("\\_", "_")).strip().lower()


def _headings(markdown: str) -> list[str]:
    return [normalise(line) for line in markdown.split("\n") if re.match(r"#{1,6} ", line)]


def _heading_recall(documents_dir: Path, doc: ConvertedDocument, name: str) -> float:
    """Share of the groundtruth headings found within one of the converted headings."""
    truth = (documents_dir / "groundtruth" / name).read_text(encoding="utf-8")
    expected = [heading for heading in _headings(truth) if re.search(r"[a-z]", heading)]
    found = _headings(doc.markdown)
    hits = [heading for heading in expected if any(heading in candidate for candidate in found)]
    print(f"{name}: {len(hits)}/{len(expected)} groundtruth headings recovered")
    return len(hits) / len(expected)


def test_every_document_converts(documents_dir: Path, converted: dict[str, ConvertedDocument]) -> None:
    assert len(converted) == sum(1 for path in documents_dir.iterdir() if path.is_file())
    for name, doc in converted.items():
        assert doc.markdown.strip(), name
        assert "<!--" not in doc.markdown, name
        assert "\n\n\n" not in doc.markdown, name
        assert all(line == line.rstrip() for line in doc.markdown.split("\n")), name


def test_converters_used(converted: dict[str, ConvertedDocument]) -> None:
    assert {doc.converter for name, doc in converted.items() if name.endswith(".pdf")} == {"docling-native-pdf"}
    assert {doc.converter for name, doc in converted.items() if name.endswith((".docx", ".html"))} == {"docling"}
    assert converted["README.md"].converter == "text"


def test_pdf_line_pages(converted: dict[str, ConvertedDocument]) -> None:
    for name, doc in converted.items():
        if not name.endswith(".pdf"):
            assert doc.line_pages is None and doc.page_count is None, name
            continue
        assert doc.line_pages is not None and doc.page_count is not None, name
        assert len(doc.line_pages) == len(doc.markdown.split("\n")), name
        assert doc.line_pages == sorted(doc.line_pages), name
        assert min(doc.line_pages) == 1 and max(doc.line_pages) == doc.page_count, name


def test_multi_page_pdf(documents_dir: Path, converted: dict[str, ConvertedDocument]) -> None:
    doc = converted["multi_page.pdf"]
    assert doc.page_count == 5
    lines = doc.markdown.split("\n")
    assert doc.line_pages is not None
    page_of = {line: page for line, page in zip(lines, doc.line_pages)}
    assert page_of["## A Glimpse Into the Future"] == 4
    last_paragraph = next(line for line in lines if line.startswith("The journey of the word processor"))
    assert page_of[last_paragraph] == 5
    assert doc.line_pages[-1] == 5
    assert doc.title == "The Evolution of the Word Processor"
    assert _heading_recall(documents_dir, doc, "multi_page.md") == 1.0
    # Bulleted lines become list items, wrapped lines join into one paragraph line.
    assert any(line.startswith("- IBM MT/ST (Magnetic Tape/Selectric Typewriter)") for line in lines)
    assert "Patented in 1868 by Christopher Latham Sholes, the typewriter revolutionized" in doc.markdown


@pytest.mark.parametrize(
    ("name", "groundtruth", "threshold"),
    [("redp5110_sampled.pdf", "redp5110_sampled.md", 0.75), ("2305.03393v1-pg9.pdf", "2305.03393v1-pg9.md", 1.0)],
)
def test_pdf_heading_recall(
    documents_dir: Path, converted: dict[str, ConvertedDocument], name: str, groundtruth: str, threshold: float
) -> None:
    assert _heading_recall(documents_dir, converted[name], groundtruth) >= threshold


def test_pdf_layout_details(converted: dict[str, ConvertedDocument]) -> None:
    code = converted["code_and_formula.pdf"].markdown
    assert "```\nfunction add(a, b) {\n" in code  # monospace lines become a code block
    assert "eirmod tempor" in code  # "eir-" + "mod" de-hyphenated
    assert not re.search(r"^1$", code, re.MULTILINE)  # bare page number dropped
    redp = converted["redp5110_sampled.pdf"].markdown
    assert "© Copyright IBM Corp. 2014" not in redp  # repeated page footer dropped


def test_docx_heading_hierarchy(converted: dict[str, ConvertedDocument]) -> None:
    doc = converted["unit_test_headers.docx"]
    headings = [line for line in doc.markdown.split("\n") if line.startswith("#")]
    assert headings[:4] == ["# Test Document", "## Section 1", "### Section 1.1", "### Section 1.2"]
    assert "#### Section 1.2.3" in headings
    assert doc.title == "Test Document"


def test_html_heading(converted: dict[str, ConvertedDocument]) -> None:
    assert "# Duck" in converted["wiki_duck.html"].markdown.split("\n")


def test_pptx_counts_slides(tmp_path: Path, converter: DocumentConverter) -> None:
    from pptx import Presentation

    deck = Presentation()
    for number in (1, 2):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = f"Slide {number}"
        slide.placeholders[1].text = f"point_{number}"
    deck.save(tmp_path / "deck.pptx")
    doc = converter.convert(tmp_path / "deck.pptx", "pptx")
    assert doc.page_count == 2 and doc.line_pages is None
    assert "point_2" in doc.markdown  # docling's underscore escaping is turned off
    assert doc.title == "Slide 1"


def test_random_bytes_pdf_raises(tmp_path: Path, converter: DocumentConverter) -> None:
    path = tmp_path / "random.pdf"
    path.write_bytes(os.urandom(4096))
    with pytest.raises(ConversionError, match="not a valid PDF"):
        converter.convert(path, "pdf")


def test_truncated_pdf_raises(documents_dir: Path, tmp_path: Path, converter: DocumentConverter) -> None:
    data = (documents_dir / "multi_page.pdf").read_bytes()
    path = tmp_path / "truncated.pdf"
    path.write_bytes(data[: len(data) // 2])
    # Neither docling-parse nor pypdfium2 can read this one (its fonts and xref are cut off).
    with pytest.raises(ConversionError, match="not a valid PDF.*truncated or damaged"):
        converter.convert(path, "pdf")


def test_pdf_without_text_raises(tmp_path: Path, converter: DocumentConverter) -> None:
    import pypdfium2

    pdf = pypdfium2.PdfDocument.new()
    pdf.new_page(200, 200)
    pdf.save(tmp_path / "blank.pdf")
    pdf.close()
    with pytest.raises(ConversionError, match="no text could be extracted"):
        converter.convert(tmp_path / "blank.pdf", "pdf")


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "utf-16", "latin-1"])
def test_txt_read_verbatim(tmp_path: Path, converter: DocumentConverter, encoding: str) -> None:
    text = "Café notes\n\na_b *c* <!-- kept -->\n# not a heading"
    path = tmp_path / "notes.txt"
    path.write_bytes(text.encode(encoding))
    doc = converter.convert(path, "txt")
    assert doc == ConvertedDocument(markdown=text, line_pages=None, page_count=None, title=None, converter="text")


def test_binary_txt_raises(tmp_path: Path, converter: DocumentConverter) -> None:
    path = tmp_path / "blob.txt"
    path.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(ConversionError, match="binary"):
        converter.convert(path, "txt")


def test_empty_txt_raises(tmp_path: Path, converter: DocumentConverter) -> None:
    path = tmp_path / "empty.txt"
    path.write_text(" \n\n \n", encoding="utf-8")
    with pytest.raises(ConversionError, match="no text could be extracted"):
        converter.convert(path, "txt")


def test_markdown_read_as_text(tmp_path: Path, converter: DocumentConverter) -> None:
    text = "# Guide\n\nUse snake_case names.\n\n```python\n# a comment\nx = 1\n```\n\n> quoted\n\n\n\nend   "
    path = tmp_path / "guide.md"
    path.write_text(text, encoding="utf-8")
    doc = converter.convert(path, "md")
    assert doc.markdown == text.replace("\n\n\n\n", "\n\n").rstrip()
    assert doc.title == "Guide" and doc.converter == "text"


def test_docling_converter_built_once(documents_dir: Path) -> None:
    converter = DocumentConverter()
    converter.convert(documents_dir / "lorem_ipsum.docx", "docx")
    built = converter.docling
    converter.convert(documents_dir / "multi_page.pdf", "pdf")
    converter.convert(documents_dir / "example_03.html", "html")
    assert converter.docling is built


def test_layout_model_without_weights_raises(documents_dir: Path) -> None:
    converter = DocumentConverter(pdf_pipeline="layout_model")
    with pytest.raises(ConversionError, match="layout model weights are not available.*RAG_PDF_PIPELINE=native"):
        converter.convert(documents_dir / "multi_page.pdf", "pdf")


LIMITS = ConversionLimits(html_depth=256, unzipped_bytes=50 * 2**20, zip_ratio=100, pdf_pages=10,
                          document_chars=1_000_000)


def nested_html(depth: int, tag: str = "div") -> str:
    return f"<html><body>{f'<{tag}>' * depth}<p>deep text</p>{f'</{tag}>' * depth}</body></html>"


def test_deeply_nested_html_fails_fast_before_docling(tmp_path: Path) -> None:
    """10,000 nested <div> (110 KB): docling took 47 s to end in a RecursionError; the streaming scan refuses it at
    the limit, and real pages (the dataset's, a page of unclosed <p>) pass it."""
    deep = tmp_path / "deep.html"
    deep.write_text(nested_html(10_000))
    converter = DocumentConverter(limits=LIMITS)
    with pytest.raises(ConversionError, match=r"too deeply nested: .* than 256 levels deep \(RAG_MAX_HTML_DEPTH\)"):
        converter.convert(deep, "html")
    assert converter._docling_converter is None  # refused before docling was even built
    assert html_nesting(deep, 256) == 257
    assert html_nesting(deep, 20_000) == 10_003  # html, body, the divs and the p
    flat = tmp_path / "flat.html"
    flat.write_text("<html><body>" + "<p>unclosed paragraph" * 200 + "<br><img src=x.png><hr/></body></html>")
    assert html_nesting(flat, 1_000) == 202  # html.parser nests unclosed tags, as docling's parser does
    assert max(html_nesting(path, 256) for path in DOCUMENTS.glob("*.html")) < 40
    assert converter.convert(DOCUMENTS / "wiki_duck.html", "html").markdown


def zip_bomb_docx(path: Path, inflated: int) -> None:
    """A real DOCX (python-docx) with one more part of `inflated` zero bytes, which deflate shrinks ~1,000 times."""
    import docx

    docx.Document().save(path)
    with zipfile.ZipFile(path, "a", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/media/padding.bin", bytes(inflated))


def test_zip_bombs_and_oversized_containers_are_refused(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.docx"
    zip_bomb_docx(bomb, 40 * 2**20)
    converter = DocumentConverter(limits=LIMITS)
    with pytest.raises(ConversionError, match=r"a ZIP bomb: its parts inflate [\d,]+ times .* \(RAG_MAX_ZIP_RATIO\)"):
        converter.convert(bomb, "docx")
    small_limit = DocumentConverter(limits=replace(LIMITS, unzipped_bytes=10_000))
    with pytest.raises(ConversionError, match=r"too large unzipped: .* over the limit of 10,000 "
                                              r"\(RAG_MAX_UNZIPPED_BYTES\)"):
        small_limit.convert(DOCUMENTS / "word_sample.docx", "docx")
    assert converter.convert(DOCUMENTS / "word_sample.docx", "docx").markdown  # a real document passes


def test_pdf_pages_and_converted_characters_are_capped(tmp_path: Path) -> None:
    from reportlab.pdfgen import canvas

    pdf = canvas.Canvas(str(tmp_path / "long.pdf"))
    for page in range(12):
        pdf.drawString(72, 720, f"Page {page} of a long report.")
        pdf.showPage()
    pdf.save()
    converter = DocumentConverter(limits=LIMITS)
    with pytest.raises(ConversionError, match=r"too many pages: 12 over the limit of 10 \(RAG_MAX_PDF_PAGES\)"):
        converter.convert(tmp_path / "long.pdf", "pdf")
    converter = DocumentConverter(limits=replace(LIMITS, document_chars=5_000))
    (tmp_path / "long.txt").write_text("A line of text that repeats.\n" * 200)
    with pytest.raises(ConversionError, match=r"too large once converted: 5,800 characters exceed the limit of 5,000 "
                                              r"per document \(RAG_MAX_DOCUMENT_CHARS\)"):
        converter.convert(tmp_path / "long.txt", "txt")
    with pytest.raises(ConversionError, match=r"too large once converted: [\d,]+ characters"):
        converter.convert(DOCUMENTS / "wiki_duck.html", "html")  # docling's output is capped too


def test_a_one_document_step_converts_in_a_worker_with_its_time_limit(tmp_path: Path) -> None:
    """A small step (an upload in the API process) no longer converts in-process without a time limit."""
    hangs = tmp_path / "hangs.html"
    os.mkfifo(hangs)  # docling blocks reading a FIFO nobody writes to
    settings = Settings(convert_workers=1, convert_timeout_s=3)
    converter = DocumentConverter(limits=replace(LIMITS, html_depth=10**9))  # not even the scan returns
    ((index, outcome),) = conversions(settings, converter, [(hangs, "html")])
    assert index == 0 and outcome.error == "the conversion did not finish: its worker process was stopped after 3 s"
