"""BM25 sparse vectors, computed in-process by qdrant-edge's encoder for both vector store backends.

Documents get BM25 term-frequency weights, queries weight 1 per token; Qdrant multiplies in the IDF at query
time (the collection's sparse vector has the IDF modifier), so weights never depend on the rest of the corpus.
"""

from __future__ import annotations

import qdrant_edge

from rag_pipeline.index.vector_store import SparseVector

# English tokenization, stopwords and Snowball stemming. avg_len is the typical number of tokens left in a
# default 512-character chunk; changing any setting requires re-indexing.
BM25_CONFIG = qdrant_edge.Bm25Config(k=1.2, b=0.75, avg_len=50.0, language="english")
SPARSE_ID = "bm25-k1.2-b0.75-avg50-english"  # names these settings in the index generation

_model = qdrant_edge.Bm25(BM25_CONFIG)


def encode_document(text: str) -> SparseVector:
    """BM25 weights of a chunk's text, to index."""
    return _convert(_model.embed_document(text))


def encode_query(text: str) -> SparseVector:
    """Token weights of a query, to search with."""
    return _convert(_model.embed_query(text))


def _convert(vector: qdrant_edge.SparseVector) -> SparseVector:
    return SparseVector(indices=list(vector.indices), values=list(vector.values))
