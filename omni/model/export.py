"""Writes a checkpoint in the released Clef-omni layout: a (fine-tuned) ClefModel after training (`save_released`),
or a whole checkpoint directory as Cloudflare publishes one (`export_checkpoint`, `omni export checkpoint`).

`save_released`: the head goes to `joint_head.safetensors` (Clef state-dict names, the source file's dtype, today's
date as its `release_date` metadata) next to an unchanged `joint_head_config.json`. An untouched backbone is
linked (or copied) from the source directory; a trained one is written through transformers' own `save_pretrained`
(which undoes the load-time expert fusing), with `lm_head` restored from the lexical table for the duration and every
key prefixed `thinker.` as in the release, so strict loading passes. Tokenizer, processor and config files are
copied. A `calibration.json` is never carried over (it is bound to the old weights). What it writes loads here; for
vLLM or the released file names, export it (`export_checkpoint`).

`export_checkpoint`: refuses a source that would not load (`omni doctor`'s checks, no weight loaded), then writes
into a fresh directory, renamed into place only when whole: the backbone as numbered `model-*.safetensors` shards
with `model.safetensors.index.json` (`omni.model.shards`; bytes and dtypes unchanged), `joint_head.safetensors` as
is, `joint_head_config.json` with the release's keys only (vLLM's `clef_omni` refuses any other), config.json with
the vision fields the release's carries (`image_size`, `apply_vit_abs_pos_embed`; vLLM reads them), and
`processor_config.json` with its image, video (`Qwen2VLVideoProcessor`) and Whisper sections. Weights are unchanged,
so calibration and training notes travel with them. Knows nothing of training loops, datasets, argv or HTTP.
"""
from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from omni.contract.errors import CheckpointError
from omni.model.backbone import Backbone
from omni.model.shards import DEFAULT_MAX_SHARD_BYTES, INDEX_FILE, source_files, stored_tensors, write_shards
from omni.model.surface import RecordT, TrainableModel

SAFETENSORS_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "F64": torch.float64}
NOT_CARRIED = ("calibration.json", "training_state.pt", "training.json")
# joint_head_config.json as released: the reference's JointSchemaHead kwargs (dropout is a training setting; vLLM's
# head takes exactly these and refuses any other key)
RELEASED_HEAD_KEYS = ("hidden_size", "width", "routing_layers", "layers", "heads", "feedforward")
PROCESSOR_CLASS = "Qwen3OmniMoeProcessor"
VIDEO_PROCESSOR_TYPE = "Qwen2VLVideoProcessor"
# the video section copies these from the image section; its size is the processor's default per frame pair
SHARED_VISION_KEYS = ("patch_size", "temporal_patch_size", "merge_size", "image_mean", "image_std", "rescale_factor",
                      "do_resize", "do_rescale", "do_normalize", "do_convert_rgb")
VIDEO_SIZE = {"shortest_edge": 128 * 32 * 32, "longest_edge": 768 * 32 * 32}
# what export_checkpoint writes itself (or leaves behind: training's resume state)
REWRITTEN = ("config.json", "joint_head_config.json", "joint_head.safetensors", "processor_config.json",
             "preprocessor_config.json", "training_state.pt", INDEX_FILE)


def _is_backbone_weight(path: Path) -> bool:
    return (path.suffix == ".safetensors" and path.name != "joint_head.safetensors") or \
        path.name == "model.safetensors.index.json"


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:          # another filesystem, or links not allowed: copy
        shutil.copy2(source, target)


def source_dtypes(directory: Path, prefix: str = "") -> dict[str, torch.dtype]:
    """Stored dtype of every tensor in the directory's safetensors files (so a save keeps bf16 as bf16)."""
    dtypes = {}
    for path in sorted(directory.glob("*.safetensors")):
        with safe_open(str(path), "pt") as handle:
            for key in handle.keys():  # noqa: SIM118 (safe_open is not iterable)
                if key.startswith(prefix):
                    dtypes[key] = SAFETENSORS_DTYPES.get(handle.get_slice(key).get_dtype(), torch.float32)
    return dtypes


def save_head(head: nn.Module, source_dir: Path, out_dir: Path) -> None:
    with safe_open(str(source_dir / "joint_head.safetensors"), "pt") as handle:
        first = next(iter(handle.keys()))
        dtype = SAFETENSORS_DTYPES.get(handle.get_slice(first).get_dtype(), torch.float32)
    state = {k: v.detach().to("cpu", dtype).contiguous() for k, v in head.state_dict().items()}
    # the date this checkpoint was made: what /v1/models reports as its release date (omni.model.checkpoint)
    metadata = {"format": "pt", "release_date": dt.datetime.now(dt.timezone.utc).date().isoformat()}
    save_file(state, str(out_dir / "joint_head.safetensors"), metadata=metadata)
    shutil.copy2(source_dir / "joint_head_config.json", out_dir / "joint_head_config.json")


def released_head_config(config: dict[str, object]) -> dict[str, object]:
    """The head config with the release's keys only, in the release's order."""
    missing = [key for key in RELEASED_HEAD_KEYS if key not in config]
    if missing:
        raise CheckpointError(f"joint_head_config.json lacks {', '.join(missing)}")
    return {key: config[key] for key in RELEASED_HEAD_KEYS}


def write_head_config(config: dict[str, object], out_dir: Path) -> None:
    (out_dir / "joint_head_config.json").write_text(json.dumps(released_head_config(config), indent=2) + "\n")


def save_thinker(backbone: Backbone, source_dir: Path, out_dir: Path) -> None:
    """The thinker's weights under the released names (`thinker.*`), in the source's dtypes and shard layout."""
    thinker = backbone.thinker
    lexical = backbone.lexical_table
    restored = nn.Linear(lexical.shape[1], lexical.shape[0], bias=False, device=lexical.device, dtype=lexical.dtype)
    restored.weight = nn.Parameter(lexical, requires_grad=False)
    identity, thinker.lm_head = thinker.lm_head, restored
    dtypes = source_dtypes(source_dir, "thinker.")
    try:
        with tempfile.TemporaryDirectory(dir=out_dir, prefix=".thinker.") as staging:
            thinker.save_pretrained(staging, safe_serialization=True)
            index = Path(staging) / "model.safetensors.index.json"
            weight_map = {}
            for shard in sorted(Path(staging).glob("*.safetensors")):
                state = {f"thinker.{k}": v for k, v in load_file(str(shard)).items()}
                state = {k: v.to(dtypes.get(k, v.dtype)).contiguous() for k, v in state.items()}
                save_file(state, str(out_dir / shard.name), metadata={"format": "pt"})
                weight_map.update(dict.fromkeys(state, shard.name))
            if index.is_file():
                body = json.loads(index.read_text())
                body["weight_map"] = weight_map
                (out_dir / index.name).write_text(json.dumps(body, indent=2) + "\n")
    finally:
        thinker.lm_head = identity


def save_released(model: TrainableModel[RecordT], source_dir: str | Path, out_dir: str | Path,
                  backbone_trained: bool) -> Path:
    """Write the model into `out_dir` in the released layout (files in it that this writes are replaced)."""
    source, out = Path(source_dir), Path(out_dir)
    if source.resolve() == out.resolve():
        raise ValueError("the output directory must differ from the source checkpoint")
    out.mkdir(parents=True, exist_ok=True)
    for stale in out.iterdir():
        if stale.is_file() and (_is_backbone_weight(stale) or stale.name in ("joint_head.safetensors",
                                                                              "calibration.json")):
            stale.unlink()
    for path in sorted(source.iterdir()):
        if not path.is_file() or path.name in NOT_CARRIED or path.name.startswith("joint_head"):
            continue
        if _is_backbone_weight(path):
            if not backbone_trained:
                _link_or_copy(path, out / path.name)
            continue
        shutil.copy2(path, out / path.name)
    if backbone_trained:
        save_thinker(model.backbone, source, out)
    save_head(model.head, source, out)
    return out


def released_config(config: dict[str, Any]) -> dict[str, Any]:
    """config.json with the vision fields the release's carries and transformers 5 no longer writes: the side of the
    square the position table covers (`image_size` = patch_size x sqrt(num_position_embeddings)) and that it is
    applied (`apply_vit_abs_pos_embed`). Present values are kept."""
    vision = config.get("thinker_config", {}).get("vision_config")
    if isinstance(vision, dict) and "num_position_embeddings" in vision and "patch_size" in vision:
        side = math.isqrt(int(vision["num_position_embeddings"]))
        vision.setdefault("image_size", side * int(vision["patch_size"]))
        vision.setdefault("apply_vit_abs_pos_embed", True)
    return config


def released_processor_config(directory: Path) -> dict[str, Any]:
    """processor_config.json in the v5 layout (image, video and Whisper sections), from either processor file."""
    combined = directory / "processor_config.json"
    if combined.is_file():
        config = json.loads(combined.read_text())
    else:           # a flat preprocessor_config.json holds both the image and the audio settings
        flat = json.loads((directory / "preprocessor_config.json").read_text())
        config = {"image_processor": flat, "feature_extractor": flat}
    config.setdefault("processor_class", PROCESSOR_CLASS)
    image = config.get("image_processor", {})
    if "video_processor" not in config:
        config["video_processor"] = {"video_processor_type": VIDEO_PROCESSOR_TYPE,
                                     **{key: image[key] for key in SHARED_VISION_KEYS if key in image},
                                     "size": dict(VIDEO_SIZE)}
    return config


def _refuse_unloadable(source: Path) -> None:
    """CheckpointError listing every check that fails: what would not load is not exported."""
    from omni.model.doctor.directory import check_directory

    failed = [f for f in check_directory(source).findings if f.status == "fail"]
    if failed:
        raise CheckpointError(f"{source} would not load, so it is not exported: "
                              + "; ".join(f"{f.check}: {f.detail}" for f in failed))


def fresh_target(source: Path, out: Path) -> None:
    if source.resolve() == out.resolve():
        raise CheckpointError("the output directory must differ from the source checkpoint")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise CheckpointError(f"{out} already exists and is not an empty directory: export into a new one")


def _readable(directory: Path) -> None:
    """A checkpoint is for others to read: the staging directory (mkdtemp: 0700) and the shards written through
    temporary files (0600) get the usual modes."""
    directory.chmod(0o755)
    for path in directory.iterdir():
        path.chmod(0o644)


@contextlib.contextmanager
def staged(out: Path) -> Iterator[Path]:
    """A staging directory beside `out` to write a checkpoint into; renamed into place (readable by all) only when the
    block completes, removed otherwise: a checkpoint is written whole or not at all. `out`: new or empty."""
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        yield staging
        _readable(staging)
        if out.exists():
            out.rmdir()             # empty (fresh_target checked)
        os.replace(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def export_checkpoint(source_dir: str | Path, out_dir: str | Path,
                      max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES) -> Path:
    """Write the checkpoint in `source_dir` into the new directory `out_dir` in the released layout (see above)."""
    source, out = Path(source_dir), Path(out_dir)
    fresh_target(source, out)
    _refuse_unloadable(source)
    with staged(out) as staging:
        weight_files = source_files(source)
        write_shards(stored_tensors(weight_files), staging, max_shard_bytes)
        shutil.copy2(source / "joint_head.safetensors", staging / "joint_head.safetensors")
        write_head_config(json.loads((source / "joint_head_config.json").read_text()), staging)
        config = released_config(json.loads((source / "config.json").read_text()))
        (staging / "config.json").write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
        processor = released_processor_config(source)
        (staging / "processor_config.json").write_text(json.dumps(processor, indent=2, ensure_ascii=False) + "\n")
        for path in sorted(source.iterdir()):
            if path.is_file() and path.name not in REWRITTEN and path.suffix != ".safetensors":
                shutil.copy2(path, staging / path.name)
    return out
