"""omni.governance.policy_fit and the policy writer: the Clopper–Pearson bound against known values and its definition,
the chosen bar against a brute-force reading of the rule, monotonicity, ties, a set too small, an empty question,
--from and per-medium bars, and the written TOML read back by omni.contract.policy."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import binom

from omni.contract.config import EngineConfig
from omni.contract.outcomes import read_answer
from omni.contract.policy import QuestionPolicy, parse_policy
from omni.contract.request import parse_request
from omni.governance.policy_fit import (
    AnsweredQuestion,
    PolicyFitError,
    answered,
    apply_policy,
    choose,
    fit_policy,
    fit_question,
    lower_bound,
    needed_sample_size,
    precision_curve,
)
from omni.governance.policy_report import coverage_precision_plot, format_table, policy_toml, report_json


def row(confidence: float, correct: bool, line: int = 0, qid: str = "ok", media: tuple[str, ...] = ()):
    """A noul answer `true` at `confidence`, labelled true (correct) or false."""
    return AnsweredQuestion(line, qid, "noul", ("true", "false"), {"type": "noul", "noul": confidence}, True,
                            confidence, "true" if correct else "false", frozenset(media))


def rows_of(confidences, correct, qid="ok", media=()):
    return [row(c, ok, i, qid, media) for i, (c, ok) in enumerate(zip(confidences, correct, strict=True))]


# ------------------------------------------------------------------------------------------------ the bound
@pytest.mark.parametrize(("k", "n", "expected"), [(9, 10, 0.6058), (10, 10, 0.7411), (95, 100, 0.8977),
                                                  (240, 240, 0.9876), (1, 1, 0.05)])
def test_clopper_pearson_lower_bound_matches_known_values(k, n, expected):
    assert lower_bound(k, n, 0.95) == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize(("k", "n", "level"), [(9, 10, 0.95), (95, 100, 0.95), (30, 40, 0.9), (499, 500, 0.99)])
def test_the_bound_is_where_k_or_more_successes_become_exactly_as_unlikely_as_one_minus_the_level(k, n, level):
    bound = lower_bound(k, n, level)
    assert binom.sf(k - 1, n, bound) == pytest.approx(1 - level, rel=1e-6)      # P(X >= k | p = bound) = 1 - level


def test_no_correct_answer_or_no_answer_bounds_at_zero_and_no_error_at_the_closed_form():
    assert lower_bound(0, 10, 0.95) == 0.0 and lower_bound(0, 0, 0.95) == 0.0
    for n in (1, 7, 240):
        assert lower_bound(n, n, 0.95) == pytest.approx(0.05 ** (1 / n))


@pytest.mark.parametrize(("target", "level", "expected"), [(0.99, 0.95, 299), (0.97, 0.95, 99), (0.95, 0.95, 59),
                                                           (0.99, 0.99, 459)])
def test_needed_sample_size_is_the_fewest_all_correct_answers_that_reach_the_target(target, level, expected):
    n = needed_sample_size(target, level)
    assert n == expected
    assert lower_bound(n, n, level) >= target > lower_bound(n - 1, n - 1, level)
    assert n == math.ceil(math.log(1 - level) / math.log(target))
    assert needed_sample_size(1.0, level) is None


# ------------------------------------------------------------------------------------------------ the rule
def brute_force(confidences, correct, target, level):
    """The rule read literally: the lowest observed confidence t whose {confidence >= t} has bound >= target."""
    qualifying = []
    for t in sorted(set(confidences)):
        chosen = [ok for c, ok in zip(confidences, correct, strict=True) if c >= t]
        if lower_bound(sum(chosen), len(chosen), level) >= target:
            qualifying.append(t)
    return min(qualifying) if qualifying else 1.0


def random_question(rng, n):
    confidences = np.round(rng.uniform(0.5, 1.0, n), 2).tolist()                  # rounded: many ties
    correct = (rng.uniform(size=n) < np.clip(np.array(confidences) + 0.08, 0, 1)).tolist()
    return confidences, correct


def test_the_chosen_bar_is_the_lowest_whose_automatic_answers_reach_the_target():
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(60):
        confidences, correct = random_question(rng, int(rng.integers(20, 400)))
        for target in (0.8, 0.9, 0.95):
            fit = fit_question(rows_of(confidences, correct), target, 0.95)
            assert fit.auto_at == brute_force(confidences, correct, target, 0.95)
            if fit.chosen is not None:
                checked += 1
                automatic = [ok for c, ok in zip(confidences, correct, strict=True) if c >= fit.auto_at]
                assert (fit.chosen.automatic, fit.chosen.correct) == (len(automatic), sum(automatic))
                assert fit.chosen.coverage == pytest.approx(len(automatic) / len(confidences))
    assert checked > 30                          # most random questions do support a bar: the check is not vacuous


def test_monotonic_a_stricter_target_or_level_never_lowers_the_bar_more_evidence_moves_it_the_right_way():
    rng = np.random.default_rng(1)
    for _ in range(40):
        confidences, correct = random_question(rng, int(rng.integers(30, 300)))
        bars = [fit_question(rows_of(confidences, correct), t, 0.95).auto_at for t in (0.7, 0.8, 0.9, 0.95, 0.99)]
        assert bars == sorted(bars)
        levels = [fit_question(rows_of(confidences, correct), 0.85, lv).auto_at for lv in (0.5, 0.8, 0.95, 0.99)]
        assert levels == sorted(levels)
        base = fit_question(rows_of(confidences, correct), 0.85, 0.95).auto_at
        top = max(confidences)
        assert fit_question(rows_of(confidences + [top], correct + [True]), 0.85, 0.95).auto_at <= base
        wrong_at = float(rng.choice(confidences))
        assert fit_question(rows_of(confidences + [wrong_at], correct + [False]), 0.85, 0.95).auto_at >= base


def test_answers_tied_at_a_bar_are_automatic_together_even_when_one_of_them_is_wrong():
    confidences = [0.99] * 60 + [0.9] * 40 + [0.8] * 40
    correct = [True] * 60 + [True] * 39 + [False] + [True] * 30 + [False] * 10
    curve = precision_curve(confidences, correct, 0.95)
    assert [(p.auto_at, p.automatic, p.correct) for p in curve] == [(0.99, 60, 60), (0.9, 100, 99), (0.8, 140, 129)]
    assert [round(p.lower_bound, 4) for p in curve] == [0.9513, 0.9534, 0.8733]
    # the error tied at 0.9 counts with its 39 neighbours: without it 99/99 would bound at 0.9702 and 0.9 would
    # support 0.96; with it (99/100: 0.9534) no bar does
    assert lower_bound(99, 99, 0.95) > 0.96
    assert choose(curve, 0.96) is None and fit_question(rows_of(confidences, correct), 0.96, 0.95).auto_at == 1.0
    assert choose(curve, 0.95).auto_at == 0.9                 # 0.99 qualifies too; the lowest that does wins


def test_a_set_too_small_writes_one_and_says_how_many_answers_would_be_needed():
    fit = fit_question(rows_of([0.99] * 49 + [0.97] * 49, [True] * 98), 0.97, 0.95)      # 98 right: one short
    assert not fit.supported and fit.auto_at == 1.0 and fit.needed == 99
    assert fit.best.automatic == 98 and fit.best.lower_bound == pytest.approx(0.05 ** (1 / 98))
    assert fit_question(rows_of([0.99] * 50 + [0.97] * 49, [True] * 99), 0.97, 0.95).auto_at == 0.97
    verdict = fit.verdict()
    assert "cannot support precision 0.97" in verdict and "99 answers, all correct, would be needed" in verdict
    weak = fit_question(rows_of([0.9] * 400, [True] * 360 + [False] * 40), 0.97, 0.95)
    assert weak.auto_at == 1.0 and weak.needed is None and "too weak" in weak.verdict()


def test_an_empty_question_sends_everything_to_review():
    fit = fit_question([], 0.9, 0.95, "ghost", "noul")
    assert (fit.auto_at, fit.labelled, fit.chosen, fit.best, fit.curve) == (1.0, 0, None, None, [])
    assert "no labelled answers" in fit.verdict()


@pytest.mark.parametrize(("target", "level"), [(1.0, 0.95), (0.0, 0.95), (0.9, 1.0), (0.9, 0.0), (1.2, 0.95)])
def test_a_target_or_level_outside_zero_one_is_refused_naming_it(target, level):
    with pytest.raises(PolicyFitError, match="target_precision" if target in (0.0, 1.0, 1.2) else "confidence_level"):
        fit_question(rows_of([0.9], [True]), target, level)


# ------------------------------------------------------------------------------------------------ answers
def test_answers_are_the_servers_rounded_answers_read_as_the_policy_reads_them():
    body = {"state": "x", "questions": {
        "ok": {"type": "noul", "instructions": "ok?"},
        "sev": {"type": "score", "instructions": "how bad?", "criteria": ["none", "minor", "major"]},
        "next": {"type": "choice", "instructions": "then?", "criteria": {"ship": None, "scrap": None}}}}
    questions = {q.id: q for q in parse_request(body, EngineConfig()).questions}
    ok = answered(questions["ok"], [0.123456, 0.876544], "false", 1)
    assert ok.answer == {"type": "noul", "noul": 0.1235} and ok.chosen is False and ok.correct
    assert ok.confidence == read_answer(ok.answer)[1] == 1 - 0.1235
    sev = answered(questions["sev"], [0.2, 0.7, 0.1], "2", 1, ["image"])
    assert (sev.chosen, sev.confidence, sev.correct, sev.modalities) == (1, 0.7, False, frozenset({"image"}))
    nxt = answered(questions["next"], [0.4, 0.6], "ship", 1)          # head order: scrap, ship (sorted ids)
    assert (nxt.chosen, nxt.confidence, nxt.correct, nxt.options) == ("ship", 0.6, True, ("ship", "scrap"))


# ------------------------------------------------------------------------------------------------ the policy
def demo_rows():
    good = rows_of([0.99] * 150 + [0.95] * 100 + [0.7] * 50, [True] * 250 + [True] * 30 + [False] * 20, "ok")
    return good + [row(0.9, True, i, "spare") for i in range(3)]


def test_fit_policy_without_from_names_no_action_and_takes_type_and_options_from_the_data():
    fit = fit_policy(demo_rows(), 0.97, 0.95, version="v1")
    assert fit.rules["ok"] == QuestionPolicy(0.95, (), {}, {}, "noul", ("true", "false"))
    assert fit.rules["spare"].auto_at == 1.0 and not fit.questions["spare"].supported
    assert any("act_on = [] for ok, spare" in note for note in fit.notes)
    assert "ok" in format_table(fit) and report_json(fit, {}, {})["questions"]["spare"]["needed"] == 99


def test_the_written_policy_reads_back_to_the_same_rules_with_its_header_and_odd_ids():
    rows = demo_rows() + [row(0.99, True, i, "a.b \"c\"") for i in range(400)]
    old = parse_policy(b'version = "inspection-7"\n[default]\nauto_at = 0.8\nauto_at_with = {video = 0.9}\n'
                       b'[questions.ok]\nauto_at = 0.5\nact_on = [false]\nauto_at_for = {false = 0.99}\n'
                       b'[questions.gone]\ntype = "choice"\noptions = ["x", "y"]\nauto_at = 0.7\nact_on = ["y"]\n'
                       b'[questions.spare]\ntype = "noul"\nauto_at = 0.5\nauto_at_with = {audio = 0.6}\n', "old.toml")
    fit = fit_policy(rows, 0.97, 0.95, old=old)
    text = policy_toml(fit, ["fitted on data.jsonl", "model sha256 abc\nwith a newline"])
    assert text.startswith("# fitted on data.jsonl\n# model sha256 abc with a newline\nversion = \"inspection-7\"")
    policy = parse_policy(text.encode(), "new.toml")
    assert policy.version == "inspection-7" and policy.default == old.default
    assert policy.questions == fit.rules
    assert policy.questions["ok"] == QuestionPolicy(0.95, (False,), {"false": 0.99}, {}, "noul", ("true", "false"))
    assert policy.questions["gone"] == old.questions["gone"]                 # not in the data: kept as it was
    assert policy.questions["spare"].auto_at_with == {"audio": 0.6}          # kept without --per-modality
    assert policy.questions['a.b "c"'].auto_at == 0.99
    assert any("auto_at_for kept" in n for n in fit.notes) and any("gone: not in the data" in n for n in fit.notes)
    assert fit_policy(rows, 0.97, 0.95, old=old, version="v2").version == "v2"


def test_a_question_whose_type_differs_from_the_old_policy_is_refused():
    old = parse_policy(b'version = "x"\n[questions.ok]\nauto_at = 0.5\nact_on = ["ship"]\n', "old.toml")
    with pytest.raises(PolicyFitError, match="old.toml: questions.ok is a rule for a choice question"):
        fit_policy(demo_rows(), 0.97, 0.95, old=old)


def test_per_medium_bars_are_written_only_where_stricter_and_supported():
    image_ok = rows_of([0.9] * 300, [True] * 300, media=("image",))
    video = [row(c, ok, 1000 + i, media=("video",)) for i, (c, ok) in
             enumerate(zip([0.99] * 200 + [0.9] * 200, [True] * 200 + [True] * 180 + [False] * 20, strict=True))]
    audio_few = [row(0.9, True, 2000 + i, media=("audio",)) for i in range(20)]
    fit = fit_policy(image_ok + video + audio_few, 0.95, 0.95, per_modality=True)
    question = fit.questions["ok"]
    assert question.auto_at == 0.9                                  # 700 of 720 pooled: enough
    assert question.by_medium["video"].auto_at == 0.99 and question.auto_at_with == {"video": 0.99}
    assert question.by_medium["image"].auto_at == 0.9               # not stricter: not written
    assert not question.by_medium["audio"].supported                # 20 answers: too few, the base bar applies
    assert fit.rules["ok"].auto_at_with == {"video": 0.99}
    policy = parse_policy(policy_toml(fit).encode())
    applied = apply_policy(policy, image_ok + video + audio_few)["ok"]
    assert (applied.labelled, applied.automatic, applied.correct) == (720, 520, 520)   # video at 0.9: to review


def test_apply_policy_counts_what_the_server_would_automate_and_act_on(tmp_path):
    rows = rows_of([0.99, 0.96, 0.95, 0.6], [True, True, False, True])
    policy = parse_policy(b'version = "x"\n[questions.ok]\nauto_at = 0.96\nact_on = [true]\n')
    figures = apply_policy(policy, rows)["ok"]                   # 0.96 exactly at the bar: automatic
    assert (figures.labelled, figures.automatic, figures.correct, figures.acted) == (4, 2, 2, 2)
    assert figures.coverage == 0.5 and figures.precision == 1.0
    assert apply_policy(parse_policy(b'version = "x"\n[questions.other]\nauto_at = 0.5\n'), rows) == {}
    fit = fit_question(rows_of(*random_question(np.random.default_rng(3), 200)), 0.8, 0.95, per_modality=True)
    png = coverage_precision_plot(fit, tmp_path / "curve.png")
    assert png.read_bytes()[:4] == b"\x89PNG"
