"""`--policy` on `omni decide` and `omni batch` (the tiny checkpoint): every response gets its x_outcome, equal to
the policy applied to its own answers (a photo raises the bar by `auto_at_with`), and its audit record names the
policy's sha256; a bad policy is exit 2 naming the key and line before any model loads; `--url` with `--policy` is
refused (the server's own policy applies there)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from api.cli.main import main
from fixtures.media import image_bytes
from omni.contract.outcomes import decide_outcome
from omni.contract.policy import read_policy
from omni.serve.backlog import read_batch_output

QUESTIONS = {"visible": {"type": "noul", "instructions": "Is the serial label visible?"},
             "team": {"type": "choice", "instructions": "Who handles it?", "criteria": {"hvac": None, "power": "P"}}}
POLICY = """version = "cli-1"
[questions.visible]
auto_at = 0.5
auto_at_with = {image = 0.999}
act_on = [false]
[default]
auto_at = 0.5
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("policy_cli")
    (root / "policy.toml").write_text(POLICY, encoding="utf-8")
    (root / "unit.png").write_bytes(image_bytes("PNG"))
    (root / "request.json").write_text(json.dumps({"state": "The label is half covered.", "questions": QUESTIONS}))
    lines = [{"state": f"Unit {n}: fan rattles.", "questions": QUESTIONS} for n in range(3)]
    lines.append({"state": "With a photo.", "questions": QUESTIONS, "images": ["unit.png"]})
    (root / "in.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return root


def test_omni_decide_policy_gives_the_outcome_of_its_answers(files, tiny_dir, capsys):
    policy = read_policy(files / "policy.toml")
    assert main(["decide", str(files / "request.json"), "--model", str(tiny_dir), "--policy",
                 str(files / "policy.toml"), "--image", str(files / "unit.png"), "--audit", "--compact"]) == 0
    wire = json.loads(capsys.readouterr().out)
    assert wire["x_outcome"] == decide_outcome(policy, wire["answers"], frozenset({"image"})).to_wire()
    assert wire["x_outcome"]["questions"]["visible"]["auto_at"] == 0.999        # the photo's bar
    assert set(wire["x_outcome"]["questions"]) == {"visible", "team"}           # team by [default]
    assert wire["x_audit"]["policy_sha256"] == hashlib.sha256((files / "policy.toml").read_bytes()).hexdigest()


def test_omni_batch_policy_puts_the_outcome_in_every_record(files, tiny_dir):
    out = files / "out.jsonl"
    assert main(["batch", str(files / "in.jsonl"), "--out", str(out), "--model", str(tiny_dir), "--policy",
                 str(files / "policy.toml"), "--torch-threads", "1", "--quiet"]) == 0
    policy = read_policy(files / "policy.toml")
    records = read_batch_output(out)
    assert len(records) == 4
    for number, record in records.items():
        media = frozenset({"image"}) if number == 4 else frozenset()
        response = record["response"]
        assert response["x_outcome"] == decide_outcome(policy, response["answers"], media).to_wire()
        assert record["audit"]["policy_sha256"] == policy.sha256


def test_a_bad_policy_is_exit_2_naming_the_line_before_a_model_loads(files, tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('version = "x"\n[questions.visible]\nauto_at = 0.9\nact_on = ["yes", false]\n', encoding="utf-8")
    assert main(["decide", str(files / "request.json"), "--model", str(tmp_path / "no-model"), "--policy",
                 str(bad)]) == 2
    assert "questions.visible.act_on (line 4)" in capsys.readouterr().err
    assert main(["batch", str(files / "in.jsonl"), "--out", str(tmp_path / "o.jsonl"), "--model",
                 str(tmp_path / "no-model"), "--policy", str(bad), "--quiet"]) == 2
    assert "questions.visible.act_on (line 4)" in capsys.readouterr().err
    assert main(["batch", str(files / "in.jsonl"), "--out", str(tmp_path / "o.jsonl"), "--url",
                 "http://127.0.0.1:9", "--policy", str(files / "policy.toml")]) == 2
    assert "--policy: the server at --url runs its own model" in capsys.readouterr().err
