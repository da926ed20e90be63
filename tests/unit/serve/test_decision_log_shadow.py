"""A decision log line with a shadow candidate's block: a top-level key after `audit`, absent without one."""
from __future__ import annotations

from omni.serve.decision_log import DecisionLog
from omni.serve.decision_log_files import read_records
from tests.unit.serve.test_decision_log import append, audit, request, response


def test_a_shadow_result_is_a_top_level_key_after_audit_and_absent_without_one(tmp_path):
    shadow = {"model": "candidate", "adapter_sha256": "cd" * 32,
              "answers": {"fault": {"type": "choice", "choice": "none", "confidence": 0.6,
                                    "probabilities": {"none": 0.6, "rattle": 0.4}}},
              "probabilities": {"fault": {"none": 0.60004, "rattle": 0.39996}}, "x_outcome": None}
    live, shadowed = request("live only"), request("shadowed")
    with DecisionLog(tmp_path) as log:
        assert append(log, live)
        assert log.append(shadowed, response(shadowed.state), audit(shadowed.state), request_id=shadowed.request_id,
                          decided_at="2026-12-02T05:00:00.123456Z", shadow=shadow)
    first, second = read_records(tmp_path)
    assert "shadow" not in first.record
    assert second.record["shadow"] == shadow and second.response == response(shadowed.state)
    assert list(second.record) == ["format", "request_id", "decided_at", "request", "response", "audit", "shadow"]
