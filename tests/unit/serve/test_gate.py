"""`DecisionEngine.submit(request, gate=...)`: a gated request's media are decoded at once, and it waits before the
forward pass until its gate ends — True: answered as any other; False, cancelled or failed: dropped (`Withdrawn`),
no forward pass, its place given back; a gate closed before the decode skips the decode too; requests without a
gate are answered meanwhile (the batcher does not wait for one held at its gate). The FakeModel stands behind the
real engine; nothing here is timed."""
from __future__ import annotations

from concurrent.futures import Future

import pytest

from omni.contract.config import EngineConfig
from omni.contract.errors import Withdrawn
from omni.contract.types import DecisionRequest, Option, Question
from omni.serve.engine import DecisionEngine
from preprocess.item import MediaItem
from tests.unit.fake_model import FakeModel
from tests.unit.http.serving import wait_until

pytestmark = pytest.mark.unit
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def request(state: str = "unit 7") -> DecisionRequest:
    return DecisionRequest(state=state, questions=(Question("ok", "noul", (Option("true", None), Option("false", None))),),
                           media=(MediaItem("images", 0, PNG),))


@pytest.fixture
def engine():
    config = EngineConfig(max_batch_records=4)
    started = DecisionEngine(config, FakeModel(config)).start()
    yield started
    started.stop()


def in_flight(engine: DecisionEngine) -> int:
    return engine._in_flight


def test_a_gated_request_is_decoded_at_once_and_forwarded_only_once_its_gate_opens(engine):
    model, gate = engine.model, Future()
    future = engine.submit(request("gated"), gate=gate)
    wait_until(lambda: any(seen.state == "gated" for seen in model.seen), what="the gated request decoded")
    other = engine.submit(request("ungated")).result(timeout=20)        # answered while the other one waits
    assert set(other.answers) == {"ok"} and not future.done() and model.forwards_started == 1
    gate.set_result(True)
    assert set(future.result(timeout=20).answers) == {"ok"} and model.forwards_started == 2
    wait_until(lambda: in_flight(engine) == 0, what="both released")


@pytest.mark.parametrize("close", [lambda gate: gate.set_result(False), lambda gate: gate.cancel(),
                                   lambda gate: gate.set_exception(RuntimeError("the banks failed"))])
def test_a_closed_gate_drops_the_request_without_a_forward_pass(engine, close):
    model, gate = engine.model, Future()
    future = engine.submit(request("gated"), gate=gate)
    wait_until(lambda: any(seen.state == "gated" for seen in model.seen), what="the gated request decoded")
    close(gate)
    with pytest.raises(Withdrawn):
        future.result(timeout=20)
    assert model.forwards_started == 0
    wait_until(lambda: in_flight(engine) == 0, what="its place given back")


def test_a_gate_closed_before_the_decode_skips_the_decode(engine):
    model, gate = engine.model, Future()
    gate.set_result(False)
    with pytest.raises(Withdrawn, match="before its media were decoded"):
        engine.submit(request("closed early"), gate=gate).result(timeout=20)
    assert not any(seen.state == "closed early" for seen in model.seen) and model.forwards_started == 0
    opened = Future()
    opened.set_result(True)                                              # already open: straight through
    assert set(engine.submit(request("open"), gate=opened).result(timeout=20).answers) == {"ok"}


def test_a_gate_that_opens_after_the_deadline_gives_deadline_exceeded(engine):
    import time

    from omni.contract.errors import DeadlineExceeded

    model, gate = engine.model, Future()
    future = engine.submit(request("late"), deadline_s=0.05, gate=gate)
    wait_until(lambda: any(seen.state == "late" for seen in model.seen), what="decoded")
    time.sleep(0.1)                                                      # past its deadline, still at its gate
    gate.set_result(True)
    with pytest.raises(DeadlineExceeded, match="waited for the hash banks"):
        future.result(timeout=20)
    assert model.forwards_started == 0
