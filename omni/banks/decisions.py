"""What a bank match makes of a decision: the answer without a forward pass, or the model's answer with the match.

`answered_by_bank(request, verdict, served_name, banks, audit_shown)`: the Decision of a request whose match decides
it (`act`, `review`, or `pass` of every medium; omni/banks/matching.py): no answers (no forward ran), `x_match`, and
an audit record (shown when `audit_shown`, by default when the request asks) that says so — the served model's name with an empty sha256, the prompt template "none", batch size 0, no
probabilities, the media by sha256, the banks consulted and the match. The outcome (the match's action) is put on it
by `omni.contract.outcomes.with_outcome`, as every outcome is.
`with_match(decision, verdict, banks)`: the model's decision with the match riding along (`flag`, or a `pass` beside
an unmatched medium) and the banks consulted in its audit record.
Knows nothing of HTTP, the engine's internals, policies or how the banks were read.
"""
from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence

from omni.banks.matching import Verdict
from omni.contract.audit import AuditRecord, MediaAudit, ModelAudit, PromptAudit, RuntimeAudit
from omni.contract.json_values import JSONObject
from omni.contract.types import Decision, DecisionRequest, Usage
from omni.model.fingerprint import software_versions
from preprocess.errors import MediaError
from preprocess.hashes import sha256_of
from preprocess.item import MediaItem
from preprocess.sniff import sniff_for_slot

NO_MODEL_SOURCE = "none: answered by a hash bank, no forward pass"


def answered_by_bank(request: DecisionRequest, verdict: Verdict, served_name: str,
                     banks: Sequence[JSONObject], audit_shown: bool | None = None) -> Decision:
    assert verdict.shown is not None and verdict.decides
    match = verdict.shown.to_wire()
    model = request.model or served_name
    software = software_versions()
    decided_at = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")
    audit = AuditRecord(
        model=ModelAudit(model, "", {}, "", NO_MODEL_SOURCE),
        calibration=None,
        prompt=PromptAudit("none", "", "", 0, {}, 0, 0, "none"),
        media=tuple(MediaAudit(item.slot, item.index, sha256_of(item.data),
                               len(item.data), _container(item), {"hashed": True}) for item in request.media),
        runtime=RuntimeAudit(omni_decide=software["omni_decide"] or "unknown", git_commit=software["git_commit"],
                             torch=software["torch"] or "", transformers=software["transformers"] or "",
                             pyav=software["pyav"] or "", ffmpeg=software["ffmpeg"] or "", device="none",
                             backbone_dtype="none", head_dtype="none", batch_size=0, chunked=False),
        request_id=request.request_id, decided_at=decided_at.replace("+00:00", "Z"),
        banks=tuple(dict(bank) for bank in banks), match=match)
    return Decision(model=model, answers={}, usage=Usage(0, 0), timings_ms={"match": verdict.lookup_ms},
                    batch_size=0, audit=audit, audit_shown=request.audit if audit_shown is None else audit_shown,
                    match=match, answered_by_bank=True)


def with_match(decision: Decision, verdict: Verdict, banks: Sequence[JSONObject]) -> Decision:
    match = verdict.shown.to_wire() if verdict.shown is not None else None
    audit = (dataclasses.replace(decision.audit, banks=tuple(dict(bank) for bank in banks), match=match)
             if decision.audit is not None else None)
    return dataclasses.replace(decision, match=match, audit=audit,
                               timings_ms={**decision.timings_ms, "match": verdict.lookup_ms})


def _container(item: MediaItem) -> str:
    try:
        return sniff_for_slot(item).container
    except MediaError:
        return "unknown"
