"""benchmarks/quantization.py's smoke check (test_smoke.py's CHECKS names it; kept here for its length): its smoke
mode (4 train + 4 test inspection records, int8 beside none, the embedded demo checkpoint) in a subprocess from the
repository root, checked for what it prints and writes.

Beyond the shape of the output, what the tiny run must show: int8 really quantized the text layers (about a quarter
of their float32 bytes, and answers that moved) without breaking them (small |Δp|, the same answers), a batched
forward answering as one-record forwards do, every decision decided under the fitted policy, and int4 refused on
CPU with the loader's reason. Nothing here is timed.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from tests.integration.benchmarks.smoke_helpers import json_lines, run_smoke, table

QUESTIONS = {"label_visible", "sounds_normal", "fan_running", "severity", "next_step"}


def check_answers(int8: dict) -> None:
    dp = int8["delta_p"]
    assert {k: v["questions"] for k, v in dp.items()} == {"all": 20, "noul": 12, "choice": 4, "score": 4}
    for figures in dp.values():
        assert 0 < figures["mean_abs_dp"] <= figures["max_abs_dp"] < 0.05     # moved, not broken
        assert figures["answer_agreement"] == 1.0
    agree = int8["outcomes"]
    assert agree["decisions"] == 4
    assert set(agree["per_question"]) == QUESTIONS
    assert sum(agree["overall_counts_none"].values()) == sum(agree["overall_counts_this"].values()) == 4
    assert 0 <= agree["overall_agreement"] <= 1
    assert 0 <= agree["question_agreement"] <= 1
    assert len(agree["changed"]) == round(4 * (1 - agree["overall_agreement"]))
    assert len(agree["questions_changed"]) == round(20 * (1 - agree["question_agreement"]))


def check_costs(rows: dict[str, dict]) -> None:
    none, int8 = rows["none"], rows["int8"]
    assert none["weights"]["backbone_ratio"] == none["timing"]["load_ratio"] == none["timing"]["p50_ratio"] == 1.0
    assert int8["weights"]["backbone_bytes"] < none["weights"]["backbone_bytes"]
    assert 0.25 <= int8["weights"]["text_layers_ratio"] < 0.35                  # int8 of float32, plus row scales
    for row in rows.values():
        assert row["batched_vs_one_max_abs_dp"] < 1e-4                          # batching changes no answer
        assert all(math.isfinite(v) and v > 0 for v in row["timing"]["load_s"])
        assert row["timing"]["p50_forward_ms"] > 0
        assert row["timing"]["load_ratio"] > 0
        for figures in row["quality"].values():
            assert 0 <= figures["accuracy"] <= 1
            assert 0 <= figures["ece"] <= 1


def check_quantization(tmp_path: Path) -> None:
    out = run_smoke("quantization.py", "--json", str(tmp_path / "q.json")).stdout
    lines = json_lines(out)
    env = next(line for line in lines if line["event"] == "env")
    assert env["smoke"] is True
    assert env["hidden_size"] == 64
    assert env["train_records"] == env["test_records"] == 4
    rows = {line["scheme"]: line for line in lines if line["event"] == "scheme"}
    assert list(rows) == ["none", "int8"]
    assert rows["none"]["delta_p"] == {}
    assert rows["none"]["outcomes"]["overall_agreement"] == 1.0
    check_answers(rows["int8"])
    check_costs(rows)
    policy = next(line for line in lines if line["event"] == "policy")
    assert set(policy["rules"]) == QUESTIONS
    assert policy["rules"]["next_step"]["act_on"] == ["rework", "scrap"]
    summary = lines[-1]
    assert summary["event"] == "summary"
    assert "CUDA" in summary["not_run"]["int4"]
    assert "hidden 64" in summary["note"]
    assert "more sensitive" in summary["note"]
    faithfulness = table(out, "| scheme | max / mean abs Δp (all) |")
    assert [row[0] for row in faithfulness] == ["none", "int8"]
    costs = table(out, "| scheme | backbone bytes |")
    assert [row[0] for row in costs] == ["none", "int8", "int4"]
    assert costs[2][1].startswith("not run: ")
    written = json.loads((tmp_path / "q.json").read_text())
    assert written["summary"] == summary
    assert written["schemes"] == {name: {k: v for k, v in row.items() if k not in ("event", "scheme")}
                                  for name, row in rows.items()}

