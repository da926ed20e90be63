"""x_evidence at the edges (issue 34): over HTTP (JSON and multipart, the Cloudflare route) it equals the
in-process evidence; a bad x_evidence is a 422 naming the field, never a 5xx; `omni decide --evidence` prints it."""
from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient

from api.cli.main import main
from api.http.app import create_app
from api.http.settings import Settings
from fixtures.media import image_bytes, wav_bytes
from omni.contract.request import parse_request
from omni.contract.types import Part
from omni.serve.engine import DecisionEngine
from tests.integration.model.test_evidence import assert_same_evidence
from tests.unit.http.serving import wait_ready

QUESTIONS = {"visible": {"type": "noul", "instructions": "Is the label visible?"},
             "team": {"type": "choice", "instructions": "Who fixes it?", "criteria": {"hvac": None, "electric": "E"}}}


@pytest.fixture(scope="module")
def served(tiny_dir):
    settings = Settings().with_values({"model": str(tiny_dir), "max_batch_records": 4})
    engine = DecisionEngine(settings.engine)
    with TestClient(create_app(settings, engine)) as client:
        wait_ready(client, seconds=120)
        yield client, engine


def test_multipart_evidence_equals_in_process(served):
    client, engine = served
    png, wav = image_bytes("PNG", "RGB", 120, 80), wav_bytes(1.2, 44100, 2)
    body = {"state": "Check the unit.", "questions": QUESTIONS, "x_evidence": {"options": "all", "top": 2}}
    r = client.post("/v1/systemone", files=[("request", ("request.json", json.dumps(body), "application/json")),
                                            ("images", ("unit.png", png, "image/png")),
                                            ("audio", ("hum.wav", wav, "audio/wav"))])
    assert r.status_code == 200, r.text
    want = engine.decide(parse_request(body, engine.config, [Part("images", png), Part("audio", wav)])).to_wire()
    assert_same_evidence(r.json()["x_evidence"], want["x_evidence"])      # the second one hit the prefix cache
    visible = r.json()["x_evidence"]["questions"]["visible"]
    assert set(visible["options"]) == {"true", "false"} and len(visible["images"][0]["boxes"]) == 2
    cloudflare = client.post("/accounts/x/ai/run/@cf/cloudflare/clef-omni", json={**body, "x_evidence": True})
    assert cloudflare.status_code == 200, cloudflare.text
    assert set(cloudflare.json()["result"]["x_evidence"]["questions"]) == set(QUESTIONS)


def test_no_evidence_unless_asked(served):
    client, _ = served
    r = client.post("/v1/systemone", json={"state": "s", "questions": QUESTIONS})
    assert r.status_code == 200 and "x_evidence" not in r.json()


@pytest.mark.parametrize("value", ["yes", 3, None, {"options": "every"}, {"top": 100}, {"top": "3"}, {"colour": 1}])
def test_a_bad_x_evidence_is_a_422_naming_it(served, value):
    client, _ = served
    r = client.post("/v1/systemone", json={"state": "s", "questions": QUESTIONS, "x_evidence": value})
    assert r.status_code == 422, r.text
    locs = [issue["loc"] for issue in r.json()["detail"]] if "detail" in r.json() else [r.json()]
    assert all("x_evidence" in loc for loc in locs), r.json()


def test_omni_decide_evidence(tiny_dir, tmp_path, capsys):
    (tmp_path / "request.json").write_text(json.dumps({"state": "Check the unit.", "questions": QUESTIONS}))
    (tmp_path / "unit.png").write_bytes(image_bytes("PNG"))
    assert main(["decide", str(tmp_path / "request.json"), "--model", str(tiny_dir), "--image",
                 str(tmp_path / "unit.png"), "--evidence", "--compact"]) == 0
    wire = json.loads(capsys.readouterr().out)
    question = wire["x_evidence"]["questions"]["visible"]
    assert question["answer"] in ("true", "false") and "options" not in question
    assert question["images"][0]["width"] == 96
    assert main(["decide", str(tmp_path / "request.json"), "--model", str(tiny_dir), "--evidence", "all",
                 "--compact"]) == 0
    assert set(json.loads(capsys.readouterr().out)["x_evidence"]["questions"]["team"]["options"]) == {"hvac",
                                                                                                     "electric"}
