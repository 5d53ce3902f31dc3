"""The summary of one ingest (the CLI's and the API's JSON object): the stage totals of the runs that synced the
changed shards, and what those runs did to each document (the sidecar's run_documents), so the counts are the
documents this ingest brought in, rebuilt, relabelled and purged, also when it finishes what a killed run left."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rag_pipeline.ingest.discover import Manifest
from rag_pipeline.ingest.stage import StageTotals
from rag_pipeline.sidecar import Sidecar

INDEX_STAGE, CATALOGUE_STAGE, RAW_STAGE = "vector_index", "metadata_sidecar", "raw_documents"
PURGED_PATHS_SHOWN = 20  # the purged documents named by path (the count is always given)


@dataclass
class IngestSummary:
    """What an ingest did: per asset, its stage totals summed over the runs; per action, the documents it applied
    to; the shards that were not in sync; every file of the synced sources that is not ingested, with why; where
    the index generations stand."""

    shards: list[str]
    sources: list[str] = field(default_factory=list)
    stages: dict[str, StageTotals] = field(default_factory=dict)
    run_ids: list[str] = field(default_factory=list)
    documents: set[str] = field(default_factory=set)  # the corpus after the ingest (SHAs)
    actions: dict[tuple[str, str], set[str]] = field(default_factory=dict)  # (asset, action) -> SHAs
    failed: list[dict[str, str]] = field(default_factory=list)
    failed_shas: set[str] = field(default_factory=set)
    generation: dict[str, Any] | None = None
    seconds: float = 0.0
    paths_before: dict[str, str] = field(default_factory=dict)  # SHA -> first path, before the ingest (to name purges)

    def add_run(self, run_id: str, stages: Mapping[str, StageTotals]) -> None:
        """Add one run's stage totals (asset name -> totals of that asset's stage)."""
        for asset, totals in stages.items():
            self.stages[asset] = self.stages[asset] + totals if asset in self.stages else totals
        self.run_ids.append(run_id)

    def record_documents(self, manifest: Manifest, sidecar: Sidecar) -> None:
        """The corpus, what the runs did to each document, every refused file and every current document whose
        conversion failed."""
        self.documents = set(manifest.documents())
        with sidecar.kept():
            self.actions = sidecar.run_actions(self.run_ids) if self.run_ids else {}
            rows = sidecar.documents()
        self.failed = [{"path": error.path, "error": error.reason} for error in manifest.errors]
        self.failed_shas = {sha for sha, row in rows.items() if row["status"] == "failed" and sha in self.documents}
        self.failed += [{"path": rows[sha]["paths"][0], "error": rows[sha]["error"]} for sha in sorted(self.failed_shas)]

    def _done(self, action: str, *assets: str) -> set[str]:
        """The documents any of these assets (all when none is given) applied `action` to."""
        return {sha for (asset, name), shas in self.actions.items() if name == action and (not assets or asset in assets)
                for sha in shas}

    def to_json(self) -> dict[str, Any]:
        """The contract: added, unchanged, moved, retagged, purged, chunks, vectors and points, embed seconds,
        seconds per stage, shards, run ids, failures and the wall time; also reindexed (documents whose points
        were rebuilt: new chunk settings or model, or a document a killed run left half-written), the synced
        sources, the generation state and purged_paths (the first PURGED_PATHS_SHOWN purged documents' paths)."""
        by_stage = {totals.stage: totals for totals in self.stages.values()}
        raw, chunks = by_stage.get("raw"), by_stage.get("chunks")
        embeddings, index = by_stage.get("embeddings"), by_stage.get("vector_index")
        added = self._done("completed", CATALOGUE_STAGE)
        reindexed = self._done("added", INDEX_STAGE) - added
        moved = self._done("moved", RAW_STAGE, INDEX_STAGE) - added
        retagged = self._done("retagged", RAW_STAGE, INDEX_STAGE) - added
        purged = self._done("purged") - self.documents
        changed = added | reindexed | moved | retagged | self.failed_shas
        return {
            "added": len(added), "unchanged": len(self.documents - changed), "moved": len(moved),
            "retagged": len(retagged), "purged": len(purged), "reindexed": len(reindexed),
            "chunks": chunks.chunks if chunks else 0,
            "vectors_computed": embeddings.figures.vectors_computed if embeddings else 0,
            "vectors_cached": embeddings.figures.vectors_cached if embeddings else 0,
            "embed_seconds": round(embeddings.figures.embed_seconds, 3) if embeddings else 0.0,
            "points_upserted": index.figures.points_upserted if index else 0,
            "points_deleted": (index.figures.points_deleted if index else 0) + (raw.figures.points_deleted if raw else 0),
            "shards": self.shards, "sources": self.sources, "run_ids": self.run_ids,
            "stage_seconds": {asset: round(totals.seconds, 3) for asset, totals in self.stages.items()},
            "generation": self.generation, "failed": self.failed, "seconds": self.seconds,
            "purged_paths": sorted(self.paths_before.get(sha, sha) for sha in purged)[:PURGED_PATHS_SHOWN],
        }
