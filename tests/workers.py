"""How the suite is shared between pytest-xdist workers (pyproject's addopts: `-n auto --dist loadgroup`).

The tests are cut into groups, and a group runs on one worker, in collection order:
- a test module is one group, so its module-scoped fixtures (a served app, a fitted data set) are built once;
- every test that starts Ray (tests/cluster and the `scale.py` benchmark smoke) is the one group `ray`: two local Ray
  instances at once would fight over the cores and their ports;
- the browser tests are the one group `browser`: one Chromium (the session's) for all of them;
- each benchmark smoke (a subprocess of its own, no shared fixture) is a group of its own, so they spread.
The groups are handed out longest first (LONGEST_FIRST, measured on a 2-core machine; the others in collection order,
integration before unit): a long group that started last would leave the other workers idle at the end.

xdist's own `loadgroup` reads `xdist_group` marks by rewriting node ids, which pytest 9 no longer lets it do, so the
conftest installs GroupScheduling (xdist's scope scheduler, with these groups as the scopes) for `--dist loadgroup`.
Without xdist (`-n 0`) nothing changes: same order, no groups. Knows nothing of what the tests check.
"""
from __future__ import annotations

from typing import Any

SMOKE = "tests/integration/benchmarks/test_smoke.py"
RAY_SMOKE = f"{SMOKE}::test_smoke[scale.py]"

# The longest groups, longest first (seconds alone on an idle 2-core machine).
LONGEST_FIRST = (
    "tests/integration/docs/test_commands.py",         # ~270 s: every page's commands (two pages at a time)
    "ray",                                             # ~200 s: tests/cluster and scale.py --smoke
    "tests/integration/cli/test_policy_fit.py",        # ~60 s: 320 demo units written and answered
    "browser",                                         # ~90 s
    "tests/integration/test_first_run.py",             # ~40 s: a fresh venv
    "tests/integration/test_wheel.py",                 # ~40 s: a wheel, a fresh venv
    "tests/integration/line/test_crash.py",            # ~40 s: 500 units over MQTT, omni line killed 4 times
    "tests/integration/line/test_example.py",          # ~25 s: the demo line from a folder, then over MQTT
    f"{SMOKE}::test_smoke[cache.py]",
    f"{SMOKE}::test_smoke[load.py]",
    f"{SMOKE}::test_smoke[webhooks.py]",
    "tests/integration/cli/test_serve_subprocess.py",
    f"{SMOKE}::test_smoke[abuse.py]",
    f"{SMOKE}::test_smoke[audit.py]",
)


def group_of(nodeid: str) -> str:
    """The group of a test, from its node id (see the module docstring); an `@NAME` suffix (xdist's own marking of
    an `xdist_group` mark) names its group."""
    if nodeid.rfind("@") > nodeid.rfind("]"):
        return nodeid.rsplit("@", 1)[1]
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/cluster/") or nodeid == RAY_SMOKE:
        return "ray"
    if path.startswith("tests/browser/"):
        return "browser"
    if path == SMOKE and "[" in nodeid:
        return nodeid
    return path


def rank(nodeid: str) -> tuple[int, int]:
    """Sort key: the LONGEST_FIRST groups in that order, then integration tests, then the rest."""
    group = group_of(nodeid)
    if group in LONGEST_FIRST:
        return LONGEST_FIRST.index(group), 0
    return len(LONGEST_FIRST), 0 if group.startswith("tests/integration/") else 1


def longest_first(items: list[Any]) -> None:
    """Sorts a worker's collected tests by `rank` (stable: collection order within a rank). Every worker sorts the
    same collection the same way, as xdist requires."""
    items.sort(key=lambda item: rank(item.nodeid))


def scheduler(config: Any, log: Any) -> Any:
    """xdist's scope scheduler with `group_of` as the scope, handing the groups out in the workers' (sorted) order."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

        def schedule(self) -> None:
            self.config.option.loadscopereorder = False     # keep longest_first's order, not the largest groups first
            super().schedule()

    return GroupScheduling(config, log)
