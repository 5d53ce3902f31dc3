"""Split a (redacted) Markdown document into retrieval chunks that carry their heading path, line and page: by
sections, then paragraphs, lines, sentences, words and characters, measured in characters or in the embedding
model's word pieces (Ruler, TokenRuler)."""

from __future__ import annotations

import re
import unicodedata
import uuid
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from itertools import groupby, pairwise
from typing import Literal

from tokenizers import Tokenizer

CHUNK_NAMESPACE = uuid.UUID("e8915025-faa4-47e8-a0ec-cd11d5cd4358")

Span = tuple[int, int]  # [start, end) character offsets into the Markdown

_HEADING = re.compile(r" {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r" {0,3}(`{3,}(?!.*`)|~{3,})")  # a backtick fence's info string has no backtick
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_LINE_BREAK = re.compile(r"\n")
_SENTENCE_END = re.compile(r"(?<=\S)[.!?]+[\"')\]”’]*(?=\s)|[。！？]+")
_WHITESPACE = re.compile(r"\s+")
_WORD_START = re.compile(r"(?<!\S)\S")
# Words whose trailing period does not end a sentence; dotted forms like "e.g." are caught by their inner dot.
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st vs cf fig figs no nr vol ch sec approx dept inc ltd co corp".split()
)
_TOC_LINE = re.compile(
    r"""(?:
        .*?(?:\.\s?){3,}\s*(?:\d+|[ivxlcIVXLC]+)   # dotted leaders: "Introduction ....... 3"
      | .*\S\s+\d{1,4}                             # a title ending in a bare page number: "2.1 Setup 7"
      | \d{1,4}                                    # a bare number
    )\s*$""",
    re.VERBOSE,
)
_TOC_LINE_MAX = 200  # longer lines are prose (and would make _TOC_LINE slow)
TOKENIZE_PIECE_CHARS = 1 << 16  # TokenRuler tokenizes a text in pieces of about this many characters,
TOKENIZE_BATCH = 16  # this many pieces at a time (the tokenizer runs a batch on its threads)


def chunk_id(sha: str, chunk_index: int) -> str:
    """UUIDv5 over f"{sha}:{chunk_index}" in CHUNK_NAMESPACE, as str."""
    return str(uuid.uuid5(CHUNK_NAMESPACE, f"{sha}:{chunk_index}"))


@dataclass(frozen=True)
class Chunk:
    """One retrieval unit of a document."""

    chunk_id: str
    sha: str  # SHA-256 of the source document bytes
    chunk_index: int  # 0..n-1 in document order
    text: str  # what gets embedded and shown
    heading_path: str  # "A > B > C" of the enclosing Markdown headings ("" if none)
    line_start: int | None  # 1-based line where the chunk's own (non-overlap) text starts (see chunk_document)
    page: int | None  # page of line_start when line_pages was given, else None
    window_text: str | None  # sentence-window chunker only: the sentence with its neighbours
    overlap_chars: int = 0  # leading characters of text that repeat the previous chunk's end (0 in older artifacts)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Chunk:
        return cls(**{field.name: data[field.name] for field in fields(cls) if field.name in data})

    @property
    def own_text(self) -> str:
        """The chunk's text without the overlap it repeats from the previous chunk."""
        return self.text[self.overlap_chars:]


def context_line(document_name: str, heading_path: str) -> str:
    """The first line of what gets embedded: "path > heading path"."""
    return " > ".join(part for part in (document_name, heading_path) if part)


def contextual_text(document_name: str, chunk: Chunk) -> str:
    """What gets embedded: the context line, then the chunk text."""
    context = context_line(document_name, chunk.heading_path)
    return f"{context}\n{chunk.text}" if context else chunk.text


def neighbourhood_texts(chunks: Sequence[Chunk], radius: int) -> list[str]:
    """Per chunk (of one document, in order), the own text of the chunks of its section (the run of chunks under
    the same headings) within `radius` positions of it, itself included, joined by line breaks: the passage
    around it, each part once."""
    texts = []
    for _, run in groupby(chunks, key=lambda chunk: chunk.heading_path):
        section = [chunk.own_text for chunk in run]
        texts += ["\n".join(section[max(0, position - radius):position + radius + 1])
                  for position in range(len(section))]
    return texts


class Ruler:
    """Measures spans of one text in characters."""

    def length(self, start: int, end: int) -> int:
        return end - start

    def measure(self, text: str) -> int:
        return len(text)

    def cut(self, start: int, end: int, size: int) -> int:
        """The furthest offset in (start, end] such that [start, offset) measures at most size (at least one unit)."""
        return min(end, start + size)

    def back(self, end: int, size: int) -> int:
        """The earliest offset such that [offset, end) measures at most size."""
        return end - size


class TokenRuler(Ruler):
    """Measures spans of one text in a tokenizer's word pieces (special tokens excluded): the text is tokenized
    once, and a span counts the pieces that start inside it. The text is tokenized in pieces cut at line breaks
    (where the tokenizer splits words anyway) and only the pieces' start offsets are kept, 8 bytes each: a whole
    document's encoding would hold ~100 bytes per word piece (over 2 GB for 30 MB of text)."""

    def __init__(self, text: str, tokenizer: Tokenizer) -> None:
        self._tokenizer = tokenizer
        self._starts = array("q")
        pieces = _line_pieces(text, TOKENIZE_PIECE_CHARS)
        for first in range(0, len(pieces), TOKENIZE_BATCH):
            batch = pieces[first:first + TOKENIZE_BATCH]
            encodings = tokenizer.encode_batch([text[start:end] for start, end in batch], add_special_tokens=False)
            for (base, _), encoding in zip(batch, encodings):
                self._starts.extend(base + start for start, end in encoding.offsets if end > start)

    def length(self, start: int, end: int) -> int:
        return bisect_left(self._starts, end) - bisect_left(self._starts, start)

    def measure(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    def cut(self, start: int, end: int, size: int) -> int:
        index = bisect_left(self._starts, start) + max(size, 1)
        # Pieces of one character share its start (Hangul syllables are 2-3 pieces): always move past `start`.
        index = max(index, bisect_right(self._starts, start))
        return self._starts[index] if index < len(self._starts) and self._starts[index] < end else end

    def back(self, end: int, size: int) -> int:
        index = bisect_left(self._starts, end) - size
        return self._starts[index] if 0 <= index < len(self._starts) else 0 if index < 0 else end


def _line_pieces(text: str, size: int) -> list[Span]:
    """Spans covering the text in order, each at most about `size` characters, cut after a line break (after a
    space when a line is longer, anywhere when a word is)."""
    spans, start = [], 0
    while len(text) - start > size:
        end = text.rfind("\n", start, start + size) + 1 or text.rfind(" ", start, start + size) + 1 or start + size
        spans.append((start, end))
        start = end
    return spans + [(start, len(text))] if start < len(text) else spans


def chunk_document(
    sha: str,
    markdown: str,
    *,
    line_pages: Sequence[int] | None = None,
    line_origins: Sequence[int | None] | None = None,
    chunker: Literal["tokens", "recursive", "sentence_window"] = "recursive",
    chunk_size: int = 512,
    chunk_overlap: int = 64,
    sentence_window: int = 3,
    tokenizer: Tokenizer | None = None,
    document_name: str = "",
) -> list[Chunk]:
    """Chunk the Markdown section by section.

    "recursive": every chunk's text has at most chunk_size + chunk_overlap characters. "tokens" (needs the
    embedding model's tokenizer): every chunk's embedded text (contextual_text with document_name: context line,
    overlap and chunk) has at most chunk_size word pieces, unless a section's context line alone takes more than
    half of chunk_size (the chunk then gets half). Lines are split on "\\n" only: line_pages[i] is the page of
    line i + 1. A line that line_pages does not cover gets page None. line_start is the Markdown line, or with
    line_origins the original file's line that Markdown line came from (line_origins[i] for line i + 1; None
    where the file has no such line: a converted format).
    """
    if chunk_size < 1 or chunk_overlap < 0 or sentence_window < 0:
        raise ValueError(f"invalid sizes: {chunk_size=}, {chunk_overlap=}, {sentence_window=}")
    if chunker == "tokens" and tokenizer is None:
        raise ValueError("the tokens chunker needs the embedding model's tokenizer")
    ruler = TokenRuler(markdown, tokenizer) if chunker == "tokens" and tokenizer is not None else Ruler()
    line_starts = [0] + [match.end() for match in _LINE_BREAK.finditer(markdown)]
    pieces: list[tuple[str, int, str, str | None, int]] = []  # (text, start offset, heading path, window, overlap)
    for heading_path, start, end in _sections(markdown, line_starts):
        if chunker == "tokens":
            context = context_line(document_name, heading_path)
            text_budget = max(chunk_size - (ruler.measure(context) if context else 0), chunk_size // 2)
            overlap = min(chunk_overlap, text_budget // 2)  # the chunk's own text keeps at least half the budget
            found = _recursive(markdown, start, end, max(text_budget - overlap, 1), overlap, ruler)
        elif chunker == "recursive":
            found = _recursive(markdown, start, end, chunk_size, chunk_overlap, ruler)
        else:
            found = _sentence_windows(markdown, start, end, chunk_size, sentence_window)
        pieces += [(text, offset, heading_path, window, overlap) for text, offset, window, overlap in found]
    chunks = []
    for index, (text, offset, heading_path, window, overlap) in enumerate(pieces):
        line = bisect_right(line_starts, offset)
        page = line_pages[line - 1] if line_pages is not None and line <= len(line_pages) else None
        origin = line if line_origins is None else line_origins[line - 1] if line <= len(line_origins) else None
        chunks.append(Chunk(chunk_id(sha, index), sha, index, text, heading_path, origin, page, window, overlap))
    return chunks


def _sections(markdown: str, line_starts: list[int]) -> list[tuple[str, int, int]]:
    """(heading path, body start, body end) of the text under each ATX heading (and before the first one)."""
    sections = []
    path: list[tuple[int, str]] = []
    body_start = 0
    fence = ""
    for start, end in pairwise([*line_starts, len(markdown)]):
        line = markdown[start:end].rstrip("\r\n")
        if fence:
            fence = "" if _closes(fence, line) else fence
        elif opening := _FENCE.match(line):
            fence = opening.group(1)
        elif heading := _HEADING.match(line):
            sections.append((_join_path(path), body_start, start))
            level = len(heading.group(1))
            path = [entry for entry in path if entry[0] < level] + [(level, (heading.group(2) or "").strip())]
            body_start = end
    sections.append((_join_path(path), body_start, len(markdown)))
    return sections


def _closes(fence: str, line: str) -> bool:
    """True when the line closes the code fence opened by `fence` (same character, at least as long)."""
    match = _FENCE.match(line)
    return bool(match) and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence) \
        and not line[match.end():].strip()


def _join_path(path: list[tuple[int, str]]) -> str:
    return " > ".join(title for _, title in path if title)


def _recursive(text: str, start: int, end: int, size: int, overlap: int,
               ruler: Ruler) -> list[tuple[str, int, None, int]]:
    """Greedily merged pieces of one section, each after the first prefixed with the previous one's tail:
    (text, core start, no window, prefix length)."""
    cores = _merge(_split(text, start, end, size, ruler), size, ruler)
    toc = [_is_toc(text[core_start:core_end]) for core_start, core_end in cores]
    found = []
    for position, (core_start, core_end) in enumerate(cores):
        if toc[position]:
            continue
        prefix = ""
        if position and not toc[position - 1]:
            prefix = _overlap(text, cores[position - 1], core_start, overlap, ruler)
        found.append((prefix + text[core_start:core_end], core_start, None, len(prefix)))
    return found


def _overlap(text: str, previous: Span, core_start: int, overlap: int, ruler: Ruler) -> str:
    """Up to `overlap` (ruler units): the previous piece's tail from a word start, plus a separating whitespace."""
    gap = text[previous[1]:core_start]
    separator = "\n\n" if gap.count("\n") > 1 else "\n" if "\n" in gap else " " if gap else ""
    budget = overlap - ruler.measure(separator)
    if budget <= 0:
        return ""
    word = _WORD_START.search(text, max(previous[0], ruler.back(previous[1], budget)), previous[1])
    return text[word.start():previous[1]] + separator if word else ""


def _sentence_windows(text: str, start: int, end: int, size: int, window: int) -> list[tuple[str, int, str, int]]:
    """One piece per sentence (long sentences split by words), each with its neighbouring sentences as window."""
    sentences = []
    # Split by paragraphs, lines and sentences whatever their size; only sentences longer than size by words.
    ruler = Ruler()
    for sentence_start, sentence_end in _split(text, start, end, end - start, ruler, force_levels=3):
        if sentence_end - sentence_start > size:
            sentences += _merge(_split(text, sentence_start, sentence_end, size, ruler, level=3), size, ruler)
        else:
            sentences.append((sentence_start, sentence_end))
    found = []
    for position, (sentence_start, sentence_end) in enumerate(sentences):
        first, last = sentences[max(0, position - window)], sentences[min(len(sentences) - 1, position + window)]
        window_text = text[first[0]:last[1]]
        if not _is_toc(window_text):
            found.append((text[sentence_start:sentence_end], sentence_start, window_text, 0))
    return found


def _split(text: str, start: int, end: int, size: int, ruler: Ruler, level: int = 0,
           force_levels: int = 0) -> list[Span]:
    """Stripped, non-empty spans measuring at most `size` covering text[start:end] in order.

    Splits by paragraphs, then lines, sentences, words and characters (levels 0-4), going one level finer only
    for spans still longer than size; the first `force_levels` levels split regardless of size.
    """
    body = text[start:end]
    start, end = start + len(body) - len(body.lstrip()), end - len(body) + len(body.rstrip())
    if start >= end:
        return []
    if ruler.length(start, end) <= size and level >= force_levels:
        return [(start, end)]
    if level == 4:
        return _split_characters(text, start, end, size, ruler)
    bounds = [start, *_split_points(text, start, end, level), end]
    return [span for a, b in pairwise(bounds) for span in _split(text, a, b, size, ruler, level + 1, force_levels)]


def _split_points(text: str, start: int, end: int, level: int) -> list[int]:
    if level == 0:
        return [match.end() for match in _PARAGRAPH_BREAK.finditer(text, start, end)]
    if level == 1:
        return [match.end() for match in _LINE_BREAK.finditer(text, start, end)]
    if level == 2:
        ends = _SENTENCE_END.finditer(text, start, end)
        return [match.end() for match in ends if _ends_sentence(text, start, match)]
    return [match.end() for match in _WHITESPACE.finditer(text, start, end)]


def _ends_sentence(text: str, start: int, match: re.Match[str]) -> bool:
    """False for leaders, an ellipsis and a lone period after "Dr.", "e.g.", an initial "J." or a list number "1."."""
    if ".." in match.group():
        return False
    if match.group() != ".":
        return True
    word_start = match.start()
    while word_start > start and not text[word_start - 1].isspace():
        word_start -= 1
    word = text[word_start:match.start()]
    if "." in word or word.lower() in _ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
        return False
    return not (word.isdigit() and (word_start == start or text[word_start - 1] == "\n"))


def _split_characters(text: str, start: int, end: int, size: int, ruler: Ruler) -> list[Span]:
    """Slices measuring at most size, if possible not cut before a combining mark or inside a ZWJ sequence."""
    spans = []
    while ruler.length(start, end) > size:
        cut = furthest = ruler.cut(start, end, size)
        while cut > start and _continues_grapheme(text, cut):
            cut -= 1
        cut = cut if cut > start else furthest
        spans.append((start, cut))
        start = cut
    return spans + [(start, end)]


def _continues_grapheme(text: str, index: int) -> bool:
    """True when text[index] belongs to the grapheme before it (a mark, variation selector or ZWJ sequence)."""
    char = text[index]
    joins = unicodedata.category(char) in ("Mn", "Mc", "Me") or char in "\u200d\ufe0e\ufe0f"
    return joins or text[index - 1] == "\u200d"


def _merge(spans: list[Span], size: int, ruler: Ruler) -> list[Span]:
    """Greedily join adjacent spans while the joined text (including what lies between) fits in size."""
    merged: list[Span] = []
    for start, end in spans:
        if merged and ruler.length(merged[-1][0], end) <= size:
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _is_toc(text: str) -> bool:
    """True when at least 3 and more than half of the non-empty lines look like table-of-contents entries."""
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    hits = sum(1 for line in lines if len(line) <= _TOC_LINE_MAX and _TOC_LINE.fullmatch(line))
    return hits >= 3 and 2 * hits > len(lines)
