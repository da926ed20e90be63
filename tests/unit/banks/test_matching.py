"""What a request's media match and whether that decides it: act / review on one medium, pass only with every medium
passed, flag never; precedence between matches; a photo that cannot be hashed counted, its sha256 still looked up;
the shelf's reload all or nothing; the decision a bank answers and the model's decision with the match."""
from __future__ import annotations

import hashlib
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from fixtures import media as fm
from omni.banks.decisions import NO_MODEL_SOURCE, answered_by_bank, with_match
from omni.banks.entries import BankError, BankFile, parse_entry
from omni.banks.index import Bank
from omni.banks.matching import BankSet
from omni.banks.shelf import BankShelf
from omni.contract.audit import audit_from_wire
from omni.contract.outcomes import with_outcome
from omni.contract.policy import parse_policy
from omni.contract.types import Decision, DecisionRequest, Option, Question, Usage
from preprocess.hashes import pdq_of_image
from preprocess.item import MediaItem

ADDED = "2026-12-04T10:00:00+00:00"
HEADER = "hash_type,hash,label,action,source,added\n"


def photo(width: int = 96, seed: int = 0) -> MediaItem:
    return MediaItem("images", 0, fm.image_bytes("PNG", "RGB", width, 64 + seed))


def bank(name: str, rows: list[tuple[str, str, str]]) -> Bank:
    """rows: (hash_type, hash, action)."""
    entries = tuple(parse_entry({"hash_type": t, "hash": h, "label": f"{name}-{i}", "action": a, "source": "test",
                                 "added": ADDED}, Path(f"{name}.csv"), i + 2) for i, (t, h, a) in enumerate(rows))
    return Bank(BankFile(name, Path(f"{name}.csv"), f"version-of-{name}", entries))


def sha(item: MediaItem) -> str:
    return hashlib.sha256(item.data).hexdigest()


def test_act_and_review_decide_on_one_medium_whatever_else_the_request_holds():
    image, clip = photo(), MediaItem("audio", 0, b"RIFF not really a wav")
    banks = BankSet([bank("known", [("sha256", sha(clip), "review")])])
    verdict = banks.consult([image, clip])
    assert verdict.decides and verdict.action == "review" and verdict.shown.medium == "audio[0]"
    assert verdict.shown.to_wire() == {"bank": "known", "version": "version-of-known", "label": "known-0",
                                       "distance": 0, "action": "review", "medium": "audio[0]",
                                       "hash_type": "sha256", "source": "test", "line": 2}


def test_act_goes_before_review_before_pass_before_flag_then_the_nearest():
    image = photo()
    pdq = pdq_of_image(image).hex
    near = format(int(pdq, 16) ^ 0b111, "064x")        # three bits away
    banks = BankSet([bank("flags", [("sha256", sha(image), "flag")]),
                     bank("near", [("pdq", near, "review")]),
                     bank("exact", [("pdq", pdq, "review")])])
    verdict = banks.consult([image])
    assert [(m.match.bank, m.match.distance) for m in verdict.matches] == [("exact", 0), ("near", 3), ("flags", 0)]
    assert verdict.shown.match.bank == "exact" and verdict.decides
    assert BankSet([bank("a", [("pdq", near, "act")]), bank("b", [("pdq", pdq, "review")])]).consult(
        [image]).action == "act"


def test_pass_decides_only_when_every_medium_passed_and_flag_never_decides():
    image, other = photo(seed=0), MediaItem("images", 1, fm.image_bytes("PNG", "RGB", 80, 90))
    one = BankSet([bank("good", [("sha256", sha(image), "pass")])])
    partial = one.consult([image, other])
    assert partial.action == "pass" and not partial.decides        # the other photo is unknown: the model answers
    both = BankSet([bank("good", [("sha256", sha(image), "pass"), ("sha256", sha(other), "pass")])])
    assert both.consult([image, other]).decides
    flagged = BankSet([bank("watch", [("sha256", sha(image), "flag")])]).consult([image])
    assert flagged.action == "flag" and not flagged.decides
    assert BankSet([bank("good", [])]).consult([image]).shown is None


def test_a_photo_that_cannot_be_hashed_is_counted_and_its_bytes_still_looked_up():
    broken = MediaItem("images", 0, fm.image_bytes("PNG", "RGB", 64, 64)[:60])
    verdict = BankSet([bank("known", [("sha256", sha(broken), "review"), ("pdq", "0" * 64, "flag")])]).consult([broken])
    assert verdict.hash_failures == ("images[0]",) and verdict.decides and verdict.shown.hash_type == "sha256"
    # an exact copy of an `act` entry: nothing could outrank it, so nothing is decoded (no failure to count)
    acted = BankSet([bank("known", [("sha256", sha(broken), "act"), ("pdq", "0" * 64, "flag")])]).consult([broken])
    assert acted.hash_failures == () and acted.decides and acted.shown.hash_type == "sha256"
    assert BankSet([bank("pdq", [("pdq", "0" * 64, "flag")])]).consult([broken]).hash_failures == ("images[0]",)
    assert BankSet([bank("none", [])]).consult([broken]).hash_failures == ()     # no PDQ entries: nothing decoded


def test_a_photos_act_match_is_answered_without_waiting_for_a_video_still_hashing():
    image, video = photo(), MediaItem("videos", 0, b"a video whose hash is still being computed")
    pdq = pdq_of_image(image).hex
    released, finished = threading.Event(), threading.Event()

    def slow_video(item, limits, cancelled=None):
        released.wait(30)
        finished.set()
        return [SimpleNamespace(quality=100, hex="f" * 64)]

    try:
        acted = BankSet([bank("known", [("pdq", pdq, "act"), ("vpdq", f"0,100,{'0' * 64},0.000", "flag")])],
                        slow_video).consult([video, image])          # the video first in the request
        assert acted.decides and acted.shown.medium == "images[0]" and acted.action == "act"
        assert not finished.is_set()             # answered while the video's hash was still being computed
    finally:
        released.set()
    reviewed = BankSet([bank("known", [("pdq", pdq, "review"), ("vpdq", f"0,100,{'f' * 64},0.000", "act")])],
                       lambda item, limits, cancelled=None: [SimpleNamespace(quality=100, hex="f" * 64)]).consult([image, video])
    assert [m.medium for m in reviewed.matches] == ["videos[0]", "images[0]"]     # no act on the photo: all matched
    assert reviewed.action == "act"


def test_the_shelf_reloads_all_or_nothing(tmp_path):
    image = photo()
    first, second = tmp_path / "first.csv", tmp_path / "second.csv"
    first.write_text(HEADER + f"sha256,{sha(image)},known,act,test,{ADDED}\n")
    second.write_text(HEADER)
    shelf = BankShelf([first, second], {"second": 20})
    before = shelf.current
    assert [b["pdq_threshold"] for b in shelf.described()] == [31, 20] and before.consult([image]).decides
    first.write_text(HEADER)                                       # the entry removed
    second.write_text(HEADER + "pdq,abc,bad,act,test,2026-12-04T10:00:00+00:00\n")   # and a bad line beside
    with pytest.raises(BankError, match=r"second.csv: line 2: hash"):
        shelf.reload()
    assert shelf.current is before and shelf.reloads == 0          # neither file's new state went in
    second.write_text(HEADER)
    shelf.reload()
    assert not shelf.current.consult([image]).decides and shelf.reloads == 1
    assert shelf.current.named()[0] == {"name": "first", "version": hashlib.sha256(first.read_bytes()).hexdigest()}
    with pytest.raises(BankError, match="two banks are named 'first'"):
        BankShelf([first, tmp_path / "other" / "first.csv"])
    with pytest.raises(BankError, match="names the bank 'third'"):
        BankShelf([first], {"third": 3})


QUESTIONS = (Question("harmful", "noul", (Option("true", None), Option("false", None))),)
POLICY = """version = "p1"
[questions.harmful]
auto_at = 0.9
act_on = [true]
"""


def test_a_bank_answer_has_no_forward_and_says_so_and_its_outcome_is_the_action():
    image = photo()
    request = DecisionRequest(state="upload", questions=QUESTIONS, media=(image,), request_id="r1", audit=True)
    banks = BankSet([bank("known", [("sha256", sha(image), "act")])])
    verdict = banks.consult(request.media)
    decision = answered_by_bank(request, verdict, "clef-omni", banks.named())
    wire = decision.to_wire()
    assert wire["answers"] == {} and wire["usage"] == {"input_tokens": 0, "output_tokens": 0}
    assert wire["x_match"]["action"] == "act" and wire["x_match"]["bank"] == "known"
    audit = wire["x_audit"]
    assert audit["model"]["source"] == NO_MODEL_SOURCE and audit["runtime"]["batch_size"] == 0
    assert audit["banks"] == [{"name": "known", "version": "version-of-known"}] and audit["match"] == wire["x_match"]
    assert audit["media"][0]["sha256"] == sha(image) and audit["media"][0]["type"] == "png"
    assert audit_from_wire(audit).match == wire["x_match"]        # it reads back
    no_policy = with_outcome(decision, request, None).to_wire()["x_outcome"]
    assert no_policy == {"overall": "act", "questions": {}, "policy": None, "by": "bank"}
    policy = parse_policy(POLICY.encode(), "policy.toml")
    ruled = with_outcome(decision, request, policy)
    assert ruled.to_wire()["x_outcome"]["policy"]["version"] == "p1" and ruled.audit.policy_sha256 == policy.sha256


def test_the_models_decision_carries_a_flag_and_names_the_banks_consulted():
    image = photo()
    banks = BankSet([bank("watch", [("sha256", sha(image), "flag")]), bank("other", [])])
    verdict = banks.consult([image])
    model = Decision("clef-omni", {"harmful": {"type": "noul", "noul": 0.02}}, Usage(100), timings_ms={"forward": 5.0})
    decision = with_match(model, verdict, banks.named())
    wire = decision.to_wire()
    assert wire["answers"] == model.answers and wire["x_match"]["action"] == "flag"
    assert decision.timings_ms["forward"] == 5.0 and "match" in decision.timings_ms
    request = DecisionRequest(state="upload", questions=QUESTIONS, media=(image,))
    outcome = with_outcome(decision, request, parse_policy(POLICY.encode(), "policy.toml")).outcome
    assert outcome is not None and outcome.overall == "pass" and outcome.match is None     # the model's outcome
    unmatched = with_match(model, BankSet([bank("other", [])]).consult([image]), ())
    assert "x_match" not in unmatched.to_wire()
