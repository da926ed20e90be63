"""benchmarks/banks.py's smoke check (test_smoke.py's CHECKS names it): its smoke mode (20,000 random PDQ hashes
written as a bank file, read, indexed and looked up; the inspection photo hashed beside a model answer) in a
subprocess, checked for what it prints: every near copy found and no random hash matched (at 20,000 entries a
random hash is hundreds of bits from all of them), the figures positive; the served request matched by its photo's
sha256, its photo's PDQ, its video's vPDQ and a phone-sized photo's PDQ (the benchmark itself checks the bank answered each by that hash, and
that the model answered the unbanked one); a phone clip's hash left running by a request its photo answered, with and
without stopping it. Nothing here is timed.
"""
from __future__ import annotations

from pathlib import Path

from tests.integration.benchmarks.smoke_helpers import json_lines, one, positive, run_smoke


def check_banks(tmp_path: Path) -> None:
    lines = json_lines(run_smoke("banks.py").stdout)
    env = one(lines, event="env")
    assert env["smoke"] is True and env["entries"] == 20_000
    bank = one(lines, event="bank")
    assert bank["entries"] == 20_000
    positive(bank, "file_bytes", "read_s", "build_s")
    near, far = one(lines, event="lookup", kind="near copy"), one(lines, event="lookup", kind="random")
    assert near["matched"] == near["n"] == 40 and far["matched"] == 0 and far["n"] == 40
    positive(near, "p50_ms", "p99_ms")
    versus = one(lines, event="hash_vs_model")
    positive(versus, "model_p50_ms", "pdq_hash_p50_ms", "model_over_hash_and_lookup")
    served = one(lines, event="matched_vs_model")
    positive(served, "exact_p50_ms", "pdq_p50_ms", "vpdq_p50_ms", "model_p50_ms", "model_over_exact", "model_over_pdq",
             "model_over_vpdq", "server_model_p50_ms", "server_exact_p50_ms", "server_model_over_exact",
             "server_model_over_pdq", "server_model_over_vpdq", "phone_p50_ms", "phone_model_p50_ms",
             "model_over_phone", "server_phone_p50_ms", "server_model_over_phone")
    positive(one(lines, event="phone_hash"), "phone_photo_bytes", "phone_pdq_p50_ms", "phone_pdq_full_size_p50_ms",
             "phone_full_size_over_512")
    video = one(lines, event="phone_video")
    assert video["clip_size"] == "640x360" and video["clip_seconds"] == 2
    positive(video, "clip_bytes", "vpdq_p50_ms", "model_p50_ms", "model_over_vpdq", "served_with_vpdq_bank_p50_ms",
             "served_over_hash_plus_model")
    abandoned = one(lines, event="abandoned_video")         # the smoke clip's hash ends within its grace
    positive(abandoned, "let_finish_next_video_p50_ms", "stopped_next_video_p50_ms", "let_finish_over_stopped")
    assert abandoned["let_finish_workers_stopped"] == 0
    assert one(lines, event="summary")["smoke"] is True
