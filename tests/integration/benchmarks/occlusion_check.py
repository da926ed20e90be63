"""benchmarks/occlusion.py's smoke check (test_smoke.py's CHECKS names it): its smoke mode (2 demo inspection test
records, the embedded demo checkpoint) in a subprocess from the repository root, checked for what it prints and
writes: a row for every question × medium with evidence, figures that add up, the tables, the PNG. Nothing timed;
what the figures say about the evidence is not asserted (two records mean nothing)."""
from __future__ import annotations

import json
import math
from pathlib import Path

from PIL import Image

from tests.integration.benchmarks.smoke_helpers import finite, json_lines, run_smoke, table

QUESTIONS = {"label_visible", "sounds_normal", "fan_running", "severity", "next_step"}
KINDS = ["image", "audio", "video", "state"]


def check_rows(rows: list[dict]) -> None:
    assert {row["record"] for row in rows} == {1, 2}                          # the records' lines in test.jsonl
    assert {row["question"] for row in rows} == QUESTIONS
    assert {row["kind"] for row in rows} <= set(KINDS)
    assert {row["kind"] for row in rows} >= {"image", "audio", "video"}        # every demo record has the three
    for row in rows:
        for side in ("top", "random"):
            assert 0 <= row[side]["p"] <= 1
            assert math.isclose(row[side]["abs_dp"], abs(row[side]["p"] - row["p"]), abs_tol=1e-4)
        if row["kind"] == "video":                                               # a whole second of a 2 s clip
            top, rand = row["top"]["region"], row["random"]["region"]
            assert math.isclose(top["end_s"] - top["start_s"], rand["end_s"] - rand["start_s"], abs_tol=1e-3)
        if row["kind"] == "image":
            top, rand = row["top"]["region"], row["random"]["region"]
            assert math.isclose(top["x1"] - top["x0"], rand["x1"] - rand["x0"], abs_tol=0.02)


def check_occlusion(tmp_path: Path) -> None:
    png, out_json = tmp_path / "occlusion.png", tmp_path / "occlusion.json"
    out = run_smoke("occlusion.py", "--png", str(png), "--json", str(out_json)).stdout
    lines = json_lines(out)
    for line in lines:
        finite(line)
    env = lines[0]
    assert env["event"] == "env"
    assert env["smoke"] is True
    assert env["records"] == 2
    written = json.loads(out_json.read_text())
    check_rows(written["rows"])
    media = [line for line in lines if line["event"] == "medium"]
    assert [line["medium"] for line in media] == [k for k in KINDS if k in written["by_medium"]]
    for line in media:
        assert line["rows"] == sum(row["kind"] == line["medium"] for row in written["rows"])
        assert line["top_moved_more"] + line["random_moved_more"] + line["tied"] == line["rows"]
        assert 0 <= line["sign_test_p"] <= 1
        low, high = line["mean_diff_ci95"]
        assert low <= line["mean_diff"] <= high
    control = next(line for line in lines if line["event"] == "control")
    assert control["rows"] == 2 * len(QUESTIONS)
    summary = lines[-1]
    assert summary["event"] == "summary"
    assert summary["rows"] == len(written["rows"])
    assert [row[0] for row in table(out, "| medium | rows |")] == [line["medium"] for line in media]
    assert len(table(out, "| medium / question | rows |")) == len(written["by_medium_question"])
    with Image.open(png) as image:
        assert image.format == "PNG"
        assert image.size[0] > 400
