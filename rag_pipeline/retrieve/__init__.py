"""Query-time retrieval: hybrid search over the vector store, fusion, multi-fragment queries, post-processing.

Pure library code (no Dagster import): the Dagster resource, the HTTP API, the CLI and the eval reuse
`Retriever`.
"""

from rag_pipeline.retrieve.retriever import RetrievalResult, RetrievalSettings, Retriever

__all__ = ["RetrievalResult", "RetrievalSettings", "Retriever"]
