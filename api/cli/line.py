"""`omni line CONFIG.toml`: run an inspection line — sources, the model (here or at `[model] url`), sinks, the ledger;
`omni line CONFIG.toml --status`: one screen of a running line's figures (from its `/status`).

Reads the config (`api.line.config`: a mistake is one line naming the file, line and key; exit 2), the policy, opens
the ledger, loads the engine (or points at the server), starts the status server and runs the line until SIGTERM or
SIGINT (an in-process model consults the `[model] banks` first: docs/banks.md); then it stops taking
triggers, lets the units in flight settle and the sinks take what is theirs (the ledger
keeps the rest for the next start). Knows nothing of transports or model internals.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from dataclasses import replace
from typing import Any

from api.line.config import LineConfig, read_line_config
from api.line.ports import LineError


def add_line_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="the line's TOML file (docs/line.md)")
    parser.add_argument("--status", action="store_true",
                        help="show a running line's figures (its [status] listen address) and exit")
    parser.add_argument("--json", action="store_true", help="with --status: the raw JSON")
    parser.add_argument("--quiet", action="store_true", help="no start-up lines or progress bars")
    parser.set_defaults(needs_torch=lambda args: not args.status)


def run_line(args: argparse.Namespace) -> int:
    config = read_line_config(args.config)
    if args.status:
        return show_status(config, args.json)
    return asyncio.run(_run(config, args.quiet))


def show_status(config: LineConfig, raw: bool) -> int:
    import httpx

    from api.line.status_screen import status_screen

    if not config.listen:
        raise LineError(f"{config.path}: [status] listen is empty: this line serves no status")
    try:
        response = httpx.get(f"http://{config.listen}/status", timeout=5.0, trust_env=False)
    except httpx.TransportError as exc:
        print(f"omni: line {config.name}: not running (nothing answers on {config.listen}: {exc})", file=sys.stderr)
        return 1
    snapshot = response.json()
    print(json.dumps(snapshot, indent=2) if raw else status_screen(snapshot))
    return 0


def engine_config_of(config: LineConfig) -> Any:
    """The engine's config: its defaults, overridden by what [model] sets; a queue that holds max_in_flight."""
    from omni.contract.config import EngineConfig

    m = config.model
    overrides: dict[str, Any] = {"model_path": m.checkpoint, "device": m.device, "dtype": m.dtype,
                                 "quantize": m.quantize, "torch_threads": m.torch_threads,
                                 "adapters": m.adapters or None, "media_cache_mb": m.media_cache_mb,
                                 "prefix_cache_mb": m.prefix_cache_mb}
    engine_config = replace(EngineConfig(), **{key: value for key, value in overrides.items() if value is not None})
    return replace(engine_config, max_queue=max(engine_config.max_queue, config.max_in_flight))


def _decider(config: LineConfig, quiet: bool) -> tuple[Any, Any]:
    """(decider, the engine to stop or None)."""
    from api.line.deciders import EngineDecider, RemoteDecider
    from omni.contract.policy import read_policy

    if config.model.url:
        if config.policy_path is not None:
            raise LineError(f"{config.path}: request.policy: the server at model.url applies its own --policy; "
                            "leave this out")
        return RemoteDecider(config.model.url, config.template, config.model_name, config.model.api_key,
                             config.model.timeout_s, max_connections=config.max_in_flight), None
    policy = read_policy(config.policy_path) if config.policy_path else None    # before the model loads
    banks = _banks(config)                                                       # BankError likewise
    from api.cli.batch import start_engine
    from api.cli.decide import quiet_model_loading

    quiet_model_loading(quiet)
    engine_config = engine_config_of(config)
    try:
        engine = start_engine(engine_config)
    except BaseException:
        if banks is not None:
            banks.close()
        raise
    return EngineDecider(engine, engine_config, config.template, policy, config.model_name, banks), engine


def _banks(config: LineConfig) -> Any:
    """The `[model] banks`, read and indexed (a `BankShelf`; BankError naming the file, line and field), or None."""
    if not config.model.banks:
        return None
    from omni.banks.opening import open_banks

    return open_banks(config.model.banks, dict(config.model.bank_pdq_thresholds))


async def _run(config: LineConfig, quiet: bool) -> int:
    from api.line.ledger import Ledger
    from api.line.runner import LineRunner
    from api.line.status_http import status_app, status_server

    sources, sinks = config.build_sources(), config.build_sinks()
    ledger = Ledger(config.ledger, sinks=[sink.name for sink in sinks])   # delivered results are not held in memory
    decider, engine = await asyncio.to_thread(_decider, config, quiet)
    runner = LineRunner(line=config.name, decider=decider, ledger=ledger, sources=sources, sinks=sinks,
                        deadline_ms=config.deadline_ms, fallback=config.fallback,
                        max_queued_units=config.max_queued_units, max_in_flight=config.max_in_flight)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    server = None
    if config.listen:
        host, _, port = config.listen.rpartition(":")
        server = status_server(status_app(runner), host.strip("[]"), int(port))
        serving = asyncio.create_task(server.serve())
    if not quiet:
        print(f"omni line {config.name}: {len(sources)} source(s) ({', '.join(s.name for s in sources)}), "
              f"{len(sinks)} sink(s) ({', '.join(s.name for s in sinks) or 'the ledger only'}), "
              f"ledger {config.ledger} ({ledger.decided_count()} decided), deadline {config.deadline_ms} ms, "
              f"{'model at ' + config.model.url if config.model.url else 'model in process'}"
              f"{', status on http://' + config.listen if config.listen else ''}", file=sys.stderr, flush=True)
    try:
        await runner.run(stop)
    finally:
        if server is not None:
            server.should_exit = True
            await serving
        if engine is not None:
            await asyncio.to_thread(engine.stop)
        ledger.close()
    return 0
