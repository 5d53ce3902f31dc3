# syntax=docker/dockerfile:1
# One image for every rag_pipeline service of docker-compose.yml: the Dagster code location (default CMD, a gRPC
# code server on port 4000), dagster-webserver, dagster-daemon and the HTTP API (`rag-pipeline serve`).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    HF_HUB_DISABLE_PROGRESS_BARS=1 \
    DAGSTER_HOME=/opt/dagster/home

WORKDIR /app

# 1. The CPU torch wheel first, from PyTorch's CPU index: the project's torch==2.13.0 pin is then already
#    satisfied (2.13.0+cpu), so no later install pulls the CUDA build.
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu

# 2. The project's pinned dependencies, read from pyproject.toml (this layer is rebuilt only when that file
#    changes), PostgreSQL storage for the Dagster instance and the Celery executor of the compose file's `worker`
#    service (dagster-postgres and dagster-celery 0.29.27 pair with dagster 1.13.27).
COPY pyproject.toml ./
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" \
        > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt dagster-postgres==0.29.27 dagster-celery==0.29.27 \
 && rm /tmp/requirements.txt

# 3. The project itself (.dockerignore keeps .venv, .rag_data, .bench, caches and .git out). Installed in place
#    (editable, dependencies already there): rag_pipeline.definitions loads the defs folder through
#    dg.load_from_defs_folder, which needs /app/pyproject.toml ([tool.dg]) above the package, and the default
#    golden set (golden/sample_golden.yaml) is found next to the package; a copy in site-packages has neither.
COPY . .
RUN pip install --no-deps -e . \
 && if pip show --quiet torchvision 2>/dev/null; then echo "torchvision got installed; it breaks docling's import" >&2; exit 1; fi \
 && python -c "import torch; assert torch.__version__ == '2.13.0+cpu', torch.__version__" \
 && pip check

# Instance config (PostgreSQL storage, run queue, pool limits) and the workspace of the webserver and daemon.
COPY deploy/dagster/dagster.yaml deploy/dagster/workspace.yaml /opt/dagster/home/

# An unprivileged user; named volumes mounted on /data and /opt/dagster/storage start out owned by it.
RUN useradd --create-home --uid 10001 rag \
 && mkdir -p /data /corpus /opt/dagster/storage /opt/rag/onnx \
 && chown -R rag /data /opt/dagster /opt/rag
USER rag

# The packaged model's ONNX export, made once here so that no container pays it (~9 s) on its first ingest: int8,
# and the fp32 graph it is quantised from, which openvino-bf16 compiles (RAG_EMBEDDING_RUNTIME=auto picks one of
# the two by the CPU the container runs on).
ENV RAG_ONNX_CACHE_DIR=/opt/rag/onnx
RUN python -c "from rag_pipeline.components import embedder; from rag_pipeline.settings import Settings; \
embedder(Settings(embedding_runtime='onnx-int8'))"

EXPOSE 4000 3000 8000
CMD ["dagster", "code-server", "start", "-h", "0.0.0.0", "-p", "4000", "-m", "rag_pipeline.definitions", \
     "--location-name", "rag_pipeline"]
