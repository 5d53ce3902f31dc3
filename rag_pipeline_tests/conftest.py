"""Shared fixtures (sample corpus and index, vector stores of both backends, the fake Ollama and OpenAI servers). Tests run offline: a model download from a hub must fail fast, not hang."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import TypeVar

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# One ONNX export of the packaged model for every test and subprocess (fingerprinted by model and library versions,
# so reuse across runs is safe); test_embed exports into its own directory to test the export itself.
os.environ.setdefault("RAG_ONNX_CACHE_DIR", str(Path(__file__).resolve().parents[1] / ".onnx_test_cache"))

from rag_pipeline.components import load_settings
from rag_pipeline.index.vector_store import IndexPoint, VectorStore  # noqa: E402
from rag_pipeline.settings import Settings  # noqa: E402
from rag_pipeline_tests.fake_ollama import FakeOllama  # noqa: E402
from rag_pipeline_tests.fake_openai import FakeOpenAI  # noqa: E402
from rag_pipeline_tests.store_helpers import make_points, open_store  # noqa: E402

Server = TypeVar("Server", bound=ThreadingHTTPServer)
REPO = Path(__file__).resolve().parents[1]
SAMPLE_CORPUS = REPO / "golden" / "corpus"
# The shared datasets sit beside the checkout (CI clones main with shared/ next to it).
DATASETS = Path(os.environ.get("RAG_DATASETS_DIR", REPO.parent / "shared" / "datasets"))
DOCUMENTS = DATASETS / "documents"


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """A writable copy of the bundled sample corpus."""
    target = tmp_path / "corpus"
    shutil.copytree(SAMPLE_CORPUS, target)
    return target


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture(scope="session")
def sample_index(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(corpus, data dir): the sample corpus ingested once per session. Read-only: copy it to change it."""
    from rag_pipeline.defs.ingest_runner import ingest

    base = tmp_path_factory.mktemp("sample_index")
    corpus = base / "corpus"
    shutil.copytree(SAMPLE_CORPUS, corpus)
    ingest([corpus], base / "data")
    return corpus, base / "data"


def ingest_catalog(base: Path) -> Settings:
    """The catalog corpus (golden/catalog, a copy under `base`) ingested through its sources file, into the sidecar
    the environment configures."""
    from rag_pipeline.defs.ingest_runner import ingest

    shutil.copytree(REPO / "golden" / "catalog", base / "catalog")
    settings = load_settings(data_dir=base / "data", sources_file=base / "catalog" / "sources.yaml")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAG_SOURCES_FILE", str(settings.sources_file))
        summary = ingest(data_dir=settings.data_dir)
    assert summary["added"] == 42 and not summary["failed"]
    return settings


@pytest.fixture(scope="session")
def duckdb_catalog(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """The catalog corpus ingested once per session: fields from every property source, a roster, declared
    fields. Read-only for the tests."""
    return ingest_catalog(tmp_path_factory.mktemp("catalog"))


@pytest.fixture(scope="session")
def catalog(duckdb_catalog: Settings) -> Settings:
    """The catalog corpus, ingested once per session (test_metadata_query.py also ingests it into PostgreSQL)."""
    return duckdb_catalog


@pytest.fixture(params=["edge", "server"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[VectorStore]:
    opened = open_store(request.param, tmp_path)
    yield opened
    opened.close()


@pytest.fixture
def points() -> list[IndexPoint]:
    return make_points()


def serving(server: Server) -> Iterator[Server]:
    """The server, serving in a thread until the test ends, then shut down and closed."""
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def fake_ollama() -> Iterator[FakeOllama]:
    """A started FakeOllama, shut down and closed after the test."""
    yield from serving(FakeOllama())


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """A started FakeOpenAI (an OpenAI-compatible server), shut down and closed after the test."""
    yield from serving(FakeOpenAI())


@pytest.fixture(params=["edge", "server"])
def backend(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The configured store for a test's ingests: the embedded engine, or the server code path on qdrant-client's
    in-process `:memory:` API (RAG_QDRANT_URL=:memory:)."""
    from rag_pipeline.index.server_store import shared_memory_client

    shared_memory_client.cache_clear()
    if request.param == "server":
        monkeypatch.setenv("RAG_QDRANT_URL", ":memory:")
    yield request.param
    shared_memory_client.cache_clear()
