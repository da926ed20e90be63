"""MQTT for a line (paho-mqtt, the Eclipse client): a trigger topic as a source, result topics as a sink. QoS 1 both ways.

`[[source]] type = "mqtt"`: `host` (127.0.0.1), `port` (1883), `topic` (required; wildcards allowed), `client_id`
(default `omni-line-<line>-<topic hash>`: stable, so the broker keeps the session and its queued triggers while the
line is down), `username`, `password_file`, `keepalive_s` (30), `max_message_bytes` (65536). A trigger is a JSON
object:

    {"unit_id": "4711", "files": ["4711/unit.png", "4711/hum.wav"], "state": {...}, "ready_at": 1733300000.5}

(`files` relative to the line's root; `state` optional, replacing the template's; `ready_at` optional, epoch seconds
or ISO 8601, for the source-lag figure). The session is persistent (clean_session false) and every message is
acknowledged by hand only once the line's ledger holds the unit's fate: a message the line never recorded (a crash,
kill -9) is delivered again by the broker. A message that is not JSON, too large, without a usable unit id or naming
files outside the root is that unit's error (a unit id made from the message's hash when it has none).

`[[sink]] type = "mqtt"`: `host`, `port`, `client_id`, `username`, `password_file`, `keepalive_s` as above,
`topic_prefix` ("omni/line"), `timeout_s` (10). Each result is `Result.payload()` as JSON on
`<topic_prefix>/<line>/<published outcome>` (act, review, pass, timeout's fallback, overload, error), QoS 1, not
retained; `send` returns once the broker's PUBACK is in, and raises (the runner retries) when it is not.

Both reconnect by themselves with paho's capped exponential backoff (1 s .. 30 s) when the broker goes away or
refuses them. Knows nothing of the runner, the ledger, the model or the other transports.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt

from api.line.config import LineContext
from api.line.config_reader import TableReader
from api.line.paths import OutsideRoot, unit_files
from api.line.ports import Emit, Result, Trigger, unit_id_problem

log = logging.getLogger(__name__)
COMMON_KEYS = ("type", "host", "port", "client_id", "username", "password_file", "keepalive_s")
SOURCE_KEYS = (*COMMON_KEYS, "topic", "max_message_bytes")
SINK_KEYS = (*COMMON_KEYS, "topic_prefix", "timeout_s")
RECONNECT_MIN_S, RECONNECT_MAX_S = 1, 30


class SinkFailed(RuntimeError):
    """The broker did not take a result (not connected, or no PUBACK within timeout_s)."""


@dataclass(frozen=True)
class Broker:
    host: str
    port: int
    client_id: str
    username: str | None
    password: str | None
    keepalive_s: int

    def client(self, clean_session: bool, manual_ack: bool) -> mqtt.Client:
        client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=self.client_id,
                             clean_session=clean_session, manual_ack=manual_ack)
        if self.username is not None:
            client.username_pw_set(self.username, self.password)
        client.reconnect_delay_set(RECONNECT_MIN_S, RECONNECT_MAX_S)
        return client

    def start(self, client: mqtt.Client, name: str, counts: dict[str, int],
              on_up: Callable[[mqtt.Client], None] | None = None) -> None:
        """Connect in paho's own thread, which reconnects with backoff; keep `counts` (connected, connects,
        reconnects, refused; `subscribed` back to 0 when the connection goes) and log each change; `on_up` runs on
        each accepted connection."""
        def on_connect(client: mqtt.Client, _userdata: Any, _flags: Any, reason: Any, _properties: Any) -> None:
            if reason.is_failure:
                counts["refused"] += 1
                log.warning("%s: the broker refused the connection (%s); trying again", name, reason)
                return
            counts["reconnects" if counts["connects"] else "connects"] += 1
            counts["connected"] = 1
            if on_up is not None:
                on_up(client)

        def on_disconnect(_client: mqtt.Client, _userdata: Any, _flags: Any, reason: Any, _properties: Any) -> None:
            if counts["connected"]:
                log.warning("%s: disconnected (%s); reconnecting", name, reason)
            counts["connected"] = 0
            if "subscribed" in counts:
                counts["subscribed"] = 0

        client.on_connect, client.on_disconnect = on_connect, on_disconnect
        client.connect_async(self.host, self.port, self.keepalive_s)
        client.loop_start()


def _broker(reader: TableReader, table: dict[str, Any], where: str, default_id: str) -> Broker:
    password = None
    if "password_file" in table:
        password = reader.path(table, "password_file", where, must_exist=True).read_text(encoding="utf-8").strip()
    client_id = reader.string(table, "client_id", where, default_id)
    if not 1 <= len(client_id) <= 128:
        raise reader.error(where, "client_id", "must be 1-128 characters")
    return Broker(host=reader.string(table, "host", where, "127.0.0.1"),
                  port=reader.integer(table, "port", where, 1883, low=1, high=65535), client_id=client_id,
                  username=reader.string(table, "username", where, None), password=password,
                  keepalive_s=reader.integer(table, "keepalive_s", where, 30, low=5, high=3600))


def _topic_problem(topic: str, wildcards: bool) -> str | None:
    if not topic or len(topic.encode()) > 65535 or "\x00" in topic:
        return "must be a non-empty MQTT topic"
    if not wildcards and ("+" in topic or "#" in topic):
        return "must not hold the wildcards + or #"
    if wildcards and any(("#" in level and level != "#") or ("+" in level and level != "+")
                         for level in topic.split("/")) or ("#" in topic and not topic.endswith("#")):
        return "a wildcard (+ or #) must fill a whole level, and # be the last"
    return None


# ---- the trigger source -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MqttSourceConfig:
    broker: Broker
    topic: str
    max_message_bytes: int

    def build(self, context: LineContext) -> MqttSource:
        return MqttSource(self, context.root)


def parse_source(reader: TableReader, table: dict[str, Any], where: str, context: LineContext) -> MqttSourceConfig:
    reader.no_unknown_keys(table, SOURCE_KEYS, where)
    topic = reader.string(table, "topic", where)
    if (problem := _topic_problem(topic, wildcards=True)) is not None:
        raise reader.error(where, "topic", f"{topic!r} {problem}")
    default_id = f"omni-line-{context.line}-{hashlib.sha256(topic.encode()).hexdigest()[:8]}"
    return MqttSourceConfig(broker=_broker(reader, table, where, default_id), topic=topic,
                            max_message_bytes=reader.integer(table, "max_message_bytes", where, 65536, low=64,
                                                             high=16 * 1024 * 1024))


class MqttSource:
    def __init__(self, config: MqttSourceConfig, root: Path):
        self.config, self.root = config, root.resolve()
        self.name = f"mqtt:{config.broker.host}:{config.broker.port}/{config.topic}"
        self.counts = {"connected": 0, "subscribed": 0, "connects": 0, "reconnects": 0, "triggers": 0,
                       "bad_triggers": 0, "refused": 0}

    def stats(self) -> dict[str, float]:
        return dict(self.counts)

    async def run(self, emit: Emit) -> None:
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[mqtt.MQTTMessage] = asyncio.Queue()
        client = self.config.broker.client(clean_session=False, manual_ack=True)
        client.on_subscribe = self._on_subscribe

        def on_message(_client: mqtt.Client, _userdata: Any, message: mqtt.MQTTMessage) -> None:
            loop.call_soon_threadsafe(inbox.put_nowait, message)

        client.on_message = on_message
        self.config.broker.start(client, self.name, self.counts, on_up=self._subscribe)
        try:
            while True:
                message = await inbox.get()
                await emit(self._trigger(client, message))
        finally:
            client.loop_stop()
            client.disconnect()
            self.counts["connected"] = 0

    def _subscribe(self, client: mqtt.Client) -> None:
        log.info("%s: connected; subscribing (QoS 1)", self.name)
        client.subscribe(self.config.topic, qos=1)

    def _on_subscribe(self, _client: mqtt.Client, _userdata: Any, _mid: Any, reasons: Any, _properties: Any) -> None:
        if any(reason.is_failure for reason in reasons):
            log.warning("%s: the broker refused the subscription (%s)", self.name, reasons)
            return
        self.counts["subscribed"] = 1      # from here on the broker keeps this session's triggers

    def _trigger(self, client: mqtt.Client, message: mqtt.MQTTMessage) -> Trigger:
        self.counts["triggers"] += 1
        mid, qos = message.mid, message.qos

        async def ack() -> None:
            if qos > 0:
                client.ack(mid, qos)

        unit_id, fields, problem = self._parse(bytes(message.payload))
        files: tuple[Path, ...] = ()
        if problem is None:
            try:
                files = unit_files(self.root, fields["files"])
            except OutsideRoot as exc:
                problem = str(exc)
        if problem is not None:
            self.counts["bad_triggers"] += 1
            log.warning("%s: message on %s: %s", self.name, message.topic, problem)
        return Trigger(unit_id=unit_id, files=files if problem is None else (), source=self.name,
                       ready_wall_s=_ready_at(fields.get("ready_at")), state=fields.get("state"), problem=problem,
                       ack=ack)

    def _parse(self, payload: bytes) -> tuple[str, dict[str, Any], str | None]:
        fallback_id = f"invalid-{hashlib.sha256(payload).hexdigest()[:12]}"
        if len(payload) > self.config.max_message_bytes:
            return fallback_id, {}, (f"the message has {len(payload)} bytes; max_message_bytes is "
                                     f"{self.config.max_message_bytes}")
        try:
            body = json.loads(payload)
        except (ValueError, UnicodeDecodeError) as exc:
            return fallback_id, {}, f"the message is not JSON ({exc})"
        if not isinstance(body, dict):
            return fallback_id, {}, "the message must be a JSON object with unit_id and files"
        unknown = sorted(set(body) - {"unit_id", "files", "state", "ready_at"})
        unit_id = body.get("unit_id")
        if (problem := unit_id_problem(unit_id)) is not None:
            return fallback_id, {}, f"unit_id: {problem}"
        assert isinstance(unit_id, str)
        files = body.get("files")
        if unknown:
            return unit_id, {}, f"unknown field(s) {', '.join(unknown)}; a trigger has unit_id, files, state, ready_at"
        if not isinstance(files, list) or not files or not all(isinstance(name, str) for name in files):
            return unit_id, {}, "files: must be a non-empty list of file names under the line's root"
        ready_at = body.get("ready_at")
        if ready_at is not None and _parse_ready_at(ready_at) is None:
            return unit_id, {}, f"ready_at: {ready_at!r} is neither epoch seconds nor an ISO 8601 time"
        return unit_id, body, None


def _parse_ready_at(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if value > 0 else None
    if isinstance(value, str):
        try:
            stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return stamp.timestamp() if stamp.tzinfo else None
    return None


def _ready_at(value: Any) -> float:
    parsed = _parse_ready_at(value) if value is not None else None
    return parsed if parsed is not None else time.time()


# ---- the result sink --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MqttSinkConfig:
    broker: Broker
    topic_prefix: str
    timeout_s: float

    def build(self, context: LineContext) -> MqttSink:
        return MqttSink(self, context.line)


def parse_sink(reader: TableReader, table: dict[str, Any], where: str, context: LineContext) -> MqttSinkConfig:
    reader.no_unknown_keys(table, SINK_KEYS, where)
    prefix = reader.string(table, "topic_prefix", where, "omni/line").rstrip("/")
    if (problem := _topic_problem(prefix, wildcards=False)) is not None:
        raise reader.error(where, "topic_prefix", f"{prefix!r} {problem}")
    default_id = f"omni-line-{context.line}-results-{hashlib.sha256(prefix.encode()).hexdigest()[:8]}"
    return MqttSinkConfig(broker=_broker(reader, table, where, default_id), topic_prefix=prefix,
                          timeout_s=reader.number(table, "timeout_s", where, 10.0, low=0.1, high=600))


class MqttSink:
    def __init__(self, config: MqttSinkConfig, line: str):
        self.config, self.line = config, line
        self.name = f"mqtt:{config.broker.host}:{config.broker.port}/{config.topic_prefix}"
        self.counts = {"connected": 0, "connects": 0, "reconnects": 0, "refused": 0, "published": 0, "failed": 0}
        self._client: mqtt.Client | None = None

    def stats(self) -> dict[str, float]:
        return dict(self.counts)

    def topic(self, result: Result) -> str:
        return f"{self.config.topic_prefix}/{self.line}/{result.published_outcome()}"

    async def start(self) -> None:
        client = self.config.broker.client(clean_session=True, manual_ack=False)
        self.config.broker.start(client, self.name, self.counts)
        self._client = client

    async def send(self, result: Result) -> None:
        client = self._client
        if client is None or not self.counts["connected"]:
            self.counts["failed"] += 1
            raise SinkFailed(f"{self.name}: not connected to the broker")
        info = client.publish(self.topic(result), json.dumps(result.payload()), qos=1)
        try:
            await asyncio.to_thread(info.wait_for_publish, self.config.timeout_s)
        except (RuntimeError, ValueError) as exc:        # paho: not connected, or its queue is full
            self.counts["failed"] += 1
            raise SinkFailed(f"{self.name}: unit {result.unit_id} not published ({exc})") from None
        if not info.is_published():
            self.counts["failed"] += 1
            raise SinkFailed(f"{self.name}: no PUBACK for unit {result.unit_id} within {self.config.timeout_s:g} s")
        self.counts["published"] += 1

    async def close(self) -> None:
        if self._client is not None:
            self._client.loop_stop()
            self._client.disconnect()
            self._client = None
        self.counts["connected"] = 0
