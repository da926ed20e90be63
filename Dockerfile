# omni-decide: the System One decision service (`omni serve`). One Dockerfile, two images (docs/deployment.md#docker):
#
#   the CUDA image (the defaults): a CUDA 12.8 runtime base + a CUDA torch build, for GPU machines
#     docker build -t omni-decide .
#     docker run --gpus all --init -p 8000:8000 -v /data/clef-omni:/models:ro --stop-timeout 70 omni-decide
#   the CPU image: a Debian base + the CPU torch build (scripts/image-check.sh builds and proves this one in CI)
#     docker build -t omni-decide:cpu --build-arg BASE_IMAGE=debian:bookworm-slim \
#       --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cpu --build-arg TORCH_VERSION=2.13.0+cpu .
#
# Weights are never baked in: mount a checkpoint directory (released Clef-omni layout) read-only at /models. The
# embedded demo checkpoint (omni/model/checkpoints/tiny-inspection-v1, 1.5 MB) is in the image: `-e OMNI_MODEL=`
# serves it. Build args: BASE_IMAGE (a Debian/Ubuntu base with python3 >= 3.10), TORCH_INDEX / TORCH_VERSION (a torch
# build that matches the base), PIP_CONFIG_FILE (optional: a pip configuration mounted into the build, e.g. a local
# wheel folder or a proxy's CA bundle; scripts/image-check.sh uses it).
ARG BASE_IMAGE=nvidia/cuda:12.8.1-runtime-ubuntu24.04
FROM ${BASE_IMAGE}

ARG TORCH_INDEX=https://download.pytorch.org/whl/cu128
ARG TORCH_VERSION=2.13.0
ARG PIP_CONFIG_FILE
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

# Not version-pinned: the same line serves two bases (Ubuntu 24.04, Debian 12) whose versions differ (.hadolint.yaml).
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv ca-certificates curl libsndfile1 \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/venv

# torch first and on its own layer: the build the base needs (CUDA or CPU), not PyPI's default, cached across code
# changes.
RUN pip install --index-url "${TORCH_INDEX}" "torch==${TORCH_VERSION}"

WORKDIR /opt/omni-decide
COPY pyproject.toml README.md ./
COPY omni ./omni
COPY preprocess ./preprocess
COPY api ./api
COPY fixtures ./fixtures
# The installed package (python -I: not this source tree) must import and hold the complete demo checkpoint, with
# readable safetensors headers: a .dockerignore that drops it fails the build here, not a container at run time.
RUN pip install "./[serve]" \
 && python -I -c "import api.cli.serve, omni.serve.engine, preprocess; \
from safetensors import safe_open; \
from omni.model.checkpoint import DEMO_CHECKPOINT_DIR as d, check_checkpoint_files; \
check_checkpoint_files(d); \
[safe_open(str(p), 'np').keys() for p in sorted(d.glob('*.safetensors'))]; \
print('demo checkpoint:', d)"

# Non-root (numeric, so the host can resolve it); its home holds the HF cache (hub ids).
RUN useradd --create-home --uid 10001 --shell /usr/sbin/nologin omni && mkdir -p /models && chown omni /models
USER 10001
ENV HOME=/home/omni \
    OMNI_HOST=0.0.0.0 \
    OMNI_PORT=8000 \
    OMNI_MODEL=/models
VOLUME ["/models"]
EXPOSE 8000
STOPSIGNAL SIGTERM
# /health is liveness (200 while the model loads); /ready says when it answers. The start period covers loading.
HEALTHCHECK --interval=15s --timeout=3s --start-period=600s --retries=3 \
  CMD ["sh", "-c", "curl -fsS \"http://127.0.0.1:${OMNI_PORT}/health\" || exit 1"]

ENTRYPOINT ["omni", "serve"]
CMD []
