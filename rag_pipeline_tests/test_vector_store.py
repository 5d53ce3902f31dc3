"""One suite for both vector store backends: embedded qdrant-edge and qdrant-client (`:memory:` server API)."""

from __future__ import annotations

import dataclasses
import random
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from rag_pipeline.errors import StoreLocked
from rag_pipeline.index.sparse import encode_query
from rag_pipeline.index.vector_store import (
    Condition,
    IndexedDocument,
    IndexPoint,
    VectorStore,
    collection_name,
)
from rag_pipeline_tests.store_helpers import DIM, MODEL, TEXTS, make_point, open_store, point_with

pytestmark = [  # qdrant-client's local mode ignores payload indexes and HNSW parameters
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect in the local Qdrant"),
    pytest.mark.filterwarnings("ignore:Local mode performs exact"),
]

REPO = Path(__file__).resolve().parents[1]


def test_collection_name() -> None:
    assert collection_name("sentence-transformers/all-MiniLM-L6-v2", 384) == (
        "chunks__sentence-transformers_all-minilm-l6-v2__384"
    )
    assert collection_name("BAAI/bge-small-en-v1.5", 384) != collection_name("BAAI/bge-base-en-v1.5", 768)


def test_upsert_counts_and_is_idempotent(store: VectorStore, points: list[IndexPoint]) -> None:
    store.upsert(points)
    assert store.count() == 12
    assert store.count(shard="s0") == 6
    assert store.count(sha="sha2") == 3
    assert store.count(shard="s0", sha="sha2") == 0
    store.upsert(points)
    assert store.count() == 12
    assert store.collection == collection_name(MODEL, DIM)


def test_delete_shas(store: VectorStore, points: list[IndexPoint]) -> None:
    store.upsert(points)
    store.delete_shas(["sha0", "sha3"])
    store.delete_shas([])
    assert store.count() == 6
    assert store.count(sha="sha0") == store.count(sha="sha3") == 0
    remaining = {hit.payload["sha"] for hit in store.search_dense(points[0].dense, top_k=20)}
    assert remaining == {"sha1", "sha2"}


def test_get_by_id(store: VectorStore, points: list[IndexPoint]) -> None:
    store.upsert(points)
    missing = str(uuid.UUID(int=0))
    hits = store.get([points[0].id, points[5].id, missing])
    assert sorted(hit.id for hit in hits) == sorted([points[0].id, points[5].id])
    assert {hit.id: hit.payload for hit in hits}[points[5].id] == points[5].payload


def test_relabel_and_shard_state(store: VectorStore, points: list[IndexPoint]) -> None:
    store.upsert(points)
    assert store.shard_state("s0") == {  # points written without tags (as before tags existed) hold none
        "sha0": IndexedDocument(3, ["/docs/sha0.md", "/mirror/sha0.md"], []),
        "sha1": IndexedDocument(3, ["/docs/sha1.md", "/mirror/sha1.md"], []),
    }
    store.relabel("sha1", ["/moved/b.pdf"], ["contract", "legal"], [], [])
    assert store.shard_state("s0")["sha1"] == IndexedDocument(3, ["/moved/b.pdf"], ["contract", "legal"])
    hits = store.search_dense(points[0].dense, top_k=20)
    for hit in hits:
        sha = hit.payload["sha"]
        expected = ["/moved/b.pdf"] if sha == "sha1" else [f"/docs/{sha}.md", f"/mirror/{sha}.md"]
        assert (hit.payload["paths"], hit.payload["path"]) == (expected, expected[0])
        assert hit.payload.get("tags", []) == (["contract", "legal"] if sha == "sha1" else [])
    store.relabel("sha1", ["/moved/b.pdf"], [], [], [])
    assert store.shard_state("s0")["sha1"].tags == []
    assert store.shard_state("missing") == {}
    # Points of one document that disagree (a relabel that failed part way) match no labels, so sync redoes it.
    stale = dataclasses.replace(points[0], payload={**points[0].payload, "tags": ["stale"]})
    store.upsert([stale])
    assert store.shard_state("s0")["sha0"] == IndexedDocument(3, [], [])
    store.relabel("sha0", ["/docs/sha0.md"], [], [], [])
    assert store.shard_state("s0")["sha0"] == IndexedDocument(3, ["/docs/sha0.md"], [])


def test_tags_filter_matches_any_tag_of_a_point(store: VectorStore, points: list[IndexPoint]) -> None:
    store.upsert(points)
    store.relabel("sha0", ["/docs/sha0.md"], ["handbook", "policy"], [], [])
    store.relabel("sha2", ["/docs/sha2.md"], ["policy"], [], [])
    dense, sparse = points[0].dense, encode_query("pump")

    def shas(hits: list) -> set[str]:
        return {hit.payload["sha"] for hit in hits}

    assert shas(store.search_dense(dense, 20, {"tags": "policy"})) == {"sha0", "sha2"}
    assert shas(store.search_dense(dense, 20, {"tags": "handbook"})) == {"sha0"}
    assert shas(store.search_dense(dense, 20, {"tags": ["handbook", "legal"]})) == {"sha0"}
    assert shas(store.search_sparse(sparse, 20, {"tags": "policy", "doc_type": "md"})) <= {"sha0", "sha2"}
    assert shas(store.search_hybrid(dense, sparse, 20, filters={"tags": "policy"})) == {"sha0", "sha2"}
    assert store.search_dense(dense, 20, {"tags": "legal"}) == []
    assert store.count() == 12


def test_search_dense_nearest_and_filters(store: VectorStore, points: list[IndexPoint]) -> None:
    store.upsert(points)
    target = points[4]
    hits = store.search_dense(target.dense, top_k=3)
    assert len(hits) == 3
    assert hits[0].id == target.id
    assert hits[0].score == pytest.approx(1.0, abs=1e-4)
    assert hits[0].payload == target.payload
    assert hits[0].score >= hits[1].score >= hits[2].score

    pdf = store.search_dense(target.dense, top_k=20, filters={"doc_type": "pdf"})
    assert len(pdf) == 6 and {hit.payload["doc_type"] for hit in pdf} == {"pdf"}
    by_paths = store.search_dense(target.dense, top_k=20, filters={"paths": "/mirror/sha2.md"})
    assert {hit.payload["sha"] for hit in by_paths} == {"sha2"} and len(by_paths) == 3
    by_path = store.search_dense(target.dense, top_k=20, filters={"path": "/docs/sha0.md", "sha": "sha0"})
    assert len(by_path) == 3
    assert store.search_dense(target.dense, filters={"path": "/mirror/sha0.md"}) == []


def test_search_sparse_rare_token_and_idf(store: VectorStore, points: list[IndexPoint]) -> None:
    store.upsert(points)
    hits = store.search_sparse(encode_query("zx-4471"))
    assert [hit.id for hit in hits] == [point_with(points, "ZX-4471").id]
    # "pump" is in five texts, "gasket" in one: IDF ranks the gasket text first although its text is longer.
    hits = store.search_sparse(encode_query("pump gasket"), top_k=20)
    assert hits[0].id == point_with(points, "gasket").id
    assert len(hits) == 6
    # Stemming and stopwords: "pumps" matches "pump", "the" matches nothing.
    assert len(store.search_sparse(encode_query("the pumps"), top_k=20)) == 5
    assert store.search_sparse(encode_query("pump"), filters={"doc_type": "pdf"})[0].payload["doc_type"] == "pdf"


def test_search_hybrid_fuses_dense_and_sparse(store: VectorStore, points: list[IndexPoint]) -> None:
    store.upsert(points)
    dense_best, sparse_best = points[9], point_with(points, "ZX-4471")
    hits = store.search_hybrid(dense_best.dense, encode_query("ZX-4471"), top_k=5)
    assert {hit.id for hit in hits[:2]} == {dense_best.id, sparse_best.id}
    assert len(hits) == 5
    filtered = store.search_hybrid(dense_best.dense, encode_query("ZX-4471"), filters={"shard": "s1"})
    assert {hit.payload["shard"] for hit in filtered} == {"s1"}
    assert sparse_best.id not in {hit.id for hit in filtered}


def test_backends_agree(tmp_path: Path, points: list[IndexPoint]) -> None:
    edge, server = open_store("edge", tmp_path), open_store("server", tmp_path)
    try:
        for backend in (edge, server):
            backend.upsert(points)
            backend.optimize()
        for query in ("pump gasket", "zx-4471", "the finance portal", "power"):
            sparse = encode_query(query)
            edge_hits, server_hits = edge.search_sparse(sparse), server.search_sparse(sparse)
            # Same BM25 x IDF scores; equal scores may come in either order.
            assert edge_hits[0].id == server_hits[0].id
            assert {hit.id for hit in edge_hits} == {hit.id for hit in server_hits}
            assert [hit.score for hit in edge_hits] == pytest.approx([hit.score for hit in server_hits], rel=1e-4)
        for point in points:
            assert edge.search_dense(point.dense, top_k=1)[0].id == server.search_dense(point.dense, top_k=1)[0].id
            sparse = encode_query("finance portal power")  # two matches, distinct scores
            edge_hybrid = edge.search_hybrid(point.dense, sparse, top_k=3)
            server_hybrid = server.search_hybrid(point.dense, sparse, top_k=3)
            assert edge_hybrid[0].id == server_hybrid[0].id
            assert [hit.score for hit in edge_hybrid] == pytest.approx([hit.score for hit in server_hybrid])
    finally:
        edge.close()
        server.close()


def test_edge_bulk_load_and_optimize(tmp_path: Path) -> None:
    rng = random.Random(11)
    points = [make_point(rng, i, f"{TEXTS[i % 12]} Record {i}.", f"bulk{i // 10}", 16) for i in range(2000)]
    store = open_store("edge", tmp_path, dimension=16)
    try:
        store.upsert(points)
        store.optimize()
        assert store.count() == 2000
        assert store.count(sha="bulk7") == 10
        for point in rng.sample(points, 25):
            assert store.search_dense(point.dense, top_k=1)[0].id == point.id
        assert store.search_sparse(encode_query("record 1234"))[0].id == points[1234].id
    finally:
        store.close()


def test_edge_indexes_a_later_ingest_alone_not_merged_into_the_built_segment(tmp_path: Path) -> None:
    """A later ingest whose new segment passes Qdrant's indexing threshold gets that segment indexed on its own:
    the optimizer does not merge it into the collection's built segment, which would rebuild that whole graph
    (minutes at 100k documents, for a few new ones)."""
    rng = random.Random(3)
    per_ingest = 7_000  # 384-d vectors: 10.5 MB, past the indexing threshold of 10,000 KB
    store = open_store("edge", tmp_path, dimension=384)
    try:
        first = [make_point(rng, i, f"{TEXTS[i % 12]} Record {i}.", f"first{i // 10}", 384) for i in range(per_ingest)]
        store.upsert(first)
        store.optimize()
        built = store.info()["segments"]
        later = [make_point(rng, i, f"{TEXTS[i % 12]} Later {i}.", f"later{i // 10}", 384) for i in range(per_ingest)]
        store.upsert(later)
        store.optimize()
        assert store.info()["segments"] > built  # merged into the built one, the count would not have grown
        assert store.count() == 2 * per_ingest and store.count(sha="later7") == 10
    finally:
        store.close()


def test_edge_same_process_shares_one_store(tmp_path: Path, points: list[IndexPoint]) -> None:
    first = open_store("edge", tmp_path)
    second = open_store("edge", tmp_path)
    assert first is second
    first.upsert(points)
    first.close()
    assert second.count() == 12  # still open for the other opener
    second.close()
    reopened = open_store("edge", tmp_path)
    assert reopened is not first and reopened.count() == 12
    reopened.close()


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True, timeout=60, check=True
    )


OPEN_IN_CHILD = f"""
import sys
from pathlib import Path
from rag_pipeline.index.factory import open_vector_store
store = open_vector_store(data_dir=Path(sys.argv[1]), model_id={MODEL!r}, dimension={DIM})
"""


def test_field_labels_are_relabelled_and_filter_every_leg(store: VectorStore, points: list[IndexPoint]) -> None:
    store.upsert(points)
    store.relabel("sha1", ["/docs/sha1.md"], [], [], ["genre=puzzle", "themes=citrus", "themes=ocean"])
    assert store.shard_state("s0")["sha1"].fields == ["genre=puzzle", "themes=citrus", "themes=ocean"]
    citrus = [Condition("fields", "value", ("themes=citrus",))]
    for hits in (store.search_dense(points[0].dense, top_k=10, filters=citrus),
                 store.search_sparse(encode_query(TEXTS[0]), top_k=10, filters=citrus),
                 store.search_hybrid(points[0].dense, encode_query(TEXTS[0]), top_k=10, filters=citrus)):
        assert hits and {hit.payload["sha"] for hit in hits} == {"sha1"}
    either = [Condition("fields", "any", ("genre=racing", "genre=puzzle"))]
    assert {hit.payload["sha"] for hit in store.search_dense(points[0].dense, top_k=10, filters=either)} == {"sha1"}
    store.relabel("sha1", ["/docs/sha1.md"], [], [], [])
    assert store.search_dense(points[0].dense, top_k=10, filters=citrus) == []


def test_edge_persists_across_processes(tmp_path: Path, points: list[IndexPoint]) -> None:
    store = open_store("edge", tmp_path)
    store.upsert(points)
    store.relabel("sha2", ["/renamed.md"], ["kept"], ["docs"], [])
    store.delete_shas(["sha3"])
    store.close()
    child = OPEN_IN_CHILD + "print(store.count(), tuple(store.shard_state('s1')['sha2']))\nstore.close()\n"
    assert run_python(child, str(tmp_path)).stdout.strip() == "9 (3, ['/renamed.md'], ['kept'], ['docs'], [])"

    store = open_store("edge", tmp_path)
    assert store.search_dense(points[1].dense, top_k=1)[0].id == points[1].id
    store.close()


def test_edge_second_process_gets_a_clear_lock_error(tmp_path: Path) -> None:
    child = OPEN_IN_CHILD + "print('ready', flush=True)\nsys.stdin.readline()\nstore.close()\n"
    holder = subprocess.Popen(
        [sys.executable, "-c", child, str(tmp_path)], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        with pytest.raises(StoreLocked) as error:
            open_store("edge", tmp_path)
        message = str(error.value)
        assert f"pid {holder.pid}" in message and "-c" in message
        assert "stop that process, or use a Qdrant server: set RAG_QDRANT_URL" in message
    finally:
        holder.communicate("\n", timeout=60)
    assert holder.returncode == 0
    open_store("edge", tmp_path).close()  # the lock is released when the holder exits


def test_search_filters_prefix_heading_lists_and_unknown_keys(store: VectorStore, points: list[IndexPoint]) -> None:
    store.upsert(points)
    store.relabel("sha2", ["/archive/2023/report.md", "/docs/reports/report.md"], [], [], [])
    dense = points[0].dense
    # path_prefix matches any of a point's paths, character-wise.
    assert {hit.payload["sha"] for hit in store.search_dense(dense, 20, {"path_prefix": "/docs/sha"})} == {
        "sha0", "sha1", "sha3"
    }
    assert {hit.payload["sha"] for hit in store.search_dense(dense, 20, {"path_prefix": "/archive/20"})} == {"sha2"}
    assert {hit.payload["sha"] for hit in store.search_dense(dense, 20, {"path_prefix": "/docs/rep"})} == {"sha2"}
    assert store.search_dense(dense, 20, {"path_prefix": "/archive/2024"}) == []
    assert store.search_sparse(encode_query("pump"), 20, {"path_prefix": "docs/"}) == []  # anchored at the start
    # A list of values matches any of them; every key must hold.
    assert len(store.search_dense(dense, 20, {"sha": ["sha0", "sha3"]})) == 6
    assert len(store.search_dense(dense, 20, {"sha": ["sha0", "sha3"], "doc_type": "pdf"})) == 3
    assert len(store.search_dense(dense, 20, {"heading_path": "Intro", "shard": "s1"})) == 6
    assert store.search_dense(dense, 20, {"heading_path": "Intr"}) == []
    for bad in ({"text": "pump"}, {"path_prefix": ["/a", "/b"]}, {"sha": []}, {"sha": 3}):
        with pytest.raises(ValueError) as error:
            store.search_hybrid(dense, encode_query("pump"), filters=bad)  # type: ignore[arg-type]
        assert "path_prefix" in str(error.value) or "filter" in str(error.value)
    with pytest.raises(ValueError, match="allowed: path, paths, sha, shard, doc_type, heading_path, tags, source, path_prefix"):
        store.search_sparse(encode_query("pump"), filters={"author": "x"})


def test_search_with_vectors(store: VectorStore, points: list[IndexPoint]) -> None:
    store.upsert(points)
    sparse = encode_query("pump")
    for hits in (
        store.search_dense(points[2].dense, 3, with_vectors=True),
        store.search_sparse(sparse, 3, with_vectors=True),
        store.search_hybrid(points[2].dense, sparse, 3, with_vectors=True),
    ):
        by_id = {point.id: point for point in points}
        for hit in hits:
            assert hit.vector == pytest.approx(by_id[hit.id].dense, abs=1e-6)
    assert all(hit.vector is None for hit in store.search_dense(points[2].dense, 3))


def test_search_hybrid_fusion_options(store: VectorStore, points: list[IndexPoint]) -> None:
    """RRF k and leg weights, and DBSF, computed inside Qdrant exactly as rag_pipeline.retrieve.fusion does."""
    from rag_pipeline.retrieve import fusion

    store.upsert(points)
    dense, sparse = points[4].dense, encode_query("finance portal power gasket")  # distinct BM25 scores
    legs = [store.search_dense(dense, 12), store.search_sparse(sparse, 12)]
    cases = [
        ({}, fusion.rrf(legs, k=60)),
        ({"rrf_k": 2}, fusion.rrf(legs, k=2)),
        ({"weights": (3.0, 1.0)}, fusion.rrf(legs, k=60, weights=[3.0, 1.0])),
        ({"rrf_k": 10, "weights": (1.0, 0.5)}, fusion.rrf(legs, k=10, weights=[1.0, 0.5])),
        ({"fusion": "dbsf"}, fusion.dbsf(legs)),
    ]
    for options, expected in cases:
        hits = store.search_hybrid(dense, sparse, top_k=12, prefetch=12, **options)
        assert [hit.score for hit in hits] == pytest.approx([hit.score for hit in expected], rel=1e-5), options
        assert [hit.id for hit in hits][:3] == [hit.id for hit in expected][:3], options
    with pytest.raises(ValueError, match="unknown fusion"):
        store.search_hybrid(dense, sparse, fusion="max")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="RRF fusion only"):
        store.search_hybrid(dense, sparse, fusion="dbsf", weights=(1.0, 2.0))
    with pytest.raises(ValueError, match="rrf_k"):
        store.search_hybrid(dense, sparse, rrf_k=0)


def test_edge_store_adds_the_tags_index_to_an_older_shard(tmp_path: Path, points: list[IndexPoint]) -> None:
    import qdrant_edge as qe

    store = open_store("edge", tmp_path)
    store.upsert(points)
    shard_path = store.path
    store._shard.update(qe.UpdateOperation.delete_field_index("tags"))  # as a shard made before tags existed
    assert "tags" not in store.info()["payload_indexes"]
    store.close()
    store = open_store("edge", tmp_path)
    try:
        assert store.path == shard_path and "tags" in store.info()["payload_indexes"]
        store.relabel("sha0", ["/docs/sha0.md"], ["policy"], [], [])
        assert {hit.payload["sha"] for hit in store.search_dense(points[0].dense, 20, {"tags": "policy"})} == {"sha0"}
    finally:
        store.close()
