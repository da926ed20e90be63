"""benchmarks/line.py's smoke check (test_smoke.py's CHECKS names it): its smoke mode (a real mosquitto, `omni
serve` and `omni line` on the embedded demo checkpoint, 2 units per path, 2 short rate steps) in a subprocess from
the repository root, checked for what it prints: both paths timed with every unit answered, the ratio of their p50s,
each rate step with its misses, and the summary. Nothing here is timed.
"""
from __future__ import annotations

from pathlib import Path

from tests.integration.benchmarks.smoke_helpers import finite, json_lines, one, positive, run_smoke


def check_line(tmp_path: Path) -> None:
    lines = json_lines(run_smoke("line.py").stdout)
    env = one(lines, event="env")
    assert env["smoke"] is True and env["units"] == 2
    for path in ("http", "line"):
        row = one(lines, event="latency", path=path)
        finite(row)
        assert row["n"] == 2
        positive(row, "p50_ms", "p99_ms", "mean_ms")
    ratio = one(lines, event="ratio")
    positive(ratio, "line_over_http_p50")
    steps = [line for line in lines if line.get("event") == "step"]
    assert [step["units_per_minute"] for step in steps] == [60, 120][:len(steps)] and steps
    for step in steps:
        assert step["units"] == max(2, round(step["units_per_minute"] * 2.0 / 60))     # --step-s 2 in smoke
        assert step["errors"] == 0 and 0 <= step["miss_rate"] <= 1
    summary = one(lines, event="summary")
    assert summary["smoke"] is True and summary["line_over_http_p50"] == ratio["line_over_http_p50"]
