"""Optional post-hoc temperature scaling: one temperature per bucket (question type × option-count band × modality set).

Buckets come in two grains. The coarse one, `type:band` ('choice:3-4'), pools every request; the fine one,
`type:band:modalities` ('choice:3-4:image'), only requests with that modality set: 'text' for no media, otherwise
the kinds of the request's media (image, audio, video) sorted and '+'-joined ('audio+image'). A video counts as
video whether or not it has a soundtrack (its sound is part of the video item). The exact set, not the "richest"
kind, because a model's confidence on image+audio need not behave like on audio alone, and pooling mixed sets
is left to the data: a bucket with fewer than `min_samples` labels is not fitted and falls back to its coarse
bucket, which falls back to T = 1 (identity).

`fit_calibration` chooses each temperature by minimising the NLL of labelled head logits; `Calibration.apply`
divides a question's logits by its bucket's temperature before the softmax. The file `calibration.json`
(format 2; format-1 files load as coarse-only) is bound to a fingerprint of the checkpoint (head, backbone,
tokenizer and processor files) and of the prompt format, and `load_calibration` refuses it for any other
checkpoint. The Clef reference has no post-hoc calibration (it is trained), so it is off by default. Knows nothing
of the engine, datasets, HTTP or the environment; it sees logits (numpy arrays or torch tensors), question types,
option counts and the kinds of a request's media items.
"""
from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from omni.contract.errors import CheckpointError
from omni.contract.types import DecisionRequest

if TYPE_CHECKING:
    import torch

# a question's logits, numpy (fitting, evaluation) or torch (serving): calibration returns the same kind
Logits = TypeVar("Logits", "np.ndarray", "torch.Tensor")

CALIBRATION_FILE = "calibration.json"
CALIBRATION_FORMAT = "omni-calibration/2"
READABLE_FORMATS = ("omni-calibration/1", CALIBRATION_FORMAT)    # /1: type × band only, read as coarse buckets
TEXT_ONLY = "text"                                               # the modality set of a request without media
BUCKET_RULE = ("type:band pools every request; type:band:modalities only requests whose media kinds, sorted and "
               "'+'-joined, are those ('text' = no media); a bucket without a temperature falls back to type:band, "
               "then to T = 1")
OPTION_BANDS = ((2, 2, "2"), (3, 4, "3-4"), (5, 8, "5-8"), (9, 1 << 30, "9+"))
FULLY_HASHED_FILES = ("joint_head.safetensors", "joint_head_config.json", "config.json", "tokenizer.json",
                      "tokenizer_config.json", "vocab.json", "merges.txt", "processor_config.json",
                      "preprocessor_config.json")
SAMPLED_BLOCKS = 16
SAMPLED_BLOCK_BYTES = 1 << 16
LOG_BETA_RANGE = (math.log(1e-2), math.log(1e2))   # temperatures between 0.01 and 100


class CalibrationError(CheckpointError):
    """A calibration file that is unreadable or belongs to another checkpoint / prompt format."""


def option_band(n_options: int) -> str:
    for low, high, name in OPTION_BANDS:
        if low <= n_options <= high:
            return name
    raise ValueError(f"a question needs at least 2 options to be calibrated, not {n_options}")


def modality_key(kinds: Iterable[str]) -> str:
    """A request's modality set from its media kinds: 'text' (none), 'image', 'audio+image', 'audio+image+video' …"""
    found = sorted(set(kinds))
    return "+".join(found) if found else TEXT_ONLY


def request_modality(request: DecisionRequest) -> str:
    """The modality set of a request (anything with `media`: items with a `kind`)."""
    return modality_key(item.kind for item in request.media)


def group_key(question_type: str, n_options: int, modality: str | None = None) -> str:
    """Coarse 'noul:2', 'choice:3-4', 'score:5-8' …; fine (with a modality set) 'choice:3-4:image' …"""
    coarse = f"{question_type}:{option_band(n_options)}"
    return coarse if modality is None else f"{coarse}:{modality}"


def coarse_key(key: str) -> str:
    """'choice:3-4:image' → 'choice:3-4' (a coarse key is its own)."""
    return ":".join(key.split(":")[:2])


@dataclass(frozen=True)
class Calibration:
    temperatures: dict[str, float]
    checkpoint_fingerprint: str
    prompt_format: str = ""
    details: dict[str, Any] = field(default_factory=dict)   # per group: samples, NLL before and after (the report)
    file_sha256: str = ""          # of the calibration.json it was read from ("" when not read from a file)
    format: str = CALIBRATION_FORMAT

    def bucket(self, question_type: str, n_options: int, modality: str | None = None) -> str | None:
        """The key of the bucket whose temperature a question takes: the fine bucket's, else the coarse bucket's,
        else None (T = 1; `modality` None: coarse only)."""
        if n_options < 2:
            return None
        if modality is not None:
            fine = group_key(question_type, n_options, modality)
            if fine in self.temperatures:
                return fine
        coarse = group_key(question_type, n_options)
        return coarse if coarse in self.temperatures else None

    def temperature(self, question_type: str, n_options: int, modality: str | None = None) -> float:
        """The temperature of the question's bucket (`bucket`), 1 when none was fitted."""
        key = self.bucket(question_type, n_options, modality)
        return self.temperatures[key] if key is not None else 1.0

    def buckets(self, request: DecisionRequest) -> dict[str, str | None]:
        """Question id -> the bucket it takes in this request (its modality set from its media)."""
        modality = request_modality(request)
        return {q.id: self.bucket(q.type, len(q.options), modality) for q in request.questions}

    def apply(self, question_type: str, n_options: int, logits: Logits, modality: str | None = None) -> Logits:
        """logits [n_options] (numpy or torch) → logits / T of the question's bucket (T = 1 when not fitted)."""
        temperature = self.temperature(question_type, n_options, modality)
        return logits if temperature == 1.0 else logits / temperature

    def apply_record(self, request: DecisionRequest, logits: Sequence[Logits]) -> list[Logits]:
        """Per question logits of one request (its question order) → calibrated logits, same order; the bucket
        takes the request's modality set from its media."""
        modality = request_modality(request)
        return [self.apply(q.type, len(q.options), x, modality) for q, x in zip(request.questions, logits, strict=True)]


# ------------------------------------------------------------------------------------------------- binding
def prompt_format_fingerprint() -> str:
    """Changes when the prompt's fixed text changes (then logits mean something else)."""
    from omni.model import prompt

    return prompt.TEMPLATE_SHA256[:16]


def _sample_file(digest: hashlib._Hash, path: Path) -> None:
    """Name, size, safetensors header and evenly spaced blocks: cheap even for 60 GB of backbone shards."""
    size = path.stat().st_size
    digest.update(f"{path.name}:{size}".encode())
    with path.open("rb") as handle:
        header_length = int.from_bytes(handle.read(8), "little")
        digest.update(handle.read(min(header_length, size)))
        for block in range(SAMPLED_BLOCKS):
            handle.seek(size * block // SAMPLED_BLOCKS)
            digest.update(handle.read(SAMPLED_BLOCK_BYTES))


def checkpoint_fingerprint(directory: str | Path) -> str:
    """sha256 over the head/config/tokenizer/processor files and a sample of every backbone shard."""
    directory = Path(directory)
    digest = hashlib.sha256()
    for name in FULLY_HASHED_FILES:
        path = directory / name
        if path.is_file():
            digest.update(name.encode() + b"\x00" + hashlib.sha256(path.read_bytes()).digest())
    for path in sorted(directory.glob("*.safetensors")):
        if path.name != "joint_head.safetensors":
            _sample_file(digest, path)
    return digest.hexdigest()


# ------------------------------------------------------------------------------------------------- fitting
def _padded(rows: Sequence[np.ndarray]) -> np.ndarray:
    width = max(len(r) for r in rows)
    out = np.full((len(rows), width), -np.inf)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


def temperature_nll(logits: np.ndarray, labels: np.ndarray, temperature: float) -> float:
    """Mean NLL of softmax(logits / T) for -inf-padded logits [N, K] and label indices [N]."""
    scaled = logits / temperature
    top = scaled.max(axis=1, keepdims=True)
    log_normaliser = top[:, 0] + np.log(np.exp(scaled - top).sum(axis=1))
    return float(np.mean(log_normaliser - scaled[np.arange(len(labels)), labels]))


def fit_temperature(logit_rows: Sequence[np.ndarray], labels: Sequence[int], iterations: int = 80) -> float:
    """Temperature minimising the NLL (golden-section search over log(1/T); NLL is convex in 1/T)."""
    logits, y = _padded([np.asarray(r, dtype=np.float64) for r in logit_rows]), np.asarray(labels)
    low, high = LOG_BETA_RANGE
    ratio = (math.sqrt(5) - 1) / 2

    def cost(log_beta: float) -> float:
        return temperature_nll(logits, y, math.exp(-log_beta))

    a, b = high - ratio * (high - low), low + ratio * (high - low)
    cost_a, cost_b = cost(a), cost(b)
    for _ in range(iterations):
        if cost_a < cost_b:
            high, b, cost_b = b, a, cost_a
            a = high - ratio * (high - low)
            cost_a = cost(a)
        else:
            low, a, cost_a = a, b, cost_b
            b = low + ratio * (high - low)
            cost_b = cost(b)
    return math.exp(-(low + high) / 2)


def _grouped(samples: Iterable[tuple]) -> dict[str, tuple[list, list]]:
    """Rows and labels per bucket: every sample in its coarse bucket, and in its fine one when it has a modality."""
    groups: dict[str, tuple[list, list]] = {}
    for sample in samples:
        question_type, logits, label = sample[:3]
        modality = sample[3] if len(sample) > 3 else None
        row = np.asarray(logits, dtype=np.float64)
        keys = [group_key(question_type, len(row))]
        if modality is not None:
            keys.append(group_key(question_type, len(row), modality))
        for key in keys:
            rows, labels = groups.setdefault(key, ([], []))
            rows.append(row)
            labels.append(int(label))
    return groups


def _fit_group(rows: list, labels: list, min_samples: int, fallback: float) -> dict:
    """One bucket's detail: fitted (temperature, at_bound) or not (the fallback temperature it gets); NLLs."""
    logits, y = _padded(rows), np.asarray(labels)
    before = temperature_nll(logits, y, 1.0)
    if len(rows) < min_samples:
        return {"samples": len(rows), "fitted": False, "fallback_temperature": fallback, "nll_before": before,
                "nll_after": temperature_nll(logits, y, fallback)}
    temperature = fit_temperature(rows, labels)
    # at a bound of the search: the labels are (nearly) separable by these logits, so NLL keeps falling as T
    # shrinks; the fit then says more about the sample than about future traffic
    at_bound = min(abs(-math.log(temperature) - edge) for edge in LOG_BETA_RANGE) < 0.05
    return {"samples": len(rows), "fitted": True, "temperature": temperature, "at_bound": at_bound,
            "nll_before": before, "nll_after": temperature_nll(logits, y, temperature)}


def fit_calibration(samples: Iterable[tuple], fingerprint: str, min_samples: int = 20) -> Calibration:
    """samples: (question type, logits [n] in head order, label index[, modality set]).

    Coarse buckets (type × band) pool every sample; samples with a modality set also fill their fine bucket
    (type × band × modality set). A bucket under `min_samples` gets no temperature: a fine one falls back to its
    coarse bucket, a coarse one to T = 1 (its detail says which temperature it gets)."""
    groups = _grouped(samples)
    temperatures, details = {}, {}
    for key in sorted(k for k in groups if k == coarse_key(k)):
        details[key] = _fit_group(*groups[key], min_samples, 1.0)
        if details[key]["fitted"]:
            temperatures[key] = details[key]["temperature"]
    for key in sorted(k for k in groups if k != coarse_key(k)):
        details[key] = _fit_group(*groups[key], min_samples, temperatures.get(coarse_key(key), 1.0))
        if details[key]["fitted"]:
            temperatures[key] = details[key]["temperature"]
    return Calibration(temperatures, fingerprint, prompt_format_fingerprint(), dict(sorted(details.items())))


# ----------------------------------------------------------------------------------------------- files
def save_calibration(calibration: Calibration, path: str | Path) -> Path:
    """Write `calibration.json` (into `path` when it is a directory)."""
    path = Path(path)
    if path.is_dir():
        path = path / CALIBRATION_FILE
    body = {"format": CALIBRATION_FORMAT, "checkpoint_fingerprint": calibration.checkpoint_fingerprint,
            "prompt_format": calibration.prompt_format, "buckets": BUCKET_RULE,
            "temperatures": calibration.temperatures, "groups": calibration.details}
    path.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
    return path


def load_calibration(checkpoint_dir: str | Path, path: str | Path | None = None) -> Calibration | None:
    """The checkpoint's calibration (its own `calibration.json` unless `path` is given); None when absent.

    Raises CalibrationError when the file is unreadable or was fitted for another checkpoint or prompt format.
    A format-1 file (type × band only) loads as coarse buckets: every modality set gets its type × band temperature.
    """
    path = Path(path) if path is not None else Path(checkpoint_dir) / CALIBRATION_FILE
    if not path.is_file():
        return None
    try:
        raw = path.read_bytes()
        body = json.loads(raw)
        temperatures = {str(k): float(v) for k, v in body["temperatures"].items()}
        fingerprint, prompt_format = body["checkpoint_fingerprint"], body["prompt_format"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CalibrationError(f"cannot read {path}: {exc}") from exc
    if body.get("format") not in READABLE_FORMATS:
        raise CalibrationError(f"{path}: unknown format {body.get('format')!r} (expected {CALIBRATION_FORMAT})")
    if body["format"] != CALIBRATION_FORMAT and any(k != coarse_key(k) for k in temperatures):
        raise CalibrationError(f"{path}: a {body['format']} file has type × band buckets only")
    if fingerprint != checkpoint_fingerprint(checkpoint_dir):
        raise CalibrationError(f"{path} was fitted for another checkpoint (fingerprint {fingerprint[:12]}…); "
                               f"refit it with `omni calibrate DATA --model {checkpoint_dir}`")
    if prompt_format != prompt_format_fingerprint():
        raise CalibrationError(f"{path} was fitted for another prompt format; refit it")
    if any(not (math.isfinite(t) and t > 0) for t in temperatures.values()):
        raise CalibrationError(f"{path}: temperatures must be finite and positive")
    return Calibration(temperatures, fingerprint, prompt_format, body.get("groups", {}),
                       file_sha256=hashlib.sha256(raw).hexdigest(), format=str(body["format"]))
