"""Cross-encoder reranking: a sentence-transformers CrossEncoder from a local model directory scores
(query, passage) pairs; the passage is the chunk's sentence window when it has one, else its text."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from rag_pipeline.errors import ModelUnavailable
from rag_pipeline.index.vector_store import Hit


class RerankerUnavailable(ModelUnavailable):
    """The configured reranker model cannot be loaded."""


class Reranker:
    """A CrossEncoder loaded once from `model_path` (a directory saved by sentence-transformers)."""

    def __init__(self, model_path: str, batch_size: int = 32) -> None:
        path = Path(model_path)
        if not path.is_dir():
            raise RerankerUnavailable(f"reranker model directory not found: {path} (check RAG_RERANK_MODEL_PATH)")
        from sentence_transformers import CrossEncoder

        try:
            self.model = CrossEncoder(str(path), device="cpu", local_files_only=True)
        except Exception as error:  # a broken or incomplete model directory
            raise RerankerUnavailable(
                f"cannot load the reranker from {path} ({type(error).__name__}: {error}); "
                "check RAG_RERANK_MODEL_PATH"
            ) from error
        self.model_id = f"local/{path.name}"
        self.batch_size = batch_size

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        """Relevance of each passage to the query (higher is better; a sigmoid score for one-label models)."""
        if not passages:
            return []
        scores = self.model.predict([(query, passage) for passage in passages], batch_size=self.batch_size,
                                    show_progress_bar=False)
        return [float(score) for score in scores]


def passage(hit: Hit) -> str:
    """What the reranker reads: the sentence window when the chunker stored one, else the chunk text."""
    return hit.payload.get("window_text") or hit.payload.get("text") or ""


def rerank(reranker: Reranker, query: str, hits: Sequence[Hit], min_score: float | None = None) -> list[Hit]:
    """The hits re-scored by the reranker, best first (ties keep retrieval order), below `min_score` dropped."""
    scores = reranker.score(query, [passage(hit) for hit in hits])
    ranked = sorted(zip(hits, scores), key=lambda pair: -pair[1])  # stable: ties keep the retrieval order
    return [
        dataclasses.replace(hit, score=score)
        for hit, score in ranked
        if min_score is None or score >= min_score
    ]
