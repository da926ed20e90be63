"""The header of a safetensors file, read without its tensor data: each tensor's name, dtype and shape, and whether
the file holds every byte its header promises (a shard cut short by an interrupted download is found here, not after
minutes of loading).

The format: 8 bytes (little-endian u64) giving the header's length N, N bytes of JSON
`{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}`, then the data, whose offsets
count from byte 8 + N. Knows nothing of checkpoints, models or torch.
"""
from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

MAX_HEADER_BYTES = 100 * 1024 * 1024       # the safetensors library refuses larger headers
ITEM_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1, "I16": 2, "U16": 2, "F16": 2,
              "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8, "F64": 8, "C64": 8}
TORCH_NAMES = {"F32": "float32", "BF16": "bfloat16", "F16": "float16", "F64": "float64", "F8_E4M3": "float8_e4m3fn",
               "F8_E5M2": "float8_e5m2", "I64": "int64", "I32": "int32", "I8": "int8", "U8": "uint8", "BOOL": "bool"}


class HeaderError(ValueError):
    """A safetensors file whose header cannot be read or does not agree with the file; the message says how."""


@dataclass(frozen=True)
class TensorInfo:
    dtype: str                    # safetensors' name: "BF16", "F32" …
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def dtype_name(self) -> str:
        """torch's name for the dtype ("bfloat16"), or safetensors' own when torch has none."""
        return TORCH_NAMES.get(self.dtype, self.dtype)


@dataclass(frozen=True)
class ShardHeader:
    path: Path
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]
    size_bytes: int


def read_header(path: Path) -> ShardHeader:
    """The header of the safetensors file at `path`, checked against the file's size (HeaderError when they differ)."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise HeaderError(f"{path.name} is {size} bytes: too short to be a safetensors file")
        (header_bytes,) = struct.unpack("<Q", prefix)
        if header_bytes > MAX_HEADER_BYTES or 8 + header_bytes > size:
            raise HeaderError(f"{path.name} is {size:,} bytes, its first bytes announce a {header_bytes:,}-byte "
                              "header: truncated, or not a safetensors file")
        try:
            raw = json.loads(handle.read(header_bytes))
        except (UnicodeDecodeError, ValueError) as exc:
            raise HeaderError(f"{path.name}: its header is not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise HeaderError(f"{path.name}: its header is not a JSON object")
    metadata = raw.pop("__metadata__", None) or {}
    tensors, data_end = {}, 0
    for name, entry in raw.items():
        info, end = _tensor(path, name, entry)
        tensors[name] = info
        data_end = max(data_end, end)
    expected = 8 + header_bytes + data_end
    if size < expected:
        raise HeaderError(f"{path.name} is truncated: {size:,} bytes, its header needs {expected:,} "
                          f"({expected - size:,} missing; download it again)")
    if size > expected:
        raise HeaderError(f"{path.name} has {size - expected:,} bytes after its last tensor (the loader refuses it)")
    return ShardHeader(path, tensors, {str(k): str(v) for k, v in metadata.items()}, size)


def _tensor(path: Path, name: str, entry: object) -> tuple[TensorInfo, int]:
    """One header entry -> (its TensorInfo, where its data ends); HeaderError when the entry is malformed."""
    if not isinstance(entry, dict):
        raise HeaderError(f"{path.name}: header entry {name!r} is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not (isinstance(dtype, str) and isinstance(shape, list) and all(isinstance(n, int) and n >= 0 for n in shape)
            and isinstance(offsets, list) and len(offsets) == 2 and all(isinstance(n, int) for n in offsets)
            and 0 <= offsets[0] <= offsets[1]):
        raise HeaderError(f"{path.name}: header entry {name!r} is malformed ({entry})")
    info = TensorInfo(dtype, tuple(shape))
    if dtype in ITEM_BYTES and offsets[1] - offsets[0] != info.numel * ITEM_BYTES[dtype]:
        raise HeaderError(f"{path.name}: {name} {dtype}{list(shape)} needs {info.numel * ITEM_BYTES[dtype]:,} bytes, "
                          f"its offsets span {offsets[1] - offsets[0]:,}")
    return info, offsets[1]
