"""Importing this module imports docling's converter without transformers or torch, for the conversion workers'
forkserver.

`docling.document_converter` imports transformers (~0.6 s of a core, measured on 2 cores) only for one type
annotation of its VLM options, and falls back to a placeholder when transformers is absent (docling's slim
installs). It imports torch (~1 s of a core) only for speech: the speech-recognition decoder
(`docling.pipeline.asr_transformers`) imports it at module level, and the speech model specs try it once to look for
an Apple GPU. The decoder's module stands in here as a placeholder, since no format converted here is audio (the
placeholder stays bound in docling's transcriber, and says so if it is ever called). The conversion pipelines used
here (DOCX, HTML, PPTX, the native PDF pipeline) never touch either. Both are hidden for this one import only: a
later import (the PDF layout-model pipeline's, which then pays torch's import in each worker) loads them, and the
speech decoder's module, as usual. What a module checks once at its import stays as it found it: docling's speech
model specs note no Apple GPU (MPS), which only audio would use. Import this only in a process that runs no other
thread (a forkserver): another thread's import of transformers or torch would fail meanwhile.
"""

from __future__ import annotations

import sys
import types

SPEECH_DECODER = "docling.pipeline.asr_transformers"  # imports torch at module level; only audio conversion uses it


class _SpeechDecoderPlaceholder:
    """Stands in for docling's TransformersAsrDecoder, which only audio conversion would make."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("docling's speech decoder is not loaded in the conversion workers: audio is not converted")


def _placeholder_speech_decoder() -> types.ModuleType:
    """The speech decoder's module as its importers see it: its one class, as a placeholder."""
    module = types.ModuleType(SPEECH_DECODER, "placeholder: audio is not converted in the conversion workers")
    module.TransformersAsrDecoder = _SpeechDecoderPlaceholder  # type: ignore[attr-defined]
    return module


_hidden = {name: None for name in ("transformers", "torch") if name not in sys.modules}
if SPEECH_DECODER not in sys.modules and "torch" in _hidden:
    _hidden[SPEECH_DECODER] = _placeholder_speech_decoder()
sys.modules.update(_hidden)  # type: ignore[arg-type]  # None is the import system's "not installed"
try:
    import docling.document_converter  # noqa: F401  (the import is the point)
finally:
    for _name, _stand_in in _hidden.items():
        if sys.modules.get(_name, False) is _stand_in:
            del sys.modules[_name]
