"""Where a checkpoint directory comes from and what it must hold: a local directory, a hub id (downloaded to the
HF cache), or the embedded default; the files of the released layout and the config values the model cannot run with
(M-RoPE sections that do not share out the head's rotary frequencies); the release date shown in /v1/models.

The embedded default is the tiny demo model tuned on the synthetic inspection task, shipped in the package
(`omni/model/checkpoints/tiny-inspection-v1`, 1.5 MB). Should an install lack it, a tiny *random* checkpoint is built
once (atomically) into a cache directory instead. Neither gives real answers: real answers need real weights.
Knows nothing of tensors, serving or HTTP.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omni.contract.errors import CheckpointConfigError, CheckpointError

log = logging.getLogger(__name__)

DEMO_CHECKPOINT_DIR = Path(__file__).parent / "checkpoints" / "tiny-inspection-v1"
TINY_RANDOM_NAME = "tiny-default-v1"
TINY_RANDOM_SEED = 0
TINY_DEFAULT_NOTICE = ("no model given — using the embedded tiny demo checkpoint, trained only on the synthetic "
                       "quality-inspection task (fixtures/inspection.py); elsewhere its answers are random. Real "
                       "answers need real weights: --model Cloudflare/clef-omni (or a local directory).")
TINY_RANDOM_NOTICE = ("no model given and the demo checkpoint is not installed — using a tiny random checkpoint; its "
                      "answers are random. Real answers need real weights: --model Cloudflare/clef-omni.")


BACKBONE_FILES = ("config.json",)
HEAD_FILES = ("joint_head_config.json", "joint_head.safetensors")
TOKENIZER_FILES = ("tokenizer_config.json",)
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# transformers' Qwen3-Omni rotary embedding falls back to this when config.json names no mrope_section
DEFAULT_MROPE_SECTION = (24, 20, 20)
MROPE_FIELD = "thinker_config.text_config.rope_parameters.mrope_section"


@dataclass(frozen=True)
class CheckpointSource:
    """A checkpoint directory and what callers say about it: whether it is the embedded default, its release date."""

    directory: Path
    tiny_default: bool
    release_date: str            # YYYY-MM-DD


def locate_checkpoint(model_path: str | None, cache_dir: str | None = None) -> Path:
    """The directory for `model_path`: a local directory, a hub id's snapshot, or (None) the embedded default."""
    return embedded_default(cache_dir) if model_path is None else resolve_checkpoint_dir(model_path)


def resolve_checkpoint_dir(path_or_hub_id: str) -> Path:
    """A local directory as is; otherwise a hub id, downloaded (or taken from the HF cache) as a snapshot."""
    path = Path(path_or_hub_id).expanduser()
    if path.is_dir():
        return path
    if path.exists() or path_or_hub_id.startswith((".", "/", "~")) or path_or_hub_id.count("/") != 1:
        raise CheckpointError(f"model path {path_or_hub_id!r} is not a directory (nor a hub id like 'org/name')")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(path_or_hub_id))
    except Exception as exc:  # network down, repo missing, auth: say which and stop
        raise CheckpointError(f"could not fetch {path_or_hub_id!r} from the hub: {exc}") from exc


def check_checkpoint_files(directory: Path) -> None:
    """Refuse a directory that lacks a part of the released layout, naming every missing file."""
    missing = [name for name in BACKBONE_FILES + HEAD_FILES + TOKENIZER_FILES if not (directory / name).is_file()]
    if not any(directory.glob("*.safetensors")) or not any(
            p.name != "joint_head.safetensors" for p in directory.glob("*.safetensors")):
        missing.append("model*.safetensors (backbone weights)")
    if not (directory / "processor_config.json").is_file() and not (directory / "preprocessor_config.json").is_file():
        missing.append("processor_config.json")
    if missing:
        head_note = (" — this looks like a plain Qwen3-Omni checkpoint without Clef's joint-schema head"
                     if any(name in HEAD_FILES for name in missing) else "")
        raise CheckpointError(f"{directory} is not a complete Clef-omni checkpoint; missing: {', '.join(missing)}"
                              f"{head_note}")


def check_mrope_section(config: Any) -> None:
    """Refuse a config whose M-RoPE (time, height, width) sections do not sum to head_dim / 2: each of the head's
    rotary frequencies belongs to exactly one section. transformers accepts any sum and rotates some frequencies by
    the wrong axis (or none); vLLM refuses it. CheckpointConfigError names the field and the numbers."""
    text = config.thinker_config.text_config
    rope = getattr(text, "rope_parameters", None) or {}
    section = rope.get("mrope_section", DEFAULT_MROPE_SECTION)
    head_dim = int(getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads)
    if not (isinstance(section, list | tuple) and len(section) == 3
            and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in section)):
        raise CheckpointConfigError("config.json", MROPE_FIELD, f"is {section!r}: expected three whole numbers "
                                    "(the time, height and width sections)")
    if 2 * sum(section) != head_dim:
        raise CheckpointConfigError(
            "config.json", MROPE_FIELD, f"{list(section)} sums to {sum(section)}, but head_dim / 2 = {head_dim / 2:g} "
            f"(head_dim {head_dim}): the time, height and width sections must share out the head's rotary "
            "frequencies exactly")


def release_date(directory: Path) -> str:
    """`release_date` from config.json or the head file's safetensors metadata; else the head file's date (UTC)."""
    candidates = []
    with contextlib.suppress(OSError, ValueError, AttributeError):
        candidates.append(json.loads((directory / "config.json").read_text()).get("release_date"))
    head = directory / "joint_head.safetensors"
    try:
        from safetensors import safe_open

        with safe_open(str(head), "pt") as handle:
            candidates.append((handle.metadata() or {}).get("release_date"))
    except (OSError, ValueError, RuntimeError, ImportError):
        pass
    for value in candidates:
        if isinstance(value, str) and _DATE.match(value):
            return value
    mtime = head.stat().st_mtime if head.exists() else 0.0
    return dt.datetime.fromtimestamp(mtime, dt.timezone.utc).date().isoformat()


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
