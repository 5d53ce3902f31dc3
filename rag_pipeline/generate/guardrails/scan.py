"""Input scanning: the findings of every rule in a question or a retrieved chunk, and whether they are
severe enough to quarantine it.

Rules run on ``reveal_hidden(text)`` so that triggers hidden with invisible characters are still found;
the raw text is checked for the hiding itself (hidden_unicode). Calibrated like the rules (see ``rules``):
- Invisible characters that hide nothing are no finding: at the text's edges (a BOM), soft hyphens
  inside words, ZWJ/ZWNJ next to non-ASCII characters (emoji sequences, Indic and Persian shaping),
  bidi marks and isolates in text with right-to-left letters, and the TAG sequences of subdivision
  flag emoji. Soft hyphens never count as splitting a trigger word (German hyphenates "Anweisungen").
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

from rag_pipeline.generate.guardrails.injection_rules import RuleMatch, Severity, rule_matches


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: Severity
    excerpt: str  # the matching text, hidden characters shown as \uXXXX escapes, at most ~120 chars
    where: str  # "question", "source 3", "answer", ...
    payload: str | None = None  # the phrase the injection wants said, or the URL it wants rendered / data sent to


# --- hidden characters ----------------------------------------------------------------------------

_INVISIBLE = "\u00ad\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff"
INVISIBLE_RE = re.compile(f"[{_INVISIBLE}]+")
TAG_RE = re.compile("[\U000e0000-\U000e007f]+")
_FLAG_TAGS = re.compile("[\U000e0030-\U000e0039\U000e0061-\U000e007a]{2,6}\U000e007f")
_RTL = re.compile("[\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufefc]")
_TRIGGER_WORDS = frozenset(
    "ignore ignorez ignoriere disregard forget override instruction instructions system prompt prompts "
    "assistant developer jailbreak".split()
)


def _decode_tags(run: str) -> str:
    codes = (ord(char) - 0xE0000 for char in run)
    return "".join(chr(code) for code in codes if 0x20 <= code <= 0x7E or code in (9, 10, 13))


def reveal_hidden(text: str) -> str:
    """Unicode TAG characters decoded to the ASCII they encode; zero-width and bidi control
    characters (U+200B-U+200F, U+202A-U+202E, U+2060-U+2064, U+2066-U+2069, U+FEFF, U+00AD soft
    hyphen) removed; NFKC normalised."""
    text = TAG_RE.sub(lambda match: _decode_tags(match.group()), text)
    return unicodedata.normalize("NFKC", INVISIBLE_RE.sub("", text))


def escape_hidden(text: str) -> str:
    """Hidden and control characters as \\uXXXX escapes, whitespace runs collapsed, cut to ~120 chars."""
    shown = "".join(
        (f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08x}")
        if unicodedata.category(char) in ("Cf", "Cc") and char not in "\t\n\r"
        else char
        for char in text
    )
    shown = " ".join(shown.split())
    return shown if len(shown) <= 120 else shown[:119] + "…"


# --- hidden_unicode -------------------------------------------------------------------------------


def _benign_invisible(text: str, run: re.Match[str], body: tuple[int, int], rtl: bool) -> bool:
    """Whether the run hides nothing: outside the body (the text without edge whitespace), a soft hyphen inside
    a word, ZWJ/ZWNJ next to non-ASCII, bidi marks in RTL text."""
    chars = set(run.group())
    if run.start() <= body[0] or run.end() >= body[1]:
        return True
    neighbours = text[run.start() - 1] + text[run.end()]
    if chars == {"\u00ad"}:
        return neighbours.isalpha()
    if chars <= {"\u200c", "\u200d"}:
        return any(ord(char) > 0x7F for char in neighbours)
    return rtl and chars <= set("\u200e\u200f\u2066\u2067\u2068\u2069")


_WORD_BEFORE = re.compile(rf"[^\W\d_{_INVISIBLE}]+$")
_WORD_AFTER = re.compile(rf"[^\W\d_]+(?:[{_INVISIBLE}]+[^\W\d_]+)*")


def _splits_trigger(text: str, run: re.Match[str]) -> bool:
    """The run sits inside a trigger word (a zero-width space inside "ignore"); soft hyphens never count."""
    if set(run.group()) == {"\u00ad"}:
        return False
    left = _WORD_BEFORE.search(text, max(0, run.start() - 20), run.start())
    right = _WORD_AFTER.match(text, run.end(), run.end() + 40)
    if not (left and right):
        return False
    return INVISIBLE_RE.sub("", left.group() + right.group()).lower() in _TRIGGER_WORDS


def _around(text: str, start: int, end: int) -> str:
    left = re.search(r"\S{0,30}$", text[max(0, start - 30) : start])
    right = re.match(r"\S{0,30}", text[end : end + 30])
    return (left.group() if left else "") + text[start:end] + (right.group() if right else "")


def _key(match: RuleMatch) -> tuple[str, str]:
    return match.rule, " ".join(INVISIBLE_RE.sub("", match.text).lower().split())


def _hidden_findings(text: str, where: str) -> list[Finding]:
    findings = [
        Finding("hidden_unicode", "high", escape_hidden(run.group()), where)
        for run in TAG_RE.finditer(text)
        if not (text[run.start() - 1 : run.start()] == "\U0001f3f4" and _FLAG_TAGS.fullmatch(run.group()))
    ]
    runs = list(INVISIBLE_RE.finditer(text))
    if not runs:
        return findings
    plain = unicodedata.normalize("NFKC", TAG_RE.sub("", text))
    shown = {_key(match) for match in rule_matches(plain)}
    exposed = any(_key(match) not in shown for match in rule_matches(reveal_hidden(TAG_RE.sub("", text))))
    rtl = bool(_RTL.search(text))
    body = (len(text) - len(text.lstrip()), len(text.rstrip()))
    splitting = next((run for run in runs if _splits_trigger(text, run)), None)
    suspicious = next((run for run in runs if not _benign_invisible(text, run, body, rtl)), None)
    if splitting or exposed or suspicious:
        first = splitting or suspicious or runs[0]
        severity: Severity = "high" if splitting or exposed else "medium"
        findings.append(Finding("hidden_unicode", severity, escape_hidden(_around(text, *first.span())), where))
    return findings


# --- public API -----------------------------------------------------------------------------------


def _finding(match: RuleMatch, where: str) -> Finding:
    return Finding(match.rule, match.severity, escape_hidden(match.text), where, match.payload)


def scan_text(text: str, where: str) -> list[Finding]:
    """All findings in text: hidden characters in the raw text, then every other rule on
    ``reveal_hidden(text)`` and on each TAG-encoded message on its own."""
    findings = _hidden_findings(text, where)
    matches = rule_matches(reveal_hidden(text))
    keys = {_key(match) for match in matches}
    for run in TAG_RE.finditer(text):
        for match in rule_matches(_decode_tags(run.group())):
            if _key(match) not in keys:
                keys.add(_key(match))
                matches.append(match)
    return findings + [_finding(match, where) for match in matches]


def quarantined(findings: Sequence[Finding]) -> bool:
    """Whether any finding is high severity (the text must not reach the model)."""
    return any(finding.severity == "high" for finding in findings)
