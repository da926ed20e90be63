"""benchmarks/evidence.py's smoke check (test_smoke.py's CHECKS names it): its smoke mode (2 inspection requests per
mode and engine, the embedded demo checkpoint) in a subprocess from the repository root, checked for what it prints.

Beyond the shape of the output, what the tiny run must show: every mode of both engines timed, the same response
without evidence and the evidence adding bytes (more with every option's map), the log's summary smaller than the
full evidence it keeps the top of, and the parts of the added time measured. Nothing here is timed.
"""
from __future__ import annotations

from pathlib import Path

from tests.integration.benchmarks.smoke_helpers import finite, json_lines, one, positive, run_smoke

ENGINES, MODES = ("fresh", "cached"), ("off", "on", "all")


def check_evidence(tmp_path: Path) -> None:
    lines = json_lines(run_smoke("evidence.py").stdout)
    env = one(lines, event="env")
    assert env["smoke"] is True and env["requests"] == 2
    for engine in ENGINES:
        rows = {mode: one(lines, event="mode", engine=engine, mode=mode) for mode in MODES}
        for row in rows.values():
            finite(row)
            assert row["requests"] == 2
            positive(row, "p50_ms", "best_ms", "cpu_p50_ms", "p50_ratio", "paired_ratio_median", "cpu_p50_ratio",
                     "response_bytes")
        off, on, every = rows["off"], rows["on"], rows["all"]
        assert off["p50_ratio"] == off["cpu_p50_ratio"] == 1.0 and off["bytes_added"] == 0
        assert "evidence_bytes" not in off
        assert 0 < on["bytes_added"] < every["bytes_added"]                  # every option's map adds more
        assert on["bytes_added"] >= on["evidence_bytes"]
        assert 0 < on["logged_summary_bytes"] < on["evidence_bytes"]
        assert every["logged_summary_bytes"] == on["logged_summary_bytes"]   # the log keeps the chosen answers'
    assert one(lines, event="mode", engine="fresh", mode="on")["response_bytes"] == \
        one(lines, event="mode", engine="cached", mode="on")["response_bytes"]
    parts = one(lines, event="parts")
    finite(parts)
    positive(parts, "forward_off_cpu_ms", "forward_on_cpu_ms", "explain_cpu_ms", "json_dumps_evidence_cpu_ms",
             "log_summary_cpu_ms")
    summary = lines[-1]
    assert summary["event"] == "summary" and summary["goal"] == 1.05
    assert {engine: sorted(met) for engine, met in summary["meets_goal"].items()} == \
        {engine: ["cpu_p50_ratio", "p50_ratio"] for engine in ENGINES}
    assert all(isinstance(met, bool) for figures in summary["meets_goal"].values() for met in figures.values())
    positive(summary, *(f"{engine}_{mode}_{figure}" for engine in ENGINES for mode in ("on", "all")
                        for figure in ("p50_ratio", "cpu_p50_ratio", "bytes_added")))
