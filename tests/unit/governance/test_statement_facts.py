"""The facts a decision relied on (omni.governance.statement_facts), from the evidence summary its log record kept:
a sentence per question the rule names, the heaviest place of each medium and of the state, heaviest first; none
for a question a reviewer labelled otherwise; whole sentences only, within the database's limit."""
from __future__ import annotations

from omni.contract.evidence_summary import evidence_summary
from omni.governance.statement_facts import FACTS_HEADING, evidence_sentences, with_facts
from tests.unit.contract.test_evidence_summary import x_evidence


def summary() -> dict:
    return evidence_summary(x_evidence(), 3)


def test_one_sentence_per_named_question_heaviest_place_first():
    kept = summary()
    assert evidence_sentences(kept, ["fan_running", "fan_running", "absent"]) == [
        ("fan_running=true relied on: video 0 at 0.0–1.0 s (box 0,0–60,60), state 'scratch', audio 0 at 1.28–1.36 s, "
        "video 0's sound at 1.0–1.08 s, image 0 (box 0,0–60,60)")]


def test_a_question_a_reviewer_labelled_otherwise_gets_no_sentence():
    kept = summary()
    assert evidence_sentences(kept, ["fan_running"], {"fan_running": False}) == []
    assert len(evidence_sentences(kept, ["fan_running"], {"fan_running": True})) == 1
    assert len(evidence_sentences(kept, ["fan_running"], {})) == 1          # labelled, but not this question


def test_no_summary_or_no_places_gives_no_sentence():
    assert evidence_sentences(None, ["fan_running"]) == []
    assert evidence_sentences({"questions": "?"}, ["fan_running"]) == []
    kept = summary()
    entry = kept["questions"]["fan_running"]
    entry.update(images=[], audio=[], videos=[], state={"chars": 0, "covered_chars": 0, "spans": []})
    assert evidence_sentences(kept, ["fan_running"]) == []


def test_a_long_state_span_is_quoted_short_on_one_line():
    kept = summary()
    kept["questions"]["fan_running"]["state"]["spans"][0]["text"] = "a\nvery " + "long " * 30
    [sentence] = evidence_sentences(kept, ["fan_running"])
    quoted = sentence.split("state '")[1].split("'")[0]
    assert len(quoted) == 60 and quoted.startswith("a very long") and quoted.endswith("…")


def test_facts_follow_the_maps_text_in_whole_sentences_within_the_limit():
    assert with_facts("The map's facts.", [], 5000) == "The map's facts."
    text = with_facts("The map's facts.", ["a=true relied on: x", "b=false relied on: y"], 5000)
    assert text == f"The map's facts.\n{FACTS_HEADING} a=true relied on: x; b=false relied on: y."
    fits_one = len(f"The map's facts.\n{FACTS_HEADING} a=true relied on: x.")
    assert with_facts("The map's facts.", ["a=true relied on: x", "b=false relied on: y"], fits_one) == \
        f"The map's facts.\n{FACTS_HEADING} a=true relied on: x."
    assert with_facts("The map's facts.", ["a=true relied on: x"], fits_one - 1) == "The map's facts."
