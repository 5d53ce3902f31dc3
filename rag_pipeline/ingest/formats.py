"""The document formats rag_pipeline ingests, in one table that discovery, uploads, conversion, the stated fields,
the corpus rules and the planner all read. A format is its type, its file extensions, how its bytes are recognised,
how it is converted to Markdown and which properties it states. Adding a format is an entry in FORMATS (and, for a
new kind of conversion, a DocumentConverter method): see docs/extending.md.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rag_pipeline.fields.values import DocumentFields
from rag_pipeline.ingest.limits import ConversionLimits, html_depth_refusal, pdf_pages_refusal, zip_bomb_refusal
from rag_pipeline.ingest.stated_fields import html_fields, office_fields, pdf_fields

SNIFF_BYTES = 64 * 1024  # what the sniffers read of a file
HTML_TAG_WINDOW = 1024  # how far into a file an <html> tag makes it a page
# The first bytes of executables (Mach-O in both byte orders and as a universal binary). Readers accept %PDF- anywhere
# in a PDF's first 1024 bytes, which lets a file be an executable and a PDF at once: a PDF must start with its
# header, and no upload may start as an executable (text formats refuse them anyway: their headers hold NUL bytes).
# A script with a shebang is text, and is read as text.
EXECUTABLE_MAGIC = {b"\x7fELF": "ELF", b"\xfe\xed\xfa\xce": "Mach-O", b"\xfe\xed\xfa\xcf": "Mach-O",
                    b"\xce\xfa\xed\xfe": "Mach-O", b"\xcf\xfa\xed\xfe": "Mach-O", b"\xca\xfe\xba\xbe": "Mach-O universal",
                    b"\x00asm": "WebAssembly"}


@dataclass(frozen=True)
class Head:
    """What the sniffers see of a file: its first bytes, whether they are the whole file, and the member names of
    a ZIP container (None when the bytes are not one; a corrupt container keeps its error)."""

    data: bytes
    complete: bool
    members: tuple[str, ...] | None = None
    zip_error: str | None = None

    @classmethod
    def read(cls, data: bytes | None = None, path: Path | None = None) -> Head:
        """The head of `data` (an upload: all its bytes) or of the file at `path`."""
        if path is not None:
            with path.open("rb") as handle:
                head = handle.read(SNIFF_BYTES)
            complete, opened = path.stat().st_size <= SNIFF_BYTES, path
        else:
            assert data is not None
            head, complete, opened = data[:SNIFF_BYTES], len(data) <= SNIFF_BYTES, io.BytesIO(data)
        if not head.startswith(b"PK\x03\x04"):
            return cls(head, complete)
        try:
            with zipfile.ZipFile(opened) as archive:
                return cls(head, complete, tuple(archive.namelist()))
        except zipfile.BadZipFile as error:
            return cls(head, complete, (), str(error))


def text_refusal(head: Head, *, require_utf8: bool = True) -> str | None:
    """Why the bytes are not text: NUL bytes, or (with require_utf8) not UTF-8. UTF-16 with a BOM is text; a
    multi-byte character cut at the end of the window is fine."""
    if head.data.startswith((b"\xff\xfe", b"\xfe\xff")):
        return None
    if b"\x00" in head.data:
        return "binary content (NUL bytes) in a text file"
    if not require_utf8:
        return None
    try:
        head.data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if head.complete or exc.start < len(head.data) - 4:
            return f"bad encoding: not valid UTF-8 (byte 0x{head.data[exc.start]:02x} at offset {exc.start})"
    return None


def executable_refusal(head: Head) -> str | None:
    """Why the bytes are no document: they start as an executable (ELF, Windows PE, Mach-O, ...)."""
    kind = next((name for magic, name in EXECUTABLE_MAGIC.items() if head.data.startswith(magic)), None)
    if kind is None and head.data.startswith(b"MZ") and len(head.data) >= 64:
        offset = int.from_bytes(head.data[60:64], "little")  # a DOS header points to the PE header
        kind = "Windows PE" if head.data[offset:offset + 4] == b"PE\x00\x00" else None
    return f"an executable ({kind}), not a document" if kind else None


def pdf_refusal(head: Head) -> str | None:
    if (executable := executable_refusal(head)) is not None:  # it may carry %PDF- further in
        return executable
    if not head.data.lstrip().startswith(b"%PDF-"):
        return "not a PDF: no %PDF- header at its start"
    return None


def office_refusal(doc_type: str, part: str) -> Callable[[Head], str | None]:
    """The sniffer of an Office Open XML format: a ZIP container with the format's `part` folder."""
    def refusal(head: Head) -> str | None:
        if head.members is None:
            return f"not a {doc_type.upper()}: not a ZIP/Office Open XML container"
        if head.zip_error is not None:
            return f"not a {doc_type.upper()}: corrupt ZIP container ({head.zip_error})"
        if not any(name.startswith(part) for name in head.members):
            return f"not a {doc_type.upper()}: the container has no {part} part"
        return None
    return refusal


def uploaded_text(head: Head) -> bool:
    """Bytes an upload may be taken as text from: UTF-8 (or UTF-16 with a BOM) without NUL bytes, and not a ZIP
    container (an archive that is no Office format is refused, never read as text)."""
    return head.members is None and text_refusal(head) is None


def looks_like_html(head: Head) -> bool:
    """Text that starts as an HTML document or holds an <html> tag early on."""
    start = head.data.decode("utf-8-sig", errors="replace").lstrip().lower()
    return start.startswith(("<!doctype html", "<html")) or b"<html" in head.data[:HTML_TAG_WINDOW].lower()


def named(*suffixes: str) -> Callable[[str], bool]:
    return lambda filename: filename.lower().endswith(suffixes)


@dataclass(frozen=True)
class Format:
    """One document format.

    refusal: why bytes under one of its extensions are not this format (None: they are).
    recognised: whether an upload's bytes (and, for text, its name) are this format: uploads try FORMATS in order.
    converter: the DocumentConverter method that converts it ("text" in the ingest process; "pdf" and "docling"
    through docling, in conversion workers for large steps).
    read_fields: the document properties it states (title, author, ...), besides any its converter finds.
    words: how people name such documents in questions ("slides", "word"), for the planner.
    exceeds: why a file of this format is over the conversion limits (ingest/limits.py), checked before converting.
    """

    doc_type: str
    extensions: tuple[str, ...]
    refusal: Callable[[Head], str | None]
    recognised: Callable[[Head, str], bool]
    converter: Literal["text", "pdf", "docling"]
    is_text: bool = False  # its bytes are text (the manifest previews what redaction would change)
    read_fields: Callable[[Path], DocumentFields] | None = None
    words: tuple[str, ...] = ()
    exceeds: Callable[[Path, ConversionLimits], str | None] | None = None

    @property
    def uses_docling(self) -> bool:
        """Whether docling converts it (in conversion workers), rather than the ingest process reading its text."""
        return self.converter != "text"


FORMATS: tuple[Format, ...] = (
    Format("pdf", ("pdf",), pdf_refusal, lambda head, _: pdf_refusal(head) is None, "pdf",
           read_fields=pdf_fields, words=("pdf", "pdfs"), exceeds=pdf_pages_refusal),
    Format("docx", ("docx",), office_refusal("docx", "word/"),
           lambda head, _: office_refusal("docx", "word/")(head) is None, "docling",
           read_fields=lambda path: office_fields(path, "docx"), words=("docx", "word"), exceeds=zip_bomb_refusal),
    Format("pptx", ("pptx",), office_refusal("pptx", "ppt/"),
           lambda head, _: office_refusal("pptx", "ppt/")(head) is None, "docling",
           read_fields=lambda path: office_fields(path, "pptx"),
           words=("pptx", "powerpoint", "slide decks", "slides", "presentations"), exceeds=zip_bomb_refusal),
    Format("html", ("html", "htm"), lambda head: text_refusal(head, require_utf8=False),
           lambda head, _: uploaded_text(head) and looks_like_html(head), "docling", is_text=True,
           read_fields=html_fields, words=("html", "web pages"), exceeds=html_depth_refusal),
    Format("md", ("md", "markdown"), text_refusal,
           lambda head, name: uploaded_text(head) and named(".md", ".markdown")(name), "text", is_text=True,
           words=("markdown", "md")),
    Format("txt", ("txt",), text_refusal, lambda head, _: uploaded_text(head), "text", is_text=True,
           words=("text files", "txt")),
)
BY_TYPE: dict[str, Format] = {fmt.doc_type: fmt for fmt in FORMATS}
BY_EXTENSION: dict[str, Format] = {extension: fmt for fmt in FORMATS for extension in fmt.extensions}
DOC_TYPES: tuple[str, ...] = tuple(BY_TYPE)


def format_of(doc_type: str) -> Format:
    return BY_TYPE[doc_type]


def format_of_path(path: Path | str) -> Format | None:
    """The format a file's extension names (None: not a type that is ingested)."""
    return BY_EXTENSION.get(extension_of(str(path)))


def extension_of(name: str) -> str:
    """A file name's or path's extension, lower case, without the dot: pathlib's `suffix` rule, without building a
    Path (discovery asks it of every file)."""
    base = name.rsplit("/", 1)[-1]
    dot = base.rfind(".")
    return base[dot + 1:].lower() if 0 < dot < len(base) - 1 else ""


def enabled_extensions(configured: Iterable[str] | None) -> set[str]:
    """The extensions ingested: RAG_EXTENSIONS (lower case, without dots) among the known ones, else all of them."""
    if configured is None:
        return set(BY_EXTENSION)
    return {extension.lower().lstrip(".") for extension in configured} & set(BY_EXTENSION)


def recognise(head: Head, filename: str) -> Format | None:
    """The format of an upload's bytes (its name only tells Markdown from plain text), None when none matches."""
    return next((fmt for fmt in FORMATS if fmt.recognised(head, filename)), None)


def stated_fields(fmt: Format, path: Path) -> DocumentFields:
    """The properties the file states (none for a format without a reader); never raises: a broken property part
    is a field error, never a failed document."""
    if fmt.read_fields is None:
        return DocumentFields()
    try:
        return fmt.read_fields(path)
    except Exception as error:
        return DocumentFields(errors=[f"{fmt.doc_type}: cannot read the document properties: "
                                      f"{type(error).__name__}: {str(error)[:200]}"])
