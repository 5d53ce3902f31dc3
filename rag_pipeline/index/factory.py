"""Pick the vector store backend from the settings: the Qdrant server store when a URL (or ":memory:") is
configured, else the embedded qdrant-edge store. The only module that imports both backends; each is imported
when chosen (qdrant-client alone takes over a second to import)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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


@contextmanager
def server_client(qdrant_url: str, qdrant_api_key: str | None) -> Iterator[Any]:
    """A client of the Qdrant server (the shared in-process client for ":memory:"), closed on exit if it was opened
    here; a server that cannot be reached raises StoreUnavailable naming it."""
    from rag_pipeline.index.server_store import connect, shared_memory_client

    owned = qdrant_url != ":memory:"
    client = connect(url=qdrant_url, api_key=qdrant_api_key, location=None) if owned else shared_memory_client()
    try:
        yield client
    except Exception as error:
        if is_connection_error(error):
            raise store_unreachable(f"Qdrant server {qdrant_url}", error) from error
        raise
    finally:
        if owned:
            client.close()


def collection_exists(data_dir: Path, collection: str, qdrant_url: str | None = None,
                      qdrant_api_key: str | None = None) -> bool:
    """Whether the collection holds data: on the server, or as an embedded shard folder under the data dir."""
    if not qdrant_url:
        folder = data_dir / "qdrant_edge" / collection
        return folder.is_dir() and any(folder.iterdir())
    with server_client(qdrant_url, qdrant_api_key) as client:
        return client.collection_exists(collection)


def point_alias(qdrant_url: str, qdrant_api_key: str | None, alias: str, collection: str) -> None:
    """Move the server's alias to `collection` in one atomic alias update (created when missing)."""
    from qdrant_client import models

    with server_client(qdrant_url, qdrant_api_key) as client:
        operations: list = []
        if alias_of(client, alias) is not None:
            operations.append(models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=alias)))
        operations.append(models.CreateAliasOperation(
            create_alias=models.CreateAlias(collection_name=collection, alias_name=alias)))
        client.update_collection_aliases(change_aliases_operations=operations)


def alias_target(qdrant_url: str, qdrant_api_key: str | None, alias: str) -> str | None:
    """The collection the server's alias points to (None when the alias does not exist)."""
    with server_client(qdrant_url, qdrant_api_key) as client:
        return alias_of(client, alias)


def alias_of(client: Any, alias: str) -> str | None:
    return next((entry.collection_name for entry in client.get_aliases().aliases if entry.alias_name == alias), None)
