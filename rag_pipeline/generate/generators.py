"""Answer generators: one interface (stream text pieces) with two implementations.

- `LLMGenerator`: the configured chat model (Ollama or OpenAI-compatible) answers from the assembled prompt.
- `ExtractiveGenerator` (the default without an LLM): the retrieved sentences that best match the question
  (embedding similarity plus term overlap), each cited [n]; "I don't know" when none scores above a threshold.
  Deterministic.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from rag_pipeline.embed.embedder import Embedder
from rag_pipeline.generate.prompt import Prompt
from rag_pipeline.generate.result import Source
from rag_pipeline.llm import ChatModel
from rag_pipeline.retrieve.postprocess import text_overlap

I_DONT_KNOW = "I don't know: none of the retrieved passages answers this question."
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])[\"')\]”’]*\s+(?=[A-Z0-9\"“(\[])")
_WORD = re.compile(r"[a-z0-9]+")
_LIST_MARKER = re.compile(r"^\s*(?:[-*+>]|\d+[.)])\s+")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}")
_FOOTNOTE = re.compile(r"\[\[\s*[^\]]{1,12}\s*\]\]\([^)]*\)|\[\s*\d{1,3}\s*\]")  # "[[ 9 ]](#cite..)", "[9]"
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")  # markdown link or image: keep the label
_EMPHASIS = re.compile(r"(\*\*|__|\*|`)")
_LETTERS = re.compile(r"[^\W\d_]{2,}")
STOPWORDS = frozenset(
    "a an and are as at be by can do does for from has have how i in is it its of on or should that the their "
    "there this to was we what when where which who why will with you your my our they them than then into "
    "about after before if not no so any all".split()
)


@dataclass(frozen=True)
class GenerationRequest:
    question: str
    sources: list[Source]  # numbered [1]..[n] in rank order
    prompt: Prompt  # the LLM prompt (sources in prompt order, guardrail layers applied)


class Generator(ABC):
    name: str

    @abstractmethod
    def stream(self, request: GenerationRequest) -> Iterator[str]:
        """The answer's text pieces, in order."""


class LLMGenerator(Generator):
    def __init__(self, llm: ChatModel) -> None:
        self.llm = llm
        self.name = llm.model_id

    def stream(self, request: GenerationRequest) -> Iterator[str]:
        yield from self.llm.stream_chat(request.prompt.messages)


@dataclass(frozen=True)
class Sentence:
    text: str
    source: int  # the source number
    position: int  # order within the source
    heading: str = ""  # the heading path of the chunk


def content_words(text: str) -> set[str]:
    return {word for word in _WORD.findall(text.lower()) if word not in STOPWORDS and len(word) > 1}


def plain_text(markdown: str) -> str:
    """Markdown inline markup removed: footnote markers dropped, links and images replaced by their labels."""
    return _EMPHASIS.sub("", _LINK.sub(r"\1", _FOOTNOTE.sub("", markdown)))


def sentences_of(source: Source, min_words: int = 4) -> list[Sentence]:
    """The source's prose sentences and table rows; headings, code fences, rules and markup-only lines skipped."""
    lines, in_code = [], False
    for line in source.text.splitlines():
        stripped = line.strip()
        if stripped.startswith(("```", "~~~")):
            in_code = not in_code
            continue
        if in_code or not stripped or stripped.startswith("#") or _TABLE_RULE.match(stripped):
            lines.append("")  # a paragraph break
            continue
        if stripped.startswith("|"):
            cells = [cell.strip() for cell in stripped.strip("|").split("|") if cell.strip()]
            lines += ["", "; ".join(cells) + ".", ""]
            continue
        if _LIST_MARKER.match(stripped):  # each list item stands alone
            lines += ["", _LIST_MARKER.sub("", stripped), ""]
            continue
        lines.append(stripped)
    paragraphs = [" ".join(plain_text(block).split()) for block in "\n".join(lines).split("\n\n")]
    found = []
    for paragraph in paragraphs:
        for piece in _SENTENCE_SPLIT.split(paragraph):
            piece = piece.strip()
            if len(_LETTERS.findall(piece)) >= min_words:  # prose, not a run of numbers or markup
                found.append(Sentence(piece, source.number, len(found), source.heading))
    return found


class ExtractiveGenerator(Generator):
    """Answers with up to `max_sentences` retrieved sentences scoring at least `threshold`, where
    score = similarity_weight · cosine(question, sentence) + (1 − similarity_weight) · share of the question's
    content words in the sentence. Without an embedder only the term overlap counts."""

    name = "extractive"

    def __init__(self, embedder: Embedder | None, *, threshold: float = 0.40, max_sentences: int = 3,
                 similarity_weight: float = 0.7, margin: float = 0.15) -> None:
        self.embedder = embedder
        self.threshold = threshold
        self.max_sentences = max_sentences
        self.similarity_weight = similarity_weight
        self.margin = margin  # sentences more than this below the best are left out

    def score(self, question: str, sentences: Sequence[Sentence]) -> list[float]:
        """Each sentence scored in its context: the heading path it sits under, then the sentence."""
        wanted = content_words(question)
        contextual = [f"{s.heading}: {s.text}" if s.heading else s.text for s in sentences]
        overlap = np.array([len(wanted & content_words(text)) / len(wanted) if wanted else 0.0
                            for text in contextual])
        if self.embedder is None:
            return overlap.tolist()
        vectors = self.embedder.embed_documents(contextual)
        query = self.embedder.embed_queries([question])[0]
        similarity = vectors @ query
        return (self.similarity_weight * similarity + (1 - self.similarity_weight) * overlap).tolist()

    def select(self, question: str, sources: Sequence[Source]) -> list[tuple[Sentence, float]]:
        """The chosen sentences with their scores, best first."""
        sentences = [sentence for source in sources for sentence in sentences_of(source)]
        if not sentences:
            return []
        ranked = sorted(zip(sentences, self.score(question, sentences)),
                        key=lambda pair: (-pair[1], pair[0].source, pair[0].position))
        best = ranked[0][1]
        chosen: list[tuple[Sentence, float]] = []
        for sentence, score in ranked:
            if len(chosen) == self.max_sentences or score < self.threshold or score < best - self.margin:
                break
            if any(text_overlap(sentence.text, kept.text) >= 0.6 for kept, _ in chosen):
                continue  # the same statement from an overlapping chunk
            chosen.append((sentence, score))
        return chosen

    def stream(self, request: GenerationRequest) -> Iterator[str]:
        chosen = self.select(request.question, request.sources)
        if not chosen:
            yield I_DONT_KNOW
            return
        for index, (sentence, _) in enumerate(chosen):
            yield ("" if index == 0 else " ") + f"{sentence.text} [{sentence.source}]"
