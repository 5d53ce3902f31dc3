"""Upload sources: files sent to the platform (HTTP or CLI) are stored under the data dir, then synced like any
source's folder.

    <data dir>/uploads/<source>/<yyyy>/<mm>/<dd>/<uuid4 hex>/<sanitised filename>

A file's type comes from its bytes (`sniff_upload`), never from its name; its stored name is the sanitised
basename with the extension of that type (`sanitize_filename`); the client never chooses a folder. Identical bytes
are stored once per source (the document id is the SHA-256 of the bytes). The sidecar's `uploads` table records
every stored file, with the name the client gave it as text only (`upload_name`: shown beside the path where the
document is cited, never part of a path). Only an upload source's own files are ever deleted (`remove_document`):
a roots source's folders belong to their users. The caller syncs the source afterwards (defs/ingest_runner.py `ingest(source=...)`): that indexes
new files and purges removed ones. No Dagster here: the API and the CLI call this directly.
"""

from __future__ import annotations

import hashlib
import re
import threading
import unicodedata
import uuid
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rag_pipeline.atomic_file import write_atomically
from rag_pipeline.errors import Conflict, InputError, NotFound
from rag_pipeline.ingest.formats import (
    Head,
    enabled_extensions,
    executable_refusal,
    format_of_path,
    recognise,
    text_refusal,
)
from rag_pipeline.ingest.sources import SourceSpec, check_source_name, configured_sources, upload_root
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar

MAX_FILENAME_CHARS = 100
MAX_UPLOAD_NAME_CHARS = 255
MAX_FILENAME_BYTES = 200
FALLBACK_NAME = "upload"
DOCUMENT_ID = re.compile(r"[0-9a-f]{64}")
UNSAFE_CHARS = re.compile(r"[^\w. -]|_")  # letters and digits of any script stay; `_` is the replacement
REPEATS = re.compile(r"([._ -])\1+")
UNPRINTABLE = ("C", "Zl", "Zp")  # Unicode categories an upload's name loses: controls, format marks, line breaks
INCOMING = ".incoming"  # <data dir>/uploads/.incoming: temporary files, outside every source's folder
_store_lock = threading.Lock()  # one store or removal at a time in this process: equal bytes are stored once


class RefusedUpload(InputError, code="unsupported_type"):
    """An uploaded file that is not stored: its bytes are no supported type, or it is empty or too large."""


@dataclass(frozen=True)
class UploadResult:
    """A stored upload: id is the SHA-256 of the bytes (the document id); duplicate when those bytes were already
    stored in the source (the existing file is returned, nothing new is written)."""

    id: str
    filename: str
    path: str
    bytes: int
    doc_type: str
    duplicate: bool = False
    upload_name: str | None = None  # the name the client gave it (of the first upload, for a duplicate)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def sniff_upload(data: bytes, filename: str) -> str:
    """The document type of the bytes (ingest/formats.py's table, tried in order); the name only tells Markdown
    from plain text. RefusedUpload (empty_file, unsupported_type) naming the file and the reason otherwise."""
    if not data:
        raise RefusedUpload(f"{filename!r} is empty", code="empty_file")
    head = Head.read(data=data)
    executable = executable_refusal(head)
    if executable is not None:
        raise RefusedUpload(f"{filename!r} is {executable}")
    fmt = recognise(head, filename)
    if fmt is not None:
        return fmt.doc_type
    if head.zip_error is not None:
        raise RefusedUpload(f"{filename!r} is a corrupt ZIP container ({head.zip_error})")
    if head.members is not None:
        raise RefusedUpload(f"{filename!r} is a ZIP archive that is neither DOCX nor PPTX (unsupported type)")
    if b"\x00" in head.data:
        raise RefusedUpload(f"{filename!r} is binary content (NUL bytes) of an unsupported type")
    raise RefusedUpload(f"{filename!r} is not UTF-8 text ({text_refusal(head)}): an unsupported binary type")


def last_part(name: str) -> str:
    """A client's file name without its folders (either slash) or drive letter."""
    return re.sub(r"^[A-Za-z]:", "", re.split(r"[/\\]", name or "")[-1])


def sanitize_filename(name: str, doc_type: str) -> str:
    """The stored name of an upload: the basename only (no folders, no drive letter), NFC, only letters and digits
    (of any script), '.', '_', ' ' and '-' (others become '_', runs collapse), no leading dots or spaces, at most
    100 characters and 200 bytes of UTF-8, never empty, ending in the extension of `doc_type` (.markdown and .htm are kept for their
    types)."""
    base = UNSAFE_CHARS.sub("_", unicodedata.normalize("NFC", last_part(name)))
    base = REPEATS.sub(r"\1", base).lstrip(". ").rstrip(" ")
    stem, dot, suffix = base.rpartition(".")
    if not dot:
        stem, suffix = base, ""
    named = format_of_path(base) if dot else None
    if named is not None:  # a known extension: replaced by the type's own unless it is one of them
        extension = suffix.lower() if named.doc_type == doc_type else doc_type
    else:
        stem, extension = base, doc_type
    stem = stem.rstrip(". ")
    if not re.search(r"[^\W_]", stem):  # no letter or digit left
        stem = FALLBACK_NAME
    stem = stem[: MAX_FILENAME_CHARS - len(extension) - 1]
    while len(f"{stem}.{extension}".encode()) > MAX_FILENAME_BYTES:  # file systems count bytes (255 at most)
        stem = stem[:-1]
    return f"{stem.rstrip('. ') or FALLBACK_NAME}.{extension}"


def upload_name(name: str) -> str | None:
    """The name a client gave an upload, as text to show: its last path part (no folders, no drive letter), NFC,
    control and format characters and line breaks as spaces, runs of spaces as one, trimmed, at most 255
    characters; None when nothing is left. Never used to build a path."""
    shown = "".join(" " if unicodedata.category(char).startswith(UNPRINTABLE) else char
                    for char in unicodedata.normalize("NFC", last_part(name)))
    shown = " ".join(shown.split())[:MAX_UPLOAD_NAME_CHARS].strip()
    return shown if shown not in ("", ".", "..") else None


def upload_source(settings: Settings, source: str) -> SourceSpec:
    """The configured upload source `source`: NotFound (unknown_source) when it is not configured, Conflict
    (not_an_upload_source) when it is a roots source."""
    check_source_name(source)
    spec = configured_sources(settings).get(source)
    if spec is None:
        raise NotFound(f"unknown source {source!r}: it is not configured (RAG_SOURCES_FILE)", code="unknown_source")
    if not spec.uploads:
        raise Conflict(f"source {source!r} is a folder source (roots), not an upload area: its files are managed "
                       "in its folders", code="not_an_upload_source")
    return spec


def max_upload_bytes(settings: Settings) -> int:
    return min(settings.max_file_bytes, settings.upload_max_bytes)


def store_upload(settings: Settings, source: str, filename: str, data: bytes,
                 uploaded_by: str | None = None) -> UploadResult:
    """Store one uploaded file in the upload source `source` (see the module's docstring) and record it in the
    sidecar. The same bytes already stored in the source: that file, duplicate=True."""
    spec = upload_source(settings, source)
    limit = max_upload_bytes(settings)
    if len(data) > limit:
        raise RefusedUpload(f"{filename!r} is too large: {len(data):,} bytes exceeds the limit of {limit:,} bytes "
                            "(RAG_MAX_FILE_BYTES, RAG_UPLOAD_MAX_BYTES)", code="file_too_large")
    doc_type = sniff_upload(data, filename)
    name = sanitize_filename(filename, doc_type)
    day, folder_id = datetime.now(UTC), uuid.uuid4().hex
    relative = f"{day:%Y}/{day:%m}/{day:%d}/{folder_id}/{name}"  # the path the source's rules will see
    check_ingested(settings, spec, filename, relative, doc_type, len(data))
    sha = hashlib.sha256(data).hexdigest()
    root = upload_root(settings, source)
    with _store_lock:
        sidecar = Sidecar(settings.sidecar_location)
        stale = []
        for row in sidecar.uploads(source, sha):
            if Path(row["path"]).is_file():
                return UploadResult(sha, row["filename"], row["path"], row["bytes"], doc_type, duplicate=True,
                                    upload_name=row["upload_name"])
            stale.append(row["path"])
        sidecar.delete_uploads(stale)
        path = root / relative
        path.parent.mkdir(mode=0o700, parents=True)
        incoming = settings.data_dir / "uploads" / INCOMING
        incoming.mkdir(mode=0o700, parents=True, exist_ok=True)
        write_atomically(path, data, mode=0o640, durable=True, temporary_dir=incoming)  # never partial in a source
        given = upload_name(filename)
        sidecar.record_upload(str(path), source, sha, name, len(data), uploaded_by, given)
    return UploadResult(sha, name, str(path), len(data), doc_type, upload_name=given)


def check_ingested(settings: Settings, spec: SourceSpec, filename: str, relative: str, doc_type: str,
                   size: int) -> None:
    """Refuse a file the source's sync would leave out (RAG_EXTENSIONS, the source's rules at its `relative` path):
    stored, it would be listed as pending for ever."""
    extension = relative.rpartition(".")[2].lower()
    if extension not in enabled_extensions(settings.extensions):
        raise RefusedUpload(f"{filename!r} is a {doc_type} document, which this server does not ingest "
                            f"(RAG_EXTENSIONS: {', '.join(settings.extensions or [])})")
    exclusion = spec.rules.exclusion(relative, doc_type, size) if spec.rules else None
    if exclusion:
        raise RefusedUpload(f"{filename!r} would not be ingested: {exclusion}", code="excluded_by_rules")


def with_missing_ok(action: Any) -> None:
    try:
        action()
    except FileNotFoundError:
        pass


def check_document_id(document_id: str) -> str:
    if not isinstance(document_id, str) or not DOCUMENT_ID.fullmatch(document_id):
        raise InputError(f"invalid document id {document_id[:100]!r}: a document id is the SHA-256 of its bytes, 64 "
                         "lowercase hex digits", code="invalid_document_id")
    return document_id


def remove_document(settings: Settings, source: str, document_id: str) -> list[str]:
    """Delete every stored file of the upload source `source` whose bytes have the SHA `document_id`, and their
    now-empty folders; returns the removed paths. The caller syncs the source next, which purges the document's
    chunks (when no other source holds it). Never touches a roots source (not_an_upload_source)."""
    upload_source(settings, source)
    check_document_id(document_id)
    root = upload_root(settings, source)
    with _store_lock:
        sidecar = Sidecar(settings.sidecar_location)
        recorded = [row["path"] for row in sidecar.uploads(source, document_id)]
        synced = [row["path"] for row in sidecar.source_files_of(source)
                  if row["sha"] == document_id and Path(row["path"]).resolve().is_relative_to(root)]
        paths = sorted(set(recorded) | {path for path in synced if Path(path).exists()})
        if not paths:
            raise NotFound(f"source {source!r} holds no document {document_id}", code="unknown_document")
        for path in paths:
            target = Path(path)
            if target.resolve().is_relative_to(root):  # never outside the source's folder
                with_missing_ok(target.unlink)
                remove_empty_folders(target.parent, root)
        sidecar.delete_uploads(recorded)
    return paths


def remove_empty_folders(folder: Path, root: Path) -> None:
    """Remove `folder` and its parents while they are empty, up to (not including) `root`."""
    while folder != root and folder.is_relative_to(root):
        try:
            folder.rmdir()
        except OSError:  # not empty (or gone)
            if folder.exists():
                return
        folder = folder.parent


def iso(stamp: datetime | None) -> str | None:
    return stamp.isoformat() if stamp is not None else None


def known_source(settings: Settings, sidecar: Sidecar, source: str) -> SourceSpec | None:
    """The configured spec of `source` (None when it was only synced before); NotFound when neither."""
    check_source_name(source)
    spec = configured_sources(settings).get(source)
    if spec is None and source not in sidecar.sources():
        raise NotFound(f"unknown source {source!r}: not configured (RAG_SOURCES_FILE) and never synced",
                       code="unknown_source")
    return spec


def list_documents(settings: Settings, source: str, scope_tags: Iterable[str] | None = None) -> dict[str, Any]:
    """The documents of `source` (what it held at its last sync, plus uploads not synced yet, as pending) and the
    refusals of its last scan. With `scope_tags`, only documents with one of those tags."""
    sidecar = Sidecar(settings.sidecar_location)
    spec = known_source(settings, sidecar, source)
    is_uploads = spec is not None and spec.uploads
    held: dict[str, list[dict[str, Any]]] = {}
    for row in sidecar.source_files_of(source):
        if is_uploads and not Path(row["path"]).exists():
            continue  # removed since the last sync: its sync purges it
        held.setdefault(row["sha"], []).append(row)
    uploads: dict[str, list[dict[str, Any]]] = {}
    for row in sidecar.uploads(source):
        if Path(row["path"]).is_file():  # a row whose file is gone (a removal killed half way) lists nothing
            uploads.setdefault(row["sha"], []).append(row)
    shas = sorted(set(held) | set(uploads))
    rows = sidecar.documents_by_sha(shas) if shas else {}
    wanted = set(scope_tags) if scope_tags else None
    documents = []
    for sha in shas:
        files, uploaded, row = held.get(sha, []), uploads.get(sha, []), rows.get(sha)
        tags = {tag for file in files for tag in file["tags"] or []} | set((row or {}).get("tags") or [])
        if wanted is not None and not tags & wanted:
            continue
        paths = sorted({file["path"] for file in files} | {upload["path"] for upload in uploaded})
        synced = bool(files) and row is not None
        status = row["status"] if synced and row["status"] in ("ok", "failed") else "pending"
        first = files[0] if files else None
        document = {
            "id": sha, "paths": paths, "all_paths": sorted(set(row["paths"] or []) | set(paths)) if row else paths,
            "doc_type": (row or {}).get("doc_type") or (first or {}).get("doc_type") or doc_type_of(paths[0]),
            "bytes": (row or {}).get("bytes") or (first or {}).get("bytes") or (uploaded[0]["bytes"] if uploaded
                                                                                  else None),
            "status": status, "stage": (row or {}).get("stage") if synced else None,
            "error": (row or {}).get("error") if synced else None,
            "chunks": (row or {}).get("chunks") if synced else None,
            "ingested_at": iso((row or {}).get("ingested_at")) if synced else None,
        }
        if uploaded:
            document["filename"] = uploaded[0]["filename"]
            document["upload_name"] = uploaded[0]["upload_name"]
            document["uploaded_at"] = iso(uploaded[0]["uploaded_at"])
        documents.append(document)
    refused = [{"path": row["path"], "reason": row["reason"]} for row in sidecar.source_errors()
               if row["source"] == source]
    return {"source": source, "kind": spec.kind if spec else sidecar.sources()[source]["kind"],
            "documents": documents, "refused": refused}


def doc_type_of(path: str) -> str | None:
    fmt = format_of_path(path)
    return fmt.doc_type if fmt else None


def sources_overview(settings: Settings, with_roots: bool = False) -> list[dict[str, Any]]:
    """Every source, configured or synced: name, kind, documents, pending, failed, chunks (and, `with_roots`, the
    roots: the CLI runs on the server; the API shows no filesystem paths)."""
    sidecar = Sidecar(settings.sidecar_location)
    configured = configured_sources(settings)
    synced = sidecar.sources()
    totals = {row["source"]: row for row in sidecar.totals_by_source()}
    overview = []
    for name in sorted(set(configured) | set(synced)):
        spec, stored, total = configured.get(name), synced.get(name), totals.get(name, {})
        entry: dict[str, Any] = {
            "name": name, "kind": spec.kind if spec else stored["kind"], "configured": spec is not None,
            "documents": total.get("documents", 0), "pending": total.get("pending", 0),
            "failed": total.get("failed", 0), "chunks": int(total.get("chunks", 0) or 0),
            "synced_at": iso(stored["synced_at"]) if stored else None,
        }
        if spec is not None and spec.uploads:
            entry["pending"] += len({row["sha"] for row in sidecar.uploads(name)}
                                    - {row["sha"] for row in sidecar.source_files_of(name)})
        if with_roots:
            entry["roots"] = [str(root) for root in spec.roots] if spec else list(stored["roots"] or [])
        overview.append(entry)
    return overview
