"""`omni decide --adapter NAME=PATH` answers with the adapter (the request's model set to it), and `omni batch
--adapter NAME=PATH` (repeatable) answers each line by the model it names, on the tiny checkpoint."""
from __future__ import annotations

import json

import pytest

from api.cli.main import main
from omni.serve.backlog import read_batch_output
from tests.integration.serve.adapter_fixtures import make_adapter

QUESTIONS = {"visible": {"type": "noul", "instructions": "Is the serial label visible?"},
             "team": {"type": "choice", "instructions": "Who handles it?", "criteria": {"hvac": None, "power": "P"}}}
STATE = "The fan rattles since the service visit."


@pytest.fixture(scope="module")
def adapters(tiny_dir, tmp_path_factory):
    from omni.model.clef import ClefModel

    base = ClefModel.load(tiny_dir)
    root = tmp_path_factory.mktemp("cli-adapters")
    return {"alpha": make_adapter(base, root / "alpha", seed=1), "beta": make_adapter(base, root / "beta", seed=2)}


def decide(capsys, tmp_path, tiny_dir, request: dict, *flags: str) -> dict:
    path = tmp_path / "request.json"
    path.write_text(json.dumps(request), encoding="utf-8")
    capsys.readouterr()
    assert main(["decide", str(path), "--compact", "--model", str(tiny_dir), "--torch-threads", "1", *flags]) == 0
    return json.loads(capsys.readouterr().out)


def test_decide_answers_with_the_adapter_given(capsys, tmp_path, tiny_dir, adapters):
    request = {"state": STATE, "questions": QUESTIONS}
    base = decide(capsys, tmp_path, tiny_dir, request)
    alpha = decide(capsys, tmp_path, tiny_dir, request, "--adapter", f"alpha={adapters['alpha']}")
    assert (base["model"], alpha["model"]) == ("clef-omni", "alpha")
    assert alpha["answers"] != base["answers"]
    chosen = decide(capsys, tmp_path, tiny_dir, {**request, "model": "beta"}, "--adapter",
                    f"alpha={adapters['alpha']}", "--adapter", f"beta={adapters['beta']}")
    assert chosen["model"] == "beta" and chosen["answers"] != alpha["answers"]


def test_decide_refuses_a_malformed_adapter_flag(capsys, tmp_path, tiny_dir):
    with pytest.raises(SystemExit) as stopped:
        decide(capsys, tmp_path, tiny_dir, {"state": STATE, "questions": QUESTIONS}, "--adapter", "noequals")
    assert stopped.value.code == 2 and "expected NAME=PATH" in capsys.readouterr().err


def test_batch_answers_each_line_by_the_model_it_names(tmp_path, tiny_dir, adapters):
    lines = [{"state": STATE, "questions": QUESTIONS}, {"state": STATE, "questions": QUESTIONS, "model": "alpha"},
             {"state": STATE, "questions": QUESTIONS, "model": "beta"},
             {"state": STATE, "questions": QUESTIONS, "model": "nope"}]
    backlog, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    backlog.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    code = main(["batch", str(backlog), "--out", str(out), "--quiet", "--model", str(tiny_dir), "--torch-threads",
                 "1", "--adapter", f"alpha={adapters['alpha']}", "--adapter", f"beta={adapters['beta']}"])
    records = read_batch_output(out)
    assert code == 1                                  # the unknown model's line has an error record
    assert [records[n]["response"]["model"] for n in (1, 2, 3)] == ["clef-omni", "alpha", "beta"]
    assert records[2]["response"]["answers"] != records[1]["response"]["answers"]
    error = records[4]["error"]
    assert error["status"] == 400 and "alpha" in json.dumps(error) and "'nope'" in json.dumps(error)
