"""The embedded default checkpoint: the tiny demo model tuned on the synthetic inspection task, shipped in the
package (`omni/checkpoints/tiny-inspection-v1`, 1.5 MB). Should an install lack it, a tiny *random* checkpoint is
built once (atomically) into a cache directory instead.

Knows nothing of serving or HTTP. Neither model gives real answers: real answers need real weights.
"""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

DEMO_CHECKPOINT_DIR = Path(__file__).parent / "checkpoints" / "tiny-inspection-v1"
TINY_RANDOM_NAME = "tiny-default-v1"
TINY_RANDOM_SEED = 0
TINY_DEFAULT_NOTICE = ("no model given — using the embedded tiny demo checkpoint, trained only on the synthetic "
                       "quality-inspection task (fixtures/inspection.py); elsewhere its answers are random. Real "
                       "answers need real weights: --model Cloudflare/clef-omni (or a local directory).")
TINY_RANDOM_NOTICE = ("no model given and the demo checkpoint is not installed — using a tiny random checkpoint; its "
                      "answers are random. Real answers need real weights: --model Cloudflare/clef-omni.")


def default_cache_dir(cache_dir: str | None = None) -> Path:
    return Path(cache_dir).expanduser() if cache_dir else Path.home() / ".cache" / "omni-decide"


def embedded_default(cache_dir: str | None = None) -> Path:
    """The directory of the embedded default (logging which one and that its answers are not real)."""
    if (DEMO_CHECKPOINT_DIR / "joint_head.safetensors").is_file():
        log.warning(TINY_DEFAULT_NOTICE)
        return DEMO_CHECKPOINT_DIR
    log.warning(TINY_RANDOM_NOTICE)
    return ensure_tiny_random(cache_dir)


def ensure_tiny_random(cache_dir: str | None = None) -> Path:
    """A tiny random checkpoint in the cache, built first if needed (safe against concurrent builders)."""
    from omni.model.tiny import write_checkpoint

    target = default_cache_dir(cache_dir) / TINY_RANDOM_NAME
    if (target / "joint_head.safetensors").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():          # a half-written directory from a killed build: start again
        shutil.rmtree(target, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=TINY_RANDOM_NAME + ".", dir=target.parent))
    try:
        write_checkpoint(staging, seed=TINY_RANDOM_SEED)
        try:
            os.replace(staging, target)
        except OSError:          # another process won the race: theirs is as good as ours
            if not (target / "joint_head.safetensors").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target
