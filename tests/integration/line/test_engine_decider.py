"""The line asks the engine exactly as `POST /v1/systemone` with the same files would: the same answers, the same
outcome, errors in the HTTP edge's words — on the embedded demo checkpoint, with the inspection demo's unit."""
from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from api.line.deciders import DecideFailed, EngineDecider
from api.line.ports import Trigger
from omni.contract.config import EngineConfig
from omni.contract.json_values import load_json
from omni.contract.outcomes import with_outcome
from omni.contract.policy import parse_policy
from omni.contract.request import parse_request
from omni.contract.types import Part
from omni.serve.engine import DecisionEngine
from tests.threads import asyncio_run

ROOT = Path(__file__).resolve().parents[3]
POLICY = b"""version = "line-test"
[questions.label_visible]
auto_at = 0.8
act_on = [false]
[questions.next_step]
auto_at = 0.8
act_on = ["rework", "scrap"]
[default]
auto_at = 0.8
"""


@pytest.fixture(scope="module")
def engine():
    engine = DecisionEngine(EngineConfig(torch_threads=1)).start()
    yield engine
    engine.stop()


def unit(tmp_path: Path) -> tuple[Path, ...]:
    folder = tmp_path / "4711"
    folder.mkdir()
    for name in ("unit.png", "hum.wav", "fan.mp4"):
        shutil.copy(ROOT / "examples" / "inspection" / name, folder / name)
    return tuple(folder / name for name in ("unit.png", "hum.wav", "fan.mp4"))


def test_a_unit_is_answered_as_the_same_request_over_the_wire_would_be(engine, tmp_path):
    template = load_json((ROOT / "examples" / "inspection.json").read_bytes())
    policy = parse_policy(POLICY)
    files = unit(tmp_path)
    decider = EngineDecider(engine, engine.config, template, policy)
    body = asyncio_run(decider.decide(Trigger(unit_id="4711", files=files, source="t", ready_wall_s=time.time()),
                                      30.0))
    parts = [Part(slot, path.read_bytes()) for slot, path in zip(("images", "audio", "videos"), files, strict=True)]
    request = parse_request({**template, "id": "4711"}, engine.config, parts)
    expected = with_outcome(engine.decide(request), request, policy).to_wire()
    assert body["answers"] == expected["answers"]
    assert body["x_outcome"] == expected["x_outcome"] and body["x_outcome"]["overall"] in ("act", "review", "pass")
    assert set(body["answers"]) == {"label_visible", "sounds_normal", "fan_running", "severity", "next_step"}


def test_a_units_bad_files_are_its_error_in_the_http_edges_words(engine, tmp_path):
    template = load_json((ROOT / "examples" / "inspection.json").read_bytes())
    decider = EngineDecider(engine, engine.config, template, None)
    corrupt = tmp_path / "broken.png"
    corrupt.write_bytes(b"\x89PNG not really")
    unknown = tmp_path / "notes.txt"
    unknown.write_text("x")
    gone = tmp_path / "gone.wav"
    huge = tmp_path / "huge.mp4"          # sparse: over max_video_bytes without the disk, refused before it is read
    with huge.open("wb") as stream:
        stream.truncate(engine.config.media.max_video_bytes + 1)
    cases = {corrupt: 415, unknown: 422, gone: 422, huge: 413}
    for path, status in cases.items():
        trigger = Trigger(unit_id="u1", files=(path,), source="t", ready_wall_s=time.time())
        with pytest.raises(DecideFailed) as caught:
            asyncio_run(decider.decide(trigger, 30.0))
        assert caught.value.status == status, (path.name, caught.value.body)
        assert path.name in str(caught.value.body), caught.value.body
