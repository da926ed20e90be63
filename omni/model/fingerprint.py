"""What a decision's model and software are, for its audit record: the checkpoint's sha256 and the versions running.

`checkpoint_sha256(directory)` hashes every weight and config file of a checkpoint (`*.safetensors`, `*.json`,
tokenizer and template files; not `calibration.json`, which has a hash of its own in the record, nor `training.json`,
a fine-tune's summary) as the sha256 of the lines `<name>\\t<bytes>\\t<sha256 of the file>\\n` in name order. Hashing
60 GB takes minutes, so each file's hash is kept in a sidecar keyed by its size and modification time, in the cache
directory (`fingerprints/<hash of the directory's path>.json`: a model directory, the installed package's demo
checkpoint included, is never written to); a restart re-reads only files that changed. A checkpoint under
`SIDECAR_MIN_BYTES` (the shipped demo, 1.5 MB) hashes in milliseconds and gets no sidecar: nothing is written for it. `software_versions()` names omni-decide (and its git commit when it runs from a checkout),
torch, transformers, PyAV and the FFmpeg libraries PyAV carries.
Knows nothing of requests, serving or HTTP.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from functools import cache
from importlib import metadata
from pathlib import Path

log = logging.getLogger(__name__)

SIDECAR_FORMAT = "omni-sha256/1"
HASHED_SUFFIXES = (".safetensors", ".json", ".jinja", ".txt", ".model", ".tiktoken")
NOT_HASHED = ("calibration.json", "training.json")
_READ_BYTES = 8 << 20
SIDECAR_MIN_BYTES = 64 << 20        # below this, hashing is quicker than worth remembering


def checkpoint_files(directory: Path) -> list[Path]:
    """The files whose bytes make the model: weights, configs, tokenizer and processor files (name order)."""
    return sorted(p for p in directory.iterdir()
                  if p.is_file() and p.suffix in HASHED_SUFFIXES and p.name not in NOT_HASHED)


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_READ_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def checkpoint_sha256(directory: str | Path, cache_dir: Path) -> str:
    """The sha256 over the checkpoint's files (see the module docstring), reusing the sidecar's per-file hashes."""
    directory = Path(directory).resolve()
    sidecar = sidecar_path(directory, cache_dir)
    known = _read_sidecar(sidecar)
    files: dict[str, dict[str, int | str]] = {}
    for path in checkpoint_files(directory):
        stat = path.stat()
        entry = known.get(path.name)
        if not (isinstance(entry, dict) and entry.get("bytes") == stat.st_size
                and entry.get("mtime_ns") == stat.st_mtime_ns and isinstance(entry.get("sha256"), str)):
            entry = {"bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": file_sha256(path)}
        files[path.name] = entry
    if files != known and sum(int(entry["bytes"]) for entry in files.values()) >= SIDECAR_MIN_BYTES:
        _write_sidecar(sidecar, directory, files)
    lines = "".join(f"{name}\t{entry['bytes']}\t{entry['sha256']}\n" for name, entry in sorted(files.items()))
    return hashlib.sha256(lines.encode()).hexdigest()


def sidecar_path(directory: Path, cache_dir: Path) -> Path:
    """Where the per-file hashes of a checkpoint directory are kept."""
    key = hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:32]
    return cache_dir / "fingerprints" / f"{key}.json"


def _read_sidecar(path: Path) -> dict[str, dict[str, int | str]]:
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if isinstance(body, dict) and body.get("format") == SIDECAR_FORMAT and isinstance(body.get("files"), dict):
        return body["files"]
    return {}


def _write_sidecar(path: Path, directory: Path, files: dict[str, dict[str, int | str]]) -> None:
    """Atomically; a cache that cannot be written only costs a re-hash at the next start."""
    text = json.dumps({"format": SIDECAR_FORMAT, "directory": str(directory), "files": files}, indent=1,
                      sort_keys=True)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=".sha256-", delete=False,
                                         encoding="utf-8") as handle:
            handle.write(text)
        os.replace(handle.name, path)
    except OSError as exc:
        log.info("cannot keep the checkpoint's hashes in %s (%s): a restart hashes it again", path, exc)


@cache
def software_versions() -> dict[str, str | None]:
    """omni-decide (and its git commit when known), torch, transformers, PyAV and FFmpeg (libavcodec/libavformat)."""
    import av
    import torch
    import transformers

    ffmpeg = ", ".join(f"{name} {'.'.join(map(str, version))}" for name, version in sorted(av.library_versions.items())
                       if name in ("libavcodec", "libavformat", "libswresample", "libswscale"))
    return {"omni_decide": _version("omni-decide"), "git_commit": _git_commit(), "torch": str(torch.__version__),
            "transformers": transformers.__version__, "pyav": av.__version__, "ffmpeg": ffmpeg}


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown"


def _git_commit() -> str | None:
    """The commit of the checkout this package runs from (read from .git, no git process), else None."""
    root = Path(__file__).resolve().parents[2]
    head = root / ".git" / "HEAD"
    try:
        ref = head.read_text(encoding="utf-8").strip()
        if not ref.startswith("ref: "):
            return ref or None
        name = ref[5:]
        loose = root / ".git" / name
        if loose.is_file():
            return loose.read_text(encoding="utf-8").strip()
        for line in (root / ".git" / "packed-refs").read_text(encoding="utf-8").splitlines():
            if line.endswith(" " + name):
                return line.split(" ", 1)[0]
    except OSError:
        return None
    return None
