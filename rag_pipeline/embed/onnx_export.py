"""Export a local sentence-transformers model to ONNX (fp32, and int8 by dynamic quantisation), offline, cached.

The graph is the model's transformer plus its pooling, exported by `torch.onnx.export` from the packaged weights
(optimum's exporter, which sentence-transformers' own ONNX backend uses, does not work with transformers 5). The
int8 variant quantises the MatMul weights per output channel: ONNX Runtime's default settings (per tensor, every
op) lose too much (cosine 0.92-0.94 to fp32 on SciFact abstracts); this keeps it at 0.995.

A model is exported once per (model files, runtime, library versions) into `cache_dir`, under a lock and through
an atomic rename, so concurrent processes neither export twice nor read a half-written file.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from importlib.metadata import version
from pathlib import Path
from typing import Literal

from rag_pipeline.atomic_file import replace_file
from rag_pipeline.file_lock import locked

OnnxRuntimeKind = Literal["onnx", "onnx-int8"]

EXPORT_VERSION = "1"  # bump when the exported graph changes
_POOLINGS = {"pooling_mode_mean_tokens": "mean", "pooling_mode_cls_token": "cls"}


class ExportError(Exception):
    """The model cannot be exported to ONNX (an unsupported module, or the exporter failed)."""


def model_fingerprint(model_dir: Path) -> str:
    """A digest of the files that define the model's output (weights, configs, tokenizer) and of the versions of
    the libraries that export and quantise it."""
    versions = "|".join(version(package) for package in ("torch", "transformers", "onnxruntime", "onnx"))
    digest = hashlib.sha256(f"{EXPORT_VERSION}|{versions}".encode())
    for path in sorted(model_dir.rglob("*")):
        if path.is_file() and path.suffix in {".json", ".safetensors", ".bin", ".txt"}:
            stat = path.stat()
            digest.update(f"{path.relative_to(model_dir)}|{stat.st_size}".encode())
            if path.suffix != ".safetensors" and path.suffix != ".bin":
                digest.update(path.read_bytes())
            else:
                with path.open("rb") as handle:  # head and tail: the weights are large and immutable in a package
                    digest.update(handle.read(1 << 20))
                    handle.seek(max(0, stat.st_size - (1 << 20)))
                    digest.update(handle.read())
    return digest.hexdigest()[:16]


def pooling_mode(model_dir: Path) -> str:
    """"mean" or "cls": the model's Pooling module; ExportError for any other module layout."""
    modules = json.loads((model_dir / "modules.json").read_text())
    kinds = [module["type"].rsplit(".", 1)[-1] for module in modules]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        raise ExportError(f"{model_dir}: modules {kinds} are not Transformer + Pooling (+ Normalize); "
                          "use RAG_EMBEDDING_RUNTIME=torch")
    config = json.loads((model_dir / modules[1]["path"] / "config.json").read_text())
    modes = [mode for key, mode in _POOLINGS.items() if config.get(key)]
    if len(modes) != 1 or any(value for key, value in config.items() if key.startswith("pooling_mode_")
                              and key not in _POOLINGS):
        raise ExportError(f"{model_dir}: only mean or CLS pooling can be exported; use RAG_EMBEDDING_RUNTIME=torch")
    return modes[0]


def exported_model(model_dir: Path, cache_dir: Path, runtime: OnnxRuntimeKind) -> Path:
    """The ONNX file of `model_dir` for `runtime`, exported (and quantised) into cache_dir on first use."""
    target = cache_dir / f"{model_dir.name}-{model_fingerprint(model_dir)}" / f"{runtime}.onnx"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with locked(target.parent / ".lock"):
        if target.is_file():  # another process finished it while we waited
            return target
        fp32 = target.with_name("onnx.onnx")
        if not fp32.is_file():
            replace_file(fp32, lambda path: _export(model_dir, path))
        if runtime == "onnx-int8":
            replace_file(target, lambda path: _quantise(fp32, path))
    return target


def _export(model_dir: Path, path: Path) -> None:
    """Trace the transformer with its pooling into an ONNX graph with dynamic batch and sequence axes."""
    import torch
    from transformers import AutoModel

    mode = pooling_mode(model_dir)
    model = AutoModel.from_pretrained(str(model_dir), local_files_only=True).eval()

    class Pooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, token_type_ids):  # noqa: ANN001, ANN201
            tokens = self.model(input_ids=input_ids, attention_mask=attention_mask,
                                token_type_ids=token_type_ids).last_hidden_state
            if mode == "cls":
                return tokens[:, 0]
            mask = attention_mask.unsqueeze(-1).to(tokens.dtype)
            return (tokens * mask).sum(1) / mask.sum(1).clamp(min=1e-9)

    sample = torch.ones((2, 8), dtype=torch.int64)
    dynamic = {name: {0: "batch", 1: "sequence"} for name in ("input_ids", "attention_mask", "token_type_ids")}
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the tracer's notes on Python control flow fixed at trace time
            torch.onnx.export(Pooled(), (sample, sample, torch.zeros_like(sample)), str(path),
                              input_names=list(dynamic), output_names=["sentence_embedding"],
                              dynamic_axes={**dynamic, "sentence_embedding": {0: "batch"}}, opset_version=17,
                              dynamo=False)
    except Exception as error:  # the exporter raises many types; all mean the same to the caller
        raise ExportError(f"{model_dir}: ONNX export failed: {type(error).__name__}: {error}") from error


def _quantise(source: Path, path: Path) -> None:
    """Dynamic int8 quantisation of the MatMul weights, per channel (activations quantised at run time)."""
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # quantize_dynamic warns on the root logger to "pre-process" the model first
    try:
        quantize_dynamic(str(source), str(path), per_channel=True, op_types_to_quantize=["MatMul"],
                         weight_type=QuantType.QInt8)
    finally:
        root.setLevel(level)
