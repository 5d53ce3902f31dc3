"""Ranges of document SHAs: shard workers share the pending documents out in consecutive SHA ranges of near-equal
work, cut at a document, and a stage limited to a range neither processes, purges nor checks a document outside
it (the next worker's run has those, in the same shard)."""

from __future__ import annotations

import hashlib
import itertools
import random
from pathlib import Path

import pytest

from rag_pipeline.defs.assets import raw_documents
from rag_pipeline.defs.local_runs import dagster_instance, materialize_stages
from rag_pipeline.defs.partitions import SHA_RANGE_TAG, run_sha_range, shard_run_tags, worker_ranges
from rag_pipeline.defs.resources import RagResource
from rag_pipeline.defs.shard_workers import PER_DOCUMENT_STAGES
from rag_pipeline.ingest.artifacts import ArtifactStore
from rag_pipeline.ingest.convert import unconverted
from rag_pipeline.ingest.redact import drop_unredacted
from rag_pipeline.ingest.sha_range import ALL_DOCUMENTS, ShaRange, balanced_ranges
from rag_pipeline.ingest.stage import StageReport, reconcile, stores

from .test_index_sync import scifact_files


def sha(number: int) -> str:
    return hashlib.sha256(str(number).encode()).hexdigest()


def test_a_range_holds_the_shas_between_its_bounds_and_meets_the_shards_they_start() -> None:
    documents = ShaRange("3a", "c")
    assert "3a" + "0" * 62 in documents and "3b" + "0" * 62 in documents and "bf" + "f" * 62 in documents
    assert "39" + "f" * 62 not in documents and "c" + "0" * 63 not in documents
    assert all(sha(n) in ALL_DOCUMENTS for n in range(50)) and ALL_DOCUMENTS.whole and not documents.whole
    rng = random.Random(3)
    hexes = "0123456789abcdef"
    for _ in range(300):  # meets_shard against the SHAs of the shard, spelled out
        start = "".join(rng.choice(hexes) for _ in range(rng.randint(0, 3)))
        end = "".join(rng.choice(hexes) for _ in range(rng.randint(0, 3)))
        if end and start >= end:
            continue
        documents = ShaRange(start, end)
        for shard in [*hexes, *rng.sample([a + b for a in hexes for b in hexes], 8)]:  # 16 or 256 shards
            # a bound of at most 3 digits puts all SHAs sharing their first 3 digits on one side of it
            spelled = [(shard + "".join(rest))[:3] for rest in itertools.product(hexes, repeat=3 - len(shard))]
            meets = any(prefix.ljust(64, "0") in documents for prefix in spelled)
            assert documents.meets_shard(shard) == meets, (documents, shard)


def test_a_range_reads_back_from_its_text_and_a_bad_one_is_refused_by_name() -> None:
    for documents in (ShaRange("", "7a"), ShaRange("7a", ""), ShaRange(sha(1), sha(2)) if sha(1) < sha(2)
                      else ShaRange(sha(2), sha(1))):
        assert ShaRange.parse(documents.to_text()) == documents
        assert run_sha_range(shard_run_tags(["7"], documents)) == documents
    assert SHA_RANGE_TAG not in shard_run_tags(["7"]) and run_sha_range({}) == ALL_DOCUMENTS
    for text, why in [("7a", "want start..end"), ("7A..", "lower-case hex"), ("b..a", "is empty"),
                      ("a..a0", "is empty"), ("../etc", "lower-case hex"), ("a" * 65 + "..", "up to 64")]:
        with pytest.raises(ValueError, match=why):
            ShaRange.parse(text)
    with pytest.raises(ValueError, match=f"run tag {SHA_RANGE_TAG}: .*lower-case hex"):
        run_sha_range({SHA_RANGE_TAG: "zz.."})


def test_balanced_ranges_cover_every_sha_once_in_near_equal_shares() -> None:
    rng = random.Random(7)
    for _ in range(200):
        work = {sha(n): rng.choice([0, rng.randint(1, 5_000), rng.randint(1, 200_000)])
                for n in rng.sample(range(10_000), rng.randint(1, 60))}
        parts = rng.randint(1, 6)
        ranges = balanced_ranges(work, parts)
        assert 1 <= len(ranges) <= parts and ranges[0].start == "" and ranges[-1].end == ""
        assert all(left.end == right.start for left, right in zip(ranges, ranges[1:]))  # consecutive, no gap
        held = [[key for key in work if key in documents] for documents in ranges]
        assert sorted(key for part in held for key in part) == sorted(work) and all(held)
        total = sum(work.values())
        if total and len(ranges) == parts:
            largest = max(work.values())
            assert max(sum(work[key] for key in part) for part in held) <= total / parts + largest
    assert balanced_ranges({sha(1): 10, sha(2): 0}, 1) == [ALL_DOCUMENTS]
    assert balanced_ranges({sha(1): 0, sha(2): 0}, 2) == [ALL_DOCUMENTS]  # no work to share


def test_worker_ranges_cut_at_a_document_and_share_its_shard() -> None:
    work = {sha(n): 100 for n in range(40)}  # 40 documents of equal work: 20 each
    shards = sorted({key[0] for key in work})
    (first, first_range), (second, second_range) = worker_ranges(shards, 2, work)
    assert [sum(key in documents for key in work) for documents in (first_range, second_range)] == [20, 20]
    cut = second_range.start
    assert first_range.end == cut and cut in work and first[-1] == second[0] == cut[0]  # the cut's shard: both
    assert first + second[1:] == shards
    # no work known (say, only purges pending): whole shards, by count
    assert worker_ranges(shards, 2, {}) == [(shards[:len(shards) - len(shards) // 2], ALL_DOCUMENTS),
                                            (shards[len(shards) - len(shards) // 2:], ALL_DOCUMENTS)]


def test_a_stage_limited_to_a_range_leaves_the_rest_of_its_shard_alone(tmp_path: Path) -> None:
    shard = "a"
    low, middle, high = sorted("a" + sha(n)[1:] for n in range(3))
    inputs, outputs = ArtifactStore(tmp_path, "in"), ArtifactStore(tmp_path, "out")
    for key in (low, middle):
        inputs.write_text(shard, key, "md", "text")
    outputs.write_text(shard, high, "md", "an output whose input vanished")
    below, above = ShaRange("", middle), ShaRange(middle, "")

    report = StageReport("chunks", [shard], above)
    assert reconcile(report, inputs.shas, outputs.shas, outputs) == [(shard, middle)]
    assert report.purged == [high] and report.skipped == 0
    outputs.write_text(shard, high, "md", "an output whose input vanished")
    report = StageReport("chunks", [shard], below)  # the other side: low only, and it purges nothing of above's
    assert reconcile(report, inputs.shas, outputs.shas, outputs) == [(shard, low)]
    assert report.purged == [] and outputs.exists(shard, high, "md")

    # the conversion check names only its own side's unconverted documents
    raw, markdown = ArtifactStore(tmp_path, "raw"), ArtifactStore(tmp_path, "markdown")
    for key in (low, middle):
        raw.write_text(shard, key, "txt", "text")
    markdown.write_text(shard, low, "md", "converted")
    assert unconverted(raw, markdown, [shard], below) == []
    assert unconverted(raw, markdown, [shard], above) == [f"{middle}: no Markdown and no recorded failure"]
    assert len(unconverted(raw, markdown, [shard])) == 1

    # dropping unredacted text after redaction: only its own side's (the other side's may still be redacting)
    redacted = ArtifactStore(tmp_path, "redacted")
    markdown.write_text(shard, middle, "md", "converted")
    for key in (low, middle):
        markdown.write_json(shard, key, "json", {"title": "t", "line_pages": []})
        redacted.write_text(shard, key, "md", "redacted")
    drop_unredacted(raw, markdown, redacted, [shard], above)
    assert raw.exists(shard, low, "txt") and markdown.exists(shard, low, "md")
    assert not raw.exists(shard, middle, "txt") and not markdown.exists(shard, middle, "md")
    assert markdown.read_json(shard, middle, "json")["title"] is None


@pytest.mark.slow
@pytest.mark.parametrize("keep_unredacted", [True, False])
def test_a_run_with_a_sha_range_keeps_every_per_document_stage_to_it(tmp_path: Path, keep_unredacted: bool,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Real Dagster runs of the per-document assets tagged with a range (as a shard worker's are): each stage
    converts, redacts, chunks and embeds exactly the documents of the range. The documents of the same shard before
    the cut are left at every stage of their own (one only snapshotted, one converted, one redacted, one chunked,
    one embedded), so a stage that looked past its range would take one of them a stage further."""
    monkeypatch.setenv("RAG_KEEP_UNREDACTED", str(keep_unredacted).lower())
    rag = RagResource(roots=[str(scifact_files(tmp_path / "scifact", 100).resolve())], data_dir=str(tmp_path / "data"))
    settings, artifacts = rag.settings, stores(rag.settings)
    keys = settings.shard_keys

    def held(stage: str) -> set[str]:
        return {sha for shard in keys for sha in artifacts[stage].shas(shard)}

    def run(stages: list, documents: ShaRange) -> None:
        shards = [shard for shard in keys if documents.meets_shard(shard)]
        assert shards == [shard]  # every run here covers the one shard
        assert materialize_stages(rag, stages, shards, instance, documents).success

    with dagster_instance() as instance:
        assert materialize_stages(rag, [raw_documents], keys, instance).success
        by_shard = {key: sorted(artifacts["raw"].shas(key)) for key in keys}
        shard = max(keys, key=lambda key: len(by_shard[key]))  # 100 documents: at least 7 in the fullest shard
        before, inside = by_shard[shard][:5], by_shard[shard][5:]
        after = keys[keys.index(shard) + 1] if shard != keys[-1] else ""  # the next shard's first SHA
        for position in range(len(PER_DOCUMENT_STAGES)):  # before[k + 1:] taken through stage k
            run(PER_DOCUMENT_STAGES[position:position + 1], ShaRange(before[position + 1], inside[0]))
        run(PER_DOCUMENT_STAGES, ShaRange(inside[0], after))
    assert len(inside) >= 2
    for position, stage in enumerate(("markdown", "redacted", "chunks", "embeddings")):
        assert held(stage) == set(inside) | set(before[position + 1:]), stage
    dropped = {sha for key in keys for sha in artifacts["raw"].shas(key, "dropped")}
    assert dropped == (set() if keep_unredacted else set(inside) | set(before[2:]))  # the redacted ones
    assert artifacts["raw"].exists(shard, before[0], "txt")
