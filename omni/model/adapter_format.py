"""The adapter format: a fine-tune as a folder beside one base checkpoint, not a whole new checkpoint.

    adapter.json                 the manifest (`AdapterManifest`): format, name-free identity of the base (the
                                 checkpoint's sha256 as the audit record names it), the quantization scheme the
                                 base was trained over (`base_quantization`, optional: none, nf4, int8 …; absent in
                                 adapters written before it was recorded), mode (head | lora), the head's
                                 config, LoRA rank / alpha / target modules, the training data's hash, when it was
                                 made, and every other file with its bytes and sha256
    joint_head.safetensors       the joint-schema head (every adapter has its own)
    adapter_config.json          LoRA only: peft's config (as `PeftModel.save_pretrained` writes it)
    adapter_model.safetensors    LoRA only: peft's weights (the thinker's text attention projections)
    calibration.json             optional: a calibration fitted for this adapter (`omni calibrate --adapter`)
    policy.toml                  optional: the decision policy its decisions are taken under (operator's
                                 configuration: not listed, not part of its sha256; decisions name its sha256)

An adapter's sha256 (`adapter_sha256`) is the sha256 of the lines `<name>\\t<bytes>\\t<sha256>\\n` over adapter.json
and every file it lists, in name order: what an audit record names. `read_manifest` validates adapter.json;
`check_files` checks that every listed file is there, whole and unchanged (bytes and sha256). A name an adapter is
served under is checked by `check_adapter_name` (no `/`, `..`, control characters; at most 64 characters).
Knows nothing of torch modules, peft, loading weights, serving or HTTP.
"""
from __future__ import annotations

import datetime
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omni.contract.errors import AdapterError
from omni.model.fingerprint import file_sha256

ADAPTER_FORMAT = "omni-adapter/1"
MANIFEST_FILE = "adapter.json"
HEAD_FILE = "joint_head.safetensors"
LORA_CONFIG_FILE = "adapter_config.json"
LORA_WEIGHTS_FILE = "adapter_model.safetensors"
CALIBRATION_FILE = "calibration.json"
POLICY_FILE = "policy.toml"            # optional: the decision policy bound to this adapter (not part of its sha256)
ADAPTER_MODES = ("head", "lora")
MAX_NAME_CHARS = 64
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def check_adapter_name(name: str) -> str:
    """`name` when it may name an adapter (a model name in requests, a folder under --adapters); AdapterError if not."""
    if not isinstance(name, str) or not name:
        raise AdapterError(str(name), "an adapter needs a non-empty name")
    if len(name) > MAX_NAME_CHARS or not _NAME.fullmatch(name) or ".." in name:
        raise AdapterError(name, f"an adapter name is 1-{MAX_NAME_CHARS} letters, digits, '.', '_' or '-', starting "
                           "with a letter or digit, without '..' (no '/', spaces or control characters)")
    return name


@dataclass(frozen=True)
class LoraSpec:
    """The LoRA part of an adapter: rank, alpha (scaling = alpha / rank) and the module names it targets."""

    rank: int
    alpha: float
    targets: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "alpha": self.alpha, "targets": list(self.targets)}


@dataclass(frozen=True)
class FileEntry:
    bytes: int
    sha256: str


@dataclass(frozen=True)
class AdapterManifest:
    """adapter.json, validated."""

    base_sha256: str                       # the base checkpoint's sha256, as its audit records name it
    mode: str                              # head | lora
    head_config: dict[str, Any]            # joint_head_config.json of this adapter's head
    lora: LoraSpec | None = None
    training_data_sha256: str | None = None
    created: str = ""                      # ISO 8601, UTC
    files: dict[str, FileEntry] = field(default_factory=dict)
    base_release_date: str | None = None   # the base checkpoint's release date, for /v1/models
    format: str = ADAPTER_FORMAT
    base_quantization: str | None = None   # the --quantize scheme of the base it was trained over; None: not recorded

    def to_json(self) -> dict[str, Any]:
        optional = {} if self.base_quantization is None else {"base_quantization": self.base_quantization}
        return {"format": self.format, "base_sha256": self.base_sha256, "base_release_date": self.base_release_date,
                **optional, "mode": self.mode, "head_config": dict(self.head_config),
                "lora": self.lora.to_json() if self.lora is not None else None,
                "training_data_sha256": self.training_data_sha256, "created": self.created,
                "files": {name: {"bytes": e.bytes, "sha256": e.sha256} for name, e in sorted(self.files.items())}}


def now_utc() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def expected_files(mode: str) -> tuple[str, ...]:
    """The weight files an adapter of `mode` must have (calibration.json is optional)."""
    return (HEAD_FILE,) if mode == "head" else (HEAD_FILE, LORA_CONFIG_FILE, LORA_WEIGHTS_FILE)


def write_manifest(directory: str | Path, manifest: AdapterManifest) -> AdapterManifest:
    """Write adapter.json for the files now in `directory` (each listed with bytes and sha256); returns it."""
    directory = Path(directory)
    names = [*expected_files(manifest.mode), *([CALIBRATION_FILE] if (directory / CALIBRATION_FILE).is_file() else [])]
    files = {}
    for name in names:
        path = directory / name
        if not path.is_file():
            raise AdapterError(directory.name, f"{name} is missing: an adapter of mode {manifest.mode} needs it")
        files[name] = FileEntry(path.stat().st_size, file_sha256(path))
    written = AdapterManifest(manifest.base_sha256, manifest.mode, dict(manifest.head_config), manifest.lora,
                              manifest.training_data_sha256, manifest.created or now_utc(), files,
                              manifest.base_release_date, base_quantization=manifest.base_quantization)
    (directory / MANIFEST_FILE).write_text(json.dumps(written.to_json(), indent=2) + "\n")
    return written


def _need(raw: dict[str, Any], key: str, kind: type | tuple[type, ...], name: str) -> Any:
    value = raw.get(key)
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise AdapterError(name, f"{MANIFEST_FILE}: {key!r} is missing or not a {getattr(kind, '__name__', kind)}")
    return value


def _lora(raw: Any, name: str) -> LoraSpec:
    if not isinstance(raw, dict):
        raise AdapterError(name, f"{MANIFEST_FILE}: a lora adapter needs 'lora' (rank, alpha, targets)")
    rank, alpha = _need(raw, "rank", int, name), _need(raw, "alpha", (int, float), name)
    targets = raw.get("targets")
    if rank < 1 or not isinstance(targets, list) or not targets or not all(isinstance(t, str) for t in targets):
        raise AdapterError(name, f"{MANIFEST_FILE}: 'lora' needs rank >= 1 and a non-empty list of targets")
    return LoraSpec(rank, float(alpha), tuple(targets))


def _files(raw: Any, name: str, mode: str) -> dict[str, FileEntry]:
    if not isinstance(raw, dict):
        raise AdapterError(name, f"{MANIFEST_FILE}: 'files' must map file names to bytes and sha256")
    files: dict[str, FileEntry] = {}
    for file, entry in raw.items():
        if "/" in file or file.startswith(".") or not isinstance(entry, dict) \
                or not isinstance(entry.get("bytes"), int) or not isinstance(entry.get("sha256"), str):
            raise AdapterError(name, f"{MANIFEST_FILE}: files entry {file!r} must be a plain name with bytes and sha256")
        files[file] = FileEntry(entry["bytes"], entry["sha256"])
    missing = [f for f in expected_files(mode) if f not in files]
    if missing:
        raise AdapterError(name, f"{MANIFEST_FILE} does not list {', '.join(missing)} (needed by mode {mode})")
    return files


def base_mismatch(manifest: AdapterManifest, base_sha256: str, base: str) -> str | None:
    """Why the adapter does not fit the base whose checkpoint sha256 is `base_sha256` (`base`: how to name it),
    naming both fingerprints; None when it is its base."""
    if manifest.base_sha256 == base_sha256:
        return None
    return (f"it was trained on the base checkpoint with sha256 {manifest.base_sha256}, but {base} has sha256 "
            f"{base_sha256}: not its base (fingerprints differ: fine-tune it again on this base)")


def read_manifest(directory: str | Path, name: str | None = None) -> AdapterManifest:
    """adapter.json of the adapter in `directory`, validated (AdapterError naming the adapter and the fault)."""
    directory = Path(directory)
    name = name or directory.name
    path = directory / MANIFEST_FILE
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise AdapterError(name, f"{directory} has no {MANIFEST_FILE}: not an adapter folder") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise AdapterError(name, f"{MANIFEST_FILE} does not read as JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise AdapterError(name, f"{MANIFEST_FILE} must hold an object")
    if raw.get("format") != ADAPTER_FORMAT:
        raise AdapterError(name, f"{MANIFEST_FILE}: format {raw.get('format')!r} is not {ADAPTER_FORMAT!r}")
    mode = raw.get("mode")
    if mode not in ADAPTER_MODES:
        raise AdapterError(name, f"{MANIFEST_FILE}: mode must be one of {', '.join(ADAPTER_MODES)}, not {mode!r}")
    base = _need(raw, "base_sha256", str, name)
    if not re.fullmatch(r"[0-9a-f]{64}", base):
        raise AdapterError(name, f"{MANIFEST_FILE}: base_sha256 must be 64 hex digits")
    data = raw.get("training_data_sha256")
    release = raw.get("base_release_date")
    return AdapterManifest(base, mode, dict(_need(raw, "head_config", dict, name)),
                           _lora(raw.get("lora"), name) if mode == "lora" else None,
                           data if isinstance(data, str) else None, str(raw.get("created") or ""),
                           _files(raw.get("files"), name, mode), release if isinstance(release, str) else None,
                           base_quantization=_quantization(raw.get("base_quantization"), name))


def _quantization(raw: Any, name: str) -> str | None:
    """base_quantization: absent (an adapter written before it was recorded) or a scheme's name."""
    if raw is None:
        return None
    if not isinstance(raw, str) or not re.fullmatch(r"[a-z0-9]{1,16}", raw):
        raise AdapterError(name, f"{MANIFEST_FILE}: base_quantization must be a scheme's name such as none or nf4, "
                           f"not {raw!r}")
    return raw


def check_files(directory: str | Path, manifest: AdapterManifest, name: str | None = None) -> None:
    """Every file adapter.json lists is in `directory`, whole and unchanged (bytes, then sha256); AdapterError if not."""
    directory = Path(directory)
    name = name or directory.name
    for file, entry in sorted(manifest.files.items()):
        path = directory / file
        if not path.is_file():
            raise AdapterError(name, f"{file} is missing")
        size = path.stat().st_size
        if size != entry.bytes:
            raise AdapterError(name, f"{file} has {size} bytes, adapter.json says {entry.bytes} (truncated or "
                               "replaced)")
        if file_sha256(path) != entry.sha256:
            raise AdapterError(name, f"{file} does not match its sha256 in adapter.json (changed after it was written)")


def adapter_sha256(directory: str | Path, manifest: AdapterManifest) -> str:
    """The adapter's identity for audit records: sha256 over adapter.json and the files it lists (see the module
    docstring). Listed files are taken from the manifest (check them first with `check_files`)."""
    directory = Path(directory)
    own = directory / MANIFEST_FILE
    entries = {MANIFEST_FILE: FileEntry(own.stat().st_size, file_sha256(own)), **manifest.files}
    lines = "".join(f"{name}\t{e.bytes}\t{e.sha256}\n" for name, e in sorted(entries.items()))
    return hashlib.sha256(lines.encode()).hexdigest()
