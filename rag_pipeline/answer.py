"""Answers: retrieval, then (once a generator is configured) a streamed, cited answer.

`answer_stream` yields the answer's text pieces, then one final `Answer` with the numbered sources. No
generator exists yet, so the answer says so and lists the retrieved passages as sources [1]..[n]; it never
makes up an answer.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from rag_pipeline.index.vector_store import Filters, Hit
from rag_pipeline.retrieve.retriever import Retriever

NO_GENERATOR = (
    "No answer generator is configured, so no answer was written. The retrieved passages are listed as "
    "sources {citations}."
)
NOTHING_FOUND = "No passage in the index matches the question."


@dataclass(frozen=True)
class Source:
    """A retrieved chunk as the answer cites it: [number]."""

    number: int
    path: str
    heading: str
    page: int | None
    line_start: int | None
    sha: str
    chunk_id: str
    score: float
    text: str

    @classmethod
    def of(cls, number: int, hit: Hit) -> Source:
        payload = hit.payload
        return cls(number, payload.get("path", ""), payload.get("heading_path", ""), payload.get("page"),
                   payload.get("line_start"), payload.get("sha", ""), hit.id, hit.score, payload.get("text", ""))


@dataclass
class Answer:
    question: str
    answer: str
    generator: str | None  # which generator wrote the answer; None: none configured
    sources: list[Source]
    citations: list[int]  # source numbers the answer cites
    timings_ms: dict[str, float]
    warnings: list[str] = field(default_factory=list)
    guardrails: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def answer_stream(retriever: Retriever, question: str, top_k: int = 5, filters: Filters | None = None
                  ) -> Iterator[str | Answer]:
    """Text pieces of the answer, then the final Answer. ValueError for a bad question, top_k or filter."""
    retrieval = retriever.search(question, top_k=top_k, filters=filters)
    sources = [Source.of(number, hit) for number, hit in enumerate(retrieval.hits, start=1)]
    citations = [source.number for source in sources]
    text = NO_GENERATOR.format(citations=" ".join(f"[{n}]" for n in citations)) if sources else NOTHING_FOUND
    yield text
    yield Answer(question, text, None, sources, citations, dict(retrieval.timings_ms), list(retrieval.warnings))
