"""The conversion workers import docling without transformers or torch (rag_pipeline/ingest/docling_import.py) and
convert as docling does with them, and a later import of either in the same process still loads it. Each test runs a
fresh interpreter: what a module import leaves in sys.modules (and which forkserver the workers fork from) is the
behaviour under test."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_python(script: str) -> list[str]:
    """The lines a fresh interpreter prints running `script` from the repository root."""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180, cwd=REPO,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.split("\n")[:-1]


def loaded_modules_handler() -> Callable[[Sequence[str]], list[bool]]:
    """A worker handler (importable by name, so picklable): which of the given modules the worker has loaded."""
    return lambda names: [name in sys.modules for name in names]


def test_docling_is_imported_without_transformers_or_torch_which_still_load_afterwards() -> None:
    lines = run_python("""
import sys
import rag_pipeline.ingest.docling_import
print("docling.document_converter" in sys.modules, "transformers" in sys.modules, "torch" in sys.modules)
from transformers import StoppingCriteria
print(StoppingCriteria.__module__)
import torch
print(torch.ones(2).sum().item())
from docling.pipeline.asr_transformers import TransformersAsrDecoder
print(TransformersAsrDecoder.__module__)
from docling.pipeline import asr_transcriber
try:
    asr_transcriber.TransformersAsrDecoder()
except RuntimeError as error:
    print(error)
""")
    assert lines == ["True False False", "transformers.generation.stopping_criteria", "2.0",
                     "docling.pipeline.asr_transformers",
                     "docling's speech decoder is not loaded in the conversion workers: audio is not converted"]


def test_the_conversion_workers_have_docling_loaded_and_not_transformers_or_torch() -> None:
    lines = run_python("""
from rag_pipeline.ingest.convert import PRELOAD, start_conversion_workers
from rag_pipeline.ingest.worker_pool import WorkerPool
from rag_pipeline_tests.test_docling_import import loaded_modules_handler
start_conversion_workers()
with WorkerPool(1, loaded_modules_handler, 60, preload=PRELOAD) as pool:
    print(list(pool.run([["docling.document_converter", "transformers", "torch"]])))
""")
    assert lines == ["[(0, [True, False, False])]"]


def test_workers_without_transformers_or_torch_convert_every_format_as_docling_does_with_them() -> None:
    from .conftest import DOCUMENTS

    paths = sorted(str(path) for path in DOCUMENTS.iterdir() if path.suffix in (".pdf", ".docx", ".html"))
    paths.append(str(REPO / "golden" / "corpus" / "slides" / "quarterly-review.pptx"))
    lines = run_python(f"""
from pathlib import Path
from rag_pipeline.ingest.convert import conversions, convert_outcome, start_conversion_workers
from rag_pipeline.ingest.converters import DocumentConverter
from rag_pipeline.settings import Settings
start_conversion_workers()
jobs = [(Path(path), Path(path).suffix[1:]) for path in {paths!r}]
pooled = dict(conversions(Settings(convert_workers=2), DocumentConverter(), jobs))
in_process = DocumentConverter()  # docling imported here as usual, transformers and torch included
for index, job in enumerate(jobs):
    converted = pooled[index].converted
    print(job[0].name, converted is not None and converted == convert_outcome(in_process, *job).converted)
""")
    assert len(paths) >= 10 and {Path(path).suffix for path in paths} == {".pdf", ".docx", ".html", ".pptx"}
    assert lines == [f"{Path(path).name} True" for path in paths]
