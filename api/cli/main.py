"""The `omni` command: one subcommand per job, each wired from its own module; one place prints errors.

`decide` and `make-tiny` (api/cli/decide.py), `explain` (api/cli/explain.py), `eval` / `calibrate` / `finetune`
(api/cli/learn.py), `batch` (api/cli/batch.py), `export statements` and `export checkpoint` (api/cli/export.py),
`replay` (api/cli/replay.py), `policy fit` / `policy check` (api/cli/policy.py), `report drift` (api/cli/report.py),
`serve` and `review` (api/cli/serve.py, api/cli/review.py, when the [serve] extra is installed), `line`
(api/cli/line.py; its sources and sinks need the [line] extra), `doctor`
(api/cli/doctor.py). A caller's mistake is one line on stderr and exit 2, never a traceback; so is a missing torch
(a wheel installed without it names the pip line to run). Knows nothing of model internals or HTTP.

Starts at once: building the parser imports no torch, transformers, numpy or media stack (each subcommand imports
what it runs inside its run function), so `omni --help`, `omni SUBCOMMAND --help`, a usage error and `omni policy
check FILE` never wait for torch, nor do the commands that only read a decision log (`report drift`, `export
statements`) (tests/unit/cli/test_startup.py). Torch is looked for before parsing without being
imported (`torch_absent`), and imported only once a command that needs it is about to run (`torch_problem`).
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import logging
import sys

from api.cli.library_logs import quiet_libraries
from omni.contract.errors import InvalidRequest, OmniError
from preprocess.errors import MediaError

# torch is a dependency left unpinned to a build (CPU or CUDA): the version this project tests with, and where the
# other builds are
TORCH_INSTALL = ("pip install torch==2.13.0 (the version tested; runs on CPU), or for a GPU the CUDA build for your "
                 "machine, e.g. pip install torch --index-url https://download.pytorch.org/whl/cu128 (all builds: "
                 "https://pytorch.org/get-started/locally/)")


def torch_absent() -> str | None:
    """One line saying what to run when torch is not installed at all (or cannot even be looked for); None when it is
    there. Looks torch up without importing it (a fraction of a millisecond), so even `omni --help` names the missing
    dependency without waiting for it."""
    try:
        found = importlib.util.find_spec("torch")
    except (ImportError, OSError, ValueError) as exc:   # an import hook that fails, a broken namespace
        return _broken(exc)
    return _not_installed() if found is None else None


def torch_problem() -> str | None:
    """One line saying what to run when torch does not import (a wheel installed without it, or a broken build); None
    when it imports. Called just before a command that needs torch runs, so the failure is one line, not the command's
    traceback."""
    try:
        importlib.import_module("torch")
    except ModuleNotFoundError as exc:
        if exc.name != "torch":
            return f"torch does not import: {exc}. Reinstall it: {TORCH_INSTALL}"
        return _not_installed()
    except (ImportError, OSError) as exc:       # a CUDA build without its libraries, a half-installed wheel
        return _broken(exc)
    return None


def _not_installed() -> str:
    return f"torch is not installed in this environment ({sys.executable}). Install it first: {TORCH_INSTALL}"


def _broken(exc: Exception) -> str:
    return f"torch is installed but does not import ({type(exc).__name__}: {exc}). Reinstall it: {TORCH_INSTALL}"


def needs_torch(args: argparse.Namespace) -> bool:
    """Whether the parsed command imports torch when it runs: yes unless its subparser says otherwise with a
    `needs_torch` default (a bool, or a function of the parsed args, e.g. `omni policy check` only with `--on`)."""
    declared = getattr(args, "needs_torch", True)
    return bool(declared(args) if callable(declared) else declared)


def build_parser() -> argparse.ArgumentParser:
    from api.cli import bank, batch, decide, doctor, explain, export, learn, line, policy, replay, report

    parser = argparse.ArgumentParser(prog="omni", description="Multimodal decisions with a Qwen3-Omni thinker + "
                                     "Clef joint-schema head (System One API).")
    sub = parser.add_subparsers(dest="command", required=True)
    commands = [
        ("decide", "answer one System One request (JSON file or - for stdin)", decide.add_decide_arguments,
         decide.cmd_decide),
        ("explain", "where each answer of a request came from (x_evidence); --occlude: does that region matter",
         explain.add_explain_arguments, explain.cmd_explain),
        ("make-tiny", "write a tiny random checkpoint directory in the released layout",
         decide.add_make_tiny_arguments, decide.cmd_make_tiny),
        ("eval", "score a labelled dataset: metrics.json, report.md, plots", learn.add_eval_arguments, learn.run_eval),
        ("calibrate", "fit temperatures per question type × option count", learn.add_calibrate_arguments,
         learn.run_calibrate),
        ("finetune", "fine-tune the head (or LoRA / the thinker) on labelled data", learn.add_finetune_arguments,
         learn.run_finetune),
        ("batch", "answer a backlog (JSONL of requests) into a resumable JSONL of records", batch.add_batch_arguments,
         batch.run_batch),
        ("export", "export DSA statements of reasons from a decision log, or a checkpoint in the released layout",
         export.add_export_arguments, export.run_export),
        ("replay", "re-run logged decisions (a decision log, a segment or SEGMENT.jsonl:LINE) and compare them",
         replay.add_replay_arguments, replay.run_replay),
        ("policy", "decision policies: fit thresholds from labelled data at a target precision, check a file",
         policy.add_policy_arguments, policy.run_policy),
        ("line", ("run an inspection line: folder / MQTT / OPC UA triggers, decisions within the cycle time, "
                  "exactly once (docs/line.md)"), line.add_line_arguments, line.run_line),
        ("bank", "hash banks: check bank files; look up what photos and files match in them (docs/banks.md)",
         bank.add_bank_arguments, bank.run_bank),
        ("report", "reports on a decision log: drift of answers and outcomes between time windows (PSI)",
         report.add_report_arguments, report.run_report),
        ("doctor", ("check this machine and (--model DIR) a checkpoint without loading it: versions, CUDA, media "
                    "decoders, files, tensor shapes, memory"), doctor.add_doctor_arguments, doctor.run_doctor),
    ]
    try:
        from api.cli.serve import add_serve_arguments, run_serve
    except ImportError:  # the [serve] extra is not installed
        pass
    else:
        from api.cli.review import add_review_arguments, run_review

        commands.append(("serve", "run the HTTP server (POST /v1/systemone)", add_serve_arguments, run_serve))
        commands.append(("review", "the review workbench on this machine (omni serve with review on)",
                         add_review_arguments, run_review))
    for name, help_text, add, run in commands:
        command = sub.add_parser(name, help=help_text)
        add(command)
        command.set_defaults(func=run)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    quiet_libraries()
    problem = torch_absent()
    if problem:
        print(f"omni: {problem}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    problem = torch_problem() if needs_torch(args) else None
    if problem:
        print(f"omni: {problem}", file=sys.stderr)
        return 2
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
