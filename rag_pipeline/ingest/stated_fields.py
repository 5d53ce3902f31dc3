"""Document fields the documents state themselves: Markdown front matter, DOCX/PPTX core properties, PDF document
info, HTML <title> and <meta>.

A field is a name (lower case letters, digits and `_`) with a typed value: string, number, date (ISO text) or list
(of strings). Extraction never fails a document: a malformed front matter or an unreadable property becomes a
field error and the text is ingested all the same.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

import yaml

from rag_pipeline.fields.values import DocumentFields, field_name, iso_date

_FRONT_MATTER = re.compile(r"\A(?:\ufeff)?---[ \t]*\n(.*?\n)?(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.DOTALL)
# Properties each format states, by our field name (the core properties of DOCX and PPTX are the same OPC part).
OFFICE_PROPERTIES = ("title", "subject", "author", "keywords", "category", "created", "modified", "identifier",
                     "language", "version", "content_status")
PDF_INFO = {"Title": "title", "Author": "author", "Subject": "subject", "Keywords": "keywords",
            "Creator": "creator", "Producer": "producer", "CreationDate": "created", "ModDate": "modified"}
HTML_META_SKIPPED = {"viewport", "referrer", "robots", "theme_color", "color_scheme", "format_detection"}


def split_front_matter(text: str) -> tuple[str | None, str]:
    """(the YAML front matter block, the text after it); (None, text) when the text does not start with one."""
    match = _FRONT_MATTER.match(text.replace("\r\n", "\n"))
    if match is None:
        return None, text
    return match.group(1) or "", text.replace("\r\n", "\n")[match.end():]


def front_matter_fields(block: str) -> DocumentFields:
    """The fields of a front-matter block; a block that is not a YAML mapping is one error."""
    fields = DocumentFields()
    try:
        data = yaml.safe_load(block)
    except yaml.YAMLError as error:
        fields.errors.append(f"front_matter: malformed YAML: {' '.join(str(error).split())[:300]}")
        return fields
    if data is None:
        return fields
    if not isinstance(data, dict):
        fields.errors.append(f"front_matter: expected a mapping of key: value, got {type(data).__name__}")
        return fields
    for key, raw in data.items():
        fields.add(key, raw, "front_matter", infer_text=False)
    return fields


def office_fields(path: Path, doc_type: str) -> DocumentFields:
    """The core properties of a DOCX or PPTX file."""
    fields = DocumentFields()
    if doc_type == "docx":
        import docx

        properties = docx.Document(str(path)).core_properties
    else:
        import pptx

        properties = pptx.Presentation(str(path)).core_properties
    for name in OFFICE_PROPERTIES:
        fields.add(name, getattr(properties, name, None), doc_type, infer_text=False)
    return fields


def pdf_date(text: str) -> str | None:
    """A PDF date string (D:YYYYMMDDHHmmSS...) as ISO text; None when it is not one."""
    match = re.match(r"(?:D:)?(\d{4})(\d{2})?(\d{2})?(\d{2})?(\d{2})?(\d{2})?", text.strip())
    if not match:
        return None
    year, month, day, hour, minute, second = (int(part) if part else default
                                              for part, default in zip(match.groups(), (0, 1, 1, 0, 0, 0)))
    try:
        return iso_date(datetime(year, month, day, hour, minute, second))
    except ValueError:
        return None


def pdf_fields(path: Path) -> DocumentFields:
    """The document information dictionary of a PDF."""
    import pypdfium2

    fields = DocumentFields()
    pdf = pypdfium2.PdfDocument(path)
    try:
        info = pdf.get_metadata_dict(skip_empty=True)
    finally:
        pdf.close()
    for key, name in PDF_INFO.items():
        raw = info.get(key)
        if raw and name in ("created", "modified"):
            raw = pdf_date(raw) or raw
        fields.add(name, raw, "pdf", infer_text=True)
    return fields


def html_fields(path: Path) -> DocumentFields:
    """<title> and every <meta name=... content=...> (or property=) of an HTML page."""
    from bs4 import BeautifulSoup, SoupStrainer

    fields = DocumentFields()
    soup = BeautifulSoup(path.read_bytes(), "lxml", parse_only=SoupStrainer(["title", "meta"]))
    if soup.title and soup.title.string:
        fields.add("title", " ".join(soup.title.string.split()), "html", infer_text=False)
    for meta in soup.find_all("meta"):
        key = meta.get("name") or meta.get("property") or meta.get("itemprop")
        content = meta.get("content")
        if not key or content is None or field_name(key) in HTML_META_SKIPPED:
            continue
        fields.add(key, " ".join(str(content).split()), "html", infer_text=True)
    return fields
