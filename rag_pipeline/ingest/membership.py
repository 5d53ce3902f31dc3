"""Which files each source holds, recorded in the sidecar: the desired state every ingest stage converges to.

Syncing a source re-discovers that source only and replaces its recorded files; the other sources keep the files
their last sync recorded. The corpus is the union, so a document leaves the index only when no source holds it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rag_pipeline.errors import Conflict, NotFound
from rag_pipeline.ingest.discover import Manifest, SourceError, SourceFile
from rag_pipeline.ingest.sources import DEFAULT_SOURCE, SourceSpec, configured_sources
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar


def file_row(file: SourceFile) -> dict:
    """A discovered file as a sidecar source_files row."""
    return {"source": file.source, "path": file.path, "root": file.root, "sha": file.sha256, "bytes": file.size,
            "doc_type": file.doc_type, "tags": list(file.tags)}


def record_discovery(sidecar: Sidecar, specs: Sequence[SourceSpec], manifests: Mapping[str, Manifest]) -> None:
    """Record each discovered source's files, refusals and roots."""
    for spec in specs:
        manifest = manifests[spec.name]
        sidecar.record_source(spec.name, spec.kind, [str(root) for root in spec.roots],
                              [file_row(file) for file in manifest.files],
                              [(error.path, error.reason) for error in manifest.errors], spec.body_facts)


def stored_manifest(sidecar: Sidecar, exclude: Sequence[str] = ()) -> Manifest:
    """The files and refusals every source's last sync recorded (except the `exclude` sources')."""
    with sidecar.kept():
        file_rows, error_rows = sidecar.source_files(exclude), sidecar.source_errors(exclude)
    files = [SourceFile(path=row["path"], root=row["root"] or "", sha256=row["sha"], size=row["bytes"] or 0,
                        doc_type=row["doc_type"], tags=tuple(row["tags"] or ()), source=row["source"])
             for row in file_rows]
    errors = [SourceError(row["path"], named(row["reason"], row["source"])) for row in error_rows]
    return Manifest(files=files, errors=errors)


def current_manifest(sidecar: Sidecar, discovered: Mapping[str, Manifest]) -> Manifest:
    """The corpus: the sources just discovered, plus what the others recorded at their last sync."""
    others = stored_manifest(sidecar, exclude=list(discovered))
    manifest = Manifest(files=list(others.files), errors=list(others.errors))
    for name, found in discovered.items():
        manifest.files += found.files
        manifest.errors += [SourceError(error.path, named(error.reason, name)) for error in found.errors]
        manifest.excluded += found.excluded
    return manifest


def named(reason: str, source: str) -> str:
    """A refusal's reason, naming the source unless it is `default`."""
    return reason if source == DEFAULT_SOURCE else f"{reason} (source {source})"


def forget_source(settings: Settings, sidecar: Sidecar, name: str) -> None:
    """Drop what a source that is no longer configured recorded (the next sync purges the documents no other
    source holds). A configured source is refused: the next sync of the configuration would bring it back."""
    if name in configured_sources(settings):
        raise Conflict(f"source {name!r} is configured (RAG_SOURCES_FILE, or RAG_ROOTS for `default`): remove it "
                       "from the configuration first", code="source_configured")
    if name not in sidecar.sources():
        raise NotFound(f"unknown source {name!r}: no sync recorded it", code="unknown_source")
    sidecar.forget_source(name)
