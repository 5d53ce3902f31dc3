"""Ingest and sources: POST /ingest, GET /ingest/{id}, GET /sources, and a source's documents: upload (POST),
list (GET), remove (DELETE). An upload or a removal queues a sync of its source (serve/ingest_jobs.py)."""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations.

import contextlib
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter
from fastapi import Path as PathParam
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from rag_pipeline.errors import Conflict, InputError, NotFound
from rag_pipeline.index.vector_store import Scope
from rag_pipeline.ingest.sources import check_source_name
from rag_pipeline.ingest.uploads import list_documents, remove_document, sources_overview, store_upload, upload_source
from rag_pipeline.serve.auth import KEY_STATE
from rag_pipeline.serve.dependencies import Ingester, Reader, Services, ServicesDep, ingester
from rag_pipeline.serve.http_errors import ERROR_RESPONSES
from rag_pipeline.serve.ingest_jobs import IngestJob
from rag_pipeline.serve.models import (
    IngestJobResponse,
    IngestRequest,
    RemoveResponse,
    SourceDocumentsResponse,
    SourcesResponse,
    UploadResponse,
)
from rag_pipeline.settings import Settings

router = APIRouter()

# POST /sources/{name}/documents reads its multipart body itself (its limits, its error codes); this documents it.
UPLOAD_BODY: dict[str, Any] = {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": {
    "type": "object", "required": ["files"],
    "properties": {"files": {"type": "array", "items": {"type": "string", "format": "binary"},
                             "description": "the files (at most RAG_UPLOAD_MAX_FILES, RAG_UPLOAD_MAX_BYTES in all)"}},
}}}}}


@router.post("/ingest", status_code=202, response_model=IngestJobResponse, responses=ERROR_RESPONSES,
             dependencies=[ingester])
async def start_ingest(services: ServicesDep, body: IngestRequest | None = None) -> Response:
    """Start syncing the server's configured sources (RAG_SOURCES_FILE) or roots (RAG_ROOTS), one ingest at a
    time; poll the Location for progress. The body is empty or {}: a request never names paths."""
    settings = services.settings
    if not settings.roots and not settings.sources_file:
        raise Conflict("the server has no roots to ingest: set RAG_ROOTS (comma-separated folders) or "
                       "RAG_SOURCES_FILE (named sources) where it runs", code="no_roots_configured")
    missing = [root.name for root in settings.roots if not root.is_dir()]  # a folder's name: no server path
    if missing:
        raise Conflict(f"configured root(s) not a directory: {', '.join(missing)} (RAG_ROOTS)", code="roots_missing")
    # With a sources file every configured source is synced (RAG_ROOTS among them as `default`)
    job = services.ingest_jobs.start(None if settings.sources_file else [str(root) for root in settings.roots])
    return JSONResponse(await shown(services, job.to_json()), status_code=202,
                        headers={"Location": f"/ingest/{job.id}"})


@router.get("/ingest/{id}", response_model=IngestJobResponse, responses=ERROR_RESPONSES, dependencies=[ingester])
async def ingest_status(job_id: Annotated[str, PathParam(alias="id")], services: ServicesDep) -> Response:
    """An ingest started by POST /ingest, an upload or a removal: queued, running, or its summary (succeeded)
    or error (failed)."""
    job = services.ingest_jobs.jobs.get(job_id)
    if job is None:
        raise NotFound(f"no ingest with id {job_id[:100]}", code="unknown_ingest")
    return JSONResponse(await shown(services, job.to_json()))


@router.post("/sources/{name}/documents", status_code=202, response_model=UploadResponse,
             responses=ERROR_RESPONSES, openapi_extra=UPLOAD_BODY)
async def upload_documents(name: Annotated[str, PathParam()], request: Request, scope: Ingester,
                           services: ServicesDep) -> Response:
    """Store files (multipart field `files`, one or several) in the upload source, then sync it (queued while
    another ingest runs). Each file's type comes from its bytes; refused files are listed, the others stored.
    Identical bytes are stored once per source (duplicate: true)."""
    settings = services.settings
    visible_source(name, scope)
    await run_in_threadpool(upload_source, settings, name)  # 404 / 409 before the body is read
    uploaded_by = getattr(request.state, KEY_STATE, None)
    documents, rejected, first_error = [], [], None
    async with read_form(request, settings.upload_max_files) as files:
        for upload in files:
            filename = upload.filename or ""
            data = await upload.read()
            try:
                stored = await run_in_threadpool(store_upload, settings, name, filename, data, uploaded_by)
            except InputError as error:
                first_error = first_error or error
                rejected.append({"filename": filename, "error": {"code": error.code, "message": error.message}})
                continue
            documents.append(stored.to_json())
    if not documents:
        raise first_error or InputError("no file was uploaded", code="no_files")
    job = services.ingest_jobs.enqueue(name)
    answer = {"source": name, "documents": documents, "rejected": rejected, "ingest": ingest_ref(job)}
    return JSONResponse(await shown(services, answer), status_code=202, headers={"Location": f"/ingest/{job.id}"})


@router.get("/sources/{name}/documents", response_model=SourceDocumentsResponse, responses=ERROR_RESPONSES)
async def source_documents(name: Annotated[str, PathParam()], scope: Reader, services: ServicesDep) -> Response:
    """The documents a source holds (status, stage, chunks, paths) and the files its last scan refused. A key
    scoped to tags sees only documents with one of them."""
    visible_source(name, scope)
    listing = await run_in_threadpool(list_documents, services.settings, name, scope.tags if scope else None)
    return JSONResponse(await shown(services, listing))


@router.delete("/sources/{name}/documents/{id}", status_code=202, response_model=RemoveResponse,
               responses=ERROR_RESPONSES)
async def remove_source_document(name: Annotated[str, PathParam()],
                                 document_id: Annotated[str, PathParam(alias="id")],
                                 scope: Ingester, services: ServicesDep) -> Response:
    """Delete an upload source's stored files of the document, then sync the source, which purges it (from
    the index, unless another source holds it). A folder (roots) source's files are never deleted: 409. A key
    scoped to tags removes only documents it can see (one of its tags)."""
    settings = services.settings
    visible_source(name, scope)
    if scope is not None and scope.tags:
        listing = await run_in_threadpool(list_documents, settings, name, scope.tags)
        if document_id not in {document["id"] for document in listing["documents"]}:
            await run_in_threadpool(upload_source, settings, name)  # 404 / 409 for the source first
            raise NotFound(f"source {name!r} holds no document {document_id[:100]} that this key may see",
                           code="unknown_document")
    removed = await run_in_threadpool(remove_document, settings, name, document_id)
    job = services.ingest_jobs.enqueue(name)
    answer = {"id": document_id, "removed_paths": removed, "ingest": ingest_ref(job)}
    return JSONResponse(await shown(services, answer), status_code=202, headers={"Location": f"/ingest/{job.id}"})


@router.get("/sources", response_model=SourcesResponse, responses=ERROR_RESPONSES)
async def list_sources(scope: Reader, services: ServicesDep) -> Response:
    """Every source, configured or synced: its kind and its documents, pending, failed and chunks (a key scoped to
    sources sees only those; one scoped to tags counts only the documents with one of them)."""
    overview = await run_in_threadpool(sources_overview, services.settings)
    if scope is not None and scope.sources:
        overview = [entry for entry in overview if entry["name"] in scope.sources]
    if scope is not None and scope.tags:
        settings, tags = services.settings, scope.tags
        overview = await run_in_threadpool(lambda: [tagged_totals(settings, entry, tags) for entry in overview])
    return JSONResponse({"sources": overview})


def tagged_totals(settings: Settings, entry: dict[str, Any], tags: tuple[str, ...]) -> dict[str, Any]:
    """A source's entry counting only the documents with one of `tags` (what a key scoped to them may see)."""
    documents = list_documents(settings, entry["name"], tags)["documents"]
    return {**entry, "documents": len(documents),
            "pending": sum(document["status"] == "pending" for document in documents),
            "failed": sum(document["status"] == "failed" for document in documents),
            "chunks": sum(document["chunks"] or 0 for document in documents)}


def visible_source(name: str, scope: Scope | None) -> str:
    """`name`, if the key's scope may see that source (a key scoped to sources sees no other: 404)."""
    check_source_name(name)
    if scope is not None and scope.sources and name not in scope.sources:
        raise NotFound(f"unknown source {name!r}", code="unknown_source")
    return name


async def shown(services: Services, answer: dict[str, Any]) -> dict[str, Any]:
    """An answer with the server's paths as the API shows them (serve/public_paths.py)."""
    paths = await run_in_threadpool(services.paths.current)
    return paths.json(answer)


def ingest_ref(job: IngestJob) -> dict[str, str]:
    return {"id": job.id, "status": job.status}


@contextlib.asynccontextmanager
async def read_form(request: Request, limit: int) -> AsyncIterator[list[UploadFile]]:
    """The uploaded files of the request's form (field `files`), at most `limit` (RAG_UPLOAD_MAX_FILES)."""
    try:
        form = await request.form(max_files=limit, max_fields=limit)
    except HTTPException as error:
        if error.status_code != 400:
            raise
        if "too many files" in str(error.detail).lower():
            raise InputError(f"too many files: at most {limit} per request (RAG_UPLOAD_MAX_FILES)",
                             code="too_many_files") from None
        raise InputError(f"the body is not a valid multipart form: {error.detail}", code="invalid_multipart") \
            from None
    try:
        files = [item for item in form.getlist("files") if isinstance(item, UploadFile)]
        if not files:
            raise InputError("no file: send the files in the multipart field `files`", code="no_files")
        if len(files) > limit:
            raise InputError(f"too many files: at most {limit} per request (RAG_UPLOAD_MAX_FILES)",
                             code="too_many_files")
        yield files
    finally:
        await form.close()
