"""Tests of rag_pipeline.embed.embedder: the packaged model, the embedding cache and the Ollama client against a fake server."""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import socket
import threading
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"

import numpy as np
import pytest

from rag_pipeline.components import build_embedder
from rag_pipeline.embed.cache import EmbeddingCache, text_sha256
from rag_pipeline.embed.embedder import DEFAULT_MODEL_ID, Embedder, EmbedderUnavailable, embed_texts
from rag_pipeline.embed.model_files import model_dir
from rag_pipeline.embed.onnx_embedder import OnnxEmbedder
from rag_pipeline.embed.onnx_export import exported_model
from rag_pipeline.embed.torch_embedder import SentenceTransformerEmbedder
from rag_pipeline.file_lock import locked
from rag_pipeline.llm.ollama import OllamaEmbedder
from rag_pipeline.settings import Settings
from rag_pipeline_tests.conftest import DATASETS
from rag_pipeline_tests.fake_ollama import (
    FAKE_DIMENSION,
    FakeOllama,
    fake_vector,
)


@pytest.fixture(scope="module")
def embedder() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder()


def assert_normalised(vectors: np.ndarray) -> None:
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=-1), 1.0, atol=1e-5)


# --- the packaged sentence-transformers model -------------------------------------------------------------------


def test_packaged_model(embedder: SentenceTransformerEmbedder) -> None:
    assert embedder.dimension == 384
    assert embedder.model_id == DEFAULT_MODEL_ID == "sentence-transformers/all-MiniLM-L6-v2"
    texts = ["Retrieval-augmented generation grounds answers in documents.", "Short.", "Ducks swim."]
    vectors = embedder.embed_documents(texts)
    assert vectors.shape == (3, 384)
    assert_normalised(vectors)
    query = embedder.embed_query(texts[0])
    assert query.shape == (384,)
    assert_normalised(query)
    np.testing.assert_allclose(query, vectors[0], atol=1e-5)
    assert embedder.embed_documents([]).shape == (0, 384)


def test_paraphrase_is_closer_than_unrelated(embedder: SentenceTransformerEmbedder) -> None:
    query = embedder.embed_query("How do I reset my password?")
    paraphrase, unrelated = embedder.embed_documents(
        ["Steps to recover account login credentials", "The duck is a waterbird"]
    )
    assert query @ paraphrase > query @ unrelated + 0.2


def test_order_preserved_with_mixed_lengths(embedder: SentenceTransformerEmbedder) -> None:
    texts = [f"sentence number {i} " + "with more words " * (i * 7 % 23) for i in range(40)]
    batched = SentenceTransformerEmbedder(batch_size=4)
    vectors = batched.embed_documents(texts)
    one_by_one = np.stack([embedder.embed_query(text) for text in texts])
    np.testing.assert_allclose(vectors, one_by_one, atol=1e-4)


def test_missing_model_directory(tmp_path: Path) -> None:
    with pytest.raises(EmbedderUnavailable, match="no sentence-transformers model"):
        SentenceTransformerEmbedder(str(tmp_path / "absent"))


# --- embed_texts and the cache ----------------------------------------------------------------------------------


class CountingEmbedder(Embedder):
    """Wraps an embedder and records every text it is asked to embed."""

    def __init__(self, inner: Embedder, model_id: str | None = None) -> None:
        self.inner = inner
        self.model_id = model_id or inner.model_id
        self.dimension = inner.dimension
        self.seen: list[str] = []

    def embed_documents(self, texts):
        self.seen.extend(texts)
        return self.inner.embed_documents(texts)


def test_embed_texts_with_cache(embedder: SentenceTransformerEmbedder, tmp_path: Path) -> None:
    path = tmp_path / "cache" / "embeddings.sqlite"
    cache = EmbeddingCache(path)
    assert len(cache) == 0
    counting = CountingEmbedder(embedder)
    texts = ["alpha beta", "gamma delta epsilon", "zeta"]

    first, stats = embed_texts(counting, texts, cache)
    assert (stats.computed, stats.cached) == (3, 0) and stats.seconds > 0
    assert first.shape == (3, 384) and first.dtype == np.float32
    np.testing.assert_allclose(first, embedder.embed_documents(texts), atol=1e-5)
    assert len(cache) == 3

    second, stats = embed_texts(counting, texts, cache)
    assert (stats.computed, stats.cached, stats.seconds) == (0, 3, 0.0)
    np.testing.assert_array_equal(second, first)

    counting.seen.clear()
    third, stats = embed_texts(counting, ["zeta", "a new text", "alpha beta"], cache)
    assert (stats.computed, stats.cached) == (1, 2) and counting.seen == ["a new text"]
    np.testing.assert_array_equal(third[[0, 2]], first[[2, 0]])

    # The cache persists in the file and is keyed by model id.
    reopened = EmbeddingCache(path)
    assert len(reopened) == 4
    _, stats = embed_texts(CountingEmbedder(embedder), texts, reopened)
    assert (stats.computed, stats.cached) == (0, 3)
    other_model = CountingEmbedder(embedder, model_id="another/model")
    _, stats = embed_texts(other_model, texts, reopened)
    assert (stats.computed, stats.cached) == (3, 0)
    assert len(reopened) == 7


def test_embed_texts_deduplicates(embedder: SentenceTransformerEmbedder, tmp_path: Path) -> None:
    for cache in (None, EmbeddingCache(tmp_path / "c.sqlite")):
        counting = CountingEmbedder(embedder)
        vectors, stats = embed_texts(counting, ["same", "other", "same", "same"], cache)
        assert counting.seen == ["same", "other"] and stats.computed == 2
        np.testing.assert_array_equal(vectors[0], vectors[2])
        np.testing.assert_array_equal(vectors[0], vectors[3])
    empty, stats = embed_texts(embedder, [], None)
    assert empty.shape == (0, 384) and stats.computed == 0


def test_cache_round_trip_and_large_lookup(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path / "c.sqlite")
    rng = np.random.default_rng(0)
    items = {text_sha256(str(i)): rng.standard_normal(8).astype(np.float32) for i in range(2500)}
    cache.put_many("m", items)
    cache.put_many("m", items)  # idempotent
    found = cache.get_many("m", [*items, "0" * 64])
    assert found.keys() == items.keys()
    for sha, vector in items.items():
        np.testing.assert_array_equal(found[sha], vector)
    assert cache.get_many("other", list(items)) == {}
    assert text_sha256("é") == hashlib.sha256("é".encode()).hexdigest()


# --- Ollama, against a fake server speaking its HTTP API --------------------------------------------------------


def test_ollama_batches_and_normalises(fake_ollama: FakeOllama) -> None:
    embedder = OllamaEmbedder(fake_ollama.url, model="fake-embed", batch_size=4)
    assert embedder.dimension == FAKE_DIMENSION and embedder.model_id == "ollama/fake-embed"
    assert fake_ollama.requests == [("/api/embed", {"model": "fake-embed", "input": ["dimension"]})]
    fake_ollama.requests.clear()

    texts = [f"text {i}" for i in range(10)]
    vectors = embedder.embed_documents(texts)
    assert [len(body["input"]) for body in fake_ollama.bodies("/api/embed")] == [4, 4, 2]
    assert len(fake_ollama.requests) == math.ceil(len(texts) / 4)
    assert vectors.shape == (10, FAKE_DIMENSION)
    assert_normalised(vectors)
    expected = np.array([fake_vector(text) for text in texts])
    np.testing.assert_allclose(vectors, expected / np.linalg.norm(expected, axis=1, keepdims=True), atol=1e-6)
    assert_normalised(embedder.embed_query("a question"))


def test_ollama_nomic_task_prefixes(fake_ollama: FakeOllama) -> None:
    embedder = build_embedder(backend="ollama", ollama_url=fake_ollama.url, batch_size=8)
    assert embedder.model_id == "ollama/nomic-embed-text"
    fake_ollama.requests.clear()
    embedder.embed_documents(["a passage"])
    embedder.embed_query("a question")
    assert [body["input"] for body in fake_ollama.bodies("/api/embed")] == [
        ["search_document: a passage"],
        ["search_query: a question"],
    ]


def test_ollama_embed_texts_uses_cache(fake_ollama: FakeOllama, tmp_path: Path) -> None:
    embedder = OllamaEmbedder(fake_ollama.url, model="fake-embed", batch_size=2)
    cache = EmbeddingCache(tmp_path / "c.sqlite")
    first, _ = embed_texts(embedder, ["a", "b", "c"], cache)
    fake_ollama.requests.clear()
    second, stats = embed_texts(embedder, ["c", "a"], cache)
    assert fake_ollama.requests == [] and stats.cached == 2
    np.testing.assert_array_equal(second, first[[2, 0]])


def test_ollama_model_not_found(fake_ollama: FakeOllama) -> None:
    with pytest.raises(EmbedderUnavailable) as error:
        OllamaEmbedder(fake_ollama.url, model="missing-model")
    message = str(error.value)
    assert fake_ollama.url in message and "missing-model" in message and "not found" in message
    assert "ollama pull missing-model" in message


def test_ollama_server_down() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with pytest.raises(EmbedderUnavailable, match="unreachable") as error:
        OllamaEmbedder(url, timeout=5)
    assert url in str(error.value) and "nomic-embed-text" in str(error.value)


def test_build_embedder_ollama_needs_url() -> None:
    with pytest.raises(EmbedderUnavailable, match="URL"):
        build_embedder(backend="ollama")


def test_declared_dimension_matches_the_loaded_model(tmp_path: Path) -> None:
    from rag_pipeline.embed.model_files import declared_dimension

    assert declared_dimension() == 384
    dense = tmp_path / "with-dense"
    dense.mkdir()
    (dense / "modules.json").write_text('[{"idx": 0, "name": "0", "path": "2_Dense", '
                                        '"type": "sentence_transformers.models.Dense"}]')
    assert declared_dimension(str(dense)) is None  # a Dense layer may change it: load the model to know
    assert declared_dimension(str(tmp_path / "missing")) is None


# --- the ONNX Runtime runtimes (exported from the packaged model, offline) -------------------------------------

SCIFACT_TEXTS = [json.loads(line) for line in (DATASETS / "scifact" / "corpus.jsonl").open().readlines()[:64]]
TEXTS = [f"{record['title']}\n\n{record['text']}" for record in SCIFACT_TEXTS] + ["Short.", "a " * 600]


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("onnx_export")  # its own directory: these tests export for real


@pytest.mark.parametrize(("runtime", "min_cosine", "mean_cosine"), [("onnx", 0.9999, 0.9999),
                                                                    ("onnx-int8", 0.97, 0.99)])
def test_onnx_runtimes_give_the_torch_vectors(embedder: SentenceTransformerEmbedder, export_dir: Path,
                                              runtime: str, min_cosine: float, mean_cosine: float) -> None:
    onnx = build_embedder(runtime=runtime, onnx_cache_dir=str(export_dir), batch_size=8)
    assert isinstance(onnx, OnnxEmbedder) and onnx.dimension == 384
    assert onnx.model_id == DEFAULT_MODEL_ID + ("#onnx-int8" if runtime == "onnx-int8" else "")
    reference = embedder.embed_documents(TEXTS)  # includes a text longer than the 256-piece window: truncated alike
    vectors = onnx.embed_documents(TEXTS)
    assert_normalised(vectors)
    cosines = (vectors * reference).sum(axis=1)
    assert cosines.min() >= min_cosine and cosines.mean() >= mean_cosine  # int8: "Short." is the worst, ~0.98
    np.testing.assert_allclose(onnx.embed_query(TEXTS[3]), vectors[3], atol=1e-5)  # batching changes nothing
    assert onnx.embed_documents([]).shape == (0, 384)
    query = onnx.embed_query("How do I reset my password?")
    paraphrase, unrelated = onnx.embed_documents(["Steps to recover account login credentials",
                                                  "The duck is a waterbird"])
    assert query @ paraphrase > query @ unrelated + 0.2


@pytest.mark.parametrize("runtime", ["onnx", "onnx-int8"])
def test_document_sessions_per_core_give_the_same_vectors_in_order(export_dir: Path, runtime: str,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Batches of documents are shared out among one single-threaded session per usable core (at most
    MAX_DOCUMENT_SESSIONS, which then get more threads each): the vectors and their order are those of one
    session; a single batch runs on the caller's thread."""
    from rag_pipeline.embed import onnx_embedder

    texts = TEXTS[:24]
    monkeypatch.setattr(onnx_embedder, "usable_cores", lambda: 1)
    alone = build_embedder(runtime=runtime, onnx_cache_dir=str(export_dir), batch_size=4)
    reference = alone.embed_documents(texts)
    monkeypatch.setattr(onnx_embedder, "usable_cores", lambda: 3)
    shared = build_embedder(runtime=runtime, onnx_cache_dir=str(export_dir), batch_size=4)
    np.testing.assert_allclose(shared.embed_documents(texts), reference, atol=1e-5)
    assert {thread.name.startswith("embed") for thread in shared._pool()._threads} == {True}
    assert len(shared._pool()._threads) == 3
    np.testing.assert_allclose(shared.embed_documents(texts[5:6])[0], reference[5], atol=1e-5)
    monkeypatch.setattr(onnx_embedder, "usable_cores", lambda: 4 * onnx_embedder.MAX_DOCUMENT_SESSIONS + 1)
    many = build_embedder(runtime=runtime, onnx_cache_dir=str(export_dir), batch_size=4)
    assert (many._document_sessions, many._document_session_threads) == (onnx_embedder.MAX_DOCUMENT_SESSIONS, 4)


def test_openvino_bf16_gives_the_fp32_vectors_under_their_id(embedder: SentenceTransformerEmbedder, export_dir: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """bf16 inference of the fp32 graph keeps the model's document vectors (so it shares their id, cache and index);
    a document's vector is the same in any batch and on one stream or several. Queries are the int8 model's."""
    from rag_pipeline.embed import openvino_embedder

    bf16 = build_embedder(runtime="openvino-bf16", onnx_cache_dir=str(export_dir))
    assert isinstance(bf16, openvino_embedder.OpenVinoEmbedder) and bf16.dimension == 384
    assert bf16.model_id == DEFAULT_MODEL_ID == embedder.model_id
    assert bf16._model is None  # compiled on the first documents: a process that only answers queries never holds it
    reference = embedder.embed_documents(TEXTS)  # includes a text longer than the 256-piece window: truncated alike
    vectors = bf16.embed_documents(TEXTS)  # several passes, on every stream
    assert bf16._query_model is None  # the int8 query model is loaded on the first query: an ingest never needs it
    bf16.prepare_queries()  # or when a retriever starts
    assert bf16._query_model is not None
    assert_normalised(vectors)
    cosines = (vectors * reference).sum(axis=1)
    assert cosines.min() >= 0.999 and cosines.mean() >= 0.9999
    np.testing.assert_allclose(bf16.embed_documents(TEXTS[5:9]), vectors[5:9], atol=1e-5)  # one pass, other widths
    assert bf16.embed_documents([]).shape == (0, 384) and bf16.embed_queries([]).shape == (0, 384)
    assert bf16._compiled_model().get_property("NUM_STREAMS") == openvino_embedder.usable_cores()
    int8 = build_embedder(runtime="onnx-int8", onnx_cache_dir=str(export_dir))
    queries = bf16.embed_queries(TEXTS[:3])
    np.testing.assert_allclose(queries, int8.embed_queries(TEXTS[:3]), atol=1e-6)
    assert ((queries * vectors[:3]).sum(axis=1) >= 0.98).all()
    monkeypatch.setattr(openvino_embedder, "usable_cores", lambda: 1)
    alone = build_embedder(runtime="openvino-bf16", onnx_cache_dir=str(export_dir))
    np.testing.assert_allclose(alone.embed_documents(TEXTS), vectors, atol=1e-5)
    assert alone._compiled_model().get_property("NUM_STREAMS") == 1
    query = bf16.embed_query("How do I reset my password?")
    paraphrase, unrelated = bf16.embed_documents(["Steps to recover account login credentials",
                                                  "The duck is a waterbird"])
    assert query @ paraphrase > query @ unrelated + 0.2


def test_openvino_keeps_its_compiled_model_beside_the_export(export_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first compile writes OpenVINO's blob into a folder per OpenVINO version, settings and CPU, beside the
    export, while other processes wait; later ones read it and get the same vectors. A damaged blob is compiled
    again; another CPU gets its own folder; an unwritable folder means compiling every time."""
    from rag_pipeline.embed import openvino_embedder

    first = build_embedder(runtime="openvino-bf16", onnx_cache_dir=str(export_dir))
    vectors = first.embed_documents(TEXTS[:8])
    folders = list(export_dir.rglob("openvino-*"))
    assert len(folders) == 1 and folders[0].parent == first._onnx_file.parent
    (blob,) = folders[0].glob("*.blob")
    stamp = blob.stat().st_mtime_ns
    again = build_embedder(runtime="openvino-bf16", onnx_cache_dir=str(export_dir)).embed_documents(TEXTS[:8])
    np.testing.assert_array_equal(again, vectors)
    assert blob.stat().st_mtime_ns == stamp and len(list(folders[0].glob("*.blob"))) == 1  # read, not written

    blob.unlink()  # no blob: the first process compiles under the folder's lock; here another one holds it
    results: list[np.ndarray] = []
    waiting = threading.Thread(target=lambda: results.append(
        build_embedder(runtime="openvino-bf16", onnx_cache_dir=str(export_dir)).embed_documents(TEXTS[:8])))
    with locked(folders[0] / ".lock"):
        waiting.start()
        waiting.join(timeout=1.0)
        assert waiting.is_alive() and not list(folders[0].glob("*.blob"))
    waiting.join()
    np.testing.assert_array_equal(results[0], vectors)
    assert blob.is_file() and not list(folders[0].glob(".compiling-*"))  # renamed in from its staging folder

    os.chmod(blob, 0o600)
    blob.write_bytes(b"not a compiled model")  # damaged: OpenVINO compiles again and rewrites it
    damaged = build_embedder(runtime="openvino-bf16", onnx_cache_dir=str(export_dir)).embed_documents(TEXTS[:8])
    np.testing.assert_array_equal(damaged, vectors)
    assert blob.stat().st_size > 1_000_000

    monkeypatch.setattr(openvino_embedder, "cpu_flags", lambda: frozenset({"avx2"}))
    other_cpu = openvino_embedder.compiled_model_cache(first._onnx_file, "2026.4.1-1-abc/def")
    assert other_cpu is not None and other_cpu != folders[0] and other_cpu.name.startswith("openvino-2026.4.1-")
    monkeypatch.setattr(openvino_embedder.os, "access", lambda path, mode: False)
    assert openvino_embedder.compiled_model_cache(first._onnx_file, "2026.4.1") is None
    np.testing.assert_allclose(
        build_embedder(runtime="openvino-bf16", onnx_cache_dir=str(export_dir)).embed_documents(TEXTS[:8]), vectors,
        atol=1e-6)
    assert not list(export_dir.rglob("openvino-*/*.blob"))[1:]  # compiled without the cache: no other blob


class PreparingEmbedder(CountingEmbedder):
    """Records prepare_queries; with `broken`, its query model cannot load."""

    def __init__(self, inner: Embedder, broken: bool) -> None:
        super().__init__(inner)
        self.broken, self.prepared = broken, 0

    def prepare_queries(self) -> None:
        self.prepared += 1
        if self.broken:
            raise EmbedderUnavailable("cannot load the int8 query model: a broken file")


def test_a_retriever_loads_the_query_model_at_its_start(sample_index: tuple[Path, Path],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """So the first search does not wait for it; one that cannot load leaves searches BM25-only, saying why."""
    from rag_pipeline import components

    monkeypatch.setenv("RAG_DATA_DIR", str(sample_index[1]))
    settings = Settings()
    real = components.embedder(settings)
    for broken in (False, True):
        spy = PreparingEmbedder(real, broken)
        monkeypatch.setattr(components, "embedder", lambda settings: spy)
        retriever = components.open_retriever(settings)
        try:
            assert spy.prepared == 1 and (retriever.embedder is None) == broken
            result = retriever.search("What do ducks eat?", top_k=3)
            assert result.hits and result.mode_used == ("sparse" if broken else "hybrid")
            assert any("fell back to BM25-only" in warning and "cannot be loaded: cannot load the int8 query model: "
                       "a broken file" in warning for warning in result.warnings) == broken
        finally:
            retriever.close()


def test_the_default_runtime_follows_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """auto: bf16 where the CPU has AMX, int8 elsewhere (without AMX bf16 runs at fp32 speed)."""
    from rag_pipeline import settings as settings_module

    monkeypatch.delenv("RAG_EMBEDDING_RUNTIME", raising=False)
    monkeypatch.setattr(settings_module, "cpu_flags", lambda: frozenset({"avx512f", "amx_bf16", "amx_tile"}))
    assert Settings().embedding_runtime == "openvino-bf16"
    assert Settings().embedding_model_id == DEFAULT_MODEL_ID
    monkeypatch.setattr(settings_module, "cpu_flags", lambda: frozenset({"avx2", "avx512f", "avx512_vnni"}))
    assert Settings().embedding_runtime == "onnx-int8"
    assert Settings().embedding_model_id == DEFAULT_MODEL_ID + "#onnx-int8"
    assert Settings(embedding_runtime="openvino-bf16").embedding_runtime == "openvino-bf16"  # set: kept


def test_onnx_export_is_cached_and_never_downloads(export_dir: Path) -> None:
    first = exported_model(model_dir(), export_dir, "onnx-int8")
    stamp = first.stat().st_mtime_ns
    assert exported_model(model_dir(), export_dir, "onnx-int8") == first and first.stat().st_mtime_ns == stamp
    assert first.stat().st_size < first.with_name("onnx.onnx").stat().st_size  # int8 weights are smaller
    assert not list(export_dir.rglob("*.tmp"))  # written through a temporary file and renamed


def test_onnx_export_refuses_a_model_it_cannot_export(tmp_path: Path) -> None:
    model = tmp_path / "with-dense"
    shutil.copytree(model_dir(), model)
    modules = json.loads((model / "modules.json").read_text())
    (model / "modules.json").write_text(json.dumps([*modules, {"idx": 9, "name": "9", "path": "2_Dense",
                                                               "type": "sentence_transformers.models.Dense"}]))
    with pytest.raises(EmbedderUnavailable, match="RAG_EMBEDDING_RUNTIME=torch"):
        build_embedder(model_path=str(model), runtime="onnx-int8", onnx_cache_dir=str(tmp_path / "cache"))


def test_the_onnx_export_is_shared_by_every_data_dir_of_a_user(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAG_ONNX_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    first, second = Settings(data_dir=tmp_path / "one"), Settings(data_dir=tmp_path / "two")
    assert first.onnx_models_dir == second.onnx_models_dir == tmp_path / "cache" / "rag_pipeline" / "onnx"
    assert first.onnx_models_dir.is_dir()
    # A user without a usable cache directory keeps the export in the data dir.
    (tmp_path / "a file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a file"))
    assert Settings(data_dir=tmp_path / "one").onnx_models_dir == tmp_path / "one" / "models"
    # RAG_ONNX_CACHE_DIR wins.
    monkeypatch.setenv("RAG_ONNX_CACHE_DIR", str(tmp_path / "set"))
    assert Settings(data_dir=tmp_path / "one").onnx_models_dir == tmp_path / "set"
