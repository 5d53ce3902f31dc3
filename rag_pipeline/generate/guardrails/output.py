"""Output validation and repair: ``validate_output`` cleans the generated answer (unknown URLs, bad
citations, exfiltration markup, role tags, hidden characters) and refuses it with ``REFUSAL`` when it
leaks the system prompt or carries out what an injection demanded."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from rag_pipeline.generate.guardrails.injection_rules import LINK, REF_DEF, URL, rule_matches, strip_url
from rag_pipeline.generate.guardrails.scan import INVISIBLE_RE, TAG_RE, Finding, escape_hidden, reveal_hidden, scan_text

REFUSAL = (
    "I can't provide that answer: it appears to follow instructions found in the retrieved documents "
    "rather than answering your question."
)


@dataclass
class OutputReport:
    answer: str  # the cleaned answer, or REFUSAL when refused
    violations: list[Finding]
    refused: bool


def _cut(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """Text without the spans; a space before a cut goes too when the cut is followed by space,
    punctuation or the end."""
    pieces, position = [], 0
    for start, end in sorted(spans):
        start = max(start, position)
        if start >= end:
            continue
        kept = text[position:start]
        if not text[end : end + 1].strip() or text[end] in ".,;:!?)":
            kept = kept.rstrip(" \t")
        pieces.append(kept)
        position = end
    pieces.append(text[position:])
    return "".join(pieces)


_URL_RE = re.compile(URL, re.I)
_AUTOLINK = re.compile(rf"<(?P<url>{URL})>", re.I)


def _drop_unknown_urls(text: str, context: Sequence[str]) -> tuple[str, list[Finding]]:
    """Remove URLs that occur in no context text, with their link or image syntax (a link keeps its label)."""
    findings: list[Finding] = []

    def unknown(url: str) -> bool:
        url = strip_url(url)
        if any(url in source or url.rstrip("/") in source for source in context):
            return False
        findings.append(Finding("unknown_url", "medium", escape_hidden(url), "answer"))
        return True

    def link(match: re.Match[str]) -> str:
        if not unknown(match.group("url")):
            return match.group()
        return "" if match.group("image") else match.group("label")

    text = LINK.sub(link, text)
    text = _cut(text, [match.span() for match in REF_DEF.finditer(text) if unknown(match.group("url"))])
    text = _cut(text, [match.span() for match in _AUTOLINK.finditer(text) if unknown(match.group("url"))])
    bare = [match for match in _URL_RE.finditer(text) if unknown(match.group())]
    return _cut(text, [(match.start(), match.start() + len(strip_url(match.group()))) for match in bare]), findings


_CITATION = re.compile(r"(?<![\w\]!])\[(?P<items>\s*\d+\s*(?:(?:[,;]|[-–])\s*\d+\s*)*)\](?![(:\[])")


def _drop_bad_citations(text: str, source_count: int) -> tuple[str, list[Finding]]:
    """Remove citation numbers outside 1..source_count; ranges are clamped, empty markers dropped."""
    findings: list[Finding] = []
    cuts: list[tuple[int, int]] = []
    replacements: list[tuple[int, int, str]] = []
    for match in _CITATION.finditer(text):
        kept, bad = [], False
        for item in re.split(r"[,;]", match.group("items")):
            bounds = [int(number) for number in re.split(r"[-–]", item)]
            low, high = max(bounds[0], 1), min(bounds[-1], source_count)
            bad = bad or (low, high) != (bounds[0], bounds[-1])
            if low <= high:
                kept.append(str(low) if low == high else f"{low}-{high}")
        if bad:
            findings.append(Finding("invalid_citation", "medium", match.group(), "answer"))
            if kept:
                replacements.append((*match.span(), f"[{', '.join(kept)}]"))
            else:
                cuts.append(match.span())
    for start, end, marker in reversed(replacements):
        text = text[:start] + marker + text[end:]
        shift = len(marker) - (end - start)
        cuts = [(a + shift, b + shift) if a >= end else (a, b) for a, b in cuts]
    return _cut(text, cuts), findings


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.casefold())


def _prompt_leak(answer: str, system_prompt: str) -> list[Finding]:
    prompt = _words(system_prompt)
    grams = {tuple(prompt[i : i + 8]) for i in range(len(prompt) - 7)}
    words = _words(answer)
    leaked = next((words[i : i + 8] for i in range(len(words) - 7) if tuple(words[i : i + 8]) in grams), None)
    return [Finding("system_prompt_leak", "high", " ".join(leaked), "answer")] if leaked else []


_CODE_TOKEN = re.compile(r"(?<![\w-])(?=[\w-]*\d)(?=[\w-]*[^\W\d_])[^\W_][\w-]{4,}(?![\w-])")  # CANARY-7, AB12C


def _followed(answer: str, payloads: Sequence[str]) -> list[Finding]:
    """An answer follows an injection when it contains the demanded phrase (a URL payload: its host), or a
    code-like token of it (letters and digits, 5+ characters: an injected marker)."""
    haystack = " ".join(answer.casefold().split())
    findings = []
    for payload in payloads:
        payload = payload.strip()
        if len(payload) < 4:
            continue
        if _URL_RE.match(payload):
            needles = [(urlsplit(payload).hostname or "").casefold()]
        else:
            revealed = reveal_hidden(payload)
            needles = [" ".join(revealed.casefold().split())] + [t.casefold() for t in _CODE_TOKEN.findall(revealed)]
        if any(needle and needle in haystack for needle in needles):
            findings.append(Finding("followed_injection", "high", escape_hidden(payload), "answer", payload))
    return findings


_REMOVED_RULES = ("markdown_image_exfiltration", "role_tag")


def validate_output(
    answer: str, *, context: Sequence[str], source_count: int, system_prompt: str, injected_payloads: Sequence[str]
) -> OutputReport:
    """Clean the generated answer, or refuse it when it leaks the system prompt or follows an injection.

    Removed (reported, not refused): URLs found in no context text, citation numbers outside
    1..source_count, absolute markdown/HTML images, role tags (a turn line whole), the sentence of a
    high-severity send_to_url finding, and hidden characters when they are a finding.
    Refused: 8+ consecutive words of the system prompt, or any injected payload of 4+ characters (a
    URL payload by its host) in the answer."""
    violations = scan_text(answer, "answer")
    text = answer
    if any(finding.rule == "hidden_unicode" for finding in violations):
        text = INVISIBLE_RE.sub("", TAG_RE.sub("", text))
    removed = [
        match.cut
        for match in rule_matches(text)
        if match.rule in _REMOVED_RULES or match.rule == "send_to_url" and match.severity == "high"
    ]
    text = _cut(text, removed)
    text, url_findings = _drop_unknown_urls(text, context)
    text, citation_findings = _drop_bad_citations(text, source_count)
    revealed = reveal_hidden(answer)
    violations += url_findings + citation_findings + _prompt_leak(revealed, system_prompt)
    violations += _followed(revealed, injected_payloads)
    refused = any(finding.rule in ("system_prompt_leak", "followed_injection") for finding in violations)
    if text != answer:
        text = text.strip()
    return OutputReport(REFUSAL if refused else text, violations, refused)
