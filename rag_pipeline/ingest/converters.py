"""Convert a source document (md, txt, pdf, docx, html, pptx) to clean Markdown.

TXT and Markdown are read as text (docling's Markdown round trip escapes underscores and
drops code-fence languages and block quotes). DOCX, HTML and PPTX go through docling. PDFs
go through docling's model-free native pipeline with our layout recovery (pdf_layout) or,
on request, docling's layout-model pipeline; a PDF docling cannot read falls back to plain
pypdfium2 text extraction. Which path a type takes is its `converter` in ingest/formats.py.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import pypdfium2

from rag_pipeline.errors import ConfigError, InputError
from rag_pipeline.fields.values import DocumentFields
from rag_pipeline.ingest.formats import format_of, stated_fields
from rag_pipeline.ingest.limits import ConversionLimits
from rag_pipeline.ingest.pdf_layout import pages_to_markdown
from rag_pipeline.ingest.stated_fields import front_matter_fields, split_front_matter
from rag_pipeline.settings import Settings

if TYPE_CHECKING:  # docling takes seconds to import: it is imported when the first converter is built
    from docling.datamodel.document import ConversionResult
    from docling.document_converter import DocumentConverter as DoclingConverter

PdfPipeline = Literal["native", "layout_model"]
_COMMENT = re.compile(r"<!--.*?-->")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)(?:\s+#+)?\s*$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))


@dataclass(frozen=True)
class ConvertedDocument:
    """A converted document.

    line_pages holds the 1-based page of every line of markdown.split("\\n") (None for
    unpaginated types); page_count is set for PDFs and PPTX (slides). line_origins holds the 1-based line of the
    original file every Markdown line comes from (text and Markdown files: the front matter and collapsed blank
    lines are counted), None for each line of a converted format (its lines are docling's, not the file's).
    `fields` are the properties the document states (a Markdown file's front matter, which is not part of
    `markdown`; a file's document properties).
    """

    markdown: str
    line_pages: list[int] | None
    page_count: int | None
    title: str | None
    converter: str  # "text", "docling", "docling-native-pdf", "docling-layout-model" or "pypdfium2-fallback"
    fields: DocumentFields = field(default_factory=DocumentFields)
    line_origins: list[int | None] = field(default_factory=list, compare=False)  # provenance, not content


class ConversionError(InputError):
    """Raised with a clear human reason (e.g. 'not a valid PDF: ...', 'no text could be extracted')."""


class DocumentConverter:
    """Converts documents to Markdown, reusing one docling converter for every file, within the conversion limits
    (ingest/limits.py; default: the settings' defaults)."""

    def __init__(self, pdf_pipeline: PdfPipeline = "native", limits: ConversionLimits | None = None) -> None:
        if pdf_pipeline not in ("native", "layout_model"):
            raise ConfigError(f"unknown PDF pipeline {pdf_pipeline!r}: use 'native' or 'layout_model'")
        self.pdf_pipeline = pdf_pipeline
        self.limits = limits or ConversionLimits.of(Settings.model_construct())
        self._docling_converter: DoclingConverter | None = None

    @property
    def docling(self) -> DoclingConverter:
        """The docling converter, built on first use."""
        if self._docling_converter is None:
            self._docling_converter = _build_docling(self.pdf_pipeline)
        return self._docling_converter

    def convert(self, path: Path, doc_type: str) -> ConvertedDocument:
        """Convert one file of a type of ingest/formats.py's table, with the properties it states as its fields;
        ConversionError when the file or its text is over the conversion limits."""
        fmt = format_of(doc_type)
        if fmt.converter == "text":
            return _convert_text(path, doc_type, self.limits)
        reason = fmt.exceeds(path, self.limits) if fmt.exceeds is not None else None
        if reason is not None:
            raise ConversionError(reason)
        converted = self._convert_pdf(path) if fmt.converter == "pdf" else self._convert_with_docling(path, doc_type)
        reason = self.limits.text_refusal(len(converted.markdown))
        if reason is not None:
            raise ConversionError(reason)
        return replace(converted, fields=stated_fields(fmt, path))

    def _convert_with_docling(self, path: Path, doc_type: str) -> ConvertedDocument:
        try:
            result = self.docling.convert(path, raises_on_error=False)
        except Exception as exc:
            raise ConversionError(f"docling could not convert the {doc_type.upper()} file: {exc}") from exc
        _raise_on_failure(result, f"docling could not convert the {doc_type.upper()} file")
        slides = len(result.document.pages) if doc_type == "pptx" else 0
        return _finish(_export_markdown(result).split("\n"), None, slides or None, "docling")

    def _convert_pdf(self, path: Path) -> ConvertedDocument:
        if self.pdf_pipeline == "layout_model":
            self._initialize_layout_pipeline()
        try:
            result = self.docling.convert(path, raises_on_error=False)
            _raise_on_failure(result, "not a valid PDF")
        except ConversionError as exc:
            return _pypdfium2_fallback(path, str(exc))
        except Exception as exc:
            return _pypdfium2_fallback(path, f"not a valid PDF: {exc}")

        if self.pdf_pipeline == "native":
            lines, pages = pages_to_markdown(result.pages)
            converter = "docling-native-pdf"
        else:
            lines, pages = _markdown_by_page(result)
            converter = "docling-layout-model"
        if not any(line.strip() for line in lines):
            return _pypdfium2_fallback(path, "no text could be extracted")
        return _finish(lines, pages, result.input.page_count, converter)

    def _initialize_layout_pipeline(self) -> None:
        from docling.datamodel.base_models import InputFormat

        try:
            self.docling.initialize_pipeline(InputFormat.PDF)
        except Exception as exc:
            raise ConversionError(
                f"docling's PDF layout model weights are not available ({type(exc).__name__}: {exc}); "
                "install them (the layout-models extra plus the downloaded weights) or set RAG_PDF_PIPELINE=native"
            ) from exc


def _build_docling(pdf_pipeline: PdfPipeline) -> DoclingConverter:
    from docling.datamodel.base_models import InputFormat
    from docling.datamodel.pipeline_options import (
        NativePdfPipelineOptions,
        PdfPipelineOptions,
    )
    from docling.document_converter import DocumentConverter as DoclingConverter
    from docling.document_converter import NativePdfFormatOption, PdfFormatOption

    if pdf_pipeline == "native":
        pdf_option: PdfFormatOption = NativePdfFormatOption(
            pipeline_options=NativePdfPipelineOptions(generate_page_images=False, generate_picture_images=False)
        )
    else:
        pdf_option = PdfFormatOption(pipeline_options=PdfPipelineOptions())
    return DoclingConverter(
        allowed_formats=[InputFormat.PDF, InputFormat.DOCX, InputFormat.HTML, InputFormat.PPTX],
        format_options={InputFormat.PDF: pdf_option},
    )


def _raise_on_failure(result: ConversionResult, reason: str) -> None:
    from docling.datamodel.base_models import ConversionStatus

    if result.status not in (ConversionStatus.SUCCESS, ConversionStatus.PARTIAL_SUCCESS):
        details = "; ".join(error.error_message for error in result.errors) or f"status {result.status.value}"
        raise ConversionError(f"{reason}: {details}")


def _export_markdown(result: ConversionResult, page_no: int | None = None) -> str:
    return result.document.export_to_markdown(
        escape_underscores=False, escape_html=False, image_placeholder="", page_no=page_no
    )


def _markdown_by_page(result: ConversionResult) -> tuple[list[str], list[int]]:
    """Markdown of a layout-model conversion, exported page by page to keep line pages."""
    lines: list[str] = []
    pages: list[int] = []
    for page_no in sorted(result.document.pages):
        page_lines = _export_markdown(result, page_no).split("\n") + [""]
        lines += page_lines
        pages += [page_no] * len(page_lines)
    return lines, pages


def _pypdfium2_fallback(path: Path, docling_reason: str) -> ConvertedDocument:
    """Plain text of every PDF page, for PDFs docling could not read."""
    try:
        pdf = pypdfium2.PdfDocument(path)
    except Exception as exc:
        raise ConversionError(f"{docling_reason} (pypdfium2 fallback: {exc})") from exc
    lines: list[str] = []
    pages: list[int] = []
    try:
        for page_no, page in enumerate(pdf, start=1):
            text = page.get_textpage().get_text_range()
            for line in text.splitlines() + [""]:
                lines.append("\\" + line if line.startswith("#") else line)
                pages.append(page_no)
        page_count = len(pdf)
    except Exception as exc:
        raise ConversionError(f"{docling_reason} (pypdfium2 fallback: {exc})") from exc
    finally:
        pdf.close()
    if not any(line.strip() for line in lines):
        raise ConversionError("no text could be extracted")
    return _finish(lines, pages, page_count, "pypdfium2-fallback")


def _convert_text(path: Path, doc_type: str, limits: ConversionLimits) -> ConvertedDocument:
    """A text or Markdown file as it is; a Markdown file's front matter becomes its fields, not its text."""
    text = _decode_text(path.read_bytes())
    reason = limits.text_refusal(len(text))
    if reason is not None:
        raise ConversionError(reason)
    fields, first_line = DocumentFields(), 1
    if doc_type == "md":
        block, body = split_front_matter(text)
        if block is not None:
            fields = front_matter_fields(block)
            first_line += text.replace("\r\n", "\n").count("\n") - body.count("\n")  # the front matter's lines
        text = body
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    converted = _finish(lines, None, None, "text", strip_comments=False, find_title=doc_type == "md",
                        first_line=first_line)
    return replace(converted, fields=fields)


def _decode_text(data: bytes) -> str:
    """UTF-8 (or UTF-8/16 with a BOM); undecodable bytes fall back to cp1252, then latin-1."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(encoding)
            except UnicodeDecodeError as exc:
                raise ConversionError(f"not a valid {encoding} text file: {exc}") from exc
    if b"\x00" in data:
        raise ConversionError("not a text file: it contains binary data")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        try:
            text = data.decode("cp1252")
        except UnicodeDecodeError:
            text = data.decode("latin-1")
    controls = sum(1 for char in text if ord(char) < 32 and char not in "\t\n\r\f")
    if controls > 0.05 * len(text):
        raise ConversionError("not a text file: it contains binary data")
    return text


def _finish(
    lines: list[str],
    pages: list[int] | None,
    page_count: int | None,
    converter: str,
    strip_comments: bool = True,
    find_title: bool = True,
    first_line: int | None = None,
) -> ConvertedDocument:
    """Strip HTML comments and trailing whitespace, collapse blank runs, keep pages in sync. `lines` are the
    original file's from line `first_line` on (a text format), or a conversion's (None: no original lines)."""
    kept: list[tuple[str, int, int | None]] = []
    for index, raw in enumerate(lines):
        line = _COMMENT.sub("", raw) if strip_comments else raw
        line = line.rstrip()
        if not line and raw.strip():
            continue  # the line held only a comment
        if not line and (not kept or not kept[-1][0]):
            continue  # a leading or repeated blank line
        kept.append((line, pages[index] if pages is not None else 0,
                     first_line + index if first_line is not None else None))
    while kept and not kept[-1][0]:
        kept.pop()
    if not kept:
        raise ConversionError("no text could be extracted")
    markdown = "\n".join(line for line, _, _ in kept)
    return ConvertedDocument(
        markdown=markdown,
        line_pages=[page for _, page, _ in kept] if pages is not None else None,
        page_count=page_count,
        title=first_heading(markdown) if find_title else None,
        converter=converter,
        line_origins=[origin for _, _, origin in kept],
    )


def first_heading(markdown: str) -> str | None:
    """The text of the first ATX heading outside code fences, or None."""
    in_fence = False
    for line in markdown.split("\n"):
        if _FENCE.match(line):
            in_fence = not in_fence
        elif not in_fence and (match := _HEADING.match(line)):
            return match.group(1)
    return None


