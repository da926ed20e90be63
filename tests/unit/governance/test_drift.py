"""omni.governance.drift: PSI against hand-computed values, identical windows at 0, a shifted answer distribution flagged,
confidence bins, outcomes per policy version, window and time parsing, empty windows and questions that come and go,
the baseline modes, and the text and figure made from a report (api/cli/report.py, omni/learn/drift_plot.py)."""
from __future__ import annotations

import math

import pytest

from api.cli.report import format_markdown, format_table
from omni.governance.drift import (
    MAX_WINDOWS,
    PSI_EPSILON,
    DriftError,
    collect,
    drift_report,
    flag,
    most_drifting,
    parse_time,
    parse_window,
    psi,
)
from omni.governance.drift_plot import drift_plot

HOUR_S = 3600
T0 = "2026-12-02T05"        # a whole hour: 1h windows start here


def noul(p: float) -> dict:
    return {"type": "noul", "noul": p}


def choice(chosen: str, confidence: float, options: tuple[str, ...] = ("none", "rattle", "hum")) -> dict:
    rest = (1 - confidence) / (len(options) - 1)
    return {"type": "choice", "choice": chosen, "confidence": confidence,
            "probabilities": {o: confidence if o == chosen else rest for o in options}}


def score(level: int, confidence: float) -> dict:
    probabilities = {str(i): confidence if i == level else (1 - confidence) / 2 for i in range(3)}
    return {"type": "score", "score": float(level), "probabilities": probabilities, "confidence": confidence}


def record(at: str, answers: dict, outcome: dict | None = None, rid: str = "r") -> dict:
    response = {"model": "tiny", "answers": answers, **({"x_outcome": outcome} if outcome else {})}
    return {"format": "omni-decision/1", "request_id": rid, "decided_at": at, "request": {}, "response": response,
            "audit": {}}


def x_outcome(version: str, overall: str, **questions: str) -> dict:
    return {"overall": overall, "policy": {"version": version, "sha256": f"sha-{version}"},
            "questions": {qid: {"outcome": o, "answer": None, "confidence": 0.9, "auto_at": 0.8}
                          for qid, o in questions.items()}}


def report_of(records: list[dict], window: str = "1h", baseline: str = "first", bins: int = 10, **kw) -> dict:
    return {"log": "log", "window": window, **drift_report(collect(records, parse_window(window), bins, **kw),
                                                           baseline)}


# ------------------------------------------------------------------------------------------------ PSI itself
def test_psi_matches_hand_computed_values():
    # (0.8 - 0.5) ln(0.8 / 0.5) + (0.2 - 0.5) ln(0.2 / 0.5) = 0.3 * 0.4700036 + 0.3 * 0.9162907
    assert psi({"a": 80, "b": 20}, {"a": 50, "b": 50}) == pytest.approx(0.4158883, abs=1e-7)
    # an answer the baseline never gave: its baseline share is epsilon (1e-4), not 0
    # (0.9 - 1) ln(0.9 / 1) + (0.1 - 1e-4) ln(0.1 / 1e-4) = 0.0105361 + 0.6900847
    assert PSI_EPSILON == 1e-4
    assert psi({"a": 90, "b": 10}, {"a": 100}) == pytest.approx(0.7006208, abs=1e-7)
    # three categories, counts of different totals: shares (0.25, 0.25, 0.5) vs (0.5, 0.25, 0.25)
    expected = (0.25 - 0.5) * math.log(0.25 / 0.5) + (0.5 - 0.25) * math.log(0.5 / 0.25)
    assert psi([1, 1, 2], [20, 10, 10]) == pytest.approx(expected) == pytest.approx(0.3465736, abs=1e-7)
    assert psi({"a": 3, "b": 1}, {"a": 3, "b": 1}) == 0.0 and psi({"a": 30, "b": 10}, {"a": 3, "b": 1}) == 0.0
    assert psi({}, {"a": 1}) is None and psi({"a": 1}, {"a": 0}) is None


def test_flags_at_and_around_the_bands():
    assert [flag(v) for v in (None, 0.0, 0.0999, 0.1, 0.2499, 0.25, 3.0)] == \
        [None, None, None, "moderate", "moderate", "major", "major"]


# ------------------------------------------------------------------------------------------------ windows
def test_window_and_time_parsing():
    assert [parse_window(t) for t in ("30m", "1h", "6h", "1d", "90s", "2w", " 1h ")] == \
        [1800, 3600, 21600, 86400, 90, 1209600, 3600]
    for bad in ("1x", "h", "0h", "-1h", "1.5h", "", "1 hour"):
        with pytest.raises(DriftError, match=r"--window must be a positive whole number and a unit"):
            parse_window(bad)
    assert parse_time("2026-12-02T05:00:00Z") == parse_time("2026-12-02T05:00:00") == \
        parse_time("2026-12-02T06:00:00+01:00") == parse_time("2026-12-02T05:00") == 1796187600.0
    assert parse_time("2026-12-02") == 1796169600.0
    with pytest.raises(DriftError, match=r"--since must be an ISO 8601 time .* not 'yesterday'"):
        parse_time("yesterday", "--since")


def test_windows_start_on_the_grid_empty_ones_are_kept_and_the_range_filters():
    records = [record(f"{T0}:17:00.5Z", {"q": noul(0.9)}), record("2026-12-02T08:59:59Z", {"q": noul(0.9)}),
               record("2026-12-02T05:59:59.999Z", {"q": noul(0.1)})]
    report = report_of(records)
    assert [(w["start"], w["end"], w["records"]) for w in report["windows"]] == [
        ("2026-12-02T05:00:00Z", "2026-12-02T06:00:00Z", 2), ("2026-12-02T06:00:00Z", "2026-12-02T07:00:00Z", 0),
        ("2026-12-02T07:00:00Z", "2026-12-02T08:00:00Z", 0), ("2026-12-02T08:00:00Z", "2026-12-02T09:00:00Z", 1)]
    assert report["records"] == 3 and report["start"] == "2026-12-02T05:00:00Z" and report["end"] == \
        "2026-12-02T09:00:00Z"
    assert report["windows"][1]["questions"] == {} and report["windows"][1]["most_drifting"] is None
    ranged = report_of(records, since_s=parse_time("2026-12-02T05:30Z"), until_s=parse_time("2026-12-02T08:59:59Z"))
    assert [w["records"] for w in ranged["windows"]] == [1]          # 05:59:59.999 only; until is exclusive
    assert collect(records, 3600, since_s=parse_time("2027-01-01")).windows == []
    daily = report_of(records, window="1d")
    assert [(w["start"], w["records"]) for w in daily["windows"]] == [("2026-12-02T00:00:00Z", 3)]


def test_too_many_windows_bad_bins_and_bad_times_are_errors():
    far = [record("2026-01-01T00:00:00Z", {}), record("2026-12-31T00:00:00Z", {})]
    with pytest.raises(DriftError, match=rf"more than {MAX_WINDOWS} windows"):
        collect(far, 60)
    assert len(collect(far, 86400).windows) == 365
    for bins in (1, 101):
        with pytest.raises(DriftError, match=r"--bins must be between 2 and 100"):
            collect([], 3600, bins)
    with pytest.raises(DriftError, match=r"record 'r7': decided_at 'soon' is not an ISO 8601 time"):
        collect([record("soon", {}, rid="r7")], 3600)
    with pytest.raises(DriftError, match=r"--baseline must be one of first, previous"):
        drift_report(collect(far, 86400), "last")


# ------------------------------------------------------------------------------------------------ distributions
def hour(h: int, minute: int = 0) -> str:
    return f"2026-12-02T{h:02d}:{minute:02d}:00Z"


def test_identical_windows_have_psi_zero_and_a_shifted_answer_distribution_is_flagged():
    same = [("none", 0.9)] * 6 + [("rattle", 0.8)] * 4
    shifted = [("none", 0.9)] * 2 + [("rattle", 0.8)] * 8
    records = [record(hour(5, i), {"fault": choice(c, p), "ok": noul(0.95)}) for i, (c, p) in enumerate(same)]
    records += [record(hour(6, i), {"fault": choice(c, p), "ok": noul(0.95)}) for i, (c, p) in enumerate(same)]
    records += [record(hour(7, i), {"fault": choice(c, p), "ok": noul(0.95)}) for i, (c, p) in enumerate(shifted)]
    report = report_of(records)
    first, second, third = report["windows"]
    assert first["baseline"] is None and first["questions"]["fault"]["psi"] is None
    assert second["baseline"] == first["start"]
    assert second["questions"]["fault"]["psi"] == 0.0 and second["questions"]["fault"]["flag"] is None
    assert second["questions"]["ok"]["psi"] == 0.0
    fault = third["questions"]["fault"]
    # answers (0.2, 0.8) vs (0.6, 0.4); confidence bins 9 and 8 carry the same shares: the same PSI
    expected = (0.2 - 0.6) * math.log(0.2 / 0.6) + (0.8 - 0.4) * math.log(0.8 / 0.4)
    assert fault["psi_answers"] == pytest.approx(expected, abs=1e-6) == pytest.approx(0.7167038, abs=1e-6)
    assert fault["psi_confidence"] == pytest.approx(expected, abs=1e-6) and fault["psi_outcomes"] is None
    assert fault["flag_confidence"] == "major" and fault["drift_in"] == "answers"
    assert fault["noise_psi"] == pytest.approx((2 - 1) * (1 / 10 + 1 / 10))
    assert fault["flag"] == "major" and fault["answers"] == {"none": 2, "rattle": 8}
    assert fault["confidence"] == [0, 0, 0, 0, 0, 0, 0, 0, 8, 2]
    assert third["questions"]["ok"]["psi"] == 0.0
    assert third["most_drifting"] == {"question": "fault", "psi": fault["psi"], "flag": "major"}
    assert report["questions"]["fault"] == {
        "type": "choice", "windows": 3, "count": 30, "answers": {"none": 14, "rattle": 16},
        "max_psi": fault["psi"], "max_psi_window": third["start"], "flag": "major"}
    assert most_drifting(report, 1) == ["fault"] and most_drifting(report, 5) == ["fault", "ok"]


def test_answer_keys_per_type_and_confidence_bins():
    records = [record(hour(5), {"n": noul(0.3), "c": choice("hum", 1.0), "s": score(2, 0.55)}),
               record(hour(5, 1), {"n": noul(0.5), "c": choice("none", 0.05), "s": score(0, 0.999)})]
    questions = report_of(records, bins=4)["windows"][0]["questions"]
    assert questions["n"]["answers"] == {"false": 1, "true": 1} and questions["n"]["type"] == "noul"
    assert questions["n"]["confidence"] == [0, 0, 2, 0]                 # max(p, 1 - p): 0.7 and 0.5
    assert questions["c"]["answers"] == {"hum": 1, "none": 1} and questions["c"]["confidence"] == [1, 0, 0, 1]
    assert questions["s"]["answers"] == {"0": 1, "2": 1} and questions["s"]["confidence"] == [0, 0, 1, 1]


def test_a_mild_shift_is_moderate():
    before = [record(hour(5, i % 60), {"q": noul(0.9 if i < 50 else 0.1)}) for i in range(100)]
    after = [record(hour(6, i % 60), {"q": noul(0.9 if i < 65 else 0.1)}) for i in range(100)]
    q = report_of(before + after)["windows"][1]["questions"]["q"]
    expected = (0.65 - 0.5) * math.log(0.65 / 0.5) + (0.35 - 0.5) * math.log(0.35 / 0.5)     # 0.0928
    assert q["psi_answers"] == pytest.approx(expected, abs=1e-6)
    assert q["psi"] == q["psi_answers"] and q["flag"] is None            # both bins of confidence are 9: equal
    tilted = [record(hour(6, i % 60), {"q": noul(0.9 if i < 70 else 0.1)}) for i in range(100)]
    q = report_of(before + tilted)["windows"][1]["questions"]["q"]
    expected = (0.7 - 0.5) * math.log(0.7 / 0.5) + (0.3 - 0.5) * math.log(0.3 / 0.5)       # 0.1695
    assert q["psi"] == pytest.approx(expected, abs=1e-6) and q["flag"] == "moderate"


def test_confidence_drift_is_reported_beside_the_questions_psi_not_in_it():
    sure = [record(hour(5, i), {"q": choice("none", 0.95)}) for i in range(20)]
    unsure = [record(hour(6, i), {"q": choice("none", 0.55)}) for i in range(20)]
    q = report_of(sure + unsure)["windows"][1]["questions"]["q"]
    # all mass moves from bin 9 to bin 5: 2 * (1 - 1e-4) * ln(1 / 1e-4)
    assert q["psi_confidence"] == pytest.approx(2 * (1 - 1e-4) * math.log(1e4), abs=1e-6)
    assert q["flag_confidence"] == "major" and q["psi"] == q["psi_answers"] == 0.0 and q["flag"] is None


def test_questions_in_only_some_windows_get_psi_only_where_both_have_answers():
    records = [record(hour(5), {"a": noul(0.9)}), record(hour(6), {"a": noul(0.9), "b": noul(0.9)}),
               record(hour(7), {"b": noul(0.1)}), record(hour(8), {"b": noul(0.1)})]
    first = report_of(records)
    assert [w["questions"].get("b", {}).get("psi", "absent") for w in first["windows"]] == \
        ["absent", None, None, None]                                    # the first window never saw b
    assert first["questions"]["b"]["max_psi"] is None and first["questions"]["b"]["windows"] == 3
    previous = report_of(records, baseline="previous")
    assert [w["baseline"] for w in previous["windows"]] == [None, hour(5), hour(6), hour(7)]
    b = [w["questions"].get("b", {}).get("psi", "absent") for w in previous["windows"]]
    assert b[:2] == ["absent", None] and b[2] > 0.25 and b[3] == 0.0
    assert previous["windows"][2]["most_drifting"]["question"] == "b"
    assert previous["windows"][3]["most_drifting"] == {"question": "b", "psi": 0.0, "flag": None}


def test_outcome_shares_per_policy_version_and_outcome_psi_within_a_version():
    def decided(h: int, i: int, version: str, outcome: str) -> dict:
        return record(hour(h, i), {"ok": noul(0.95)}, x_outcome(version, outcome, ok=outcome))

    records = [decided(5, i, "v1", "act" if i < 3 else "pass") for i in range(10)]
    records += [decided(6, i, "v1", "act" if i < 3 else "pass") for i in range(5)]
    records += [decided(6, 10 + i, "v2", "review") for i in range(5)]
    records += [decided(7, i, "v1", "act" if i < 7 else "pass") for i in range(10)]
    records.append(record(hour(7, 30), {"ok": noul(0.95)}))               # no policy on: counted, no outcome
    report = report_of(records)
    first, second, third = report["windows"]
    assert report["policies"] == {"v1": ["sha-v1"], "v2": ["sha-v2"]}
    assert first["outcomes"] == {"v1": {"act": 3, "review": 0, "pass": 7}}
    assert second["outcomes"] == {"v1": {"act": 3, "review": 0, "pass": 2}, "v2": {"act": 0, "review": 5, "pass": 0}}
    assert second["questions"]["ok"]["outcomes"] == second["outcomes"]
    assert third["records"] == 11 and third["outcomes"] == {"v1": {"act": 7, "review": 0, "pass": 3}}
    # v2 exists only in the second window: its outcomes are not compared with v1's
    expected_second = (0.6 - 0.3) * math.log(0.6 / 0.3) + (0.4 - 0.7) * math.log(0.4 / 0.7)
    assert second["questions"]["ok"]["psi_outcomes"] == pytest.approx(expected_second, abs=1e-6)
    expected_third = 2 * (0.7 - 0.3) * math.log(0.7 / 0.3)
    ok = third["questions"]["ok"]
    assert ok["psi_outcomes"] == pytest.approx(expected_third, abs=1e-6) and ok["psi_answers"] == 0.0
    assert ok["psi"] == ok["psi_outcomes"] and ok["drift_in"] == "outcomes" and ok["flag"] == "major"


def test_records_without_answers_or_with_foreign_answers_count_but_add_no_question():
    records = [record(hour(5), {}), record(hour(5, 1), {"x": {"type": "essay", "text": "?"}, "y": "no"}),
               {**record(hour(5, 2), {}), "response": {"error": "overloaded"}}]
    window = report_of(records)["windows"][0]
    assert window["records"] == 3 and window["questions"] == {} and window["outcomes"] == {}


# ------------------------------------------------------------------------------------------------ renderings
def test_table_markdown_and_figure_cap_to_the_most_drifting(tmp_path):
    qids = [f"q{i:02d}" for i in range(12)]
    records = [record(hour(5, i), {q: noul(0.9) for q in qids}) for i in range(12)]
    # in the third window, question qK answers false K times out of 12: q11 drifts most, q00 not at all
    records += [record(hour(7, i), {q: noul(0.9 if i >= int(q[1:]) else 0.1) for q in qids}) for i in range(12)]
    report = report_of(records)
    table = format_table(report, top=3).splitlines()
    assert table[0].startswith("24 records in 3 windows of 1h (2026-12-02T05:00:00Z to 2026-12-02T08:00:00Z)")
    assert table[1].split() == ["window", "(UTC)", "records", "q11", "q10", "q09", "most", "drifting"]
    assert table[2].split() == ["2026-12-02", "05:00", "12", "base", "base", "base", "-"]
    assert table[3].split() == ["2026-12-02", "06:00", "0", "(empty)"]
    assert table[4].split()[:4] == ["2026-12-02", "07:00", "12", f"{report['windows'][2]['questions']['q11']['psi']:.3f}**"]
    assert table[4].endswith("q11 " + f"{report['windows'][2]['questions']['q11']['psi']:.3f} major")
    assert table[-1] == "(9 more questions: --top, --json or --out DIR for all)"
    markdown = format_markdown(report, top=3)
    assert "| q11 | noul | 2 | 24 |" in markdown and "| q00 | noul | 2 | 24 | 0.0000 |" in markdown
    assert "![PSI per question" in markdown and "Overall outcomes" not in markdown
    png = drift_plot(report, tmp_path / "drift.png", top=3)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
