"""The HTTP API under generated input, through a real uvicorn server on 127.0.0.1 over the ingested sample corpus.

Two sources of requests, counted together (at least MIN_REQUESTS, every endpoint among them):
- schemathesis, from the app's own /openapi.json: valid bodies and deliberately invalid ones (negative mode) for
  POST /search, /ask, /ingest, GET /ingest/{id} and /healthz;
- hypothesis, raw hostile requests over every route (/metrics included, which the document leaves out): any
  method, Host, Origin, Content-Type and body (bytes, JSON, JSON nested too deeply), checked against the
  screening rules of serve/middleware/.
No response may be a 5xx or carry a trace; every JSON error has the API's shape. The server's RAG_ROOTS is the
already-ingested sample corpus, so each POST /ingest that starts (202) is a sync with nothing to do, and the
others meet the running one (409).
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from rag_pipeline.components import load_settings
from rag_pipeline.serve.middleware.hosts import LOCAL_HOSTS
from rag_pipeline.serve.middleware.json_body import MAX_JSON_DEPTH

from .test_api import running_api

pytestmark = pytest.mark.slow
MIN_REQUESTS = 1_000
SCHEMA_EXAMPLES = 450  # per generation mode (positive, negative), drawn over all documented operations
RAW_EXAMPLES = 300
ENDPOINTS = {("POST", "/search"), ("POST", "/ask"), ("POST", "/ingest"), ("GET", "/ingest/{id}"),
             ("GET", "/healthz"), ("GET", "/metrics")}
TRACE_MARKERS = ("Traceback", 'File "')
FUZZ_SETTINGS = settings(deadline=None, database=None, phases=[Phase.generate], derandomize=True,
                         suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def fuzz_api(sample_index: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    corpus, data_dir = sample_index
    copy = tmp_path_factory.mktemp("fuzz") / "data"
    shutil.copytree(data_dir, copy)  # ingests write the sidecar: the shared index stays read-only
    with running_api(load_settings(data_dir=copy, roots=[corpus])) as url:
        yield url


def check_response(status: int, content_type: str, body: str, what: str) -> None:
    assert status < 500, f"{what}: {status} {body[:500]}"
    assert not any(marker in body for marker in TRACE_MARKERS), f"{what}: a trace in {body[:500]}"
    if status >= 400 and content_type.startswith("application/json") and body:  # (a HEAD answer has no body)
        error = json.loads(body)["error"]
        assert isinstance(error["code"], str) and isinstance(error["message"], str), f"{what}: {body[:500]}"


def test_fuzz_the_api(fuzz_api: str) -> None:
    sent: Counter[tuple[str, str]] = Counter()
    ingest_statuses: Counter[int] = Counter()  # of POST /ingest: syncs started (202), refused while one runs (409)
    schema = schemathesis.openapi.from_url(f"{fuzz_api}/openapi.json")

    for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
        @settings(FUZZ_SETTINGS, max_examples=SCHEMA_EXAMPLES)
        @given(case=schema.as_strategy(generation_mode=mode))
        def documented(case: schemathesis.Case) -> None:
            response = case.call(base_url=fuzz_api, timeout=60)
            sent[(case.operation.method.upper(), case.operation.path)] += 1
            if (case.method, case.path) == ("POST", "/ingest"):
                ingest_statuses[response.status_code] += 1
            check_response(response.status_code, response.headers.get("content-type", [""])[0], response.text,
                           f"{mode.value} {case.method} {case.path} {case.body!r}")

        documented()

    with httpx.Client(base_url=fuzz_api, timeout=60) as client:
        @settings(FUZZ_SETTINGS, max_examples=RAW_EXAMPLES)
        @given(request=raw_requests())
        def hostile(request: RawRequest) -> None:
            response = client.request(request.method, request.path, content=request.body, headers=request.headers)
            sent[(request.method, request.endpoint)] += 1
            what = f"{request.method} {request.path} {request.headers} {request.body[:200]!r}"
            check_response(response.status_code, response.headers.get("content-type", ""), response.text, what)
            expected = request.screening_error(fuzz_api)
            if expected is not None:
                assert response.status_code == expected[0], what
                assert request.method == "HEAD" or response.json()["error"]["code"] == expected[1], what

        hostile()

    total = sum(sent.values())
    print(f"\nfuzz: {total} requests: " + ", ".join(f"{m} {p} {n}" for (m, p), n in sorted(sent.items())))
    assert total >= MIN_REQUESTS
    assert ENDPOINTS <= {key for key, count in sent.items() if count}, sent
    print(f"fuzz: POST /ingest statuses {dict(ingest_statuses)}")
    assert ingest_statuses[202] and {status for status in ingest_statuses if status < 300} == {202}


# --- raw hostile requests ---------------------------------------------------------------------------------------

ALLOWED_HOSTS = [*LOCAL_HOSTS, "LocalHost", "localhost:1", "[::1]:80", "127.0.0.1:65535"]
REFUSED_HOSTS = ["evil.example", "evil.example:80", "localhost.evil.example", "127.0.0.1.nip.io", "[::2]", "",
                 "localhost:", "evil.example@localhost"]


class RawRequest:
    def __init__(self, method: str, endpoint: str, path: str, headers: dict[str, str], body: bytes) -> None:
        self.method, self.endpoint, self.path, self.headers, self.body = method, endpoint, path, headers, body

    def screening_error(self, url: str) -> tuple[int, str] | None:
        """(status, code) the screening must answer with, or None when the request gets past it."""
        host = self.headers.get("host", url.removeprefix("http://"))  # httpx sends the URL's when none is given
        if host in REFUSED_HOSTS:
            return 400, "invalid_host"
        origin = self.headers.get("origin")
        if origin is not None and origin != f"http://{host.lower()}":
            return 403, "cross_origin"
        media_type = self.headers.get("content-type", "").partition(";")[0].strip().lower()
        if self.method == "POST" and media_type != "application/json" and (media_type or self.body):
            return 415, "unsupported_media_type"
        return None


ROUTES = [*sorted(ENDPOINTS), ("GET", "/openapi.json"), ("GET", "/nope")]
PRINTABLE = st.characters(min_codepoint=0x20, max_codepoint=0x7E)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)


@st.composite
def raw_requests(draw: st.DrawFn) -> RawRequest:
    method, endpoint = draw(st.sampled_from(ROUTES))
    if draw(st.integers(0, 3)) == 0:  # now and then another method than the route's
        method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]))
    ingest_id = draw(st.text(PRINTABLE.filter(lambda c: c not in "/?#%"), min_size=1, max_size=40))
    headers: dict[str, str] = {}
    if draw(st.booleans()):
        headers["host"] = draw(st.sampled_from(ALLOWED_HOSTS + REFUSED_HOSTS))
    if draw(st.integers(0, 3)) == 0:
        headers["origin"] = draw(st.sampled_from(["http://evil.example", "null", "http://localhost:1"]))
    if draw(st.integers(0, 3)):
        headers["content-type"] = draw(st.sampled_from(["application/json", "application/json; charset=utf-8",
                                                        "text/plain", "application/x-www-form-urlencoded"])
                                       | st.text(PRINTABLE, max_size=30).map(str.strip))  # h11 refuses outer spaces
    body = draw(st.one_of(
        st.just(b""),
        st.binary(max_size=300),
        JSON_VALUES.map(lambda value: json.dumps(value).encode()),
        st.fixed_dictionaries({"query": st.text(max_size=60)}, optional={"top_k": JSON_VALUES,
                                                                          "filters": JSON_VALUES})
        .map(lambda value: json.dumps(value).encode()),
        st.integers(MAX_JSON_DEPTH - 2, MAX_JSON_DEPTH + 3).map(lambda depth: b"[" * depth + b"]" * depth),
    ))
    path = endpoint.replace("{id}", httpx.URL("/x/" + ingest_id).raw_path.decode().removeprefix("/x/"))
    return RawRequest(method, endpoint, path, headers, body)
