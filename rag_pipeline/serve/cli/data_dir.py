"""The data dir a command reads must be there: a command started in the wrong folder (or with a mistyped --data-dir)
is refused with the way to create an index, before anything opens (and so creates) files in it."""

from __future__ import annotations

from rag_pipeline.errors import ConfigError
from rag_pipeline.index.generations import GenerationRegistry
from rag_pipeline.settings import Settings


def how_to_create(settings: Settings) -> str:
    data_dir = settings.data_dir.resolve()
    return (f"create one with `rag-pipeline ingest FOLDER --data-dir {data_dir}` (or `make demo` for the sample "
            "corpus in ./.rag_data), or point --data-dir (RAG_DATA_DIR) at an existing data dir")


def require_data_dir(settings: Settings) -> None:
    """ConfigError (code no_index) when the data dir does not exist; nothing is created."""
    if not settings.data_dir.is_dir():
        raise ConfigError(f"no index in {settings.data_dir.resolve()}: the directory does not exist; "
                          f"{how_to_create(settings)}", code="no_index")


def require_index(settings: Settings) -> None:
    """ConfigError (code no_index) when the data dir does not exist or no ingest has switched an index on in it;
    nothing is created. A data dir from before index generations (a sidecar, no generations.json) passes: opening
    it adopts its collection."""
    require_data_dir(settings)
    registry = GenerationRegistry(settings.data_dir)
    legacy = not registry.exists() and settings.sidecar_path.is_file()
    if registry.active_id() is None and not legacy:
        raise ConfigError(f"no index in {settings.data_dir.resolve()}: no ingest has completed there; "
                          f"{how_to_create(settings)}", code="no_index")
