"""Split a multi-part question into fragments searched separately ("What is X? How do I configure Y?")."""

from __future__ import annotations

import re

# A boundary is ".", "?" or ";" (runs like "?!" or "..." count once) followed by whitespace or the end.
# Decimals, versions, file names and dotted identifiers ("3.5", "v1.2", "setup.py") have no space after the
# dot and are never split.
_BOUNDARY = re.compile(r"[.?;]+[!)\"'\]]*(?=\s|$)")
# Words ending in "." that do not end a sentence (compared lower-case, without the dot).
ABBREVIATIONS = frozenset(
    "e.g i.e etc vs cf al approx no nos fig figs eq eqs sec ch vol pp p dr mr mrs ms prof st jr sr inc ltd co "
    "corp dept est min max resp incl excl ca jan feb mar apr jun jul aug sep sept oct nov dec".split()
)
MIN_FRAGMENT_WORDS = 3  # shorter pieces ("Thanks.", "Why?") are merged into a neighbour


def _is_abbreviation(text: str, end: int) -> bool:
    """True when the "." ending at `end` closes an abbreviation or an initial ("e.g.", "Dr.", "J.")."""
    if text[end - 1] != ".":
        return False
    word = re.search(r"(\S+)$", text[: end - 1])
    if word is None:
        return False
    token = word.group(1).lstrip("(\"'[").lower()
    return token in ABBREVIATIONS or (len(token) == 1 and token.isalpha())


def split_fragments(question: str, min_words: int = MIN_FRAGMENT_WORDS) -> list[str]:
    """The question's sentences/clauses on [.?;] boundaries, each of at least `min_words` words (short pieces
    are merged into the previous fragment, or the next one at the start); [question] when there is nothing to
    split, [] for a blank question."""
    text = " ".join(question.split())
    if not text:
        return []
    pieces: list[str] = []
    start = 0
    for match in _BOUNDARY.finditer(text):
        if match.group().startswith(".") and len(match.group()) == 1 and _is_abbreviation(text, match.end()):
            continue
        piece = text[start : match.end()].strip()
        if piece:
            pieces.append(piece)
        start = match.end()
    if text[start:].strip():
        pieces.append(text[start:].strip())

    fragments: list[str] = []
    pending = ""  # a short leading piece waiting for the next one
    for piece in pieces:
        if pending:
            piece, pending = f"{pending} {piece}", ""
        if len(piece.split()) >= min_words:
            fragments.append(piece)
        elif fragments:
            fragments[-1] = f"{fragments[-1]} {piece}"
        else:
            pending = piece
    if pending:
        fragments.append(pending)
    return fragments or [text]
