"""`omni report drift LOG`: a log written by the real DecisionLog (no model: wire answers built by the answer code
and outcomes by a real policy), its decided_at spanning several hours with an empty one, read end to end through
`omni` as a table, as JSON and into --out (report.json, report.md, a PNG); bad input is one line and exit 2."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from api.cli.main import main
from omni.contract.answers import answer_question
from omni.contract.config import EngineConfig
from omni.contract.outcomes import decide_outcome
from omni.contract.policy import parse_policy
from omni.contract.request import parse_request
from omni.serve.decision_log import DecisionLog
from omni.serve.decision_log_files import segment_paths

QUESTIONS = {"ok": {"type": "noul", "instructions": "Is the unit fine?"},
             "team": {"type": "choice", "criteria": {"hvac": None, "electric": "wiring"}},
             "severity": {"type": "score", "criteria": ["none", "minor", "major"]}}
POLICY = """version = "inspection-{version}"
[questions.team]
auto_at = {bar}
act_on = ["electric"]
[questions.ok]
auto_at = 0.8
act_on = [false]
"""
POLICIES = {name: parse_policy(POLICY.format(version=name, bar=bar).encode(), f"{name}.toml")
            for name, bar in (("v1", 0.6), ("v2", 0.5))}
# per hour: (policy, how many decisions send the unit to the electricians out of 20)
HOURS = {8: ("v2", 16), 5: ("v1", 6), 6: ("v1", 6)}          # 07:00 has none; written out of order on purpose


def decision(config: EngineConfig, hour: int, index: int, electric: bool) -> tuple:
    request = parse_request({"state": f"unit {hour}-{index}", "questions": QUESTIONS}, config)
    head = {"ok": [0.9, 0.1], "team": [0.8, 0.2] if electric else [0.1, 0.9], "severity": [0.7, 0.2, 0.1]}
    answers = {q.id: answer_question(q, head[q.id]) for q in request.questions}     # head order: electric, hvac
    outcome = decide_outcome(POLICIES[HOURS[hour][0]], answers).to_wire()
    response = {"model": "tiny", "answers": answers, "usage": {"input_tokens": 9, "output_tokens": 0},
                "x_outcome": outcome}
    decided_at = f"2026-12-02T{hour:02d}:{index * 2:02d}:{index:02d}.250000Z"
    return request, response, decided_at


@pytest.fixture(scope="module")
def log(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("drift") / "decisions"
    config = EngineConfig()
    with DecisionLog(directory, segment_bytes=8000) as writer:
        for hour, (_policy, electric) in HOURS.items():
            for index in range(20):
                request, response, decided_at = decision(config, hour, index, index < electric)
                audit = {"format": "omni-audit/1", "request_id": f"r{hour}-{index}", "decided_at": decided_at}
                assert writer.append(request, response, audit, request_id=f"r{hour}-{index}", decided_at=decided_at)
    assert len(segment_paths(directory)) > 2                   # rotated: the report reads across segments
    return directory


def report(capsys, *args: object) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["report", "drift", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_windows_psi_and_outcomes_per_policy_version(log, capsys):
    code, out, err = report(capsys, log, "--window", "1h", "--json", "--quiet")
    assert code == 0 and err == "", err
    result = json.loads(out)
    windows = result["windows"]
    assert [(w["start"], w["records"]) for w in windows] == [
        ("2026-12-02T05:00:00Z", 20), ("2026-12-02T06:00:00Z", 20), ("2026-12-02T07:00:00Z", 0),
        ("2026-12-02T08:00:00Z", 20)]
    assert result["records"] == 60 and result["window"] == "1h" and result["window_seconds"] == 3600
    assert windows[0]["questions"]["team"]["answers"] == {"electric": 6, "hvac": 14}
    assert windows[3]["questions"]["team"]["answers"] == {"electric": 16, "hvac": 4}
    assert all(windows[1]["questions"][q]["psi"] == 0.0 for q in QUESTIONS)
    assert windows[2]["questions"] == {} and windows[2]["most_drifting"] is None
    team = windows[3]["questions"]["team"]
    assert team["flag"] == "major" and team["psi"] > 0.25 and windows[3]["most_drifting"]["question"] == "team"
    assert windows[3]["questions"]["ok"]["psi"] == 0.0 and windows[3]["questions"]["severity"]["psi"] == 0.0
    # outcomes per policy version: team acts when it answers electric (confidence 0.8 clears both bars)
    assert windows[0]["outcomes"] == {"inspection-v1": {"act": 6, "review": 0, "pass": 14}}
    assert windows[0]["questions"]["team"]["outcomes"] == {"inspection-v1": {"act": 6, "review": 0, "pass": 14}}
    assert windows[3]["outcomes"] == {"inspection-v2": {"act": 16, "review": 0, "pass": 4}}
    assert team["psi_outcomes"] is None                       # another policy version: not compared
    assert result["policies"] == {f"inspection-{v}": [POLICIES[v].sha256] for v in ("v1", "v2")}
    assert result["questions"]["team"]["max_psi_window"] == "2026-12-02T08:00:00Z"
    assert result["questions"]["severity"]["answers"] == {"0": 60}


def test_table_and_out_dir_with_a_png(log, tmp_path, capsys):
    out_dir = tmp_path / "drift"
    code, out, err = report(capsys, log, "--window", "1h", "--out", out_dir)
    assert code == 0 and err.strip().endswith("drift.png"), err
    lines = out.splitlines()
    assert lines[0].startswith("60 records in 4 windows of 1h (2026-12-02T05:00:00Z to 2026-12-02T09:00:00Z)")
    assert lines[1].split()[:3] == ["window", "(UTC)", "records"] and lines[1].split()[3] == "team"
    assert lines[3].split() == ["2026-12-02", "06:00", "20", "0.000", "0.000", "0.000", "ok", "0.000"]
    assert lines[4].split() == ["2026-12-02", "07:00", "0", "(empty)"]
    assert lines[5].split()[3].endswith("**") and lines[5].endswith(" major")
    saved = json.loads((out_dir / "report.json").read_text())
    assert saved["windows"][3]["most_drifting"]["question"] == "team" and saved["log"] == str(log)
    markdown = (out_dir / "report.md").read_text()
    assert "![PSI per question and answer shares per window](drift.png)" in markdown
    assert "| 2026-12-02 08:00 | inspection-v2 | 16 (80%) | 0 (0%) | 4 (20%) |" in markdown
    png = (out_dir / "drift.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_baseline_previous_range_and_half_hour_windows(log, capsys):
    code, out, _ = report(capsys, log, "--baseline", "previous", "--since", "2026-12-02T06:00:00Z", "--json",
                          "--quiet")
    windows = json.loads(out)["windows"]
    assert code == 0 and [w["start"][11:16] for w in windows] == ["06:00", "07:00", "08:00"]
    assert windows[2]["baseline"] == "2026-12-02T07:00:00Z" and windows[2]["questions"]["team"]["psi"] is None
    code, out, _ = report(capsys, log, "--window", "30m", "--until", "2026-12-02T08:10", "--json", "--quiet")
    windows = json.loads(out)["windows"]
    assert code == 0 and [w["records"] for w in windows] == [15, 5, 15, 5, 0, 0, 5]


def test_bad_input_is_one_line_and_exit_2(log, tmp_path, capsys):
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text('{"state": "a dataset line", "questions": {}}\n')
    corrupt = tmp_path / "corrupt"
    (corrupt / "segments").mkdir(parents=True)
    segment = corrupt / "segments" / segment_paths(log)[0].name
    segment.write_bytes(segment_paths(log)[0].read_bytes() + b"not json\n" + b"{}\n")
    empty = tmp_path / "empty"
    (empty / "segments").mkdir(parents=True)
    cases = [((tmp_path / "nowhere",), f"{tmp_path / 'nowhere'}: does not exist"),
             ((tmp_path,), "is not a decision log directory"),
             ((foreign,), f"{foreign}: line 1: not a decision-log record"),
             ((corrupt,), f"{segment}: line "),
             ((empty,), f"{empty}: no decision-log records"),
             ((log, "--since", "2030-01-01"), f"{log}: no decision-log records since 2030-01-01"),
             ((log, "--window", "1x"), "--window must be a positive whole number and a unit (s, m, h, d, w)"),
             ((log, "--window", "1s"), "makes more than 10000 windows"),
             ((log, "--until", "noon"), "--until must be an ISO 8601 time"),
             ((log, "--since", "2026-12-03", "--until", "2026-12-02"), "--until (2026-12-02) must be later"),
             ((log, "--bins", "1"), "--bins must be between 2 and 100, not 1"),
             ((log, "--top", "0"), "--top must be at least 1, not 0")]
    for args, message in cases:
        code, out, err = report(capsys, *args, "--quiet")
        assert code == 2 and out == "", (args, err)
        assert len(err.strip().splitlines()) == 1 and err.startswith("omni report: ") and message in err, err
