#!/usr/bin/env bash
# Builds the CPU image from the repository's Dockerfile with no Docker daemon and no registry, then proves it:
#   1. a Debian base made with debootstrap (minbase, bookworm: Python 3.11, like the local CPU torch wheel), imported
#      into a private podman storage;
#   2. `buildah bud` of ./Dockerfile with BASE_IMAGE=that base, the CPU torch build (TORCH_VERSION=2.13.0+cpu) and the
#      host's pip configuration (index, CA bundle, local wheel folders) mounted read-only into the build;
#   3. the README's main job (its `omni decide` line) in the container, with no network, gives the README's answers;
#   4. `omni serve` in the container answers a multipart POST on loopback (-p 127.0.0.1:PORT:8000) with the same
#      answers, `podman healthcheck run` passes, and `podman stop` (SIGTERM) with a request in flight drains it: the
#      request is answered and the server exits 0.
# Everything it makes lives under one work directory (storage, images, containers, the rootfs, logs) that a trap
# removes on any exit, a failure or a signal included. It runs in a private mount namespace, where the host paths that
# podman and buildah write whatever --root says (containers/image's blob-info cache, CNI's configuration, IP
# allocations and network namespaces, runc's state) are bind mounts of that directory, and it runs the server's
# container from a private network namespace (podman's bridge and port rules die with it): the host keeps nothing but
# the installed tools and the cached base. The debootstrap base is cached as a tarball named for the UTC day it was
# made and apt's sources, so the day's reruns skip debootstrap (--no-cache makes a fresh one); older ones are deleted.
#
# Usage: bash scripts/image-check.sh [--no-cache] [--storage-driver overlay|vfs] [--logs DIR]
#   --logs DIR keeps the steps' logs (debootstrap, build, the runs, the server's) and answers in DIR.
# Needs: root, apt-get (to install buildah podman debootstrap runc when missing), the network to the Debian mirror and
# the package index, python3 and curl on the host, and free disk: 8 GB under TMPDIR (default /var/tmp; 9 GB with
# vfs) and 0.4 GB under ~/.cache.
# Exit: 0 proved; 1 the build or a check failed (the log's tail is printed); 2 usage; 3 the tools are missing and
# cannot be installed, or not root; 4 not enough free disk; 129/130/143 interrupted (cleaned up all the same).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

EXIT_FAILED=1 EXIT_USAGE=2 EXIT_NO_TOOLS=3 EXIT_NO_DISK=4
# Measured peak under the work directory: ≈ 6.0 GB with overlay storage (the base, the build's container, the layer's
# blob while it is committed, the 1.6 GB image); ≈ 6.3 GB with vfs (a copy of the image for each container, and a
# minute slower). Asked with a margin:
DISK_NEEDED_MB_OVERLAY=8000
DISK_NEEDED_MB_VFS=9000
CACHE_NEEDED_MB=400                      # the cached base tarball (≈ 120 MB) and its temporary copy
SUITE=bookworm                           # Debian 12: Python 3.11, as the CPU torch wheel (cp311)
TORCH_VERSION=2.13.0+cpu
TOOLS=(buildah podman debootstrap runc)
WORK_PARENT=${TMPDIR:-/var/tmp}
CACHE_DIR=${XDG_CACHE_HOME:-$HOME/.cache}/omni-decide/image-check
ARGS=("$@")

use_cache=1
driver=overlay
logs_dir=""
while [ $# -gt 0 ]; do
  case $1 in
    --no-cache) use_cache=0 ;;
    --storage-driver)
      [ $# -ge 2 ] || { echo "image-check: --storage-driver needs overlay or vfs" >&2; exit $EXIT_USAGE; }
      driver=$2; shift ;;
    --logs)
      [ $# -ge 2 ] || { echo "image-check: --logs needs a directory" >&2; exit $EXIT_USAGE; }
      logs_dir=$(realpath -m "$2"); shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "image-check: unknown argument '$1' (try --help)" >&2; exit $EXIT_USAGE ;;
  esac
  shift
done
case $driver in overlay|vfs) ;; *) echo "image-check: --storage-driver must be overlay or vfs, not '$driver'" >&2
                                   exit $EXIT_USAGE ;; esac

exec 3>&2                                # the real stderr: for messages from a trap that fires inside a step
say() { printf 'image-check [%3ds] %s\n' "$SECONDS" "$*" >&3; }
die() { local code=$1; shift; say "FAILED: $*"; exit "$code"; }

[ "$(id -u)" = 0 ] || die $EXIT_NO_TOOLS "needs root (rootful buildah and podman, debootstrap): run it as root"
for tool in python3 curl unshare nsenter setpriv; do
  command -v "$tool" >/dev/null 2>&1 || die $EXIT_NO_TOOLS "needs '$tool' on the host"
done
# Once, at the start: the same script again in a private mount namespace (same PID, mounts vanish with it).
if [ "${IMAGE_CHECK_PRIVATE_NS:-}" != "$$" ]; then
  IMAGE_CHECK_PRIVATE_NS=$$ exec unshare --mount --propagation private -- bash "$0" "${ARGS[@]}"
fi

# --- the work directory and what else it made, removed on every exit --------------------------------------------
W=""                                     # the work directory
CHILD=""                                 # the process group of the step running now (a trap stops it first)
NETNS_PID=""                             # the process holding the server's network namespace
SHADOWED=()                              # host paths covered by a bind mount of the work directory
MADE_DIRS=()                             # directories made as mount points (deepest first), removed at the end

podman_argv() {                          # PODMAN_ARGV: podman on the storage of the work directory $1
  local dir=$1
  PODMAN_ARGV=(podman --root "$dir/storage" --runroot "$dir/run"
               --storage-driver "$(cat "$dir/driver" 2>/dev/null || echo overlay)"
               --cgroup-manager=cgroupfs --events-backend=file --runtime runc --tmpdir "$dir/tmp")
}

unmount_under() {                        # every mount below $1, deepest first (a killed build can leave some)
  awk -v d="$1/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done
}

remove_workdir() {                       # its containers (stopped), then every mount and file under it
  local dir=$1; shift                    # the rest: a command prefix for podman (the server's network namespace)
  [ -d "$dir" ] || return 0
  if [ -d "$dir/storage" ]; then
    podman_argv "$dir"
    timeout 60 "$@" "${PODMAN_ARGV[@]}" rm --all --force --volumes --time 0 >/dev/null 2>&1 || true
  fi
  local id runc_root=$dir/shadow/run/runc  # should podman not have stopped one: runc's own state for this run
  if [ -d "$runc_root" ]; then
    for id in $(runc --root "$runc_root" list -q 2>/dev/null); do
      runc --root "$runc_root" delete --force "$id" >/dev/null 2>&1 || true
    done
  fi
  unmount_under "$dir"
  local try                              # (a container's exit command may still be writing podman's event log)
  for try in 1 2 3 4 5; do
    rm -rf --one-file-system "$dir" 2>/dev/null && return 0
    sleep "$try"
  done
  say "could not remove all of $dir: $(find "$dir" 2>/dev/null | head -n 3 | tr '\n' ' ')"
}

stop_child() {
  [ -n "$CHILD" ] || return 0
  kill -TERM -- "-$CHILD" 2>/dev/null || true
  for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 -- "-$CHILD" 2>/dev/null || break; sleep 1; done
  kill -KILL -- "-$CHILD" 2>/dev/null || true
  CHILD=""
}

cleanup() {
  local rc=$? started=$SECONDS in_ns=() path
  trap - EXIT INT TERM HUP
  stop_child
  if [ -n "$W" ] && [ -d "$W" ]; then
    [ -n "$NETNS_PID" ] && kill -0 "$NETNS_PID" 2>/dev/null && in_ns=(nsenter "--net=/proc/$NETNS_PID/ns/net")
    remove_workdir "$W" "${in_ns[@]}"
  fi
  [ -n "$NETNS_PID" ] && kill -KILL "$NETNS_PID" 2>/dev/null || true
  for path in "${SHADOWED[@]}"; do umount -l "$path" 2>/dev/null || true; done
  for path in "${MADE_DIRS[@]}"; do rmdir "$path" 2>/dev/null || true; done
  [ -n "$W" ] && say "removed $W (containers, images, storage, rootfs) in $((SECONDS - started))s"
  exit "$rc"
}
on_signal() { say "interrupted by SIG$1: cleaning up"; exit "$2"; }
trap cleanup EXIT
trap 'on_signal INT 130' INT
trap 'on_signal TERM 143' TERM
trap 'on_signal HUP 129' HUP

# A step in its own process group, waited for in the background so that a signal reaches the trap at once.
run() {
  setsid "$@" &
  CHILD=$!
  local rc=0
  wait "$CHILD" || rc=$?
  CHILD=""
  return "$rc"
}
# A step with its output in a log; on failure, the log's tail and exit 1.
step() {
  local what=$1 log=$2; shift 2
  say "$what"
  if ! run "$@" >"$log" 2>&1; then
    tail -n 40 "$log" | sed 's/^/    /' >&2
    die $EXIT_FAILED "$what (log tail above)"
  fi
}

# A host path that podman writes whatever --root says, covered (in this mount namespace) by a directory of $W.
shadow() {
  local path=$1 up=$1 made=()
  while [ ! -e "$up" ]; do made+=("$up"); up=$(dirname "$up"); done
  mkdir -p "$path" "$W/shadow$path"
  MADE_DIRS+=("${made[@]}")
  [ ${#made[@]} -eq 0 ] || printf '%s\n' "${made[@]}" >>"$W/made-dirs"   # for the next run, should this one be killed
  mount --bind "$W/shadow$path" "$path"
  SHADOWED+=("$path")
}

# --- preconditions: the tools, free disk ---------------------------------------------------------------------------
missing=()
for tool in "${TOOLS[@]}"; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  command -v apt-get >/dev/null 2>&1 || die $EXIT_NO_TOOLS \
    "missing ${missing[*]} and no apt-get to install them: install buildah podman debootstrap runc"
  say "installing ${TOOLS[*]} with apt-get (missing: ${missing[*]})"
  if ! { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${TOOLS[@]}" >/dev/null 2>&1 \
         || { apt-get update -qq >/dev/null 2>&1 \
              && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${TOOLS[@]}" >/dev/null 2>&1; }; }; then
    die $EXIT_NO_TOOLS "could not install ${TOOLS[*]} with apt-get (no network, or not in the archive): install them"
  fi
  for tool in "${TOOLS[@]}"; do
    command -v "$tool" >/dev/null 2>&1 || die $EXIT_NO_TOOLS "apt-get ran but '$tool' is still missing"
  done
fi

# Leftovers of an earlier run killed without its trap (SIGKILL, a crash): their owner is gone.
for old in "$WORK_PARENT"/omni-image-check.*; do
  [ -d "$old" ] || continue
  if ! kill -0 "${old##*.}" 2>/dev/null; then
    say "removing the leftovers of a dead run: $old"
    if [ -f "$old/made-dirs" ]; then mapfile -t adopted <"$old/made-dirs"; MADE_DIRS+=("${adopted[@]}"); fi
    remove_workdir "$old"
  fi
done

free_mb() {                              # free MB on the file system of $1 (or of its nearest existing parent)
  local dir=$1
  while [ ! -e "$dir" ]; do dir=$(dirname "$dir"); done
  df -Pm "$dir" | awk 'NR == 2 { print $4 }'
}
need_mb=$DISK_NEEDED_MB_OVERLAY
[ "$driver" = vfs ] && need_mb=$DISK_NEEDED_MB_VFS
have_mb=$(free_mb "$WORK_PARENT")
[ "$have_mb" -ge "$need_mb" ] || die $EXIT_NO_DISK \
  "needs $need_mb MB free under $WORK_PARENT ($driver storage), has $have_mb MB (TMPDIR=DIR works elsewhere)"
have_mb=$(free_mb "$CACHE_DIR")
[ "$have_mb" -ge "$CACHE_NEEDED_MB" ] \
  || die $EXIT_NO_DISK "needs $CACHE_NEEDED_MB MB free under $CACHE_DIR for the base tarball, has $have_mb MB"

W=$WORK_PARENT/omni-image-check.$$
mkdir -p "$W/tmp" "$W/pip" "$CACHE_DIR"
echo "$driver" >"$W/driver"
export TMPDIR=$W/tmp
L=${logs_dir:-$W/logs}
mkdir -p "$L"
shadow /var/lib/containers/cache         # containers/image's blob-info cache (ignores --root)
shadow /etc/cni/net.d                    # CNI's configuration and its lock file (podman makes its default network)
shadow /var/lib/cni                      # CNI's IP allocations
shadow /run/netns                        # the container's network namespace (CNI)
shadow /run/runc                         # runc's container state
BUILDAH=(buildah --root "$W/storage" --runroot "$W/run" --storage-driver "$driver")
podman_argv "$W"
PODMAN=("${PODMAN_ARGV[@]}")
RUN_LIMITS=(--ulimit nofile=4096:4096 --ulimit nproc=4096:4096)   # root here lacks CAP_SYS_RESOURCE
say "work directory $W ($driver storage; $(free_mb "$WORK_PARENT") MB free, $need_mb MB needed)"

# --- 1. the Debian base ------------------------------------------------------------------------------------------
# apt's own sources for the suite (the mirror this machine uses), the same lines inside the base.
# shellcheck disable=SC2016  # apt's own $(FIELD) format, not the shell's
sources=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT)' 2>/dev/null \
          | awk -v s="$SUITE" '($2 == s || index($2, s "-") == 1) && $3 == "main" { print "deb " $1 " " $2 " main" }' \
          | sort -u) || true
mirror=$(printf '%s\n' "$sources" | awk -v s="$SUITE" '$3 == s { print $2; exit }')
if [ -z "$mirror" ]; then
  mirror=http://deb.debian.org/debian/
  sources="deb $mirror $SUITE main"
fi
key=$(printf '%s\n' "$sources" | sha256sum | cut -c1-8)
base_tar=$CACHE_DIR/debian-$SUITE-minbase-$(date -u +%Y%m%d)-$key.tar
for stale in "$CACHE_DIR"/debian-*-minbase-*.tar "$CACHE_DIR"/*.partial; do
  if [ -e "$stale" ] && [ "$stale" != "$base_tar" ]; then rm -f "$stale"; fi
done

if [ "$use_cache" = 1 ] && [ -s "$base_tar" ] && tar -tf "$base_tar" ./usr/bin/apt-get >/dev/null 2>&1; then
  say "debian base: cached $base_tar"
else
  step "debian base: debootstrap --variant=minbase $SUITE from $mirror (≈ 30-50 s)" "$L/debootstrap.log" \
    debootstrap --variant=minbase "$SUITE" "$W/rootfs" "$mirror"
  printf '%s\n' "$sources" >"$W/rootfs/etc/apt/sources.list"
  rm -rf "$W/rootfs/var/cache/apt/archives/"*.deb "$W/rootfs/var/lib/apt/lists/"*
  tar -C "$W/rootfs" -cf "$base_tar.$$.partial" . && mv "$base_tar.$$.partial" "$base_tar"
  rm -rf --one-file-system "$W/rootfs"
fi
step "importing the base as localhost/debian:$SUITE" "$L/import.log" \
  "${PODMAN[@]}" import "$base_tar" "localhost/debian:$SUITE"

# --- 2. the build --------------------------------------------------------------------------------------------------
# The host's pip configuration (files and PIP_* variables, as `pip config list` reads them): the CA bundle and the
# constraints are copied, local wheel folders and file:// indexes mounted read-only under /mnt, where the build
# finds a pip.conf that names them (PIP_CONFIG_FILE). /mnt is a bind mount of $W/pip: nothing is left in the image.
pip_args=$(python3 - "$W/pip" <<'PY'
import ast, shutil, subprocess, sys
from pathlib import Path
from urllib.parse import urlparse, unquote

stage = Path(sys.argv[1])
out = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True).stdout
scopes: dict = {"global": {}, "install": {}, ":env:": {}}
for line in out.splitlines():
    name, sep, value = line.partition("=")
    scope, _, key = name.rpartition(".")
    if sep and scope in scopes:
        scopes[scope][key] = ast.literal_eval(value)
config = {**scopes["global"], **scopes["install"], **scopes[":env:"]}      # pip's precedence
mounts: list = []
lines: list = []

def mount_dir(path: Path) -> str:
    inside = f"/mnt/d{len(mounts)}"
    (stage / f"d{len(mounts)}").mkdir()
    mounts.append(f"--volume={path}:{inside}:ro")
    return inside

def location(value: str, index: bool) -> str:
    url = urlparse(value)
    if url.scheme not in ("", "file"):
        return value
    path = Path(unquote(url.path) if url.scheme else value).resolve()
    if not path.exists():
        return ""
    if index or path.is_file():      # an index's pages link to ../../files: mount the folder above
        return ("file://" if url.scheme else "") + f"{mount_dir(path.parent)}/{path.name}"
    return mount_dir(path)

for key in ("index-url", "extra-index-url", "find-links"):
    if key in config:
        values = [location(v, key != "find-links") for v in config[key].split()]
        lines.append(f"{key} = " + " ".join(v for v in values if v))
for key in ("cert", "client-cert", "constraint"):
    if key in config and Path(config[key]).is_file():
        shutil.copyfile(config[key], stage / key)
        lines.append(f"{key} = /mnt/{key}")
for key in ("trusted-host", "proxy", "timeout", "default-timeout", "retries", "no-index", "prefer-binary"):
    if key in config:
        lines.append(f"{key} = {config[key]}")
(stage / "pip.conf").write_text("[global]\n" + "\n".join(lines) + "\n")
index = location(next(iter(config.get("index-url", "").split()), "https://pypi.org/simple"), True)
print(f"--volume={stage}:/mnt:ro", *mounts, f"--build-arg=TORCH_INDEX={index or 'https://pypi.org/simple'}")
PY
) || die $EXIT_FAILED "could not read the host's pip configuration (python3 -m pip config list)"
read -r -a pip_mounts <<<"$pip_args"
say "pip configuration for the build: $(tr '\n' ';' <"$W/pip/pip.conf")"

IMAGE=localhost/omni-decide:cpu-check-$$
step "building $IMAGE from ./Dockerfile (CPU torch $TORCH_VERSION; ≈ 2-3 min)" "$L/build.log" \
  "${BUILDAH[@]}" bud --isolation chroot --format docker --layers=false --pull=never \
  --build-arg "BASE_IMAGE=localhost/debian:$SUITE" --build-arg "TORCH_VERSION=$TORCH_VERSION" \
  --build-arg PIP_CONFIG_FILE=/mnt/pip.conf "${pip_mounts[@]}" \
  -f Dockerfile -t "$IMAGE" "$REPO"
grep -h "^demo checkpoint:" "$L/build.log" | sed 's/^/    /' >&2 || true
say "image: $("${PODMAN[@]}" image inspect --format '{{.Size}}' "$IMAGE" | awk '{ printf "%.2f GB", $1 / 1e9 }')"

# --- 3. the README's main job in the container ---------------------------------------------------------------------
main_job=$(grep -m1 -o '\.venv/bin/omni decide .*' README.md | sed 's|^\.venv/bin/omni ||') \
  || die $EXIT_FAILED "README.md has no main job line ('.venv/bin/omni decide ...')"
read -r -a main_args <<<"$main_job"
say "the README's main job in the container (no network): omni $main_job"
run "${PODMAN[@]}" run --rm --network none "${RUN_LIMITS[@]}" -e OMNI_MODEL= \
  -v "$REPO/examples:/opt/omni-decide/examples:ro" --entrypoint omni "$IMAGE" "${main_args[@]}" \
  >"$L/decide.json" 2>"$L/decide.log" \
  || { tail -n 30 "$L/decide.log" | sed 's/^/    /' >&2; die $EXIT_FAILED "the main job in the container failed"; }
# The README's printed answer of the main job (its ```json block with "label_visible"), to the precision its text
# states it (≈ 0.98, as tests/integration/docs checks it on the host): a noul or score within 0.01, the same choice.
check_answers() {   # $1: what answered, $2: a file holding its System One response
  python3 - "$2" README.md "$1" <<'PY'
import json, re, sys
try:
    got = json.loads(open(sys.argv[1]).read())["answers"]
except (ValueError, KeyError) as exc:
    sys.exit(f"{sys.argv[3]}: not a System One response ({exc})")
blocks = re.findall(r"```json\n(.*?)```", open(sys.argv[2]).read(), re.S)
want = json.loads(next(b for b in blocks if '"label_visible"' in b))["answers"]
bad, shown = [], []
for name, answer in want.items():
    for key in ("noul", "score", "choice"):
        if key in answer:
            value = got.get(name, {}).get(key)
            ok = (value == answer[key]) if key == "choice" else \
                isinstance(value, float) and abs(value - answer[key]) <= 0.01
            shown.append(f"{name} {value}")
            if not ok:
                bad.append(f"{name}.{key} {value!r} (README: {answer[key]!r})")
if bad:
    sys.exit(f"{sys.argv[3]}: answers differ from the README's: " + "; ".join(bad))
print(f"    {sys.argv[3]}: the README's answers (±0.01): " + ", ".join(shown))
PY
}
check_answers "the main job" "$L/decide.json" >&2 || die $EXIT_FAILED "the main job in the container"

# --- 4. omni serve in the container: a multipart POST, the healthcheck, SIGTERM ------------------------------------
# Its own network namespace, held by a process that dies with this script: podman's bridge and port rules live there.
setpriv --pdeathsig KILL unshare --net sleep infinity &
NETNS_PID=$!
disown "$NETNS_PID"
for _ in $(seq 1 50); do
  [ "$(readlink "/proc/$NETNS_PID/ns/net" 2>/dev/null)" != "$(readlink /proc/$$/ns/net)" ] && break
  sleep 0.1
done
IN_NS=(nsenter "--net=/proc/$NETNS_PID/ns/net")
"${IN_NS[@]}" ip link set lo up
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
NAME=omni-image-check-$$
url=http://127.0.0.1:$port
post() {  # $1: the response file, then curl's options; prints the HTTP status and the seconds it took
  local out=$1; shift
  "${IN_NS[@]}" curl -s -o "$out" -w '%{http_code} %{time_total}' --max-time 120 "$@" "$url/v1/systemone" \
    -F request=@examples/inspection.json -F images=@examples/inspection/unit.png \
    -F audio=@examples/inspection/hum.wav -F videos=@examples/inspection/fan.mp4
}
# (podman without systemd says it cannot add a healthcheck timer: that goes to the log; `healthcheck run` is used)
step "omni serve in the container, published on $url" "$L/serve-start.log" \
  "${IN_NS[@]}" "${PODMAN[@]}" run -d --name "$NAME" "${RUN_LIMITS[@]}" -p "127.0.0.1:$port:8000" -e OMNI_MODEL= \
  "$IMAGE"
logs() { "${PODMAN[@]}" logs "$NAME" >"$L/serve.log" 2>&1; tail -n 30 "$L/serve.log" | sed 's/^/    /' >&2; }
ready=0
for _ in $(seq 1 240); do
  if "${IN_NS[@]}" curl -sf -o /dev/null --max-time 2 "$url/ready"; then ready=1; break; fi
  [ "$("${PODMAN[@]}" inspect --format '{{.State.Running}}' "$NAME")" = true ] || break
  sleep 0.5
done
[ "$ready" = 1 ] || { logs; die $EXIT_FAILED "the server in the container never became ready (its log above)"; }
say "ready"
status=$(post "$L/post.json") || true
status=${status%% *}
[ "$status" = 200 ] || { cat "$L/post.json" >&2; logs; die $EXIT_FAILED "the multipart POST answered HTTP $status"; }
check_answers "the multipart POST" "$L/post.json" >&2 || die $EXIT_FAILED "the multipart POST's answers"
health=$("${PODMAN[@]}" healthcheck run "$NAME" 2>&1) || { logs; die $EXIT_FAILED "podman healthcheck run: $health"; }
say "podman healthcheck run: ${health:-healthy}"

# SIGTERM with a request in flight: its 250 kB are sent at 100 kB/s, so the server is still reading it a second in,
# when podman sends SIGTERM; the request is answered (after the signal), then the server exits 0.
post "$L/inflight.json" --limit-rate 100k >"$L/inflight.status" 2>&1 &
inflight=$!
sleep 1
say "podman stop (SIGTERM) with a request in flight (still uploading)"
"${IN_NS[@]}" "${PODMAN[@]}" stop --time 60 "$NAME" >"$L/stop.log" 2>&1 \
  || { cat "$L/stop.log" >&2; die $EXIT_FAILED "podman stop"; }
wait "$inflight" || true
code=$("${PODMAN[@]}" inspect --format '{{.State.ExitCode}}' "$NAME")
"${PODMAN[@]}" logs "$NAME" >"$L/serve.log" 2>&1
[ "$code" = 0 ] || { logs; die $EXIT_FAILED "the server exited $code on SIGTERM, not 0"; }
grep -q "draining" "$L/serve.log" || { logs; die $EXIT_FAILED "the server's log shows no drain"; }
read -r status took <"$L/inflight.status" || true
[ "${status:-}" = 200 ] || { logs; die $EXIT_FAILED "the request in flight at SIGTERM got '${status:-}', not 200"; }
awk -v t="${took:-0}" 'BEGIN { exit !(t > 1.0) }' \
  || die $EXIT_FAILED "the request meant to be in flight was answered in ${took}s, before SIGTERM: nothing proved"
check_answers "the request in flight" "$L/inflight.json" >&2 || die $EXIT_FAILED "the request in flight's answers"
awk '/draining/ && !d { d = NR } /"POST \/v1\/systemone[^"]*" 200/ { p = NR } END { exit !(d && p > d) }' \
  "$L/serve.log" || { logs; die $EXIT_FAILED "the server's log shows no request answered after the drain began"; }
say "SIGTERM: drained (the request in flight answered 200 after ${took}s), exit code 0"
say "PASSED in ${SECONDS}s"
