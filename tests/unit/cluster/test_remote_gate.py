"""`RemoteEngine.submit(request, gate=...)` (Ray): a replica decodes and answers in one call, so a gated request is
sent only once its gate ends True; a gate that ends otherwise drops it (`Withdrawn`) and nothing is sent. No Ray
here: the replica call is replaced."""
from __future__ import annotations

import asyncio
from concurrent.futures import Future

import pytest

from api.cluster.remote import RemoteEngine
from omni.contract.errors import Withdrawn
from tests.threads import asyncio_run  # not asyncio.run: a worker that ran a browser test has a loop running

pytestmark = pytest.mark.unit


def engine(sent: list) -> RemoteEngine:
    remote = RemoteEngine(handle=None)  # type: ignore[arg-type]
    remote._ready = True
    remote._route = lambda request: None                     # type: ignore[method-assign]

    async def call(request, deadline_s):
        sent.append(request)
        return "decision"

    remote._call = call                                      # type: ignore[method-assign]
    return remote


@pytest.mark.parametrize(("close", "answered"), [(lambda gate: gate.set_result(True), True),
                                                 (lambda gate: gate.set_result(False), False),
                                                 (lambda gate: gate.cancel(), False),
                                                 (lambda gate: gate.set_exception(RuntimeError("x")), False)])
def test_a_gated_request_is_sent_only_when_its_gate_opens(close, answered):
    sent: list = []

    async def scenario():
        gate: Future[bool] = Future()
        task = engine(sent).submit("request", gate=gate)       # type: ignore[arg-type]
        await asyncio.sleep(0.01)
        assert sent == [] and not task.done()                  # held at its gate
        close(gate)
        if answered:
            return await task
        with pytest.raises(Withdrawn):
            await task
        return None

    assert asyncio_run(scenario()) == ("decision" if answered else None)
    assert sent == (["request"] if answered else [])
