"""`omni batch IN.jsonl --out OUT.jsonl`: a backlog of requests answered into a resumable output file.

Argv edge: builds the backend — in-process (a `DecisionEngine` started here, its micro-batcher fed `--concurrency`
lines at once; failures described by the service's one error table, `api.http.errors.error_payload`, so a record
equals what HTTP would answer) or a running server (`--url`, `api.cli.remote`) — and hands it to
`omni.serve.backlog.run_backlog`. Input lines are the dataset format of `omni eval` with `labels` optional (and
ignored), media as data URLs or paths relative to IN.jsonl. `--adapter NAME=PATH` (repeatable) serves adapters
beside the model; each line's `model` selects one (docs/adapters.md). `--bank FILE` consults hash banks before the
model (`api.cli.bank_flags`; with `--url`, the server's own `--bank` apply). Exit status: 0 every line answered, 1 some
lines have error records (rerun to retry them), 3 the run stopped early (a server that cannot be reached), 2 usage
errors.
Knows nothing of model internals or of how the engine batches; reads no environment.
"""
from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from api.cli.bank_flags import add_bank_flags
from api.cli.decide import add_adapter_flag, add_quantize_flag, add_torch_threads_flag
from omni.contract.config import EngineConfig

if TYPE_CHECKING:
    from omni.banks.shelf import BankShelf
    from omni.contract.policy import Policy
    from omni.contract.types import Decision, DecisionRequest
    from omni.serve.backlog import Backend, BacklogSummary, Describe, EngineBackend
    from omni.serve.engine import DecisionEngine

DEFAULT_TIMEOUT_S = 600.0    # a backlog has no caller waiting: a line only times out when it truly stalls


def add_batch_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", help="IN.jsonl: one System One request per line (the `omni eval` dataset format, "
                                      "labels optional); media as data URLs or paths relative to IN.jsonl")
    parser.add_argument("--out", required=True, help="OUT.jsonl: one record per line, appended as answers finish; "
                                                     "rerunning skips the lines already answered")
    parser.add_argument("--concurrency", type=int, default=None,
                        help="lines in flight (default 2 x --max-batch-records in-process, 16 with --url)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument("--request-timeout-s", type=float, default=DEFAULT_TIMEOUT_S,
                        help=f"give up on one line after this long (default {DEFAULT_TIMEOUT_S:g})")
    remote = parser.add_argument_group("a running server instead of a model here")
    remote.add_argument("--url", help="send each line to `omni serve` at this base URL (http://host:port)")
    remote.add_argument("--api-key", help="Bearer key for --url (a server started with API keys)")
    remote.add_argument("--retries", type=int, default=5, help="tries again after 429 / 503 (default 5)")
    model = parser.add_argument_group("the model (in-process runs)")
    model.add_argument("--model", help="checkpoint directory or hub id (default: the embedded tiny demo model)")
    model.add_argument("--device", default=None, help="cpu, cuda, cuda:1 … (default: cuda if available)")
    model.add_argument("--dtype", default=None, choices=["auto", "float32", "bfloat16", "float16"])
    add_quantize_flag(model)
    add_torch_threads_flag(model)
    add_adapter_flag(model, "serve the adapter folder PATH as model NAME beside the model (repeatable; each line's "
                            "`model` selects one)")
    model.add_argument("--max-batch-records", type=int, default=None,
                       help=f"records per forward pass (default {EngineConfig.max_batch_records})")
    model.add_argument("--policy", metavar="FILE",
                       help="a policy (TOML): each record's response gets x_outcome (act / review / pass); with "
                            "--url the server's own --policy applies")
    add_bank_flags(model)


def run_batch(args: argparse.Namespace) -> int:
    from omni.serve.backlog import compact_output, pending_lines, run_backlog, settled_lines

    problem = _usage_problem(args)
    if problem:
        print(f"omni batch: {problem}", file=sys.stderr)
        return 2
    answered, failed = settled_lines(args.out)
    if not any(True for _ in pending_lines(args.input, answered | failed)):   # no model to load for nothing
        if failed:
            compact_output(args.out)
            print(f"omni batch: nothing to retry in {args.input}: {len(answered)} lines answered, {len(failed)} "
                  f"failed for reasons of their own (4xx; see their records in {args.out})", file=sys.stderr)
            return 1
        print(f"omni batch: every line of {args.input} is answered in {args.out}", file=sys.stderr)
        return 0
    try:
        describe = _describe()
        backend, concurrency, close = _remote(args) if args.url else _in_process(args)
    except ImportError as exc:
        print(f"omni batch: needs the [serve] extra (and httpx for --url): {exc}", file=sys.stderr)
        return 2
    try:
        summary = run_backlog(args.input, args.out, backend, describe, concurrency, not args.quiet)
    finally:
        close()
    return _report(summary, args.out)


def _remote(args: argparse.Namespace) -> tuple[Backend, int, Callable[[], None]]:
    """(backend, lines in flight, close) for `--url`."""
    from api.cli.remote import RemoteBackend

    concurrency = args.concurrency or 16
    backend = RemoteBackend(args.url, Path(args.input).resolve().parent, args.api_key, concurrency,
                            timeout_s=args.request_timeout_s, retries=args.retries)
    return backend, concurrency, backend.close


def _in_process(args: argparse.Namespace) -> tuple[Backend, int, Callable[[], None]]:
    """(backend, lines in flight, close) with a model loaded here."""
    from api.cli.bank_flags import bank_shelf
    from api.cli.decide import quiet_model_loading
    from omni.contract.policy import read_policy

    policy = read_policy(args.policy) if args.policy else None      # PolicyError: exit 2 before the model loads
    shelf = bank_shelf(args)                                         # BankError likewise
    quiet_model_loading(args.quiet)
    config = engine_config(args)
    engine: DecisionEngine | None = None
    try:
        engine = start_engine(config)
        backend = engine_backend(engine, args.input, args.request_timeout_s, retries=args.retries, policy=policy,
                                 banks=shelf)
    except BaseException:
        _closed(engine, shelf)()
        raise
    return backend, args.concurrency or 2 * config.max_batch_records, _closed(engine, shelf)


def _closed(engine: DecisionEngine | None, shelf: BankShelf | None) -> Callable[[], None]:
    """What ends an in-process run: the engine stopped, the banks' video hashers ended."""
    def close() -> None:
        try:
            if engine is not None:
                engine.stop()
        finally:
            if shelf is not None:
                shelf.close()
    return close


def _usage_problem(args: argparse.Namespace) -> str | None:
    if not Path(args.input).is_file():
        return f"{args.input}: no such file"
    if args.concurrency is not None and args.concurrency < 1:
        return "--concurrency must be at least 1"
    model_flags = [f"--{name.replace('_', '-')}" for name in ("model", "device", "dtype", "quantize", "torch_threads",
                                                             "max_batch_records", "adapter")
                   if getattr(args, name) is not None]
    model_flags += ["--policy"] if args.url and args.policy else []
    model_flags += ["--bank"] if args.url and args.bank else []
    model_flags += ["--bank-pdq-threshold"] if args.url and args.bank_pdq_threshold else []
    if args.url and model_flags:
        return f"{', '.join(model_flags)}: the server at --url runs its own model; leave these out"
    if args.api_key and not args.url:
        return "--api-key goes with --url"
    return None


def engine_config(args: argparse.Namespace) -> EngineConfig:
    """The flags over the defaults (as `omni decide`); the queue always holds every line in flight."""
    overrides = {"model_path": args.model, "device": args.device, "dtype": args.dtype, "quantize": args.quantize,
                 "torch_threads": args.torch_threads, "max_batch_records": args.max_batch_records,
                 "adapters": tuple(args.adapter) if getattr(args, "adapter", None) else None}
    # every record carries its decision's audit record (audit="always": the engine shows it, the runner files it)
    config = replace(EngineConfig(audit="always"), **{k: v for k, v in overrides.items() if v is not None})
    concurrency = args.concurrency or 2 * config.max_batch_records
    return replace(config, max_queue=max(config.max_queue, concurrency))


def start_engine(config: EngineConfig) -> DecisionEngine:
    """A started engine (model loaded and warm, serving path running), its heap settled as `omni serve` does."""
    import gc

    from omni.serve.engine import DecisionEngine

    engine = DecisionEngine(config).start()
    gc.collect()
    gc.freeze()      # the model's objects out of the cyclic GC: a full collection otherwise stalls every thread
    return engine


def engine_backend(engine: DecisionEngine, input_path: str | Path, deadline_s: float | None = None,
                   retries: int = 5, policy: Policy | None = None, banks: BankShelf | None = None) -> EngineBackend:
    """The in-process backend for a backlog at `input_path`: its lines parsed with the engine's own rules."""
    from api.http.errors import BodyTooLarge
    from api.http.settings import Settings
    from omni.contract.request_line import parse_request_line
    from omni.serve.backlog import EngineBackend

    root = Path(input_path).resolve().parent
    cap_bytes = Settings(engine=engine.config).body_cap_bytes      # what `omni serve` would take as one body

    def names() -> list[str]:           # the adapters a line's `model` may name
        return engine.adapters.names() if engine.adapters is not None else []

    def parse(text: bytes) -> DecisionRequest:
        if len(text) > cap_bytes:
            raise BodyTooLarge(f"body of {len(text)} bytes is over the {cap_bytes}-byte limit")
        return parse_request_line(text, root, engine.config, adapters=names())

    gate = None
    if banks is not None:
        from omni.banks.gate import decided

        def gate(request: DecisionRequest, forward: Callable[[DecisionRequest], Decision]) -> Decision:
            return decided(banks, request, engine.config, forward)

    return EngineBackend(engine, parse, deadline_s, retries=retries, policy=policy, gate=gate)


def _describe() -> Describe:
    """(exception, request id) -> (status, body): the server's one error table."""
    from api.http.errors import error_payload

    def describe(exc: BaseException, request_id: str) -> tuple[int, dict[str, Any]]:
        status, body, _headers = error_payload(exc, request_id)
        return status, body

    return describe


def _report(summary: BacklogSummary, out: str) -> int:
    tail = f"; {summary.failed} with error records" if summary.failed else ""
    before = (f"; {summary.failed_before} failed before for reasons of their own (4xx: not tried again)"
              if summary.failed_before else "")
    print(f"omni batch: {summary.answered} answered in {summary.wall_s:.1f} s{tail}; {summary.skipped} answered "
          f"before{before}; records in {out} (a rerun retries only lines that failed for the service's reasons: "
          "429, 5xx, timeouts)", file=sys.stderr)
    if summary.aborted:
        left = summary.pending - summary.answered - summary.failed
        print(f"omni batch: stopped early, {left} lines left for a rerun: {summary.aborted}", file=sys.stderr)
        return 3
    return 1 if summary.failed or summary.failed_before else 0
