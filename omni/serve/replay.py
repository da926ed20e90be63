"""Replaying logged decisions: each record's request re-run from its stored request and media, its probabilities
compared with the ones it was decided with.

The reference is the audit record's `probabilities` (unrounded: the head's float32 after calibration), not the
response's rounded ones, so a difference of 1e-5 can be measured at all. Per record, before any model work:

    refused       its model or calibration sha256 differs from what the engine loaded (None vs a file differs too);
                  with `force` it is replayed anyway and the hashes are reported as drift
    unreplayable  it cannot be re-run: media kept as hashes only, media missing or altered, an audit record without
                  unrounded probabilities or malformed, a request this engine's parser refuses, a model error

and after its replay (the replayed audit record against the logged one):

    drift         what it was decided with is not what it was replayed with: the model or calibration (forced), the
                  prompt (`prompt.input_ids_sha256`: a template, tokenizer or truncation change) or what was used
                  of a medium (frames, sizes, seconds): the decision was not re-made as it was, whatever the numbers
    differs       same inputs, and some probability moved by more than the tolerance, or the evidence differs
    reproduced    same inputs, every probability within the tolerance (and the evidence the same)

A record that kept its evidence (`"evidence"`: its summary, `omni.contract.evidence_summary`) is replayed asking for
evidence with the same `top`, and the summary of the replayed evidence is compared with it: every weight within
`EVIDENCE_TOLERANCE`, the same answers, spans, boxes, moments and windows; what differs is listed
(`evidence_differences`) and makes the record `differs`.

Each request is replayed with the isolation mode it was decided in. Knows nothing of argv, HTTP or the
environment; it runs the engine it is given (loaded with `audit="record"` or not: replayed requests ask for one).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omni.contract.audit import AuditRecord, audit_from_wire
from omni.contract.errors import OmniError
from omni.contract.evidence_summary import evidence_summary, summary_differences
from omni.contract.json_values import JSONObject, JSONValue
from omni.contract.types import ISOLATION_MODES, MAX_EVIDENCE_TOP, DecisionRequest, EvidenceAsk
from omni.serve.decision_log_files import LoggedDecision
from preprocess.errors import MediaError
from preprocess.item import SLOTS

if TYPE_CHECKING:             # the engine imports torch: `omni replay --help` reads DEFAULT_TOLERANCE without it
    from omni.serve.engine import DecisionEngine

REPLAY_FORMAT = "omni-replay/1"
DEFAULT_TOLERANCE = 1e-5
EVIDENCE_TOLERANCE = 1e-6      # attention mass; the wire's weights have 6 decimals
STATUSES = ("reproduced", "differs", "drift", "refused", "unreplayable")

Admitted = tuple[LoggedDecision, AuditRecord, DecisionRequest, dict[str, JSONValue]]   # ready: audit, request, drift
Parse = Callable[[JSONObject, Path], DecisionRequest]   # a logged request body and its log directory -> the request


@dataclass(frozen=True)
class Loaded:
    """What the engine decides with: the checkpoint's and the calibration file's sha256 (None: uncalibrated)."""

    model_sha256: str
    calibration_sha256: str | None
    source: str


@dataclass(frozen=True)
class RecordReplay:
    """One record's outcome. `questions`: question id -> the largest |difference| over its options."""

    segment: str
    line: int
    request_id: str | None
    decided_at: str | None
    status: str
    max_abs_diff: float | None = None
    questions: dict[str, float] = field(default_factory=dict)
    drift: dict[str, JSONValue] = field(default_factory=dict)     # what -> {"logged": ..., "replayed": ...}
    reason: str | None = None
    evidence_max_abs_diff: float | None = None        # the largest |difference| of an evidence weight (None: none kept)
    evidence_differences: list[str] = field(default_factory=list)   # what of the kept evidence differs, one line each

    def to_wire(self) -> JSONObject:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ReplaySummary:
    loaded: Loaded
    tolerance: float
    records: list[RecordReplay]

    @property
    def max_abs_diff(self) -> float | None:
        """The largest difference over every replayed record (None when none was replayed)."""
        diffs = [r.max_abs_diff for r in self.records if r.max_abs_diff is not None]
        return max(diffs) if diffs else None

    @property
    def counts(self) -> dict[str, int]:
        counted = Counter(r.status for r in self.records)
        return {status: counted[status] for status in STATUSES}

    @property
    def reproduced(self) -> bool:
        """Every record replayed with the same model, calibration, prompt and media use, within the tolerance."""
        return all(r.status == "reproduced" for r in self.records)

    def to_wire(self) -> JSONObject:
        return {"format": REPLAY_FORMAT, "model_sha256": self.loaded.model_sha256,
                "calibration_sha256": self.loaded.calibration_sha256, "model_source": self.loaded.source,
                "tolerance": self.tolerance, "evidence_tolerance": EVIDENCE_TOLERANCE, "reproduced": self.reproduced, "max_abs_diff": self.max_abs_diff,
                "counts": self.counts, "records": [r.to_wire() for r in self.records]}


def loaded(engine: DecisionEngine[Any]) -> Loaded:
    """The hashes of what `engine` has loaded (loading it first), read from the model's own evidence."""
    from omni.serve.engine import WARMUP_REQUEST

    engine.load()
    model = engine.model
    assert model is not None                          # load() put it there
    evidence = model.evidence(model.prepare(WARMUP_REQUEST))
    calibration = evidence.calibration.sha256 if evidence.calibration is not None else None
    return Loaded(evidence.model.sha256, calibration, evidence.model.source)


def replay(engine: DecisionEngine[Any], decisions: Iterable[LoggedDecision], parse: Parse, *,
           tolerance: float = DEFAULT_TOLERANCE, force: bool = False, batch_records: int = 8,
           here: Loaded | None = None) -> Iterator[RecordReplay]:
    """Each decision's outcome, in order, `batch_records` requests per forward. `parse(body, log_dir)` reads a
    logged request back with its media (`parse_request_line` with the engine's config); its typed errors make the
    record unreplayable. `here`: `loaded(engine)`, when the caller has it already."""
    here = here or loaded(engine)
    waiting: list[Admitted] = []
    for decision in decisions:
        outcome = _admit(decision, here, parse, force, engine)
        if isinstance(outcome, RecordReplay):
            if not waiting:
                yield outcome
                continue
            yield from _run(engine, waiting, tolerance)   # keep the log's order
            waiting = []
            yield outcome
            continue
        waiting.append(outcome)
        if len(waiting) >= max(1, batch_records):
            yield from _run(engine, waiting, tolerance)
            waiting = []
    if waiting:
        yield from _run(engine, waiting, tolerance)


def _outcome(decision: LoggedDecision, status: str, **values: Any) -> RecordReplay:
    record = decision.record
    request_id, decided_at = record.get("request_id"), record.get("decided_at")
    return RecordReplay(str(decision.segment), decision.line, request_id if isinstance(request_id, str) else None,
                        decided_at if isinstance(decided_at, str) else None, status, **values)


def _admit(decision: LoggedDecision, here: Loaded, parse: Parse, force: bool,
           engine: DecisionEngine[Any]) -> RecordReplay | Admitted:
    """The record ready to run (its audit, its request, the hashes that drifted), or why it is not run. A decision an
    adapter answered is replayed by that adapter, loaded from the folder its audit record names."""
    audit = _readable_audit(decision)
    if isinstance(audit, RecordReplay):
        return audit
    adapter = _adapter_here(engine, audit)
    if isinstance(adapter, str):
        return _outcome(decision, "unreplayable", reason=adapter)
    drift = _drift(audit, here if adapter is None else replace(here, calibration_sha256=adapter[2]))
    if adapter is not None and adapter[1] != (audit.model.adapter or {}).get("sha256"):
        drift["adapter"] = {"logged": (audit.model.adapter or {}).get("sha256"), "replayed": adapter[1]}
    if drift and not force:
        return _outcome(decision, "refused", drift=drift, reason=refusal(drift))
    request = _request(decision, audit, parse, drift)
    if isinstance(request, RecordReplay):
        return request
    if adapter is not None:
        request = dataclasses.replace(request, model=adapter[0])
    return decision, audit, request, drift


def _adapter_here(engine: DecisionEngine[Any], audit: AuditRecord) -> tuple[str, str, str | None] | str | None:
    """For a decision an adapter answered: (its name, the sha256 and calibration sha256 of the version loaded here),
    loading it from the folder the audit record names when it is not served yet; a reason string when it cannot
    be; None for the base."""
    logged = audit.model.adapter
    if not logged:
        return None
    name, source = logged.get("name"), logged.get("source")
    if not isinstance(name, str) or not isinstance(source, str):
        return "its audit record names an adapter without a name and source folder"
    registry = engine.adapters
    if registry is None:
        return f"it was answered by adapter {name!r}, and this model cannot load adapters"
    try:
        if name not in registry:
            registry.register(name, source)
        version = registry.acquire(name)
        registry.release(version)
    except OmniError as exc:
        return f"its adapter cannot be loaded from {source}: {exc}"
    calibration = version.calibration.file_sha256 if version.calibration is not None else None
    return name, version.sha256, calibration


def _readable_audit(decision: LoggedDecision) -> AuditRecord | RecordReplay:
    """The record's audit record, with unrounded probabilities to compare with; or why it is unreplayable."""
    wire: JSONValue = decision.audit
    if not isinstance(wire, dict):
        return _outcome(decision, "unreplayable", reason="its audit record is not an object")
    try:
        audit = audit_from_wire(wire)
    except ValueError as exc:
        return _outcome(decision, "unreplayable", reason=f"its audit record cannot be read: {exc}")
    if audit.match is not None and audit.runtime.batch_size == 0:
        return _outcome(decision, "unreplayable", reason=f"a hash bank answered it without the model "
                                                         f"({audit.match.get('bank')}, version "
                                                         f"{str(audit.match.get('version'))[:12]}): no forward to "
                                                         f"replay")
    if audit.probabilities is None:
        return _outcome(decision, "unreplayable", reason="its audit record has no unrounded probabilities to compare "
                                                         "with (only the rounded response)")
    if not _probabilities(audit.probabilities):
        return _outcome(decision, "unreplayable", reason="its audit record's probabilities are not "
                                                         "{question: {option: number}}")
    return audit


def _drift(audit: AuditRecord, here: Loaded) -> dict[str, JSONValue]:
    """The model and calibration hashes that differ between the record and the engine: what -> both hashes."""
    drift: dict[str, JSONValue] = {}
    if audit.model.sha256 != here.model_sha256:
        drift["model"] = {"logged": audit.model.sha256, "replayed": here.model_sha256}
    logged_calibration = audit.calibration.sha256 if audit.calibration is not None else None
    if logged_calibration != here.calibration_sha256:
        drift["calibration"] = {"logged": logged_calibration, "replayed": here.calibration_sha256}
    return drift


def _request(decision: LoggedDecision, audit: AuditRecord, parse: Parse,
             drift: dict[str, JSONValue]) -> DecisionRequest | RecordReplay:
    """The logged request read back with its stored media, as it was decided (isolation, audit, request id); or why
    it is unreplayable."""
    hash_only = _hash_only(decision.request)
    if hash_only:
        return _outcome(decision, "unreplayable", drift=drift,
                        reason=f"its media were kept as hashes only (--decision-log-media hash-only): "
                               f"{', '.join(hash_only)}")
    if audit.prompt.isolation not in ISOLATION_MODES:
        return _outcome(decision, "unreplayable", drift=drift,
                        reason=f"its audit record names an unknown isolation mode {audit.prompt.isolation!r}")
    body = {key: value for key, value in decision.request.items() if key != "model"}   # a name, not an input
    try:
        request = parse(body, decision.root)
    except (OmniError, MediaError, ValueError) as exc:
        return _outcome(decision, "unreplayable", drift=drift, reason=f"its request cannot be read back: {exc}")
    altered = _altered_media(request, audit)
    if altered is not None:
        return _outcome(decision, "unreplayable", drift=drift, reason=altered)
    evidence = decision.record.get("evidence")
    if evidence is not None:
        top = evidence.get("top") if isinstance(evidence, dict) else None
        if not isinstance(top, int) or isinstance(top, bool) or not 1 <= top <= MAX_EVIDENCE_TOP:
            return _outcome(decision, "unreplayable", drift=drift,
                            reason=f"its evidence summary has no top from 1 to {MAX_EVIDENCE_TOP}")
        request = dataclasses.replace(request, evidence=EvidenceAsk(top=top))
    return dataclasses.replace(request, isolation=audit.prompt.isolation, audit=True, request_id=audit.request_id)


def _altered_media(request: DecisionRequest, audit: AuditRecord) -> str | None:
    """The first medium whose stored bytes are not the ones decided on, in words; None when all are."""
    logged_media = {(m.slot, m.index): m.sha256 for m in audit.media}
    for item in request.media:
        sha256 = hashlib.sha256(item.data).hexdigest()
        if logged_media.get((item.slot, item.index)) != sha256:
            return (f"{item.slot}.{item.index}: the stored bytes (sha256 {sha256}) are not the ones decided on "
                    f"(sha256 {logged_media.get((item.slot, item.index))})")
    return None


def _probabilities(value: JSONValue) -> bool:
    """`{question id: {option id: number}}`, as the engine writes them."""
    return isinstance(value, dict) and all(
        isinstance(options, dict) and all(isinstance(p, (int, float)) and not isinstance(p, bool)
                                          for p in options.values())
        for options in value.values())


def refusal(drift: dict[str, JSONValue]) -> str:
    """Why a record is refused, naming both hashes of what differs."""
    parts = []
    for what, label in (("model", "model sha256"), ("adapter", "adapter sha256"), ("calibration", "calibration sha256")):
        hashes = drift.get(what)
        if isinstance(hashes, dict):
            parts.append(f"{label} {hashes['logged'] or 'none (uncalibrated)'} in the record, "
                         f"{hashes['replayed'] or 'none (uncalibrated)'} loaded")
    return f"{'; '.join(parts)} (--force replays it anyway and reports the drift)"


def _hash_only(request: JSONObject) -> list[str]:
    """`slot.index (sha256 …)` of each medium the log kept as a hash only."""
    found = []
    for slot in SLOTS:
        entries = request.get(slot)
        for index, entry in enumerate(entries if isinstance(entries, list) else []):
            if isinstance(entry, dict) and "sha256" in entry and "data" not in entry:
                found.append(f"{slot}.{index} (sha256 {entry['sha256']})")
    return found


def _run(engine: DecisionEngine[Any], waiting: list[Admitted], tolerance: float) -> Iterator[RecordReplay]:
    """One forward for the batch; when it fails, each record alone, so that a bad record fails alone."""
    try:
        decisions = engine.decide_batch([request for _, _, request, _ in waiting])
    except (OmniError, MediaError) as exc:
        if len(waiting) > 1:
            for one in waiting:
                yield from _run(engine, [one], tolerance)
        else:
            yield _outcome(waiting[0][0], "unreplayable", drift=waiting[0][3], reason=f"the engine refused it: {exc}")
        return
    for (logged, audit, _, drift), replayed in zip(waiting, decisions, strict=True):
        assert replayed.audit is not None          # every replayed request asks for one
        outcome = compare(logged, audit, json.loads(json.dumps(replayed.audit.to_wire())), drift, tolerance)
        yield compare_evidence(outcome, logged.record.get("evidence"), replayed.evidence)


def compare(logged: LoggedDecision, audit: AuditRecord, replayed: JSONObject, drift: dict[str, JSONValue],
            tolerance: float) -> RecordReplay:
    """The replayed audit record (its JSON form) against the logged one: differences and drift."""
    drift = dict(drift)
    before, after = audit.probabilities or {}, replayed.get("probabilities") or {}
    questions: dict[str, float] = {}
    for question, options in before.items():
        again = after.get(question, {})
        if set(again) != set(options):
            drift["questions"] = {"logged": sorted(before), "replayed": sorted(after)}
            continue
        questions[question] = max(abs(float(again[o]) - float(p)) for o, p in options.items())
    if set(after) != set(before):
        drift["questions"] = {"logged": sorted(before), "replayed": sorted(after)}
    prompt = replayed["prompt"]["input_ids_sha256"]
    if prompt != audit.prompt.input_ids_sha256:
        drift["prompt"] = {"logged": audit.prompt.input_ids_sha256, "replayed": prompt}
    used = {f"{m['slot']}.{m['index']}": m["used"] for m in replayed["media"]}
    media: dict[str, JSONValue] = {}
    for item in audit.media:
        name = f"{item.slot}.{item.index}"
        if used.get(name) != item.used:
            media[name] = {"logged": item.used, "replayed": used.get(name)}
    if media:
        drift["media"] = media
    max_abs_diff = max(questions.values()) if questions else None
    status = ("drift" if drift else
              "differs" if max_abs_diff is None or max_abs_diff > tolerance else "reproduced")
    return _outcome(logged, status, max_abs_diff=max_abs_diff, questions=questions, drift=drift)



def compare_evidence(outcome: RecordReplay, logged: JSONValue, replayed: JSONObject | None) -> RecordReplay:
    """The record's kept evidence summary (None: it kept none) against the summary of the replayed evidence: a
    record reproduced within the tolerance `differs` when the evidence does."""
    if logged is None:
        return outcome
    if replayed is None:
        diff, found = None, ["the replayed decision has no evidence"]
    else:
        again = evidence_summary(replayed, logged["top"])
        diff, found = summary_differences(logged, again, EVIDENCE_TOLERANCE)
    status = "differs" if found and outcome.status == "reproduced" else outcome.status
    return replace(outcome, status=status, evidence_max_abs_diff=diff, evidence_differences=found)
