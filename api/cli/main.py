"""The `omni` command line: `decide`, `make-tiny`, `serve`.

An edge like HTTP: parses argv, reads request files, builds the EngineConfig and prints results or one-line errors.
Knows nothing of model internals. Settings from the environment come only through `api.http.settings`.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import replace
from pathlib import Path

from omni.contract.config import EngineConfig
from omni.contract.errors import InvalidRequest, MediaError, OmniError

MEDIA_FLAGS = (("image", "images", "image"), ("audio", "audio", "audio"), ("video", "videos", "video"))


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", help="checkpoint directory or hub id (default: the embedded tiny demo model)")
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1 … (default: cuda if available)")
    parser.add_argument("--dtype", default=None, choices=["auto", "float32", "bfloat16", "float16"])
    parser.add_argument("--confidence", default=None, choices=["clef", "typesafe"],
                        help="confidence formula for choice/score answers (default clef = p_max)")
    parser.add_argument("--max-context-tokens", type=int, default=None)


def engine_config_from_args(args: argparse.Namespace, base: EngineConfig | None = None) -> EngineConfig:
    """CLI flags override the settings-derived base config, field by field."""
    config = base or EngineConfig()
    overrides = {"model_path": args.model, "device": args.device, "dtype": args.dtype, "confidence": args.confidence,
                 "max_context_tokens": args.max_context_tokens}
    return replace(config, **{k: v for k, v in overrides.items() if v is not None})


def _read_request(source: str) -> dict:
    from omni.contract.request import load_json

    return load_json(sys.stdin.buffer.read() if source == "-" else Path(source).read_bytes())


def cli_media(args: argparse.Namespace, body) -> list:
    """Files named by --image/--audio/--video → MediaRefs; labels continue the index of the JSON's own items."""
    from omni.contract.types import MediaRef

    refs = []
    for flag, field, kind in MEDIA_FLAGS:
        already = len(body.get(field) or []) if isinstance(body, dict) else 0
        for offset, path in enumerate(getattr(args, flag) or []):
            refs.append(MediaRef(kind, Path(path).read_bytes(), f"{field}[{already + offset}]"))
    return refs


def cmd_decide(args: argparse.Namespace) -> int:
    from omni.serve.engine import DecisionEngine
    from omni.contract.request import parse_request

    config = engine_config_from_args(args)
    body = _read_request(args.request)
    request = parse_request(body, config, cli_media(args, body))
    engine = DecisionEngine(config)
    decision = engine.decide(request)
    print(json.dumps(decision.to_wire(), ensure_ascii=False, indent=None if args.compact else 2))
    return 0


def cmd_make_tiny(args: argparse.Namespace) -> int:
    from omni.model.tiny import write_checkpoint

    out = write_checkpoint(args.directory, seed=args.seed)
    print(f"wrote a tiny random Clef-omni checkpoint to {out} (seed {args.seed})", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="omni", description="Multimodal decisions with a Qwen3-Omni thinker + "
                                     "Clef joint-schema head (System One API).")
    sub = parser.add_subparsers(dest="command", required=True)

    decide = sub.add_parser("decide", help="answer one System One request (JSON file or - for stdin)")
    decide.add_argument("request", help="REQUEST.json, or - to read stdin")
    for flag, field, _ in MEDIA_FLAGS:
        decide.add_argument(f"--{flag}", action="append", metavar="FILE",
                            help=f"add a file to `{field}` (repeatable; after any sent in the JSON)")
    decide.add_argument("--compact", action="store_true", help="print the response on one line")
    _add_model_arguments(decide)
    decide.set_defaults(func=cmd_decide)

    tiny = sub.add_parser("make-tiny", help="write a tiny random checkpoint directory in the released layout")
    tiny.add_argument("directory")
    tiny.add_argument("--seed", type=int, default=0)
    tiny.set_defaults(func=cmd_make_tiny)

    from api.cli.learn import (
        add_calibrate_arguments,
        add_eval_arguments,
        add_finetune_arguments,
        run_calibrate,
        run_eval,
        run_finetune,
    )
    for name, help_text, add, run in (
            ("eval", "score a labelled dataset: metrics.json, report.md, plots", add_eval_arguments, run_eval),
            ("calibrate", "fit temperatures per question type × option count", add_calibrate_arguments, run_calibrate),
            ("finetune", "fine-tune the head (or LoRA / the thinker) on labelled data", add_finetune_arguments,
             run_finetune)):
        command = sub.add_parser(name, help=help_text)
        add(command)
        command.set_defaults(func=run)

    try:
        from api.cli.serve import add_serve_arguments, run_serve
    except ImportError:  # the [serve] extra is not installed
        pass
    else:
        serve = sub.add_parser("serve", help="run the HTTP server (POST /v1/systemone)")
        add_serve_arguments(serve)
        serve.set_defaults(func=run_serve)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except InvalidRequest as exc:
        for issue in exc.issues:
            print(f"omni: invalid request: {'.'.join(map(str, issue.loc)) or '(body)'}: {issue.msg}", file=sys.stderr)
        return 2
    except (MediaError, OmniError, OSError) as exc:
        print(f"omni: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
