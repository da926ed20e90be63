"""The line's other two parts against real counterparts: `[model] url` (RemoteDecider) against a running `omni serve`,
and the webhook sink against a real HTTP receiver that checks each result's signature and idempotency key."""
from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import httpx
import pytest

from api.http.webhooks import SIGNATURE_HEADER, verify
from api.line.config import LineContext
from api.line.config_reader import TableReader
from api.line.deciders import DecideFailed, RemoteDecider
from api.line.ports import Result, Trigger
from api.line.webhook_sink import parse_sink
from fixtures.mosquitto import free_port
from omni.contract.config import EngineConfig
from omni.contract.request import parse_request
from omni.contract.toml_text import load_toml
from omni.contract.types import Part
from omni.serve.engine import DecisionEngine
from tests.threads import asyncio_run

ROOT = Path(__file__).resolve().parents[3]
MEDIA = (("images", "unit.png"), ("audio", "hum.wav"), ("videos", "fan.mp4"))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`omni serve` on the embedded demo checkpoint, one torch thread, on a free port."""
    port = free_port()
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    process = subprocess.Popen([sys.executable, "-m", "api.cli.main", "serve", "--port", str(port), "--torch-threads",
                                "1", "--log-level", "warning"], cwd=ROOT, stdout=log.open("wb"),
                               stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    ends = time.monotonic() + 180
    try:
        while True:
            assert process.poll() is None and time.monotonic() < ends, log.read_text()[-3000:]
            try:
                if httpx.get(f"{url}/ready", timeout=2, trust_env=False).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(60)


def unit(tmp_path: Path) -> tuple[Path, ...]:
    folder = tmp_path / "4711"
    folder.mkdir()
    for _, name in MEDIA:
        shutil.copy(ROOT / "examples" / "inspection" / name, folder / name)
    return tuple(folder / name for _, name in MEDIA)


def test_a_unit_sent_to_a_running_server_is_answered_as_the_engine_answers_it(server, tmp_path):
    template = json.loads((ROOT / "examples" / "inspection.json").read_text())
    files = unit(tmp_path)
    decider = RemoteDecider(server, template)

    async def both() -> tuple[dict, int]:
        body = await decider.decide(Trigger(unit_id="4711", files=files, source="t", ready_wall_s=time.time()), 30.0)
        broken = tmp_path / "broken.png"
        broken.write_bytes(b"\x89PNG not really")
        with pytest.raises(DecideFailed) as caught:
            await decider.decide(Trigger(unit_id="4712", files=(broken,), source="t", ready_wall_s=time.time()), 30)
        assert "broken.png" in json.dumps(caught.value.body), caught.value.body
        await decider.close()
        return body, caught.value.status

    body, status = asyncio_run(both())
    assert status == 415
    engine = DecisionEngine(EngineConfig(torch_threads=1))
    parts = [Part(slot, path.read_bytes()) for (slot, _), path in zip(MEDIA, files, strict=True)]
    expected = engine.decide(parse_request({**template, "id": "4711"}, engine.config, parts)).to_wire()
    assert body["answers"] == expected["answers"]


def test_a_server_that_is_not_there_is_that_units_error_not_a_crash(tmp_path):
    decider = RemoteDecider(f"http://127.0.0.1:{free_port()}", {"questions": {"ok": {"type": "noul",
                                                                                        "question": "ok?"}}})

    async def once() -> DecideFailed:
        with pytest.raises(DecideFailed) as caught:
            await decider.decide(Trigger(unit_id="u1", files=unit(tmp_path), source="t", ready_wall_s=time.time()), 5)
        await decider.close()
        return caught.value

    failed = asyncio_run(once())
    assert failed.status == 503 and "unavailable" in json.dumps(failed.body)


class Receiver(BaseHTTPRequestHandler):
    got: ClassVar[list[tuple[dict, str, str, bytes]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        Receiver.got.append((json.loads(body), self.headers[SIGNATURE_HEADER], self.headers["Idempotency-Key"], body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_the_webhook_sink_signs_each_result_keys_it_by_unit_and_sends_only_the_outcomes_asked(tmp_path):
    Receiver.got = []
    http = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    (tmp_path / "secret").write_text("s3cret\n")
    text = (f'[[sink]]\ntype = "webhook"\nurl = "http://127.0.0.1:{http.server_address[1]}/hook"\n'
            f'secret_file = "secret"\ndead_letter = "dead.jsonl"\non = ["act", "review", "error"]\n')
    config = parse_sink(TableReader(text, "line.toml", tmp_path), load_toml(text)["sink"][0], "sink[0]",
                        LineContext("cell-4", tmp_path))
    sink = config.build(LineContext("cell-4", tmp_path))
    results = [Result(line="cell-4", unit_id=unit_id, outcome=outcome, answers={}, x_outcome=None, latency_ms=5.0,
                      decided_at="2026-12-04T10:00:00Z", source="t", fallback=fallback)
               for unit_id, outcome, fallback in (("u1", "act", None), ("u2", "pass", None),
                                                  ("u3", "timeout", "review"))]

    async def send_all() -> None:
        await sink.start()
        for result in results:
            await sink.send(result)
        ends = time.monotonic() + 20
        while len(Receiver.got) < 2 and time.monotonic() < ends:
            await asyncio.sleep(0.05)
        await sink.close()

    try:
        asyncio_run(send_all())
    finally:
        http.shutdown()
    by_key = {key: (payload, signature, raw) for payload, signature, key, raw in Receiver.got}
    assert set(by_key) == {"u1", "u3"}                        # pass is not asked for; a timeout sends its fallback
    assert by_key["u1"][0] == results[0].payload() and by_key["u3"][0]["published_outcome"] == "review"
    assert all(verify("s3cret", signature, raw) for _, signature, raw in by_key.values())
    assert sink.stats()["skipped"] == 1
