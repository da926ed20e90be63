"""`omni report shadow LOG`: a log written by the real DecisionLog with shadow blocks (no model: wire answers built by
the answer code, outcomes by a real policy on each side), labels from a real review directory joined by request id;
read end to end through `omni` with known agreement, flips and calibration; bad input is one line and exit 2."""
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
from omni.review.directory import ReviewDir
from omni.serve.decision_log import DecisionLog
from omni.serve.decision_log_files import segment_paths

QUESTIONS = {"ok": {"type": "noul", "instructions": "Is the unit fine?"},
             "team": {"type": "choice", "criteria": {"hvac": None, "electric": "wiring"}}}
POLICY = parse_policy(b"""version = "inspection-v1"
[questions.team]
auto_at = 0.6
act_on = ["electric"]
[questions.ok]
auto_at = 0.8
act_on = [false]
""", "policy.toml")
CANDIDATE_SHA256 = "ab" * 32
# head order: team (electric, hvac), ok (true, false). The live model says electric at 0.8 every time; the candidate
# says electric at 0.55 (under the bar: review) on r0-r1, electric at 0.7 (act) on r2-r5, hvac at 0.9 (pass) on r6-r9
LIVE_TEAM = (0.8, 0.2)
CANDIDATE_TEAM = {**dict.fromkeys(range(2), (0.55, 0.45)), **dict.fromkeys(range(2, 6), (0.7, 0.3)),
                  **dict.fromkeys(range(6, 10), (0.1, 0.9))}
LABELS = {0: {"team": "electric", "ok": "true"}, 1: {"team": "hvac"}, 2: {"team": "electric"},
          3: {"team": "electric"}, 6: {"team": "hvac"}}


def decide(request, head: dict[str, tuple[float, ...]]) -> tuple[dict, dict]:
    answers = {q.id: answer_question(q, head[q.id]) for q in request.questions}
    return answers, decide_outcome(POLICY, answers).to_wire()


def write_log(directory: Path, reviews: Path | None = None, policy: bool = True, candidate: str = "lora-v2") -> Path:
    """Ten shadow-scored decisions r0-r9 and two without a shadow block; the labelled ones kept for review."""
    config = EngineConfig()
    review = ReviewDir(reviews) if reviews is not None else None
    with DecisionLog(directory, segment_bytes=6000) as log:
        for index in range(12):
            request = parse_request({"state": f"unit {index}", "questions": QUESTIONS}, config)
            answers, outcome = decide(request, {"ok": (0.9, 0.1), "team": LIVE_TEAM})
            response = {"model": "tiny", "answers": answers, "usage": {"input_tokens": 9, "output_tokens": 0},
                        **({"x_outcome": outcome} if policy else {})}
            shadow = None
            if index < 10:
                shadow_answers, shadow_outcome = decide(request, {"ok": (0.9, 0.1), "team": CANDIDATE_TEAM[index]})
                shadow = {"model": candidate, "adapter_sha256": CANDIDATE_SHA256, "answers": shadow_answers,
                          "probabilities": {qid: {"true": 0.9, "false": 0.1} if qid == "ok" else
                                            dict(zip(("electric", "hvac"), CANDIDATE_TEAM[index], strict=True))
                                            for qid in shadow_answers},
                          "x_outcome": shadow_outcome if policy else None}
            decided_at = f"2026-12-02T05:{index:02d}:00.000000Z"
            audit = {"format": "omni-audit/1", "request_id": f"r{index}", "decided_at": decided_at}
            assert log.append(request, response, audit, request_id=f"r{index}", decided_at=decided_at, shadow=shadow)
            if review is not None and index in LABELS:
                key = review.keep_decision(request, response, audit)
                review.save_labels(key, "server", request, answers, LABELS[index], reviewer="ada")
    return directory


@pytest.fixture(scope="module")
def logged(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("shadow")
    log = write_log(root / "decisions", root / "review")
    assert len(segment_paths(log)) > 1                         # rotated: the report reads across segments
    return log, root / "review"


def report(capsys, *args: object) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["report", "shadow", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_figures_per_question_flips_and_calibration_on_reviewed_items(logged, tmp_path, capsys):
    log, reviews = logged
    code, out, err = report(capsys, log, "--out", tmp_path / "out", "--reviews", reviews, "--json", "--quiet")
    assert code == 0, err
    result = json.loads(out)
    assert (result["live"], result["candidate"], result["candidate_adapter_sha256"]) == ("tiny", "lora-v2",
                                                                                          [CANDIDATE_SHA256])
    assert (result["records"], result["shadow_records"], result["reviewed_records"]) == (12, 10, 5)
    team, ok = result["questions"]["team"], result["questions"]["ok"]
    # team: 6 of 10 top answers agree; |dp| of electric: 2 x 0.25 + 4 x 0.1 + 4 x 0.7 over 10
    assert (team["n"], team["agree"], team["agreement"]) == (10, 6, 0.6)
    assert team["agreement_interval"] == pytest.approx([0.3126738, 0.8318197], abs=1e-6)  # Wilson 6/10 (scipy)
    assert team["mean_abs_delta_p"] == pytest.approx(0.37, abs=1e-6)
    assert team["flips"] == {"act": {"act": 4, "review": 2, "pass": 4}, "review": {"act": 0, "review": 0, "pass": 0},
                             "pass": {"act": 0, "review": 0, "pass": 0}}
    assert team["flipped"] == 6
    assert (ok["agreement"], ok["mean_abs_delta_p"], ok["flipped"]) == (1.0, 0.0, 0)
    assert ok["agreement_interval"] == pytest.approx([0.722467, 1.0], abs=1e-6)          # 10 / (10 + z²)
    assert ok["flips"]["pass"]["pass"] == 10
    assert result["flips"]["act"] == {"act": 4, "review": 2, "pass": 4}                  # overall: team acts or not
    # reviewed (r0, r1, r2, r3, r6): live says electric at 0.8 on all, right 3 of 5; the candidate right 4 of 5
    assert team["reviewed"] == {"n": 5, "live": {"accuracy": 0.6, "ece": 0.2, "brier": 0.56},
                                "candidate": {"accuracy": 0.8, "ece": 0.16, "brier": 0.278}}
    assert ok["reviewed"] == {"n": 1, "live": {"accuracy": 1.0, "ece": 0.1, "brier": 0.02},
                              "candidate": {"accuracy": 1.0, "ece": 0.1, "brier": 0.02}}
    pooled = result["reviewed"]
    assert pooled["n"] == 6 and pooled["live"]["accuracy"] == pytest.approx(4 / 6, abs=1e-6)
    assert pooled["candidate"]["accuracy"] == pytest.approx(5 / 6, abs=1e-6)
    assert sum(pooled["candidate"]["bins"]["counts"]) == 6 and len(pooled["live"]["bins"]["edges"]) == 16
    assert json.loads((tmp_path / "out" / "report.json").read_text()) == result


def test_table_markdown_and_png(logged, tmp_path, capsys):
    log, reviews = logged
    code, out, err = report(capsys, log, "--out", tmp_path / "out", "--reviews", reviews)
    assert code == 0 and err.strip().endswith("shadow.png"), err
    lines = out.splitlines()
    assert lines[0].startswith("live tiny vs candidate lora-v2 (adapter sha256 abababababab): 10 shadow records of 12,"
                               " 5 reviewed")
    assert lines[2].split() == ["ok", "noul", "10", "1.000", "0.722-1.000", "0.000", "0", "1", "1.000/1.000",
                                "0.100/0.100", "0.020/0.020"]
    assert lines[3].split() == ["team", "choice", "10", "0.600", "0.313-0.832", "0.370", "6", "5", "0.600/0.800",
                                "0.200/0.160", "0.560/0.278"]
    assert lines[4] == "overall outcome flipped on 6 of 10 records: act->review 2, act->pass 4"
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "![agreement per question, outcome flips, calibration on reviewed items](shadow.png)" in markdown
    assert "| act | 4 | 2 | 4 |" in markdown and "| candidate | 0.8333 | 0.1500 | 0.2350 |" in markdown
    png = (tmp_path / "out" / "shadow.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_without_a_policy_or_reviews_there_are_no_flips_and_no_calibration(tmp_path, capsys):
    log = write_log(tmp_path / "decisions", policy=False)
    code, out, err = report(capsys, log, "--out", tmp_path / "out", "--json", "--quiet")
    assert code == 0, err
    result = json.loads(out)
    assert result["flips"] is None and result["reviewed"] is None and result["reviewed_records"] == 0
    assert result["questions"]["team"]["flips"] is None and result["questions"]["team"]["flipped"] is None
    assert result["questions"]["team"]["agreement"] == 0.6
    assert (tmp_path / "out" / "shadow.png").read_bytes()[:4] == b"\x89PNG"
    assert "## Overall outcome" not in (tmp_path / "out" / "report.md").read_text()


def test_one_segment_file_reads_as_well(logged, tmp_path, capsys):
    first = segment_paths(logged[0])[0]
    code, out, _ = report(capsys, first, "--out", tmp_path / "out", "--json", "--quiet")
    result = json.loads(out)
    assert code == 0 and 0 < result["records"] < 12 and result["questions"]["team"]["n"] == result["shadow_records"]


# ------------------------------------------------------------------------------------------------ bad input
def test_a_log_without_shadow_records_is_one_line_and_exit_2(tmp_path, capsys):
    config = EngineConfig()
    with DecisionLog(tmp_path / "plain") as log:
        for index in range(3):
            request = parse_request({"state": f"unit {index}", "questions": QUESTIONS}, config)
            answers, _ = decide(request, {"ok": (0.9, 0.1), "team": LIVE_TEAM})
            log.append(request, {"model": "tiny", "answers": answers}, {}, request_id=f"p{index}",
                       decided_at="2026-12-02T05:00:00Z")
    code, out, err = report(capsys, tmp_path / "plain", "--out", tmp_path / "out")
    assert (code, out) == (2, "")
    assert err == ("omni report: no shadow record among 3 decision-log records (was the server run with --shadow "
                   "LIVE=CANDIDATE?)\n")
    assert not (tmp_path / "out").exists()


def test_a_missing_path_and_a_corrupt_line_name_the_file(logged, tmp_path, capsys):
    code, _, err = report(capsys, tmp_path / "nowhere", "--out", tmp_path / "out")
    assert code == 2 and err.startswith("omni report: decision log ") and err.endswith("nowhere: does not exist\n")
    segment = tmp_path / "segment.jsonl"
    lines = segment_paths(logged[0])[0].read_text().splitlines(keepends=True)
    segment.write_text(lines[0] + "{not json\n" + lines[1])
    code, _, err = report(capsys, segment, "--out", tmp_path / "out")
    assert code == 2 and f"{segment}: line 2: not a decision-log record (not JSON" in err, err


def test_a_malformed_shadow_block_names_its_file_and_line(logged, tmp_path, capsys):
    segment = tmp_path / "segment.jsonl"
    lines = segment_paths(logged[0])[0].read_text().splitlines(keepends=True)
    broken = json.loads(lines[1])
    del broken["shadow"]["answers"]
    segment.write_text(lines[0] + json.dumps(broken) + "\n")
    code, _, err = report(capsys, segment, "--out", tmp_path / "out")
    assert (code, err) == (2, f"omni report: {segment}:2: the shadow block has no 'answers'\n")


def test_two_pairs_need_one_chosen(logged, tmp_path, capsys):
    other = write_log(tmp_path / "other", candidate="head-v3")
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text("".join(p.read_text() for p in segment_paths(logged[0]) + segment_paths(other)))
    code, _, err = report(capsys, mixed, "--out", tmp_path / "out")
    assert code == 2 and "holds shadow records of 2 pairs: tiny=head-v3 (10 records), tiny=lora-v2 (10 records)" \
        in err and "--pair LIVE=CANDIDATE" in err
    code, out, err = report(capsys, mixed, "--out", tmp_path / "out", "--pair", "tiny=head-v3", "--json", "--quiet")
    assert code == 0 and json.loads(out)["candidate"] == "head-v3" and json.loads(out)["shadow_records"] == 10, err
    code, _, err = report(capsys, mixed, "--out", tmp_path / "out", "--pair", "tiny=nothing")
    assert code == 2 and "no shadow record of the pair tiny=nothing; the log holds tiny=head-v3, tiny=lora-v2" in err
    code, _, err = report(capsys, mixed, "--out", tmp_path / "out", "--pair", "tiny")
    assert code == 2 and "--pair must be LIVE=CANDIDATE" in err


def test_a_reviews_path_that_is_not_a_review_directory(logged, tmp_path, capsys):
    code, _, err = report(capsys, logged[0], "--out", tmp_path / "out", "--reviews", tmp_path / "none")
    assert code == 2 and err.endswith("none: does not exist\n") and not (tmp_path / "none").exists()
    (tmp_path / "empty").mkdir()
    code, _, err = report(capsys, logged[0], "--out", tmp_path / "out", "--reviews", tmp_path / "empty")
    assert code == 2 and "is not a review directory of a server (no decisions.jsonl" in err


def test_out_is_required(logged, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["report", "shadow", str(logged[0])])
    assert exit_.value.code == 2 and "--out" in capsys.readouterr().err
