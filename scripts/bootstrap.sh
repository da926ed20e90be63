#!/usr/bin/env bash
# Creates .venv and installs omni-decide with every extra. Idempotent; safe to re-run.
# CPU machines get the local CPU torch wheel (torch==2.13.0). GPU users: install your CUDA torch build into the
# venv first (or set OMNI_KEEP_TORCH=1 with a torch already present) and it is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
if ! .venv/bin/python -c "import torch" 2>/dev/null && [ "${OMNI_KEEP_TORCH:-0}" != "1" ]; then
  .venv/bin/python -m pip install -q "torch==2.13.0"
fi
.venv/bin/python -m pip install -q -e ".[serve,train,dev]"
echo "omni-decide installed in .venv ($(.venv/bin/python -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'))" >&2
