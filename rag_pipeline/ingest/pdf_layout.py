"""Recover Markdown structure from the text lines of docling's model-free PDF parse.

docling's NativePdfPipeline yields one plain text item per line. This module rebuilds
headings (bold, italic or larger than the body text), paragraphs (lines joined by normal
line spacing, de-hyphenated), list items and monospace code blocks from the line geometry
and font names, drops repeated page headers/footers and bare page numbers, and keeps the
page of every Markdown line.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from docling.datamodel.base_models import Page

_BOLD = re.compile(r"bold|black|heavy|demi|[-,]bd\b|(?:cm|sf|lm)bx", re.IGNORECASE)
_ITALIC = re.compile(r"italic|oblique|(?:cm|sf|lm)ti\d", re.IGNORECASE)
_MONO = re.compile(r"courier|mono|consol|menlo|inconsolata|(?:cm|sf|lm)tt\d", re.IGNORECASE)
_BULLET = re.compile(r"^[•◦▪▫●○■□∞‣⁃·*\-–—\uf000-\uf8ff]\s+")
_ENUMERATOR = re.compile(r"^\(?(?:\d{1,3}|[a-zA-Z])[.)]\s+")
_NUMBERED = re.compile(r"^\d{1,3}[.)]\s")
_CAPTION = re.compile(r"^(?:figure|fig\.|table|listing|example)\s*\d", re.IGNORECASE)
_DOT_LEADER = re.compile(r"\.\s?\.\s?\.")
_PAGE_NUMBER = re.compile(
    r"(?:page\s*)?(?:\d+(?:[-–.]\d+)?|[ivxlc]+)(?:\s*(?:of|/)\s*\d+)?|[-–]\s*\d+\s*[-–]", re.IGNORECASE
)
_MARGIN = 0.12  # share of the page height at the top and bottom where headers and footers live
_MAX_HEADING_LEVEL = 4


@dataclass
class Line:
    """One text line of a page, in top-left coordinates (points)."""

    text: str
    page: int
    left: float
    top: float
    right: float
    bottom: float
    size: float  # height of the text line, a proxy for the font size
    bold: bool
    italic: bool
    mono: bool
    horizontal: bool

    @property
    def width(self) -> float:
        return self.right - self.left


@dataclass
class _Block:
    kind: str  # "heading", "paragraph", "item" (list item) or "code"
    lines: list[Line]
    text: str = ""
    level: int = 0


def pages_to_markdown(pages: Sequence[Page]) -> tuple[list[str], list[int]]:
    """Markdown lines and the 1-based page number of each, from docling's parsed pages."""
    heights = {page.page_no: page.size.height for page in pages if page.size is not None}
    lines = _drop_page_furniture(list(_read_lines(pages)), heights)
    if not lines:
        return [], []
    body = _body_size(lines)
    blocks = _blocks(lines, body, _paragraph_gap(lines, body))
    _assign_heading_levels(blocks)
    return _render(blocks)


def _read_lines(pages: Iterable[Page]) -> Iterable[Line]:
    for page in pages:
        if page.parsed_page is None or page.size is None:
            continue
        for cell in page.parsed_page.textline_cells:
            text = " ".join(cell.text.split())
            if not text:
                continue
            box = cell.rect.to_top_left_origin(page.size.height).to_bounding_box()
            font = cell.font_name.rsplit("+", 1)[-1]
            yield Line(
                text=text,
                page=page.page_no,
                left=box.l,
                top=box.t,
                right=box.r,
                bottom=box.b,
                size=float(cell.rect.height),
                bold=bool(_BOLD.search(font)),
                italic=bool(_ITALIC.search(font)),
                mono=bool(_MONO.search(font)),
                horizontal=cell.rect.angle_360 in (0, 360),
            )


def _drop_page_furniture(lines: list[Line], heights: dict[int, float]) -> list[Line]:
    """Drop page numbers at the edge of a page and lines repeated in the top/bottom margin of 3+ pages."""
    top: dict[int, float] = {}
    bottom: dict[int, float] = {}
    for line in lines:
        top[line.page] = min(top.get(line.page, line.top), line.top)
        bottom[line.page] = max(bottom.get(line.page, line.bottom), line.bottom)

    def in_margin(line: Line) -> bool:
        height = heights[line.page]
        return line.top < _MARGIN * height or line.bottom > (1 - _MARGIN) * height

    def page_number(line: Line) -> bool:
        at_edge = in_margin(line) or line.top <= top[line.page] or line.bottom >= bottom[line.page]
        return at_edge and bool(_PAGE_NUMBER.fullmatch(line.text))

    def key(line: Line) -> str:
        return re.sub(r"\d+", "#", line.text.lower())

    pages_by_key: dict[str, set[int]] = defaultdict(set)
    for line in lines:
        if in_margin(line):
            pages_by_key[key(line)].add(line.page)
    return [
        line
        for line in lines
        if not (page_number(line) or (in_margin(line) and len(pages_by_key[key(line)]) >= 3))
    ]


def _body_size(lines: list[Line]) -> float:
    """The most common line height, weighted by characters."""
    counts: Counter[float] = Counter()
    for line in lines:
        if line.horizontal:
            counts[round(line.size * 2) / 2] += len(line.text)
    return counts.most_common(1)[0][0] if counts else 10.0


def _gap(upper: Line, lower: Line) -> float:
    return lower.top - upper.bottom


def _paragraph_gap(lines: list[Line], body: float) -> float:
    """Vertical gap above which two body lines belong to different paragraphs."""
    gaps = [
        _gap(a, b)
        for a, b in zip(lines, lines[1:])
        if a.page == b.page
        and abs(a.size - body) < 0.15 * body
        and abs(b.size - body) < 0.15 * body
        and -0.2 * body < _gap(a, b) < 1.5 * body
    ]
    return (statistics.median(gaps) if gaps else 0.3 * body) + 0.4 * body


def _heading_candidate(line: Line, body: float) -> bool:
    text = line.text
    if not line.horizontal or len(text) > 120 or not re.search(r"[^\W\d_]{2}", text):
        return False
    if text[-1] in ".,;:" or _DOT_LEADER.search(text) or _CAPTION.match(text):
        return False
    if _BULLET.match(text) or _NUMBERED.match(text) or line.mono:
        return False
    return line.size >= 1.15 * body or ((line.bold or line.italic) and line.size >= 0.95 * body)


def _same_style(a: Line, b: Line) -> bool:
    return abs(a.size - b.size) < 0.1 * max(a.size, b.size) and a.bold == b.bold and a.italic == b.italic


def _breaks(upper: Line | None, lower: Line | None, para_gap: float) -> bool:
    """Whether a new block starts between two consecutive lines."""
    if upper is None or lower is None or upper.page != lower.page:
        return True
    gap = _gap(upper, lower)
    return gap > para_gap or gap < -upper.size


def _heading_groups(lines: list[Line], body: float, para_gap: float) -> dict[int, int]:
    """Map the index of each heading's first line to the index after its last line."""
    candidate = [_heading_candidate(line, body) for line in lines]
    groups: dict[int, int] = {}
    i = 0
    while i < len(lines):
        if not candidate[i]:
            i += 1
            continue
        end = i + 1
        while (
            end < len(lines)
            and end - i < 3
            and candidate[end]
            and lines[end].page == lines[end - 1].page
            and _same_style(lines[end - 1], lines[end])
            and -0.3 * lines[end].size <= _gap(lines[end - 1], lines[end]) <= 0.8 * lines[end].size
        ):
            end += 1
        before = lines[i - 1] if i > 0 else None
        last = lines[end - 1]
        after = lines[end] if end < len(lines) else None
        narrow = after is not None and after.page == last.page and last.width < 0.85 * after.width
        followed_by_heading = end < len(lines) and candidate[end]
        after_sentence = before is not None and before.text[-1] in ".!?:"
        if (_breaks(before, lines[i], para_gap) or after_sentence) and (_breaks(last, after, para_gap) or narrow or followed_by_heading):
            groups[i] = end
        i = end
    return groups


def _starts_item(line: Line, previous: Line | None) -> bool:
    if _BULLET.match(line.text):
        return True
    # "1." or "a)" at the start of a wrapped line is only an item after a finished sentence.
    return bool(_ENUMERATOR.match(line.text)) and (previous is None or previous.text[-1] in ".:;!?")


def _continues(block: _Block, line: Line, para_gap: float) -> bool:
    """Whether a body line continues the current paragraph or list item."""
    previous = block.lines[-1]
    if block.kind not in ("paragraph", "item") or _breaks(previous, line, para_gap):
        return False
    if line.mono or _starts_item(line, previous) or _DOT_LEADER.search(previous.text):
        return False  # a table-of-contents entry is a line of its own
    if previous.text[-1] in ".!?:" and previous.right < line.right - 0.2 * line.width:
        return False  # the previous line ended a sentence well before the right edge
    if block.kind == "item":
        return line.left >= block.lines[0].left - 2
    indent = 0.8 * line.size
    return abs(line.left - previous.left) <= indent or (len(block.lines) == 1 and line.left < previous.left)


def _blocks(lines: list[Line], body: float, para_gap: float) -> list[_Block]:
    headings = _heading_groups(lines, body, para_gap)
    blocks: list[_Block] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        current = blocks[-1] if blocks else None
        if i in headings:
            group = lines[i : headings[i]]
            blocks.append(_Block("heading", group, " ".join(item.text for item in group)))
            i = headings[i]
            continue
        if line.mono:
            if current and current.kind == "code" and current.lines[-1].page == line.page and (
                0 <= _gap(current.lines[-1], line) <= 2 * para_gap
            ):
                current.lines.append(line)
            else:
                blocks.append(_Block("code", [line]))
        elif current and _continues(current, line, para_gap):
            current.lines.append(line)
            current.text = _join(current.text, line.text)
        else:
            kind = "item" if _starts_item(line, current.lines[-1] if current else None) else "paragraph"
            blocks.append(_Block(kind, [line], line.text))
        i += 1
    return blocks


def _join(text: str, continuation: str) -> str:
    """Join a wrapped line, removing a line-end hyphen before a lowercase continuation."""
    if len(text) > 1 and text[-1] == "-" and text[-2].isalpha() and continuation[0].islower():
        return text[:-1] + continuation
    return f"{text} {continuation}"


def _assign_heading_levels(blocks: list[_Block]) -> None:
    """Largest heading size -> "##" and so on; "#" only for a clearly larger first heading."""
    headings = [block for block in blocks if block.kind == "heading"]
    if not headings:
        return
    tops: list[float] = []  # the largest size of each tier of similar sizes, descending
    tier_of_size: dict[float, int] = {}
    for size in sorted({_heading_size(block) for block in headings}, reverse=True):
        if not tops or size < 0.9 * tops[-1]:
            tops.append(size)
        tier_of_size[size] = len(tops) - 1
    tiers = [tier_of_size[_heading_size(block)] for block in headings]
    has_title = tiers[0] == 0 and tiers.count(0) == 1 and len(tops) > 1 and tops[0] >= 1.3 * tops[1]
    for block, tier in zip(headings, tiers):
        block.level = min((1 if has_title else 2) + tier, _MAX_HEADING_LEVEL)


def _heading_size(block: _Block) -> float:
    return max(line.size for line in block.lines)


def _render(blocks: list[_Block]) -> tuple[list[str], list[int]]:
    out: list[str] = []
    pages: list[int] = []

    def emit(text: str, page: int) -> None:
        out.append(text)
        pages.append(page)

    previous: _Block | None = None
    for block in blocks:
        page = block.lines[0].page
        if previous is not None and not (previous.kind == block.kind == "item"):
            emit("", previous.lines[-1].page)
        if block.kind == "heading":
            emit(f"{'#' * block.level} {block.text}", page)
        elif block.kind == "code":
            emit("```", page)
            char_width = min(line.width / len(line.text) for line in block.lines)
            margin = min(line.left for line in block.lines)
            for line in block.lines:
                emit(" " * round((line.left - margin) / char_width) + line.text, line.page)
            emit("```", block.lines[-1].page)
        elif block.kind == "item":
            emit(_list_item(block.text), page)
        else:
            emit("\\" + block.text if block.text.startswith("#") else block.text, page)
        previous = block
    return out, pages


def _list_item(text: str) -> str:
    if _NUMBERED.match(text):
        return text
    bullet = _BULLET.match(text)
    return "- " + (text[bullet.end() :] if bullet else text)
