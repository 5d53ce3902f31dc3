"""Tests of rag_pipeline.ingest.chunk: sizes, overlap, headings, lines, pages, TOC filter, sentence windows, ids."""

from __future__ import annotations

import json
import random
import uuid

import pytest

from rag_pipeline.embed.model_files import model_dir, model_tokenizer
from rag_pipeline.ingest.chunk import chunk_budget
from rag_pipeline.ingest.chunkers import (
    CHUNK_NAMESPACE,
    Chunk,
    chunk_document,
    chunk_id,
    context_line,
    contextual_text,
    neighbourhood_texts,
)
from rag_pipeline.settings import Settings

SHA = "a" * 64
SIZES = [(24, 0), (24, 8), (60, 0), (60, 20), (200, 40), (512, 64)]
WORDS = ["lorem", "ipsum", "dolor", "café", "naïve", "Straße", "日本語", "テキスト", "😀", "👩‍👩‍👧",
         "e\u0301te", "Dr.", "e.g.", "3.5", "sit", "amet", "x" * 90, "ü" * 700]

README = """# Project

A small tool that ingests documents. It supports PDF, DOCX and HTML.

## Install

### Linux

Run the installer:

```bash
# this is a shell comment, not a heading
sudo apt-get install -y tool
tool --version
```

### macOS

Use Homebrew, e.g. `brew install tool`. Dr. Who recommends version 3.5 or later!

## Usage

| Option | Meaning |
|--------|---------|
| -v     | verbose |
| -q     | quiet   |

1. Point the tool at a folder.
2. Wait for the index to build.
3. Ask questions.
"""

CJK = """# 日本語の文書

これは最初の文です。これは二番目の文です！三番目の文はどうですか？

## 詳細

長い段落""" + "とても長い文章が続きます。" * 40 + "\n"

PROSE = "\n\n".join(
    " ".join(f"Sentence {p}.{s} talks about topic {s} in detail and then ends here." for s in range(12))
    for p in range(6)
)

REAL_TEXTS = [README, CJK, PROSE, "Just one line without any heading."]


def random_markdown(rng: random.Random) -> tuple[str, list[str]]:
    """A random document of headings and paragraphs, and the words of its body (everything but headings)."""
    blocks, body = [], []
    for _ in range(rng.randint(0, 12)):
        if rng.random() < 0.3:
            blocks.append("#" * rng.randint(1, 6) + " " + " ".join(rng.choices(WORDS[:10], k=rng.randint(1, 3))))
            continue
        lines = []
        for _ in range(rng.randint(1, 4)):
            words = rng.choices(WORDS, k=rng.randint(1, 60))
            words = [word + rng.choice(["", "", "", ".", "!", "?", ","]) for word in words]
            body += words
            lines.append(" ".join(words))
        blocks.append("\n".join(lines))
    return rng.choice(["\n\n", "\n\n\n", "\n \n"]).join(blocks) + rng.choice(["", "\n"]), body


def squeeze(texts: list[str]) -> str:
    return "".join("".join(text.split()) for text in texts)


@pytest.mark.parametrize("seed", range(100))
def test_random_documents_respect_sizes_and_keep_all_text(seed: int) -> None:
    rng = random.Random(seed)
    markdown, body = random_markdown(rng)
    lines = markdown.split("\n")
    for size, overlap in SIZES:
        chunks = chunk_document(SHA, markdown, chunk_size=size, chunk_overlap=overlap)
        assert all(len(chunk.text) <= size + overlap for chunk in chunks)
        assert all(chunk.text and chunk.text == chunk.text.strip() for chunk in chunks)
        assert [chunk.chunk_index for chunk in chunks] == list(range(len(chunks)))
        cores = chunk_document(SHA, markdown, chunk_size=size, chunk_overlap=0)
        assert squeeze([chunk.text for chunk in cores]) == squeeze(body)
        for chunk, core in zip(chunks, cores, strict=True):
            assert chunk.text.endswith(core.text) and len(chunk.text) - len(core.text) <= overlap
            assert chunk.own_text == core.text
            assert chunk.line_start == core.line_start
            assert core.text.split()[0] in lines[core.line_start - 1]
        sentences = chunk_document(SHA, markdown, chunker="sentence_window", chunk_size=size)
        assert all(len(chunk.text) <= size for chunk in sentences)
        assert squeeze([chunk.text for chunk in sentences]) == squeeze(body)


@pytest.mark.parametrize("markdown", REAL_TEXTS)
@pytest.mark.parametrize(("size", "overlap"), SIZES)
def test_real_documents_respect_sizes(markdown: str, size: int, overlap: int) -> None:
    lines = markdown.split("\n")
    for chunker in ("recursive", "sentence_window"):
        chunks = chunk_document(SHA, markdown, chunker=chunker, chunk_size=size, chunk_overlap=overlap)
        assert chunks
        assert all(chunk.text and len(chunk.text) <= size + overlap for chunk in chunks)
    for chunk in chunk_document(SHA, markdown, chunk_size=size, chunk_overlap=0):
        assert chunk.text.split()[0] in lines[chunk.line_start - 1]


def test_small_section_is_one_chunk_without_its_heading() -> None:
    chunks = chunk_document(SHA, "# Title\n\nShort body.\n", chunk_size=100)
    assert [(chunk.text, chunk.heading_path, chunk.line_start) for chunk in chunks] == [("Short body.", "Title", 3)]


def test_consecutive_chunks_of_a_long_paragraph_overlap_from_a_word_start() -> None:
    words = [f"w{i}" for i in range(300)]
    chunks = chunk_document(SHA, " ".join(words), chunk_size=100, chunk_overlap=30)
    assert len(chunks) > 5
    for previous, chunk in zip(chunks, chunks[1:]):
        shared = max(k for k in range(len(chunk.text)) if previous.text.endswith(chunk.text[:k]))
        assert 0 < shared <= 30
        assert previous.text[-shared - 1] == " "
        assert chunk.text[:shared].split()[0] in words


def test_long_words_are_split_by_characters_without_separating_combining_marks() -> None:
    chunks = chunk_document(SHA, "e\u0301" * 300, chunk_size=51, chunk_overlap=10)
    assert "".join(chunk.text for chunk in chunks) == "e\u0301" * 300
    assert all(len(chunk.text) <= 51 and not chunk.text.startswith("\u0301") for chunk in chunks)


def test_nested_heading_paths() -> None:
    markdown = "Preface.\n# Guide\nIntro.\n## Install\n### Linux\nApt.\n## Usage ##\nRun.\n# Other\nMore.\n#hashtag\n"
    chunks = chunk_document(SHA, markdown)
    assert [(chunk.heading_path, chunk.text) for chunk in chunks] == [
        ("", "Preface."),
        ("Guide", "Intro."),
        ("Guide > Install > Linux", "Apt."),
        ("Guide > Usage", "Run."),
        ("Other", "More.\n#hashtag"),
    ]


def test_skipped_heading_levels() -> None:
    chunks = chunk_document(SHA, "# A\n### C\nin c\n## B\nin b\n")
    assert [chunk.heading_path for chunk in chunks] == ["A > C", "A > B"]


def test_headings_inside_fences_are_ignored() -> None:
    markdown = "# Outer\n```python\n# comment\n```\n~~~\n## not a heading\n~~~\n````\n```\n# still code\n````\nEnd.\n"
    chunks = chunk_document(SHA, markdown)
    assert len(chunks) == 1
    assert chunks[0].heading_path == "Outer"
    assert "# comment" in chunks[0].text and "# still code" in chunks[0].text and chunks[0].text.endswith("End.")


def test_line_start_and_page() -> None:
    markdown = "# Title\n\nFirst paragraph here.\n\n## Part\n\nSecond paragraph.\nThird line.\n"
    line_pages = [1, 1, 1, 1, 2, 2, 2, 3]
    chunks = chunk_document(SHA, markdown, line_pages=line_pages, chunk_size=20, chunk_overlap=0)
    assert [(chunk.text, chunk.line_start, chunk.page) for chunk in chunks] == [
        ("First paragraph", 3, 1),
        ("here.", 3, 1),
        ("Second paragraph.", 7, 2),
        ("Third line.", 8, 3),
    ]
    assert all(chunk.page is None for chunk in chunk_document(SHA, markdown))
    assert chunk_document(SHA, markdown, line_pages=[1, 1])[0].page is None


def test_line_start_ignores_the_overlap() -> None:
    lines = [f"line {i} has some words" for i in range(1, 30)]
    chunks = chunk_document(SHA, "\n".join(lines), chunk_size=23, chunk_overlap=10)
    assert len(chunks) == len(lines)
    for chunk in chunks[1:]:
        assert chunk.text == "words\n" + lines[chunk.line_start - 1]
    assert [chunk.line_start for chunk in chunks] == list(range(1, 30))


def test_toc_chunks_are_dropped_and_numbered_prose_kept() -> None:
    markdown = (
        "# Contents\n\nIntroduction ....... 3\nInstallation . . . . 5\nUsage 9\n12\nAppendix ..... iv\n\n"
        "# Introduction\n\n1. Install the package.\n2. Run 3 commands.\n3. Read chapter 4 for details.\n\n"
        "# Short list\n\nSee page 3\nand page 4\nor the index.\n"
    )
    for chunker in ("recursive", "sentence_window"):
        chunks = chunk_document(SHA, markdown, chunker=chunker)
        assert "Contents" not in {chunk.heading_path for chunk in chunks}
        assert "Introduction" in {chunk.heading_path for chunk in chunks}
    texts = [chunk.text for chunk in chunk_document(SHA, markdown)]
    assert texts == [
        "1. Install the package.\n2. Run 3 commands.\n3. Read chapter 4 for details.",
        "See page 3\nand page 4\nor the index.",
    ]


def test_sentence_window() -> None:
    markdown = "# A\nOne is here. Dr. Two met e.g. Bob at 3.5 pm! Three? Four.\nFive\n# B\nSix."
    chunks = chunk_document(SHA, markdown, chunker="sentence_window", sentence_window=1)
    assert [(chunk.text, chunk.window_text, chunk.heading_path) for chunk in chunks] == [
        ("One is here.", "One is here. Dr. Two met e.g. Bob at 3.5 pm!", "A"),
        ("Dr. Two met e.g. Bob at 3.5 pm!", "One is here. Dr. Two met e.g. Bob at 3.5 pm! Three?", "A"),
        ("Three?", "Dr. Two met e.g. Bob at 3.5 pm! Three? Four.", "A"),
        ("Four.", "Three? Four.\nFive", "A"),
        ("Five", "Four.\nFive", "A"),
        ("Six.", "Six.", "B"),
    ]
    assert [chunk.line_start for chunk in chunks] == [2, 2, 2, 2, 3, 5]


def test_sentence_window_splits_long_sentences_by_words() -> None:
    sentence = " ".join(f"word{i}" for i in range(100)) + "."
    chunks = chunk_document(SHA, f"Short one. {sentence} Last.", chunker="sentence_window", chunk_size=50)
    assert chunks[0].text == "Short one." and chunks[-1].text == "Last."
    assert all(len(chunk.text) <= 50 for chunk in chunks)
    assert " ".join(chunk.text for chunk in chunks[1:-1]) == sentence


def test_cjk_sentences() -> None:
    chunks = chunk_document(SHA, "これは文です。二番目！三番目？", chunker="sentence_window")
    assert [chunk.text for chunk in chunks] == ["これは文です。", "二番目！", "三番目？"]


@pytest.mark.parametrize("markdown", ["", "   \n\n \t\n", "# Only a heading\n\n## And another\n"])
def test_empty_documents(markdown: str) -> None:
    assert chunk_document(SHA, markdown) == []
    assert chunk_document(SHA, markdown, chunker="sentence_window") == []


def test_ids_are_deterministic() -> None:
    assert chunk_id(SHA, 0) == "f39e320d-a756-5591-955b-50ca27ae2e8b"
    assert chunk_id(SHA, 7) == str(uuid.uuid5(CHUNK_NAMESPACE, f"{SHA}:7"))
    assert uuid.UUID(chunk_id(SHA, 0)).version == 5
    first, second = chunk_document(SHA, README, chunk_size=60), chunk_document(SHA, README, chunk_size=60)
    assert first == second
    assert [chunk.chunk_id for chunk in first] == [chunk_id(SHA, i) for i in range(len(first))]


def test_dict_round_trip() -> None:
    for chunker in ("recursive", "sentence_window"):
        for chunk in chunk_document(SHA, README, line_pages=[1] * 40, chunker=chunker, chunk_size=60):
            assert Chunk.from_dict(json.loads(json.dumps(chunk.to_dict()))) == chunk


def test_an_artifact_written_before_overlap_chars_reads_as_no_overlap() -> None:
    """Such a chunk's passage (neighbourhood_texts) holds its overlap twice until its chunks are rebuilt (see
    docs/ingest.md, the vector index)."""
    chunk = chunk_document(SHA, README, chunk_size=60, chunk_overlap=20)[3]
    assert chunk.overlap_chars
    older = {key: value for key, value in chunk.to_dict().items() if key != "overlap_chars"}
    assert Chunk.from_dict(older).own_text == chunk.text


def test_neighbourhood_texts_hold_each_neighbours_own_text_once_within_its_section() -> None:
    lines = [f"Sentence number {i} talks about topic {i}." for i in range(12)]
    markdown = "# One\n\n" + " ".join(lines[:6]) + "\n\n# Two\n\n" + " ".join(lines[6:]) + "\n"
    chunks = chunk_document(SHA, markdown, chunk_size=90, chunk_overlap=40)
    assert len({chunk.heading_path for chunk in chunks}) == 2 and len(chunks) >= 6
    assert any(chunk.overlap_chars for chunk in chunks)
    for radius in (0, 1, 2):
        contexts = neighbourhood_texts(chunks, radius)
        for chunk, context in zip(chunks, contexts, strict=True):
            section = [other for other in chunks if other.heading_path == chunk.heading_path]
            offset = section.index(chunk)
            around = section[max(0, offset - radius):offset + radius + 1]
            assert context == "\n".join(other.own_text for other in around)
            assert chunk.own_text in context
            for sentence in lines:  # no sentence twice, none from the other section
                assert context.count(sentence) <= 1
                if sentence in context:
                    assert sentence in markdown.split("# ")[1 if chunk.heading_path == "One" else 2]
    assert neighbourhood_texts([], 1) == []


def test_invalid_sizes() -> None:
    with pytest.raises(ValueError):
        chunk_document(SHA, "text", chunk_size=0)
    with pytest.raises(ValueError):
        chunk_document(SHA, "text", chunk_overlap=-1)


# The tokens chunker, with the packaged embedding model's own tokenizer.
TOKENIZER = model_tokenizer(model_dir())
NAME = "guides/setup notes.md"
TOKEN_SIZES = [(32, 0), (64, 16), (254, 0), (254, 48)]


def pieces(text: str) -> int:
    return len(TOKENIZER.encode(text, add_special_tokens=False).ids)


def fits(chunk: Chunk, size: int) -> bool:
    """The embedded text fits size pieces, or (a context line over half the size) the chunk has half of them."""
    return pieces(contextual_text(NAME, chunk)) <= max(size, pieces(context_line(NAME, chunk.heading_path)) + size // 2)


def token_chunks(markdown: str, size: int, overlap: int) -> list[Chunk]:
    return chunk_document(SHA, markdown, chunker="tokens", chunk_size=size, chunk_overlap=overlap,
                          tokenizer=TOKENIZER, document_name=NAME)


@pytest.mark.parametrize("seed", range(60))
def test_token_chunks_fit_with_their_context_line_and_keep_all_text(seed: int) -> None:
    markdown, body = random_markdown(random.Random(seed))
    lines = markdown.split("\n")
    for size, overlap in TOKEN_SIZES:
        chunks = token_chunks(markdown, size, overlap)
        assert all(fits(chunk, size) for chunk in chunks), (size, overlap)
        assert all(chunk.text and chunk.text == chunk.text.strip() for chunk in chunks)
        cores = token_chunks(markdown, size, 0)
        assert squeeze([chunk.text for chunk in cores]) == squeeze(body)
        if overlap == 0:
            continue
        for chunk, core in zip(chunks, cores, strict=False):  # overlap shrinks the cores: compare the starts
            assert core.text.split()[0] in lines[core.line_start - 1]
            assert chunk.line_start >= 1 and chunk.text.split()[0] in markdown


@pytest.mark.parametrize("markdown", REAL_TEXTS)
def test_token_chunks_of_real_documents(markdown: str) -> None:
    for size, overlap in TOKEN_SIZES:
        chunks = token_chunks(markdown, size, overlap)
        assert chunks and all(fits(chunk, size) for chunk in chunks)


def test_token_chunks_end_at_sentences_and_fill_the_window() -> None:
    paragraph = PROSE.replace("\n\n", " ")  # one long paragraph: chunks are cut between its sentences
    chunks = token_chunks(paragraph, 254, 0)
    assert len(chunks) > 3
    assert all(chunk.text.endswith("ends here.") for chunk in chunks)
    sizes = [pieces(contextual_text(NAME, chunk)) for chunk in chunks]
    assert all(size > 254 - 20 for size in sizes[:-1])  # greedy: a sentence (~16 pieces) more would not fit
    character_chunks = chunk_document(SHA, paragraph, chunk_size=512, chunk_overlap=0)
    assert len(chunks) < len(character_chunks)  # 512 characters are ~110 pieces: the window is filled better


def test_token_chunks_respect_headings_and_overlap_in_pieces() -> None:
    chunks = token_chunks(README + "\n## Details\n\n" + PROSE, 64, 16)
    assert {chunk.heading_path for chunk in chunks} >= {"Project > Install > Linux", "Project > Details"}
    usage = [chunk for chunk in chunks if chunk.heading_path == "Project > Details"]
    for previous, chunk in zip(usage, usage[1:]):
        shared = chunk.text[:40].split()[0]
        assert shared in previous.text  # starts with the tail of the previous chunk
    assert all(fits(chunk, 64) for chunk in chunks)


def test_a_long_context_line_leaves_the_chunk_half_the_budget() -> None:
    long_name = "very/" * 60 + "deep.md"
    chunks = chunk_document(SHA, PROSE, chunker="tokens", chunk_size=64, chunk_overlap=0, tokenizer=TOKENIZER,
                            document_name=long_name)
    assert chunks and all(pieces(chunk.text) <= 32 for chunk in chunks)


def test_tokens_chunker_needs_the_tokenizer() -> None:
    with pytest.raises(ValueError, match="tokenizer"):
        chunk_document(SHA, "text", chunker="tokens", chunk_size=64, chunk_overlap=0)


def test_token_chunk_size_is_capped_by_the_model_window(tmp_path) -> None:
    tokenizer, size = chunk_budget(Settings(data_dir=tmp_path, chunker="tokens", chunk_size=1000))
    assert tokenizer is not None and size == 256 - 2  # all-MiniLM-L6-v2 reads 256 pieces with [CLS] and [SEP]
    assert chunk_budget(Settings(data_dir=tmp_path, chunker="recursive", chunk_size=1000)) == (None, 1000)


def test_token_chunks_of_multi_piece_characters_terminate() -> None:
    korean = "한국어 문서는 음절마다 여러 조각입니다. " * 30  # a Hangul syllable is 2-3 word pieces sharing one start
    for size, overlap in ((4, 0), (8, 4), (254, 48)):
        chunks = chunk_document(SHA, korean, chunker="tokens", chunk_size=size, chunk_overlap=overlap,
                                tokenizer=TOKENIZER)
        assert chunks and chunks[-1].text.endswith(".")
        if overlap == 0:
            assert squeeze([chunk.text for chunk in chunks]) == squeeze([korean])


def test_an_overlap_over_the_budget_is_capped() -> None:
    prose = PROSE.replace("\n\n", " ")
    chunks = chunk_document(SHA, prose, chunker="tokens", chunk_size=254, chunk_overlap=400, tokenizer=TOKENIZER,
                            document_name=NAME)
    assert all(pieces(contextual_text(NAME, chunk)) <= 254 for chunk in chunks)
    assert all(pieces(chunk.text) > 100 for chunk in chunks[:-1])  # not collapsed to a word or two


def test_token_ruler_tokenizes_in_pieces_as_the_whole_text(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pieces cut at line breaks (or spaces, or anywhere in a word longer than a piece) count the same word pieces
    as the whole text, at the same offsets, while only their start offsets are kept."""
    from pathlib import Path

    from rag_pipeline.ingest import chunkers

    tokenizer = TOKENIZER
    corpus = Path(__file__).resolve().parents[1] / "golden" / "corpus"
    text = "\n\n".join(path.read_text() for path in sorted(corpus.rglob("*.md")))
    text += "\n" + "a long line without breaks " * 40 + "\n" + "x" * 300 + "\nend"
    whole = [start for start, end in tokenizer.encode(text, add_special_tokens=False).offsets if end > start]
    monkeypatch.setattr(chunkers, "TOKENIZE_PIECE_CHARS", 200)
    ruler = chunkers.TokenRuler(text, tokenizer)
    assert ruler._starts.itemsize == 8 and len(text) > 20 * 200
    body = text.rindex("x" * 300)  # a word longer than a piece is cut, so only its pieces may differ
    assert [start for start in ruler._starts if not body <= start < body + 300] == \
        [start for start in whole if not body <= start < body + 300]
