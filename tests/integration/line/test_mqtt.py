"""MQTT for a line against a real broker (Debian's mosquitto): triggers in, results out, QoS 1 both ways; a message
acknowledged only when the line says so is delivered again after a crash; both sides come back after the broker
restarts; a bad message is that unit's problem, never dropped."""
from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest

from api.line.config import LineContext
from api.line.config_reader import TableReader
from api.line.mqtt import MqttSink, MqttSource, SinkFailed, parse_sink, parse_source
from api.line.ports import LineError, Result, Trigger
from omni.contract.toml_text import load_toml
from tests.threads import asyncio_run

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 64


def part(root: Path, kind: str, keys: str) -> Any:
    text = f"[[{kind}]]\n{keys}"
    table = load_toml(text)[kind][0]
    parse = parse_source if kind == "source" else parse_sink
    return parse(TableReader(text, "line.toml", root.parent), table, f"{kind}[0]", LineContext("cell-4", root))


@pytest.fixture
def root(tmp_path) -> Path:
    path = tmp_path / "units"
    for unit in ("4711", "4712"):
        (path / unit).mkdir(parents=True)
        (path / unit / "unit.png").write_bytes(PNG)
    return path


def publish(port: int, topic: str, payloads: list[bytes | str]) -> None:
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"test-plc-{time.monotonic_ns()}")
    client.connect("127.0.0.1", port)
    client.loop_start()
    for payload in payloads:
        client.publish(topic, payload, qos=1).wait_for_publish(10)
    client.loop_stop()
    client.disconnect()


async def until(check: Callable[[], bool], seconds: float = 20.0) -> None:
    ends = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < ends, "not within the bound"
        await asyncio.sleep(0.02)


def run_source(source: MqttSource, act: Callable[[], None], count: int, ack: bool = True) -> list[Trigger]:
    """Run the source until it is subscribed, `act` (in a thread), collect `count` triggers (acked when `ack`)."""
    seen: list[Trigger] = []

    async def emit(trigger: Trigger) -> None:
        seen.append(trigger)
        if ack and trigger.ack is not None:
            await trigger.ack()

    async def main() -> None:
        task = asyncio.create_task(source.run(emit))
        await until(lambda: source.stats()["subscribed"] == 1)
        await asyncio.to_thread(act)
        await until(lambda: len(seen) >= count)
        await asyncio.sleep(0.3)                      # nothing more comes
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio_run(main())
    return seen


def test_a_message_names_a_unit_and_its_files_and_a_bad_one_is_that_units_problem(root, mosquitto):
    config = part(root, "source", f'type = "mqtt"\nport = {mosquitto.port}\ntopic = "t1/ready"\n'
                                  "max_message_bytes = 1024\n")
    good = {"unit_id": "4711", "files": ["4711/unit.png"], "state": {"station": 4}, "ready_at": "2026-12-04T10:00:00Z"}
    bad = ["not json", json.dumps([1]), json.dumps({"unit_id": "a b", "files": ["4711/unit.png"]}),
           json.dumps({"unit_id": "4712", "files": ["../../etc/passwd"]}),
           json.dumps({"unit_id": "4712", "files": []}),
           json.dumps({"unit_id": "4712", "files": ["4712/unit.png"], "colour": 1}),
           json.dumps({"unit_id": "4712", "files": ["4712/missing.png"]}),
           json.dumps({"unit_id": "4712", "files": ["4712/unit.png"], "pad": "x" * 2000})]
    source = config.build(LineContext("cell-4", root))
    seen = run_source(source, lambda: publish(mosquitto.port, "t1/ready", [json.dumps(good), *bad]), 1 + len(bad))
    first = seen[0]
    assert first.unit_id == "4711" and first.problem is None and first.state == {"station": 4}
    assert first.files == ((root / "4711" / "unit.png").resolve(),)
    assert first.ready_wall_s == 1796378400.0
    problems = [trigger.problem or "" for trigger in seen[1:]]
    assert "not JSON" in problems[0] and "a JSON object" in problems[1]
    assert "unit_id: unit id 'a b' must be" in problems[2]
    assert "'..' is not allowed" in problems[3] and "non-empty list" in problems[4]
    assert "unknown field(s) colour" in problems[5] and "no such file" in problems[6]
    assert "max_message_bytes is 1024" in problems[7]
    assert seen[1].unit_id.startswith("invalid-") and seen[4].unit_id == "4712"
    assert all(not trigger.files for trigger in seen[1:])
    assert source.stats()["triggers"] == 9 and source.stats()["bad_triggers"] == 8


def test_a_message_not_acknowledged_is_delivered_again_and_an_acknowledged_one_is_not(root, mosquitto):
    keys = f'type = "mqtt"\nport = {mosquitto.port}\ntopic = "t2/ready"\n'
    config = part(root, "source", keys)
    message = json.dumps({"unit_id": "4711", "files": ["4711/unit.png"]})
    first = run_source(config.build(LineContext("cell-4", root)), lambda: publish(mosquitto.port, "t2/ready",
                                                                                  [message]), 1, ack=False)
    assert [t.unit_id for t in first] == ["4711"]
    # "the crash": the line never acknowledged it; the broker delivers it again to the same session
    again = run_source(config.build(LineContext("cell-4", root)), lambda: None, 1, ack=True)
    assert [t.unit_id for t in again] == ["4711"]
    # acknowledged now: a new session of the same client sees nothing but the next message
    after = run_source(config.build(LineContext("cell-4", root)), lambda: publish(
        mosquitto.port, "t2/ready", [json.dumps({"unit_id": "4712", "files": ["4712/unit.png"]})]), 1)
    assert [t.unit_id for t in after] == ["4712"]


def result(unit_id: str, outcome: str, fallback: str | None = None) -> Result:
    return Result(line="cell-4", unit_id=unit_id, outcome=outcome, answers={"label_visible": {"answer": False}},
                  x_outcome={"overall": outcome}, latency_ms=12.5, decided_at="2026-12-04T10:00:00Z", source="t",
                  fallback=fallback)


class Subscriber:
    def __init__(self, port: int, topic: str):
        self.seen: list[tuple[str, dict]] = []
        self.lock = threading.Lock()
        self.client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"test-sub-{time.monotonic_ns()}")
        self.subscribed = threading.Event()          # set on each SUBACK: after a reconnect, wait for it
        self.client.on_connect = lambda c, *_: c.subscribe(topic, qos=1)
        self.client.on_subscribe = lambda *_: self.subscribed.set()
        self.client.on_message = self._message
        self.client.connect("127.0.0.1", port)
        self.client.loop_start()
        assert self.subscribed.wait(30)

    def reconnect(self) -> None:
        self.subscribed.clear()
        self.client.reconnect()
        assert self.subscribed.wait(30)

    def _message(self, _client, _userdata, message) -> None:
        with self.lock:
            self.seen.append((message.topic, json.loads(message.payload)))

    def close(self) -> None:
        self.client.loop_stop()
        self.client.disconnect()


def test_results_go_to_a_topic_per_line_and_outcome_and_the_sink_survives_a_broker_restart(root, mosquitto):
    sink: MqttSink = part(root, "sink", f'type = "mqtt"\nport = {mosquitto.port}\ntopic_prefix = "plant/results"\n'
                                        "timeout_s = 2\n").build(LineContext("cell-4", root))
    subscriber = Subscriber(mosquitto.port, "plant/results/#")
    outcomes: dict[str, Any] = {}

    async def main() -> None:
        await sink.start()
        await until(lambda: sink.stats()["connected"] == 1)
        await sink.send(result("4711", "act"))
        await sink.send(result("4712", "timeout", fallback="review"))
        await asyncio.to_thread(mosquitto.stop)
        await until(lambda: sink.stats()["connected"] == 0)
        with pytest.raises(SinkFailed, match="not connected"):
            await sink.send(result("4713", "pass"))
        await asyncio.to_thread(mosquitto.start)
        await until(lambda: sink.stats()["connected"] == 1, seconds=60)     # paho's backoff: 1 s, 2 s, ...
        await asyncio.to_thread(subscriber.reconnect)
        await sink.send(result("4713", "pass"))
        outcomes.update(sink.stats())
        await sink.close()

    try:
        asyncio_run(main())
        ends = time.monotonic() + 20                  # the broker's delivery to the subscriber, after the PUBACK
        while len({payload["unit_id"] for _, payload in subscriber.seen}) < 3 and time.monotonic() < ends:
            time.sleep(0.05)
    finally:
        subscriber.close()
    by_unit = {payload["unit_id"]: (topic, payload) for topic, payload in subscriber.seen}
    assert by_unit["4711"][0] == "plant/results/cell-4/act"
    assert by_unit["4712"][0] == "plant/results/cell-4/review" and by_unit["4712"][1]["outcome"] == "timeout"
    assert by_unit["4713"][0] == "plant/results/cell-4/pass"
    assert by_unit["4711"][1] == result("4711", "act").payload()
    assert outcomes["published"] == 3 and outcomes["failed"] == 1 and outcomes["reconnects"] >= 1


def test_the_source_comes_back_after_the_broker_restarts(root, mosquitto):
    source = part(root, "source", f'type = "mqtt"\nport = {mosquitto.port}\ntopic = "t3/ready"\n').build(
        LineContext("cell-4", root))

    def act() -> None:
        mosquitto.restart()
        ends = time.monotonic() + 60
        while source.stats()["subscribed"] != 1 and time.monotonic() < ends:
            time.sleep(0.05)
        publish(mosquitto.port, "t3/ready", [json.dumps({"unit_id": "4712", "files": ["4712/unit.png"]})])

    seen = run_source(source, act, 1)
    assert [t.unit_id for t in seen] == ["4712"] and source.stats()["reconnects"] >= 1


@pytest.mark.parametrize(("kind", "keys", "expected"), [
    ("source", 'type = "mqtt"\n', "source[0].topic (line 1): required"),
    ("source", 'type = "mqtt"\ntopic = "a/#/b"\n', "source[0].topic (line 3): 'a/#/b' a wildcard"),
    ("source", 'type = "mqtt"\ntopic = "a"\nport = 70000\n', "source[0].port (line 4): must be an integer 1..65535"),
    ("source", 'type = "mqtt"\ntopic = "a"\nqos = 2\n', "source[0].qos (line 4): unknown key"),
    ("source", 'type = "mqtt"\ntopic = "a"\npassword_file = "nope"\n', "source[0].password_file (line 4):"),
    ("sink", 'type = "mqtt"\ntopic_prefix = "a/+"\n', "sink[0].topic_prefix (line 3): 'a/+' must not hold"),
    ("sink", 'type = "mqtt"\ntimeout_s = 0\n', "sink[0].timeout_s (line 3): must be a number"),
])
def test_a_mistake_in_an_mqtt_table_names_its_key(root, kind, keys, expected):
    with pytest.raises(LineError) as caught:
        part(root, kind, keys)
    assert expected in str(caught.value), str(caught.value)
