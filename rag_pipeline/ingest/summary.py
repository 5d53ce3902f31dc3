"""The summary of one ingest (the CLI's and the API's JSON object), added up from the typed stage totals of the
runs that synced the changed shards."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rag_pipeline.index.sidecar import Sidecar
from rag_pipeline.ingest.discover import Manifest
from rag_pipeline.ingest.stage import StageTotals


@dataclass
class IngestSummary:
    """What an ingest did: per asset, its stage totals summed over the runs; the shards that were not in sync;
    the documents no run covered (their shards were in sync, so they are unchanged); every file under the roots
    that is not ingested, with why."""

    shards: list[str]
    stages: dict[str, StageTotals] = field(default_factory=dict)
    run_ids: list[str] = field(default_factory=list)
    outside_runs: int = 0
    failed: list[dict[str, str]] = field(default_factory=list)
    seconds: float = 0.0

    def add_run(self, run_id: str, stages: Mapping[str, StageTotals]) -> None:
        """Add one run's stage totals (asset name -> totals of that asset's stage)."""
        for asset, totals in stages.items():
            self.stages[asset] = self.stages[asset] + totals if asset in self.stages else totals
        self.run_ids.append(run_id)

    def record_failures(self, manifest: Manifest, sidecar: Sidecar) -> None:
        """Every refused file, and every current document whose conversion failed."""
        current = set(manifest.documents())
        self.failed = [{"path": error.path, "error": error.reason} for error in manifest.errors]
        self.failed += [{"path": row["paths"][0], "error": row["error"]}
                        for sha, row in sorted(sidecar.documents().items())
                        if row["status"] == "failed" and sha in current]

    def to_json(self) -> dict[str, Any]:
        """The contract: added, unchanged, moved, retagged, purged, chunks, vectors and points, embed seconds,
        seconds per stage, shards, run ids, failures and the wall time."""
        by_stage = {totals.stage: totals for totals in self.stages.values()}
        raw, chunks = by_stage.get("raw"), by_stage.get("chunks")
        embeddings, index = by_stage.get("embeddings"), by_stage.get("vector_index")
        return {
            "added": raw.added if raw else 0, "unchanged": (raw.unchanged if raw else 0) + self.outside_runs,
            "moved": raw.moved if raw else 0, "retagged": raw.retagged if raw else 0,
            "purged": raw.purged if raw else 0, "chunks": chunks.chunks if chunks else 0,
            "vectors_computed": embeddings.figures.vectors_computed if embeddings else 0,
            "vectors_cached": embeddings.figures.vectors_cached if embeddings else 0,
            "embed_seconds": round(embeddings.figures.embed_seconds, 3) if embeddings else 0.0,
            "points_upserted": index.figures.points_upserted if index else 0,
            "points_deleted": index.figures.points_deleted if index else 0,
            "shards": self.shards, "run_ids": self.run_ids,
            "stage_seconds": {asset: round(totals.seconds, 3) for asset, totals in self.stages.items()},
            "failed": self.failed, "seconds": self.seconds,
        }
