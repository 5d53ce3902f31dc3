"""Importing this module imports docling's converter without transformers, for the conversion workers' forkserver.

`docling.document_converter` imports transformers (~0.6 s of a core, measured on 2 cores) only for one type
annotation of its VLM options, and falls back to a placeholder when transformers is absent (docling's slim
installs). The conversion pipelines used here (DOCX, HTML, PPTX, the native PDF pipeline) never touch it.
Transformers is hidden for this one import only: a later import (the PDF layout-model pipeline's) loads it as
usual. Import this only in a process that runs no other thread (a forkserver): another thread's import of
transformers would fail meanwhile.
"""

from __future__ import annotations

import sys

_hidden = "transformers" not in sys.modules
if _hidden:
    sys.modules["transformers"] = None  # type: ignore[assignment]  # the import system's "not installed"
try:
    import docling.document_converter  # noqa: F401  (the import is the point)
finally:
    if _hidden and sys.modules.get("transformers", False) is None:
        del sys.modules["transformers"]
