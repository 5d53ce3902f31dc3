"""Ending the `rag-pipeline` process without the interpreter's teardown.

Once a command has returned, Python still tears down every module it imported (Dagster, docling, torch, ONNX
Runtime, DuckDB): a garbage collection over the whole heap and the freeing of every object. That is ~0.3 s after a
search and ~1 s after the sample corpus's ingest on 2 cores, while the user waits for the prompt and nothing
is left to do. Nothing is lost by skipping it: every store the commands open is closed by a `with` block before
the command returns.

`QuickExit()` registers an exit handler as the first one of the command, so it runs last: Python joins the
non-daemon threads before it runs any exit handler, and runs them newest first, so every handler a library
registered during the command (temporary directories, multiprocessing's children, file locks, Dagster's) has run
by then. It closes logging's handlers, flushes the standard streams and ends the process with the command's exit
code (120, as Python's own exit, when the output could not be written). Without a code (the command raised),
Python exits as usual. Handlers registered before the command (at import time) would not run: the CLI's imports
must not load multiprocessing or make a weakref.finalize (test_quick_exit checks both).
"""

from __future__ import annotations

import atexit
import logging
import os
import sys


class QuickExit:
    """Arm before the command runs; set `code` when it has returned."""

    def __init__(self) -> None:
        self.code: int | None = None
        atexit.register(self._end)

    def _end(self) -> None:
        if self.code is None:
            return
        logging.shutdown()  # registered before this handler (at logging's import), so it would not run after it
        code = self.code
        try:
            sys.stdout.flush()
        except (OSError, ValueError) as error:  # a full disk, a closed pipe: the output is lost, so say so
            print(f"rag-pipeline: could not write the output: {error}", file=sys.stderr)
            code = code or 120  # what Python exits with when its own final flush fails
        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass  # nowhere left to report it
        os._exit(code)
