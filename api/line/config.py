"""`omni line CONFIG.toml`: the file read and checked, every problem naming the file, its line and the key.

    [line]      name, root (the media root: every file a unit names lies under it), ledger (JSONL path),
                deadline_ms, fallback (the outcome a timed-out unit publishes: review by default),
                max_queued_units (units waiting for the model before new ones are refused as `overload`),
                max_in_flight (units the model is asked about at once)
    [request]   template (a System One request JSON: questions, optional state and model), policy (TOML),
                model (an adapter name, where the engine serves adapters)
    [model]     in process: checkpoint, device, dtype, quantize, torch_threads, adapters ({name = folder}),
                media_cache_mb, prefix_cache_mb (a line rarely sees the same media twice: 0 saves the memory),
                banks (hash bank files, consulted before the model), bank_pdq_threshold ({bank = bits});
                or url (+ api_key_file) of a running `omni serve` (which consults its own --bank)
    [status]    listen ("127.0.0.1:9310"; "" for none): /metrics, /health and /status
    [[source]]  type = "folder" | "mqtt" | "opcua", and that type's keys
    [[sink]]    type = "mqtt" | "opcua" | "webhook", and that type's keys (the ledger is always a sink)

A source or sink type is read by its own module's `parse_source` / `parse_sink(reader, table, where, context)`,
which returns a frozen config with `build(context)`. Knows nothing of the engine, transports or the environment.
"""
from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from api.line.config_reader import TableReader
from api.line.ports import LineError, Sink, Source
from omni.banks.entries import MAX_PDQ_THRESHOLD
from omni.contract.toml_text import TomlProblem, load_toml

SOURCE_MODULES = {"folder": "api.line.folder", "mqtt": "api.line.mqtt", "opcua": "api.line.opcua"}
SINK_MODULES = {"mqtt": "api.line.mqtt", "opcua": "api.line.opcua", "webhook": "api.line.webhook_sink"}
OUTCOMES = ("act", "review", "pass")
TOP_KEYS = ("line", "request", "model", "status", "source", "sink")
LINE_KEYS = ("name", "root", "ledger", "deadline_ms", "fallback", "max_queued_units", "max_in_flight")
REQUEST_KEYS = ("template", "policy", "model")
LOCAL_MODEL_KEYS = ("checkpoint", "device", "dtype", "quantize", "torch_threads", "adapters", "media_cache_mb",
                    "prefix_cache_mb", "banks", "bank_pdq_threshold")     # the model here: none with `url`
MODEL_KEYS = (*LOCAL_MODEL_KEYS, "url", "api_key_file", "timeout_s")
STATUS_KEYS = ("listen",)
MAX_CONFIG_BYTES = 1024 * 1024


@dataclass(frozen=True)
class LineContext:
    """What a source or sink may know of its line."""

    line: str
    root: Path


class PartConfig(Protocol):
    def build(self, context: LineContext) -> Any: ...


@dataclass(frozen=True)
class ModelConfig:
    checkpoint: str | None = None
    device: str | None = None
    dtype: str | None = None
    quantize: str | None = None
    torch_threads: int | None = None
    adapters: tuple[tuple[str, str], ...] = ()
    banks: tuple[str, ...] = ()                          # hash bank files, consulted before the model (docs/banks.md)
    bank_pdq_thresholds: tuple[tuple[str, int], ...] = ()   # (bank, bits)
    media_cache_mb: float | None = None
    prefix_cache_mb: float | None = None
    url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout_s: float = 60.0


@dataclass(frozen=True)
class LineConfig:
    path: Path
    name: str
    root: Path
    ledger: Path
    deadline_ms: int
    fallback: str
    max_queued_units: int
    max_in_flight: int
    template: dict[str, Any]
    policy_path: Path | None
    model_name: str | None
    model: ModelConfig
    listen: str
    sources: tuple[PartConfig, ...]
    sinks: tuple[PartConfig, ...]

    @property
    def context(self) -> LineContext:
        return LineContext(self.name, self.root)

    def build_sources(self) -> list[Source]:
        return [part.build(self.context) for part in self.sources]

    def build_sinks(self) -> list[Sink]:
        return [part.build(self.context) for part in self.sinks]


def read_line_config(path: str | Path) -> LineConfig:
    """The checked config; LineError naming the file, line and key (or the file itself when it cannot be read)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise LineError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise LineError(f"{path}: {len(data)} bytes is over the {MAX_CONFIG_BYTES}-byte limit of a line config")
    try:
        text = data.decode("utf-8")
        table = load_toml(text)
    except UnicodeDecodeError:
        raise LineError(f"{path}: not UTF-8 text") from None
    except TomlProblem as exc:
        raise LineError(f"{path}: {exc}") from None
    return parse_line_config(table, TableReader(text, str(path), path.resolve().parent), path)


def parse_line_config(table: dict[str, Any], reader: TableReader, path: Path) -> LineConfig:
    reader.no_unknown_keys(table, TOP_KEYS, "")
    line = reader.table(table, "line", required=True)
    reader.no_unknown_keys(line, LINE_KEYS, "line")
    name = reader.string(line, "name", "line")
    if not all(ch.isalnum() or ch in "-_." for ch in name) or len(name) > 64:
        raise reader.error("line", "name", f"{name!r} must be 1-64 letters, digits, '-', '_' or '.' (a topic level)")
    root = reader.path(line, "root", "line", must_exist=True)
    if not root.is_dir():
        raise reader.error("line", "root", f"{root}: not a folder")
    ledger = reader.path(line, "ledger", "line")
    deadline_ms = reader.integer(line, "deadline_ms", "line", low=1, high=3_600_000)
    fallback = reader.string(line, "fallback", "line", "review", choices=OUTCOMES)
    max_queued = reader.integer(line, "max_queued_units", "line", 64, low=1, high=100_000)
    max_in_flight = reader.integer(line, "max_in_flight", "line", 8, low=1, high=1024)

    request = reader.table(table, "request", required=True)
    reader.no_unknown_keys(request, REQUEST_KEYS, "request")
    template = _template(reader, request)
    policy_path = reader.path(request, "policy", "request", None, must_exist=True)
    model_name = reader.string(request, "model", "request", None)

    context = LineContext(name, root)
    sources = tuple(_part(reader, item, f"source[{i}]", SOURCE_MODULES, "parse_source", context)
                    for i, item in enumerate(reader.tables(table, "source")))
    if not sources:
        raise reader.error("", "source", "a line needs at least one [[source]] (folder, mqtt or opcua)")
    sinks = tuple(_part(reader, item, f"sink[{i}]", SINK_MODULES, "parse_sink", context)
                  for i, item in enumerate(reader.tables(table, "sink")))
    status = reader.table(table, "status", "")
    reader.no_unknown_keys(status, STATUS_KEYS, "status")
    listen = status.get("listen", "127.0.0.1:9310")
    if listen != "" and (not isinstance(listen, str) or not _host_port(listen)):
        raise reader.error("status", "listen", f"must be HOST:PORT (port 0..65535) or \"\" for none, not {listen!r}")
    return LineConfig(path=path, name=name, root=root, ledger=ledger, deadline_ms=deadline_ms, fallback=fallback,
                      max_queued_units=max_queued, max_in_flight=max_in_flight, template=template,
                      policy_path=policy_path, model_name=model_name, model=_model(reader, table), listen=listen,
                      sources=sources, sinks=sinks)


def _template(reader: TableReader, request: dict[str, Any]) -> dict[str, Any]:
    path = reader.path(request, "template", "request", must_exist=True)
    try:
        body = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise reader.error("request", "template", f"{path}: not a JSON request ({exc})") from None
    if not isinstance(body, dict) or not isinstance(body.get("questions"), (dict, list)):
        raise reader.error("request", "template", f"{path}: a System One request with \"questions\" is needed")
    media = [slot for slot in ("images", "audio", "videos") if body.get(slot)]
    if media:
        raise reader.error("request", "template", f"{path}: {', '.join(media)} come from each unit's files, "
                                                  "not from the template")
    return body


def _model(reader: TableReader, table: dict[str, Any]) -> ModelConfig:
    model = reader.table(table, "model", "")
    reader.no_unknown_keys(model, MODEL_KEYS, "model")
    url = reader.string(model, "url", "model", None)
    local = [key for key in LOCAL_MODEL_KEYS if key in model]
    if url and local:
        raise reader.error("model", local[0], "the server at model.url runs its own model; leave this out")
    if url and not url.startswith(("http://", "https://")):
        raise reader.error("model", "url", f"{url!r} must be an http:// or https:// URL")
    api_key = None
    if "api_key_file" in model:
        if not url:
            raise reader.error("model", "api_key_file", "goes with model.url")
        key_path = reader.path(model, "api_key_file", "model", must_exist=True)
        api_key = key_path.read_text(encoding="utf-8").strip()
    adapters = reader.table(model, "adapters", "model")
    pairs = tuple((str(name), str(reader.path(adapters, name, "model.adapters", must_exist=True)))
                  for name in adapters)
    banks, thresholds = _banks(reader, model)
    return ModelConfig(checkpoint=reader.string(model, "checkpoint", "model", None),
                       device=reader.string(model, "device", "model", None),
                       dtype=reader.string(model, "dtype", "model", None),
                       quantize=reader.string(model, "quantize", "model", None,
                                              choices=("none", "int8", "fp8", "nf4", "int4")),
                       torch_threads=reader.integer(model, "torch_threads", "model", None, low=1, high=1024),
                       adapters=pairs, banks=banks, bank_pdq_thresholds=thresholds, url=url, api_key=api_key,
                       media_cache_mb=reader.number(model, "media_cache_mb", "model", None, low=0),
                       prefix_cache_mb=reader.number(model, "prefix_cache_mb", "model", None, low=0),
                       timeout_s=reader.number(model, "timeout_s", "model", 60.0, low=0.1, high=3600))


def _banks(reader: TableReader, model: dict[str, Any]) -> tuple[tuple[str, ...], tuple[tuple[str, int], ...]]:
    """`banks = ["known.csv", ...]` (files read from the config's folder; each must exist) and `bank_pdq_threshold =
    {BANK = BITS}` (a bank named by its file's stem, one of those given); the files themselves are read when the line
    starts, each mistake there named by file, line and field."""
    names = reader.strings(model, "banks", "model", ())
    paths = []
    for index, name in enumerate(names):
        path = (reader.base_dir / Path(name).expanduser()).resolve()
        if not path.is_file():
            raise reader.error("model", "banks", f"[{index}] {path}: no such file")
        paths.append(str(path))
    table = reader.table(model, "bank_pdq_threshold", "model")
    if table and not paths:
        raise reader.error("model", "bank_pdq_threshold", "goes with model.banks")
    stems = {Path(path).stem for path in paths}
    thresholds = []
    for bank, bits in table.items():
        if bank not in stems:
            raise reader.error("model", "bank_pdq_threshold",
                               f"{bank}: names no bank of model.banks ({', '.join(sorted(stems))})")
        if isinstance(bits, bool) or not isinstance(bits, int) or not 0 <= bits <= MAX_PDQ_THRESHOLD:
            raise reader.error("model", "bank_pdq_threshold",
                               f"{bank}: must be an integer 0..{MAX_PDQ_THRESHOLD} (bits), not {bits!r}")
        thresholds.append((bank, bits))
    return tuple(paths), tuple(thresholds)


def _part(reader: TableReader, item: dict[str, Any], where: str, modules: dict[str, str], parser: str,
          context: LineContext) -> PartConfig:
    kind = reader.string(item, "type", where, choices=tuple(modules))
    try:
        module = importlib.import_module(modules[kind])
    except ImportError as exc:
        if (exc.name or "").startswith("api."):
            raise
        raise reader.error(where, "type", f"{kind} needs the [line] extra ({exc.name} is missing): "
                                          "pip install 'omni-decide[line]'") from None
    part: PartConfig = getattr(module, parser)(reader, item, where, context)
    return part


def _host_port(value: str) -> bool:
    host, _, port = value.rpartition(":")
    return bool(host) and port.isdigit() and 0 <= int(port) <= 65535
