"""RemoteEngine (api/cluster/remote.py) against a stand-in deployment handle (no Ray instance): the engine's typed
errors come back whole and map to the very payloads `omni serve` sends; a replica that dies under a call is tried
once more, then 503; Ray's backpressure is a 429; /metrics sums the replicas' counters."""
from __future__ import annotations

import pickle

import pytest

from tests.cluster.conftest import require_ray, run_async

require_ray()

from ray.exceptions import ActorDiedError
from ray.serve.exceptions import BackPressureError

from api.cluster.remote import FRESH_S, RemoteEngine, ReplicaAnswer, ReplicaSnapshot
from api.http.errors import error_payload
from omni.contract.errors import ContextTooLong, InvalidRequest, NotReady, Overloaded
from omni.contract.types import Decision, DecisionRequest, Option, Question, Usage
from omni.model.cache import CacheStats
from omni.serve.batcher import BatcherStats
from preprocess.errors import CorruptMedia
from preprocess.item import MediaItem

REQUEST = DecisionRequest(state="s", questions=(Question("a", "noul", (Option("true", None), Option("false", None))),),
                          request_id="r-1")
DECISION = Decision(model="clef-omni", answers={"a": {"type": "noul", "noul": 0.5}}, usage=Usage(10))


class _Method:
    def __init__(self, outcomes):
        self.outcomes = list(outcomes)
        self.calls = []

    def remote(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        outcome = self.outcomes.pop(0)

        async def answer():
            if isinstance(outcome, BaseException):
                raise outcome
            return pickle.loads(pickle.dumps(outcome))      # what crosses the process boundary
        return answer()


class FakeHandle:
    def __init__(self, *outcomes):
        self.decide = _Method(outcomes)


def snapshot(replica="r1", hits=1, queue=0, bytes_=100):
    return ReplicaSnapshot(replica, {"prefix": CacheStats(hits=hits, misses=2, entries=1, bytes=bytes_, budget_bytes=1000)},
                           BatcherStats(submitted=3, queue_depth=queue, batch_sizes={1: 2, 4: 1}),
                           {"in_flight": queue, "refused": 1})


def engine_with(*outcomes) -> tuple[RemoteEngine, FakeHandle]:
    handle = FakeHandle(*outcomes)
    engine = RemoteEngine(handle)
    engine._info, engine._ready = {"name": "clef-omni"}, True
    return engine, handle


def decide(engine: RemoteEngine):
    async def run():
        return await engine.submit(REQUEST, deadline_s=5.0)
    return run_async(run())


def test_a_decision_comes_back_with_its_affinity_key_sent():
    engine, handle = engine_with(ReplicaAnswer(DECISION, None, snapshot()))
    assert decide(engine) == DECISION
    (args, kwargs), = handle.decide.calls
    assert args == (REQUEST, 5.0) and len(kwargs["affinity"]) == 64
    assert engine.in_flight == 0


ITEM = MediaItem("images", 1, b"\x89PNG...", "image/png", "--image broken.png")


@pytest.mark.parametrize("error", [
    InvalidRequest.one(("questions", "a"), "bad question"),
    ContextTooLong(("state",), "too long", needed_tokens=70000, max_tokens=64000),
    Overloaded("engine queue full", retry_after_s=3.0),
    CorruptMedia(ITEM, "the image is truncated", raw="OSError: errno 5 in libpng"),
], ids=lambda e: type(e).__name__)
def test_the_engines_errors_come_back_whole_and_map_to_the_same_payload(error):
    engine, _ = engine_with(ReplicaAnswer(None, error, snapshot()))
    with pytest.raises(type(error)) as raised:
        decide(engine)
    assert error_payload(raised.value, "rid") == error_payload(error, "rid")
    assert raised.value.__dict__.keys() == error.__dict__.keys()


def test_a_replica_that_dies_under_a_call_is_tried_once_more_then_503():
    engine, handle = engine_with(ActorDiedError(), ReplicaAnswer(DECISION, None, snapshot()))
    assert decide(engine) == DECISION and len(handle.decide.calls) == 2
    engine, _ = engine_with(ActorDiedError(), ActorDiedError())
    with pytest.raises(NotReady) as raised:
        decide(engine)
    status, body, headers = error_payload(raised.value, "rid")
    assert status == 503 and headers["Retry-After"] and "went away" in body["detail"]["message"]


def test_rays_backpressure_is_a_429():
    engine, _ = engine_with(BackPressureError(num_queued_requests=256, max_queued_requests=256))
    with pytest.raises(Overloaded):
        decide(engine)


def test_nothing_is_sent_before_a_replica_is_ready():
    engine = RemoteEngine(FakeHandle())
    with pytest.raises(NotReady):
        engine.submit(REQUEST)
    with pytest.raises(NotReady):
        _ = engine.info


def test_metrics_sum_the_replicas_and_gauges_forget_the_silent_ones():
    engine, _ = engine_with(*(ReplicaAnswer(DECISION, None, s) for s in (snapshot("r1", 1, 2, 100),
                                                                         snapshot("r2", 5, 3, 300))))
    decide(engine), decide(engine)
    prefix = engine.cache_stats()["prefix"]
    assert (prefix.hits, prefix.misses, prefix.bytes, prefix.budget_bytes, prefix.entries) == (6, 4, 400, 2000, 2)
    batcher = engine.batcher_stats()
    assert (batcher.submitted, batcher.queue_depth, batcher.batch_sizes) == (6, 5, {1: 4, 4: 2})
    assert engine.long_prefills() == {"in_flight": 5, "refused": 2}
    engine._snapshots["r2"].at -= FRESH_S + 1          # r2 went silent (gone, or idle for a minute)
    prefix = engine.cache_stats()["prefix"]
    assert (prefix.hits, prefix.bytes, prefix.entries) == (6, 100, 1)     # counters stay, gauges forget it
    assert engine.batcher_stats().queue_depth == 2 and engine.long_prefills() == {"in_flight": 2, "refused": 2}
