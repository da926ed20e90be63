"""The checks of a checkpoint directory, without loading a weight: its files (the loader's own check), every
safetensors header whole, the backbone's and the head's tensor names and shapes against what their configs promise
(`layout`), the config values the loader refuses (M-RoPE sections: `omni.model.checkpoint.check_mrope_section`),
and the tokenizer and processor (loaded as the model loads them: they are small).

One finding per check, each naming what is wrong in the files' own names; the checks go on after a failure where they
still can, so one run lists every problem. Knows nothing of devices, memory, argv or how findings are printed.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omni.contract.errors import CheckpointConfigError, CheckpointError
from omni.model import quantize
from omni.model.checkpoint import check_checkpoint_files, check_mrope_section
from omni.model.doctor import layout
from omni.model.doctor.findings import Finding, gib, some_names
from omni.model.doctor.headers import HeaderError, ShardHeader, TensorInfo, read_header

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
HEAD_FILE = "joint_head.safetensors"
# the config's placeholder ids, and the tokenizer's special token each must be (preprocess.loader's names)
CONFIG_TOKEN_IDS = {"image_token_id": "image_pad", "video_token_id": "video_pad", "audio_token_id": "audio_pad",
                    "vision_start_token_id": "vision_start", "vision_end_token_id": "vision_end",
                    "audio_start_token_id": "audio_start", "audio_end_token_id": "audio_end"}


@dataclass
class CheckpointReport:
    findings: list[Finding] = field(default_factory=list)
    shape: layout.ModelShape | None = None        # None when config.json could not be read


@dataclass
class Shards:
    """The backbone's weight files: each one's header (or why it could not be read), and the index's map."""

    headers: dict[str, ShardHeader] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)            # what is wrong, in words
    unreadable: list[str] = field(default_factory=list)          # weight files whose header could not be read
    index: dict[str, str] | None = None                          # tensor -> file, when sharded

    def tensors(self) -> dict[str, TensorInfo]:
        return {name: info for header in self.headers.values() for name, info in header.tensors.items()}


def check_directory(directory: Path) -> CheckpointReport:
    """Every check of the directory, in the order they are printed."""
    report = CheckpointReport()
    report.findings.append(files_finding(directory))
    shards = read_shards(directory)
    report.findings.append(shards_finding(shards))
    try:
        config = layout.read_backbone_config(directory)
        expected = layout.expected_backbone(config)
    except CheckpointError as exc:
        report.findings.append(Finding("backbone", "fail", str(exc)))
        config, expected = None, {}
    if config is not None:
        report.findings.append(backbone_finding(expected, shards, config))
    backbone_hidden = None if config is None else int(config.thinker_config.text_config.hidden_size)
    head_config, head_expected, finding = check_head(directory, backbone_hidden)
    report.findings.append(finding)
    if config is not None:
        report.findings.append(tokenizer_finding(directory, config))
        report.shape = layout.model_shape(config, expected, head_config, head_expected)
    return report


def files_finding(directory: Path) -> Finding:
    """The loader's own check of the released layout's files; a directory with neither a config nor weights is said
    to be no checkpoint at all, with what it does hold."""
    if not (directory / "config.json").is_file() and not any(directory.glob("*.safetensors")):
        held = sorted(p.name for p in directory.iterdir())
        return Finding("files", "fail", "not a checkpoint directory: no config.json, no *.safetensors (it holds "
                       f"{some_names(held) if held else 'nothing'})", {"holds": held})
    try:
        check_checkpoint_files(directory)
    except CheckpointError as exc:
        return Finding("files", "fail", str(exc).removeprefix(f"{directory} "))
    return Finding("files", "ok", "config, backbone weights, joint head, tokenizer, processor")


def read_shards(directory: Path) -> Shards:
    """The backbone's weight files as transformers finds them: model.safetensors, or those the index names."""
    shards = Shards()
    index_path = directory / INDEX_FILE
    if index_path.is_file():
        try:
            weight_map = json.loads(index_path.read_text())["weight_map"]
            shards.index = {str(k): str(v) for k, v in weight_map.items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            shards.problems.append(f"{INDEX_FILE} cannot be read ({exc})")
            return shards
        names = sorted(set(shards.index.values()))
    elif (directory / SINGLE_FILE).is_file():
        names = [SINGLE_FILE]
    else:
        names = sorted(p.name for p in directory.glob("*.safetensors") if p.name != HEAD_FILE)
        shards.problems.append(f"{len(names)} weight files but no {INDEX_FILE} (transformers finds shards through "
                               "it)" if names else f"no {SINGLE_FILE} nor {INDEX_FILE}")
    for name in names:
        try:
            shards.headers[name] = read_header(directory / name)
        except FileNotFoundError:
            shards.problems.append(f"{name} is missing (the index names it)")
            shards.unreadable.append(name)
        except (HeaderError, OSError) as exc:
            shards.problems.append(str(exc))
            shards.unreadable.append(name)
    misplaced = [tensor for tensor, name in sorted((shards.index or {}).items())
                 if name in shards.headers and tensor not in shards.headers[name].tensors]
    if misplaced:
        shards.problems.append(f"the index puts {len(misplaced)} tensors in files that lack them: "
                               f"{some_names(misplaced)}")
    return shards


def shards_finding(shards: Shards) -> Finding:
    total = sum(h.size_bytes for h in shards.headers.values())
    data: dict[str, Any] = {"files": sorted(shards.headers), "bytes": total, "problems": shards.problems}
    if shards.problems:
        return Finding("weight files", "fail", "; ".join(shards.problems), data)
    count = len(shards.headers)
    return Finding("weight files", "ok", f"{count} file{'s' if count != 1 else ''}, {gib(total)}, every header "
                   "whole", data)


def backbone_finding(expected: layout.Shapes, shards: Shards, config: Any) -> Finding:
    """The backbone's tensors against config.json; a config the loader refuses (`check_mrope_section`) fails first."""
    try:
        check_mrope_section(config)
    except CheckpointConfigError as exc:
        return Finding("backbone", "fail", f"{exc} — the loader refuses it", {"field": exc.field})
    found = shards.tensors()
    quantized = _quantized_finding(config, found)
    if quantized is not None:
        return quantized
    if not shards.headers or (shards.unreadable and shards.index is None):
        return Finding("backbone", "fail", "tensors not compared: the weight files cannot be read (above)")
    if shards.unreadable:       # compare what the readable files should hold; the others are named above
        expected = {k: v for k, v in expected.items() if (shards.index or {}).get(k) not in shards.unreadable}
    comparison = layout.compare_backbone(expected, found)
    dtypes = Counter(found[name].dtype_name for name in expected if name in found)
    data = {"expected": len(expected), "missing": comparison.missing, "mismatched": comparison.mismatched,
            "unexpected": comparison.unexpected, "ignored": len(comparison.ignored), "dtypes": dict(dtypes)}
    if not comparison.matches:
        return Finding("backbone", "fail", "does not match config.json: " + _problems(comparison), data)
    params = sum(found[name].numel for name in expected)
    ignored = f"; {len(comparison.ignored)} talker/code2wav tensors not loaded" if comparison.ignored else ""
    return Finding("backbone", "ok", f"{len(expected)} tensors match config.json ({_params(params)} parameters, "
                   f"{'/'.join(sorted(dtypes))} on disk{ignored})", data)


def _quantized_finding(config: Any, found: dict[str, TensorInfo]) -> Finding | None:
    """A pre-quantized checkpoint's tensors are its library's packed parts, not config.json's shapes: said as such
    (the library checks them when it loads); None for an unquantized checkpoint."""
    try:
        stored = quantize.stored_scheme(config)
    except quantize.QuantizationError as exc:
        return Finding("backbone", "fail", str(exc))
    if stored is None:
        return None
    library = quantize.SCHEMES[stored].library
    return Finding("backbone", "ok", f"pre-quantized as {stored} by {library}: {len(found)} tensors; their shapes "
                   f"are {library}'s packed parts, checked when it loads", {"quantization": stored,
                                                                            "tensors": len(found)})


def check_head(directory: Path, backbone_hidden: int | None) -> tuple[dict[str, Any] | None, layout.Shapes | None,
                                                                        Finding]:
    """(head config, expected head tensors, the finding); the first two None when the config is unusable."""
    missing = [name for name in ("joint_head_config.json", HEAD_FILE) if not (directory / name).is_file()]
    gone = Finding("joint head", "fail", f"{' and '.join(missing)} missing: Clef's joint-schema head is not there")
    if "joint_head_config.json" in missing:
        return None, None, gone
    try:
        config = layout.read_head_config(directory)
        expected = layout.expected_head(config)
    except CheckpointError as exc:
        return None, None, Finding("joint head", "fail", str(exc))
    if missing:         # the config alone still tells the head's size
        return config, expected, gone
    try:
        found = read_header(directory / HEAD_FILE).tensors
    except (HeaderError, OSError) as exc:
        return config, expected, Finding("joint head", "fail", str(exc))
    comparison = layout.compare(expected, found)
    if not comparison.matches:
        return config, expected, Finding("joint head", "fail", "joint_head.safetensors does not match "
                                         "joint_head_config.json: " + _problems(comparison),
                                         {"missing": comparison.missing, "mismatched": comparison.mismatched,
                                          "unexpected": comparison.unexpected})
    hidden = config.get("hidden_size")
    if backbone_hidden is not None and hidden != backbone_hidden:
        return config, expected, Finding("joint head", "fail", f"hidden_size {hidden} != the backbone's hidden size "
                                         f"{backbone_hidden}")
    dtypes = "/".join(sorted({info.dtype_name for info in found.values()}))
    return config, expected, Finding("joint head", "ok", f"{len(expected)} tensors match joint_head_config.json "
                                     f"(width {config.get('width')}, {_params(sum(i.numel for i in found.values()))} "
                                     f"parameters, {dtypes} on disk)")


def tokenizer_finding(directory: Path, config: Any) -> Finding:
    """The tokenizer and processor load as the model loads them, and agree with config.json's ids and vocabulary."""
    from preprocess.loader import ProcessorConfigError, load_processor_parts

    try:
        parts = load_processor_parts(directory)
    except ProcessorConfigError as exc:
        return Finding("tokenizer", "fail", str(exc))
    except Exception as exc:  # noqa: BLE001 - a garbled tokenizer.json raises KeyError, the tokenizers library Exception
        return Finding("tokenizer", "fail", f"cannot load the tokenizer/processor: {type(exc).__name__}: {exc}")
    thinker = config.thinker_config
    vocab = int(thinker.text_config.vocab_size)
    problems = [f"{key} is {getattr(thinker, key)} in config.json, the tokenizer's {name} is {parts.special_ids[name]}"
                for key, name in CONFIG_TOKEN_IDS.items()
                if getattr(thinker, key, None) is not None and getattr(thinker, key) != parts.special_ids[name]]
    if len(parts.tokenizer) > vocab:
        problems.append(f"the tokenizer has {len(parts.tokenizer)} ids, the embedding only {vocab} rows")
    if problems:
        return Finding("tokenizer", "fail", "; ".join(problems))
    return Finding("tokenizer", "ok", f"{len(parts.tokenizer):,} ids for {vocab:,} embedding rows, multimodal token ids "
                   "as in config.json; image + Whisper processor")


def _problems(comparison: layout.Comparison) -> str:
    return " | ".join(f"{what} {len(names)}: {some_names(names)}" for what, names in
                      (("missing", comparison.missing), ("shape-mismatched", comparison.mismatched),
                       ("unexpected", comparison.unexpected)) if names)


def _params(count: int) -> str:
    return f"{count / 1e9:.2f} B" if count >= 1e9 else f"{count / 1e6:.2f} M"
