"""Adapters on `omni serve --ray` (Ray Serve's model multiplexing): two engine replicas, two adapters (one head-only,
one LoRA), at most one adapter resident per replica. Every answer for an adapter equals the same adapter served
in-process by a `DecisionEngine` (1e-5), base answers equal the base's; the `RemoteEngine` serves the same model names
and refuses an unknown one naming them; a call for an adapter runs under Ray's multiplexed model id on a replica where
that adapter is then resident (and the one it evicted is unloaded there), and once Ray knows where each adapter lives,
each adapter's requests keep going to its replica.
"""
from __future__ import annotations

import dataclasses
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.cluster.conftest import require_ray, run_async

require_ray()

from ray import serve

from api.cluster.deployments import APP_NAME, ENGINE
from api.cluster.remote import RemoteEngine, ReplicaAnswer
from api.http.settings import Settings
from omni.contract.config import EngineConfig
from omni.contract.errors import UnknownModel
from omni.contract.request import parse_request
from omni.serve.engine import DecisionEngine
from tests.integration.serve.adapter_fixtures import make_adapter

TOL = 1e-5
QUESTIONS = {"visible": {"type": "noul", "instructions": "Is the label visible?"},
             "next": {"type": "choice", "instructions": "What next?",
                      "criteria": {"ship": None, "rework": "Fix it", "scrap": None}},
             "severity": {"type": "score", "criteria": ["none", "minor", "major"]}}
STATES = ["Unit 7 on the bench.", "Unit 8: scratched casing, label torn."]
MODES = {"h1": "head", "l1": "lora"}


@pytest.fixture(scope="module")
def adapter_pairs(tiny_dir, tmp_path_factory) -> tuple[tuple[str, str], ...]:
    from omni.model.clef import ClefModel

    base = ClefModel.load(tiny_dir)
    root = tmp_path_factory.mktemp("ray-adapters")
    return tuple((name, str(make_adapter(base, root / name, seed, mode)))
                 for seed, (name, mode) in enumerate(MODES.items(), start=1))


@pytest.fixture(scope="module")
def local(tiny_dir, adapter_pairs) -> DecisionEngine:
    """The reference: the same adapters served in-process."""
    return DecisionEngine(EngineConfig(model_path=str(tiny_dir), probability_decimals=8, adapters=adapter_pairs,
                                       max_adapters=1)).load()


@pytest.fixture(scope="module")
def handle(ray_instance, tiny_dir, adapter_pairs):
    """`omni serve --ray`'s application (gateway, engine deployment, router) with the adapters; the engine's handle."""
    from api.cluster.launch import deploy

    settings = Settings().with_values({"model": str(tiny_dir), "port": ray_instance, "replicas": 2,
                                       "torch_threads": 1, "probability_decimals": 8, "replica_load_retries": 1,
                                       "adapters": adapter_pairs, "max_adapters": 1})
    deploy(settings)
    yield serve.get_deployment_handle(ENGINE, app_name=APP_NAME)
    serve.delete(APP_NAME)


@pytest.fixture(scope="module")
def remote(handle) -> RemoteEngine:
    """The gateway's engine, over the same handle (started on a thread without an event loop, as the gateway)."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: RemoteEngine(handle).start()).result(timeout=300)


def request(engine_, state: str, model: str | None):
    body = {"state": state, "questions": QUESTIONS, **({"model": model} if model else {})}
    return parse_request(body, EngineConfig(probability_decimals=8), adapters=engine_.model_names())


def numbers(answers: dict) -> dict[str, float]:
    out = {}
    for qid, answer in answers.items():
        out.update({f"{qid}:{k}": v for k, v in answer.items() if isinstance(v, float)})
        out.update({f"{qid}:p:{k}": v for k, v in answer.get("probabilities", {}).items()})
    return out


def call(handle, model: str | None, state: str = STATES[0]) -> ReplicaAnswer:
    """One call as the gateway makes it for `model` (with its multiplexed id when it is an adapter)."""
    names = ["clef-omni", *MODES]
    decision_request = parse_request({"state": state, "questions": QUESTIONS, **({"model": model} if model else {})},
                             EngineConfig(probability_decimals=8), adapters=names)
    routed = handle.options(multiplexed_model_id=model) if model else handle

    async def go() -> ReplicaAnswer:
        return await routed.decide.remote(decision_request, None)
    return run_async(go())


def test_the_remote_engine_serves_the_same_model_names_and_refuses_an_unknown_one(remote, local):
    names = local.model_names()                        # the base's name and aliases, then the adapters'
    assert remote.model_names() == names and names[0] == "clef-omni" and names[-2:] == ["h1", "l1"]
    with pytest.raises(UnknownModel) as refused:
        remote.submit(dataclasses.replace(request(local, STATES[0], None), model="nope"))
    assert refused.value.served == tuple(names)


def test_every_answer_equals_the_same_adapter_served_in_process(remote, local):
    pairs = [(model, state) for state in STATES for model in (None, "h1", "l1")] * 2     # twice: loads and evictions
    got = remote.decide_batch([request(local, state, model) for model, state in pairs])
    want = {(model, state): local.decide(request(local, state, model)) for model, state in set(pairs)}
    for (model, state), decision in zip(pairs, got, strict=True):
        expected, actual = numbers(want[model, state].answers), numbers(decision.answers)
        assert decision.model == want[model, state].model == (model or "clef-omni")
        assert expected.keys() == actual.keys()
        for key, value in expected.items():
            assert actual[key] == pytest.approx(value, abs=TOL), (model, state, key)
    for state in STATES:                        # and the three models do answer differently
        answers = [numbers(want[model, state].answers) for model in (None, "h1", "l1")]
        for i, j in ((0, 1), (0, 2), (1, 2)):
            assert max(abs(answers[i][k] - answers[j][k]) for k in answers[i]) > 1e-3


def test_an_adapter_call_runs_under_its_model_id_where_it_is_then_resident(handle):
    base = call(handle, None)
    assert base.error is None and base.snapshot.multiplexed_model_id == ""
    for name in MODES:
        answer = call(handle, name)
        assert answer.error is None and answer.decision is not None and answer.decision.model == name
        assert answer.snapshot.multiplexed_model_id == name
        assert answer.snapshot.adapters == (name,)      # max_adapters 1: the adapter it evicted was unloaded there


def test_once_ray_knows_where_each_adapter_lives_its_requests_keep_going_there(handle):
    """Rounds of (h1, l1) until each adapter has answered from one replica three rounds running, the two on
    different replicas (Ray learns where models are resident asynchronously); then every request for each goes to
    its replica and finds it resident there."""
    history: list[tuple[str, str]] = []
    homes: dict[str, str] = {}
    for _ in range(40):
        history.append(tuple(call(handle, name).snapshot.replica for name in MODES))  # type: ignore[arg-type]
        last = history[-3:]
        if len(last) == 3 and len(set(last)) == 1 and len(set(last[0])) == 2:
            homes = dict(zip(MODES, last[0], strict=True))
            break
        time.sleep(0.5)
    assert homes, f"the adapters never settled on one replica each: {history}"
    for _ in range(3):
        for name, home in homes.items():
            answer = call(handle, name, STATES[1])
            assert answer.snapshot.replica == home and answer.snapshot.adapters == (name,)
