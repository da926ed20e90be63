"""Optional post-hoc temperature scaling: one temperature per (question type × option-count band).

`fit_calibration` chooses each temperature by minimising the NLL of labelled head logits; `Calibration.apply`
divides a question's logits by its temperature before the softmax. The file `calibration.json` is bound to a
fingerprint of the checkpoint (head, backbone, tokenizer and processor files) and of the prompt format, and
`load_calibration` refuses it for any other checkpoint. The Clef reference has no post-hoc calibration (it is
trained), so it is off by default. Knows nothing of the engine, datasets, HTTP or the environment; it sees logits
(numpy arrays or torch tensors), question types and option counts.
"""
from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from omni.contract.errors import CheckpointError

CALIBRATION_FILE = "calibration.json"
CALIBRATION_FORMAT = "omni-calibration/1"
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


def group_key(question_type: str, n_options: int) -> str:
    """'noul:2', 'choice:3-4', 'score:5-8' …"""
    return f"{question_type}:{option_band(n_options)}"


@dataclass(frozen=True)
class Calibration:
    temperatures: dict[str, float]
    checkpoint_fingerprint: str
    prompt_format: str = ""
    details: dict = field(default_factory=dict)     # per group: samples, NLL before and after (for the report)

    def temperature(self, question_type: str, n_options: int) -> float:
        if n_options < 2:
            return 1.0
        return self.temperatures.get(group_key(question_type, n_options), 1.0)

    def apply(self, question_type: str, n_options: int, logits):
        """logits [n_options] (numpy or torch) → logits / T of the question's group (T = 1 when not fitted)."""
        temperature = self.temperature(question_type, n_options)
        return logits if temperature == 1.0 else logits / temperature

    def apply_record(self, questions, logits: Sequence) -> list:
        """Per question logits of one record (prompt order) → calibrated logits, same order."""
        return [self.apply(q.type, len(q.options), x) for q, x in zip(questions, logits)]


# ------------------------------------------------------------------------------------------------- binding
def prompt_format_fingerprint() -> str:
    """Changes when the prompt's fixed text changes (then logits mean something else)."""
    from omni.model import prompt

    text = f"{prompt.PREFIX}\x00{prompt.SCHEMA_HEADER}\x00{prompt.SUFFIX}\x00FIELD/ID/TYPE/INSTRUCTION/OPTION v1"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _sample_file(digest, path: Path) -> None:
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


def fit_calibration(samples: Iterable[tuple[str, np.ndarray, int]], fingerprint: str,
                    min_samples: int = 20) -> Calibration:
    """samples: (question type, logits [n] in head order, label index). Groups under `min_samples` keep T = 1."""
    groups: dict[str, tuple[list, list]] = {}
    for question_type, logits, label in samples:
        rows, labels = groups.setdefault(group_key(question_type, len(logits)), ([], []))
        rows.append(np.asarray(logits, dtype=np.float64))
        labels.append(int(label))
    temperatures, details = {}, {}
    for key, (rows, labels) in sorted(groups.items()):
        before = temperature_nll(_padded(rows), np.asarray(labels), 1.0)
        if len(rows) < min_samples:
            details[key] = {"samples": len(rows), "fitted": False, "nll_before": before, "nll_after": before}
            continue
        temperature = fit_temperature(rows, labels)
        temperatures[key] = temperature
        # at a bound of the search: the labels are (nearly) separable by these logits, so NLL keeps falling as T
        # shrinks; the fit then says more about the sample than about future traffic
        at_bound = min(abs(-math.log(temperature) - edge) for edge in LOG_BETA_RANGE) < 0.05
        details[key] = {"samples": len(rows), "fitted": True, "temperature": temperature, "at_bound": at_bound,
                        "nll_before": before,
                        "nll_after": temperature_nll(_padded(rows), np.asarray(labels), temperature)}
    return Calibration(temperatures, fingerprint, prompt_format_fingerprint(), details)


# ----------------------------------------------------------------------------------------------- files
def save_calibration(calibration: Calibration, path: str | Path) -> Path:
    """Write `calibration.json` (into `path` when it is a directory)."""
    path = Path(path)
    if path.is_dir():
        path = path / CALIBRATION_FILE
    body = {"format": CALIBRATION_FORMAT, "checkpoint_fingerprint": calibration.checkpoint_fingerprint,
            "prompt_format": calibration.prompt_format, "temperatures": calibration.temperatures,
            "groups": calibration.details}
    path.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
    return path


def load_calibration(checkpoint_dir: str | Path, path: str | Path | None = None) -> Calibration | None:
    """The checkpoint's calibration (its own `calibration.json` unless `path` is given); None when absent.

    Raises CalibrationError when the file is unreadable or was fitted for another checkpoint or prompt format.
    """
    path = Path(path) if path is not None else Path(checkpoint_dir) / CALIBRATION_FILE
    if not path.is_file():
        return None
    try:
        body = json.loads(path.read_text())
        temperatures = {str(k): float(v) for k, v in body["temperatures"].items()}
        fingerprint, prompt_format = body["checkpoint_fingerprint"], body["prompt_format"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CalibrationError(f"cannot read {path}: {exc}") from exc
    if body.get("format") != CALIBRATION_FORMAT:
        raise CalibrationError(f"{path}: unknown format {body.get('format')!r} (expected {CALIBRATION_FORMAT})")
    if fingerprint != checkpoint_fingerprint(checkpoint_dir):
        raise CalibrationError(f"{path} was fitted for another checkpoint (fingerprint {fingerprint[:12]}…); "
                               f"refit it with `omni calibrate DATA --model {checkpoint_dir}`")
    if prompt_format != prompt_format_fingerprint():
        raise CalibrationError(f"{path} was fitted for another prompt format; refit it")
    if any(not (math.isfinite(t) and t > 0) for t in temperatures.values()):
        raise CalibrationError(f"{path}: temperatures must be finite and positive")
    return Calibration(temperatures, fingerprint, prompt_format, body.get("groups", {}))
