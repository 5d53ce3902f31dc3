"""The pipeline resource: settings, stores and the document converter, shared by every asset and sensor."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import dagster as dg

from rag_pipeline.convert import DocumentConverter
from rag_pipeline.index.sidecar import Sidecar
from rag_pipeline.settings import Settings
from rag_pipeline.sources import HashCache, Manifest, discover


@functools.cache
def shared_converter(pdf_pipeline: str) -> DocumentConverter:
    """One converter per process: docling's pipelines are built once and reused across runs."""
    return DocumentConverter(pdf_pipeline=pdf_pipeline)


class RagResource(dg.ConfigurableResource):
    """Overrides of Settings for a run; unset fields come from settings.py and RAG_* env vars."""

    data_dir: str | None = None
    roots: list[str] | None = None
    show_progress: bool = False

    @property
    def settings(self) -> Settings:
        overrides = {"data_dir": self.data_dir, "roots": self.roots}
        return Settings(**{key: value for key, value in overrides.items() if value is not None})

    def sidecar(self) -> Sidecar:
        return Sidecar(self.settings.sidecar_path)

    def converter(self) -> DocumentConverter:
        return shared_converter(self.settings.pdf_pipeline)

    def manifest(self) -> Manifest:
        """Discover the roots, re-hashing only files whose size or mtime changed since the last scan."""
        settings = self.settings
        cache_path = settings.data_dir / "hash_cache.json"
        cache: HashCache = {}
        if cache_path.is_file():
            cache = {path: tuple(entry) for path, entry in json.loads(cache_path.read_text()).items()}
        manifest = discover(settings.roots, ignore=settings.ignore, extensions=settings.extensions,
                            max_file_bytes=settings.max_file_bytes, cache=cache)
        live = {str(Path(f.path).resolve()) for f in manifest.files}
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        cache_path.write_text(json.dumps({path: entry for path, entry in cache.items() if path in live}))
        return manifest
