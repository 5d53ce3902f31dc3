"""Grounded answers: retrieve, guard, assemble the prompt, generate (streamed), validate, cite.

`Answerer.stream` yields the answer's text pieces, then one final `Answer`. Guardrail layers (each switchable,
each reported in `Answer.guardrails`):
1. scan: the question and every retrieved chunk are scanned for injection patterns; chunks with a
   high-severity finding are quarantined (never reach the generator);
2. spotlight: each passage is wrapped in a per-request random sentinel and declared inert data;
3. hierarchy: the trusted rules are restated after the context;
4. output: the answer is validated sentence by sentence before it is streamed (unknown URLs and invalid
   citations removed; a leaked system prompt or an answer that follows an injected instruction is refused).
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from rag_pipeline.generate.chunk_filter import filter_chunks
from rag_pipeline.generate.generators import ExtractiveGenerator, GenerationRequest, Generator
from rag_pipeline.generate.guardrails import REFUSAL, Finding, quarantined, scan_text, validate_output
from rag_pipeline.generate.prompt import DEFAULT_BUDGET_TOKENS, build_prompt, fit_budget, lost_in_the_middle
from rag_pipeline.generate.result import Answer, Source, cited_numbers
from rag_pipeline.index.vector_store import Filters, Hit, Scope
from rag_pipeline.llm import ChatModel, LLMUnavailable
from rag_pipeline.retrieve.retriever import Retriever

NOTHING_RETRIEVED = "I don't know: no passage in the index matches the question."
ALL_QUARANTINED = "I don't know: every retrieved passage was withheld by the prompt-injection guardrail."
_SENTENCE_BOUNDARY = re.compile(r"(?<=[.!?])[\"')\]”’]*\s+|\n")


@dataclass(frozen=True)
class GuardrailSettings:
    scan: bool = True
    spotlight: bool = True
    hierarchy: bool = True
    output: bool = True


def finding_json(finding: Finding) -> dict[str, Any]:
    return dataclasses.asdict(finding)


class Answerer:
    """Answers questions over `retriever` with `generator` (default: extractive over the retriever's embedder).

    `fallback` answers when the generator's LLM cannot be reached before it produced anything.
    """

    def __init__(self, retriever: Retriever, generator: Generator | None = None, *,
                 guardrails: GuardrailSettings = GuardrailSettings(), budget_tokens: int = DEFAULT_BUDGET_TOKENS,
                 chunk_filter: ChatModel | None = None, chunk_filter_threshold: float = 0.5,
                 fallback: ExtractiveGenerator | None = None) -> None:
        self.retriever = retriever
        self.fallback = fallback or ExtractiveGenerator(retriever.embedder)
        self.generator = generator or self.fallback
        self.guardrails = guardrails
        self.budget_tokens = budget_tokens
        self.chunk_filter = chunk_filter
        self.chunk_filter_threshold = chunk_filter_threshold

    def answer(self, question: str, top_k: int = 5, filters: Filters | None = None, scope: Scope | None = None
               ) -> Answer:
        return [item for item in self.stream(question, top_k, filters, scope) if isinstance(item, Answer)][0]

    def stream(self, question: str, top_k: int = 5, filters: Filters | None = None, scope: Scope | None = None
               ) -> Iterator[str | Answer]:
        """Text pieces, then the final Answer, from the chunks `filters` and `scope` (an API key's) allow.
        ValueError for a bad question, top_k or filter (raised on the first next(), before anything is streamed)."""
        started = time.perf_counter()
        retrieval = self.retriever.search(question, top_k=top_k, filters=filters, scope=scope)
        yield from self.stream_from(question, retrieval.hits, dict(retrieval.timings_ms), list(retrieval.warnings),
                                    started)

    def stream_from(self, question: str, hits: Sequence[Hit], timings: dict[str, float], warnings: list[str],
                    started: float | None = None) -> Iterator[str | Answer]:
        """Text pieces, then the final Answer, from passages already retrieved (the chat agent gathers them with
        its search tool): guarded, numbered [1]..[n] in the order given, generated, validated."""
        started = time.perf_counter() if started is None else started
        layers = self.guardrails
        report: dict[str, Any] = {"layers": dataclasses.asdict(layers), "question_findings": [],
                                  "quarantined": [], "flagged": [], "output_violations": [], "refused": False}
        begin = time.perf_counter()
        candidates = [Source.of(rank, hit) for rank, hit in enumerate(hits, start=1)]
        payloads: list[str] = []  # what injections in the chunks demand: the output layer refuses to comply
        if layers.scan or layers.output:
            report["question_findings"] = [finding_json(f) for f in scan_text(question, "question")]
            kept = []
            for source in candidates:
                findings = scan_text(source.text, f"source {source.number}")
                payloads += [f.payload for f in findings if f.payload]
                entry = {"path": source.path, "chunk_id": source.chunk_id,
                         "findings": [finding_json(f) for f in findings]}
                if layers.scan and quarantined(findings):
                    report["quarantined"].append(entry)
                    continue
                kept.append(source)
                if findings:
                    report["flagged"].append(entry)
            candidates = kept
        if self.chunk_filter is not None and candidates:
            filtered = filter_chunks(self.chunk_filter, question, candidates, self.chunk_filter_threshold)
            candidates = filtered.sources
            if filtered.warning:
                warnings.append(filtered.warning)
        sources = [dataclasses.replace(source, number=number)
                   for number, source in enumerate(fit_budget(candidates, self.budget_tokens), start=1)]
        prompt = build_prompt(question, lost_in_the_middle(sources), spotlight=layers.spotlight,
                              hierarchy=layers.hierarchy)
        timings["guard_in"] = (time.perf_counter() - begin) * 1000

        begin = time.perf_counter()
        used = [self.generator]  # which generator answered: the fallback when the LLM is unreachable
        pieces: list[str] = []
        if not sources:
            text = ALL_QUARANTINED if report["quarantined"] else NOTHING_RETRIEVED
            pieces.append(text)
            yield text
        else:
            request = GenerationRequest(question, sources, prompt)
            context = [source.text for source in sources]
            for sentence in sentences(self._generate(request, warnings, used)):
                checked = self._check(sentence, context, len(sources), prompt.system_prompt, payloads, report)
                if report["refused"]:
                    break
                pieces.append(checked)
                yield checked
            if layers.output and not report["refused"]:  # rules that span sentences (a leaked prompt)
                final = validate_output("".join(pieces), context=context, source_count=len(sources),
                                        system_prompt=prompt.system_prompt, injected_payloads=payloads)
                if final.refused:
                    report["refused"] = True
                    report["output_violations"] += [finding_json(v) for v in final.violations]
        text = "".join(pieces)
        if report["refused"]:
            text = REFUSAL
            yield "\n" + REFUSAL
        timings["generate"] = (time.perf_counter() - begin) * 1000
        timings["answer_total"] = (time.perf_counter() - started) * 1000
        citations = [number for number in cited_numbers(text) if 1 <= number <= len(sources)]
        yield Answer(question, text, used[0].name, sources, citations, timings, warnings, report)

    def _generate(self, request: GenerationRequest, warnings: list[str], used: list[Generator]) -> Iterator[str]:
        """The generator's pieces; if its LLM is unreachable before the first piece, the extractive fallback's
        (then recorded in `used`)."""
        produced = False
        try:
            for piece in self.generator.stream(request):
                produced = True
                yield piece
        except LLMUnavailable as error:
            if produced:
                raise
            warnings.append(f"{error}; answered extractively instead")
            used[0] = self.fallback
            yield from self.fallback.stream(request)

    def _check(self, text: str, context: list[str], source_count: int, system_prompt: str, payloads: list[str],
               report: dict[str, Any]) -> str:
        """`text` after output validation (layer 4), recording violations; sets report["refused"]."""
        if not self.guardrails.output:
            return text
        result = validate_output(text, context=context, source_count=source_count, system_prompt=system_prompt,
                                 injected_payloads=payloads)
        report["output_violations"] += [finding_json(v) for v in result.violations]
        if result.refused:
            report["refused"] = True
        if result.answer == text or result.refused:
            return result.answer
        return result.answer.rstrip() + text[len(text.rstrip()):]  # keep the spacing to the next sentence


def sentences(pieces: Iterable[str]) -> Iterator[str]:
    """Streamed text regrouped into runs of complete sentences, and the unfinished rest at the end."""
    pending = ""
    for piece in pieces:
        ready, pending = split_complete(pending + piece)
        if ready:
            yield ready
    if pending:
        yield pending


def split_complete(text: str) -> tuple[str, str]:
    """(complete sentences, the unfinished rest) of streamed text."""
    last = None
    for match in _SENTENCE_BOUNDARY.finditer(text):
        last = match
    if last is None:
        return "", text
    return text[: last.end()], text[last.end():]
