"""The demo as a line (examples/line, docs/line.md), end to end: six units written as a camera cell drops them,
decided by `omni line` from the folder, then the same units triggered over MQTT (a real mosquitto) and answered on
the result topics; `--status` shows the line; a restart decides nothing twice; SIGTERM ends it cleanly."""
from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import paho.mqtt.client as mqtt

from omni.contract.config import EngineConfig
from omni.contract.outcomes import with_outcome
from omni.contract.policy import read_policy
from omni.contract.request import parse_request
from omni.contract.types import Part
from omni.serve.engine import DecisionEngine

ROOT = Path(__file__).resolve().parents[3]
IDS = [str(4711 + i) for i in range(6)]


def omni(*args: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "api.cli.main", *args], cwd=kwargs.pop("cwd", ROOT), **kwargs)


def ledger_records(path: Path, kind: str = "decided") -> list[dict]:
    if not path.exists():
        return []
    return [r for r in map(json.loads, path.read_text().splitlines()) if r["kind"] == kind]


def wait_for(check, seconds: float, process: subprocess.Popen, log: Path):
    ends = time.monotonic() + seconds
    while time.monotonic() < ends:
        assert process.poll() is None, log.read_text()[-3000:]
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"not within {seconds} s: {log.read_text()[-3000:]}")


def stop(process: subprocess.Popen) -> int:
    process.send_signal(signal.SIGTERM)
    return process.wait(60)


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_demo_line_from_a_folder_and_over_mqtt(tmp_path, mosquitto):
    demo = tmp_path / "line-demo"
    shutil.copytree(ROOT / "examples", demo)
    made = subprocess.run([sys.executable, str(demo / "line" / "make_units.py"), str(demo / "line" / "units"),
                           "--count", "6"], capture_output=True, text=True, check=True)
    assert [line.split()[0] for line in made.stdout.splitlines()] == IDS
    status_port = free_port()
    config = demo / "line" / "folder.toml"
    config.write_text(config.read_text().replace("127.0.0.1:9310", f"127.0.0.1:{status_port}"))
    log = tmp_path / "folder.log"
    line = omni("line", str(config), stdout=log.open("wb"), stderr=subprocess.STDOUT)
    ledger = demo / "line" / "ledger.jsonl"
    try:
        decided = wait_for(lambda: len(ledger_records(ledger)) == 6 and ledger_records(ledger), 240, line, log)
        screen = subprocess.run([sys.executable, "-m", "api.cli.main", "line", str(config), "--status"], cwd=ROOT,
                                check=False, capture_output=True, text=True, timeout=60)
        assert screen.returncode == 0, screen.stderr
        assert "line cell-4" in screen.stdout and all(unit in screen.stdout for unit in IDS), screen.stdout
        metrics = httpx.get(f"http://127.0.0.1:{status_port}/metrics", timeout=10).text
        assert re.search(r'^omni_line_units_in_total\{source="[^"]+"\} 6\.0$', metrics, re.MULTILINE), metrics
        assert httpx.get(f"http://127.0.0.1:{status_port}/health", timeout=10).json()["status"] == "ok"
    finally:
        assert stop(line) == 0, log.read_text()[-3000:]
    assert sorted(r["unit_id"] for r in decided) == IDS
    # the answers are the engine's for the same files and template, under the same policy
    template = json.loads((demo / "inspection.json").read_text())
    policy = read_policy(demo / "line" / "policy.toml")
    engine = DecisionEngine(EngineConfig(torch_threads=1))
    for record in decided:
        folder = demo / "line" / "units" / record["unit_id"]
        parts = [Part(slot, (folder / name).read_bytes()) for slot, name in
                 (("images", "unit.png"), ("audio", "hum.wav"), ("videos", "fan.mp4"))]
        request = parse_request({**template, "id": record["unit_id"]}, engine.config, parts)
        expected = with_outcome(engine.decide(request), request, policy).to_wire()
        assert record["result"]["answers"] == expected["answers"]
        assert record["result"]["outcome"] == expected["x_outcome"]["overall"]
        assert record["result"]["x_outcome"] == expected["x_outcome"]
    # a restart decides nothing twice
    line = omni("line", str(config), "--quiet", stdout=log.open("ab"), stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: httpx.get(f"http://127.0.0.1:{status_port}/status", timeout=5).json()
                 ["duplicate_triggers"] == 6 if _up(status_port) else False, 240, line, log)
    finally:
        assert stop(line) == 0
    assert len(ledger_records(ledger)) == 6

    # the same units over MQTT
    config = demo / "line" / "mqtt.toml"
    status_port = free_port()
    config.write_text(config.read_text().replace("port = 1883", f"port = {mosquitto.port}")
                      .replace("127.0.0.1:9311", f"127.0.0.1:{status_port}"))
    seen: dict[str, tuple[str, dict]] = {}
    sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="example-sub")
    sub.on_connect = lambda c, *_: c.subscribe("factory/results/#", qos=1)
    sub.on_message = lambda _c, _u, m: seen.setdefault(json.loads(m.payload)["unit_id"],
                                                       (m.topic, json.loads(m.payload)))
    sub.connect("127.0.0.1", mosquitto.port)
    sub.loop_start()
    log = tmp_path / "mqtt.log"
    line = omni("line", str(config), stdout=log.open("wb"), stderr=subprocess.STDOUT)
    # the broker keeps the line's triggers from its first subscription on (a persistent session): wait for it
    wait_for(lambda: _up(status_port) and all(s["subscribed"] for s in httpx.get(
        f"http://127.0.0.1:{status_port}/status", timeout=5).json()["sources"].values()), 240, line, log)
    plc = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="example-plc")
    plc.connect("127.0.0.1", mosquitto.port)
    plc.loop_start()
    try:
        for unit in IDS:
            body = {"unit_id": unit, "files": [f"{unit}/unit.png", f"{unit}/hum.wav", f"{unit}/fan.mp4"]}
            plc.publish("factory/cell-4/ready", json.dumps(body), qos=1).wait_for_publish(10)
        plc.publish("factory/cell-4/ready", "not json", qos=1).wait_for_publish(10)
        wait_for(lambda: len(seen) == 7, 240, line, log)
    finally:
        assert stop(line) == 0, log.read_text()[-3000:]
        plc.loop_stop()
        sub.loop_stop()
    by_id = {r["unit_id"]: r["result"] for r in decided}
    for unit in IDS:
        topic, payload = seen[unit]
        assert topic == f"factory/results/cell-4/{payload['published_outcome']}"
        assert payload["answers"] == by_id[unit]["answers"]
    [bad] = [payload for unit, (_, payload) in seen.items() if unit not in IDS]
    assert bad["outcome"] == "error" and bad["error"]["status"] == 422 and "JSON" in json.dumps(bad["error"])


def _up(port: int) -> bool:
    try:
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
        return True
    except httpx.TransportError:
        return False
