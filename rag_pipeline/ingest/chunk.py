"""Split a (redacted) Markdown document into retrieval chunks that carry their heading path, line and page."""

from __future__ import annotations

import json
import re
import time
import unicodedata
import uuid
from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from itertools import pairwise
from typing import Literal

from rag_pipeline.index.sidecar import Sidecar
from rag_pipeline.ingest.stage import StageReport, describe, reconcile, stores
from rag_pipeline.settings import Settings

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
    line_start: int  # 1-based Markdown line where the chunk's own (non-overlap) text starts
    page: int | None  # page of line_start when line_pages was given, else None
    window_text: str | None  # sentence-window chunker only: the sentence with its neighbours

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Chunk:
        return cls(**{field.name: data[field.name] for field in fields(cls)})


def chunk_document(
    sha: str,
    markdown: str,
    *,
    line_pages: Sequence[int] | None = None,
    chunker: Literal["recursive", "sentence_window"] = "recursive",
    chunk_size: int = 512,
    chunk_overlap: int = 64,
    sentence_window: int = 3,
) -> list[Chunk]:
    """Chunk the Markdown section by section; every chunk's text has at most chunk_size + chunk_overlap characters.

    Lines are split on "\\n" only: line_pages[i] is the page of line i + 1. A line that line_pages does not
    cover gets page None.
    """
    if chunk_size < 1 or chunk_overlap < 0 or sentence_window < 0:
        raise ValueError(f"invalid sizes: {chunk_size=}, {chunk_overlap=}, {sentence_window=}")
    line_starts = [0] + [match.end() for match in _LINE_BREAK.finditer(markdown)]
    pieces: list[tuple[str, int, str, str | None]] = []  # (text, start offset, heading path, window)
    for heading_path, start, end in _sections(markdown, line_starts):
        if chunker == "recursive":
            found = _recursive(markdown, start, end, chunk_size, chunk_overlap)
        else:
            found = _sentence_windows(markdown, start, end, chunk_size, sentence_window)
        pieces += [(text, offset, heading_path, window) for text, offset, window in found]
    chunks = []
    for index, (text, offset, heading_path, window) in enumerate(pieces):
        line = bisect_right(line_starts, offset)
        page = line_pages[line - 1] if line_pages is not None and line <= len(line_pages) else None
        chunks.append(Chunk(chunk_id(sha, index), sha, index, text, heading_path, line, page, window))
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


def _recursive(text: str, start: int, end: int, size: int, overlap: int) -> list[tuple[str, int, None]]:
    """Greedily merged pieces of one section, each after the first prefixed with the previous one's tail."""
    cores = _merge(_split(text, start, end, size), size)
    toc = [_is_toc(text[core_start:core_end]) for core_start, core_end in cores]
    found = []
    for position, (core_start, core_end) in enumerate(cores):
        if toc[position]:
            continue
        prefix = ""
        if position and not toc[position - 1]:
            prefix = _overlap(text, cores[position - 1], core_start, overlap)
        found.append((prefix + text[core_start:core_end], core_start, None))
    return found


def _overlap(text: str, previous: Span, core_start: int, overlap: int) -> str:
    """Up to `overlap` characters: the previous piece's tail from a word start, plus a separating whitespace."""
    gap = text[previous[1]:core_start]
    separator = "\n\n" if gap.count("\n") > 1 else "\n" if "\n" in gap else " " if gap else ""
    budget = overlap - len(separator)
    if budget <= 0:
        return ""
    word = _WORD_START.search(text, max(previous[0], previous[1] - budget), previous[1])
    return text[word.start():previous[1]] + separator if word else ""


def _sentence_windows(text: str, start: int, end: int, size: int, window: int) -> list[tuple[str, int, str]]:
    """One piece per sentence (long sentences split by words), each with its neighbouring sentences as window."""
    sentences = []
    # Split by paragraphs, lines and sentences whatever their size; only sentences longer than size by words.
    for sentence_start, sentence_end in _split(text, start, end, end - start, force_levels=3):
        if sentence_end - sentence_start > size:
            sentences += _merge(_split(text, sentence_start, sentence_end, size, level=3), size)
        else:
            sentences.append((sentence_start, sentence_end))
    found = []
    for position, (sentence_start, sentence_end) in enumerate(sentences):
        first, last = sentences[max(0, position - window)], sentences[min(len(sentences) - 1, position + window)]
        window_text = text[first[0]:last[1]]
        if not _is_toc(window_text):
            found.append((text[sentence_start:sentence_end], sentence_start, window_text))
    return found


def _split(text: str, start: int, end: int, size: int, level: int = 0, force_levels: int = 0) -> list[Span]:
    """Stripped, non-empty spans of at most `size` characters covering text[start:end] in order.

    Splits by paragraphs, then lines, sentences, words and characters (levels 0-4), going one level finer only
    for spans still longer than size; the first `force_levels` levels split regardless of size.
    """
    body = text[start:end]
    start, end = start + len(body) - len(body.lstrip()), end - len(body) + len(body.rstrip())
    if start >= end:
        return []
    if end - start <= size and level >= force_levels:
        return [(start, end)]
    if level == 4:
        return _split_characters(text, start, end, size)
    bounds = [start, *_split_points(text, start, end, level), end]
    return [span for a, b in pairwise(bounds) for span in _split(text, a, b, size, level + 1, force_levels)]


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


def _split_characters(text: str, start: int, end: int, size: int) -> list[Span]:
    """Slices of at most size characters, if possible not cut before a combining mark or inside a ZWJ sequence."""
    spans = []
    while end - start > size:
        cut = start + size
        while cut > start and _continues_grapheme(text, cut):
            cut -= 1
        cut = cut if cut > start else start + size
        spans.append((start, cut))
        start = cut
    return spans + [(start, end)]


def _continues_grapheme(text: str, index: int) -> bool:
    """True when text[index] belongs to the grapheme before it (a mark, variation selector or ZWJ sequence)."""
    char = text[index]
    joins = unicodedata.category(char) in ("Mn", "Mc", "Me") or char in "\u200d\ufe0e\ufe0f"
    return joins or text[index - 1] == "\u200d"


def _merge(spans: list[Span], size: int) -> list[Span]:
    """Greedily join adjacent spans while the joined text (including what lies between) fits in size."""
    merged: list[Span] = []
    for start, end in spans:
        if merged and end - merged[-1][0] <= size:
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _is_toc(text: str) -> bool:
    """True when at least 3 and more than half of the non-empty lines look like table-of-contents entries."""
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    hits = sum(1 for line in lines if len(line) <= _TOC_LINE_MAX and _TOC_LINE.fullmatch(line))
    return hits >= 3 and 2 * hits > len(lines)


def sync_chunks(settings: Settings, shards: Iterable[str], sidecar: Sidecar) -> StageReport:
    """Chunk every new redacted document into <sha>.jsonl (one Chunk per line)."""
    started = time.perf_counter()
    report = StageReport("chunks", sorted(shards))
    all_stores = stores(settings)
    markdown, redacted, chunks = all_stores["markdown"], all_stores["redacted"], all_stores["chunks"]
    todo = reconcile(report, lambda shard: redacted.shas(shard, "md"), chunks.shas, chunks)
    known = sidecar.documents_by_sha([sha for _, sha in todo])
    limit = settings.chunk_size + settings.chunk_overlap
    rows = []
    for shard, sha in todo:
        begin = time.perf_counter()
        pieces = chunk_document(
            sha, redacted.read_text(shard, sha, "md"),
            line_pages=markdown.read_json(shard, sha, "json")["line_pages"],
            chunker=settings.chunker, chunk_size=settings.chunk_size,
            chunk_overlap=settings.chunk_overlap, sentence_window=settings.sentence_window,
        )
        elapsed_ms = (time.perf_counter() - begin) * 1000
        path = describe(known.get(sha), sha)
        oversized = [chunk.chunk_index for chunk in pieces if len(chunk.text) > limit]
        if oversized:
            report.check_failures.append(f"{path}: chunks {oversized} exceed {limit} characters")
        chunks.write_text(shard, sha, "jsonl", "".join(json.dumps(c.to_dict(), ensure_ascii=False) + "\n"
                                                         for c in pieces))
        report.added.append(sha)
        report.chunks += len(pieces)
        rows.append({"sha": sha, "stage": "chunks", "chunks": len(pieces), "chunk_ms": elapsed_ms})
    sidecar.upsert(rows)
    report.seconds = time.perf_counter() - started
    return report


def read_chunks(settings: Settings, shard: str, sha: str) -> list[Chunk]:
    store = stores(settings)["chunks"]
    lines = store.read_text(shard, sha, "jsonl").split("\n")
    return [Chunk.from_dict(json.loads(line)) for line in lines if line]

