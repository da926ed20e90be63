"""Cache affinity (api/cluster/affinity.py): keys follow the content the caches are keyed by, every router agrees on a
key's home, few keys move when replicas come and go, and a busy home gives way to the least loaded replica."""
from __future__ import annotations

from collections import Counter

import pytest

from api.cluster.affinity import affinity_key, home_replica, rank_replicas
from omni.contract.types import DecisionRequest, Option, Question
from preprocess.item import MediaItem

Q1 = (Question("a", "noul", (Option("true", None), Option("false", None))),)
Q2 = (Question("b", "choice", (Option("x", None), Option("y", None))),)


def req(state="s", media=(), questions=Q1) -> DecisionRequest:
    return DecisionRequest(state=state, questions=questions, media=tuple(media))


def img(data: bytes, index=0, origin=None) -> MediaItem:
    return MediaItem("images", index, data, "image/png", origin)


def test_media_decide_the_key_whatever_the_state_questions_or_how_they_were_sent():
    photo = img(b"\x89PNG-one")
    key = affinity_key(req("first state", [photo]))
    assert affinity_key(req("another state", [img(b"\x89PNG-one", origin="--image a.png")], Q2)) == key
    assert affinity_key(req("first state", [img(b"\x89PNG-two")])) != key
    # the same bytes in another slot are another prompt
    assert affinity_key(req("s", [MediaItem("audio", 0, b"\x89PNG-one", None)])) != key


def test_without_media_the_state_decides_the_key():
    assert affinity_key(req("state one")) == affinity_key(req("state one", questions=Q2))
    assert affinity_key(req("state one")) != affinity_key(req("state two"))
    assert affinity_key(req({"b": 1, "a": [2]})) == affinity_key(req({"a": [2], "b": 1}))
    assert affinity_key(req("\ud800 lone surrogate")) != affinity_key(req(""))   # never raises on odd text


def test_every_router_agrees_on_a_home_and_few_keys_move_when_a_replica_joins():
    keys = [f"{i:064x}" for i in range(3000)]
    three = ["r1", "r2", "r3"]
    homes = {k: home_replica(k, three) for k in keys}
    assert homes == {k: home_replica(k, list(reversed(three))) for k in keys}     # order of the list is irrelevant
    spread = Counter(homes.values())
    assert min(spread.values()) > 0.8 * len(keys) / 3                              # balanced
    four = {k: home_replica(k, three + ["r4"]) for k in keys}
    moved = [k for k in keys if four[k] != homes[k]]
    assert all(four[k] == "r4" for k in moved)                                     # only to the newcomer
    assert 0.15 < len(moved) / len(keys) < 0.35                                    # about a quarter
    two = {k: home_replica(k, ["r1", "r3"]) for k in keys}
    assert all(two[k] == homes[k] for k in keys if homes[k] != "r2")               # a leaver moves only its own


def test_the_home_goes_first_then_the_least_loaded():
    key = "k" * 64
    home = home_replica(key, ["a", "b", "c"])
    others = sorted({"a", "b", "c"} - {home})
    loads = {home: 3, others[0]: 1, others[1]: 0}
    assert rank_replicas(key, loads, slack_requests=8) == [[home], [others[1], others[0]]]
    assert rank_replicas(key, {home: None, others[0]: None, others[1]: None}, 8)[0] == [home]


def test_a_busy_home_gives_way_to_the_least_loaded():
    key = "k" * 64
    home = home_replica(key, ["a", "b"])
    other = "b" if home == "a" else "a"
    assert rank_replicas(key, {home: 8, other: 0}, slack_requests=8) == [[home], [other]]       # within the slack
    assert rank_replicas(key, {home: 9, other: 0}, slack_requests=8) == [[other, home]]          # past it
    assert rank_replicas(key, {home: 9, other: 0}, slack_requests=0) == [[other, home]]


@pytest.mark.parametrize("loads", [{"a": 2, "b": 0, "c": 1}, {"a": None, "b": 5, "c": 0}])
def test_without_a_key_least_loaded_first(loads):
    ranked = rank_replicas(None, loads, slack_requests=8)
    assert len(ranked) == 1 and sorted(ranked[0]) == sorted(loads)
    assert [loads[r] or 0 for r in ranked[0]] == sorted(loads[r] or 0 for r in loads)


def test_no_replicas_no_ranking_one_replica_is_its_own_home():
    assert rank_replicas("k", {}, 8) == []
    assert rank_replicas("k", {"only": 50}, 8) == [["only"]]
