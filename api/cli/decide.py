"""`omni decide` and `omni make-tiny`: argv -> one System One request answered in-process; a tiny checkpoint.

An edge like HTTP: reads the request JSON (a file or stdin), turns `--image/--audio/--video FILE` and
`--part NAME=FILE` into named parts exactly as a multipart upload's file parts, and hands both to the one wire parser
(`omni.contract.request.parse_request`), so every media form (Clef slots, TypeSafe assets, llama.cpp files) behaves
as over HTTP. `--adapter NAME=PATH` answers with an adapter folder (docs/adapters.md): loaded beside the model, and
the request's `model` set to it unless the body names another adapter given. `--bank FILE` consults hash banks first
(`api.cli.bank_flags`): a match that decides answers without loading the model. Knows nothing of model internals;
settings from the environment come only through `api.http.settings`.
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from api.cli.bank_flags import add_bank_flags
from omni.contract.config import EngineConfig

if TYPE_CHECKING:
    from omni.banks.shelf import BankShelf
    from omni.contract.json_values import JSONValue
    from omni.contract.types import Decision, DecisionRequest

MEDIA_FLAGS = ("image", "audio", "video")   # --image FILE joins `images`, --audio `audio`, --video `videos`


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="checkpoint directory or hub id (default: the embedded tiny demo model)")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 … (default: cuda if available)")
    parser.add_argument("--dtype", default=None, choices=["auto", "float32", "bfloat16", "float16"])
    parser.add_argument("--confidence", default=None, choices=["clef", "typesafe"],
                        help="confidence formula for choice/score answers (default clef = p_max)")
    parser.add_argument("--max-context-tokens", type=int, default=None)
    add_quantize_flag(parser)
    add_torch_threads_flag(parser)


def add_torch_threads_flag(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """`--torch-threads N`, the one name of that knob on every command that runs the model here (as `omni serve`'s);
    `--threads`, its old name on some of them, still works but is no longer shown."""
    parser.add_argument("--torch-threads", type=int, default=None, metavar="N",
                        help="torch's CPU threads (default 0: sized from the CPUs this process may use, less the "
                             "media decoders', at least 1)")
    parser.add_argument("--threads", type=int, dest="torch_threads", help=argparse.SUPPRESS)   # deprecated name


QUANTIZE_HELP = ("quantize the text layers while loading: none, int8, fp8, nf4 (4-bit) or int4 (CUDA only); default: "
                 "as the checkpoint is stored (docs/quantization.md)")


def add_quantize_flag(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """`--quantize SCHEME` (EngineConfig.quantize), the same on every command that loads the model here."""
    parser.add_argument("--quantize", default=None, metavar="SCHEME",
                        choices=("none", "int8", "fp8", "nf4", "int4"), help=QUANTIZE_HELP)


def add_request_arguments(parser: argparse.ArgumentParser) -> None:
    """REQUEST.json (or -) and its media: --image/--audio/--video FILE and --part NAME=FILE (`cli_parts` reads them)."""
    from preprocess.item import SLOT_OF_KIND

    parser.add_argument("request", help="REQUEST.json, or - to read stdin")
    for flag in MEDIA_FLAGS:
        parser.add_argument(f"--{flag}", action="append", metavar="FILE",
                            help=f"add a file to `{SLOT_OF_KIND[flag]}` (repeatable; after any sent in the JSON)")
    parser.add_argument("--part", action="append", metavar="NAME=FILE", type=_part_spec,
                        help="a named part for a TypeSafe asset {\"type\": \"image\", \"part\": NAME} (repeatable)")


def add_decide_arguments(parser: argparse.ArgumentParser) -> None:
    add_request_arguments(parser)
    parser.add_argument("--compact", action="store_true", help="print the response on one line")
    parser.add_argument("--policy", metavar="FILE",
                        help="a policy (TOML): the response gets x_outcome (act / review / pass per question)")
    parser.add_argument("--audit", action="store_true",
                        help="add the decision's audit record (x_audit): model and calibration hashes, prompt, media")
    parser.add_argument("--evidence", nargs="?", const="chosen", choices=("chosen", "all"), metavar="chosen|all",
                        help="add x_evidence: where in the state and media each answer came from (the chosen "
                             "answer's; `all`: every option's too; docs/evidence.md)")
    add_adapter_flag(parser, "answer with the adapter folder PATH, as model NAME (repeatable: the body's `model` "
                             "chooses among them, else the first answers)")
    add_bank_flags(parser)
    add_model_arguments(parser)


def add_adapter_flag(parser: argparse.ArgumentParser | argparse._ArgumentGroup, help_text: str) -> None:
    """`--adapter NAME=PATH` (repeatable) -> args.adapter, a list of (NAME, PATH): EngineConfig.adapters."""
    parser.add_argument("--adapter", action="append", metavar="NAME=PATH", type=_adapter_spec, help=help_text)


def _adapter_spec(spec: str) -> tuple[str, str]:
    name, sep, path = spec.partition("=")
    if not sep or not name.strip() or not path.strip():
        raise argparse.ArgumentTypeError(f"{spec!r}: expected NAME=PATH (an adapter folder)")
    return name.strip(), path.strip()


def with_adapter_model(body: JSONValue, adapters: list[tuple[str, str]]) -> JSONValue:
    """The body answered by the first adapter given, unless its `model` names one of them."""
    if not adapters or not isinstance(body, dict) or body.get("model") in {name for name, _ in adapters}:
        return body
    return {**body, "model": adapters[0][0]}


def _part_spec(spec: str) -> tuple[str, str]:
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"{spec!r}: expected NAME=FILE")
    return name, path


def quiet_model_loading(quiet: bool) -> None:
    """`--quiet`: no progress bar while the weights load either (transformers draws its own, "Loading weights")."""
    if quiet:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()


def engine_config_from_args(args: argparse.Namespace, base: EngineConfig | None = None) -> EngineConfig:
    """CLI flags override the settings-derived base config, field by field."""
    config = base or EngineConfig()
    overrides = {"model_path": args.model, "device": args.device, "dtype": args.dtype, "confidence": args.confidence,
                 "quantize": args.quantize,
                 "max_context_tokens": args.max_context_tokens, "torch_threads": args.torch_threads,
                 "adapters": tuple(getattr(args, "adapter", None) or ()) or None}
    return replace(config, **{k: v for k, v in overrides.items() if v is not None})


def cli_parts(args: argparse.Namespace) -> list:
    """--image/--audio/--video files and --part NAME=FILE -> named parts, in the order of the flags' kinds."""
    from omni.contract.types import Part
    from preprocess.item import SLOT_OF_KIND

    parts = [Part(SLOT_OF_KIND[flag], Path(path).read_bytes(), origin=f"--{flag} {path}")
             for flag in MEDIA_FLAGS for path in getattr(args, flag) or []]
    parts += [Part(name, Path(path).read_bytes(), origin=f"--part {name}={path}") for name, path in args.part or []]
    return parts


def read_body(source: str) -> JSONValue:
    """The request JSON from a file, or stdin for "-"."""
    from omni.contract.json_values import load_json

    return load_json(sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes())


def cmd_decide(args: argparse.Namespace) -> int:
    from api.cli.bank_flags import bank_shelf
    from omni.contract.outcomes import with_outcome
    from omni.contract.policy import read_policy
    from omni.contract.request import parse_request

    policy = read_policy(args.policy) if args.policy else None      # PolicyError: exit 2 before the model loads
    config = engine_config_from_args(args)
    if args.audit:
        config = replace(config, audit="always")
    adapters = args.adapter or []
    body = read_body(args.request)
    if args.evidence and isinstance(body, dict):
        body = {**body, "x_evidence": True if args.evidence == "chosen" else {"options": "all"}}
    request = parse_request(with_adapter_model(body, adapters), config, cli_parts(args),
                            adapters=[name for name, _ in adapters])
    shelf = bank_shelf(args)                                         # BankError: exit 2 before the model loads
    try:
        decision = with_outcome(_answered(shelf, request, config), request, policy)
    finally:
        if shelf is not None:
            shelf.close()
    print(json.dumps(decision.to_wire(), ensure_ascii=False, indent=None if args.compact else 2))
    return 0


def _answered(shelf: BankShelf | None, request: DecisionRequest, config: EngineConfig) -> Decision:
    """The model's decision; with banks, theirs first: a match that decides answers and the model is never loaded."""
    from omni.serve.engine import DecisionEngine

    if shelf is None:
        return DecisionEngine(config).decide(request)
    from omni.banks.gate import decided

    return decided(shelf, request, config, lambda asked: DecisionEngine(config).decide(asked))


def add_make_tiny_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory")
    parser.add_argument("--seed", type=int, default=0)


def cmd_make_tiny(args: argparse.Namespace) -> int:
    from omni.model.tiny import write_checkpoint

    out = write_checkpoint(args.directory, seed=args.seed)
    print(f"wrote a tiny random Clef-omni checkpoint to {out} (seed {args.seed})", file=sys.stderr)
    return 0
