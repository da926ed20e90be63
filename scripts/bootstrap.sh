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
.venv/bin/python -m pip install -q -e ".[serve,train,dev,cluster]"
echo "omni-decide installed in .venv ($(.venv/bin/python -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'))" >&2
# The workbench's browser tests drive the system's Chromium (Playwright never downloads a browser here).
if ! command -v chromium >/dev/null 2>&1 && [ -z "${OMNI_CHROMIUM:-}" ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's chromium for the browser tests" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "could not install chromium: the browser tests will be skipped" >&2
  else
    echo "no chromium found: the browser tests will be skipped (apt-get install chromium, or OMNI_CHROMIUM=PATH)" >&2
  fi
fi
# The accessibility test (tests/browser/test_accessibility.py) runs axe-core in the page: installed from the npm
# registry into the git-ignored .venv/axe, at one pinned version.
AXE_CORE_VERSION=4.14.1
if grep -qs "\"version\": \"$AXE_CORE_VERSION\"" .venv/axe/node_modules/axe-core/package.json; then
  :
else
  if ! command -v npm >/dev/null 2>&1 && [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's npm for axe-core" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null) \
      || echo "could not install npm" >&2
  fi
  if command -v npm >/dev/null 2>&1; then
    npm install --prefix .venv/axe --no-save --no-package-lock --no-audit --no-fund --loglevel=error \
      "axe-core@$AXE_CORE_VERSION" >/dev/null \
      || echo "could not install axe-core: the accessibility test will be skipped" >&2
  else
    echo "no npm found: the accessibility test will be skipped (apt-get install npm)" >&2
  fi
fi
