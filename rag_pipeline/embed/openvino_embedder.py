"""The packaged sentence-transformers model on OpenVINO in bfloat16 for documents: on CPUs with AMX, 1.3-1.4x the
texts/s of the int8 model, with the fp32 model's vectors (cosine 0.9999 to PyTorch's); queries on the int8 model."""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import threading
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rag_pipeline.cpu import cpu_flags, usable_cores
from rag_pipeline.embed.embedder import DEFAULT_MODEL_ID, Embedder, EmbedderUnavailable, normalise
from rag_pipeline.embed.model_files import declared_dimension, max_seq_length, model_inputs, model_tokenizer
from rag_pipeline.embed.onnx_embedder import OnnxEmbedder, onnx_model
from rag_pipeline.file_lock import locked

if TYPE_CHECKING:
    from openvino import CompiledModel, Core, InferRequest

log = logging.getLogger(__name__)

# Texts per pass, and the step their padded width is rounded up to: OpenVINO compiles kernels per input shape, so
# few distinct widths keep its shape cache warm. Measured on 2 cores (AMX) with 2,000 SciFact chunks, bf16: 16
# texts per pass 141-148 texts/s, 8 135-140, 32 126; widths rounded to 16 pieces 141, to 8 130-138.
DOCUMENT_BATCH = 16
WIDTH_STEP = 16
# A query is one short pass that streams all the weights from memory, and int8's are half the size of bf16's: one
# SciFact claim took 7.7 ms in bf16 and 4.8 ms in int8 after 15 ms of other work (the API's case), 3.8 and 2.6 ms
# back to back. So queries run on the int8 model (ONNX Runtime), within cosine 0.995 of the fp32 query vectors; on
# SciFact train, int8 queries against bf16 documents scored nDCG@10 dense 0.6892 and hybrid 0.7426, bf16 queries
# 0.6873 and 0.7436.


class OpenVinoEmbedder(Embedder):
    """The model's fp32 ONNX graph (onnx_export) compiled by OpenVINO for the CPU with bfloat16 inference.

    Documents are tokenized once, sorted by length and run DOCUMENT_BATCH to a pass, as many passes at once as the
    model has streams (one single-threaded stream per usable core; compiled on the first documents, so a process
    that only answers queries never holds it). Queries run on the int8 model (see above), loaded when a retriever
    starts (prepare_queries) or on the first query, so an ingest never holds it. Where the CPU has no bfloat16
    instructions OpenVINO computes in fp32: the same vectors, more slowly (RAG_EMBEDDING_RUNTIME=auto picks this
    runtime only on CPUs with AMX).
    """

    def __init__(self, model_path: str | None, cache_dir: Path) -> None:
        onnx_model(model_path, cache_dir, "onnx-int8")  # for the queries; its export leaves the fp32 graph too
        directory, self._onnx_file = onnx_model(model_path, cache_dir, "onnx")
        self._model_path, self._cache_dir = model_path, cache_dir
        # bf16 vectors are the fp32 model's within cosine 0.9999, so they share its id (cache, artifacts, index)
        self.model_id = str(directory.resolve()) if model_path else DEFAULT_MODEL_ID
        self._window = max_seq_length(directory)
        self._tokenizer = model_tokenizer(directory)
        self._model: CompiledModel | None = None
        self._query_model: OnnxEmbedder | None = None
        self._model_lock, self._query_lock = threading.Lock(), threading.Lock()  # a compile never holds up a query
        # every exported model has this pooling dimension (onnx_export refuses modules that change it)
        self.dimension = declared_dimension(model_path) or self._queries().dimension

    def _compiled_model(self) -> CompiledModel:
        """The documents' model: bfloat16 inference, one single-threaded stream per usable core."""
        with self._model_lock:
            if self._model is None:
                self._model = _compiled(self._onnx_file, usable_cores())
            return self._model

    def _queries(self) -> OnnxEmbedder:
        """The int8 model queries run on, made on the first query or prepare_queries (~0.2 s): an ingest never
        needs it."""
        with self._query_lock:
            if self._query_model is None:
                try:
                    self._query_model = OnnxEmbedder(self._model_path, self._cache_dir, "onnx-int8")
                except EmbedderUnavailable:
                    raise
                except Exception as error:  # onnxruntime cannot load the exported file, say
                    raise EmbedderUnavailable(f"cannot load the int8 query model: {error}") from error
            return self._query_model

    def prepare_queries(self) -> None:
        self._queries()

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """In passes of DOCUMENT_BATCH texts of similar length, one per stream at a time. Passes are started and
        collected by this thread (no Python callback runs on OpenVINO's threads, which would need the GIL)."""
        vectors = np.empty((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return vectors
        encodings = self._tokenizer.encode_batch(list(texts))
        order = np.argsort([len(encoding.ids) for encoding in encodings], kind="stable")
        batches = [order[start:start + DOCUMENT_BATCH] for start in range(0, len(texts), DOCUMENT_BATCH)]
        model = self._compiled_model()
        inputs = {name for port in model.inputs for name in port.get_names()}
        idle = deque(model.create_infer_request() for _ in range(min(model.get_property("NUM_STREAMS"), len(batches))))
        running: deque[tuple[InferRequest, np.ndarray]] = deque()

        def collect() -> None:
            request, rows = running.popleft()
            request.wait()
            vectors[rows] = request.get_output_tensor(0).data
            idle.append(request)

        try:
            for rows in batches:
                if not idle:
                    collect()  # passes of similar length finish in about the order they started
                request = idle.popleft()
                feed = model_inputs([encodings[row] for row in rows], self._window, WIDTH_STEP)
                request.start_async({name: value for name, value in feed.items() if name in inputs})
                running.append((request, rows))
            while running:
                collect()
        finally:  # after an error: no request is freed while it runs
            for request, _ in running:
                request.wait()
        return normalise(vectors)

    def embed_query(self, text: str) -> np.ndarray:
        return self._queries().embed_query(text)

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._queries().embed_queries(texts)


# How the documents' model is compiled, besides its streams (which OpenVINO sets when it reads a cached model).
COMPILE_CONFIG = {"INFERENCE_PRECISION_HINT": "bf16", "PERFORMANCE_HINT": "THROUGHPUT", "ENABLE_CPU_PINNING": False}


def _compiled(onnx_file: Path, streams: int) -> CompiledModel:
    """The ONNX graph compiled for the CPU: bfloat16 inference, `streams` single-threaded streams, threads not
    pinned to cores (a process pinned with taskset, or sharing the machine, keeps its own placement). Through
    OpenVINO's model cache (see compiled_model_cache) when its folder is writable."""
    try:
        import openvino
    except ImportError as error:
        raise EmbedderUnavailable("the openvino-bf16 runtime needs the openvino package") from error
    config = {**COMPILE_CONFIG, "NUM_STREAMS": streams, "INFERENCE_NUM_THREADS": streams}
    cache = compiled_model_cache(onnx_file, openvino.__version__)
    if cache is not None:
        try:
            return _compiled_through_cache(openvino.Core(), onnx_file, config, cache)
        except (RuntimeError, OSError) as error:
            log.warning("OpenVINO's model cache in %s failed (%s): compiling without it", cache, error)
    try:
        return openvino.Core().compile_model(str(onnx_file), "CPU", config)
    except RuntimeError as error:
        raise EmbedderUnavailable(f"OpenVINO cannot compile {onnx_file}: {error}") from error


def _compiled_through_cache(core: Core, onnx_file: Path, config: dict[str, object], cache: Path) -> CompiledModel:
    """Read from the blob in `cache`, or compiled once: the first process compiles under a lock (the others wait),
    its blob written in a staging folder and renamed in, so that no process reads half a blob. (OpenVINO itself
    compiles again, and rewrites the blob, when one it reads is damaged.)"""
    if not any(cache.glob("*.blob")):
        with locked(cache / ".lock"):
            if not any(cache.glob("*.blob")):  # another process may have written it while this one waited
                staging = Path(tempfile.mkdtemp(prefix=".compiling-", dir=cache))
                try:
                    model = core.compile_model(str(onnx_file), "CPU", {**config, "CACHE_DIR": str(staging)})
                    for blob in staging.glob("*.blob"):
                        os.replace(blob, cache / blob.name)
                    return model
                finally:
                    shutil.rmtree(staging, ignore_errors=True)
    return core.compile_model(str(onnx_file), "CPU", {**config, "CACHE_DIR": str(cache)})


def compiled_model_cache(onnx_file: Path, openvino_version: str) -> Path | None:
    """The folder of OpenVINO's compiled-model cache for `onnx_file`: beside the export, one per OpenVINO version,
    CPU (a compiled graph is made for the instructions it found) and COMPILE_CONFIG. Reading the ~90 MB blob takes
    ~0.13 s of a core where compiling takes ~0.4 s (more when several workers start at once). None when it cannot
    be written."""
    build = hashlib.sha256(" ".join([openvino_version, repr(sorted(COMPILE_CONFIG.items())), *sorted(cpu_flags())])
                           .encode()).hexdigest()[:12]
    folder = onnx_file.parent / f"openvino-{openvino_version.split('-')[0]}-{build}"  # the version: 2026.4.1-2298-...
    try:
        folder.mkdir(exist_ok=True)
    except OSError:
        return None
    return folder if os.access(folder, os.W_OK) else None
