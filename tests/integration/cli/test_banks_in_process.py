"""Hash banks where the model runs in this process: `omni decide --bank`, `omni batch --bank` and an in-process
`omni line` with `[model] banks` consult the banks before the model exactly as `omni serve --bank` does — an `act`
match answers without a forward pass (`omni decide` does not even load the model), a `flag` match rides along the
model's answer, and a bad bank file is one line naming its line, exit 2, before any model loads."""
from __future__ import annotations

import io
import json
import shutil
import time
from pathlib import Path

import pytest
from PIL import Image

from api.cli.main import main
from preprocess.hashes import pdq_of_image, sha256_of
from preprocess.item import MediaItem
from tests.threads import asyncio_run

ROOT = Path(__file__).resolve().parents[3]
INSPECTION = ROOT / "examples" / "inspection"
HEADER = "hash_type,hash,label,action,source,added\n"


def turned_photo() -> bytes:
    """The demo photo upside down: another sha256, another PDQ hash (nothing banked matches it exactly)."""
    out = io.BytesIO()
    Image.open(INSPECTION / "unit.png").convert("RGB").rotate(180).save(out, "PNG")
    return out.getvalue()


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("banked")
    shutil.copy(INSPECTION / "unit.png", root / "unit.png")
    (root / "turned.png").write_bytes(turned_photo())
    photo = (root / "unit.png").read_bytes()
    turned_pdq = pdq_of_image(MediaItem("images", 0, (root / "turned.png").read_bytes())).hex
    (root / "known.csv").write_text(HEADER + f"sha256,{sha256_of(photo)},unit-known,act,test,2026-12-05T00:00:00Z\n"
                                    f"pdq,{turned_pdq},unit-turned,flag,test,2026-12-05T00:00:00Z\n")
    (root / "request.json").write_text((ROOT / "examples" / "inspection.json").read_text())
    return {"root": root, "photo": root / "unit.png", "turned": root / "turned.png", "bank": root / "known.csv",
            "request": root / "request.json"}


def decide(capsys, *args: object) -> tuple[int, dict | None, str]:
    capsys.readouterr()
    code = main(["decide", *map(str, args), "--compact"])
    captured = capsys.readouterr()
    return code, json.loads(captured.out) if captured.out.strip() else None, captured.err


def test_decide_answers_an_act_match_by_the_bank_without_loading_the_model(media, capsys, monkeypatch):
    from omni.serve.engine import DecisionEngine

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded for a request the bank decides")

    monkeypatch.setattr(DecisionEngine, "__init__", no_model)
    code, wire, err = decide(capsys, media["request"], "--image", media["photo"], "--bank", media["bank"], "--audit")
    assert code == 0, err
    assert wire["answers"] == {} and wire["x_outcome"]["overall"] == "act" and wire["x_outcome"]["by"] == "bank"
    assert wire["x_match"]["label"] == "unit-known" and wire["x_match"]["hash_type"] == "sha256"
    assert wire["x_audit"]["banks"][0]["name"] == "known" and wire["x_audit"]["match"]["line"] == 2


def test_decide_gives_the_models_answer_with_a_flag_match_riding_along(media, capsys, tiny_dir):
    code, wire, err = decide(capsys, media["request"], "--image", media["turned"], "--bank", media["bank"],
                             "--model", tiny_dir, "--torch-threads", 1)
    assert code == 0, err
    assert set(wire["answers"]) == {"label_visible", "sounds_normal", "fan_running", "severity", "next_step"}
    assert wire["x_match"]["label"] == "unit-turned" and wire["x_match"]["action"] == "flag"
    assert wire["x_match"]["hash_type"] == "pdq" and wire["x_match"]["distance"] == 0


def test_decide_refuses_a_bad_bank_or_a_threshold_without_one_before_any_model_loads(media, capsys, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + "pdq,not-hex,x,act,test,2026-12-05T00:00:00Z\n")
    code, wire, err = decide(capsys, media["request"], "--image", media["photo"], "--bank", bad)
    assert code == 2 and wire is None and "bad.csv" in err and "line 2" in err
    code, wire, err = decide(capsys, media["request"], "--bank-pdq-threshold", "known=10")
    assert code == 2 and "--bank-pdq-threshold goes with --bank" in err
    with pytest.raises(SystemExit):
        main(["decide", str(media["request"]), "--bank", str(media["bank"]), "--bank-pdq-threshold", "known=64"])
    assert "expected BANK=BITS, BITS 0..63" in capsys.readouterr().err


def test_batch_answers_matched_lines_by_the_bank_and_the_others_by_the_model(media, tiny_dir, tmp_path):
    from omni.serve.backlog import read_batch_output

    template = json.loads(media["request"].read_text())
    lines = [{**template, "images": [str(media["photo"])]}, {**template, "images": [str(media["turned"])]},
             {**template, "state": "no media"}]
    backlog = tmp_path / "in.jsonl"
    backlog.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "out.jsonl"
    assert main(["batch", str(backlog), "--out", str(out), "--quiet", "--model", str(tiny_dir), "--torch-threads", "1",
                 "--bank", str(media["bank"])]) == 0
    records = read_batch_output(out)
    acted, flagged, plain = (records[n]["response"] for n in (1, 2, 3))
    assert acted["answers"] == {} and acted["x_match"]["label"] == "unit-known" and acted["x_outcome"]["by"] == "bank"
    assert records[1]["audit"]["prompt"]["template"] == "none"       # no forward pass, and filed as every record's
    assert flagged["answers"] and flagged["x_match"]["label"] == "unit-turned"
    assert records[2]["audit"]["banks"][0]["name"] == "known" and "banks" not in records[3]["audit"]
    assert plain["answers"] and "x_match" not in plain
    assert main(["batch", str(backlog), "--out", str(tmp_path / "url.jsonl"), "--url", "http://127.0.0.1:9",
                 "--bank", str(media["bank"])]) == 2


def test_an_in_process_line_with_model_banks_answers_an_act_match_by_the_bank(media, tmp_path):
    from api.cli.line import _decider
    from api.line.config import read_line_config
    from api.line.ports import Trigger

    (tmp_path / "in").mkdir()
    config_path = tmp_path / "line.toml"
    config_path.write_text(f'[line]\nname = "cell"\nroot = "in"\nledger = "ledger.jsonl"\ndeadline_ms = 30000\n'
                           f'[request]\ntemplate = "{media["request"]}"\n[model]\ntorch_threads = 1\n'
                           f'banks = ["{media["bank"]}"]\n[[source]]\ntype = "folder"\n')
    decider, engine = _decider(read_line_config(config_path), quiet=True)
    try:
        submitted = []
        submit = engine.submit
        engine.submit = lambda request, **kwargs: submitted.append(request) or submit(request, **kwargs)

        def unit(path: Path) -> dict:
            return asyncio_run(decider.decide(Trigger(unit_id=path.stem, files=(path,), source="t",
                                                      ready_wall_s=time.time()), 30.0))

        acted = unit(media["photo"])
        assert acted["answers"] == {} and acted["x_outcome"]["overall"] == "act" and not submitted
        assert acted["x_match"]["label"] == "unit-known"
        flagged = unit(media["turned"])
        assert flagged["answers"] and flagged["x_match"]["action"] == "flag" and len(submitted) == 1
    finally:
        asyncio_run(decider.close())
        engine.stop()
