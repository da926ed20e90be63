"""omni.governance.shadow on plain records: the Wilson interval against scipy's, score questions read as levels,
labels as the dataset writes them or as label ids, labels outside the answers, questions one side did not answer, and
malformed shadow blocks named by where they were read."""
from __future__ import annotations

import pytest
from scipy.stats import binomtest

from omni.contract.answers import answer_question
from omni.contract.types import Option, Question
from omni.governance.shadow import ShadowError, collect, distribution, shadow_report, wilson_interval

SEVERITY = Question("severity", "score", (Option("0", "none"), Option("1", "minor"), Option("2", "major")))
OK = Question("ok", "noul", (Option("true"), Option("false")))


def record(index: int, live: dict, candidate: dict | None, model: str = "cand") -> tuple[str, dict]:
    shadow = None if candidate is None else {"model": model, "adapter_sha256": None, "answers": candidate,
                                             "probabilities": {}, "x_outcome": None}
    return f"seg.jsonl:{index + 1}", {"request_id": f"r{index}", "response": {"model": "base", "answers": live},
                                      "shadow": shadow}


@pytest.mark.parametrize(("successes", "n"), [(0, 1), (1, 1), (6, 10), (3, 7), (0, 25), (99, 100), (500, 1000)])
def test_the_wilson_interval_is_scipys(successes, n):
    expected = binomtest(successes, n).proportion_ci(0.95, "wilson")
    assert wilson_interval(successes, n) == pytest.approx((expected.low, expected.high), abs=1e-12)
    assert wilson_interval(successes, n, 0.8) == pytest.approx(tuple(binomtest(successes, n).proportion_ci(0.8,
                                                                                                          "wilson")))


def test_no_trials_no_interval():
    assert wilson_interval(0, 0) is None


def test_score_levels_and_noul_labels_as_the_dataset_writes_them():
    levels = [(0.6, 0.3, 0.1), (0.1, 0.2, 0.7), (0.2, 0.5, 0.3)]
    records = [record(i, {"severity": answer_question(SEVERITY, live), "ok": answer_question(OK, (0.7, 0.3))},
                      {"severity": answer_question(SEVERITY, levels[(i + 1) % 3]),
                       "ok": answer_question(OK, (0.4, 0.6))}) for i, live in enumerate(levels)]
    labels = {"r0": {"severity": 0, "ok": True}, "r1": {"severity": "1"}, "r2": {"severity": 7}}
    result = shadow_report(collect(records, labels))
    severity, ok = result["questions"]["severity"], result["questions"]["ok"]
    assert (severity["n"], severity["agree"]) == (3, 0)
    # the live top level 0, 2, 1 at 0.6, 0.7, 0.5; the candidate's probability of it 0.1, 0.3, 0.3
    assert severity["mean_abs_delta_p"] == pytest.approx((0.5 + 0.4 + 0.2) / 3, abs=1e-6)
    assert severity["labels_ignored"] == 1                     # level 7 is not an answer of the question
    assert severity["reviewed"]["n"] == 2
    assert severity["reviewed"]["live"]["accuracy"] == 0.5 and severity["reviewed"]["candidate"]["accuracy"] == 0.5
    assert (ok["agree"], ok["mean_abs_delta_p"]) == (0, pytest.approx(0.3, abs=1e-6))
    assert ok["reviewed"]["n"] == 1 and ok["reviewed"]["live"]["accuracy"] == 1.0
    assert ok["reviewed"]["candidate"] == {"accuracy": 0.0, "ece": pytest.approx(0.6), "brier": pytest.approx(0.72)}
    assert result["reviewed_records"] == 3 and result["flips"] is None


def test_a_question_the_candidate_did_not_answer_is_not_counted():
    records = [record(0, {"ok": answer_question(OK, (0.9, 0.1)), "severity": answer_question(SEVERITY, (1, 0, 0))},
                      {"ok": answer_question(OK, (0.8, 0.2))}), record(1, {"ok": answer_question(OK, (0.9, 0.1))},
                                                                       None)]
    result = shadow_report(collect(records))
    assert list(result["questions"]) == ["ok"] and result["questions"]["ok"]["n"] == 1
    assert (result["records"], result["shadow_records"]) == (2, 1)


@pytest.mark.parametrize(("shadow", "words"), [
    ([], "the shadow block is not an object"),
    ({"answers": {}}, "the shadow block has no 'model'"),
    ({"model": "c", "answers": []}, "the shadow block's answers are not an object"),
    ({"model": "c", "answers": {"ok": {"type": "choice"}}}, "question 'ok': not a System One answer on both sides"),
])
def test_a_malformed_block_names_where_it_was_read(shadow, words):
    where, line = record(4, {"ok": answer_question(OK, (0.9, 0.1))}, None)
    line["shadow"] = shadow
    with pytest.raises(ShadowError, match=f"^seg.jsonl:5: {words}"):
        collect([(where, line)])


def test_distribution_reads_each_answer_type():
    assert distribution({"type": "noul", "noul": 0.25}) == {"true": 0.25, "false": 0.75}
    assert distribution(answer_question(SEVERITY, (0.2, 0.3, 0.5))) == {"0": 0.2, "1": 0.3, "2": 0.5}
    with pytest.raises(ValueError, match="no probabilities"):
        distribution({"type": "choice", "choice": "x"})
