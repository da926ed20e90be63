"""OPC UA for a line (asyncua): a PLC's trigger node as a source, result nodes as a sink. No security policy (the
line talks to the cell's own server); a user name and password when the server asks for them.

`[[source]] type = "opcua"`: `url` (opc.tcp://..., required), `node` (the trigger's NodeId, e.g.
"ns=2;s=Cell4.UnitReady", required: its String value is the unit id, "" for "no unit"), and exactly one of
`files_node` (a NodeId holding the unit's files, relative to the line's root, as a String array or a JSON list of
strings; the PLC writes it before `node`) or `files` (patterns under the root with "{unit_id}" filled in, e.g.
["{unit_id}/unit.png", "{unit_id}/hum.wav"]); `username`, `password_file`, `timeout_s` (5),
`publishing_interval_ms` (100). On every connect the source reads the node (a unit announced while the line was
down is not lost) and subscribes to its changes; each new non-empty value is a trigger, ready at the value's
SourceTimestamp. A value that is no unit id, a file outside the root or an unreadable `files_node` is that unit's
error (a bad unit id becomes "invalid-<hash>"). The same value twice in a row on one connection is one trigger.

`[[sink]] type = "opcua"`: `url`, `outcome_node` (required), `unit_node` (String: the unit id), `answers_node`
(String: JSON {question id: answer}), `result_node` (String: JSON of `Result.payload()`), `heartbeat_node` (a life
counter 1, 2, 3, ... wrapping after 2^31-1, written every `heartbeat_s` (1.0) to an integer node; a DateTime node gets
the UTC time instead), `username`, `password_file`, `timeout_s` (5). `send` writes unit, answers and result first and
the outcome LAST, so a PLC that watches the outcome reads a complete result; it returns once every write succeeded
and raises otherwise (the runner retries). Each value is written with its node's own data type. Outcome codes:

    1 pass   2 act   3 review   4 timeout (whatever its fallback; result_node says which)   5 overload   6 error
    7 decided (no policy outcome)

Both reconnect with `Backoff` when the server goes away or refuses them (the sink lazily, on the next write or
heartbeat). Knows nothing of the runner, the ledger or the model.
"""
from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from asyncua import Client, ua
from asyncua.client.ua_client import UaClientState

from api.line.config import LineContext
from api.line.config_reader import TableReader
from api.line.paths import OutsideRoot, unit_files
from api.line.ports import ERROR, OVERLOAD, TIMEOUT, Backoff, Emit, Result, Trigger, unit_id_problem

log = logging.getLogger(__name__)
COMMON_KEYS = ("type", "url", "username", "password_file", "timeout_s")
SOURCE_KEYS = (*COMMON_KEYS, "node", "files_node", "files", "publishing_interval_ms")
SINK_KEYS = (*COMMON_KEYS, "outcome_node", "unit_node", "answers_node", "result_node", "heartbeat_node",
             "heartbeat_s")
OUTCOME_CODES = {"pass": 1, "act": 2, "review": 3, TIMEOUT: 4, OVERLOAD: 5, ERROR: 6, "decided": 7}
SESSION_TIMEOUT_MS = 60_000                     # a session the line left behind is freed after a minute
PROBE_S = 1.0                                  # how often a quiet source checks its connection


class SinkFailed(RuntimeError):
    """The server did not take a result (not reachable, or a write was refused)."""


@dataclass(frozen=True)
class Endpoint:
    url: str
    username: str | None
    password: str | None = field(repr=False)
    timeout_s: float

    async def connect(self) -> Client:
        client = Client(self.url, timeout=self.timeout_s)
        client.session_timeout = SESSION_TIMEOUT_MS
        if self.username is not None:
            client.set_user(self.username)
        if self.password is not None:
            client.set_password(self.password)
        try:
            await asyncio.wait_for(client.connect(), self.timeout_s)
        except BaseException:
            client.disconnect_socket()          # a connect cut short by the timeout or a cancel leaves no socket
            raise
        return client


async def _disconnect(client: Client | None, timeout_s: float) -> None:
    if client is None:
        return
    try:
        await asyncio.wait_for(client.disconnect(), timeout_s)
    except Exception as exc:  # noqa: BLE001 (a connection already gone has nothing left to close)
        log.debug("disconnect: %s", exc)


def _endpoint(reader: TableReader, table: dict[str, Any], where: str) -> Endpoint:
    url = reader.string(table, "url", where)
    if not url.startswith("opc.tcp://"):
        raise reader.error(where, "url", f"{url!r} must be an opc.tcp:// URL")
    password = None
    if "password_file" in table:
        password = reader.path(table, "password_file", where, must_exist=True).read_text(encoding="utf-8").strip()
    return Endpoint(url=url, username=reader.string(table, "username", where, None), password=password,
                    timeout_s=reader.number(table, "timeout_s", where, 5.0, low=0.1, high=600))


def _node_id(reader: TableReader, table: dict[str, Any], key: str, where: str, required: bool = False) -> Any:
    value = reader.string(table, key, where) if required else reader.string(table, key, where, None)
    try:
        if value is not None:
            ua.NodeId.from_string(value)
    except Exception as exc:  # noqa: BLE001 (asyncua raises several kinds for a malformed NodeId)
        raise reader.error(where, key, f"{value!r} is not a NodeId like \"ns=2;s=Cell4.UnitReady\" ({exc})") from None
    return value


def _epoch(stamp: datetime | None) -> float:
    if stamp is None:
        return time.time()
    return (stamp if stamp.tzinfo else stamp.replace(tzinfo=timezone.utc)).timestamp()


# ---- the trigger source -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OpcUaSourceConfig:
    server: Endpoint
    node: str
    files_node: str | None
    files: tuple[str, ...]
    publishing_interval_ms: int

    def build(self, context: LineContext) -> OpcUaSource:
        return OpcUaSource(self, context.root)


def parse_source(reader: TableReader, table: dict[str, Any], where: str, context: LineContext) -> OpcUaSourceConfig:
    reader.no_unknown_keys(table, SOURCE_KEYS, where)
    server = _endpoint(reader, table, where)
    node = _node_id(reader, table, "node", where, required=True)
    if ("files" in table) == ("files_node" in table):
        raise reader.error(where, "files_node" if "files_node" in table else "files",
                           "give exactly one of files (patterns with {unit_id}) or files_node (a NodeId)")
    files = reader.strings(table, "files", where, ())
    if "files" in table and not files:
        raise reader.error(where, "files", "name at least one file, e.g. [\"{unit_id}/unit.png\"]")
    return OpcUaSourceConfig(server=server, node=node, files_node=_node_id(reader, table, "files_node", where),
                             files=files, publishing_interval_ms=reader.integer(
                                 table, "publishing_interval_ms", where, 100, low=10, high=60_000))


class _Unreadable(ValueError):
    """The unit's files_node holds no usable list of file names."""


class _Inbox:
    """The subscription's handler: every data change (a DataValue) and its end (None) into a queue."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[ua.DataValue | None] = asyncio.Queue()

    def datachange_notification(self, node: Any, val: Any, data: Any) -> None:
        self.queue.put_nowait(data.monitored_item.Value)

    def status_change_notification(self, status: Any) -> None:
        self.queue.put_nowait(None)


class OpcUaSource:
    def __init__(self, config: OpcUaSourceConfig, root: Path):
        self.config, self.root = config, root.resolve()
        self.name = f"opcua:{config.server.url}#{config.node}"
        self.counts = {"connected": 0, "reconnects": 0, "triggers": 0, "bad_triggers": 0}

    def stats(self) -> dict[str, float]:
        return dict(self.counts)

    async def run(self, emit: Emit) -> None:
        backoff, connected_before = Backoff(), False
        while True:
            client = None
            try:
                client = await self.config.server.connect()
                if connected_before:
                    self.counts["reconnects"] += 1
                    log.info("%s: reconnected", self.name)
                connected_before, self.counts["connected"] = True, 1
                backoff.reset()
                await self._watch(client, emit)
            except Exception as exc:  # noqa: BLE001 (a source never stops the line: it reconnects)
                log.warning("%s: %s; reconnecting", self.name, str(exc) or type(exc).__name__)
            finally:
                self.counts["connected"] = 0
                await _disconnect(client, self.config.server.timeout_s)
            await backoff.wait()

    async def _watch(self, client: Client, emit: Emit) -> None:
        """Emit the node's current value, then each change, until the connection is lost (raises)."""
        node, inbox = client.get_node(self.config.node), _Inbox()
        inbox.queue.put_nowait(await node.read_data_value())
        subscription = await client.create_subscription(self.config.publishing_interval_ms, inbox)
        await subscription.subscribe_data_change(node, queuesize=64)
        last: Any = object()
        while True:
            try:
                data = await asyncio.wait_for(inbox.queue.get(), PROBE_S)
            except asyncio.TimeoutError:
                await client.check_connection()
                await asyncio.wait_for(node.read_data_value(), self.config.server.timeout_s)
                continue
            if data is None:
                raise ConnectionError("the server ended the subscription")
            value = data.Value.Value if data.Value is not None else None
            if value == last:
                continue
            last = value
            if value is not None and value != "":
                await emit(await self._trigger(client, value, data.SourceTimestamp))

    async def _trigger(self, client: Client, value: Any, stamp: datetime | None) -> Trigger:
        self.counts["triggers"] += 1
        files: tuple[Path, ...] = ()
        problem = unit_id_problem(value)
        if problem is not None:
            unit_id = f"invalid-{hashlib.sha256(repr(value).encode()).hexdigest()[:12]}"
        else:
            unit_id = value
            try:
                files = unit_files(self.root, await self._names(client, unit_id))
            except (OutsideRoot, _Unreadable) as exc:
                problem = str(exc)
        if problem is not None:
            self.counts["bad_triggers"] += 1
            log.warning("%s: unit %s: %s", self.name, unit_id, problem)
        return Trigger(unit_id=unit_id, files=files, source=self.name, ready_wall_s=_epoch(stamp), problem=problem)

    async def _names(self, client: Client, unit_id: str) -> list[str]:
        if self.config.files_node is None:
            return [pattern.replace("{unit_id}", unit_id) for pattern in self.config.files]
        where = f"files_node {self.config.files_node}"
        try:
            value = await client.get_node(self.config.files_node).read_value()
        except ua.UaStatusCodeError as exc:
            if client.state is not UaClientState.CONNECTED:
                raise
            raise _Unreadable(f"{where} cannot be read ({exc})") from None
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                raise _Unreadable(f"{where}: {value[:80]!r} is not a JSON list of file names") from None
        if not isinstance(value, list) or not value or not all(isinstance(name, str) for name in value):
            raise _Unreadable(f"{where} must hold a non-empty String array (or JSON list) of file names")
        return value


# ---- the result sink --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class OpcUaSinkConfig:
    server: Endpoint
    outcome_node: str
    unit_node: str | None
    answers_node: str | None
    result_node: str | None
    heartbeat_node: str | None
    heartbeat_s: float

    def build(self, context: LineContext) -> OpcUaSink:
        return OpcUaSink(self)


def parse_sink(reader: TableReader, table: dict[str, Any], where: str, context: LineContext) -> OpcUaSinkConfig:
    reader.no_unknown_keys(table, SINK_KEYS, where)
    server = _endpoint(reader, table, where)
    nodes = {key: _node_id(reader, table, key, where)
             for key in ("unit_node", "answers_node", "result_node", "heartbeat_node")}
    outcome_node = _node_id(reader, table, "outcome_node", where, required=True)
    return OpcUaSinkConfig(server=server, outcome_node=outcome_node, **nodes,
                           heartbeat_s=reader.number(table, "heartbeat_s", where, 1.0, low=0.05, high=3600))


def outcome_code(result: Result) -> int:
    """The code `outcome_node` gets: the line's own outcome (timeout, overload, error) or the policy's."""
    return OUTCOME_CODES.get(result.outcome, OUTCOME_CODES[ERROR])


class OpcUaSink:
    def __init__(self, config: OpcUaSinkConfig):
        self.config = config
        self.name = f"opcua:{config.server.url}#{config.outcome_node}"
        self.counts = {"connected": 0, "reconnects": 0, "writes": 0, "write_failures": 0, "heartbeats": 0}
        self._client: Client | None = None
        self._types: dict[str, ua.VariantType] = {}
        self._connecting, self._sending = asyncio.Lock(), asyncio.Lock()
        self._connected_before = False
        self._heart: asyncio.Task[None] | None = None

    def stats(self) -> dict[str, float]:
        return dict(self.counts)

    async def start(self) -> None:
        """Begin connecting (and beating) in the background: a server that is down now is retried later."""
        self._heart = asyncio.create_task(self._beat(), name=f"{self.name} heartbeat")

    async def send(self, result: Result) -> None:
        answers = {key: value.get("answer") if isinstance(value, dict) else value
                   for key, value in result.answers.items()}
        writes = [(self.config.unit_node, result.unit_id), (self.config.answers_node, json.dumps(answers)),
                  (self.config.result_node, json.dumps(result.payload())),
                  (self.config.outcome_node, outcome_code(result))]          # the outcome last
        async with self._sending:
            try:
                client = await self._connected()
                for node_id, value in writes:
                    if node_id is not None:
                        await self._write(client, node_id, value)
            except Exception as exc:
                self.counts["write_failures"] += 1
                await self._drop(exc)
                raise SinkFailed(f"{self.name}: unit {result.unit_id} not written "
                                 f"({str(exc) or type(exc).__name__})") from exc
        self.counts["writes"] += 1

    async def close(self) -> None:
        if self._heart is not None:
            self._heart.cancel()
            await asyncio.gather(self._heart, return_exceptions=True)
            self._heart = None
        await self._drop(None)

    async def _connected(self) -> Client:
        async with self._connecting:
            if self._client is not None and self._client.state is UaClientState.CONNECTED:
                return self._client
            await self._drop(None)
            self._client = await self.config.server.connect()
            self._types.clear()                     # a restarted server may have made its nodes anew
            if self._connected_before:
                self.counts["reconnects"] += 1
                log.info("%s: reconnected", self.name)
            self._connected_before, self.counts["connected"] = True, 1
            return self._client

    async def _drop(self, exc: Exception | None) -> None:
        client, self._client, self.counts["connected"] = self._client, None, 0
        if client is not None and exc is not None:
            log.warning("%s: %s; reconnecting", self.name, str(exc) or type(exc).__name__)
        await _disconnect(client, self.config.server.timeout_s)

    async def _type(self, client: Client, node_id: str) -> ua.VariantType:
        if node_id not in self._types:                 # once per node and connection
            self._types[node_id] = await client.get_node(node_id).read_data_type_as_variant_type()
        return self._types[node_id]

    async def _write(self, client: Client, node_id: str, value: Any) -> None:
        variant = ua.Variant(value, await self._type(client, node_id))
        await asyncio.wait_for(client.get_node(node_id).write_value(ua.DataValue(variant)), self.config.server.timeout_s)

    async def _beat(self) -> None:
        """Keep connected; write the heartbeat every heartbeat_s. Failures back off and are tried again."""
        backoff, node_id = Backoff(), self.config.heartbeat_node
        while True:
            try:
                client = await self._connected()
                if node_id is not None:
                    clock = await self._type(client, node_id) is ua.VariantType.DateTime
                    count = (self.counts["heartbeats"] + 1) % 2**31
                    await self._write(client, node_id, datetime.now(timezone.utc) if clock else count)
                    self.counts["heartbeats"] += 1
                backoff.reset()
                delay = self.config.heartbeat_s
            except Exception as exc:  # noqa: BLE001 (the next send or beat reconnects)
                await self._drop(exc)
                delay = backoff.next_delay_s()
            await asyncio.sleep(delay)
