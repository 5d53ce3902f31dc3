"""What every ingest stage shares: its typed report, the artifact stores, and reconciliation of a stage's
artifacts with its input.

A stage's input is the set of document SHAs its upstream stage holds for a shard. New SHAs are processed,
SHAs the stage holds but its input no longer has are purged, the rest are skipped. Every stage is therefore
idempotent and converges after a crash: re-running it does exactly the work that is still missing.
Raw documents are the root of the chain: their input is the source manifest.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any

from rag_pipeline.ingest.artifacts import ArtifactStore
from rag_pipeline.ingest.discover import SourceFile, document_paths, document_sources, document_tags
from rag_pipeline.ingest.sha_range import ALL_DOCUMENTS, ShaRange
from rag_pipeline.settings import Settings


@dataclass
class StageFigures:
    """Figures only some stages have: raw (points of vanished documents deleted), embeddings (vectors computed or
    cached, embedding seconds) and vector_index (points upserted and deleted, points in the collection, optimize
    seconds)."""

    vectors_computed: int = 0
    vectors_cached: int = 0
    embed_seconds: float = 0.0
    points_upserted: int = 0
    points_deleted: int = 0
    collection_points: int = 0
    optimize_seconds: float = 0.0


STAGE_FIGURES = {
    "raw": ("points_deleted",),
    "embeddings": ("vectors_computed", "vectors_cached", "embed_seconds"),
    "vector_index": ("points_upserted", "points_deleted", "collection_points", "optimize_seconds"),
}


@dataclass
class StageReport:
    """What one stage did over its shards (SHAs added, purged, moved, re-tagged, failed with their error), or over
    the part of their documents in `documents` (a shard worker's run)."""

    stage: str
    shards: list[str]
    documents: ShaRange = ALL_DOCUMENTS
    added: list[str] = field(default_factory=list)
    skipped: int = 0
    purged: list[str] = field(default_factory=list)
    moved: list[str] = field(default_factory=list)  # paths or sources changed (moved, copied, a copy deleted)
    retagged: list[str] = field(default_factory=list)  # tags changed (the corpus rules or the paths did)
    failed: dict[str, str] = field(default_factory=dict)
    chunks: int = 0
    seconds: float = 0.0
    purged_paths: dict[str, str] = field(default_factory=dict)
    completed: list[str] = field(default_factory=list)  # documents whose ingest ended for the first time
    check_failures: list[str] = field(default_factory=list)
    figures: StageFigures = field(default_factory=StageFigures)

    def actions(self) -> dict[str, list[str]]:
        """What the stage did to each document (action -> SHAs), for the sidecar's run_documents."""
        return {"added": self.added, "purged": self.purged, "moved": self.moved, "retagged": self.retagged,
                "failed": list(self.failed), "completed": self.completed}

    def stage_figures(self) -> dict[str, float]:
        """This stage's own figures, by name (for the asset metadata)."""
        return {name: getattr(self.figures, name) for name in STAGE_FIGURES.get(self.stage, ())}

    def totals(self) -> StageTotals:
        """The numbers of this report, which the ingest summary adds up over stages and runs."""
        relabelled = set(self.moved) | set(self.retagged)
        return StageTotals(
            stage=self.stage, added=len(self.added), skipped=self.skipped, unchanged=self.skipped - len(relabelled),
            purged=len(self.purged), moved=len(self.moved), retagged=len(self.retagged), failed=len(self.failed),
            chunks=self.chunks, seconds=self.seconds, figures=self.figures,
        )


@dataclass(frozen=True)
class StageTotals:
    """The numbers of one StageReport: plain values, so a Dagster run can carry them as one JSON object
    (`to_json` out, `from_json` back: a renamed field fails loudly instead of counting zero)."""

    stage: str
    added: int
    skipped: int
    unchanged: int  # skipped and neither moved nor re-tagged
    purged: int
    moved: int
    retagged: int
    failed: int
    chunks: int
    seconds: float
    figures: StageFigures

    def __add__(self, other: StageTotals) -> StageTotals:
        """The totals of the same stage over two runs."""
        return add_fields(self, other, stage=self.stage, figures=add_fields(self.figures, other.figures))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> StageTotals:
        return cls(**{**value, "figures": StageFigures(**value["figures"])})


def add_fields(left: Any, right: Any, **given: Any) -> Any:
    """A dataclass of left's type whose fields are left's plus right's, except those `given`."""
    summed = {item.name: getattr(left, item.name) + getattr(right, item.name) for item in fields(left)
              if item.name not in given}
    return type(left)(**summed, **given)


UNREDACTED = ("raw", "markdown")  # stores holding text before redaction: private, dropped unless kept


def stores(settings: Settings) -> Mapping[str, ArtifactStore]:
    """Each stage's artifact store. Chunks and embeddings live under folders named after the settings that
    made them (chunking id, embedding model), so changing those settings rebuilds instead of mixing. The
    unredacted stores are private (owner only)."""
    return _stores(settings.artifacts_dir, settings.chunking_id, settings.embedding_model_id)


@functools.lru_cache(maxsize=32)
def _stores(artifacts_dir: Path, chunking_id: str, embedding_model_id: str) -> Mapping[str, ArtifactStore]:
    """The stores of `stores`, made once per folder layout: the per-document reads ask for them once per file."""
    folders = {
        "raw": "raw", "markdown": "markdown", "redacted": "redacted",
        "chunks": f"chunks/{chunking_id}",
        "embeddings": f"embeddings/{embedding_model_id.replace('/', '__')}/{chunking_id}",
    }
    return MappingProxyType({stage: ArtifactStore(artifacts_dir, folder, private=stage in UNREDACTED)
                             for stage, folder in folders.items()})


def describe(row: dict[str, Any] | None, sha: str) -> str:
    """The first path of a document, for messages; the SHA when the path is unknown."""
    return row["paths"][0] if row and row.get("paths") else sha


def stored_tags(row: dict[str, Any]) -> list[str]:
    """A sidecar row's tags (NULL in rows written before tags existed)."""
    return sorted(row.get("tags") or [])


def stored_sources(row: dict[str, Any]) -> list[str]:
    """A sidecar row's sources (NULL in rows written before sources existed)."""
    return sorted(row.get("sources") or [])


def label_changes(row: dict[str, Any], files: list[SourceFile]) -> tuple[bool, bool]:
    """(paths or sources changed, tags changed) of a stored document against its files in the manifest."""
    moved = sorted(row["paths"]) != document_paths(files) or stored_sources(row) != document_sources(files)
    return moved, stored_tags(row) != document_tags(files)


def reconcile(
    report: StageReport,
    inputs: Callable[[str], set[str]],
    outputs: Callable[[str], set[str]],
    output_store: ArtifactStore,
) -> list[tuple[str, str]]:
    """Purge outputs whose input vanished (any file of theirs, a half-written one too); return the (shard, sha)
    pairs still to process. `outputs` gives the documents whose output is complete: a document a killed run left
    half-written is processed again. Only the report's `documents` are looked at: another run has the others."""
    todo = []
    within = report.documents.select
    for shard in report.shards:
        wanted, held = within(inputs(shard)), within(outputs(shard))
        gone = sorted(within(output_store.shas(shard)) - wanted)
        output_store.delete_documents(shard, gone)
        report.purged += gone
        todo.extend((shard, sha) for sha in sorted(wanted - held))
        report.skipped += len(wanted & held)
    return todo

