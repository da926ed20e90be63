"""Issue 31, a CLI that starts at once: `omni --help`, `omni SUBCOMMAND --help` (every subcommand, found from the
parser itself, nested ones included), usage errors and `omni policy check FILE` never import torch or transformers;
help and usage errors import no media or web stack either.

Checked on `sys.modules`, never on a time: the cases run one after another in one fresh interpreter (the entry point
as the `omni` script runs it, `main()` with argv, until it exits), and after each the heavy modules loaded so far
are recorded, so the first case that pulls one in is the one named. Building the parser here in the test process is
only to discover the subcommands; what is asserted comes from the child.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from api.cli.main import build_parser, needs_torch

ROOT = Path(__file__).resolve().parents[3]
MODEL_STACK = ("torch", "transformers")
# what a help text or a usage error has no use for either (each takes a noticeable part of a second to import)
MEDIA_AND_WEB = ("numpy", "av", "PIL", "scipy", "safetensors", "fastapi", "starlette", "uvicorn", "httpx")
CHILD = """import json, sys
from api.cli.main import main
heavy = json.loads(sys.argv[1])
for argv in json.loads(sys.argv[2]):
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    print(json.dumps({"argv": argv, "code": code, "loaded": [m for m in heavy if m in sys.modules]}))
"""
POLICY = """version = "startup-check"
[questions.label_visible]
auto_at = 0.95
act_on = [false]
"""


def subcommands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every subcommand path of `parser` (("serve",), ("policy",), ("policy", "fit"), ...), nested ones included."""
    found: list[tuple[str, ...]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found.append((*prefix, name))
                found += subcommands(child, (*prefix, name))
    return found


def run_cases(cases: list[list[str]], watched: tuple[str, ...] = MODEL_STACK + MEDIA_AND_WEB) -> list[dict]:
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(watched), json.dumps(cases)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith('{"argv"')]
    assert [r["argv"] for r in results] == cases, done.stdout[-2000:] + done.stderr[-2000:]
    return results


def test_the_subcommands_are_all_found():
    paths = subcommands(build_parser())
    assert {("serve",), ("decide",), ("batch",), ("doctor",), ("policy", "check"), ("policy", "fit"),
            ("export", "statements"), ("report", "drift"), ("replay",), ("finetune",)} <= set(paths)


def test_help_and_usage_errors_import_no_model_media_or_web_stack():
    helps = [["--help"]] + [[*path, "--help"] for path in subcommands(build_parser())]
    mistakes = [[], ["--no-such-flag"], ["no-such-command"], ["decide"], ["decide", "x.json", "--no-such-flag"],
                ["serve", "--no-such-flag"], ["policy"], ["policy", "check"], ["finetune", "data.jsonl"],
                ["finetune", "data.jsonl", "--out", "o", "--mode", "no-such-mode"],
                ["batch", "in.jsonl", "--out", "o", "--torch-threads", "many"]]
    results = run_cases(helps + mistakes)
    for result in results:
        expected = 0 if result["argv"][-1:] == ["--help"] else 2
        assert result["code"] == expected, result
        assert result["loaded"] == [], f"omni {' '.join(result['argv'])} imported {result['loaded']}"


def test_the_commands_that_read_a_decision_log_run_without_torch(tmp_path):
    (tmp_path / "log").mkdir()
    drift, statements, shadow = run_cases([["report", "drift", str(tmp_path / "log")],
                                           ["export", "statements", str(tmp_path / "log"), "--map",
                                            str(tmp_path / "m.toml"), "--out", str(tmp_path / "out.jsonl")],
                                           ["report", "shadow", str(tmp_path / "log"), "--out", str(tmp_path / "o")]],
                                          (*MODEL_STACK, "omni.serve.decision_log_files"))
    for result in (drift, statements, shadow):
        assert result["code"] == 2, result          # an empty log, a missing map: each one line, exit 2
        assert result["loaded"] == ["omni.serve.decision_log_files"], result     # it got as far as the log reader


def test_policy_check_reads_a_policy_without_torch(tmp_path):
    good = tmp_path / "policy.toml"
    good.write_text(POLICY, encoding="utf-8")
    bad = tmp_path / "bad.toml"
    bad.write_text('version = "x"\n[questions.q]\nauto_at = 2.0\n', encoding="utf-8")
    checked, refused = run_cases([["policy", "check", str(good)], ["policy", "check", str(bad)]])
    assert checked["code"] == 0, checked
    assert refused["code"] == 2, refused
    for result in (checked, refused):
        assert not set(result["loaded"]) & set(MODEL_STACK), result


@pytest.mark.parametrize(("argv", "needed"), [(["decide", "examples/inspection.json"], True),
                                               (["serve"], True), (["policy", "check", "x.toml"], False),
                                               (["policy", "check", "x.toml", "--on", "data.jsonl"], True),
                                               (["policy", "fit", "d", "--target-precision", "0.9", "--out", "p"],
                                                True), (["report", "drift", "log"], False),
                                               (["export", "statements", "log", "--map", "m", "--out", "o"], False),
                                               (["report", "shadow", "log", "--out", "o"], False)])
def test_the_torch_guard_runs_before_each_command_that_needs_torch(argv, needed):
    """Parsing no longer imports torch, so `main` imports it (a one-line error when it does not import) just before a
    command that needs it runs: every command but those that only read files (`policy check` without `--on`,
    `report drift`, `export statements`)."""
    assert needs_torch(build_parser().parse_args(argv)) is needed
