"""Exactly once through crashes: `omni line` killed with SIGKILL at random points during a stream of 500 units
triggered over MQTT (a real mosquitto broker), restarted each time; in the end every unit is decided in the ledger
exactly once and the MQTT sink delivered every unit id (at least once: the unit id is the idempotency key).

The kill points are drawn from a seeded RNG and always fall while units are being decided (after the ledger grew by
a random number of decisions since the start). Units carry one small photo so 500 decisions fit a test's time.
"""
from __future__ import annotations

import io
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import paho.mqtt.client as mqtt
from PIL import Image

from fixtures.mosquitto import free_port

ROOT = Path(__file__).resolve().parents[3]
UNITS = 500
KILLS = 4


def decided_ids(ledger: Path) -> list[str]:
    if not ledger.exists():
        return []
    ids = []
    for line in ledger.read_bytes().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue            # a torn last line, cut off by the next start
        if record.get("kind") == "decided":
            ids.append(record["unit_id"])
    return ids


def write_config(tmp_path: Path, port: int, status_port: int) -> Path:
    template = json.loads((ROOT / "examples" / "inspection.json").read_text())
    (tmp_path / "request.json").write_text(json.dumps(template))
    config = tmp_path / "line.toml"
    config.write_text(f"""
[line]
name = "crash"
root = "units"
ledger = "ledger.jsonl"
deadline_ms = 600000
max_queued_units = 1000
max_in_flight = 8

[request]
template = "request.json"

[model]
torch_threads = 1

[status]
listen = "127.0.0.1:{status_port}"

[[source]]
type = "mqtt"
port = {port}
topic = "crash/ready"

[[sink]]
type = "mqtt"
port = {port}
topic_prefix = "crash/results"
""")
    return config


def write_units(root: Path) -> None:
    for i in range(UNITS):
        folder = root / f"u{i:03d}"
        folder.mkdir(parents=True)
        buffer = io.BytesIO()
        Image.new("RGB", (64, 64), ((i * 37) % 256, (i * 91) % 256, (i * 13) % 256)).save(buffer, "PNG")
        (folder / "unit.png").write_bytes(buffer.getvalue())


class Collector:
    """A persistent-session QoS 1 subscriber to the results: the unit ids it saw, with repeats."""

    def __init__(self, port: int):
        self.seen: list[str] = []
        self.lock = threading.Lock()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="crash-collector", clean_session=False)
        self.client.on_connect = lambda c, *_: c.subscribe("crash/results/#", qos=1)
        self.client.on_message = self._message
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()

    def _message(self, _client, _userdata, message) -> None:
        with self.lock:
            self.seen.append(json.loads(message.payload)["unit_id"])

    def ids(self) -> list[str]:
        with self.lock:
            return list(self.seen)

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def publish_stream(port: int, stop: threading.Event) -> None:
    """The PLC: 500 triggers at about 50 a second, QoS 1 (the broker keeps them for the line while it is down)."""
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="crash-plc")
    client.connect("127.0.0.1", port)
    client.loop_start()
    for i in range(UNITS):
        if stop.is_set():
            break
        body = {"unit_id": f"u{i:03d}", "files": [f"u{i:03d}/unit.png"]}
        client.publish("crash/ready", json.dumps(body), qos=1).wait_for_publish(10)
        time.sleep(0.02)
    client.loop_stop()
    client.disconnect()


def start_line(config: Path, log: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "api.cli.main", "line", str(config), "--quiet"], cwd=ROOT,
                            stdout=log.open("ab"), stderr=subprocess.STDOUT, env=env)


def wait_subscribed(status_port: int, line: subprocess.Popen, log: Path) -> None:
    """Until the line's first subscription is in (its persistent session exists): a trigger published before the line
    ever connected is not kept for it."""
    ends = time.monotonic() + 180
    while time.monotonic() < ends:
        assert line.poll() is None, log.read_text()[-3000:]
        try:
            sources = httpx.get(f"http://127.0.0.1:{status_port}/status", timeout=2).json()["sources"]
            if sources and all(source["subscribed"] for source in sources.values()):
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"the line did not subscribe: {log.read_text()[-3000:]}")


def test_kill_9_at_random_points_every_unit_decided_once_and_delivered(tmp_path, mosquitto):
    rng = random.Random(35)
    status_port = free_port()
    config = write_config(tmp_path, mosquitto.port, status_port)
    write_units(tmp_path / "units")
    ledger, log = tmp_path / "ledger.jsonl", tmp_path / "line.log"
    collector = Collector(mosquitto.port)
    line = start_line(config, log)
    wait_subscribed(status_port, line, log)      # the broker keeps the line's triggers from then on
    stop = threading.Event()
    plc = threading.Thread(target=publish_stream, args=(mosquitto.port, stop), daemon=True)
    plc.start()
    kills = []
    try:
        for _ in range(KILLS):
            before = len(decided_ids(ledger))
            goal = before + rng.randint(5, 60)
            ends = time.monotonic() + 180
            while len(decided_ids(ledger)) < goal and time.monotonic() < ends and line.poll() is None:
                time.sleep(rng.uniform(0.005, 0.05))
            assert line.poll() is None, log.read_text()[-3000:]
            line.send_signal(signal.SIGKILL)
            line.wait(30)
            kills.append(len(decided_ids(ledger)))
            line = start_line(config, log)
        ends = time.monotonic() + 300
        while time.monotonic() < ends and (len(set(decided_ids(ledger))) < UNITS
                                           or len(set(collector.ids())) < UNITS):
            assert line.poll() is None, log.read_text()[-3000:]
            time.sleep(0.2)
    finally:
        stop.set()
        line.send_signal(signal.SIGTERM)
        try:
            line.wait(60)
        except subprocess.TimeoutExpired:
            line.kill()
        collector.close()
    decided = decided_ids(ledger)
    expected = {f"u{i:03d}" for i in range(UNITS)}
    assert len(kills) == KILLS and kills == sorted(kills) and kills[-1] < UNITS, kills
    assert sorted(decided) == sorted(expected), (len(decided), len(set(decided)))      # each exactly once
    assert set(collector.ids()) == expected                                           # none lost on the sink
    print(f"kills after {kills} decided; sink deliveries {len(collector.ids())} for {UNITS} units")
