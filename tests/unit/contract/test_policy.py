"""Policies: the file read and checked (every bad key or value named with its line), and the outcomes it gives for
every question type at, just below and just above each bar; the overall rule; unnamed questions; `[default]`,
per-answer and per-medium bars; a rule that cannot fit a question sends it to review; reload swaps it whole."""
from __future__ import annotations

import hashlib
import re
import threading
import time

import pytest

from omni.contract.outcomes import decide_outcome, read_answer
from omni.contract.policy import PolicyError, PolicySource, parse_policy, read_policy

ISSUE_EXAMPLE = b'''version = "inspection-2026-12"
[questions.label_visible]      # noul
auto_at = 0.95                 # the answer's confidence below this -> review
act_on = [false]               # automatic answers that call for action; others -> pass
[questions.next_step]          # choice
auto_at = 0.9
act_on = ["rework", "scrap"]
[questions.severity]           # score: the answer is the most probable level
auto_at = 0.9
act_on = [2]
'''


def noul(p: float) -> dict:
    return {"type": "noul", "noul": p}


def choice(probabilities: dict[str, float]) -> dict:
    best = max(probabilities, key=lambda k: probabilities[k])
    return {"type": "choice", "choice": best, "probabilities": probabilities, "confidence": probabilities[best]}


def score(probabilities: list[float]) -> dict:
    return {"type": "score", "score": sum(i * p for i, p in enumerate(probabilities)),
            "legend": {str(i): None for i in range(len(probabilities))},
            "probabilities": {str(i): p for i, p in enumerate(probabilities)}, "confidence": max(probabilities)}


@pytest.fixture
def policy():
    return parse_policy(ISSUE_EXAMPLE, "inspection.toml")


def test_the_issues_example_reads_and_is_versioned_by_its_bytes(policy):
    assert policy.version == "inspection-2026-12" and policy.sha256 == hashlib.sha256(ISSUE_EXAMPLE).hexdigest()
    assert {qid: (r.type, r.auto_at, r.act_on) for qid, r in policy.questions.items()} == {
        "label_visible": ("noul", 0.95, (False,)), "next_step": ("choice", 0.9, ("rework", "scrap")),
        "severity": ("score", 0.9, (2,))}


@pytest.mark.parametrize(("p", "outcome"), [
    (0.05, "act"),         # answer false, confidence 0.95: at the bar, automatic, false acts
    (0.0501, "review"),    # confidence 0.9499: just below
    (0.04, "act"),         # just above
    (0.95, "pass"),        # answer true at 0.95: automatic, true does not act
    (0.9499, "review"),
    (0.5, "review"),       # p >= 0.5 is true, confidence 0.5
])
def test_noul_at_just_below_and_above_the_bar(policy, p, outcome):
    result = decide_outcome(policy, {"label_visible": noul(p)})
    question = result.questions["label_visible"]
    assert question.outcome == outcome and question.answer == (p >= 0.5)
    assert question.confidence == pytest.approx(max(p, 1 - p)) and question.auto_at == 0.95


@pytest.mark.parametrize(("probabilities", "outcome"), [
    ({"ship": 0.05, "rework": 0.9, "scrap": 0.05}, "act"),
    ({"ship": 0.9, "rework": 0.05, "scrap": 0.05}, "pass"),
    ({"ship": 0.05, "rework": 0.8999, "scrap": 0.1001}, "review"),
    ({"ship": 0.0, "rework": 0.0001, "scrap": 0.9999}, "act"),
])
def test_choice_at_and_around_the_bar(policy, probabilities, outcome):
    assert decide_outcome(policy, {"next_step": choice(probabilities)}).questions["next_step"].outcome == outcome


@pytest.mark.parametrize(("probabilities", "answer", "outcome"), [
    ([0.05, 0.05, 0.9], 2, "act"), ([0.9, 0.05, 0.05], 0, "pass"), ([0.0501, 0.05, 0.8999], 2, "review"),
    ([0.1, 0.9, 0.0], 1, "pass"), ([0.45, 0.45, 0.1], 0, "review"),        # a tie: the first level
])
def test_score_takes_the_most_probable_level(policy, probabilities, answer, outcome):
    question = decide_outcome(policy, {"severity": score(probabilities)}).questions["severity"]
    assert (question.answer, question.outcome) == (answer, outcome)


def test_overall_is_act_then_review_then_pass_and_unnamed_questions_get_none(policy):
    acting, reviewing, passing = noul(0.01), noul(0.3), noul(0.99)
    assert decide_outcome(policy, {"label_visible": acting, "next_step": choice({"ship": 0.6, "rework": 0.4})}
                          ).overall == "act"
    assert decide_outcome(policy, {"label_visible": passing, "severity": score([0.5, 0.5, 0.0])}).overall == "review"
    result = decide_outcome(policy, {"label_visible": passing, "other": reviewing})
    assert result.overall == "pass" and set(result.questions) == {"label_visible"}
    assert decide_outcome(policy, {"other": reviewing}).to_wire() == {
        "overall": "pass", "questions": {}, "policy": {"version": "inspection-2026-12", "sha256": policy.sha256}}


def test_a_bar_of_one_sends_even_a_certain_answer_to_review():
    policy = parse_policy(b'version = "v"\n[questions.q]\nauto_at = 1.0\nact_on = [true]\n')
    assert decide_outcome(policy, {"q": noul(1.0)}).questions["q"].outcome == "review"
    assert decide_outcome(policy, {"q": noul(0.0)}).overall == "review"


def test_default_per_answer_and_per_medium_bars():
    policy = parse_policy(b'version = "v2"\n[default]\nauto_at = 0.8\nauto_at_with = {video = 0.9}\n'
                          b'[questions.next_step]\nauto_at = 0.9\nact_on = ["scrap"]\nauto_at_for = {scrap = 0.97, '
                          b'ship = 0.6}\n', "p.toml")
    ship, scrap = choice({"ship": 0.65, "scrap": 0.35}), choice({"ship": 0.04, "scrap": 0.96})
    assert decide_outcome(policy, {"next_step": ship}).questions["next_step"].outcome == "pass"      # looser bar
    assert decide_outcome(policy, {"next_step": scrap}).questions["next_step"].auto_at == 0.97
    assert decide_outcome(policy, {"next_step": scrap}).overall == "review"                        # stricter bar
    other = decide_outcome(policy, {"other": noul(0.85)}, frozenset({"image"})).questions["other"]
    assert (other.outcome, other.auto_at) == ("pass", 0.8)                                          # the default
    with_video = decide_outcome(policy, {"other": noul(0.85)}, frozenset({"video", "image"})).questions["other"]
    assert (with_video.outcome, with_video.auto_at) == ("review", 0.9)                             # a medium raises


def test_a_rule_that_cannot_fit_the_question_sends_it_to_review_with_the_reason(policy):
    as_choice = decide_outcome(policy, {"label_visible": choice({"yes": 0.99, "no": 0.01})})
    assert as_choice.questions["label_visible"].outcome == "review" and as_choice.overall == "review"
    assert "for a noul question; this one is choice" in as_choice.questions["label_visible"].reason
    typed = parse_policy(b'version = "v"\n[questions.q]\ntype = "choice"\noptions = ["a", "b"]\nauto_at = 0.5\n')
    other_options = decide_outcome(typed, {"q": choice({"a": 0.9, "c": 0.1})}).questions["q"]
    assert other_options.outcome == "review" and "a, b" in other_options.reason
    assert decide_outcome(typed, {"q": choice({"b": 0.1, "a": 0.9})}).questions["q"].outcome == "pass"  # any order
    assert decide_outcome(policy, {"label_visible": noul(0.01)}).review_reasons() == []
    assert decide_outcome(policy, {"label_visible": noul(0.3)}).review_reasons() == [
        {"question": "label_visible", "answer": False, "confidence": pytest.approx(0.7), "auto_at": 0.95}]


@pytest.mark.parametrize(("text", "expected"), [
    (b'[questions.a]\nauto_at = 0.9\n', r"^p\.toml: version: required"),
    (b'version = "v"\n', r"names no question and has no \[default\]"),
    (b'version = "v"\n[questions.a]\nact_on = [true]\n', r"questions\.a\.auto_at \(line 2\): required"),
    (b'version = "v"\n\n[questions.a]\nauto_at = 1.5\n', r"questions\.a\.auto_at \(line 4\): 1\.5 is not a confidence"),
    (b'version = "v"\n[questions.a]\nauto_at = -0.1\n', r"questions\.a\.auto_at \(line 3\): -0\.1 is not"),
    (b'version = "v"\n[questions.a]\nauto_at = nan\n', r"questions\.a\.auto_at \(line 3\): nan is not"),
    (b'version = "v"\n[questions.a]\nauto_at = true\n', r"True is not a confidence"),
    (b'version = "v"\n[questions.a]\nauto_at = 0.9\nact_on = [true, "x"]\n', r"act_on \(line 4\): .*one kind"),
    (b'version = "v"\n[questions.a]\nauto_at = 0.9\nact_on = [1.5]\n', r"act_on \(line 4\): .*one kind"),
    (b'version = "v"\n[questions.a]\nauto_at = 0.9\nact_on = "scrap"\n', r"act_on \(line 4\): must be a list"),
    (b'version = "v"\n[questions.a]\ntype = "choice"\noptions = ["a", "b"]\nauto_at = 0.9\nact_on = ["c"]\n',
     r"questions\.a\.act_on \(line 6\): 'c' is not an answer of this question \(its answers: a, b\)"),
    (b'version = "v"\n[questions.a]\ntype = "score"\noptions = 3\nauto_at = 0.9\nact_on = [3]\n',
     r"'3' is not an answer .*0, 1, 2"),
    (b'version = "v"\n[questions.a]\ntype = "noul"\nauto_at = 0.9\nact_on = [2]\n',
     r"act_on \(line 5\): score answers \(\[2\]\) for a noul question"),
    (b'version = "v"\n[questions.a]\ntype = "yesno"\nauto_at = 0.9\n', r"'yesno' is not a question type"),
    (b'version = "v"\n[questions.a]\nauto_att = 0.9\n', r"questions\.a\.auto_att \(line 3\): unknown key"),
    (b'version = "v"\n[questions.a]\nauto_at = 0.9\nauto_at_with = {photo = 0.9}\n',
     r"auto_at_with\.photo \(line 4\): not a medium"),
    (b'version = "v"\n[questions.a]\nauto_at = 0.9\nauto_at_for = {x = 2}\n', r"auto_at_for\.x .*2 is not"),
    (b'version = "v"\n[default]\nauto_at = 0.9\nact_on = [true]\n', r"default\.act_on \(line 4\): unknown key"),
    (b'version = "v"\n[questions]\na = 3\n', r"questions\.a \(line 3\): must be a table"),
    (b'version = "v"\nversion = "w"\n', r"not valid TOML: .*line 2"),
    (b'version = "v"\nmodel = 4\n[default]\nauto_at = 0.9\n', r"model \(line 2\): a non-empty string"),
    (b'version = "v"\nmodel = " "\n[default]\nauto_at = 0.9\n', r"model \(line 2\): a non-empty string"),
    (b'version = "v"\n[questions.a]\nauto_at = 0.9\n\xff', r"not UTF-8"),
])
def test_a_bad_policy_names_the_key_and_its_line(text, expected):
    with pytest.raises(PolicyError) as info:
        parse_policy(text, "p.toml")
    assert re.search(expected, str(info.value)), str(info.value)


def test_a_policy_bound_to_a_model_governs_that_model_only():
    bound = parse_policy(b'version = "v"\nmodel = "line-4"\n[default]\nauto_at = 0.9\n', "p.toml")
    assert bound.model == "line-4" and bound.governs("line-4") and not bound.governs("clef-omni")
    base = parse_policy(b'version = "v"\nmodel = "clef-omni"\n[default]\nauto_at = 0.9\n', "p.toml")
    assert base.governs("jev-latest", ("clef-omni", "jev-latest")) and not base.governs("line-4", ("clef-omni",))
    unbound = parse_policy(b'version = "v"\n[default]\nauto_at = 0.9\n', "p.toml")
    assert unbound.model is None and unbound.governs("anything")


def test_read_answer_for_each_type():
    assert read_answer(noul(0.3)) == (False, pytest.approx(0.7))
    assert read_answer(choice({"a": 0.2, "b": 0.8})) == ("b", 0.8)
    assert read_answer(score([0.1, 0.2, 0.7])) == (2, 0.7)
    with pytest.raises(ValueError, match="not a System One answer: type 'rank'"):
        read_answer({"type": "rank"})


def test_a_missing_file_names_it(tmp_path):
    with pytest.raises(PolicyError, match=r"nope\.toml: cannot read the policy"):
        read_policy(tmp_path / "nope.toml")


def test_reload_swaps_the_whole_policy_and_a_bad_file_keeps_the_old_one(tmp_path):
    path = tmp_path / "policy.toml"
    path.write_bytes(ISSUE_EXAMPLE)
    source = PolicySource(path)
    first = source.current
    seen: set[tuple[str, float]] = set()
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            policy = source.current             # one read per decision: a whole policy, old or new
            seen.add((policy.version, policy.questions["label_visible"].auto_at))
            time.sleep(0)                       # let the reloads run (a tight loop would hold the GIL)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for thread in threads:
        thread.start()
    for n in range(60):
        version, bar = ("inspection-2026-12", 0.95) if n % 2 else ("v-strict", 0.99)
        path.write_bytes(ISSUE_EXAMPLE.replace(b'"inspection-2026-12"', f'"{version}"'.encode())
                         .replace(b"auto_at = 0.95", f"auto_at = {bar}".encode()))
        source.reload()
    stop.set()
    for thread in threads:
        thread.join()
    assert seen == {("inspection-2026-12", 0.95), ("v-strict", 0.99)}       # both seen, never half of one
    path.write_bytes(b"version = ")
    with pytest.raises(PolicyError, match="not valid TOML"):
        source.reload()
    assert source.current.version == "inspection-2026-12" and source.current is not first
