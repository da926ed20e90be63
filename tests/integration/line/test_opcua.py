"""The OPC UA source and sink against a real asyncua server started in the test (127.0.0.1, a free port), with the
cell's nodes: UnitReady (the trigger), Files / FilesJson (a unit's files), Outcome, Unit, Answers, Result, Heartbeat.

Every scenario runs under a hard bound (`BOUND_S`) and waits by polling, never by timing."""
from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from asyncua import Server, ua
from asyncua.common.callback import CallbackType

from api.line.config import LineContext
from api.line.config_reader import TableReader
from api.line.opcua import OpcUaSink, OpcUaSource, SinkFailed, parse_sink, parse_source
from api.line.ports import LineError, Result, Trigger
from omni.contract.toml_text import load_toml
from tests.threads import asyncio_run

BOUND_S = 40.0
NODES = {"UnitReady": ("", ua.VariantType.String), "Files": ([], ua.VariantType.String),
         "FilesJson": ("", ua.VariantType.String), "Outcome": (0, ua.VariantType.Int32),
         "Unit": ("", ua.VariantType.String), "Answers": ("", ua.VariantType.String),
         "Result": ("", ua.VariantType.String), "Heartbeat": (0, ua.VariantType.Int64)}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def bounded(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run one scenario in its own event loop, failing (not hanging) after BOUND_S."""
    asyncio_run(asyncio.wait_for(scenario(), BOUND_S))


async def until(predicate: Callable[[], Any], what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened within {timeout_s:g} s: {what}")
        await asyncio.sleep(0.05)


class Plc:
    """A real OPC UA server holding the cell's nodes; `written` lists the nodes clients wrote, in order."""

    def __init__(self, port: int):
        self.port, self.url = port, f"opc.tcp://127.0.0.1:{port}/"
        self.server: Server | None = None
        self.nodes: dict[str, Any] = {}
        self.written: list[str] = []
        self.ns = 2

    async def prepare(self, **values: Any) -> Plc:
        server = Server()
        await server.init()
        server.set_endpoint(self.url)
        self.ns = await server.register_namespace("urn:omni:test:cell-4")
        for name, (value, vtype) in NODES.items():
            value = values.get(name, value)
            node = await server.nodes.objects.add_variable(ua.NodeId(f"Cell4.{name}", self.ns), name,
                                                           ua.Variant(value, vtype))
            await node.set_writable()
            self.nodes[name] = node
        server.subscribe_server_callback(CallbackType.PostWrite, self._written)
        self.server = server
        return self

    async def start(self, **values: Any) -> Plc:
        if self.server is None:
            await self.prepare(**values)
        assert self.server is not None
        await self.server.start()
        return self

    async def stop(self) -> None:
        if self.server is not None:
            server, self.server = self.server, None
            await server.stop()

    def node_id(self, name: str) -> str:
        return f"ns={self.ns};s=Cell4.{name}"

    async def set(self, name: str, value: Any) -> None:
        await self.nodes[name].write_value(ua.Variant(value, NODES[name][1]))

    async def get(self, name: str) -> Any:
        return await self.nodes[name].read_value()

    async def _written(self, event: Any, _dispatcher: Any) -> None:
        if event.is_external:
            self.written.extend(str(item.NodeId.Identifier).removeprefix("Cell4.")
                                for item in event.request_params.NodesToWrite)


class Collect:
    def __init__(self) -> None:
        self.triggers: list[Trigger] = []

    async def __call__(self, trigger: Trigger) -> None:
        self.triggers.append(trigger)

    def ids(self) -> list[str]:
        return [trigger.unit_id for trigger in self.triggers]


def reader_and_table(tmp_path: Path, text: str, kind: str) -> tuple[TableReader, dict[str, Any]]:
    return TableReader(text, "t.toml", tmp_path), load_toml(text)[kind][0]


def source_of(tmp_path: Path, root: Path, text: str) -> OpcUaSource:
    reader, table = reader_and_table(tmp_path, "[[source]]\ntype = \"opcua\"\n" + text, "source")
    source = parse_source(reader, table, "source[0]", LineContext("cell-4", root)).build(LineContext("cell-4", root))
    assert isinstance(source, OpcUaSource)
    return source


def sink_of(tmp_path: Path, root: Path, text: str) -> OpcUaSink:
    reader, table = reader_and_table(tmp_path, "[[sink]]\ntype = \"opcua\"\n" + text, "sink")
    sink = parse_sink(reader, table, "sink[0]", LineContext("cell-4", root)).build(LineContext("cell-4", root))
    assert isinstance(sink, OpcUaSink)
    return sink


def unit(root: Path, unit_id: str, *names: str) -> tuple[Path, ...]:
    (root / unit_id).mkdir(parents=True, exist_ok=True)
    for name in names:
        (root / unit_id / name).write_bytes(b"x")
    return tuple((root / unit_id / name).resolve() for name in names)


async def running(source: OpcUaSource, emit: Collect) -> asyncio.Task[None]:
    return asyncio.create_task(source.run(emit))


async def stop_task(task: asyncio.Task[None]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


RESULT = Result(line="cell-4", unit_id="4711", outcome="act", answers={"label_visible": {"answer": False}},
                x_outcome={"overall": "act"}, latency_ms=12.0, decided_at="2026-12-04T10:00:00Z", source="t")


# ---- the source -------------------------------------------------------------------------------------------------
def test_a_unit_on_the_trigger_node_is_a_trigger_with_its_files_and_one_set_before_connecting_too(tmp_path):
    root = tmp_path / "units"
    early, late, next_one = unit(root, "4700", "unit.png", "hum.wav"), unit(root, "4711", "unit.png", "hum.wav"), \
        unit(root, "4712", "unit.png", "hum.wav")

    async def scenario() -> None:
        plc = await Plc(free_port()).start(UnitReady="4700")           # announced while the line was down
        source = source_of(tmp_path, root, f'url = "{plc.url}"\nnode = "{plc.node_id("UnitReady")}"\n'
                                           'files = ["{unit_id}/unit.png", "{unit_id}/hum.wav"]\n')
        emit = Collect()
        task = await running(source, emit)
        try:
            await until(lambda: emit.ids() == ["4700"], "the unit present before the source connected")
            assert emit.triggers[0].files == early and emit.triggers[0].problem is None
            await plc.set("UnitReady", "4711")
            await until(lambda: len(emit.triggers) == 2, "the unit written to UnitReady")
            await plc.set("UnitReady", "")                             # "no unit": no trigger
            await plc.set("UnitReady", "4712")
            await until(lambda: len(emit.triggers) >= 3, "the next unit")
        finally:
            await stop_task(task)
            await plc.stop()
        _, second, third = emit.triggers[:3]
        assert emit.ids() == ["4700", "4711", "4712"]
        assert second.files == late and third.files == next_one and all(path.is_absolute() for path in late)
        assert second.problem is None and second.source == source.name == f"opcua:{plc.url}#{plc.node_id('UnitReady')}"
        assert abs(second.ready_wall_s - time.time()) < 600          # the value's SourceTimestamp, as epoch seconds
        assert source.stats() == {"connected": 0, "reconnects": 0, "triggers": 3, "bad_triggers": 0}

    bounded(scenario)


def test_files_outside_the_root_a_bad_unit_id_and_an_unreadable_files_node_are_triggers_with_a_problem(tmp_path):
    root = tmp_path / "units"
    good = unit(root, "4711", "unit.png")
    (tmp_path / "outside.png").write_bytes(b"x")
    (root / "4713").mkdir(parents=True)
    (root / "4713" / "unit.png").symlink_to(tmp_path / "outside.png")

    async def scenario() -> None:
        plc = await Plc(free_port()).start(Files=["4711/unit.png"], FilesJson='["4711/unit.png"]')
        common = f'url = "{plc.url}"\nnode = "{plc.node_id("UnitReady")}"\n'
        sources = {"array": source_of(tmp_path, root, common + f'files_node = "{plc.node_id("Files")}"\n'),
                   "json": source_of(tmp_path, root, common + f'files_node = "{plc.node_id("FilesJson")}"\n'),
                   "missing": source_of(tmp_path, root, common + f'files_node = "ns={plc.ns};s=Cell4.Nope"\n'),
                   "dotdot": source_of(tmp_path, root, common + 'files = ["../{unit_id}.png"]\n')}
        emits = {name: Collect() for name in sources}
        tasks = [await running(source, emits[name]) for name, source in sources.items()]
        try:
            await until(lambda: all(source.stats()["connected"] for source in sources.values()), "all connected")
            await plc.set("UnitReady", "4711")
            await until(lambda: all(len(emit.triggers) == 1 for emit in emits.values()), "a trigger on each")
            await plc.set("Files", ["../outside.png"])
            await plc.set("UnitReady", "4712")
            await until(lambda: len(emits["array"].triggers) == 2, "the unit naming ../outside.png")
            await plc.set("Files", ["4713/unit.png"])
            await plc.set("UnitReady", "4713")
            await until(lambda: len(emits["array"].triggers) == 3, "the unit naming a symbolic link")
            await plc.set("UnitReady", "bad id/..")
            await until(lambda: len(emits["array"].triggers) == 4, "the bad unit id")
        finally:
            for task in tasks:
                await stop_task(task)
            await plc.stop()
        assert emits["array"].triggers[0].files == good and emits["array"].triggers[0].problem is None
        assert emits["json"].triggers[0].files == good and emits["json"].triggers[0].problem is None
        missing, dotdot = emits["missing"].triggers[0], emits["dotdot"].triggers[0]
        assert missing.unit_id == "4711" and "Cell4.Nope" in (missing.problem or "") and missing.files == ()
        assert dotdot.unit_id == "4711" and "'..' is not allowed" in (dotdot.problem or "")
        outside, link, bad = emits["array"].triggers[1:4]
        assert outside.unit_id == "4712" and "'..' is not allowed" in (outside.problem or "") and outside.files == ()
        assert link.unit_id == "4713" and "symbolic link" in (link.problem or "") and link.files == ()
        assert bad.unit_id.startswith("invalid-") and len(bad.unit_id) == len("invalid-") + 12
        assert "must be 1-128 letters" in (bad.problem or "")
        assert sources["array"].stats()["triggers"] == 4 and sources["array"].stats()["bad_triggers"] == 3
        assert sources["missing"].stats()["bad_triggers"] == sources["missing"].stats()["triggers"] == 4

    bounded(scenario)


# ---- the sink ---------------------------------------------------------------------------------------------------
def test_the_sink_writes_unit_answers_and_result_first_and_the_outcome_code_last(tmp_path):
    async def scenario() -> None:
        plc = await Plc(free_port()).start()
        sink = sink_of(tmp_path, tmp_path, f'url = "{plc.url}"\noutcome_node = "{plc.node_id("Outcome")}"\n'
                                           f'unit_node = "{plc.node_id("Unit")}"\n'
                                           f'answers_node = "{plc.node_id("Answers")}"\n'
                                           f'result_node = "{plc.node_id("Result")}"\n'
                                           f'heartbeat_node = "{plc.node_id("Heartbeat")}"\nheartbeat_s = 0.1\n')
        await sink.start()
        try:
            await sink.send(RESULT)
            assert await plc.get("Outcome") == 2 and await plc.get("Unit") == "4711"
            assert json.loads(await plc.get("Answers")) == {"label_visible": False}
            assert json.loads(await plc.get("Result")) == RESULT.payload()
            timeout = Result(line="cell-4", unit_id="4712", outcome="timeout", answers={}, x_outcome=None,
                             latency_ms=2000.0, decided_at="2026-12-04T10:00:02Z", source="t", fallback="act")
            await sink.send(timeout)
            assert await plc.get("Outcome") == 4 and await plc.get("Unit") == "4712"
            assert json.loads(await plc.get("Result"))["published_outcome"] == "act"
            await until(lambda: sink.stats()["heartbeats"] >= 3, "three heartbeats")
            assert await plc.get("Heartbeat") >= 2
        finally:
            await sink.close()
            await plc.stop()
        results = [name for name in plc.written if name != "Heartbeat"]
        assert results == ["Unit", "Answers", "Result", "Outcome"] * 2         # the outcome last, each time
        stats = sink.stats()
        assert stats["writes"] == 2 and stats["write_failures"] == 0 and stats["connected"] == 0
        assert sink.name == f"opcua:{plc.url}#{plc.node_id('Outcome')}"

    bounded(scenario)


# ---- the server goes away and comes back ------------------------------------------------------------------------
def test_both_reconnect_when_the_server_restarts_on_the_same_port(tmp_path):
    root = tmp_path / "units"
    files = unit(root, "4800", "unit.png")

    async def scenario() -> None:
        plc = await Plc(free_port()).start(UnitReady="4700")
        unit(root, "4700", "unit.png")
        source = source_of(tmp_path, root, f'url = "{plc.url}"\nnode = "{plc.node_id("UnitReady")}"\n'
                                           'files = ["{unit_id}/unit.png"]\ntimeout_s = 2\n')
        sink = sink_of(tmp_path, root, f'url = "{plc.url}"\noutcome_node = "{plc.node_id("Outcome")}"\n'
                                       f'unit_node = "{plc.node_id("Unit")}"\ntimeout_s = 2\n')
        emit = Collect()
        task = await running(source, emit)
        await sink.start()
        again = Plc(plc.port)
        try:
            await until(lambda: emit.ids() == ["4700"], "the first unit")
            await sink.send(RESULT)
            await again.prepare()                                # the new server's nodes, before the port is free
            await plc.stop()
            await until(lambda: source.stats()["connected"] == 0, "the source sees the server go")
            with pytest.raises(SinkFailed, match="not written"):
                await sink.send(RESULT)
            assert sink.stats()["connected"] == 0 and sink.stats()["write_failures"] == 1
            await again.start()
            await until(lambda: source.stats()["connected"] == 1, "the source reconnects")
            assert source.stats()["reconnects"] >= 1
            await again.set("UnitReady", "4800")
            await until(lambda: "4800" in emit.ids(), "a unit set after the restart")
            await sink.send(RESULT)                              # connects again, lazily
            assert await again.get("Outcome") == 2 and await again.get("Unit") == "4711"
        finally:
            await stop_task(task)
            await sink.close()
            await plc.stop()
            await again.stop()
        assert emit.triggers[-1].files == files and emit.triggers[-1].problem is None
        assert sink.stats()["reconnects"] >= 1 and sink.stats()["writes"] == 2

    bounded(scenario)


def test_the_sink_starts_while_the_server_is_down_and_a_send_then_fails(tmp_path):
    async def scenario() -> None:
        port = free_port()
        sink = sink_of(tmp_path, tmp_path, f'url = "opc.tcp://127.0.0.1:{port}/"\noutcome_node = "ns=2;i=1"\n'
                                           "timeout_s = 1\n")
        await sink.start()                                       # does not fail: the server is retried later
        try:
            with pytest.raises(SinkFailed):
                await sink.send(RESULT)
        finally:
            await sink.close()
        assert sink.stats()["write_failures"] == 1 and sink.stats()["connected"] == 0

    bounded(scenario)


# ---- the config -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("kind", "text", "expected"), [
    ("source", 'url = "opc.tcp://h:4840/"\nfiles = ["{unit_id}.png"]\n', "source[0].node (line 1): required"),
    ("source", 'url = "opc.tcp://h:4840/"\nnode = "ns=2;s=A"\n', "source[0].files (line 1): give exactly one"),
    ("source", 'url = "opc.tcp://h:4840/"\nnode = "ns=2;s=A"\nfiles = ["x"]\nfiles_node = "ns=2;s=F"\n',
     "source[0].files_node (line 6): give exactly one of files"),
    ("source", 'url = "opc.tcp://h:4840/"\nnode = "ns=2;s=A"\nfiles = ["x"]\ncolour = 1\n',
     "source[0].colour (line 6): unknown key; [source] takes type, url"),
    ("source", 'url = "opc.tcp://h:4840/"\nnode = "ns=2;s=A"\nfiles = []\n', "source[0].files (line 5): name at least"),
    ("source", 'url = "http://h/"\nnode = "ns=2;s=A"\nfiles = ["x"]\n', "source[0].url (line 3): 'http://h/' must be"),
    ("source", 'url = "opc.tcp://h:4840/"\nnode = "ns=x;q=A"\nfiles = ["x"]\n', "source[0].node (line 4): 'ns=x;q=A'"),
    ("sink", 'url = "opc.tcp://h:4840/"\n', "sink[0].outcome_node (line 1): required"),
    ("sink", 'url = "opc.tcp://h:4840/"\noutcome_node = "ns=2;s=O"\nheartbeat = 1\n',
     "sink[0].heartbeat (line 5): unknown key; [sink] takes type, url"),
    ("sink", 'url = "opc.tcp://h:4840/"\noutcome_node = "ns=2;s=O"\ntimeout_s = 0\n',
     "sink[0].timeout_s (line 5): must be a number"),
])
def test_a_config_mistake_names_the_key(tmp_path, kind, text, expected):
    text = f'[[{kind}]]\ntype = "opcua"\n' + text
    reader, table = reader_and_table(tmp_path, text, kind)
    parse = parse_source if kind == "source" else parse_sink
    with pytest.raises(LineError) as caught:
        parse(reader, table, f"{kind}[0]", LineContext("cell-4", tmp_path))
    assert expected in str(caught.value)
