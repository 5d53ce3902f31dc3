# rag_pipeline — `make demo` and `make test` work on a fresh machine (Python 3.11, no server needed).
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
DATA_DIR ?= .rag_data
RAG_DAGSTER_STORAGE ?= sqlite
DAGSTER_HOME_DIR := $(abspath $(DATA_DIR))/dagster_home
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1

.PHONY: install demo test test-fast dev bench clean

install: $(VENV)/.installed

# CPU torch first (the wheel pip finds for torch==2.13.0 here); every later requirement is satisfied by it,
# so pip never pulls the CUDA build. torchvision must stay out: it breaks docling's import.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -qq --upgrade pip
	$(BIN)/pip install -qq torch==2.13.0
	$(BIN)/pip install -qq -e ".[test]"
	@if $(BIN)/pip show --quiet torchvision 2>/dev/null; then echo "torchvision got installed; it breaks docling" >&2; exit 1; fi
	@$(BIN)/python -c "import torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
	touch $@

demo: install
	$(dagster_home)
	DAGSTER_HOME=$(DAGSTER_HOME_DIR) $(BIN)/rag-pipeline ingest golden/corpus --data-dir $(DATA_DIR)

test: install
	$(BIN)/python -m pytest -q -ra --durations=15

test-fast: install
	$(BIN)/python -m pytest -q -m "not slow"

# `make demo` and `make dev` share this Dagster instance (<data dir>/dagster_home): the UI lists the demo's runs.
define dagster_home
	mkdir -p $(DAGSTER_HOME_DIR)
	@case "$(RAG_DAGSTER_STORAGE)" in \
	  sqlite) cp dagster.yaml $(DAGSTER_HOME_DIR)/dagster.yaml ;; \
	  postgres) for v in DAGSTER_PG_USERNAME DAGSTER_PG_PASSWORD DAGSTER_PG_HOST DAGSTER_PG_PORT DAGSTER_PG_DB; do \
	      printenv $$v >/dev/null || { echo "RAG_DAGSTER_STORAGE=postgres needs $$v (see deploy/dagster-postgres.yaml)" >&2; exit 1; }; done; \
	    cp deploy/dagster-postgres.yaml $(DAGSTER_HOME_DIR)/dagster.yaml ;; \
	  *) echo "RAG_DAGSTER_STORAGE must be sqlite or postgres, got '$(RAG_DAGSTER_STORAGE)'" >&2; exit 1 ;; \
	esac
endef

dev: install
	$(dagster_home)
	DAGSTER_HOME=$(DAGSTER_HOME_DIR) RAG_DATA_DIR=$(abspath $(DATA_DIR)) RAG_ROOTS=$${RAG_ROOTS:-$(abspath golden/corpus)} \
		$(BIN)/dagster dev -h 127.0.0.1 -p 3000 -w workspace.yaml

BENCH_DIR ?= .bench
# The BEIR SciFact folder (corpus.jsonl, queries.jsonl, qrels/test.tsv) is not part of the repository: name it.
ifneq ($(filter bench,$(MAKECMDGOALS)),)
ifndef SCIFACT
$(error make bench needs SCIFACT=<folder of the BEIR SciFact dataset: corpus.jsonl, queries.jsonl, qrels/test.tsv>)
endif
endif

# Every figure of bench_embed, bench_ingest, bench_query and the BEIR run ends up in $(BENCH_DIR)/bench.json (bench/collect.py).
bench: install
	$(BIN)/python bench/bench_convert.py
	$(BIN)/python bench/bench_embed.py --json $(BENCH_DIR)/embed.json
	$(BIN)/python bench/bench_ingest.py --work $(BENCH_DIR) --json $(BENCH_DIR)/ingest.json
	$(BIN)/python bench/bench_query.py --work $(BENCH_DIR) --json $(BENCH_DIR)/query.json
	# the BEIR run ingests the same texts into its own data dir: seed its embedding cache from the ingest bench
	mkdir -p $(BENCH_DIR)/beir/scifact/data
	cp -n $(BENCH_DIR)/data/embedding_cache.sqlite $(BENCH_DIR)/beir/scifact/data/ || true
	$(BIN)/rag-pipeline beir $(SCIFACT) --split test --data-dir $(BENCH_DIR) --json > $(BENCH_DIR)/beir.json
	$(BIN)/python bench/collect.py $(BENCH_DIR)/bench.json embed=$(BENCH_DIR)/embed.json ingest=$(BENCH_DIR)/ingest.json \
		query=$(BENCH_DIR)/query.json beir=$(BENCH_DIR)/beir.json
	$(BIN)/rag-pipeline guard-eval --data-dir $(BENCH_DIR)

clean:
	rm -rf $(DATA_DIR) $(BENCH_DIR)
