"""The packaged sentence-transformers model on ONNX Runtime (fp32, or int8-quantised): the same vectors as
PyTorch within cosine 0.9999 (fp32) / 0.995 (int8), at a fraction of the cost per text and per query."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from rag_pipeline.cpu import usable_cores
from rag_pipeline.embed.embedder import DEFAULT_MODEL_ID, Embedder, EmbedderUnavailable, normalise
from rag_pipeline.embed.model_files import max_seq_length, model_dir, model_inputs, model_tokenizer
from rag_pipeline.embed.onnx_export import OnnxRuntimeKind, exported_model

if TYPE_CHECKING:
    from onnxruntime import InferenceSession

# A query is one short forward pass: a second intra-op thread only adds hand-off cost (its idle spinning burns the
# CPU concurrent requests need), and concurrent queries (the API's) run on threads of their own. Measured on 2
# busy cores: 0.97 ms per query with 1 thread, 1.08 ms with 2; at 8 concurrent HTTP clients /search cost 9 ms of
# server CPU with the 2-thread session, 5 ms with this one. Queries are embedded one per pass: batching them is
# slower per query (padding to the longest; 1.4-1.6 ms per query in batches of 8) and the int8 model's activation
# scales span the batch, so a query's vector would depend on its companions (cosine down to 0.987).
QUERY_THREADS = 1
# Documents are embedded by several sessions side by side, each on a thread of its own (ONNX Runtime releases the
# GIL): one single-threaded session per usable core, at most MAX_DOCUMENT_SESSIONS (an int8 session holds ~60 MB),
# beyond which each session gets several intra-op threads. Measured on 2 cores with SciFact chunks (int8, one text
# per pass): one session with 2 intra-op threads 41.7 texts/s, one with 1 thread 43.2, two 1-thread sessions 77.2.
MAX_DOCUMENT_SESSIONS = 8


def onnx_model(model_path: str | None, cache_dir: Path, runtime: OnnxRuntimeKind) -> tuple[Path, Path]:
    """(model directory, ONNX file) of the local model for `runtime`, exported on first use; EmbedderUnavailable
    when the directory is missing or the export fails."""
    directory = model_dir(model_path)
    if not directory.is_dir():
        raise EmbedderUnavailable(f"no sentence-transformers model directory at {directory}")
    try:
        return directory, exported_model(directory, cache_dir, runtime)
    except Exception as error:  # any failure of the export (torch, the quantiser) means the same
        raise EmbedderUnavailable(f"cannot build the {runtime} model of {directory}: {error}") from error


class OnnxEmbedder(Embedder):
    """A local sentence-transformers model exported to ONNX (see onnx_export) and run by ONNX Runtime.

    Texts are tokenized by the model's fast tokenizer, truncated to its window, sorted by length and run in
    batches of `batch_size` (little padding; int8: one per pass), several batches at once on the document sessions
    (see MAX_DOCUMENT_SESSIONS); vectors come back in input order, L2-normalised.
    """

    def __init__(self, model_path: str | None, cache_dir: Path, runtime: OnnxRuntimeKind = "onnx-int8",
                 batch_size: int = 32) -> None:
        directory, onnx_file = onnx_model(model_path, cache_dir, runtime)
        base_id = str(directory.resolve()) if model_path else DEFAULT_MODEL_ID
        self.model_id = base_id if runtime == "onnx" else f"{base_id}#{runtime}"  # fp32 vectors equal torch's
        self.runtime = runtime
        self.batch_size = batch_size
        self._window = max_seq_length(directory)
        self._tokenizer = model_tokenizer(directory)
        self._onnx_file = onnx_file
        self._query_session = self._new_session(QUERY_THREADS)
        cores = usable_cores()
        self._document_sessions = min(cores, MAX_DOCUMENT_SESSIONS)
        self._document_session_threads = max(1, cores // self._document_sessions)
        self._document_pool: ThreadPoolExecutor | None = None  # its threads each make a session on first use
        self._document_pool_lock = threading.Lock()
        self._document_thread = threading.local()
        self._inputs = {item.name for item in self._query_session.get_inputs()}
        self.dimension = len(self._run(["dimension"], self._query_session)[0])

    def _new_session(self, threads: int) -> InferenceSession:
        import onnxruntime  # deferred: loading it takes a while

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        return onnxruntime.InferenceSession(str(self._onnx_file), options, providers=["CPUExecutionProvider"])

    def _run(self, texts: Sequence[str], session: InferenceSession) -> np.ndarray:
        """One forward pass over texts of similar length."""
        feed = model_inputs(self._tokenizer.encode_batch(list(texts)), self._window)
        return session.run(None, {name: value for name, value in feed.items() if name in self._inputs})[0]

    def _pool(self) -> ThreadPoolExecutor:
        with self._document_pool_lock:
            if self._document_pool is None:
                self._document_pool = ThreadPoolExecutor(self._document_sessions, thread_name_prefix="embed")
            return self._document_pool

    def _run_on_document_session(self, texts: Sequence[str]) -> np.ndarray:
        """One forward pass on this pool thread's own session (made on its first batch)."""
        session = getattr(self._document_thread, "session", None)
        if session is None:
            session = self._document_thread.session = self._new_session(self._document_session_threads)
        return self._run(texts, session)

    def embed_documents(self, texts: Sequence[str]) -> np.ndarray:
        """In batches of similar length (fp32), or one text per pass (int8: its activations are quantised with
        one scale per pass, so a batch would make a text's vector depend on its companions; measured on
        SciFact, one per pass is as fast and slightly closer to fp32: cosine mean 0.9953 vs 0.9951). A single
        batch runs on the calling thread (on the query session); more are shared out among the document
        sessions."""
        vectors = np.empty((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return vectors
        order = np.argsort([len(text) for text in texts], kind="stable")
        step = 1 if self.runtime == "onnx-int8" else self.batch_size
        batches = [order[start:start + step] for start in range(0, len(texts), step)]
        if len(batches) == 1:
            vectors[order] = self._run([texts[row] for row in order], self._query_session)
        else:
            done = self._pool().map(lambda rows: self._run_on_document_session([texts[row] for row in rows]), batches)
            for rows, embedded in zip(batches, done):
                vectors[rows] = embedded
        return normalise(vectors)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed_queries([text])[0]

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """One forward pass per query on the query session (QUERY_THREADS): a query's vector is the same alone
        or among others."""
        vectors = np.empty((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            vectors[row] = self._run([text], self._query_session)[0]
        return normalise(vectors)
