# omni-decide: the System One decision service (`omni serve`) on a CUDA runtime image.
# Weights are never baked in: mount a checkpoint directory (released Clef-omni layout) read-only at /models.
#
#   docker build -t omni-decide .
#   docker run --gpus all --init -p 8000:8000 -v /data/clef-omni:/models:ro --stop-timeout 70 omni-decide
#
# Build args: CUDA_IMAGE (runtime base), TORCH_INDEX / TORCH_VERSION (a CUDA torch build matching the base).
ARG CUDA_IMAGE=nvidia/cuda:12.8.1-runtime-ubuntu24.04
FROM ${CUDA_IMAGE}

ARG TORCH_INDEX=https://download.pytorch.org/whl/cu128
ARG TORCH_VERSION=2.13.0
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates curl libsndfile1 \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/venv

# torch first and on its own layer: the CUDA build, not PyPI's default, and cached across code changes.
RUN pip install --index-url "${TORCH_INDEX}" "torch==${TORCH_VERSION}"

WORKDIR /opt/omni-decide
COPY pyproject.toml README.md ./
COPY omni ./omni
COPY preprocess ./preprocess
COPY api ./api
COPY fixtures ./fixtures
RUN pip install ".[serve]" && python -c "import api.cli.serve, omni.serve.engine, preprocess"

# Non-root; its home holds the HF cache (hub ids) and the tiny default (built on first use without a model).
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin omni && mkdir -p /models && chown omni /models
USER omni
ENV HOME=/home/omni \
    OMNI_HOST=0.0.0.0 \
    OMNI_PORT=8000 \
    OMNI_MODEL=/models
VOLUME ["/models"]
EXPOSE 8000
STOPSIGNAL SIGTERM
# /health is liveness (200 while the model loads); /ready says when it answers. The start period covers loading.
HEALTHCHECK --interval=15s --timeout=3s --start-period=600s --retries=3 \
  CMD curl -fsS "http://127.0.0.1:${OMNI_PORT}/health" || exit 1

ENTRYPOINT ["omni", "serve"]
CMD []
