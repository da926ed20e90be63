#!/usr/bin/env bash
# Creates .venv and installs omni-decide. Idempotent; safe to re-run, and a run with --tests after a plain one adds
# only what is missing.
#   bash scripts/bootstrap.sh           the main job and the README's tour: the project with its [serve] extra (under
#                                       a minute on a fresh clone, two cores; no Ray, browser, npm or dev tools)
#   bash scripts/bootstrap.sh --tests   everything the tests need (.ci/run runs this): every extra (train, dev,
#                                       cluster: Ray), Debian's Chromium for the browser tests, axe-core from npm
# CPU machines get the local CPU torch wheel (torch==2.13.0). GPU users: install your CUDA torch build into the
# venv first (or set OMNI_KEEP_TORCH=1 with a torch already present) and it is kept.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  "") extras="serve" tests=0 ;;
  --tests) extras="serve,train,dev,cluster,quantize,line,banks" tests=1 ;;
  *) echo "usage: bash scripts/bootstrap.sh [--tests]  (--tests: every extra, Chromium, axe-core)" >&2; exit 2 ;;
esac
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
torch=""
if ! .venv/bin/python -c "import torch" 2>/dev/null && [ "${OMNI_KEEP_TORCH:-0}" != "1" ]; then
  torch="torch==2.13.0"
fi
# torch and the project in one resolve, without byte-compiling: pip compiles every file of every package on one core,
# half of a first run's time, though the main job imports a fifth of them; Python compiles those on first import
# (and keeps them, unless PYTHONDONTWRITEBYTECODE is set).
.venv/bin/python -m pip install -q --no-compile $torch -e ".[$extras]"
if [ "$tests" = 1 ]; then
  # the tests start hundreds of interpreters (and CI may forbid writing byte-code): compile everything now, on every
  # core. compileall skips what is compiled already; its exit code only reports the few files some packages ship
  # that are not Python 3 (pip skips them the same way).
  site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
  .venv/bin/python -m compileall -q -j 0 "$site" >/dev/null 2>&1 || true
fi
echo "omni-decide installed in .venv with [$extras] ($(.venv/bin/python -c 'from importlib.metadata import version as v
print("torch", v("torch"), "transformers", v("transformers"))'))" >&2
if [ "$tests" != 1 ]; then
  echo "the tests need more (every extra, Chromium, axe-core): bash scripts/bootstrap.sh --tests" >&2
  exit 0
fi
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
# The line tests (tests/integration/line) start Debian's mosquitto, a real MQTT broker.
if ! command -v mosquitto >/dev/null 2>&1 && [ ! -x /usr/sbin/mosquitto ]; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's mosquitto for the line tests" >&2
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mosquitto >/dev/null) \
      || echo "could not install mosquitto: the MQTT tests will be skipped" >&2
  else
    echo "no mosquitto found: the MQTT tests will be skipped (apt-get install mosquitto)" >&2
  fi
fi
# vPDQ (the [vpdq] extra: video hash banks) builds against FFmpeg's development libraries: Debian's, then the extra.
if ! .venv/bin/python -c "import vpdq" 2>/dev/null; then
  vpdq_apt="pkg-config cmake g++ libavcodec-dev libavformat-dev libavdevice-dev libavfilter-dev libswresample-dev libswscale-dev libavutil-dev"
  if ! pkg-config --exists libavdevice libavfilter libswresample 2>/dev/null && [ "$(id -u)" = "0" ] \
      && command -v apt-get >/dev/null 2>&1; then
    echo "installing FFmpeg's development libraries for vpdq (video hash banks)" >&2
    # shellcheck disable=SC2086  # a list of packages
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $vpdq_apt \
      >/dev/null) || echo "could not install FFmpeg's development libraries: the vPDQ tests will be skipped" >&2
  fi
  .venv/bin/python -m pip install -q --no-compile -e ".[vpdq]" \
    || echo "could not build vpdq (needs: $vpdq_apt): the vPDQ tests will be skipped" >&2
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
