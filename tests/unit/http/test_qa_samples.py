"""QA samples of automatic decisions (issue 36 item 2): the policy's [qa] and qa_sample read and checked; draws
uniform, seeded and recorded, the same in every process; only automatic decisions drawn (never review, never a
bank's answer); behind `omni serve` (the real app, the FakeModel: `ok` is true at confidence 0.5) the drawn ones go
to the QA queue without changing the automatic answer, reviewers label them there, /metrics and `omni report qa` give
the precision with its interval against the target, an ALERT (exit 1) below it, a PNG over time."""
from __future__ import annotations

import json

import pytest

from api.cli.main import main as omni
from omni.contract.outcomes import decide_outcome
from omni.contract.policy import PolicyError, parse_policy
from omni.contract.qa import qa_draw, qa_sample, qa_target
from omni.governance.qa import wilson
from tests.unit.http.serving import body, served, wait_until

ANSWERS = {"ok": {"type": "noul", "noul": 0.9}, "team": {"type": "choice", "choice": "tech", "confidence": 0.95,
                                                          "probabilities": {"billing": 0.05, "tech": 0.95}}}


def policy(text: str):
    return parse_policy(text.encode(), "policy.toml")


BASE = 'version = "v1"\n[questions.ok]\nauto_at = 0.5\nact_on = [false]\n'


def test_the_qa_keys_are_read_and_every_bad_value_named():
    read = policy(BASE + 'qa_target = 0.97\nqa_sample = 0.1\n[qa]\nsample = 0.02\nseed = 7\ntarget = 0.9\n')
    assert read.qa is not None and (read.qa.sample, read.qa.seed, read.qa.target) == (0.02, 7, 0.9)
    assert read.questions["ok"].qa_sample == 0.1 and qa_target(read, "ok") == 0.97 and qa_target(read, "x") == 0.9
    only_question = policy(BASE + "qa_sample = 0.5\n")
    assert only_question.qa is not None and only_question.qa.sample == 0.0
    assert only_question.qa.seed == int(only_question.sha256[:12], 16)           # recorded: from the file
    assert policy(BASE).qa is None
    for text, message in [(BASE + "[qa]\nsample = 1.5\n", r"qa.sample \(line 6\): 1.5 is not a share between 0 and 1"),
                          (BASE + "[qa]\nsample = -0.1\n", "qa.sample"),
                          (BASE + "qa_sample = 2\n", r"questions.ok.qa_sample \(line 5\)"),
                          (BASE + "[qa]\nseed = 3\n", "qa.sample.*required"),
                          (BASE + '[qa]\nsample = 0.1\nseed = "x"\n', "qa.seed.*not a seed"),
                          (BASE + "[qa]\nsample = 0.1\nrate = 1\n", "qa.rate.*unknown key")]:
        with pytest.raises(PolicyError, match=message):
            policy(text)


def test_draws_are_uniform_seeded_and_the_same_everywhere():
    draws = [qa_draw(7, f"req-{i}", "_decision") for i in range(20000)]
    assert draws == [qa_draw(7, f"req-{i}", "_decision") for i in range(20000)]       # no state: reproducible
    assert draws != [qa_draw(8, f"req-{i}", "_decision") for i in range(20000)]
    drawn = sum(d < 0.02 for d in draws)
    assert 310 <= drawn <= 490                                       # 400 expected, 4.5 binomial sd either side
    deciles = [sum(k / 10 <= d < (k + 1) / 10 for d in draws) for k in range(10)]
    assert all(1800 <= n <= 2200 for n in deciles)                   # uniform over [0, 1)


def test_only_automatic_decisions_are_drawn_with_the_seed_and_draw_recorded():
    everything = policy(BASE + '[questions.team]\nauto_at = 0.99\n[qa]\nsample = 1.0\nseed = 5\n')
    outcome = decide_outcome(everything, ANSWERS)          # ok: pass (automatic); team: review (0.95 < 0.99)
    assert outcome.overall == "review" and qa_sample(everything, outcome, "r1") is None    # review: people see it
    automatic = policy(BASE + "[qa]\nsample = 1.0\nseed = 5\n")
    drawn = qa_sample(automatic, decide_outcome(automatic, ANSWERS), "r1")
    assert drawn is not None and drawn["seed"] == 5 and drawn["draw"] == round(qa_draw(5, "r1", "_decision"), 6)
    assert drawn["questions"]["ok"] == {"answer": True, "outcome": "pass", "confidence": 0.9, "share": 1.0,
                                        "draw": round(qa_draw(5, "r1", "ok"), 6), "by": "decision"}
    assert qa_sample(automatic, decide_outcome(automatic, ANSWERS), None) is None
    by_question = policy(BASE + "qa_sample = 1.0\n")
    assert qa_sample(by_question, decide_outcome(by_question, ANSWERS), "r2")["questions"]["ok"]["by"] == "question"
    never = policy(BASE + "[qa]\nsample = 0.0\n")
    assert qa_sample(never, decide_outcome(never, ANSWERS), "r3") is None


def test_wilson_interval():
    assert wilson(0, 0) == (0.0, 1.0)
    low, high = wilson(95, 100)
    assert 0.887 < low < 0.889 and 0.978 < high < 0.980              # the textbook figures for 95 of 100
    assert wilson(10, 10)[1] == pytest.approx(1.0)


QA_POLICY = """version = "qa-1"
[questions.ok]            # the FakeModel says true at 0.5: pass (act_on false), automatic
auto_at = 0.4
act_on = [false]
qa_target = 0.9
[qa]
sample = 1.0
seed = 11
"""


def test_drawn_decisions_go_to_the_qa_queue_and_their_labels_give_the_precision(tmp_path, capsys):
    policy_file, review = tmp_path / "policy.toml", tmp_path / "review"
    policy_file.write_text(QA_POLICY, encoding="utf-8")
    only_ok = {"ok": body()["questions"]["ok"]}
    with served(policy=str(policy_file), review_dir=str(review)) as (client, _):
        for i in range(6):
            answer = client.post("/v1/systemone", json=body(state=f"unit {i}", questions=only_ok))
            assert answer.json()["x_outcome"]["overall"] == "pass"           # the automatic action stands
        wait_until(lambda: len(client.get("/v1/review/queues/qa/items").json()["items"]) == 6, what="6 QA items")
        queues = {q["id"]: q for q in client.get("/v1/review/queues").json()["queues"]}
        assert queues["qa"]["items"] == 6 and queues["policy"]["items"] == 0
        items = client.get("/v1/review/queues/qa/items").json()["items"]
        first = client.get(f"/v1/review/queues/qa/items/{items[0]['key']}").json()
        assert first["qa"]["seed"] == 11 and first["qa"]["questions"]["ok"]["answer"] is True     # marked as QA
        for n, item in enumerate(items):                      # reviewers agree with 2 of 6 automatic answers
            label = "true" if n < 2 else "false"
            saved = client.put(f"/v1/review/queues/qa/items/{item['key']}/labels", json={"labels": {"ok": label}})
            assert saved.status_code == 200
        metrics = client.get("/metrics").text
    assert 'omni_qa_sampled_total{question="ok"} 6.0' in metrics
    assert 'omni_qa_labelled{question="ok"} 6.0' in metrics
    assert 'omni_qa_precision{bound="estimate",question="ok"} 0.3333' in metrics
    assert 'omni_qa_below_target{question="ok"} 1.0' in metrics
    out = tmp_path / "qa-report"
    code = omni(["report", "qa", str(review), "--policy", str(policy_file), "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 1 and "ALERT: ok: automatic precision 0.333" in printed.err and "below its target 0.900" in printed.err
    assert "BELOW TARGET" in printed.out and "seed 11" in printed.out
    report = json.loads((out / "report.json").read_text())
    row = report["questions"]["ok"]
    assert (row["sampled"], row["labelled"], row["correct"]) == (6, 6, 2) and row["by_outcome"]["pass"]["correct"] == 2
    assert [round(x, 4) for x in wilson(2, 6)] == row["interval"] and len(report["windows"]) == 1
    assert (out / "qa.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert omni(["report", "qa", str(review), "--target", "0.2", "--json"]) == 0    # above a lower bar: no alert
    capsys.readouterr()


def test_report_qa_refuses_bad_input(tmp_path, capsys):
    assert omni(["report", "qa", str(tmp_path / "missing")]) == 2
    assert "no such review directory" in capsys.readouterr().err
    assert omni(["report", "qa", str(tmp_path), "--target", "1.5"]) == 2
    assert "--target must be a precision between 0 and 1" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text('version = "x"\n[questions.ok]\nauto_at = 0.5\n[qa]\nsample = 3\n', encoding="utf-8")
    assert omni(["report", "qa", str(tmp_path), "--policy", str(bad)]) == 2
    assert "qa.sample (line 5)" in capsys.readouterr().err
    assert omni(["report", "qa", str(tmp_path), "--window", "soon"]) == 2
    capsys.readouterr()
    assert omni(["report", "qa", str(tmp_path)]) == 0
    assert "no QA samples yet" in capsys.readouterr().out
