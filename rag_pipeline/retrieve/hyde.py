"""HyDE (hypothetical document embeddings): an LLM writes passages that would answer the question; their
embeddings, averaged with the question's, replace the question's dense vector (Gao et al., 2022).

"standard" writes n passages from one prompt, "multi" rotates through five prompt templates, "adaptive" is
standard, but only for questions whose best dense score is below a threshold (the index alone looks weak).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from rag_pipeline.embed.embedder import Embedder
from rag_pipeline.errors import ConfigError

HydeMode = Literal["off", "standard", "adaptive", "multi"]

TEMPLATES = (
    "Write a short passage from a reference document that answers the question.\nQuestion: {question}\nPassage:",
    "Write a paragraph of technical documentation that explains the answer to: {question}",
    "Write a concise encyclopedia-style paragraph answering: {question}",
    "Write the section of an internal knowledge-base article that resolves this question: {question}",
    "Write a passage from a scientific or technical report that provides evidence for the answer to: {question}",
)
SYSTEM = "You write plausible document passages. Answer with the passage only, in at most 120 words."


class TextGenerator(Protocol):
    def complete(self, prompt: str, system: str | None = None) -> str: ...


@dataclass
class Hyde:
    """Builds HyDE query vectors with `llm` and `embedder`."""

    llm: TextGenerator
    embedder: Embedder
    mode: HydeMode = "standard"
    documents: int = 3
    adaptive_threshold: float = 0.50

    def __post_init__(self) -> None:
        if self.mode == "off":
            raise ConfigError("Hyde needs a mode other than 'off'")
        if self.documents < 1:
            raise ConfigError(f"HyDE needs at least one hypothetical document, got {self.documents}")

    def wanted(self, top_dense_score: float | None) -> bool:
        """Whether to expand a question: always, except in adaptive mode when the index already scores well."""
        if self.mode != "adaptive":
            return True
        return top_dense_score is None or top_dense_score < self.adaptive_threshold

    def prompts(self, question: str) -> list[str]:
        templates = TEMPLATES if self.mode == "multi" else TEMPLATES[:1]
        return [templates[index % len(templates)].format(question=question) for index in range(self.documents)]

    def hypothetical_documents(self, question: str) -> list[str]:
        """The LLM's passages (blank ones dropped); the LLM's errors propagate."""
        passages = [self.llm.complete(prompt, system=SYSTEM).strip() for prompt in self.prompts(question)]
        return [passage for passage in passages if passage]

    def expand(self, query_vectors: Sequence[np.ndarray], documents: Sequence[str]) -> list[np.ndarray]:
        """Each query vector averaged with the passages' vectors, renormalised."""
        if not documents:
            return list(query_vectors)
        passages = np.asarray(self.embedder.embed_documents(list(documents)), dtype=np.float32)
        expanded = []
        for vector in query_vectors:
            mean = np.vstack([np.asarray(vector, dtype=np.float32)[None, :], passages]).mean(axis=0)
            expanded.append(mean / max(float(np.linalg.norm(mean)), 1e-12))
        return expanded
