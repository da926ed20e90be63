"""Adapters served beside the base (tiny checkpoint, float32): every answer equals the same adapter merged into a
fresh base and served alone (1e-5), whatever its batch-mates' adapters; prefixes are shared by the base and head-only
adapters and never by two LoRA adapters; a request keeps its adapter version through a reload; the registry refuses
bad folders, wrong bases, bad names and busy unloads, and evicts the least recently used idle adapter."""
from __future__ import annotations

import json
import shutil
import threading

import pytest

from omni.contract.config import EngineConfig
from omni.contract.errors import AdapterBusy, AdapterError, UnknownModel
from omni.contract.request import parse_request
from omni.serve.engine import DecisionEngine
from tests.integration.serve.adapter_fixtures import make_adapter, merged

TOL = 1e-5
QUESTIONS = {"visible": {"type": "noul", "instructions": "Is the label visible?"},
             "next": {"type": "choice", "instructions": "What next?", "criteria": {"ship": None, "rework": "Fix it",
                                                                                  "scrap": None}},
             "severity": {"type": "score", "criteria": ["none", "minor", "major"]}}
STATES = ["Unit 7 on the bench.", "Unit 8: scratched casing, label torn.", "Unit 9 hums loudly."]
NAMES = ("h1", "h2", "l1", "l2")


@pytest.fixture(scope="module")
def adapters(tiny_dir, tmp_path_factory):
    from omni.model.clef import ClefModel

    base = ClefModel.load(tiny_dir)
    root = tmp_path_factory.mktemp("adapters")
    for seed, name in enumerate(NAMES, start=1):
        make_adapter(base, root / name, seed, "lora" if name.startswith("l") else "head")
    return root


def engine(tiny_dir, **config) -> DecisionEngine:
    return DecisionEngine(EngineConfig(model_path=str(tiny_dir), probability_decimals=8, **config)).load()


@pytest.fixture(scope="module")
def served(tiny_dir, adapters):
    return engine(tiny_dir, adapters_dir=str(adapters))


@pytest.fixture(scope="module")
def references(tiny_dir, adapters):
    """Per model name: the answers of its merged copy served alone, per state."""
    from omni.model.clef import ClefModel

    out = {}
    for name in (None, *NAMES):
        model = ClefModel.load(tiny_dir) if name is None else merged(tiny_dir, adapters / name)
        alone = DecisionEngine(EngineConfig(model_path=str(tiny_dir), probability_decimals=8), model=model).load()
        out[name] = [alone.decide(parse_request(body(state), alone.config)).answers for state in STATES]
    return out


def body(state: str, model: str | None = None) -> dict:
    return {"state": state, "questions": QUESTIONS, **({"model": model} if model else {})}


def requests(engine_: DecisionEngine, pairs):
    names = engine_.selector.model_names()
    return [parse_request(body(STATES[s], m), engine_.config, adapters=names) for m, s in pairs]


def floats(answer: dict) -> dict:
    """Every number of a wire answer: the noul / score value, confidence and each option's probability."""
    out = {k: v for k, v in answer.items() if isinstance(v, float)}
    out.update({f"p:{k}": v for k, v in answer.get("probabilities", {}).items()})
    return out


def assert_close(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for qid, answer in want.items():
        expected = floats(answer)
        assert expected and floats(got[qid]).keys() == expected.keys()
        for key, value in expected.items():
            assert floats(got[qid])[key] == pytest.approx(value, abs=TOL), (qid, key)


def test_the_adapters_differ_from_the_base(references):
    for name in NAMES:
        assert references[name][0] != references[None][0], name


@pytest.mark.parametrize("cache_mb", [0.0, 1024.0])
def test_one_mixed_batch_equals_each_adapter_merged_and_alone(tiny_dir, adapters, references, cache_mb):
    served_ = engine(tiny_dir, adapters_dir=str(adapters), prefix_cache_mb=cache_mb)
    pairs = [(m, s) for s in range(len(STATES)) for m in (None, *NAMES)]
    for _ in range(2):                                   # second round: every prefix cached (when the cache is on)
        decisions = served_.decide_batch(requests(served_, pairs))
        for (name, state), decision in zip(pairs, decisions, strict=True):
            assert decision.model == (name or "clef-omni")
            assert_close(decision.answers, references[name][state])


def test_prefixes_are_shared_by_head_only_adapters_and_never_by_lora_ones(tiny_dir, adapters, references):
    served_ = engine(tiny_dir, adapters_dir=str(adapters))
    order = [None, "h1", "h2", "l1", "l2", "l1", None]
    outcomes = []
    for name in order:
        decision = served_.decide_batch(requests(served_, [(name, 1)]))[0]
        assert_close(decision.answers, references[name][1])
        outcomes.append(decision.cache.get("prefix"))
    # the base computes it; head-only adapters reuse it; each LoRA adapter computes its own, then reuses it
    assert outcomes == ["miss", "hit", "hit", "miss", "miss", "hit", "hit"]


def test_serving_path_mixed_concurrent_requests(tiny_dir, adapters, references):
    served_ = DecisionEngine(EngineConfig(model_path=str(tiny_dir), probability_decimals=8, adapters_dir=str(adapters),
                                          max_wait_ms=50)).start()
    try:
        pairs = [(m, s) for s in range(len(STATES)) for m in (None, *NAMES)] * 2
        futures = [served_.submit(r) for r in requests(served_, pairs)]
        decisions = [f.result(timeout=120) for f in futures]
    finally:
        served_.stop()
    assert max(d.batch_size for d in decisions) > 1                # they did share forwards
    for (name, state), decision in zip(pairs, decisions, strict=True):
        assert_close(decision.answers, references[name][state])


def test_audit_names_the_adapter(served):
    decision = served.decide(requests(served, [("l1", 0)])[0].__class__(**{
        **requests(served, [("l1", 0)])[0].__dict__, "audit": True}))
    adapter = decision.audit.model.adapter
    assert adapter["name"] == "l1" and adapter["mode"] == "lora" and len(adapter["sha256"]) == 64
    assert decision.audit.model.id == "l1"
    assert "adapter" not in served.decide(requests(served, [(None, 0)])[0]).to_wire().get("x_audit", {}).get("model",
                                                                                                           {})


def test_unknown_model_names_every_model_served(served):
    with pytest.raises(UnknownModel) as caught:
        parse_request(body(STATES[0], "nope"), served.config, adapters=served.selector.model_names())
    assert all(name in str(caught.value) for name in ("clef-omni", *NAMES))


def test_head_only_shadow_is_scored_from_the_same_forward(tiny_dir, adapters, references):
    served_ = engine(tiny_dir, adapters_dir=str(adapters), shadows=(("clef-omni", "h2"),))
    decision = served_.decide_batch(requests(served_, [(None, 2)]))[0]
    assert_close(decision.answers, references[None][2])              # the live answer is the base's, unchanged
    score = decision.shadow.result(timeout=5)
    assert score.model == "h2" and score.same_forward
    assert_close(score.answers, references["h2"][2])
    assert served_.selector.stats()["same_forward"] == 1


def test_lora_shadow_gets_its_own_forward_after_the_live_answer(tiny_dir, adapters, references):
    served_ = DecisionEngine(EngineConfig(model_path=str(tiny_dir), probability_decimals=8, adapters_dir=str(adapters),
                                          shadows=(("h1", "l2"),))).start()
    try:
        decision = served_.submit(requests(served_, [("h1", 0)])[0]).result(timeout=60)
        assert_close(decision.answers, references["h1"][0])
        score = decision.shadow.result(timeout=60)
    finally:
        served_.stop()
    assert score is not None and score.model == "l2" and not score.same_forward
    assert_close(score.answers, references["l2"][0])


# ------------------------------------------------------------------------------------------------ the registry
def copy_adapter(adapters, name, tmp_path):
    return shutil.copytree(adapters / name, tmp_path / name)


@pytest.mark.parametrize(("fault", "cause"), [
    ("missing", "joint_head.safetensors is missing"),
    ("truncated", "adapter.json says"),
    ("changed", "does not match its sha256"),
    ("base", "fingerprints differ"),
    ("shape", "shape"),
])
def test_a_bad_adapter_folder_is_refused_naming_the_adapter_and_cause(served, adapters, tmp_path, fault, cause):
    folder = copy_adapter(adapters, "l1", tmp_path)
    manifest = json.loads((folder / "adapter.json").read_text())
    if fault == "missing":
        (folder / "joint_head.safetensors").unlink()
    elif fault == "truncated":
        data = (folder / "adapter_model.safetensors").read_bytes()
        (folder / "adapter_model.safetensors").write_bytes(data[:len(data) // 2])
    elif fault == "changed":
        data = bytearray((folder / "adapter_model.safetensors").read_bytes())
        data[-1] ^= 0xFF
        (folder / "adapter_model.safetensors").write_bytes(bytes(data))
    elif fault == "base":
        manifest["base_sha256"] = "0" * 64
    elif fault == "shape":
        manifest["head_config"]["width"] = 2 * manifest["head_config"]["width"]
    (folder / "adapter.json").write_text(json.dumps(manifest))
    with pytest.raises(AdapterError) as caught:
        served.adapters.register("broken", folder)
    assert "broken" in str(caught.value) and cause in str(caught.value)
    assert "broken" not in served.adapters.names()


@pytest.mark.parametrize("name", ["a/b", "..", "x..y", "tab\there", "", "clef-omni", "h1", "x" * 65])
def test_bad_or_taken_names_are_refused(served, adapters, name):
    with pytest.raises(AdapterError):
        served.adapters.register(name, adapters / "h1")


def test_a_request_keeps_its_version_through_a_reload_and_unload_waits(tiny_dir, adapters, tmp_path, references):
    folder = copy_adapter(adapters, "l1", tmp_path)
    served_ = engine(tiny_dir)
    served_.adapters.register("mine", folder)
    request = requests(served_, [("mine", 0)])[0]
    held = served_.selector.select(request)                 # admitted: holds version 1
    make_adapter(served_.model, folder, seed=99, mode="lora")  # new weights in the same folder
    served_.adapters.reload("mine")
    with pytest.raises(AdapterBusy):
        served_.adapters.unload("mine")                     # version 1 is still held
    record = served_.model.prepare(request, None, held.selection)
    old = served_._run([record])[0]
    held.release()
    assert_close(old.answers, references["l1"][0])           # still version 1
    new = served_.decide(request)
    assert new.answers != old.answers                        # version 2 now
    assert served_.adapters.stats()["retired"] == 0          # version 1 freed with its last holder
    served_.adapters.unload("mine")
    assert "mine" not in served_.adapters.names()
    assert not any(k.startswith("mine_") for k in served_.model.backbone.lora.bytes_by_key)


def test_least_recently_used_idle_adapter_is_evicted(tiny_dir, adapters, references):
    served_ = engine(tiny_dir, adapters_dir=str(adapters), max_adapters=2)
    stats = served_.adapters.stats()
    assert stats["served"] == 4 and stats["resident"] == 2 and stats["evictions"] == 2
    for name in ("l1", "h1", "l2", "l1"):
        assert_close(served_.decide(requests(served_, [(name, 0)])[0]).answers, references[name][0])
    stats = served_.adapters.stats()
    assert stats["resident"] == 2 and stats["evictions"] >= 5
    assert len(served_.model.backbone.lora.bytes_by_key) <= 2


def test_all_resident_adapters_held_is_overload_not_a_hang(tiny_dir, adapters):
    from omni.contract.errors import Overloaded

    served_ = engine(tiny_dir, adapters_dir=str(adapters), max_adapters=1)
    held = served_.selector.select(requests(served_, [("h1", 0)])[0])
    try:
        with pytest.raises(Overloaded):
            served_.selector.select(requests(served_, [("h2", 0)])[0])
    finally:
        held.release()
    assert served_.selector.select(requests(served_, [("h2", 0)])[0]).selection.adapter.name == "h2"


def test_concurrent_acquires_load_once(tiny_dir, adapters):
    served_ = engine(tiny_dir, adapters_dir=str(adapters), max_adapters=1)
    request = requests(served_, [("l2", 0)])[0]
    results = []
    threads = [threading.Thread(target=lambda: results.append(served_.selector.select(request))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len({id(h.selection.adapter) for h in results}) == 1
    for h in results:
        h.release()


def test_replay_reloads_the_adapter_from_its_folder_and_reproduces(tiny_dir, adapters, tmp_path, capsys):
    """Decisions answered by a LoRA and a head-only adapter, logged as `omni serve --decision-log` writes them, are
    replayed by `omni replay` on a server that has no adapters loaded: each is reloaded from the folder its audit
    record names and reproduces within 1e-5; a changed adapter is refused naming both sha256."""
    from api.cli.main import main
    from omni.serve.decision_log import DecisionLog

    folder = copy_adapter(adapters, "l1", tmp_path)
    served_ = engine(tiny_dir, adapters=(("l1", str(folder)), ("h2", str(adapters / "h2"))), audit="record")
    batch = requests(served_, [("l1", 0), ("h2", 1), (None, 2)])
    decisions = served_.decide_batch(batch)
    with DecisionLog(tmp_path / "log") as log:
        for request, decision in zip(batch, decisions, strict=True):
            log.append(request, decision.to_wire(), decision.audit.to_wire(), request_id=request.request_id,
                       decided_at=decision.audit.decided_at)

    def replay_json() -> tuple[int, dict]:
        capsys.readouterr()
        code = main(["replay", str(tmp_path / "log"), "--model", str(tiny_dir), "--quiet", "--json"])
        return code, json.loads(capsys.readouterr().out)

    code, report = replay_json()
    assert code == 0 and report["counts"]["reproduced"] == 3 and sum(report["counts"].values()) == 3
    assert report["max_abs_diff"] <= TOL
    make_adapter(served_.model, folder, seed=77, mode="lora")      # the folder now holds other weights
    code, report = replay_json()
    refused = [r for r in report["records"] if r["status"] == "refused"]
    assert code != 0 and len(refused) == 1 and "adapter sha256" in refused[0]["reason"]


def test_eval_and_calibrate_take_an_adapter(tiny_dir, adapters, tmp_path):
    """`omni calibrate --adapter` fits a calibration for the adapter, in its folder; `omni eval --adapter` scores the
    adapter (other metrics than the base's) and applies that calibration; the served adapter then uses it."""
    import argparse

    from api.cli.learn import add_calibrate_arguments, add_eval_arguments, run_calibrate, run_eval
    from fixtures.inspection import write_keyword_task

    task = write_keyword_task(tmp_path / "task.jsonl", 12, seed=3)
    folder = copy_adapter(adapters, "h1", tmp_path)

    def parse(add, argv):
        parser = argparse.ArgumentParser()
        add(parser)
        return parser.parse_args(argv)

    assert run_calibrate(parse(add_calibrate_arguments, [str(task), "--model", str(tiny_dir), "--adapter",
                                                         str(folder), "--quiet", "--min-samples", "4"])) == 0
    assert (folder / "calibration.json").is_file() and not (tiny_dir / "calibration.json").exists()
    metrics = {}
    for name, extra in (("base", []), ("adapter", ["--adapter", str(folder), "--calibration"])):
        run_eval(parse(add_eval_arguments, [str(task), "--model", str(tiny_dir), "--out", str(tmp_path / name),
                                            "--quiet", "--no-plots", *extra]))
        metrics[name] = json.loads((tmp_path / name / "metrics.json").read_text())
    assert metrics["adapter"]["meta"]["calibration"] == "on"
    assert metrics["adapter"]["types"]["all"]["nll"] != metrics["base"]["types"]["all"]["nll"]
    for calibrated in (True, False):
        served_ = engine(tiny_dir, adapters=(("h1c", str(folder)),), audit="record", calibration=calibrated)
        decision = served_.decide(requests(served_, [("h1c", 0)])[0])
        assert (decision.audit.calibration is not None) == calibrated    # the adapter's own, when calibration is on


POLICY = 'version = "line-4 v1"\n{model}[default]\nauto_at = 0.5\n'


@pytest.mark.parametrize(("bound", "refused"), [(None, False), ("bound", False), ("other", True)])
def test_a_policy_in_the_adapter_folder_is_bound_to_it(served, adapters, tmp_path, bound, refused):
    folder = copy_adapter(adapters, "h2", tmp_path)
    (folder / "policy.toml").write_text(POLICY.format(model=f'model = "{bound}"\n' if bound else ""))
    if refused:
        with pytest.raises(AdapterError, match="bound to model 'other'"):
            served.adapters.register("bound", folder)
        return
    served.adapters.register("bound", folder)
    try:
        policy = served.adapters.policy_of("bound")
        assert policy is not None and policy.version == "line-4 v1" and policy.model == bound
        assert policy.governs("bound") and (bound is None or not policy.governs("h1"))
    finally:
        served.adapters.unload("bound")
    assert served.adapters.policy_of("bound") is None


@pytest.mark.parametrize("mode", ["chunked", "isolated"])
def test_chunked_and_isolated_prefills_run_each_adapter_exactly(tiny_dir, adapters, mode):
    """A long prefix prefilled a chunk per turn, and isolated questions (prefix alone, then each block), run with the
    request's own LoRA weights: equal to the same adapter merged and alone, chunked or isolated the same way."""
    from omni.model.clef import ClefModel

    long_state = " ".join(f"Reading {i}: the fan turns, the label is on the left side." for i in range(12))
    options = {"prefill_chunk_tokens": 16} if mode == "chunked" else {"isolation": "isolated"}
    served_ = engine(tiny_dir, adapters_dir=str(adapters), **options)
    names = served_.selector.model_names()
    bodies = [{**body(long_state, name), **({"x_isolation": "isolated"} if mode == "isolated" else {})}
              for name in (None, "l1", "h1", "l2")]
    served = [served_.decide(parse_request(b, served_.config, adapters=names)) for b in bodies]
    if mode == "chunked":      # h1 reads the base's prefix from the cache; each LoRA adapter prefills its own
        assert ["prefill_chunks" in d.timings_ms for d in served] == [True, True, False, True]
        assert served[2].cache["prefix"] == "hit"
    for name, b, decision in zip((None, "l1", "h1", "l2"), bodies, served, strict=True):
        model = ClefModel.load(tiny_dir) if name is None else merged(tiny_dir, adapters / name)
        alone = DecisionEngine(EngineConfig(model_path=str(tiny_dir), probability_decimals=8, **options),
                               model=model).load()
        plain = {k: v for k, v in b.items() if k != "model"}
        assert_close(decision.answers, alone.decide(parse_request(plain, alone.config)).answers)


def test_a_policy_fitted_for_an_adapter_in_its_folder_is_bound_to_it(tiny_dir, adapters, tmp_path, capsys):
    """`omni policy fit --adapter DIR --out DIR/policy.toml` fits the adapter's answers (the header names its sha256)
    and the folder's policy then governs the adapter's decisions when it is served."""
    from api.cli.main import main
    from fixtures.inspection import write_keyword_task
    from omni.contract.policy import read_policy

    task = write_keyword_task(tmp_path / "task.jsonl", 12, seed=5)
    folder = copy_adapter(adapters, "h2", tmp_path)
    assert main(["policy", "fit", str(task), "--model", str(tiny_dir), "--adapter", str(folder), "--target-precision",
                 "0.8", "--out", str(folder / "policy.toml"), "--quiet"]) == 0
    text = (folder / "policy.toml").read_text()
    served_ = engine(tiny_dir, adapters=(("h2p", str(folder)),))
    assert f"adapter sha256 {served_.adapters.acquire('h2p').sha256}" in text
    assert served_.adapters.policy_of("h2p") == read_policy(folder / "policy.toml")
