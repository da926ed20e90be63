"""One parser for the wire: the same request, in every media form, through every edge (HTTP JSON, HTTP multipart,
the Cloudflare route, `omni decide`, a dataset line, an `omni batch` line) reaches the tiny model as the same prompt
and gets the same answers. A TypeSafe `assets` request through the CLI and in a dataset uses its image (never
ignored); avrik's `{"data", "media_type"}` image goes through every edge."""
from __future__ import annotations

import base64
import json

import pytest
from fastapi.testclient import TestClient

from api.cli.main import main as omni
from api.http.app import create_app
from api.http.settings import Settings
from fixtures.media import image_bytes, wav_bytes
from omni.learn.dataset import load_dataset
from omni.serve.backlog import read_batch_output
from omni.serve.engine import DecisionEngine
from tests.unit.http.serving import wait_ready

PH = "<image:9f1c0e6a0b1c4d2e8f00112233445566>"
QUESTIONS = {"visible": {"type": "noul", "instructions": "Is the label visible in [image 1]?"},
             "next": {"type": "choice", "instructions": "What next?", "criteria": {"ship": None, "rework": "Fix it"}}}
ASSET_QUESTIONS = {"visible": {"type": "noul", "instructions": f"Is the label visible in {PH}?"},
                   "next": QUESTIONS["next"]}
STATE = "Unit 7 on the bench; the photo is [image 1]; listen to the hum."
ASSET_STATE = STATE.replace("[image 1]", PH)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.fixture(scope="module")
def media():
    return {"png": image_bytes("PNG", "RGB", 96, 64), "wav": wav_bytes(1.0, 16000, 1)}


@pytest.fixture(scope="module")
def served(tiny_dir):
    settings = Settings().with_values({"model": str(tiny_dir)})
    engine = DecisionEngine(settings.engine)
    with TestClient(create_app(settings, engine)) as client:
        wait_ready(client, seconds=120)
        yield client, engine


def json_forms(media) -> dict[str, dict]:
    """The request as JSON, once per way of carrying the image (the audio rides along as a Clef item)."""
    png, audio = media["png"], [{"content_type": "audio/wav", "base64": b64(media["wav"])}]
    return {
        "clef data URL": {"state": STATE, "questions": QUESTIONS, "audio": audio,
                          "images": [f"data:image/png;base64,{b64(png)}"]},
        "clef object": {"state": STATE, "questions": QUESTIONS, "audio": audio,
                        "images": [{"content_type": "image/png", "base64": b64(png)}]},
        "llama.cpp files": {"state": STATE, "questions": QUESTIONS, "audio": audio,
                            "files": [f"data:image/png;base64,{b64(png)}"]},
        "typesafe assets": {"state": ASSET_STATE, "questions": ASSET_QUESTIONS, "audio": audio,
                            "assets": {PH: {"type": "image", "format": "png", "data_base64": b64(png)}}},
        "avrik object": {"state": STATE, "questions": QUESTIONS, "audio": audio,
                         "images": [{"data": b64(png), "media_type": "image/png"}]},
    }


def http_answers(client, media) -> dict[str, dict]:
    png, wav = media["png"], media["wav"]
    out = {}
    for name, body in json_forms(media).items():
        out[f"HTTP JSON, {name}"] = client.post("/v1/systemone", json=body)
        out[f"Cloudflare route, {name}"] = client.post("/accounts/a/ai/run/@cf/cloudflare/clef-omni", json=body)
    plain = {"state": STATE, "questions": QUESTIONS}
    out["HTTP multipart, slot parts"] = client.post("/v1/systemone", files=[
        ("request", ("r.json", json.dumps(plain), "application/json")),
        ("images", ("unit.png", png, "image/png")), ("audio", ("hum.wav", wav, "audio/wav"))])
    asset_part = {"state": ASSET_STATE, "questions": ASSET_QUESTIONS, "assets": {PH: {"type": "image", "part": "a-0"}}}
    out["HTTP multipart, asset part"] = client.post("/v1/systemone", files=[
        ("request", ("r.json", json.dumps(asset_part), "application/json")),
        ("a-0", ("a-0", png, "image/png")), ("audio", ("hum.wav", wav, "audio/wav"))])
    avrik_part = {**plain, "images": [{"data": b64(png), "media_type": "image/png"}]}
    out["HTTP multipart, avrik object in the request part"] = client.post("/v1/systemone", files=[
        ("request", ("r.json", json.dumps(avrik_part), "application/json")), ("audio", ("hum.wav", wav, "audio/wav"))])
    answers = {}
    for name, r in out.items():
        assert r.status_code == 200, (name, r.text)
        wire = r.json()
        answers[name] = wire.get("result", wire)
    return answers


def cli_answers(tiny_dir, tmp_path, media, capsys) -> dict[str, dict]:
    (tmp_path / "unit.png").write_bytes(media["png"])
    (tmp_path / "hum.wav").write_bytes(media["wav"])
    plain = {"state": STATE, "questions": QUESTIONS}
    assets_json = json_forms(media)["typesafe assets"]
    asset_part = {"state": ASSET_STATE, "questions": ASSET_QUESTIONS, "assets": {PH: {"type": "image", "part": "a-0"}}}
    runs = {"omni decide --image": (plain, ["--image", str(tmp_path / "unit.png")]),
            "omni decide, assets JSON": (assets_json, []),
            "omni decide, avrik object JSON": (json_forms(media)["avrik object"], []),
            "omni decide, asset --part": (asset_part, ["--part", f"a-0={tmp_path / 'unit.png'}"])}
    answers = {}
    for name, (body, flags) in runs.items():
        path = tmp_path / "req.json"
        path.write_text(json.dumps(body))
        audio = [] if "audio" in body else ["--audio", str(tmp_path / "hum.wav")]
        capsys.readouterr()
        assert omni(["decide", "--model", str(tiny_dir), "--compact", str(path), *flags, *audio]) == 0, name
        answers[name] = json.loads(capsys.readouterr().out)
    return answers


def dataset_answers(engine, tmp_path, media) -> dict[str, dict]:
    (tmp_path / "unit.png").write_bytes(media["png"])
    (tmp_path / "hum.wav").write_bytes(media["wav"])
    labels = {"visible": True}
    lines = [{"state": STATE, "questions": QUESTIONS, "images": ["unit.png"], "audio": ["hum.wav"], "labels": labels},
             {**json_forms(media)["typesafe assets"], "labels": labels},
             {**json_forms(media)["avrik object"], "labels": labels}]
    path = tmp_path / "data.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    records = load_dataset(path, engine.config)
    names = ["dataset line, media file paths", "dataset line, assets", "dataset line, avrik object"]
    return {name: engine.decide(record.request).to_wire() for name, record in zip(names, records, strict=True)}


def batch_answers(tiny_dir, tmp_path, media) -> dict[str, dict]:
    """`omni batch` in-process, one line (so one forward of one request, as the other edges run it)."""
    (tmp_path / "in.jsonl").write_text(json.dumps(json_forms(media)["avrik object"]) + "\n")
    assert omni(["batch", str(tmp_path / "in.jsonl"), "--out", str(tmp_path / "out.jsonl"), "--model", str(tiny_dir),
                 "--torch-threads", "1", "--quiet"]) == 0
    return {"omni batch line, avrik object": read_batch_output(tmp_path / "out.jsonl")[1]["response"]}


def test_the_same_request_in_every_form_through_every_edge_gets_the_same_answers(served, tiny_dir, tmp_path, media,
                                                                                  capsys):
    client, engine = served
    answers = {**http_answers(client, media), **cli_answers(tiny_dir, tmp_path, media, capsys),
               **dataset_answers(engine, tmp_path, media), **batch_answers(tiny_dir, tmp_path, media)}
    assert len(answers) == 21
    reference = answers["HTTP JSON, clef data URL"]
    assert reference["x_usage"]["image"] > 0 and reference["x_usage"]["audio"] > 0
    for name, wire in answers.items():
        assert wire["answers"] == reference["answers"], name
        assert (wire["usage"], wire["x_usage"]) == (reference["usage"], reference["x_usage"]), name


def test_a_cli_asset_part_that_is_not_sent_is_a_clear_error(tiny_dir, tmp_path, capsys):
    body = {"state": ASSET_STATE, "questions": ASSET_QUESTIONS, "assets": {PH: {"type": "image", "part": "a-0"}}}
    (tmp_path / "req.json").write_text(json.dumps(body))
    assert omni(["decide", "--model", str(tiny_dir), str(tmp_path / "req.json")]) == 2
    err = capsys.readouterr().err
    assert f"assets.{PH}.part" in err and "no part named 'a-0'" in err and "Traceback" not in err
