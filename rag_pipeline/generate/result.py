"""What an answer is made of: the numbered sources it may cite and the final result."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from rag_pipeline.index.vector_store import Hit

_CITATION = re.compile(r"\[(\d+(?:\s*[,–-]\s*\d+)*)\]")


@dataclass(frozen=True)
class Source:
    """A retrieved chunk as the answer cites it: [number]. `path` is the document's first path, `paths` every path
    it is stored under."""

    number: int
    path: str
    heading: str
    page: int | None
    line_start: int | None
    sha: str
    chunk_id: str
    score: float
    text: str
    paths: tuple[str, ...] = ()

    @classmethod
    def of(cls, number: int, hit: Hit) -> Source:
        payload = hit.payload
        return cls(number, payload.get("path", ""), payload.get("heading_path", ""), payload.get("page"),
                   payload.get("line_start"), payload.get("sha", ""), hit.id, hit.score, payload.get("text", ""),
                   tuple(payload.get("paths") or ()))


@dataclass
class Answer:
    question: str
    answer: str
    generator: str  # which generator wrote the answer ("extractive", "ollama/llama3.2", ...)
    sources: list[Source]
    citations: list[int]  # source numbers the answer cites
    timings_ms: dict[str, float]
    warnings: list[str] = field(default_factory=list)
    guardrails: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def cited_numbers(answer: str) -> list[int]:
    """The source numbers cited in `answer` as [n], [n, m] or [n-m], sorted, each once."""
    numbers: set[int] = set()
    for match in _CITATION.finditer(answer):
        for part in re.split(r"\s*,\s*", match.group(1)):
            bounds = [int(value) for value in re.split(r"\s*[–-]\s*", part)]
            if len(bounds) == 2 and bounds[0] <= bounds[1] and bounds[1] - bounds[0] < 100:
                numbers.update(range(bounds[0], bounds[1] + 1))
            else:
                numbers.update(bounds)
    return sorted(numbers)
