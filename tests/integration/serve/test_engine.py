"""The engine on the tiny checkpoint: determinism, batch == singles, invariants, truncation, CLI."""
import json
import os
import subprocess
import sys

import pytest
import torch

from omni.contract.config import EngineConfig
from omni.contract.errors import ContextTooLong, UnknownModel
from omni.contract.request import parse_request
from omni.serve.engine import DecisionEngine

MIXED = {
    "model": "clef-omni",
    "state": {"message": "Our checkout returns errors and orders are stuck. Fix this today!", "order": [1, 2]},
    "questions": {
        "team": {"type": "choice", "instructions": "Which team should handle this?",
                 "criteria": {"billing": "Payments", "technical": "Bugs, outages", "sales": None}},
        "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["can wait", "this week", "today"]},
        "outage": {"type": "noul", "instructions": "Is something down?", "criteria": {"true": "Down for customers"}},
    },
}


def variants(engine):
    """Records of different lengths and question sets (so the batch really pads)."""
    bodies = [MIXED,
              {"state": "short", "questions": {"q": {"type": "noul"}}},
              {"state": "x " * 300, "questions": {f"c{i}": {"type": "choice", "criteria": {"a": None, "b": "B", "c": [1]}}
                                                  for i in range(5)}},
              {"state": ["list", "state"], "questions": {"s": {"type": "score", "criteria": list("abcdefghij")}}}]
    return [parse_request(b, engine.config) for b in bodies]


def test_probabilities_sum_to_one_before_rounding(tiny_engine):
    records = [tiny_engine.model.prepare(r) for r in variants(tiny_engine)]
    for per_question in tiny_engine.model.probabilities(records):
        for p in per_question:
            assert p.dtype == torch.float32 and torch.isfinite(p).all()
            assert abs(float(p.double().sum()) - 1.0) < 1e-6


def test_batch_equals_singles(tiny_engine):
    requests = variants(tiny_engine)
    records = [tiny_engine.model.prepare(r) for r in requests]
    batched = tiny_engine.model.probabilities(records)
    for record, joint in zip(records, batched, strict=True):
        single = tiny_engine.model.probabilities([record])[0]
        for a, b in zip(joint, single, strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    wire_batch = [d.to_wire() for d in tiny_engine.decide_batch(requests)]
    wire_single = [tiny_engine.decide(r).to_wire() for r in requests]
    for a, b in zip(wire_batch, wire_single, strict=True):
        assert a["usage"] == b["usage"] and a["answers"].keys() == b["answers"].keys()


def test_deterministic_across_engines(tiny_dir, tiny_engine):
    other = DecisionEngine(EngineConfig(model_path=str(tiny_dir))).load()
    request = parse_request(MIXED, tiny_engine.config)
    assert tiny_engine.decide(request).to_wire() == other.decide(request).to_wire()
    assert tiny_engine.decide(request).to_wire() == tiny_engine.decide(request).to_wire()


def test_answer_shapes_and_usage(tiny_engine):
    out = tiny_engine.decide(parse_request(MIXED, tiny_engine.config)).to_wire()
    assert out["model"] == "clef-omni" and list(out["answers"]) == ["team", "urgency", "outage"]
    team = out["answers"]["team"]
    assert list(team["probabilities"]) == ["billing", "technical", "sales"]
    assert team["choice"] == max(team["probabilities"], key=team["probabilities"].get)
    urgency = out["answers"]["urgency"]
    assert urgency["legend"] == {"0": "can wait", "1": "this week", "2": "today"}
    assert urgency["score"] == pytest.approx(sum(int(k) * v for k, v in urgency["probabilities"].items()), abs=2e-4)
    record = tiny_engine.model.prepare(parse_request(MIXED, tiny_engine.config))
    assert out["usage"] == {"input_tokens": record.num_tokens, "output_tokens": 0}
    assert "x_truncated_state_tokens" not in out


def test_confidence_formula_selectable(tiny_dir):
    request = {"state": "s", "questions": {"c": {"type": "choice", "criteria": {"a": None, "b": None, "c": None}}}}
    clef = DecisionEngine(EngineConfig(model_path=str(tiny_dir))).load()
    ts = DecisionEngine(EngineConfig(model_path=str(tiny_dir), confidence="typesafe")).load()
    a = clef.decide(parse_request(request, clef.config)).answers["c"]
    b = ts.decide(parse_request(request, ts.config)).answers["c"]
    pmax = max(a["probabilities"].values())
    assert a["confidence"] == pytest.approx(pmax, abs=1e-4)
    assert b["confidence"] == pytest.approx((pmax - 1 / 3) / (2 / 3), abs=2e-4)


def test_state_truncation_reported_in_x_field(tiny_dir):
    engine = DecisionEngine(EngineConfig(model_path=str(tiny_dir), max_context_tokens=400)).load()
    body = {"state": "word " * 2000, "questions": {"q": {"type": "noul", "instructions": "?"}}}
    out = engine.decide(parse_request(body, engine.config)).to_wire()
    assert out["usage"]["input_tokens"] == 400 and out["x_truncated_state_tokens"] > 1500
    with pytest.raises(ContextTooLong):
        engine.decide(parse_request({**body, "truncate": False}, engine.config))


def test_unknown_model_refused_aliases_accepted(tiny_engine):
    for name in (None, "jev-latest", "clef-omni", " clef-omni "):
        tiny_engine.decide(parse_request({"state": "s", "questions": {"q": {"type": "noul"}}, "model": name},
                                         tiny_engine.config))
    with pytest.raises(UnknownModel, match="gpt-5"):
        tiny_engine.decide(parse_request({"state": "s", "questions": {"q": {"type": "noul"}}, "model": "gpt-5"},
                                         tiny_engine.config))


def run_cli(args, stdin=None, env_extra=None):
    env = {**os.environ, **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "api.cli.main", *args], input=stdin, capture_output=True, text=True,
                          timeout=180, env=env, check=False)


def test_cli_decide_with_model_and_stdin(tiny_dir, tmp_path):
    (tmp_path / "req.json").write_text(json.dumps(MIXED))
    from_file = run_cli(["decide", "--model", str(tiny_dir), str(tmp_path / "req.json"), "--compact"])
    assert from_file.returncode == 0, from_file.stderr
    from_stdin = run_cli(["decide", "--model", str(tiny_dir), "-", "--compact"], stdin=json.dumps(MIXED))
    assert json.loads(from_file.stdout) == json.loads(from_stdin.stdout)
    assert "random" not in from_file.stderr


def test_cli_default_model_is_the_embedded_demo_and_says_so(tmp_path):
    out = run_cli(["decide", "-"], stdin=json.dumps(MIXED), env_extra={"HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert "demo checkpoint" in out.stderr and "random" in out.stderr and "real weights" in out.stderr
    assert set(json.loads(out.stdout)["answers"]) == {"team", "urgency", "outage"}
    assert not (tmp_path / ".cache").exists()          # the shipped demo is used, nothing is built


def test_random_fallback_is_built_once_into_the_cache(tmp_path, monkeypatch, caplog):
    from omni.model import checkpoint as defaults

    monkeypatch.setattr(defaults, "DEMO_CHECKPOINT_DIR", tmp_path / "not-installed")
    first = defaults.embedded_default(str(tmp_path / "cache"))
    assert first == tmp_path / "cache" / "tiny-default-v1" and (first / "joint_head.safetensors").is_file()
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert defaults.embedded_default(str(tmp_path / "cache")) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp
    assert "answers are random" in caplog.text


def test_cli_bad_request_is_a_clear_error(tiny_dir):
    out = run_cli(["decide", "--model", str(tiny_dir), "-"], stdin='{"state": 1, "questions": {}}')
    assert out.returncode == 2 and "state" in out.stderr and "questions" in out.stderr
    assert "Traceback" not in out.stderr
    out = run_cli(["decide", "--model", str(tiny_dir), "-"], stdin="{not json")
    assert out.returncode == 2 and "JSON decode error" in out.stderr


def test_cli_make_tiny(tmp_path):
    out = run_cli(["make-tiny", str(tmp_path / "t"), "--seed", "3"])
    assert out.returncode == 0 and (tmp_path / "t" / "joint_head.safetensors").is_file()
