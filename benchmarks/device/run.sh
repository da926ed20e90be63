#!/usr/bin/env bash
# The one prepared GPU check for issue 4's benchmark (and the CUDA parity tests), for a session that is lent the
# H200 through the device tool. Here, once: `bash benchmarks/device/fetch_wheels.sh` (about 58 MB of wheels into
# .whl/). Then one device call, about 5 minutes with the machine's start:
#     run  command: "bash benchmarks/device/run.sh"   carry: [".whl"]   timeout_s: 480
# It writes env.txt, gpu_tests.txt, load_mixed.txt and load_text.txt under $OUT; copy the figures into
# benchmarks/RESULTS.md. `--no-install` skips the wheels (a machine that has the project's dependencies, e.g. here
# with `.venv/bin` first on PATH, for a dry run on CPU). `--smoke`: the same steps with no wheels and every benchmark
# at its smoke sizes (`--smoke`), realsize included, a check that the call would run (here: `PY=.venv/bin/python
# bash benchmarks/device/run.sh --smoke`, a few minutes on 2 shared cores). PY: the interpreter (default python3).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/omni-device-out}
mkdir -p "$OUT"
PY=${PY:-python3}
INSTALL=1
SMOKE=()
for arg in "$@"; do
  case "$arg" in
    --no-install) INSTALL=0 ;;
    --smoke) INSTALL=0; SMOKE=(--smoke); REALSIZE=1 ;;
    *) echo "usage: run.sh [--no-install] [--smoke]" >&2; exit 2 ;;
  esac
done
if [ "$INSTALL" = 1 ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed" | tee "$OUT/env.txt"; exit 1; }
  export PYTHONPATH=/tmp/site
fi
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD" PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | head -3
  $PY -c "import torch, transformers, av, fastapi, uvicorn; print('torch', torch.__version__, 'cuda', \
torch.cuda.is_available(), 'transformers', transformers.__version__, 'av', av.__version__, 'uvicorn', uvicorn.__version__)"
  nproc; } 2>&1 | tee "$OUT/env.txt"
timeout 150 $PY -m pytest -q -p no:cacheprovider tests/gpu 2>&1 | tail -15 | tee "$OUT/gpu_tests.txt"
# two servers + the client share the machine's 16 cores: 4 torch threads each
timeout 150 $PY benchmarks/load.py --torch-threads 4 "${SMOKE[@]}" 2>&1 | grep -v "Loading weights" \
  | tee "$OUT/load_mixed.txt"
timeout 120 $PY benchmarks/load.py --torch-threads 4 --mix text --overhead-requests 100 "${SMOKE[@]}" 2>&1 \
  | grep -v "Loading weights" | tee "$OUT/load_text.txt"
# Real-size latency (benchmarks/device/realsize.py: the 30B thinker + Clef head with random weights): its full run
# needs a device call of its own (the exact call is at the top of realsize.py). Here only with REALSIZE=1 (and
# timeout_s 600), in what the steps above leave of 570 s.
if [ "${REALSIZE:-0}" = 1 ]; then
  left=$((570 - SECONDS))
  if [ "$left" -gt 240 ]; then
    timeout "$left" $PY benchmarks/device/realsize.py --budget-s $((left - 40)) "${SMOKE[@]}" 2>&1 \
      | tee "$OUT/realsize.txt"
  else
    echo "realsize skipped: only ${left} s left of this call" | tee "$OUT/realsize.txt"
  fi
fi
