"""Shared fixtures. Tests run offline: a model download from a hub must fail fast, not hang."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

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
    from rag_pipeline.serve.ingest import ingest

    base = tmp_path_factory.mktemp("sample_index")
    corpus = base / "corpus"
    shutil.copytree(SAMPLE_CORPUS, corpus)
    ingest([corpus], base / "data")
    return corpus, base / "data"
