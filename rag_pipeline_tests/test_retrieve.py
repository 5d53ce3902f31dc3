"""Retrieval on both vector store backends: fusion, filters, fragments, post-processing, fallbacks."""

from __future__ import annotations

import math
import random
import socket
import uuid
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from rag_pipeline.embed.embedder import Embedder
from rag_pipeline.errors import ConfigError, StoreUnavailable
from rag_pipeline.index.sparse import CONTEXT_RADIUS, encode_document, encode_query
from rag_pipeline.index.vector_store import Hit, IndexPoint, Scope, VectorStore, label_payload
from rag_pipeline.ingest.chunkers import chunk_document, neighbourhood_texts
from rag_pipeline.retrieve import RetrievalSettings, Retriever
from rag_pipeline.retrieve import retriever as retriever_module
from rag_pipeline.retrieve.fragments import split_fragments
from rag_pipeline.retrieve.fusion import adaptive, adaptive_weights, dbsf, dbsf_normalise, lead, rrf, weighted_blend
from rag_pipeline.retrieve.postprocess import (
    dedupe,
    mmr,
    prefer_coverage,
    score_threshold,
    text_overlap,
)
from rag_pipeline_tests.store_helpers import (
    DIM,
    BrokenEmbedder,
    LookupEmbedder,
    basis,
    make_points,
    open_store,
    point_with,
    unit_vector,
)

pytestmark = [  # qdrant-client's local mode ignores payload indexes and HNSW parameters
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect in the local Qdrant"),
    pytest.mark.filterwarnings("ignore:Local mode performs exact"),
]


def hit(hit_id: str, score: float, sha: str = "", text: str = "", vector: Sequence[float] | None = None,
        path: str = "") -> Hit:
    payload = {"sha": sha or hit_id, "text": text, "path": path or f"/{hit_id}.md"}
    return Hit(hit_id, score, payload, tuple(vector) if vector is not None else None)


def assert_ranked(hits: Sequence[Hit], expected: Sequence[tuple[str, float]], name: dict[str, str] | None = None
                  ) -> None:
    """The hits' ids (or names) and scores equal `expected` in order, scores to 1e-6 relative."""
    assert [name[h.id] if name else h.id for h in hits] == [item[0] for item in expected]
    assert [h.score for h in hits] == pytest.approx([item[1] for item in expected], rel=1e-6)


# --- pure fusion functions, hand-checked -----------------------------------------------------------------


def test_rrf_by_hand() -> None:
    dense = [hit("a", 0.9), hit("b", 0.8), hit("c", 0.1)]
    sparse = [hit("c", 7.0), hit("a", 3.0)]
    fused = rrf([dense, sparse], k=60)
    # RRF (Cormack et al.): a hit ranked r (1-based) in a list contributes 1 / (k + r).
    assert_ranked(fused, 
        [("a", 1 / 61 + 1 / 62), ("c", 1 / 63 + 1 / 61), ("b", 1 / 62)]
    )
    weighted = rrf([dense, sparse], k=60, weights=[1.0, 2.0])  # 1 / (k + r / w)
    assert_ranked(weighted, 
        [("a", 1 / 61 + 1 / (60 + 2 / 2)), ("c", 1 / 63 + 1 / (60 + 1 / 2)), ("b", 1 / 62)]
    )
    assert [h.id for h in rrf([dense, sparse], weights=[1.0, 0.0])] == ["a", "b", "c"]
    assert fused[0].payload == dense[0].payload
    with pytest.raises(ValueError):
        rrf([dense, sparse], weights=[1.0])


def test_dbsf_by_hand() -> None:
    # [3, 2, 1]: mean 2, sample sd 1 -> (s - (2 - 3)) / 6; a single hit and equal scores get 0.5.
    assert dbsf_normalise([3.0, 2.0, 1.0]) == pytest.approx([4 / 6, 3 / 6, 2 / 6])
    assert dbsf_normalise([5.0]) == [0.5] and dbsf_normalise([2.0, 2.0]) == [0.5, 0.5] and dbsf_normalise([]) == []
    fused = dbsf([[hit("a", 3.0), hit("b", 2.0), hit("c", 1.0)], [hit("c", 10.0)]])
    assert_ranked(fused, [("c", 2 / 6 + 0.5), ("a", 4 / 6), ("b", 3 / 6)])


def test_weighted_blend_by_hand() -> None:
    dense = [hit("a", 0.9), hit("b", 0.5), hit("c", 0.1)]
    sparse = [hit("c", 4.0), hit("a", 2.0)]
    # dense min-max: a 1, b 0.5, c 0; sparse: c 1, a 0.
    assert_ranked(weighted_blend(dense, sparse, alpha=0.7), 
        [("a", 0.7), ("b", 0.35), ("c", 0.3)]
    )
    assert [h.id for h in weighted_blend(dense, sparse, alpha=0.2)] == ["c", "a", "b"]  # c 0.8, a 0.2, b 0.1
    assert [h.id for h in weighted_blend([], sparse, alpha=0.7)] == ["c", "a"]
    with pytest.raises(ValueError):
        weighted_blend(dense, sparse, alpha=1.5)


def test_lead_by_hand() -> None:
    # [4, 2, 1, 1]: mean 2, sample sd sqrt(2); the best minus the mean of the next ones (4/3), in sds.
    assert lead([4.0, 2.0, 1.0, 1.0]) == pytest.approx((4 - 4 / 3) / math.sqrt(2))
    assert lead([4.0, 2.0, 1.0, 1.0], runners_up=1) == pytest.approx(2 / math.sqrt(2))
    # Only the first `head` scores set the deviation: a longer tail does not change the lead.
    assert lead([4.0, 2.0, 1.0, 1.0] + [0.0] * 100, runners_up=3, head=4) == pytest.approx((4 - 4 / 3) / math.sqrt(2))
    assert lead([3.0, 3.0, 3.0]) == 0.0 and lead([5.0, 1.0]) == pytest.approx(4 / math.sqrt(8))
    with pytest.raises(ValueError):
        lead([5.0])
    assert lead([40.0, 20.0, 10.0, 10.0]) == pytest.approx(lead([0.4, 0.2, 0.1, 0.1]))  # scale-free


def test_adaptive_fusion_keeps_a_confident_leg_on_top() -> None:
    # The dense leg has a clear winner; the sparse leg's scores fall evenly (no candidate stands out) and its
    # top is x, the dense leg's runner-up.
    dense = [hit("d0", 0.9), hit("x", 0.5)] + [hit(f"d{i}", 0.5 - 0.001 * i) for i in range(2, 20)]
    sparse = [hit("x", 10.0)] + [hit(f"s{i}", 10.0 - 0.1 * i) for i in range(1, 20)]
    assert dbsf([dense, sparse])[0].id == "x"  # plain DBSF: the noise lifts x over the confident winner
    weight_dense, weight_sparse = adaptive_weights([dense, sparse])
    assert weight_dense > 0.8 and weight_dense + weight_sparse == pytest.approx(1.0)
    fused = adaptive([dense, sparse])
    assert [h.id for h in fused[:3]] == ["d0", "x", "d2"]
    assert [h.id for h in fused if h.id.startswith("d")] == [h.id for h in dense if h.id.startswith("d")]
    # Scores are the weighted DBSF sums.
    dense_norm, sparse_norm = dbsf_normalise([h.score for h in dense]), dbsf_normalise([h.score for h in sparse])
    assert fused[1].score == pytest.approx(weight_dense * dense_norm[1] + weight_sparse * sparse_norm[0])


def test_adaptive_fusion_of_equal_legs_is_dbsf() -> None:
    # Legs whose scores have the same shape (the sparse scores are 10x the dense ones) lead equally: DBSF's
    # order, with half its scores.
    dense = [hit("a", 0.9), hit("b", 0.8), hit("c", 0.5), hit("d", 0.4), hit("e", 0.1)]
    sparse = [hit("c", 9.0), hit("e", 8.0), hit("a", 5.0), hit("b", 4.0), hit("d", 1.0)]
    assert adaptive_weights([dense, sparse]) == pytest.approx([0.5, 0.5])
    expected = dbsf([dense, sparse])
    assert_ranked(adaptive([dense, sparse]), [(h.id, h.score / 2) for h in expected])
    # A leg with no lead at all weighs nothing; one with too few candidates to judge leaves DBSF's equal weights.
    flat = [hit("e", 2.0), hit("a", 2.0), hit("b", 2.0)]
    assert adaptive_weights([dense, flat]) == [1.0, 0.0]
    assert [h.id for h in adaptive([dense, flat])] == ["a", "b", "c", "d", "e"]
    for short in ([], [hit("e", 2.0)], [hit("e", 2.0), hit("d", 1.0)]):
        assert adaptive_weights([dense, short]) == [0.5, 0.5]
        assert_ranked(adaptive([dense, short]), [(h.id, h.score / 2) for h in dbsf([dense, short])])


# --- fusion inside the store on a toy corpus -------------------------------------------------------------

TOY = [  # (text, cosine of its dense vector with the query vector e0)
    ("Annual report on office furniture purchases.", 0.9),
    ("The valve housing is cast iron and the valve stem is steel.", 0.7),
    ("Pressure relief valve settings are listed for the boiler room equipment inventory.", 0.5),
    ("Valve valve valve maintenance.", 0.3),
    ("Parking rules for visitors.", 0.1),
]
TOY_QUERY = "valve"


def toy_points() -> list[IndexPoint]:
    result = []
    for index, (text, similarity) in enumerate(TOY):
        dense = [0.0] * DIM
        dense[0], dense[index + 1] = similarity, math.sqrt(1 - similarity**2)
        payload = {"text": text, "sha": f"toy{index}", "path": f"/toy/{index}.md", "paths": [f"/toy/{index}.md"],
                   "heading_path": "", "shard": "0", "doc_type": "md"}
        result.append(IndexPoint(str(uuid.UUID(int=index + 1)), dense, encode_document(text), payload))
    return result


def test_hybrid_order_matches_hand_computed_rrf(store: VectorStore) -> None:
    toy = toy_points()
    store.upsert(toy)
    name = {point.id: point.payload["text"].split()[0] + str(i) for i, point in enumerate(toy)}
    # The legs: dense ranks the toy texts 0..4 by construction; BM25 ranks "valve" x3 (short) > x2 > x1 (long).
    dense_leg = [name[h.id] for h in store.search_dense(basis(0), 10)]
    assert dense_leg == ["Annual0", "The1", "Pressure2", "Valve3", "Parking4"]
    assert [name[h.id] for h in store.search_sparse(encode_query(TOY_QUERY), 10)] == ["Valve3", "The1", "Pressure2"]
    retriever = Retriever(store, LookupEmbedder({TOY_QUERY: basis(0)}), RetrievalSettings(dedupe=False))
    result = retriever.search(TOY_QUERY, top_k=5)
    expected = [  # dense rank r_d, sparse rank r_s: 1 / (60 + r_d) + 1 / (60 + r_s)
        ("The1", 1 / 62 + 1 / 62),
        ("Valve3", 1 / 64 + 1 / 61),
        ("Pressure2", 1 / 63 + 1 / 63),
        ("Annual0", 1 / 61),
        ("Parking4", 1 / 65),
    ]
    assert_ranked(result.hits, expected, name)
    assert result.mode_used == "hybrid" and result.warnings == []

    # Dense leg weighted 3x: 1 / (60 + r_d / 3) + 1 / (60 + r_s).
    weighted = Retriever(store, retriever.embedder, RetrievalSettings(dedupe=False, weights=(3.0, 1.0)))
    expected_weighted = sorted(
        [
            ("Annual0", 1 / (60 + 1 / 3)),
            ("The1", 1 / (60 + 2 / 3) + 1 / 62),
            ("Pressure2", 1 / (60 + 3 / 3) + 1 / 63),
            ("Valve3", 1 / (60 + 4 / 3) + 1 / 61),
            ("Parking4", 1 / (60 + 5 / 3)),
        ],
        key=lambda item: -item[1],
    )
    assert [name[h.id] for h in weighted.search(TOY_QUERY, top_k=5).hits] == [n for n, _ in expected_weighted]
    assert [n for n, _ in expected_weighted][:2] == ["Valve3", "The1"]

    # DBSF and the client-side blend agree with the pure functions over the same legs.
    legs = [store.search_dense(basis(0), 25), store.search_sparse(encode_query(TOY_QUERY), 25)]
    for settings, fused in (
        (RetrievalSettings(dedupe=False, fusion="dbsf"), dbsf(legs)),
        (RetrievalSettings(dedupe=False, mode="blend", alpha=0.7), weighted_blend(*legs, alpha=0.7)),
        (RetrievalSettings(dedupe=False, fusion="adaptive"), adaptive(legs)),
    ):
        hits = Retriever(store, retriever.embedder, settings).search(TOY_QUERY, top_k=5).hits
        assert_ranked(hits, [(h.id, h.score) for h in fused])
    dense_only = Retriever(store, retriever.embedder, RetrievalSettings(mode="dense", dedupe=False))
    assert [name[h.id] for h in dense_only.search(TOY_QUERY, top_k=2).hits] == ["Annual0", "The1"]
    sparse_only = Retriever(store, None, RetrievalSettings(mode="sparse", dedupe=False))
    assert [name[h.id] for h in sparse_only.search(TOY_QUERY, top_k=2).hits] == ["Valve3", "The1"]


# --- filters -----------------------------------------------------------------------------------------------


def test_filters_apply_inside_both_legs(store: VectorStore, points: list[IndexPoint]) -> None:
    store.upsert(points)
    dense_winner, sparse_winner = points[9], point_with(points, "ZX-4471")  # sha3 and sha1: both pdf
    query = "Order spare part ZX-4471"
    embedder = LookupEmbedder({query: dense_winner.dense})
    retriever = Retriever(store, embedder, RetrievalSettings(dedupe=False, fragments=False))
    # Each winner tops its own leg and the two lead the fused ranking without a filter.
    assert store.search_dense(dense_winner.dense, 1)[0].id == dense_winner.id
    assert store.search_sparse(encode_query(query), 1)[0].id == sparse_winner.id
    unfiltered = [h.id for h in retriever.search(query, top_k=3).hits]
    assert set(unfiltered[:2]) == {dense_winner.id, sparse_winner.id}
    for mode in ("hybrid", "blend", "dense", "sparse"):
        filtered = Retriever(store, embedder, RetrievalSettings(mode=mode, dedupe=False, fragments=False))
        # In sparse mode add a word of md texts ("pump"), so that something md matches at all.
        text = f"{query} for the pump" if mode == "sparse" else query
        hits = filtered.search(text, top_k=3, filters={"doc_type": "md"}).hits
        assert len(hits) == 3, mode  # filtered inside the legs, not after: still top_k results
        assert {h.payload["doc_type"] for h in hits} == {"md"}, mode
        assert not {dense_winner.id, sparse_winner.id} & {h.id for h in hits}, mode
    by_prefix = retriever.search(query, top_k=10, filters={"path_prefix": "/mirror/sha2"}).hits
    assert {h.payload["sha"] for h in by_prefix} == {"sha2"} and len(by_prefix) == 3
    two_docs = retriever.search(query, top_k=10, filters={"sha": ["sha0", "sha2"], "heading_path": "Intro"}).hits
    assert {h.payload["sha"] for h in two_docs} == {"sha0", "sha2"}
    with pytest.raises(ValueError, match="unknown filter field 'author'; allowed: path, paths, sha"):
        retriever.search(query, filters={"author": "me"})


def test_adaptive_fusion_through_the_retriever(store: VectorStore, points: list[IndexPoint]) -> None:
    """Adaptive fusion fetches both legs from the store (either backend) with the filters, a key's scope and each
    fragment, and keys the semantic cache apart from the other fusions."""
    store.upsert(points)
    dense_winner, sparse_winner, gasket = points[9], point_with(points, "ZX-4471"), point_with(points, "gasket")
    query = "Order spare part ZX-4471"
    retriever = Retriever(store, LookupEmbedder({query: dense_winner.dense}),
                          RetrievalSettings(fusion="adaptive", dedupe=False))
    legs = [store.search_dense(dense_winner.dense, 15), store.search_sparse(encode_query(query), 15)]
    assert_ranked(retriever.search(query, top_k=3).hits, [(h.id, h.score) for h in adaptive(legs)[:3]])
    assert {h.id for h in retriever.search(query, top_k=2).hits} == {dense_winner.id, sparse_winner.id}

    filtered = retriever.search(query, top_k=3, filters={"doc_type": "md"}).hits
    assert len(filtered) == 3 and {h.payload["doc_type"] for h in filtered} == {"md"}
    assert not {dense_winner.id, sparse_winner.id} & {h.id for h in filtered}
    store.relabel("sha2", ["/docs/sha2.md"], ["team-a"], [], [])
    scoped = retriever.search(query, top_k=10, scope=Scope(tags=("team-a",))).hits
    assert {h.payload["sha"] for h in scoped} == {"sha2"} and len(scoped) == 3

    # Fragments the embedder does not know get a zero vector: a flat dense leg, which weighs nothing.
    result = retriever.search(f"{query} soon. Where is the gasket on the inlet flange?", top_k=3)
    assert len(result.fragments) == 2 and {h.id for h in result.hits[:2]} == {sparse_winner.id, gasket.id}

    dbsf_retriever = Retriever(store, retriever.embedder, RetrievalSettings(fusion="dbsf", dedupe=False))
    assert retriever.signature(3, []) != dbsf_retriever.signature(3, [])
    with pytest.raises(ConfigError, match="leg weights apply to RRF"):
        RetrievalSettings(fusion="adaptive", weights=(1.0, 2.0))


class RecordingStore:
    """A real store that records the candidates each search asks a leg for, and its counts."""

    def __init__(self, store: VectorStore) -> None:
        self.store = store
        self.prefetches: list[int] = []  # search_hybrid's prefetch, or the limit of search_dense / search_sparse
        self.counts = 0

    def __getattr__(self, name: str):
        return getattr(self.store, name)

    def search_hybrid(self, *args, prefetch: int, **options) -> list[Hit]:
        self.prefetches.append(prefetch)
        return self.store.search_hybrid(*args, prefetch=prefetch, **options)

    def search_dense(self, vector, top_k: int = 10, *args, **options) -> list[Hit]:
        self.prefetches.append(top_k)
        return self.store.search_dense(vector, top_k, *args, **options)

    def search_sparse(self, vector, top_k: int = 10, *args, **options) -> list[Hit]:
        self.prefetches.append(top_k)
        return self.store.search_sparse(vector, top_k, *args, **options)

    def count(self, **options) -> int:
        self.counts += 1
        return self.store.count(**options)


def noisy_points(start: int, count: int) -> list[IndexPoint]:
    """`count` points with random unit vectors and short texts; every other one is a pdf, every fourth one is
    tagged team-a."""
    rng = random.Random(start)
    words = ["pump", "valve", "seal", "gasket", "boiler", "pipe", "flange", "motor"]
    result = []
    for index in range(start, start + count):
        text = " ".join(rng.choices(words, k=6)) + f" part{index}"
        path = f"/docs/{index}.md"
        payload = {"text": text, "sha": f"doc{index}", "heading_path": "", "shard": "0",
                   "doc_type": "pdf" if index % 2 else "md",
                   **label_payload([path], ["team-a"] if index % 4 == 0 else [], [], [])}
        result.append(IndexPoint(str(uuid.UUID(int=index + 1)), unit_vector(rng), encode_document(text), payload))
    return result


def test_each_leg_fetches_the_floor_or_a_tenth_of_what_the_search_can_reach(store: VectorStore, monkeypatch) -> None:
    """A fused search asks each leg for top_k × prefetch_multiplier candidates, and at least prefetch_floor, or a
    tenth of the points its filters and scope allow when that is fewer. Each set of conditions is counted once,
    and again once its count is old; searches the floor cannot deepen count nothing."""
    store.upsert(noisy_points(0, 1000))
    query = "pump seal"
    recording = RecordingStore(store)

    def retriever(**settings) -> Retriever:
        return Retriever(recording, LookupEmbedder({query: basis(0)}),  # type: ignore[arg-type]
                         RetrievalSettings(**{"fusion": "dbsf", "dedupe": False, "fragments": False, **settings}))

    def prefetches(searcher: Retriever, top_k: int = 3, **options) -> list[int]:
        recording.prefetches.clear()
        assert len(searcher.search(query, top_k=top_k, **options).hits) == top_k
        return recording.prefetches

    dbsf_retriever = retriever()
    assert prefetches(dbsf_retriever) == [100]  # a tenth of 1,000 points, below the floor of 300
    assert prefetches(dbsf_retriever, filters={"doc_type": "md"}) == [50]  # a tenth of the 500 md points
    assert prefetches(dbsf_retriever, scope=Scope(tags=("team-a",))) == [25]  # a tenth of the key's 250
    assert prefetches(dbsf_retriever, top_k=30) == [150]  # top_k × 5 above the floor
    assert recording.counts == 3  # once per set of conditions
    assert prefetches(dbsf_retriever, top_k=100, filters={"doc_type": "pdf"}) == [500]
    assert recording.counts == 3  # top_k × 5 above the floor: no count
    assert prefetches(retriever(prefetch_floor=40)) == [40]
    assert prefetches(retriever(prefetch_floor=0)) == [15]  # top_k × 5, as without a floor
    assert prefetches(retriever(mode="blend")) == [100, 100]  # both legs, fetched by the retriever
    assert prefetches(retriever(fusion="adaptive")) == [100, 100]
    counted = recording.counts
    assert prefetches(retriever(mode="dense")) == [3] and prefetches(retriever(mode="sparse")) == [3]
    assert recording.counts == counted  # one leg, no fusion: nothing to deepen, nothing counted
    with pytest.raises(ConfigError, match="prefetch_floor must be >= 0"):
        RetrievalSettings(prefetch_floor=-1)

    store.upsert(noisy_points(1000, 2500))
    assert prefetches(dbsf_retriever) == [100]  # the count serves SIZE_TTL_SECONDS
    monkeypatch.setattr(retriever_module, "SIZE_TTL_SECONDS", 0.0)
    assert prefetches(dbsf_retriever) == [300]  # 3,500 points: the floor itself


# --- fragments -----------------------------------------------------------------------------------------------


def test_split_fragments() -> None:
    assert split_fragments("What is the pump pressure limit? How often are the seals inspected?") == [
        "What is the pump pressure limit?",
        "How often are the seals inspected?",
    ]
    assert split_fragments("Which pumps exceed 3.5 bar; and who logs the readings") == [
        "Which pumps exceed 3.5 bar;", "and who logs the readings"
    ]
    # Abbreviations, decimals, versions and file names do not end a fragment.
    assert split_fragments("Does v1.2 of setup.py e.g. handle 3.5 GB files, i.e. large ones?") == [
        "Does v1.2 of setup.py e.g. handle 3.5 GB files, i.e. large ones?"
    ]
    assert split_fragments("Dr. Smith wrote Fig. 3 about pumps. What does it show?") == [
        "Dr. Smith wrote Fig. 3 about pumps.", "What does it show?"
    ]
    # Short pieces are merged into a neighbour; nothing to split gives the question itself.
    assert split_fragments("Thanks. Where is the gasket on the inlet flange?") == [
        "Thanks. Where is the gasket on the inlet flange?"
    ]
    assert split_fragments("Where is the gasket? Why?") == ["Where is the gasket? Why?"]
    assert split_fragments("  pump   seals ") == ["pump seals"]
    assert split_fragments("   ") == []


def test_multi_fragment_query_merges_by_chunk(store: VectorStore, points: list[IndexPoint]) -> None:
    store.upsert(points)
    retriever = Retriever(store, None, RetrievalSettings(mode="sparse", dedupe=False))
    question = "Order spare part ZX-4471 soon. Where is the gasket on the inlet flange?"
    result = retriever.search(question, top_k=5)
    assert result.fragments == ["Order spare part ZX-4471 soon.", "Where is the gasket on the inlet flange?"]
    ids = [h.id for h in result.hits]
    assert set(ids[:2]) == {point_with(points, "ZX-4471").id, point_with(points, "gasket").id}
    assert len(ids) == len(set(ids))
    assert [h.score for h in result.hits] == sorted((h.score for h in result.hits), reverse=True)
    # Each hit keeps its best score over the fragments.
    for fragment in result.fragments:
        for single in store.search_sparse(encode_query(fragment), 20):
            if single.id in ids:
                assert {h.id: h.score for h in result.hits}[single.id] >= single.score - 1e-9
    whole = Retriever(store, None, RetrievalSettings(mode="sparse", dedupe=False, fragments=False))
    assert whole.search(question, top_k=5).fragments == [question]


# --- post-processing -------------------------------------------------------------------------------------------


def test_dedupe_mmr_threshold_coverage_functions() -> None:
    text = "The pump controller logs pressure readings each minute and stores them for a year."
    near = hit("b", 0.8, sha="s1", text="The pump controller logs pressure readings each minute and stores them.")
    hits = [
        hit("a", 0.9, sha="s1", text=text),
        near,  # same document, overlapping text
        hit("c", 0.7, sha="s2", text=text, vector=basis(1)),  # same text in another document: kept (no vectors)
        hit("d", 0.6, sha="s3", text="Other words entirely here.", vector=[0.99, 0.141] + [0.0] * (DIM - 2)),
        hit("e", 0.5, sha="s4", text="Unrelated.", vector=basis(0)),  # cosine 0.99 with d: dropped
        hit("f", 0.4, sha="s1", text="A different passage of the same document about seals."),
    ]
    assert text_overlap(text, near.payload["text"]) >= 0.8
    assert [h.id for h in dedupe(hits)] == ["a", "c", "d", "f"]
    assert [h.id for h in dedupe(hits, cosine_threshold=0.999)] == ["a", "c", "d", "e", "f"]

    query = basis(0)
    twin = [0.98, 0.199] + [0.0] * (DIM - 2)
    other = [0.7, 0.0, 0.714] + [0.0] * (DIM - 3)
    pool = [hit("x", 0.9, vector=basis(0)), hit("x2", 0.85, vector=twin), hit("y", 0.5, vector=other)]
    assert [h.id for h in mmr(pool, query, lambda_=1.0, top_k=3)] == ["x", "x2", "y"]  # relevance only
    # The query is x itself, so a hit's MMR value after x is lambda·c - (1 - lambda)·c, c its cosine with x.
    assert [h.id for h in mmr(pool, query, lambda_=0.3, top_k=3)] == ["x", "y", "x2"]  # diversity
    assert [h.id for h in mmr(pool, query, lambda_=0.3, top_k=2)] == ["x", "y"]
    assert [h.id for h in mmr(pool, query, lambda_=0.7, top_k=2)] == ["x", "x2"]
    assert [h.score for h in mmr(pool, query, 0.3, 3)] == [0.9, 0.5, 0.85]  # scores kept, order is MMR's
    assert [h.id for h in mmr([*pool, hit("n", 0.1)], query, 0.3, 4)] == ["x", "y", "x2", "n"]  # no vector: last

    assert [h.id for h in score_threshold(pool, 0.8)] == ["x", "x2"] and score_threshold(pool, None) == pool

    ranked = [hit("1", 1.00, path="/a"), hit("2", 0.99, path="/a"), hit("3", 0.98, path="/b"),
              hit("4", 0.97, path="/c"), hit("5", 0.50, path="/a"), hit("6", 0.49, path="/d")]
    assert [h.id for h in prefer_coverage(ranked, margin=0.05)] == ["1", "3", "4", "2", "5", "6"]
    assert [h.id for h in prefer_coverage(ranked, margin=0.0)] == ["1", "2", "3", "4", "5", "6"]
    assert [h.id for h in prefer_coverage(ranked, margin=1.0)] == ["1", "3", "4", "6", "2", "5"]


def test_retriever_dedupes_and_diversifies(store: VectorStore, points: list[IndexPoint]) -> None:
    target = points[4]
    copy_vector = np.asarray(target.dense) + 0.01 * np.asarray(basis(3))
    copy_vector /= np.linalg.norm(copy_vector)
    copy_payload = {**target.payload, "sha": "copy", "path": "/copy.md", "paths": ["/copy.md"]}
    copy = IndexPoint(str(uuid.UUID(int=99)), list(copy_vector), target.sparse, copy_payload)
    store.upsert([*points, copy])
    query = "pump controller readings"
    embedder = LookupEmbedder({query: target.dense})
    plain = Retriever(store, embedder, RetrievalSettings(dedupe=False)).search(query, top_k=4)
    assert {target.id, copy.id} <= {h.id for h in plain.hits[:2]}
    deduped = Retriever(store, embedder, RetrievalSettings()).search(query, top_k=4)
    assert len(deduped.hits) == 4 and len({target.id, copy.id} & {h.id for h in deduped.hits}) == 1
    assert all(h.vector is None for h in deduped.hits)  # vectors are fetched for post-processing only
    diverse = Retriever(store, embedder, RetrievalSettings(dedupe=False, mmr_lambda=0.3)).search(query, top_k=4)
    assert diverse.hits[0].id in {target.id, copy.id}
    assert {target.id, copy.id} - {h.id for h in diverse.hits[:2]}  # the twin is pushed out of the top 2
    threshold = Retriever(store, embedder, RetrievalSettings(dedupe=False, score_threshold=0.03)).search(query, 10)
    assert threshold.hits and all(h.score >= 0.03 for h in threshold.hits)


# --- fallbacks, errors, timings ----------------------------------------------------------------------------------


def test_bm25_fallback_when_the_embedder_raises(store: VectorStore, points: list[IndexPoint]) -> None:
    store.upsert(points)
    for mode in ("hybrid", "dense", "blend"):
        retriever = Retriever(store, BrokenEmbedder(), RetrievalSettings(mode=mode))
        result = retriever.search("spare part ZX-4471", top_k=3)
        assert result.mode_used == "sparse"
        assert len(result.warnings) == 1 and "fell back to BM25-only" in result.warnings[0]
        assert "Ollama at http://127.0.0.1:9 unreachable" in result.warnings[0]
        assert [h.id for h in result.hits] == [point_with(points, "ZX-4471").id]
    assert Retriever(store, None).search("pump", top_k=2).mode_used == "sparse"
    with pytest.raises(ValueError, match="empty"):
        Retriever(store, BrokenEmbedder()).search("  ")
    with pytest.raises(ValueError, match="top_k"):
        Retriever(store, BrokenEmbedder()).search("pump", top_k=0)


def test_timings_present(store: VectorStore, points: list[IndexPoint]) -> None:
    store.upsert(points)
    embedder = LookupEmbedder({"pump seals": points[1].dense})
    result = Retriever(store, embedder).search("pump seals", top_k=3)
    assert set(result.timings_ms) == {"embed", "cache", "hyde", "search", "rerank", "postprocess", "total"}
    assert result.timings_ms["cache"] == result.timings_ms["hyde"] == result.timings_ms["rerank"] == 0.0
    assert all(value >= 0 for value in result.timings_ms.values())
    assert result.timings_ms["total"] >= result.timings_ms["search"] + result.timings_ms["embed"]
    assert embedder.calls == ["pump seals"] and len(result.hits) == 3


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_unreachable_server_store_names_store_and_setting(tmp_path: Path) -> None:
    from qdrant_client import QdrantClient

    server = open_store("server", tmp_path)
    port = free_port()
    real_client = server.client  # type: ignore[attr-defined]
    dead = QdrantClient(url=f"http://127.0.0.1:{port}", timeout=2, check_compatibility=False)
    server.client = dead  # type: ignore[attr-defined]
    try:
        for embedder in (None, LookupEmbedder({"pump": basis(0)})):  # BM25 alone; hybrid, which counts first
            with pytest.raises(StoreUnavailable) as error:
                Retriever(server, embedder).search("pump")
            message = str(error.value)
            assert f"127.0.0.1:{port}" in message and "RAG_QDRANT_URL" in message and server.collection in message
    finally:
        server.client.close()  # type: ignore[attr-defined]
        server.client = real_client  # type: ignore[attr-defined]
        server.close()


# --- the real packaged model -----------------------------------------------------------------------------------

SENTENCES = [
    "Fault code E-7731 means the coolant temperature sensor is disconnected.",
    "Employees are reimbursed for business travel after filing an expense claim in the finance portal.",
    "The library closes early on public holidays.",
    "Solar panels on the roof supply power during the day.",
    "Network switches in the server room need firmware updates every quarter.",
    "Inspect the pump seals every month for leaks.",
]


@pytest.fixture(scope="module")
def real_embedder() -> Embedder:
    from rag_pipeline.embed.torch_embedder import SentenceTransformerEmbedder

    return SentenceTransformerEmbedder()


@pytest.mark.parametrize("backend", ["edge", "server"])
def test_hybrid_with_the_packaged_model(backend: str, tmp_path: Path, real_embedder: Embedder) -> None:
    vectors = real_embedder.embed_documents(SENTENCES)
    points = [
        IndexPoint(str(uuid.UUID(int=i + 1)), list(map(float, vectors[i])), encode_document(text),
                   {"text": text, "sha": f"doc{i}", "path": f"/docs/{i}.md", "paths": [f"/docs/{i}.md"]})
        for i, text in enumerate(SENTENCES)
    ]
    real_store = open_store(backend, tmp_path, dimension=real_embedder.dimension)
    try:
        real_store.upsert(points)
        hybrid = Retriever(real_store, real_embedder)
        sparse = Retriever(real_store, real_embedder, RetrievalSettings(mode="sparse"))
        # A paraphrase without a shared word: BM25 finds nothing, the dense leg finds it.
        paraphrase = "How do I get my money back for a work trip?"
        assert sparse.search(paraphrase, top_k=3).hits == []
        assert hybrid.search(paraphrase, top_k=3).hits[0].payload["sha"] == "doc1"
        # A rare identifier: the sparse leg puts it first.
        assert sparse.search("E-7731", top_k=3).hits[0].payload["sha"] == "doc0"
        result = hybrid.search("what does E-7731 mean", top_k=3)
        assert result.hits[0].payload["sha"] == "doc0" and result.mode_used == "hybrid" and not result.warnings
        # Both in one question: one fragment each, both answered at the top.
        both = hybrid.search("What does E-7731 mean? How do I get my money back for a work trip?", top_k=3)
        assert len(both.fragments) == 2 and {h.payload["sha"] for h in both.hits[:2]} == {"doc0", "doc1"}
    finally:
        real_store.close()


PUMP_MANUAL = """# Pumps

The impeller of the circulation pump turns at 2900 rpm and moves the coolant through the loop.

Replace the shaft seals every spring and check the bearings for noise while the unit runs.

Log every inspection in the maintenance book kept in the plant room.

# Parking

Visitors park in the north lot and sign in at the gate house.
"""


@pytest.mark.parametrize("backend", ["edge", "server"])
def test_a_chunks_sparse_vector_carries_the_words_of_its_passage(backend: str, tmp_path: Path) -> None:
    """BM25 matches a chunk on its neighbours' words too (its section, CONTEXT_RADIUS chunks each side), below a
    chunk that has the word itself; a chunk of another section, or further away, does not match."""
    chunks = chunk_document("f" * 64, PUMP_MANUAL, chunk_size=100, chunk_overlap=30)
    assert [chunk.own_text.split()[0] for chunk in chunks] == ["The", "Replace", "Log", "Visitors"]
    contexts = neighbourhood_texts(chunks, CONTEXT_RADIUS)
    points = [IndexPoint(chunk.chunk_id, basis(index), encode_document(chunk.text, context),
                         {"text": chunk.text, "sha": chunk.sha, "path": "/manual.md", "chunk_index": chunk.chunk_index})
              for index, (chunk, context) in enumerate(zip(chunks, contexts, strict=True))]
    assert encode_document(chunks[3].text, "") == encode_document(chunks[3].text)
    store = open_store(backend, tmp_path)
    try:
        store.upsert(points)
        sparse = Retriever(store, None, RetrievalSettings(mode="sparse", dedupe=False))
        ranked = [hit.payload["chunk_index"] for hit in sparse.search("impeller", top_k=10).hits]
        assert ranked == [0, 1]  # its own chunk first, then the neighbour; not chunk 2 (two away) nor Parking
        assert [hit.payload["chunk_index"] for hit in sparse.search("visitors gate", top_k=10).hits] == [3]
    finally:
        store.close()


def test_make_points_reused() -> None:
    assert len(make_points()) == 12  # the shared corpus helpers stay importable


def test_dedupe_matches_the_pairwise_definition() -> None:
    """The vectorised dedupe keeps exactly what the pairwise is_duplicate rule keeps."""
    from rag_pipeline.retrieve.postprocess import is_duplicate

    rng = np.random.default_rng(3)
    words = ["pump", "seal", "valve", "leak", "month", "inspect", "gasket", "flow"]
    for _ in range(30):
        base = rng.normal(size=(4, DIM))
        hits = []
        for index in range(24):
            vector = base[rng.integers(4)] + rng.normal(scale=rng.choice([0.05, 1.0]), size=DIM)
            text = " ".join(rng.choice(words, size=int(rng.integers(2, 12))))
            hits.append(Hit(f"h{index}", 1.0 - index / 100, {"sha": f"s{rng.integers(5)}", "text": text},
                            tuple(vector) if rng.random() > 0.1 else None))
        reference: list[Hit] = []
        for candidate in hits:
            if not any(is_duplicate(candidate, kept) for kept in reference):
                reference.append(candidate)
        assert [h.id for h in dedupe(hits)] == [h.id for h in reference]
        assert len(reference) < len(hits)
        for keep in (1, 3, len(reference)):  # the first `keep` of the same decisions
            assert [h.id for h in dedupe(hits, keep=keep)] == [h.id for h in reference[:keep]]
