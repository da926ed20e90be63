"""The audit record of one decision: what produced it, precisely enough to defend it and to replay it.

One frozen value, filled by the model (what it is, the prompt it built, the media as it used them) and the engine
(when, in which forward, with which software), carried into the response (`x_audit`), the decision log, batch output
files and review records. `to_wire()` is its JSON form (`AUDIT_FORMAT`); `audit_from_wire` reads it back.

    model        id, sha256 over the checkpoint's weight and config files, head config, release date
    calibration  None, or the file's sha256, its format version and the bucket each question used
    prompt       template version and sha256, sha256 of the exact input ids, tokens by modality, truncation, isolation
    media        per item: slot, index, sha256 of the caller's bytes, the sniffed type and what was used of it
    runtime      omni-decide version (git commit when known), torch / transformers / PyAV / FFmpeg versions, device,
                 dtypes, the batch size of the forward it ran in, chunked or not, cache outcomes
    request_id, decided_at (UTC, ISO 8601), policy_sha256 (None until a policy applies)
    banks, match (only with hash banks in force): the banks consulted, each {name, version}; the entry a medium
                 matched, as `x_match`. A decision a bank answered without the model has no forward to describe:
                 its model part names the served model only (sha256 ""), its prompt template is "none", its
                 runtime batch size 0 and its probabilities None (docs/banks.md)
    probabilities  question id -> option id -> the probability the answers were made from, unrounded (the head's
                 float32 after calibration, options in request order): what `omni replay` compares to 1e-5, which
                 the response's rounded values could not show

Hashes are lowercase hex sha256. `input_ids_sha256` is the sha256 of the ids as little-endian unsigned 32-bit
integers. Knows nothing of torch, files, HTTP or how the values were measured.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from omni.contract.json_values import JSONObject

AUDIT_FORMAT = "omni-audit/1"


@dataclass(frozen=True)
class ModelAudit:
    id: str                            # the served name
    sha256: str                        # over the checkpoint's weight and config files (`omni.model.fingerprint`)
    head: JSONObject                   # joint_head_config.json
    release_date: str
    source: str                        # the directory or hub id it was loaded from ("embedded demo" for the default)
    adapter: JSONObject | None = None  # the adapter that answered: name, sha256 (of its files), mode, source, base


@dataclass(frozen=True)
class CalibrationAudit:
    sha256: str                        # of calibration.json
    format: str                        # e.g. omni-calibration/2
    buckets: dict[str, str | None]     # question id -> the bucket whose temperature it used (None: T = 1)


@dataclass(frozen=True)
class PromptAudit:
    template: str                      # the prompt template's name and version
    template_sha256: str               # of its fixed text
    input_ids_sha256: str              # of the exact input ids (little-endian uint32)
    input_tokens: int
    tokens_by_modality: dict[str, int]
    truncated_state_tokens: int
    truncated_state_chars: int
    isolation: str                     # joint | isolated


@dataclass(frozen=True)
class MediaAudit:
    slot: str                          # images | audio | videos
    index: int
    sha256: str                        # of the caller's bytes
    bytes: int
    type: str                          # the sniffed container: png, jpeg, wav, mp3, mp4, webm, ...
    used: JSONObject                   # what the model saw of it (sizes, seconds, frames, rotation, heard, ...)


@dataclass(frozen=True)
class RuntimeAudit:
    omni_decide: str
    git_commit: str | None
    torch: str
    transformers: str
    pyav: str
    ffmpeg: str
    device: str
    backbone_dtype: str
    head_dtype: str
    batch_size: int                    # records in the forward this decision ran in
    chunked: bool                      # its prefix was prefilled a chunk at a time
    cache: dict[str, str] = field(default_factory=dict)   # media / prefix: hit, partial, miss
    quantization: str = "none"         # the text layers' scheme (omni.model.quantize); absent on the wire when none


@dataclass(frozen=True)
class ModelEvidence:
    """What the model knows of one prepared decision; the engine adds the rest (`AuditRecord`): the served name, the
    forward it ran in, the cache outcomes, the request id and the time."""

    model: ModelAudit                  # its `id` is the engine's to fill (the served name)
    calibration: CalibrationAudit | None
    prompt: PromptAudit
    media: tuple[MediaAudit, ...]
    software: dict[str, str | None]    # omni_decide, git_commit, torch, transformers, pyav, ffmpeg
    device: str
    backbone_dtype: str
    head_dtype: str
    quantization: str = "none"


@dataclass(frozen=True)
class AuditRecord:
    model: ModelAudit
    calibration: CalibrationAudit | None
    prompt: PromptAudit
    media: tuple[MediaAudit, ...]
    runtime: RuntimeAudit
    request_id: str | None
    decided_at: str                    # UTC, ISO 8601 with microseconds and "Z"
    policy_sha256: str | None = None
    probabilities: dict[str, dict[str, float]] | None = None   # unrounded; None where the engine had none to give
    banks: tuple[JSONObject, ...] | None = None   # the hash banks consulted (name, version); None: none in force
    match: JSONObject | None = None    # the bank entry a medium matched (`x_match`), whether or not it decided

    def to_wire(self) -> JSONObject:
        wire: dict[str, Any] = {"format": AUDIT_FORMAT, **asdict(self)}
        for key in ("banks", "match"):           # without banks the record reads as it did before them
            if wire[key] is None:
                del wire[key]
        if self.banks is not None:
            wire["banks"] = [dict(bank) for bank in self.banks]
        wire["media"] = [asdict(m) for m in self.media]
        if self.model.adapter is None:          # the base answered: the record reads as it did before adapters
            del wire["model"]["adapter"]
        if self.runtime.quantization == "none":  # unquantized: the record reads as it did before quantization
            del wire["runtime"]["quantization"]
        return wire


def audit_from_wire(wire: JSONObject) -> AuditRecord:
    """An `AuditRecord` from its JSON form; ValueError naming what is missing or not of this format."""
    if wire.get("format") != AUDIT_FORMAT:
        raise ValueError(f"not an audit record of format {AUDIT_FORMAT}: format {wire.get('format')!r}")
    try:
        calibration = wire["calibration"]
        return AuditRecord(
            model=ModelAudit(**wire["model"]),
            calibration=CalibrationAudit(**calibration) if calibration is not None else None,
            prompt=PromptAudit(**wire["prompt"]),
            media=tuple(MediaAudit(**m) for m in wire["media"]),
            runtime=RuntimeAudit(**wire["runtime"]),
            request_id=wire["request_id"], decided_at=wire["decided_at"], policy_sha256=wire.get("policy_sha256"),
            probabilities=wire.get("probabilities"),
            banks=tuple(wire["banks"]) if isinstance(wire.get("banks"), list) else None, match=wire.get("match"))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"malformed audit record: {exc}") from None
