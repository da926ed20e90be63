"""cli_startup: the wall time of `omni --help` and other commands that load no model, against the floors measured in
the same run.

Each command runs `--runs` times as a fresh process, the way the `omni` console script starts (`sys.exit(main())`
with argv), interleaved round by round so load from other processes on a shared machine hits every command alike.
Two floors, measured in the same rounds: the interpreter itself (`python -c pass`) and `python -c "import torch"`
(what every command paid before the CLI imported torch lazily). With `--compare-tree DIR` (a checkout of an older
commit, e.g. `git worktree add /tmp/before <commit>`) the same commands run from that tree too (PYTHONPATH=DIR), so
the before/after ratio comes from one run. Once per command and tree, a separate run records whether torch was
imported (`imports_torch`), outside the clock.

Prints a JSON line per command and tree (`result`: median and p90 ms, ratios to the floors) and a markdown table.
Not a test: nothing is asserted; figures depend on the machine (tests/unit/cli/test_startup.py asserts the imports).
What it must not know: the CLI's internals (it runs processes and reads their exit codes).

    .venv/bin/python benchmarks/cli_startup.py [--runs 10] [--compare-tree /tmp/before] [--smoke]

`--smoke`: 1 run of each, to check that it runs; its figures mean nothing.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from smoke import parse_with_smoke

ROOT = Path(__file__).resolve().parents[1]
OMNI = "import sys; from api.cli.main import main; sys.exit(main())"   # what the `omni` console script runs
PROBE = ("import sys; from api.cli.main import main\ntry:\n    main()\nexcept SystemExit:\n    pass\n"
         "print('imports_torch=' + str('torch' in sys.modules), file=sys.stderr)")
POLICY = 'version = "startup"\n[questions.label_visible]\nauto_at = 0.95\nact_on = [false]\n'
SMOKE = {"runs": 1}


def commands(policy: Path) -> dict[str, list[str]]:
    """Name -> argv of each command timed (none of them loads a model)."""
    return {"omni --help": ["--help"], "omni serve --help": ["serve", "--help"],
            "omni decide (usage error)": ["decide"], "omni policy check FILE": ["policy", "check", str(policy)]}


def timed(argv: list[str], env: dict[str, str]) -> float:
    """Milliseconds from start to exit of one process (its output discarded), run in the tree it imports from."""
    started = time.perf_counter()
    subprocess.run(argv, cwd=env["PYTHONPATH"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=False)
    return (time.perf_counter() - started) * 1e3


def imports_torch(args: list[str], env: dict[str, str]) -> bool:
    done = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=env["PYTHONPATH"], env=env, capture_output=True,
                          text=True, check=False)
    return "imports_torch=True" in done.stderr


def environment(tree: Path) -> dict[str, str]:
    """The caller's environment without OMNI_* settings, importing from `tree` (`python -c` imports from the working
    directory first, so each process also runs in its tree)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OMNI_")}
    return {**clean, "PYTHONPATH": str(tree)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="wall time of `omni --help` and other model-free commands")
    parser.add_argument("--runs", type=int, default=10, help="processes per command (interleaved rounds)")
    parser.add_argument("--compare-tree", type=Path, default=None,
                        help="an older checkout whose CLI is timed in the same rounds (the 'before')")
    return parse_with_smoke(parser, SMOKE, argv)


def measure(args: argparse.Namespace, policy: Path) -> dict[tuple[str, str], list[float]]:
    """(tree, command) -> wall ms per run; the floors under the tree name 'floor'."""
    trees = {"this": ROOT} | ({"compare": args.compare_tree.resolve()} if args.compare_tree else {})
    jobs = {("floor", "python -c pass"): ([sys.executable, "-c", "pass"], environment(ROOT)),
            ("floor", "python -c 'import torch'"): ([sys.executable, "-c", "import torch"], environment(ROOT))}
    for tree, path in trees.items():
        for name, argv in commands(policy).items():
            jobs[(tree, name)] = ([sys.executable, "-c", OMNI, *argv], environment(path))
    times: dict[tuple[str, str], list[float]] = {key: [] for key in jobs}
    for _ in range(args.runs):
        for key, (argv, env) in jobs.items():
            times[key].append(timed(argv, env))
    return times


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(json.dumps({"env": {"python": platform.python_version(), "cpus": os.cpu_count(), "runs": args.runs,
                              "compare_tree": str(args.compare_tree) if args.compare_tree else None,
                              "loadavg_1m": round(os.getloadavg()[0], 2), "smoke": args.smoke}}))
    with tempfile.TemporaryDirectory(prefix="omni-cli-startup-") as work:
        policy = Path(work) / "policy.toml"
        policy.write_text(POLICY, encoding="utf-8")
        times = measure(args, policy)
        trees = {"this": ROOT} | ({"compare": args.compare_tree.resolve()} if args.compare_tree else {})
        loads = {(tree, name): imports_torch(cmd, environment(path))
                 for tree, path in trees.items() for name, cmd in commands(policy).items()}
    median = {key: statistics.median(ms) for key, ms in times.items()}
    interpreter, torch_floor = median[("floor", "python -c pass")], median[("floor", "python -c 'import torch'")]
    rows = []
    for (tree, name), ms in times.items():
        record = {"result": "cli_startup", "tree": tree, "command": name, "runs": len(ms),
                  "median_ms": round(median[(tree, name)], 1),
                  "p90_ms": round(statistics.quantiles(ms, n=10)[-1] if len(ms) > 1 else ms[0], 1),
                  "over_interpreter": round(median[(tree, name)] / interpreter, 2),
                  "over_import_torch": round(median[(tree, name)] / torch_floor, 3),
                  "imports_torch": loads.get((tree, name))}
        if tree == "this" and ("compare", name) in median:
            record["compare_over_this"] = round(median[("compare", name)] / median[(tree, name)], 2)
        print(json.dumps(record))
        rows.append(record)
    print("\n| tree | command | median ms | p90 ms | / python -c pass | / import torch | imports torch |")
    print("|---|---|---:|---:|---:|---:|---|")
    for r in rows:
        print(f"| {r['tree']} | {r['command']} | {r['median_ms']:,.0f} | {r['p90_ms']:,.0f} | {r['over_interpreter']} "
              f"| {r['over_import_torch']} | {'-' if r['imports_torch'] is None else r['imports_torch']} |")
    print(json.dumps({"loadavg_1m_after": round(os.getloadavg()[0], 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
