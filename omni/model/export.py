"""Writes a (fine-tuned) ClefModel back out in the released Clef-omni layout, loadable by `ClefModel.load`.

The head goes to `joint_head.safetensors` (Clef state-dict names, the source file's dtype, today's date as its
`release_date` metadata) next to an unchanged `joint_head_config.json`. An untouched backbone is linked (or copied)
from the source directory; a trained one is written through transformers' own `save_pretrained` (which undoes the load-time expert fusing), with `lm_head`
restored from the lexical table for the duration and every key prefixed `thinker.` as in the release, so strict
loading passes. Tokenizer, processor and config files are copied. A `calibration.json` is never carried over (it is
bound to the old weights). Knows nothing of training loops, datasets or HTTP.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from omni.model.backbone import Backbone
from omni.model.surface import RecordT, TrainableModel

SAFETENSORS_DTYPES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "F64": torch.float64}
NOT_CARRIED = ("calibration.json", "training_state.pt", "training.json")


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
