"""Reviewer wellness (omni/review/wellness.py): shield rules and daily limits read and every bad entry named; which
items a rule shields; exposures counted once per medium, per reviewer and UTC day, refused past the limit, kept across
a restart (a torn last line skipped), a new day starting from zero; the settings refuse what cannot work."""
from __future__ import annotations

import pytest

from api.http.settings import SettingsError
from omni.review.wellness import (
    EXPOSURE_FILE,
    ExposureLimit,
    Limits,
    Wellness,
    WellnessSettingError,
    parse_limits,
    parse_shield,
)
from tests.unit.http.serving import settings_with

DAY = 1_796_000_000.0            # 2026-11-30 (UTC), some time in the day


def test_rules_shield_what_they_name():
    answers = {"violent": "true", "team": "billing"}
    assert parse_shield("all").holds("policy", None, {})
    assert parse_shield("outcome=act").holds("policy", "act", {}) and not parse_shield("outcome=act").holds("q", "pass", {})
    assert parse_shield("violent=true").holds("kept", None, answers)
    assert not parse_shield("violent=false").holds("kept", None, answers)
    assert parse_shield("policy:all").holds("policy", None, {}) and not parse_shield("policy:all").holds("qa", None, {})
    assert parse_shield("qa:team=billing").holds("qa", None, answers)
    for bad in ("", "outcome=maybe", "violent", "=true", "policy:"):
        with pytest.raises(WellnessSettingError, match="review_shield"):
            parse_shield(bad)


def test_limits_the_reviewers_own_then_the_queues_then_everyones():
    limits = parse_limits(["10", "queue:policy=5", "reviewer:alice=2"])
    assert limits == Limits(10, (("policy", 5),), (("alice", 2),))
    assert (limits.for_("alice", "policy"), limits.for_("bob", "policy"), limits.for_("bob", "qa")) == (2, 5, 10)
    assert parse_limits([]).for_("anyone", "any") is None
    for bad in ("-1", "ten", "team:x=1", "queue:=3", "reviewer:bob=x"):
        with pytest.raises(WellnessSettingError, match="review_daily_limit"):
            parse_limits([bad])


def test_exposures_are_counted_once_refused_past_the_limit_and_kept(tmp_path):
    now = [DAY]
    wellness = Wellness(["all"], ["2"], tmp_path, clock=lambda: now[0])
    assert wellness.reveal("alice", "policy", "d-1", 0) == {"today": 1, "limit": 2}
    assert wellness.reveal("alice", "policy", "d-1", 0) == {"today": 1, "limit": 2}      # the same medium: once
    assert wellness.reveal("alice", "policy", "d-1", 1) == {"today": 2, "limit": 2}
    assert wellness.at_limit("alice", "policy") and not wellness.at_limit("bob", "policy")
    with pytest.raises(ExposureLimit, match="alice revealed 2 shielded media today, the daily limit is 2"):
        wellness.reveal("alice", "policy", "d-2", 0)
    assert wellness.reveal("alice", "policy", "d-1", 1)["today"] == 2    # one seen already is shown again
    with (tmp_path / EXPOSURE_FILE).open("a") as torn:
        torn.write('{"reviewer": "alice", "day"')                          # a crash mid-write
    again = Wellness(["all"], ["2"], tmp_path, clock=lambda: now[0])
    assert again.exposure("alice", "policy") == {"today": 2, "limit": 2} and again.revealed("alice", "d-1", 1)
    now[0] += 86400                                                      # the next UTC day
    assert again.exposure("alice", "policy")["today"] == 0 and again.reveal("alice", "policy", "d-2", 0)["today"] == 1


def test_settings_refuse_what_cannot_work(tmp_path):
    with pytest.raises(SettingsError, match="need review_dir"):
        settings_with(review_shield=("all",))
    with pytest.raises(SettingsError, match="review_shield 'outcome=never'"):
        settings_with(review_dir=str(tmp_path), review_shield=("outcome=never",))
    with pytest.raises(SettingsError, match="review_daily_limit 'x'"):
        settings_with(review_dir=str(tmp_path), review_daily_limit=("x",))
