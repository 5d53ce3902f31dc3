"""The rule catalogue: the patterns of every injection rule but hidden_unicode (``scan`` checks raw text
for that one) and how each match gets its severity, its payload (the phrase the injection wants said, or
the URL it wants rendered or data sent to) and its cut (what to remove from an answer).
``rule_matches`` applies them all to text whose hidden characters are already revealed.

Calibration decisions (retrieved chunks are mostly technical documentation; checked on SciFact, SQuAD,
the docling ground truth and installed packages' READMEs, none of which gets a high finding):
- A trigger quoted as an example in explanatory prose (inside quotes or backticks right after "such
  as", "like", "e.g.", "for example", ...) is medium at most: security explainers quote them. Its
  payload is still extracted, so the answer check catches a model that obeys it anyway.
- Ambiguous phrases are medium unless their paragraph demands a phrase (a payload) or speaks to the
  AI ("you, the AI", "LLMs must", "ChatGPT, please", DAN, jailbreak; merely naming an LLM is not
  enough in AI documentation): "ignore the instructions", "ignore all rules" (linter docs), "from
  now on, you must ..." (changelogs; "... you will respond ..." is high), "do not follow the
  guidelines", "developer mode enabled" (Android docs), "note from the developer", "note to the
  assistant" (a human one), "print the system prompt" ("reveal your system prompt" is high).
- A demand verb counts only as an imperative: after a sentence or clause start, "and", "then",
  "please", "you must", ... ("let's say", "the server will respond with" are not demands).
- "you are no longer" counts only with bound/restricted/an AI/... and "you are now" only with DAN,
  jailbroken, unrestricted, ... ("you are no longer required to register", "you are now ready").
- send_to_url: "send a POST request to https://api..." and "report bugs to https://..." are medium;
  high takes an exfiltration verb (leak, exfiltrate), data in the object (conversation, history,
  secrets, the user's question, the summary, ...) or a URL carrying data (a placeholder like
  ``{q}``/``%7B``/``$DATA``/``=SECRET`` or a query parameter such as ``data``, ``q``, ``msg``).
  Call/fetch/visit/open a URL is high when the URL carries data or the sentence names sensitive data.
- Images: a static query string is medium (README badges: ``?branch=main``, ``?version=latest``,
  ``?token=`` on codecov, shields ``?url=``); high takes a URL carrying data, or a query plus a
  paragraph telling the model to render, embed, fill in or append.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qsl, urlsplit

Severity = Literal["low", "medium", "high"]

RULES = (
    "override_instruction",
    "role_tag",
    "fake_system_prompt",
    "markdown_image_exfiltration",
    "send_to_url",
    "hidden_unicode",
)


@dataclass(frozen=True)
class RuleMatch:
    """One rule's match in a text: where, how severe, the payload it carries, and what to cut from an answer."""

    rule: str
    severity: Severity
    start: int
    end: int
    text: str
    payload: str | None
    cut: tuple[int, int]  # what to remove when the match is in an answer


# --- URLs -----------------------------------------------------------------------------------------

URL = r"https?://[^\s<>\"'`)\]]+"
_PLACEHOLDER = re.compile(
    r"\{[^{}]{0,100}\}|%7[Bb]|\$\{|\$[A-Z_]{2,}|%3[Cc]|\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b|=[A-Z]{4,}(?:&|$)"
)
_DATA_PARAMS = frozenset(
    "data d q msg leak exfil secret conversation history chat prompt question answer summary password pwd cookie "
    "session email payload".split()
)
_IMAGE_INSTRUCTION = re.compile(r"\b(?:replace|substitute|fill\s+in|append|insert|encode|render|display|embed)\b", re.I)


def strip_url(url: str) -> str:
    return url.rstrip(".,;:!?*_")


def _carries_data(url: str) -> bool:
    """The URL has a template placeholder (``{q}``, ``$DATA``, ``=SECRET``) or a query parameter named for data."""
    params = parse_qsl(urlsplit(url).query, keep_blank_values=True)
    return bool(_PLACEHOLDER.search(url)) or any(name.lower() in _DATA_PARAMS for name, _ in params)


# --- phrase rules ---------------------------------------------------------------------------------

_SEP = r"[\W_]{1,6}"
_AI = r"(?:(?:(?-i:AI)\s+|large\s+)?language\s+models?|(?-i:AI|LLMs?)|A\.I\.|chat\s?bots?|(?:Chat)?GPT)"
_AI_TARGET = rf"(?:{_AI}(?:\s+(?:assistants?|models?|agents?|systems?))?)"
_AI_ADDRESS = re.compile(  # spoken to, not merely mentioned: "you, the AI", "LLMs must", "ChatGPT, please", DAN
    rf"\byou(?:\s+are|,)?\s+(?:the\s+|an?\s+)?{_AI_TARGET}|\b{_AI_TARGET}\W{{0,3}}\s*(?:you\s+(?:must|will|shall|should)|"
    r"must|shall|please|are\s+instructed\s+to)\b|\bjailbr\w+|(?-i:\bDAN\b)|\bdo\s+anything\s+now\b",
    re.I,
)
_QUALIFIER = r"previous|prior|above|earlier|preceding|foregoing|former|original|initial|system"
_DOC_PARTS = (
    r"section|step|paragraph|chapter|example|command|version|release|page|part|note|warning|setting|option|line"
)

# (rule, pattern, inherently high). The others are high when a group "qual", "after", "your" or "ai" takes part
# in the match, or "noun" with "all"; else medium unless the paragraph addresses the AI or demands a phrase.
_PHRASES: tuple[tuple[str, re.Pattern[str], bool], ...] = tuple(
    (rule, re.compile(pattern, re.I | re.M), high)
    for rule, pattern, high in (
        (
            "override_instruction",
            rf"\b(?:ignore|disregard|forget|override|overrule)(?:{_SEP}(?P<all>all|any|every))?(?:{_SEP}of)?"
            rf"(?:{_SEP}(?:the|(?P<your>your|my)|these|those))?(?:{_SEP}(?P<qual>{_QUALIFIER}))?"
            rf"(?:{_SEP}(?:and|or){_SEP}(?:following|subsequent|future|other))?"
            rf"{_SEP}(?:(?P<noun>instructions?|prompts?|directives?|commands?)|rules|directions|guidelines|"
            r"context|constraints|restrictions|guardrails|policies|programming)\b"
            rf"(?:{_SEP}(?P<after>above|so\s+far|you\s+(?:were\s+|have\s+been\s+)?(?:given|told)))?",
            False,
        ),
        (
            "override_instruction",
            rf"\b(?:ignore|disregard|forget)(?:{_SEP}(?:all|any)(?:{_SEP}of)?)?{_SEP}(?:the|everything|anything){_SEP}"
            rf"(?:above|before|previous|prior|preceding|earlier)\b(?!{_SEP}(?:{_DOC_PARTS})s?\b)",
            False,
        ),
        ("override_instruction", rf"\bnew{_SEP}instructions\s*[:\-\u2013\u2014]", True),
        (
            "override_instruction",
            r"\bfrom\s+now\s+on\W{0,3}\s*you\s+(?:will|must|are|shall|should)\b(?P<ai>\s+(?:only\s+|always\s+|never\s+)?"
            r"(?:respond|reply|answer|speak|talk|act|behave|pretend|ignore|obey|refuse|say|output)\b)?",
            False,
        ),
        (
            "override_instruction",
            rf"\byou\s+are\s+no\s+longer\s+(?:bound|restricted|limited|constrained|subject\s+to|governed\s+by|"
            rf"required\s+to\s+follow|an?\s+(?:{_AI}|assistant)|\w*GPT\b)",
            True,
        ),
        (
            "override_instruction",
            r"\byou\s+are\s+now\s+(?:(?-i:DAN)\b|jailbroken|in\s+developer\s+mode|free\s+(?:of|from)\b|"
            r"an?\s+(?:unrestricted|unfiltered|uncensored|evil)\b)",
            True,
        ),
        (
            "override_instruction",
            r"\b(?:reveal|print|repeat|output|show|display|leak|tell\s+me)\s+(?:(?P<your>your)|the)\s+(?:full\s+|entire\s+)?"
            r"(?:system\s+prompt|(?:initial|original|hidden|secret)\s+(?:prompt|instructions))\b",
            False,
        ),
        (
            "override_instruction",
            r"\b(?:do\s+not|don'?t|never)\s+(?:follow|obey|adhere\s+to|comply\s+with)\s+(?:(?P<your>your)|the|any)\s+"
            r"(?:previous\s+|original\s+)?(?:rules|instructions|guidelines|programming|system\s+prompt)\b",
            False,
        ),
        (
            "override_instruction",
            rf"\b(?:ignore[zr]?|oublie[zr]?){_SEP}(?:(?P<all>toutes){_SEP})?(?:les|tes|vos){_SEP}"
            rf"(?:(?P<noun>instructions|consignes)|directives|r[eè]gles)(?:{_SEP}(?P<qual>pr[eé]c[eé]dentes|"
            r"ant[eé]rieures|ci-dessus))?\b",
            False,
        ),
        (
            "override_instruction",
            rf"\b(?:ignorier(?:e|en)|vergiss|vergessen)(?:{_SEP}Sie)?(?:{_SEP}(?P<all>alle))?(?:{_SEP}(?:die|deine|Ihre))?"
            rf"(?:{_SEP}(?P<qual>vorherigen|vorigen|bisherigen|obigen|fr[uü]heren))?{_SEP}"
            r"(?:(?P<noun>Anweisungen|Instruktionen)|Befehle|Regeln)\b",
            False,
        ),
        (
            "override_instruction",
            rf"\b(?:ignora|olvida)(?:{_SEP}(?P<all>todas))?{_SEP}las{_SEP}(?P<noun>instrucciones)"
            rf"(?:{_SEP}(?P<qual>anteriores|previas))?\b",
            False,
        ),
        ("role_tag",
         r"<\|[a-z_]{2,30}\|>(?:(?:system|user|assistant)\b)?|\[/?INST\]|<</?SYS>>|</?system(?:\s[^<>]*)?>", True),
        ("role_tag", r"^[ \t]*#{1,6}[ \t]*(?:System|Instructions?|Assistant|Human)[ \t]*:", True),
        ("role_tag", r"(?<=\S)[ \t]+#{2,6}[ \t]*(?:System|Instructions?|Response|Assistant|Human)[ \t]*:", True),
        (
            "role_tag",
            r"^[ \t>]*(?:\*\*)?(?:System|Assistant|AI)(?:\*\*)?[ \t]*:[ \t]*(?:\*\*)?[ \t]*"
            r"(?:ignore|disregard|forget|override|say|respond|reply|output|print|reveal|repeat|include|tell|send|"
            r"pretend|act\s+as|you\s+(?:must|will|should|shall|are\s+now)|from\s+now\s+on|do\s+not|don'?t|never|"
            r"always|new\s+instructions|translate|append|sure|certainly|of\s+course)\b",
            True,
        ),
        ("fake_system_prompt", r"\bsystem[ \t_-]*(?:prompt|message)\s*:", True),
        ("fake_system_prompt", rf"\bdeveloper{_SEP}mode{_SEP}(?:enabled|activated|on|engaged)\b", False),
        (
            "fake_system_prompt",
            rf"\b(?:message|note|notice|memo|instructions?)\s+(?:from|to|for)\s+(?:the\s+|all\s+|any\s+)?"
            rf"(?:(?P<ai>{_AI_TARGET})|administrators?|admins?|developers?|assistants?)\b",
            False,
        ),
        (
            "fake_system_prompt",
            rf"\bas\s+(?:an?\s+{_AI_TARGET}|an?\s+(?:AI\s+)?assistant)\W{{0,3}}\s*you\s+(?:must|should|will|have\s+to|"
            r"are\s+required\s+to)\b",
            True,
        ),
        (
            "fake_system_prompt",
            rf"\battention\W{{0,3}}\s*(?:all\s+)?(?:{_AI_TARGET}|assistants?)\s*[:!,.]",
            True,
        ),
        (
            "fake_system_prompt",
            rf"\b(?:{_AI_TARGET}|assistants?)\s+(?:that\s+(?:is|are)\s+)?(?:summari[sz]ing|reading|processing|"
            r"analy[sz]ing|parsing)\s+this\s+(?:page|document|text|article|email|file|content)\b",
            True,
        ),
        (
            "fake_system_prompt",
            rf"\b{_AI_TARGET}\s+(?:that\s+(?:is|are)\s+)?(?:summari[sz]ing|reading|processing|analy[sz]ing|parsing)"
            r"\s+this\b",
            True,
        ),
        (
            "fake_system_prompt",
            rf"\b(?:hey|hi|hello|dear)\s+(?:{_AI_TARGET}|assistant|Claude|Gemini|Copilot)\s*[,:!]",
            True,
        ),
        (
            "fake_system_prompt",
            rf"\bif\s+you(?:'re|\s+are)\s+an?\s+(?:{_AI_TARGET}|assistant)\s*[,.:;!]",
            True,
        ),
        (  # a vocative: "Assistant, when asked ..., say ..."
            "fake_system_prompt",
            r"(?:^|[.!?:]\s+)(?-i:Assistant|AI|Chatbot|Bot|Model)\s*,\s*(?:when|if|whenever|please|you|always|"
            r"never|do|don'?t|say|tell|include|ignore|answer|reply|respond)\b",
            True,
        ),
        (  # a note addressed to machine readers: "For automated summarisers and chatbots:"
            "fake_system_prompt",
            rf"\bfor\s+(?:all\s+|any\s+)?(?:automated\s+)?(?:summari[sz]ers|chat\s?bots|crawlers|{_AI_TARGET}|"
            r"assistants|AI\s+(?:tools|agents|readers))(?:\s+(?:and|or)\s+[\w -]{1,30}?)?\s*:",
            True,
        ),
        (  # a rule about what answers must say, inside a document
            "fake_system_prompt",
            r"\b(?:answers?|responses?|replies)\b[^.\n]{0,160}?\b(?:must|shall)\s+(?:also\s+|always\s+)?"
            r"(?:contain|include|cite|mention|say|state|recommend|begin\s+with|end\s+with|start\s+with)\b",
            False,
        ),
    )
)


def _strong(match: re.Match[str]) -> bool:
    groups = match.groupdict()
    return any(groups.get(name) for name in ("qual", "after", "your", "ai")) or bool(
        groups.get("noun") and groups.get("all")
    )


# --- payload extraction ---------------------------------------------------------------------------

_QUOTED_VALUE = r"\"(?P<q1>[^\"\n]{1,200})\"|“(?P<q2>[^”\n]{1,200})”|'(?P<q3>[^'\n]{1,200})'|`(?P<q4>[^`\n]{1,200})`"
_DEMAND = re.compile(
    r"\b(?:say|output|print|contain|cite|mention|respond\s+(?:only\s+)?with|dites|dis|"
    r"r[ée]pond(?:s|ez)\s+(?:uniquement\s+)?(?:par|avec)|"
    r"sage|sag|sagen\s+Sie|antworte\s+(?:nur\s+)?mit|reply\s+(?:only\s+)?with|answer\s+(?:only\s+)?with|"
    r"(?:begin|start|end)\s+(?:your|the)\s+(?:answer|response|reply)\s+with|"
    r"tell\s+the\s+(?:readers?|users?)(?:\s+that)?|"
    r"include(?=(?:\s+the\s+(?:word|phrase|code|string|text|sentence|link|url))?\s+(?:[^\n]{1,80}?)\s+in\s+"
    r"(?:your|the)\s+(?:answer|response|reply|output|summary))(?:\s+the\s+(?:word|phrase|code|string|text|"
    r"sentence|link|url))?)"
    rf"\b\s*:?\s*(?:{_QUOTED_VALUE}|(?P<bare>[^\s\"“'`][^\n]*))",
    re.I,
)
_IMPERATIVE_BEFORE = re.compile(  # what may precede a demand verb used as an imperative
    r"(?:^|[.!?:;,\n\"“(\[\]>|]|\b(?:and|then|please|just|only|instead|now|always|simply|also|und|dann|et|puis|"
    r"you\s+(?:must|will|should|shall|need\s+to|have\s+to|are\s+to)|must|should|shall))\s*$",
    re.I,
)
_BARE_END = re.compile(  # a bare demanded phrase ends at punctuation, a conjunction or a trailing qualifier
    r"[.!?;,](?:\s|$)|[<\[\n]|\s+(?:and|then|but|or|so|because|when|whenever|if|at|to|before|after|as|for|"
    r"instead|first|in)\b",
    re.I,
)


def _payload(text: str, region: tuple[int, int], start: int) -> str | None:
    """The phrase demanded in region: the first demand from start on, else the last one before it."""
    demands = [
        match
        for match in _DEMAND.finditer(text, *region)
        if _IMPERATIVE_BEFORE.search(text, max(region[0], match.start() - 30), match.start())
    ]
    after = [match for match in demands if match.start() >= start]
    chosen = after[0] if after else (demands[-1] if demands else None)
    if chosen is None:
        return None
    quoted = next((chosen.group(name) for name in ("q1", "q2", "q3", "q4") if chosen.group(name)), None)
    if quoted:
        return quoted.strip()
    bare = chosen.group("bare")
    stop = _BARE_END.search(bare)
    value = bare[: stop.start() if stop else len(bare)].strip(" \t*_:\"'“”‘’`")
    if len(value) > 60:
        value = value[:60].rsplit(" ", 1)[0]
    return value or None


# --- matching -------------------------------------------------------------------------------------

_QUOTED_SPAN = re.compile(
    r"\"[^\"\n]{1,300}\"|“[^”\n]{1,300}”|‘[^’\n]{1,300}’|«[^»\n]{1,300}»|„[^“\n]{1,300}“|`[^`\n]{1,300}`"
    r"|(?<!\w)'[^'\n]{1,300}'(?!\w)"
)
_EXAMPLE_CUE = re.compile(
    r"\b(?:such\s+as|like|e\.\s?g\.?|for\s+example|for\s+instance|including|known\s+as|called|"
    r"(?:phrases?|strings?|sentences?|patterns?|inputs?|payloads?))\W{0,3}$",
    re.I,
)
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
_SENTENCE_END = re.compile(r"[.!?](?=\s)|\n")
_SEND = re.compile(
    r"\b(?P<verb>send|post|upload|forward|transmit|submit|exfiltrate|leak|report|relay|share)\b"
    rf"(?P<object>(?:[^\n.!?]|\.(?=\S)){{0,100}}?)\b(?:to|at|into|via|on)\s+<?(?P<url>{URL})",
    re.I,
)
_FETCH = re.compile(
    r"\b(?:call|fetch|visit|open|request|load|browse\s+to|navigate\s+to|go\s+to|access|ping|curl)\b"
    r"(?:\s+(?:this|the\s+following|the|a|that))?(?:\s+(?:url|webhook|endpoint|link|page|site|address|api))?"
    rf"(?:\s+to)?\s*:?\s*<?(?P<url>{URL})",
    re.I,
)
_SENSITIVE_TERMS = (
    r"conversation|chat|history|(?:previous|prior|earlier)\s+messages|users?'s?\s+(?:questions?|messages?|input|data|"
    r"query|queries)|secrets?|api[\s_-]?keys?|passwords?|credentials?|system\s+prompt|personal\s+data|cookies?|"
    r"session\s+tokens?"
)
_SENSITIVE = re.compile(rf"\b(?:{_SENSITIVE_TERMS})\b", re.I)
_DATA_OBJECT = re.compile(
    rf"\b(?:{_SENSITIVE_TERMS}|messages?|questions?|prompts?|context|keys|tokens?|private|confidential|information|"
    r"info|summary|answers?|responses?|everything|contents?|documents?|data|this\s+(?:page|document))\b",
    re.I,
)
LINK = re.compile(rf"(?P<image>!?)\[(?P<label>[^\[\]\n]*)\]\(\s*<?(?P<url>{URL})>?(?:\s+\"[^\"\n]*\")?\s*\)", re.I)
_IMAGE_REF = re.compile(r"!\[(?P<alt>[^\[\]\n]{0,300})\](?:\[(?P<ref>[^\[\]\n]{0,300})\])?(?![(\[])")
REF_DEF = re.compile(rf"^[ \t]{{0,3}}\[(?P<ref>[^\[\]\n]{{1,300}})\]:[ \t]*<?(?P<url>{URL})", re.I | re.M)
_HTML_IMAGE = re.compile(rf"<img\b[^<>]{{0,300}}?\bsrc\s*=\s*[\"']?(?P<url>{URL})[^<>]{{0,300}}>", re.I)


def _paragraph(text: str, start: int, end: int) -> tuple[int, int]:
    """The paragraph around [start, end), capped to 300 characters either side."""
    before = [match.end() for match in _PARAGRAPH_BREAK.finditer(text, max(0, start - 300), start)]
    after = _PARAGRAPH_BREAK.search(text, end, end + 300)
    return (before[-1] if before else max(0, start - 300)), (after.start() if after else min(len(text), end + 300))


def _sentence(text: str, start: int, end: int) -> tuple[int, int]:
    """The sentence around [start, end), capped to 300 characters either side."""
    before = [match.end() for match in _SENTENCE_END.finditer(text, max(0, start - 300), start)]
    after = _SENTENCE_END.search(text, end, end + 300)
    return (before[-1] if before else max(0, start - 300)), (after.end() if after else min(len(text), end + 300))


def _quoted_example(text: str, quotes: Sequence[tuple[int, int]], start: int, end: int) -> tuple[int, int] | None:
    """The quoted span holding [start, end) when it is introduced as an example ("such as", "like", ...).
    quotes are the non-overlapping quoted spans of text, in order."""
    index = bisect.bisect_left(quotes, (start,)) - 1
    if index < 0:
        return None
    quote_start, quote_end = quotes[index]
    introduced = _EXAMPLE_CUE.search(text, max(0, quote_start - 40), quote_start)
    return quotes[index] if end <= quote_end and introduced else None


def _phrase_matches(text: str) -> Iterator[RuleMatch]:
    quotes = [match.span() for match in _QUOTED_SPAN.finditer(text)]
    for rule, pattern, high in _PHRASES:
        for match in pattern.finditer(text):
            start, end = match.span()
            example = _quoted_example(text, quotes, start, end)
            region = example or _paragraph(text, start, end)
            payload = _payload(text, region, start)
            strong = high or _strong(match) or payload is not None or _AI_ADDRESS.search(text, *region)
            severity: Severity = "high" if strong and not example else "medium"
            cut = (start, end)
            if rule == "role_tag" and pattern.pattern.startswith("^"):  # a turn or header line goes whole
                cut = (start, text.find("\n", end) % (len(text) + 1))
            yield RuleMatch(rule, severity, start, end, match.group(), payload, cut)


def _image_severity(text: str, match: re.Match[str], url: str) -> Severity:
    """High when the URL carries data, or has a query and the paragraph tells the model to build or render it."""
    region = _paragraph(text, *match.span())
    instructed = urlsplit(url).query and _IMAGE_INSTRUCTION.search(text, *region)
    return "high" if _carries_data(url) or instructed else "medium"


def _url_matches(text: str) -> Iterator[RuleMatch]:
    sends = list(_SEND.finditer(text))
    for match in sends:
        url = strip_url(match.group("url"))
        high = match.group("verb").lower() in ("exfiltrate", "leak") or _DATA_OBJECT.search(match.group("object"))
        yield RuleMatch(
            "send_to_url",
            "high" if high or _carries_data(url) else "medium",
            *match.span(),
            match.group(),
            url,
            _sentence(text, *match.span()),
        )
    sent = {match.start("url") for match in sends}
    for match in _FETCH.finditer(text):
        if match.start("url") in sent:
            continue
        url = strip_url(match.group("url"))
        sentence = _sentence(text, *match.span())
        rest = text[sentence[0] : match.start("url")] + text[match.start("url") + len(url) : sentence[1]]
        high = _carries_data(url) or _SENSITIVE.search(rest)
        yield RuleMatch("send_to_url", "high" if high else "medium", *match.span(), match.group(), url, sentence)
    definitions = {
        match.group("ref").strip().lower(): strip_url(match.group("url")) for match in REF_DEF.finditer(text)
    }
    images = [
        (match, definitions.get((match.group("ref") or match.group("alt")).strip().lower()))
        for match in _IMAGE_REF.finditer(text)
    ]
    inline = (match for match in LINK.finditer(text) if match.group("image"))
    images += [(match, strip_url(match.group("url"))) for match in (*inline, *_HTML_IMAGE.finditer(text))]
    for match, url in images:
        if url:
            yield RuleMatch(
                "markdown_image_exfiltration",
                _image_severity(text, match, url),
                *match.span(),
                match.group(),
                url,
                match.span(),
            )


def rule_matches(text: str) -> list[RuleMatch]:
    """Matches of every rule except hidden_unicode, one per (rule, start), in text order."""
    seen: dict[tuple[str, int], RuleMatch] = {}
    for match in (*_phrase_matches(text), *_url_matches(text)):
        seen.setdefault((match.rule, match.start), match)
    return sorted(seen.values(), key=lambda match: (match.start, RULES.index(match.rule)))
