"""Starting the shard workers' forkserver early, without importing Dagster: the CLI calls this before its own
imports, so that the forkserver's imports (Dagster and the pipeline, ~1.5 s of a core) run on the other core while
this process imports the same modules, instead of after them.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

from rag_pipeline.ingest.discover import files_since_scan
from rag_pipeline.ingest.worker_pool import start_forkserver, started_forkserver
from rag_pipeline.settings import Settings

# Imported once by the forkserver the workers fork from (unless one already runs), not by every worker.
PRELOAD = ["__main__", "rag_pipeline.defs.shard_workers"]
EARLY_LOOK_FILES = 10_000  # the most files start_shard_workers_early looks at (a no-change look walks them all)


def start_shard_workers_forkserver() -> None:
    """Start the forkserver shard workers fork from now: its imports then overlap this process's work instead of
    delaying the workers."""
    start_forkserver(PRELOAD)


def start_shard_workers_early(settings: Settings, roots: Sequence[str | Path] | None) -> bool:
    """With RAG_INGEST_WORKERS > 1, start the shard workers' forkserver when the given folders hold two or more files
    that are new or changed since the last scan (a look at the first EARLY_LOOK_FILES files that hashes nothing);
    whether it started. One such file is one shard's work, which no worker runs (and its conversions want docling's
    forkserver). A wrong guess costs an idle forkserver, or conversion workers that import docling themselves.
    Nothing to do (no look) once this process started its forkserver: the CLI does this before the ingest does."""
    if settings.ingest_workers < 2 or not roots or started_forkserver() is not None:
        return False
    looked = itertools.islice(files_since_scan(settings, roots), EARLY_LOOK_FILES)
    changed = (path for path, _, sha in looked if sha is None)
    if len(list(itertools.islice(changed, 2))) < 2:
        return False
    start_shard_workers_forkserver()
    return True
