"""Where the embedded tiny default checkpoint lives, and building it once (atomically) when it is missing.

Knows nothing of serving or HTTP. Its answers are random: real answers need real weights.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

TINY_DEFAULT_NAME = "tiny-default-v1"
TINY_DEFAULT_SEED = 0
TINY_DEFAULT_NOTICE = ("no model given — using the embedded tiny random checkpoint; its answers are random. "
                       "Real answers need real weights: --model Cloudflare/clef-omni (or a local directory).")


def default_cache_dir(cache_dir: str | None = None) -> Path:
    return Path(cache_dir).expanduser() if cache_dir else Path.home() / ".cache" / "omni-decide"


def ensure_tiny_default(cache_dir: str | None = None) -> Path:
    """Return the tiny default's directory, building it first if needed (safe against concurrent builders)."""
    from omni.tiny import write_checkpoint

    target = default_cache_dir(cache_dir) / TINY_DEFAULT_NAME
    if (target / "joint_head.safetensors").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():          # a half-written directory from a killed build: start again
        shutil.rmtree(target, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=TINY_DEFAULT_NAME + ".", dir=target.parent))
    try:
        write_checkpoint(staging, seed=TINY_DEFAULT_SEED)
        try:
            os.replace(staging, target)
        except OSError:          # another process won the race: theirs is as good as ours
            if not (target / "joint_head.safetensors").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
