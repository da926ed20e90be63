"""The `ServingEngine` conformance suite: the same behaviour tests for every engine the HTTP app can be given.

A test module imports these tests (`from tests.conformance.serving_engine import *`) and defines one fixture,
`make_engine`: a callable that returns a new, started engine answering the tiny question set below (the local
`DecisionEngine` around the test `FakeModel` in tests/unit/serve, the `RemoteEngine` in front of real engine
replicas on a local Ray instance in tests/cluster). Every member of the surface is exercised here (the first test
holds the list against the Protocol), so a member added to one engine and forgotten in the other fails where the
other runs. Engine-agnostic on purpose: answers are checked for their shape and invariants, never their values.
"""
from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import pytest
from typing_extensions import get_protocol_members

from omni.contract.errors import NotReady, UnknownModel
from omni.contract.types import Decision, DecisionRequest, EvidenceAsk, Option, Question
from omni.model.cache import CacheStats
from omni.serve.batcher import BatcherStats
from omni.serve.surface import InputLimits, ModelCard, ServingEngine
from preprocess.errors import CorruptMedia
from preprocess.item import MediaItem

T = TypeVar("T")
YES_NO = (Option("true", None), Option("false", None))
QUESTIONS = (Question("ok", "noul", YES_NO, instructions="Is it fine?"),
             Question("team", "choice", (Option("billing", None), Option("tech", "bugs")), instructions="Who?"),
             Question("level", "score", (Option("0", "low"), Option("1", "mid"), Option("2", "high"))))
# bytes that sniff as PNG and do not decode: the real decoder fails on them, and so does the fake's (the suffix)
CORRUPT_PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 24 + b"CORRUPT"
EXERCISED = {"loaded", "ready", "load", "start", "stop", "info", "model_names", "submit", "decide", "decide_batch",
             "cache_stats", "batcher_stats", "long_prefills", "adapters", "shadow_stats"}


def request(state: str = "The fan rattles.", media: tuple[MediaItem, ...] = ()) -> DecisionRequest:
    return DecisionRequest(state=state, questions=QUESTIONS, media=media)


def corrupt_request() -> DecisionRequest:
    return request("A photo of the unit.", (MediaItem("images", 0, CORRUPT_PNG),))


def on_a_loop(coroutine: Callable[[], Awaitable[T]]) -> T:
    """Run `coroutine()` on an event loop of its own, on a thread of its own (as the HTTP app would await)."""
    async def main() -> T:
        return await coroutine()

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, main()).result(timeout=300)


def submitted(engine: ServingEngine, decision_request: DecisionRequest) -> Decision:
    """What the route does: submit on the loop, await the future."""
    async def call() -> Decision:
        return await asyncio.wrap_future(engine.submit(decision_request))   # a concurrent or an asyncio future

    return on_a_loop(call)


def check_answers(decision: Decision) -> None:
    assert list(decision.answers) == [q.id for q in QUESTIONS]
    for question in QUESTIONS:
        answer = decision.answers[question.id]
        assert answer["type"] == question.type
        if question.type == "noul":
            assert 0.0 <= answer["noul"] <= 1.0
        else:
            probabilities = answer["probabilities"]
            assert list(probabilities) == [o.id for o in question.options]
            assert math.isclose(sum(probabilities.values()), 1.0, abs_tol=1e-9)
    assert decision.usage.input_tokens > 0 and decision.usage.output_tokens == 0


@pytest.fixture
def engine(make_engine: Callable[[], ServingEngine]) -> ServingEngine:
    return make_engine()


def test_every_member_of_the_surface_is_exercised_here():
    assert get_protocol_members(ServingEngine) == EXERCISED


def test_it_is_a_started_serving_engine(engine):
    assert isinstance(engine, ServingEngine)
    assert engine.loaded and engine.ready
    assert engine.load() is engine and engine.start() is engine       # idempotent
    assert engine.ready


def test_info_is_the_model_card(engine):
    card: ModelCard = engine.info
    assert set(card) == set(ModelCard.__annotations__)
    assert isinstance(card["name"], str) and card["name"] and isinstance(card["tiny_default"], bool)
    assert card["context_tokens"] > 0 and card["release_date"]
    assert set(card["limits"]["inputs"]) == set(InputLimits.__annotations__)
    assert all(value > 0 for value in card["limits"]["inputs"].values())


def test_model_names_lead_with_the_card_name_and_an_unknown_model_is_refused_naming_them(engine):
    names = engine.model_names()
    assert names[0] == engine.info["name"] and len(set(names)) == len(names)
    with pytest.raises(UnknownModel) as refused:
        submitted(engine, dataclasses.replace(request(), model="no-such-model"))
    assert refused.value.requested == "no-such-model" and refused.value.served == tuple(names)


def test_without_adapters_the_registry_is_empty_or_absent_and_no_shadow_was_scored(engine):
    registry = engine.adapters            # in-process: the (empty) registry once loaded, or None; on Ray: None
    assert registry is None or registry.names() == []
    assert sum(engine.shadow_stats().values()) == 0


def test_decide_answers_every_question(engine):
    check_answers(engine.decide(request()))


def test_evidence_comes_back_only_when_asked(engine):
    plain = engine.decide(request())
    asked = engine.decide(dataclasses.replace(request(), evidence=EvidenceAsk()))
    assert plain.evidence is None and "x_evidence" not in plain.to_wire()
    assert asked.evidence is not None and asked.to_wire()["x_evidence"] == asked.evidence
    if asked.evidence["method"] != "fake":                 # the real model's (the fake has no attention)
        assert list(asked.evidence["questions"]) == [q.id for q in QUESTIONS]
        assert all(math.isclose(sum(q["share"].values()), 1.0, abs_tol=1e-5)
                   for q in asked.evidence["questions"].values())


def test_decide_batch_gives_what_decide_gives(engine):
    requests = [request("The fan rattles."), request("All quiet.")]
    batched = engine.decide_batch(requests)
    assert len(batched) == 2
    for one, decision in zip(requests, batched, strict=True):
        check_answers(decision)
        single = engine.decide(one)
        assert decision.usage == single.usage
        for question in QUESTIONS:
            got, want = decision.answers[question.id], single.answers[question.id]
            for key in ("noul", "probabilities"):
                if key in want:
                    assert got[key] == pytest.approx(want[key], abs=2e-4)   # batching changes float sums only


def test_submit_is_the_serving_path(engine):
    decision = submitted(engine, request())
    check_answers(decision)
    assert decision.timings_ms                                   # the stages the Server-Timing header shows
    assert decision.answers == engine.decide(request()).answers


def test_a_bad_input_is_the_engines_typed_error_on_every_path(engine):
    for path in (lambda: engine.decide(corrupt_request()), lambda: submitted(engine, corrupt_request()),
                 lambda: engine.decide_batch([corrupt_request()])):
        with pytest.raises(CorruptMedia) as caught:
            path()
        assert caught.value.item.loc == ("images", 0)
    check_answers(engine.decide(request()))                      # and the engine answers on


def test_metrics_are_counters_of_the_declared_shapes(engine):
    for state in ("first", "second"):     # the model thread records a batch after its answers: once the second is
        submitted(engine, request(state))   # answered, the first is counted
    caches = engine.cache_stats()
    assert all(isinstance(name, str) and isinstance(stats, CacheStats) for name, stats in caches.items())
    batcher = engine.batcher_stats()
    assert isinstance(batcher, BatcherStats) and batcher.submitted >= 2 and batcher.completed >= 1
    assert sum(batcher.batch_sizes.values()) >= 1
    longs = engine.long_prefills()
    assert set(longs) == {"in_flight", "refused"} and longs["in_flight"] >= 0 and longs["refused"] >= 0


def test_stop_refuses_new_work(make_engine):
    engine = make_engine()
    engine.stop(drain=True)
    assert not engine.ready
    with pytest.raises(NotReady):
        submitted(engine, request())
