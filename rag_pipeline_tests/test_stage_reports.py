"""The typed stage reports: their totals survive the trip through a Dagster run's metadata (JSON) and add up
over runs into the ingest summary."""

from __future__ import annotations

import json

from rag_pipeline.ingest.stage import StageFigures, StageReport, StageTotals
from rag_pipeline.ingest.summary import IngestSummary

ASSETS = {"raw": "raw_documents", "chunks": "chunks", "embeddings": "embeddings", "vector_index": "vector_index"}


def run_totals(added: list[str], moved: list[str], retagged: list[str], computed: int) -> dict[str, StageTotals]:
    reports = {
        "raw": StageReport("raw", ["0"], added=added, skipped=3, moved=moved, retagged=retagged, purged=["p"]),
        "chunks": StageReport("chunks", ["0"], added=added, chunks=10 * len(added), seconds=0.5),
        "embeddings": StageReport("embeddings", ["0"], figures=StageFigures(vectors_computed=computed,
                                                                             vectors_cached=1, embed_seconds=0.25)),
        "vector_index": StageReport("vector_index", ["0"], figures=StageFigures(points_upserted=computed + 1)),
    }
    return {ASSETS[stage]: StageTotals.from_json(json.loads(json.dumps(report.totals().to_json())))
            for stage, report in reports.items()}


def test_totals_round_trip_and_unchanged() -> None:
    totals = run_totals(["a"], moved=["m", "both"], retagged=["t", "both"], computed=4)["raw_documents"]
    # skipped 3, of which three distinct documents were moved or re-tagged: none is unchanged
    assert (totals.added, totals.skipped, totals.moved, totals.retagged, totals.unchanged) == (1, 3, 2, 2, 0)


def test_stage_figures_are_the_stage_own() -> None:
    report = StageReport("embeddings", ["0"], figures=StageFigures(vectors_computed=5, points_upserted=9))
    assert report.stage_figures() == {"vectors_computed": 5, "vectors_cached": 0, "embed_seconds": 0.0}
    assert StageReport("chunks", ["0"]).stage_figures() == {}


def test_summary_adds_runs_up() -> None:
    summary = IngestSummary(shards=["0", "f"])
    summary.add_run("run-1", run_totals(["a", "b"], moved=[], retagged=[], computed=20))
    summary.add_run("run-2", run_totals(["c"], moved=["m"], retagged=[], computed=10))
    output = summary.to_json()
    assert (output["chunks"], output["vectors_computed"], output["vectors_cached"]) == (30, 30, 2)
    assert (output["points_upserted"], output["embed_seconds"], output["run_ids"]) == (32, 0.5, ["run-1", "run-2"])
    assert output["stage_seconds"]["chunks"] == 1.0 and output["shards"] == ["0", "f"]


def test_summary_counts_documents_by_what_the_runs_did() -> None:
    """Counts come from each document's actions, not from one stage: a run that finishes what a killed run left
    counts the documents it completed, and a purge finished by a later stage counts once."""
    summary = IngestSummary(shards=["0"])
    summary.documents = {"new1", "new2", "rebuilt", "moved", "same1", "same2", "broken"}
    summary.failed_shas = {"broken"}
    summary.actions = {
        ("raw_documents", "added"): {"broken"},  # the killed run snapshotted new1 and new2 already
        ("markdown_documents", "added"): {"new1", "new2"},
        ("markdown_documents", "failed"): {"broken"},
        ("vector_index", "added"): {"new1", "new2", "rebuilt"},  # rebuilt: a half-written document rewritten
        ("metadata_sidecar", "completed"): {"new1", "new2"},
        ("vector_index", "moved"): {"moved"},
        ("raw_documents", "purged"): {"gone1"},
        ("vector_index", "purged"): {"gone1", "gone2"},  # gone2: its raw purge happened in the killed run
    }
    output = summary.to_json()
    assert (output["added"], output["reindexed"], output["moved"], output["retagged"]) == (2, 1, 1, 0)
    assert (output["purged"], output["unchanged"]) == (2, 2)


def test_summary_without_runs() -> None:
    summary = IngestSummary(shards=[], documents={"a", "b"})
    output = summary.to_json()
    assert (output["added"], output["unchanged"], output["chunks"], output["run_ids"]) == (0, 2, 0, [])
