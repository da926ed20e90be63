"""Backbone weights written as the release ships them: `model-0000i-of-0000n.safetensors` shards of at most a given
size, and `model.safetensors.index.json` mapping every tensor to its shard (transformers and vLLM find shards through
it; vLLM also uses it to tell the backbone's files from `joint_head.safetensors`, so it is written for one shard too).

Tensors are read one shard's worth at a time from the source's safetensors files and written with their stored dtype
and bytes unchanged, so memory stays bounded by one shard. Knows nothing of configs, heads, models or argv.
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from safetensors import safe_open
from safetensors.torch import save_file

INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"
DEFAULT_MAX_SHARD_BYTES = 5 * 1000 ** 3        # transformers' 5GB: the release's 15 shards of 65.7 GiB
DTYPE_BYTES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
               "F8_E4M3": 1, "F8_E5M2": 1}


@dataclass(frozen=True)
class StoredTensor:
    """One tensor of the source: its name, the file that holds it and its size on disk."""

    name: str
    path: Path
    nbytes: int


def shard_name(number: int, count: int) -> str:
    return f"model-{number:05d}-of-{count:05d}.safetensors"


def source_files(directory: Path) -> list[Path]:
    """The backbone's weight files as transformers finds them: the index's files, else model.safetensors."""
    index = directory / INDEX_FILE
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return [directory / name for name in sorted(set(weight_map.values()))]
    return [directory / SINGLE_FILE]


def stored_tensors(files: list[Path]) -> list[StoredTensor]:
    """Every tensor of `files`, by name, with its size (read from the headers: no data is loaded)."""
    tensors = []
    for path in files:
        with safe_open(str(path), "pt") as handle:
            for name in handle.keys():  # noqa: SIM118 (safe_open is not iterable)
                piece = handle.get_slice(name)
                size = math.prod(piece.get_shape()) * DTYPE_BYTES.get(piece.get_dtype(), 4)
                tensors.append(StoredTensor(name, path, size))
    return sorted(tensors, key=lambda t: t.name)


def plan_shards(tensors: list[StoredTensor], max_shard_bytes: int) -> list[list[StoredTensor]]:
    """Tensors in name order, cut into shards of at most `max_shard_bytes` (a larger tensor gets a shard alone)."""
    if max_shard_bytes < 1:
        raise ValueError(f"max_shard_bytes must be at least 1, not {max_shard_bytes}")
    shards: list[list[StoredTensor]] = []
    size = 0
    for tensor in tensors:
        if not shards or (shards[-1] and size + tensor.nbytes > max_shard_bytes):
            shards.append([])
            size = 0
        shards[-1].append(tensor)
        size += tensor.nbytes
    return shards


def write_shards(tensors: list[StoredTensor], out_dir: Path, max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
                 metadata: Mapping[str, str] | None = None) -> dict[str, str]:
    """Write the tensors as numbered shards plus the index into `out_dir`; returns the index's weight map."""
    shards = plan_shards(tensors, max_shard_bytes)
    weight_map: dict[str, str] = {}
    for number, shard in enumerate(shards, start=1):
        name = shard_name(number, len(shards))
        state = {}
        for path in dict.fromkeys(tensor.path for tensor in shard):      # each source file opened once per shard
            with safe_open(str(path), "pt") as handle:
                state.update({t.name: handle.get_tensor(t.name) for t in shard if t.path == path})
        state = {tensor.name: state[tensor.name] for tensor in shard}
        save_file(state, str(out_dir / name), metadata={"format": "pt", **(metadata or {})})
        weight_map.update(dict.fromkeys(state, name))
        del state
    index = {"metadata": {"total_size": sum(t.nbytes for t in tensors)}, "weight_map": dict(sorted(weight_map.items()))}
    (out_dir / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
    return weight_map
