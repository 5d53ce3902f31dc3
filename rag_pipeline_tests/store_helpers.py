"""Test data and doubles shared by the vector store, retrieval and retrieval-stage tests: a small set of points
with known texts and random unit vectors, a store opener per backend, and embedder doubles."""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from rag_pipeline.embed.embedder import Embedder, EmbedderUnavailable
from rag_pipeline.index.factory import open_vector_store
from rag_pipeline.index.sparse import encode_document
from rag_pipeline.index.vector_store import IndexPoint, VectorStore

DIM = 24


MODEL = "test-org/Test-Model.v1"


# One text per point; "pump" is common, "gasket" and "ZX-4471" occur once.
TEXTS = [
    "The centrifugal pump moves cooling water through the primary loop.",
    "Inspect the pump seals every month for leaks.",
    "A pump failure triggers the backup generator alarm.",
    "Replace the pump bearings when vibration exceeds the limit.",
    "The pump controller logs pressure readings each minute.",
    "Order spare part ZX-4471 before the winter shutdown.",
    "Quarterly budget review covers travel and training costs.",
    "The gasket on the inlet flange must be torqued evenly.",
    "Employees submit expense reports through the finance portal.",
    "The library closes early on public holidays.",
    "Solar panels on the roof supply power during the day.",
    "Network switches in the server room need firmware updates.",
]


SHAS = ["sha0", "sha1", "sha2", "sha3"]  # three points each; sha0 and sha1 in shard s0, sha1 and sha3 are pdf


def unit_vector(rng: random.Random, dimension: int = DIM) -> list[float]:
    vector = [rng.gauss(0, 1) for _ in range(dimension)]
    norm = math.sqrt(sum(value * value for value in vector))
    return [value / norm for value in vector]


def make_point(rng: random.Random, index: int, text: str, sha: str, dimension: int = DIM) -> IndexPoint:
    paths = [f"/docs/{sha}.md", f"/mirror/{sha}.md"]
    payload = {
        "text": text,
        "window_text": text,
        "paths": paths,
        "path": paths[0],
        "heading_path": "Intro",
        "line_start": index,
        "page": None,
        "chunk_index": index,
        "sha": sha,
        "shard": "s0" if sha in ("sha0", "sha1") else "s1",
        "doc_type": "pdf" if sha in ("sha1", "sha3") else "md",
        "ingested_at": "2024-05-01T12:00:00+00:00",
    }
    point_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    return IndexPoint(point_id, unit_vector(rng, dimension), encode_document(text), payload)


def make_points(seed: int = 7) -> list[IndexPoint]:
    rng = random.Random(seed)
    return [make_point(rng, i, text, SHAS[i // 3]) for i, text in enumerate(TEXTS)]


def open_store(backend: str, data_dir: Path, dimension: int = DIM) -> VectorStore:
    location = ":memory:" if backend == "server" else None
    return open_vector_store(data_dir=data_dir, model_id=MODEL, dimension=dimension, location=location)


def point_with(points: list[IndexPoint], word: str) -> IndexPoint:
    return next(point for point in points if word in point.payload["text"])



class LookupEmbedder(Embedder):
    """Test double of the Embedder interface: fixed query vectors by text (anything else: a zero vector)."""

    model_id = "lookup"
    dimension = DIM

    def __init__(self, vectors: dict[str, Sequence[float]]) -> None:
        self.vectors = vectors
        self.calls: list[str] = []

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.extend(texts)
        return np.array([self.vectors.get(text, [0.0] * DIM) for text in texts], dtype=np.float32)



class BrokenEmbedder(Embedder):
    """Test double: an embedder whose model server is down."""

    model_id = "broken"
    dimension = DIM

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        raise EmbedderUnavailable("Ollama at http://127.0.0.1:9 unreachable (model 'nomic-embed-text')")



def basis(index: int, dimension: int = DIM) -> list[float]:
    vector = [0.0] * dimension
    vector[index] = 1.0
    return vector

