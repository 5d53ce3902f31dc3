"""Pick the vector store backend from the settings: the Qdrant server store when a URL (or ":memory:") is
configured, else the embedded qdrant-edge store. The only module that imports both backends; each is imported
when chosen (qdrant-client alone takes over a second to import)."""

from __future__ import annotations

from pathlib import Path

from rag_pipeline.index.vector_store import (
    HnswSettings,
    VectorStore,
    collection_name,
    is_connection_error,
    store_unreachable,
)


def open_vector_store(
    *,
    data_dir: Path,
    model_id: str,
    dimension: int,
    qdrant_url: str | None = None,
    qdrant_api_key: str | None = None,
    hnsw: HnswSettings = HnswSettings(),
    location: str | None = None,
    collection: str | None = None,
) -> VectorStore:
    """The server store when a Qdrant URL or client location (":memory:") is given, else the embedded store.

    qdrant_url=":memory:" selects one process-wide in-memory client (the server code path, in-process).
    `collection` overrides the name derived from the model (for a second collection such as the query cache).
    A server that cannot be reached raises StoreUnavailable naming it and RAG_QDRANT_URL.
    """
    collection = collection or collection_name(model_id, dimension)
    if qdrant_url == ":memory:":
        from rag_pipeline.index.server_store import ServerStore, shared_memory_client

        return ServerStore(shared_memory_client(), collection, dimension, hnsw, owns_client=False)
    if qdrant_url or location:
        from rag_pipeline.index.server_store import ServerStore, connect

        client = connect(url=qdrant_url, api_key=qdrant_api_key, location=location)
        try:
            return ServerStore(client, collection, dimension, hnsw)
        except Exception as error:
            client.close()
            if is_connection_error(error):
                raise store_unreachable(f"Qdrant server {qdrant_url or location} (collection {collection})",
                                        error) from error
            raise
    from rag_pipeline.index.edge_store import open_edge_store

    return open_edge_store(data_dir / "qdrant_edge" / collection, collection, dimension, hnsw)
