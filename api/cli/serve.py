"""`omni serve`: argv + `OMNI_*` settings -> uvicorn running `create_app`. SIGTERM drains in-flight work.

`add_serve_arguments(parser)` adds the flags (one per setting, generated from api/http/settings.py so env names and
flags never drift); `run_serve(args) -> int` runs until SIGTERM/SIGINT: /ready turns 503 and new requests get 503
(Retry-After, Connection: close) on a listener kept open while requests are in flight; once they are done (or the
drain timeout is up) uvicorn closes the listener and the rest of the drain runs: the engine drains and stops.
With `--ray` the same settings start the app on Ray Serve instead (`api/cluster/launch.py`).
Exit codes: 0 clean stop, 1 the model failed to load, 2 bad settings. Knows nothing of routes or the model.
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import signal
import socket
import sys
import threading
import time
import typing
from collections.abc import Callable, Mapping
from types import FrameType
from typing import TYPE_CHECKING

from api.http.settings import FLAG_NAMES, Settings, SettingsError, cli_fields, flag_of, is_media_limit
from omni.contract.errors import OmniError

if TYPE_CHECKING:
    import uvicorn

    from api.http.dependencies import ServiceState

log = logging.getLogger("omni.serve")
# explicit flags below (the adapters' ones: `add_adapter_arguments`); api_keys only via env or file
_NOT_FLAGS = {"model", "host", "port", "api_keys", *FLAG_NAMES}
# what a bare "default: V" would not say
_DEFAULT_NOTES = {"torch_threads": " (sized when the model loads: the CPUs this process may use, less "
                                   "--decode-threads, at least 1; the startup log names the count)",
                  "quantize": " (as the checkpoint is stored); none, int8, fp8, nf4 or int4 (CUDA only): the text "
                              "layers quantized while loading (docs/quantization.md)",
                  "bank": " (none); a hash bank file (CSV/JSONL), repeatable: media matched before the model, "
                          "reloaded on SIGHUP (docs/banks.md)",
                  "bank_pdq_threshold": " (31 bits for every bank); BANK=BITS, 0..63, repeatable"}


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", metavar="DIR|HUB_ID",
                        help="checkpoint directory or hub id (env OMNI_MODEL); omitted: the embedded tiny default")
    parser.add_argument("--host", help="bind address (env OMNI_HOST, default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="port (env OMNI_PORT, default 8000)")
    parser.add_argument("--api-keys-file", metavar="PATH",
                        help="file with one `KEY [NAME [ROLE]]` per line, ROLE caller|reviewer|admin (bare KEY: "
                             "admin; KEY NAME: reviewer); or env OMNI_API_KEYS=k1,k2 / OMNI_API_KEYS_FILE; "
                             "none: auth off")
    parser.add_argument("--webhook-secret-file", metavar="PATH",
                        help="file whose first line is the webhook secret (or env OMNI_WEBHOOK_SECRET / "
                             "OMNI_WEBHOOK_SECRET_FILE); keeps it out of the process list")
    parser.add_argument("--no-batching", action="store_true", help="one record per model call (max_batch_records=1)")
    add_adapter_arguments(parser.add_argument_group("adapters (docs/adapters.md)"), serve=True)
    server = parser.add_argument_group("server and engine (each also OMNI_<NAME>)")
    media = parser.add_argument_group("media limits (each also OMNI_MEDIA_<NAME>)")
    defaults = Settings()
    for name, kind in cli_fields().items():
        if name in _NOT_FLAGS:
            continue
        group = media if is_media_limit(name) else server
        default = defaults.value_of(name)
        shown = ",".join(default) if isinstance(default, tuple) else default
        switch: dict[str, str] = {"nargs": "?", "const": "true"} if kind is bool else {}   # `--public-docs` = true
        if typing.get_origin(kind) is tuple:   # a list: comma-separated, and the flag may be repeated
            switch = {"action": "append"}
        group.add_argument(flag_of(name), dest=name, metavar="V", default=None,
                           **switch,  # type: ignore[arg-type]  # nargs and const are strings, as argparse takes them
                           help=f"default: {shown}{_DEFAULT_NOTES.get(name, '')}" if name != "max_body_bytes" else
                           f"default: derived from the media limits ({defaults.body_cap_bytes})")


def add_adapter_arguments(group: argparse._ArgumentGroup | argparse.ArgumentParser, serve: bool = False) -> None:
    """`--adapter NAME=PATH` (repeatable); with `serve`, also `--adapters DIR` and `--shadow LIVE=CANDIDATE` (the
    EngineConfig fields adapters, adapters_dir and shadows; env OMNI_ADAPTERS, OMNI_ADAPTERS_DIR, OMNI_SHADOWS)."""
    group.add_argument(FLAG_NAMES["adapters"], dest="adapters", action="append", metavar="NAME=PATH", default=None,
                       help="serve the adapter folder PATH as model NAME (repeatable; env OMNI_ADAPTERS=N=P,N=P)"
                       if serve else "answer with the adapter folder PATH, as model NAME (repeatable; a request's "
                       "`model` selects one)")
    if not serve:
        return
    group.add_argument(FLAG_NAMES["adapters_dir"], dest="adapters_dir", metavar="DIR", default=None,
                       help="serve each subfolder of DIR holding an adapter.json, named by the folder; SIGHUP "
                            "rescans it (env OMNI_ADAPTERS_DIR)")
    group.add_argument(FLAG_NAMES["shadows"], dest="shadows", action="append", metavar="LIVE=CANDIDATE",
                       default=None, help="requests to model LIVE are also scored by adapter CANDIDATE, off the "
                                          "response's path, into the decision log (repeatable; env OMNI_SHADOWS)")


def build_settings(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> Settings:
    settings = Settings.from_env(environ).with_cli(args)
    if getattr(args, "no_batching", False):
        settings = settings.with_values({"max_batch_records": 1})
    return settings


def run_serve(args: argparse.Namespace, announce: Callable[[Settings], None] | None = None) -> int:
    """Serve until stopped. `announce(settings)` runs once the settings are known (before the model loads)."""
    try:
        settings = build_settings(args)
    except SettingsError as exc:
        print(f"omni serve: {exc}", file=sys.stderr)
        return 2
    if announce is not None:
        announce(settings)
    _configure_logging(settings.log_level)
    if settings.unknown_env:
        log.warning("ignoring unknown settings: %s", ", ".join(settings.unknown_env))
    problem = _quantization_problem(settings)
    if problem:
        print(f"omni serve: {problem}", file=sys.stderr)
        return 2
    if settings.ray:   # the same app on Ray Serve, one engine per replica (api/cluster/)
        from api.cluster.launch import run_cluster

        return run_cluster(settings)

    import uvicorn  # serve extra; imported here so `omni --help` works without it

    from api.http.app import create_app

    failure: list[BaseException] = []
    holder: dict[str, uvicorn.Server] = {}

    def on_load_failure(exc: BaseException) -> None:
        failure.append(exc)
        if "server" in holder:
            holder["server"].should_exit = True

    try:
        app = create_app(settings, on_load_failure=on_load_failure, on_loaded=_settle_heap)
    except SettingsError as exc:   # what only the built app can check (a guidelines QUEUE= that names no queue)
        print(f"omni serve: {exc}", file=sys.stderr)
        return 2
    svc = app.state.service

    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_level=settings.log_level.lower(),
                            # uvicorn waits a float number of seconds; its annotation says int
                            timeout_graceful_shutdown=settings.drain_s,  # type: ignore[arg-type]
                            lifespan="on", server_header=False)
    server = holder["server"] = _draining_server(config, svc, settings.drain_s)
    _reload_on_sighup(svc)
    log.info("omni serve on http://%s:%d (docs at /docs)", settings.host, settings.port)
    server.run()
    if failure:
        log.error("exiting: the model failed to load")
        return 1
    return 0


def _quantization_problem(settings: Settings) -> str | None:
    """What makes --quantize unusable here, said before the server starts (exit 2), else None. With --ray the
    replicas' devices decide whether a GPU-only scheme runs: only the library and the checkpoint are checked here."""
    if settings.engine.quantize is None and settings.engine.model_path is not None:
        return None                # the checkpoint as stored: the loader says what is wrong with it
    from omni.model.loading import check_quantization
    from omni.model.quantize import QuantizationError

    try:
        check_quantization(settings.engine, "any" if settings.ray else None)
    except QuantizationError as exc:
        return str(exc)
    return None


def _draining_server(config: uvicorn.Config, svc: ServiceState, drain_s: float) -> uvicorn.Server:
    """uvicorn's server, draining on SIGTERM/SIGINT: /ready turns 503 at once and new requests get the app's 503 on
    a listener kept open while requests are in flight (up to `drain_s`); then uvicorn closes it and waits the rest."""
    import uvicorn

    class DrainingServer(uvicorn.Server):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            """Keep listening while requests are in flight (new ones get the app's 503, not a refused connection),
            then let uvicorn close the listeners and wait what is left of the drain time."""
            deadline = time.monotonic() + drain_s
            while self.server_state.tasks and not self.force_exit and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            self.config.timeout_graceful_shutdown = max(0.0, deadline - time.monotonic())  # type: ignore[assignment]
            await super().shutdown(sockets)

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if svc.drain_started is None:
                log.info("signal %s: draining (up to %.0f s for requests in flight)", sig, drain_s)
            svc.begin_drain()  # /ready -> 503 at once; uvicorn then waits for open requests
            super().handle_exit(sig, frame)
            if sig == signal.SIGTERM:  # a drained SIGTERM is a clean stop: exit 0, don't re-raise it afterwards
                captured = getattr(self, "_captured_signals", None)
                if isinstance(captured, list) and sig in captured:
                    captured.remove(sig)

    return DrainingServer(config)


def _reload_on_sighup(svc: ServiceState) -> None:
    """SIGHUP reads the policy file again (atomically; a file that no longer reads keeps the policy in force and
    logs why), reads the `--bank` files again and rescans `--adapters DIR`, each in a thread of its own (loading weights never blocks the event loop; the
    report is logged). Without either SIGHUP is logged and ignored, instead of ending the process."""
    def reload(sig: int, frame: FrameType | None) -> None:
        from api.http.adapters import rescan_in_background

        rescanning = rescan_in_background(svc)
        banks = _reload_banks_in_background(svc)
        try:
            if svc.reload_policy() is None and rescanning is None and banks is None:
                log.info("SIGHUP: no policy to reload (--policy FILE), no adapters folder to rescan (--adapters) "
                         "and no banks to read again (--bank)")
        except OmniError as exc:
            log.error("SIGHUP: the policy was not reloaded, the one in force stays: %s", exc)

    if hasattr(signal, "SIGHUP"):        # not on Windows
        signal.signal(signal.SIGHUP, reload)


def _reload_banks_in_background(svc: ServiceState) -> threading.Thread | None:
    """The bank files read again in a thread of its own (a million entries take seconds to index; a signal handler
    must not hold the event loop that long); a file that no longer reads keeps the banks in force and logs why."""
    if svc.banks is None:
        return None

    def reload() -> None:
        try:
            svc.reload_banks()
        except OmniError as exc:
            log.error("SIGHUP: the banks were not reloaded, those in force stay: %s", exc)

    thread = threading.Thread(target=reload, name="bank-reload", daemon=True)
    thread.start()
    return thread


def _settle_heap() -> None:
    """Once the model is loaded: collect, then freeze what is alive (torch, transformers, the model's modules, about
    400k objects) out of the cyclic GC. Otherwise every full collection walks them all, about 0.2 s during which
    every Python thread of the server stands still (seen as 250 ms stalls at the p99 under load)."""
    started = time.perf_counter()
    gc.collect()
    gc.freeze()
    log.info("heap settled: %d objects frozen out of the cyclic GC in %.0f ms", gc.get_freeze_count(),
             (time.perf_counter() - started) * 1e3)


def _configure_logging(level: str) -> None:
    from api.cli.library_logs import quiet_libraries

    logging.basicConfig(level=level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    quiet_libraries()


def main(argv: list[str] | None = None) -> int:
    """`python -m api.cli.serve` (the same as `omni serve`)."""
    parser = argparse.ArgumentParser(prog="omni serve", description=__doc__.splitlines()[0])
    add_serve_arguments(parser)
    return run_serve(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
