"""Upload sources: the type sniffed from the bytes, sanitised names, storage with SHA dedupe, and the HTTP API
(POST/GET/DELETE /sources/{name}/documents, GET /sources) and CLI (upload, remove, sources) over real ingests."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import stat
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import anyio
import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from rag_pipeline.chat.citation_text import SOURCES_HEADING
from rag_pipeline.components import load_settings
from rag_pipeline.errors import Conflict, InputError, NotFound, StoreUnavailable
from rag_pipeline.ingest.uploads import (
    RefusedUpload,
    remove_document,
    sanitize_filename,
    sniff_upload,
    store_upload,
    upload_name,
)
from rag_pipeline.serve.keys import create_key
from rag_pipeline.serve.public_paths import ServerPaths, public_names
from rag_pipeline.serve.routes.openai_chat import MODEL_ID
from rag_pipeline.serve.upload_names import with_upload_names
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar
from rag_pipeline_tests.test_api import ingest_and_wait, parse_sse, running_api

from .conftest import REPO

PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"
PUMPS_MD = b"# Pump maintenance\n\nInspect the pump seals every month for leaks and replace worn gaskets.\n"
VALVES_HTML = (b"<!DOCTYPE html><html><head><title>Valves</title></head><body><h1>Valves</h1>"
               b"<p>Valves are greased every quarter with lithium grease.</p></body></html>")
BINARY = bytes(range(256)) * 4


def zipped(*names: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in names:
            archive.writestr(name, "<xml/>")
    return buffer.getvalue()


@pytest.fixture
def sources_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Settings over a data dir in tmp_path with a sources file (RAG_SOURCES_FILE): the upload source `inbox` and
    the roots source `handbook` (one Markdown file)."""
    handbook = tmp_path / "handbook"
    handbook.mkdir()
    (handbook / "boilers.md").write_text("# Boilers\n\nBoilers are descaled once a year.\n")
    sources = tmp_path / "sources.yaml"
    sources.write_text(f"sources:\n  inbox: {{uploads: true}}\n  handbook: {{roots: [{handbook}]}}\n")
    monkeypatch.setenv("RAG_SOURCES_FILE", str(sources))
    monkeypatch.delenv("RAG_ROOTS", raising=False)
    return load_settings(data_dir=tmp_path / "data")


# --- the library: sniffing, names, storage ------------------------------------------------------------------------

@pytest.mark.parametrize("data, filename, doc_type", [
    (PDF, "a.pdf", "pdf"),
    (b"junk before the header " + PDF, "scan", "txt"),  # a PDF starts with its header: this is text
    (zipped("[Content_Types].xml", "word/document.xml"), "letter.docx", "docx"),
    (zipped("[Content_Types].xml", "ppt/presentation.xml"), "deck.bin", "pptx"),
    (VALVES_HTML, "valves.txt", "html"),
    (b"\xef\xbb\xbf  \n<HTML><body>hi</body></HTML>", "page", "html"),
    (b"<head><meta charset=utf-8></head>\n<html lang=en>", "frag.md", "html"),
    (PUMPS_MD, "pumps.md", "md"),
    (PUMPS_MD, "PUMPS.MARKDOWN", "md"),
    (PUMPS_MD, "pumps.pdf", "txt"),  # the name lies: text is text
    ("Grüße, naïve café\n".encode(), "notes", "txt"),
])
def test_sniff_upload_reads_the_bytes(data: bytes, filename: str, doc_type: str) -> None:
    assert sniff_upload(data, filename) == doc_type


@pytest.mark.parametrize("data, code, words", [
    (zipped("data.csv"), "unsupported_type", "neither DOCX nor PPTX"),
    (b"PK\x03\x04 not really a zip", "unsupported_type", "corrupt ZIP"),
    (BINARY, "unsupported_type", "NUL bytes"),
    (b"\xff\xd8\xff\xe0 jpeg-ish \xfa\xfb", "unsupported_type", "not UTF-8"),
    (b"", "empty_file", "empty"),
])
def test_sniff_upload_refusals(data: bytes, code: str, words: str) -> None:
    with pytest.raises(InputError) as refused:
        sniff_upload(data, "thing.md")
    assert refused.value.code == code and words in refused.value.message and "thing.md" in refused.value.message


@pytest.mark.parametrize("name, doc_type, stored", [
    ("../../etc/passwd", "txt", "passwd.txt"),
    ("C:\\x\\y.md", "md", "y.md"),
    ("/abs/path/to/Report Q3.md", "md", "Report Q3.md"),
    ("Überblick Straße.md", "md", "Überblick Straße.md"),  # letters of any script stay
    ("日本語.md", "md", "日本語.md"),
    ("\u200b\u202e.md", "md", "upload.md"),  # format characters only: nothing usable is left
    ("e\u0301te\u0301.md", "md", "été.md"),  # NFC
    (".hidden", "txt", "hidden.txt"),
    ("...", "txt", "upload.txt"),
    ("", "pdf", "upload.pdf"),
    ("report.txt", "pdf", "report.pdf"),
    ("page.htm", "html", "page.htm"),
    ("notes.markdown", "md", "notes.markdown"),
    ("notes.markdown", "html", "notes.html"),
    ("a  b__c--d..md", "md", "a b_c-d.md"),
    ("weird<>:\"|?*name.md", "md", "weird_name.md"),
])
def test_sanitize_filename(name: str, doc_type: str, stored: str) -> None:
    assert sanitize_filename(name, doc_type) == stored


def test_uploads_the_sync_would_leave_out_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sources = tmp_path / "sources.yaml"
    sources.write_text("sources:\n  inbox: {uploads: true, rules: {types: [md], max_bytes: 100}}\n")
    monkeypatch.setenv("RAG_SOURCES_FILE", str(sources))
    settings = load_settings(data_dir=tmp_path / "data")
    with pytest.raises(RefusedUpload) as error:
        store_upload(settings, "inbox", "page.html", b"<html><body>hi</body></html>")
    assert error.value.code == "excluded_by_rules" and "type html is not in the types" in error.value.message
    with pytest.raises(RefusedUpload, match="above max_bytes"):
        store_upload(settings, "inbox", "long.md", b"# x\n" + b"word " * 50)
    monkeypatch.setenv("RAG_EXTENSIONS", "md,txt")
    monkeypatch.setenv("RAG_SOURCES_FILE", str(sources.parent / "plain.yaml"))
    (sources.parent / "plain.yaml").write_text("sources:\n  inbox: {uploads: true}\n")
    with pytest.raises(RefusedUpload, match="does not ingest"):
        store_upload(load_settings(data_dir=tmp_path / "data"), "inbox", "a.pdf", b"%PDF-1.7\n" + b"x" * 50)
    assert store_upload(load_settings(data_dir=tmp_path / "data"), "inbox", "a.md", b"# Fine\n").doc_type == "md"


def test_sanitize_filename_caps_the_length() -> None:
    stored = sanitize_filename("x" * 500 + ".pdf", "pdf")
    assert len(stored) == 100 and stored.endswith("x.pdf")
    assert sanitize_filename("é" * 300, "txt") == "é" * 96 + ".txt"
    assert len(sanitize_filename("日" * 300, "txt").encode()) <= 200  # 3 bytes each: capped by bytes


@pytest.mark.parametrize("given, shown", [
    ("Budget 2026 (final).txt", "Budget 2026 (final).txt"),
    ("../../etc/passwd", "passwd"),  # folders are no part of a name
    ("C:\\Users\\ana\\Plan ü.docx", "Plan ü.docx"),
    ("<img src=x onerror=alert(1)>\r\nnotes\t.md", "<img src=x onerror=alert(1)> notes .md"),  # text, one line
    ("evil\x1b[31m\u202egnp.md\u2028x", "evil [31m gnp.md x"),  # no escape, bidi override or line separator
    ("x" * 400, "x" * 255),
    ("../..", None), ("  \n ", None), ("", None),
])
def test_upload_name_is_harmless_text(given: str, shown: str | None) -> None:
    assert upload_name(given) == shown


def test_upload_names_go_beside_cited_paths_only(tmp_path: Path) -> None:
    stored = "/srv/data/uploads/inbox/2026/11/26/0f/budget.txt"
    answer = {"results": [{"path": stored, "chunk_id": "c1"}, {"path": "/srv/handbook/a.md", "chunk_id": "c2"}],
              "citations": [{"kind": "document", "id": "d1", "path": stored, "label": "D1"}],
              "trajectory": [{"tool": "search", "args": {"filters": {"path": stored}}}]}  # a filter is no citation
    named = with_upload_names(answer, {stored: "Budget 2026.txt"})
    assert [hit.get("upload_name") for hit in named["results"]] == ["Budget 2026.txt", None]
    assert named["citations"][0]["upload_name"] == "Budget 2026.txt"
    assert named["trajectory"] == answer["trajectory"] and "upload_name" not in answer["results"][0]
    shown = public_names(tmp_path, {"inbox": ["/srv/data/uploads/inbox"]}, {stored: "Budget 2026.txt"}).json(answer)
    assert shown["results"][0] == {"path": "inbox/2026/11/26/0f/budget.txt", "chunk_id": "c1",
                                   "upload_name": "Budget 2026.txt"}  # the path as the API shows it, name beside


HOLD_AFTER_RECORDING = """
import sys
from rag_pipeline.sidecar import Sidecar
sidecar = Sidecar(sys.argv[1])
with sidecar.kept():  # as an ingest's step: it records a source, then keeps holding the file
    sidecar.record_source("archive", "folder", ["/srv/archive"], [], [])
    print("held", flush=True)
    sys.stdin.readline()
"""


def counting_reads(paths: ServerPaths, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    reads: list[int] = []
    read = paths._read
    monkeypatch.setattr(paths, "_read", lambda *args, **kwargs: reads.append(1) or read(*args, **kwargs))
    return reads


def shown_once_read(paths: ServerPaths, path: str, expected: str) -> None:
    deadline = time.monotonic() + 60
    while paths.current().show(path) != expected:
        assert time.monotonic() < deadline, f"{path} is still shown as {paths.current().show(path)}"
        time.sleep(0.05)


def test_paths_read_before_are_shown_while_an_ingest_holds_the_sidecar(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    location = tmp_path / "sidecar.duckdb"
    sidecar = Sidecar(location)
    sidecar.record_source("handbook", "folder", ["/srv/handbook"], [], [])
    paths = ServerPaths(load_settings(data_dir=tmp_path), sidecar)
    reads = counting_reads(paths, monkeypatch)
    assert paths.current().show("/srv/handbook/a.md") == "handbook/a.md"
    holder = subprocess.Popen([sys.executable, "-c", HOLD_AFTER_RECORDING, str(location)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdin is not None and holder.stdout is not None
    try:
        assert holder.stdout.readline() == "held\n"
        for _ in range(2):  # the sidecar changed and cannot be read: the paths read before, with no long wait
            started = time.monotonic()
            shown = paths.current()
            assert time.monotonic() - started < 5  # httpx's default timeout; the read waits up to 10 s
            assert shown.show("/srv/handbook/a.md") == "handbook/a.md" and shown.show("/srv/archive/b.md") == "b.md"
        assert len(reads) == 2  # the first read, and one that waits for the file: the second request joined it
    finally:
        with contextlib.suppress(BrokenPipeError):  # a holder that died: its own error is the one to see
            holder.stdin.write("go\n")
            holder.stdin.close()
        try:
            holder.wait(60)
        except subprocess.TimeoutExpired:
            holder.kill()  # never left holding the file
            raise
    assert holder.returncode == 0
    shown_once_read(paths, "/srv/archive/b.md", "archive/b.md")


def test_a_slow_read_of_the_paths_holds_up_no_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever holds the read up (here the sidecar's own call, in this process), requests get the paths read
    before; a read that fails leaves them too."""
    sidecar = Sidecar(tmp_path / "sidecar.duckdb")
    sidecar.record_source("handbook", "folder", ["/srv/handbook"], [], [])
    paths = ServerPaths(load_settings(data_dir=tmp_path), sidecar)
    assert paths.current().show("/srv/handbook/a.md") == "handbook/a.md"
    release, read = threading.Event(), sidecar.sources
    monkeypatch.setattr(sidecar, "sources", lambda: release.wait(60) and read())
    sidecar.record_source("archive", "folder", ["/srv/archive"], [], [])
    started = time.monotonic()
    assert paths.current().show("/srv/archive/b.md") == "b.md"
    assert time.monotonic() - started < 5
    release.set()
    shown_once_read(paths, "/srv/archive/b.md", "archive/b.md")

    monkeypatch.setattr(sidecar, "sources", lambda: (_ for _ in ()).throw(StoreUnavailable("the sidecar is gone")))
    sidecar.record_source("archive", "folder", ["/srv/archive", "/srv/more"], [], [])
    assert paths.current().show("/srv/archive/b.md") == "archive/b.md"  # not cut to the configured roots


def test_store_upload_dedupes_and_refuses(sources_env: Settings) -> None:
    settings = sources_env
    first = store_upload(settings, "inbox", "report.txt", PDF, "alice")
    assert (first.doc_type, first.filename, first.duplicate, first.bytes) == ("pdf", "report.pdf", False, len(PDF))
    assert first.upload_name == "report.txt"  # the client's name, beside the stored one
    path = Path(first.path)
    root = settings.data_dir.resolve() / "uploads" / "inbox"
    assert re.fullmatch(re.escape(str(root)) + r"/\d{4}/\d{2}/\d{2}/[0-9a-f]{32}/report\.pdf", first.path)
    assert path.read_bytes() == PDF and not path.stat().st_mode & stat.S_IWOTH
    again = store_upload(settings, "inbox", "other-name.pdf", PDF, "bob")
    assert again.duplicate and again.path == first.path and again.id == first.id
    assert again.upload_name == "report.txt"  # the stored file's name: nothing new is recorded
    assert Sidecar(settings.sidecar_path).upload_names() == {first.path: "report.txt"}
    assert [p for p in root.rglob("*") if p.is_file()] == [path]
    assert not list((settings.data_dir / "uploads" / ".incoming").iterdir())  # no temporary file left behind

    with pytest.raises(NotFound) as unknown:
        store_upload(settings, "nowhere", "a.md", PUMPS_MD, None)
    assert unknown.value.code == "unknown_source"
    with pytest.raises(Conflict) as roots:
        store_upload(settings, "handbook", "a.md", PUMPS_MD, None)
    assert roots.value.code == "not_an_upload_source"
    with pytest.raises(InputError) as large:
        store_upload(settings.model_copy(update={"upload_max_bytes": 10}), "inbox", "a.md", PUMPS_MD, None)
    assert large.value.code == "file_too_large"

    with pytest.raises(InputError) as bad_id:
        remove_document(settings, "inbox", "../" + first.id[3:])
    assert bad_id.value.code == "invalid_document_id"
    with pytest.raises(Conflict) as roots:
        remove_document(settings, "handbook", first.id)
    assert roots.value.code == "not_an_upload_source"
    assert remove_document(settings, "inbox", first.id) == [first.path]
    assert not path.exists() and not list(root.iterdir())  # the uuid and day folders went with it
    with pytest.raises(NotFound) as gone:
        remove_document(settings, "inbox", first.id)
    assert gone.value.code == "unknown_document"


# --- the HTTP API over real ingests --------------------------------------------------------------------------------

def wait_for_job(url: str, job_id: str, headers: dict[str, str] | None = None) -> dict:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        job = httpx.get(f"{url}/ingest/{job_id}", headers=headers, timeout=30).json()
        if job["status"] not in ("queued", "running"):
            assert job["status"] == "succeeded", job["error"]
            return job
        time.sleep(0.2)
    raise AssertionError("the ingest did not finish")


def search_paths(url: str, query: str, **filters: str) -> list[str]:
    body = {"query": query, "top_k": 5, **({"filters": filters} if filters else {})}
    response = httpx.post(f"{url}/search", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return [hit["path"] for hit in response.json()["results"]]


def test_upload_search_list_and_delete(sources_env: Settings) -> None:
    settings = sources_env
    files = [("files", ("pumps.md", PUMPS_MD, "text/markdown")), ("files", ("../valves.txt", VALVES_HTML, "text/html")),
             ("files", ("blob.md", BINARY, "application/octet-stream"))]
    with running_api(settings) as url:
        response = httpx.post(f"{url}/sources/inbox/documents", files=files, timeout=60)
        assert response.status_code == 202, response.text
        body = response.json()
        assert response.headers["location"] == f"/ingest/{body['ingest']['id']}"
        assert body["source"] == "inbox" and body["ingest"]["status"] in ("queued", "running")
        stored = {document["filename"]: document for document in body["documents"]}
        assert sorted(stored) == ["pumps.md", "valves.html"]  # the HTML's name follows its bytes
        assert stored["valves.html"]["doc_type"] == "html" and not stored["pumps.md"]["duplicate"]
        assert [(rejected["filename"], rejected["error"]["code"]) for rejected in body["rejected"]] == [
            ("blob.md", "unsupported_type")]
        # the same bytes again while that sync runs: the stored file, not a second one, and a queued sync that a
        # further upload joins; POST /ingest is refused meanwhile
        pumps = stored["pumps.md"]
        again = httpx.post(f"{url}/sources/inbox/documents", files=[("files", ("copy.md", PUMPS_MD))], timeout=60)
        assert again.status_code == 202 and again.json()["ingest"]["status"] == "queued"
        assert again.json()["documents"] == [{**pumps, "duplicate": True}]
        joined = httpx.post(f"{url}/sources/inbox/documents", files=[("files", ("x.md", PUMPS_MD))], timeout=60)
        assert joined.json()["ingest"] == again.json()["ingest"]
        busy = httpx.post(f"{url}/ingest", timeout=30)
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "ingest_running"
        upload_dir = settings.data_dir.resolve() / "uploads" / "inbox"
        assert len([path for path in upload_dir.rglob("*") if path.is_file()]) == 2

        job = wait_for_job(url, body["ingest"]["id"])
        assert job["source"] == "inbox" and job["summary"]["added"] == 2 and job["summary"]["failed"] == []
        assert wait_for_job(url, again.json()["ingest"]["id"])["summary"]["added"] == 0

        assert search_paths(url, "how often are the pump seals inspected")[0] == pumps["path"]
        assert search_paths(url, "pump seals", source="inbox")[0] == pumps["path"]
        assert pumps["path"] not in search_paths(url, "pump seals", source="handbook")

        listing = httpx.get(f"{url}/sources/inbox/documents").json()
        documents = {document["id"]: document for document in listing["documents"]}
        assert set(documents) == {pumps["id"], stored["valves.html"]["id"]} and listing["kind"] == "uploads"
        for document in documents.values():
            assert document["status"] == "ok" and document["chunks"] > 0 and document["ingested_at"]
            assert document["uploaded_at"] and document["filename"] in stored
            [path] = document["paths"]  # shown under the source's name, never as the server's path
            assert re.fullmatch(r"inbox/\d{4}/\d{2}/\d{2}/[0-9a-f]{32}/[^/]+", path)
            assert (upload_dir / path.removeprefix("inbox/")).is_file()

        deleted = httpx.delete(f"{url}/sources/inbox/documents/{pumps['id']}", timeout=30)
        assert deleted.status_code == 202, deleted.text
        stored_file = upload_dir / pumps["path"].removeprefix("inbox/")
        assert deleted.json()["removed_paths"] == [pumps["path"]] and not stored_file.exists()
        assert not stored_file.parent.exists()
        job = wait_for_job(url, deleted.json()["ingest"]["id"])
        assert job["summary"]["purged"] >= 1
        assert pumps["path"] not in search_paths(url, "how often are the pump seals inspected")
        listing = httpx.get(f"{url}/sources/inbox/documents").json()
        assert [document["id"] for document in listing["documents"]] == [stored["valves.html"]["id"]]

        missing = httpx.delete(f"{url}/sources/inbox/documents/{pumps['id']}")
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "unknown_document"
        roots = httpx.delete(f"{url}/sources/handbook/documents/{pumps['id']}")
        assert roots.status_code == 409 and roots.json()["error"]["code"] == "not_an_upload_source"
        overview = {entry["name"]: entry for entry in httpx.get(f"{url}/sources").json()["sources"]}
        assert overview["inbox"]["kind"] == "uploads" and overview["inbox"]["documents"] == 1
        assert overview["handbook"]["kind"] == "roots" and "roots" not in overview["handbook"]
        assert str(settings.data_dir) not in json.dumps(overview)  # no server paths for readers


HOSTILE_NAME = "<img src=x onerror=alert(1)>\nPump\u202e notes.md"  # markup, a line break, a bidi override
SHOWN_NAME = "<img src=x onerror=alert(1)> Pump notes.md"  # one line of text, never markup or a path
SEALS = "how often are the pump seals inspected"
BOUNDARY = "upload-boundary"


def raw_multipart(filename: str, data: bytes) -> bytes:
    """A multipart body with `filename` as it is (httpx, like browsers, escapes line breaks and quotes in names;
    a hostile client need not)."""
    return (f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="files"; filename="{filename}"\r\n'
            f"Content-Type: text/markdown\r\n\r\n").encode() + data + f"\r\n--{BOUNDARY}--\r\n".encode()


async def mcp_search(url: str, query: str) -> dict:
    """The structured result of the MCP `search` tool over /mcp, through the SDK's own client."""
    async with Client(streamable_http_client(f"{url}/mcp")) as client:
        result = await client.call_tool("search", {"query": query, "top_k": 3})
        assert not result.is_error, result.content
        return result.structured_content


def test_answers_cite_uploads_by_the_names_their_clients_gave(sources_env: Settings) -> None:
    with running_api(sources_env) as url:
        ingest_and_wait(url)  # the roots source `handbook`: a document that is no upload
        raw = httpx.post(f"{url}/sources/inbox/documents", content=raw_multipart(HOSTILE_NAME, PUMPS_MD), timeout=60,
                         headers={"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"})
        assert raw.status_code == 202, raw.text
        [pumps] = raw.json()["documents"]
        assert pumps["upload_name"] == SHOWN_NAME
        wait_for_job(url, raw.json()["ingest"]["id"])
        body = httpx.post(f"{url}/sources/inbox/documents", timeout=60,
                          files=[("files", ("../../etc/passwd", VALVES_HTML, "text/html"))]).json()
        [valves] = body["documents"]
        assert valves["upload_name"] == "passwd"
        for document in (pumps, valves):  # the name never makes the path
            assert re.fullmatch(r"inbox/\d{4}/\d{2}/\d{2}/[0-9a-f]{32}/[\w. -]+", document["path"]), document
        wait_for_job(url, body["ingest"]["id"])

        def search(query: str, **filters: str) -> list[dict]:
            answer = httpx.post(f"{url}/search", json={"query": query, "top_k": 5, "filters": filters or None},
                                timeout=60)
            assert answer.status_code == 200, answer.text
            return answer.json()["results"]

        [hit, *_] = search(SEALS)
        assert (hit["path"], hit["upload_name"]) == (pumps["path"], SHOWN_NAME)
        assert {hit["path"] for hit in search(SEALS, path=pumps["path"])} == {pumps["path"]}  # path filters work
        [boilers, *_] = search("when are boilers descaled")
        assert boilers["path"] == "handbook/boilers.md" and "upload_name" not in boilers  # not an upload

        events = parse_sse(httpx.post(f"{url}/ask", json={"question": SEALS}, timeout=120).text)
        done = events[-1][1]
        assert done["sources"][0]["path"] == pumps["path"] and done["sources"][0]["upload_name"] == SHOWN_NAME

        chat = httpx.post(f"{url}/chat", json={"message": SEALS}, headers={"Accept": "application/json"},
                          timeout=120).json()
        cited = [citation for citation in chat["citations"] if citation["path"] == pumps["path"]]
        assert cited and all(citation["upload_name"] == SHOWN_NAME for citation in cited)

        completion = httpx.post(f"{url}/v1/chat/completions", timeout=120, json={
            "model": MODEL_ID, "messages": [{"role": "user", "content": SEALS}]}).json()
        message = completion["choices"][0]["message"]
        assert f"{SHOWN_NAME} ({pumps['path']})" in message["content"].split(SOURCES_HEADING, 1)[1]
        assert any(citation.get("upload_name") == SHOWN_NAME for citation in message["citations"])

        found = anyio.run(mcp_search, url, SEALS)
        assert (found["results"][0]["path"], found["results"][0]["upload_name"]) == (pumps["path"], SHOWN_NAME)

        listing = httpx.get(f"{url}/sources/inbox/documents").json()
        assert sorted(document["upload_name"] for document in listing["documents"]) == [SHOWN_NAME, "passwd"]


def test_upload_limits_roles_and_refusals(sources_env: Settings) -> None:
    """Refusals that start no ingest: roles, unknown and roots sources, media type, file count, body size, a request
    whose every file is refused."""
    settings = sources_env.model_copy(update={"upload_max_bytes": 64 * 1024, "upload_max_files": 2})
    keys = settings.api_keys_path
    reader = {"Authorization": f"Bearer {create_key(keys, 'viewer', 'reader')[1]}"}
    loader = {"Authorization": f"Bearer {create_key(keys, 'loader', 'ingester')[1]}"}
    scoped = {"Authorization": f"Bearer {create_key(keys, 'hb', 'reader', (), ('handbook',))[1]}"}
    tagged = {"Authorization": f"Bearer {create_key(keys, 'legal', 'ingester', ('legal',))[1]}"}
    one = [("files", ("a.md", PUMPS_MD, "text/markdown"))]

    def error(response: httpx.Response, status: int) -> str:
        assert response.status_code == status, response.text
        return response.json()["error"]["code"]

    with running_api(settings) as url:
        upload = f"{url}/sources/inbox/documents"
        assert error(httpx.post(upload, files=one), 401) == "not_authenticated"
        assert error(httpx.post(upload, files=one, headers=reader), 403) == "forbidden"
        assert error(httpx.post(f"{url}/sources/nowhere/documents", files=one, headers=loader), 404) == "unknown_source"
        assert error(httpx.post(f"{url}/sources/handbook/documents", files=one, headers=loader),
                     409) == "not_an_upload_source"
        assert error(httpx.post(upload, json={"files": ["a.md"]}, headers=loader), 415) == "unsupported_media_type"
        assert error(httpx.post(upload, headers=loader), 415) == "unsupported_media_type"
        three = [("files", (f"{n}.md", PUMPS_MD + bytes([65 + n]), "text/markdown")) for n in range(3)]
        assert error(httpx.post(upload, files=three, headers=loader), 400) == "too_many_files"
        big = [("files", ("big.md", b"word " * 20_000, "text/markdown"))]
        assert error(httpx.post(upload, files=big, headers=loader), 413) == "body_too_large"
        refused = [("files", ("x.bin", BINARY)), ("files", ("e.md", b""))]
        assert error(httpx.post(upload, files=refused, headers=loader), 400) == "unsupported_type"
        assert error(httpx.post(upload, files=[("other", ("a.md", PUMPS_MD))], headers=loader), 400) == "no_files"

        schema = httpx.get(f"{url}/openapi.json", headers=reader).json()
        post = schema["paths"]["/sources/{name}/documents"]["post"]
        assert "files" in post["requestBody"]["content"]["multipart/form-data"]["schema"]["properties"]
        assert {"UploadResponse", "RemoveResponse", "SourceDocumentsResponse", "SourcesResponse"} <= set(
            schema["components"]["schemas"])
        listing = httpx.get(upload, headers=reader).json()
        assert listing["documents"] == [] and listing["refused"] == []  # nothing stored, nothing ingested
        assert error(httpx.get(upload, headers=scoped), 404) == "unknown_source"
        assert error(httpx.get(f"{url}/sources/nowhere/documents", headers=reader), 404) == "unknown_source"
        assert [entry["name"] for entry in httpx.get(f"{url}/sources", headers=scoped).json()["sources"]] == [
            "handbook"]
        assert error(httpx.delete(f"{upload}/{'0' * 64}", headers=reader), 403) == "forbidden"
        assert error(httpx.delete(f"{upload}/not-an-id", headers=loader), 400) == "invalid_document_id"
        # a tag-scoped key removes only what it sees: an untagged upload is not among them
        stored = store_upload(settings, "inbox", "a.md", PUMPS_MD, None)
        assert error(httpx.delete(f"{upload}/{stored.id}", headers=tagged), 404) == "unknown_document"
        assert httpx.get(upload, headers=tagged).json()["documents"] == []
        assert [document["status"] for document in httpx.get(upload, headers=reader).json()["documents"]] == [
            "pending"]  # stored, not synced yet
        assert remove_document(settings, "inbox", stored.id) == [stored.path]
        assert not (settings.data_dir / "uploads" / "inbox").exists() or not any(
            (settings.data_dir / "uploads" / "inbox").iterdir())


# --- the CLI --------------------------------------------------------------------------------------------------------

def rag_cli(settings: Settings, *argv: str) -> tuple[int, dict]:
    process = subprocess.run([sys.executable, "-m", "rag_pipeline", *argv, "--json", "--data-dir",
                              str(settings.data_dir)], capture_output=True, text=True, timeout=600,
                             env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO)
    return process.returncode, json.loads(process.stdout)


@pytest.mark.slow  # two ingests in subprocesses: about 30 s
def test_cli_upload_remove_and_sources(sources_env: Settings, tmp_path: Path) -> None:
    note = tmp_path / "a.md"
    note.write_bytes(PUMPS_MD)
    junk = tmp_path / "junk.md"
    junk.write_bytes(BINARY)
    code, uploaded = rag_cli(sources_env, "upload", "inbox", str(note), str(junk))
    assert code == 0, uploaded
    [document] = uploaded["documents"]
    assert (document["filename"], document["doc_type"], document["duplicate"]) == ("a.md", "md", False)
    assert [rejected["error"]["code"] for rejected in uploaded["rejected"]] == ["unsupported_type"]
    assert uploaded["ingest"]["added"] == 1 and uploaded["ingest"]["sources"] == ["inbox"]

    code, listed = rag_cli(sources_env, "sources")
    inbox = next(entry for entry in listed["sources"] if entry["name"] == "inbox")
    assert code == 0 and inbox["documents"] == 1 and inbox["roots"] == [
        str(sources_env.data_dir.resolve() / "uploads" / "inbox")]

    code, removed = rag_cli(sources_env, "remove", "inbox", document["id"])
    assert code == 0, removed
    assert removed["removed_paths"] == [document["path"]] and removed["ingest"]["purged"] == 1
    code, refused = rag_cli(sources_env, "upload", "inbox", str(junk))
    assert code == 2 and refused["documents"] == [] and refused["ingest"] is None
    code, failed = rag_cli(sources_env, "remove", "handbook", document["id"])
    assert code == 1 and failed["error"]["code"] == "not_an_upload_source"


@pytest.mark.slow  # an ingest and four questions in subprocesses
def test_cli_answers_cite_uploads_by_their_names(sources_env: Settings, tmp_path: Path) -> None:
    note = tmp_path / "Pump\nnotes <b>.md"  # a line break and markup in a local file's name
    note.write_bytes(PUMPS_MD)
    shown = "Pump notes <b>.md"
    code, uploaded = rag_cli(sources_env, "upload", "inbox", str(note))
    assert code == 0, uploaded
    [document] = uploaded["documents"]
    assert document["upload_name"] == shown and "\n" not in document["path"]

    code, found = rag_cli(sources_env, "search", SEALS)
    assert code == 0 and (found["results"][0]["path"], found["results"][0]["upload_name"]) == (
        document["path"], shown)
    code, answer = rag_cli(sources_env, "ask", SEALS)
    assert code == 0 and answer["sources"][0]["upload_name"] == shown

    def printed(*argv: str) -> str:
        process = subprocess.run([sys.executable, "-m", "rag_pipeline", *argv, "--data-dir",
                                  str(sources_env.data_dir)], capture_output=True, text=True, timeout=600,
                                 env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO)
        assert process.returncode == 0, process.stderr
        return process.stdout

    assert f"[1] {shown} ({document['path']}:" in printed("ask", SEALS)  # the name, then the file's path and line
    assert f"[1] {shown} ({document['path']})" in printed("chat", SEALS)


def store_files_holding(folder: Path, text: bytes) -> list[str]:
    """The files under folder whose bytes hold `text`."""
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file()
                  and text in path.read_bytes())


def test_a_removed_upload_leaves_the_store_files_when_purges_compact(sources_env: Settings,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Deleting a document's points leaves its text in the embedded store's write-ahead log and segment files;
    with RAG_COMPACT_AFTER_PURGE the purge rewrites the store, and the text's bytes are gone from its files."""
    from rag_pipeline.components import open_retriever
    from rag_pipeline.defs.ingest_runner import ingest

    settings = sources_env
    store_dir = settings.data_dir / "qdrant_edge"
    kept, gone = b"Zebrafish husbandry ledger for tank 7741.", b"Axolotl breeding notes of pond 9152."
    uploads = [store_upload(settings, "inbox", f"{name}.md", b"# Notes\n\n" + text + b"\n")
               for name, text in (("kept", kept), ("gone", gone))]
    assert ingest(data_dir=settings.data_dir)["added"] == 3
    assert store_files_holding(store_dir, gone)
    remove_document(settings, "inbox", uploads[1].id)
    assert ingest(data_dir=settings.data_dir, source="inbox")["purged"] == 1
    assert store_files_holding(store_dir, gone)  # by default: deleted points, text still in the files
    again = store_upload(settings, "inbox", "gone.md", b"# Notes\n\n" + gone + b"\n")
    assert ingest(data_dir=settings.data_dir, source="inbox")["added"] == 1
    monkeypatch.setenv("RAG_COMPACT_AFTER_PURGE", "true")
    remove_document(settings, "inbox", again.id)
    assert ingest(data_dir=settings.data_dir, source="inbox")["purged"] == 1
    assert store_files_holding(store_dir, gone) == []
    assert store_files_holding(store_dir, kept)  # the live points were copied over
    retriever = open_retriever(load_settings(data_dir=settings.data_dir))
    try:
        found = retriever.search("zebrafish tank ledger", top_k=3).to_json()["results"]
        assert found and found[0]["text"].startswith("Zebrafish husbandry ledger")
        assert retriever.search("descaled boilers", top_k=3).to_json()["results"]
    finally:
        retriever.close()
