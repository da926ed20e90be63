#!/usr/bin/env bash
# Download, HERE (where PyPI is reachable), the wheels that the GPU machine's image lacks, for its Python 3.12,
# into .whl/ (git-ignored through .git/info/exclude). The image already holds torch (CUDA), tokenizers,
# huggingface_hub, safetensors, accelerate, numpy, pillow, httpx, anyio, h11, uvloop, prometheus-client, pytest,
# rich and tqdm (see the device tool's KINDS.md). Versions are the ones CI installs on CPU machines.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
PY=${PYTHON:-.venv/bin/python}
WHEELS=(transformers==5.23.0 av==18.1.0 soundfile==0.14.0 cffi==2.1.1 pycparser==3.12 fastapi==0.165.0
        starlette==1.10.0 uvicorn==0.54.0 pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0
        typing-inspection==0.4.5 python-multipart==0.0.34 zstandard==0.25.0 httptools==0.9.0
        torchao==0.18.0 bitsandbytes==0.50.2)   # --quantize (issue 33): the [quantize] extra's pins
mkdir -p .whl
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_31_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64 \
  --platform any -d .whl "${WHEELS[@]}"
du -sh .whl
