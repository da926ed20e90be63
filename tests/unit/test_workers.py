"""tests/workers.py: which tests share an xdist worker, and the order the groups are handed out in."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.workers import LONGEST_FIRST, SMOKE, group_of, rank

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("nodeid", "group"), [
    ("tests/cluster/test_launch.py::test_autoscale_adds_a_replica_under_load", "ray"),
    ("tests/cluster/test_serve_ray.py::test_metrics_sum_the_replicas", "ray"),
    (f"{SMOKE}::test_smoke[scale.py]", "ray"),
    ("tests/browser/test_team.py::test_without_keys_the_page_asks_a_name_once_and_labels_record_it", "browser"),
    (f"{SMOKE}::test_smoke[cache.py]", f"{SMOKE}::test_smoke[cache.py]"),
    (f"{SMOKE}::test_every_benchmark_has_a_smoke_check", SMOKE),
    ("tests/integration/cli/test_policy_fit.py::test_cli_check_and_fit_refuse_bad_input_with_exit_2",
     "tests/integration/cli/test_policy_fit.py"),
    ("tests/unit/test_imports.py::test_imports_point_down_the_rooms[omni/model/attention.py]",
     "tests/unit/test_imports.py"),
    ("tests/unit/http/test_errors.py::TestX::test_y", "tests/unit/http/test_errors.py"),
    ("tests/unit/a.py::test_b@mine", "mine"),                            # xdist's own `xdist_group` suffix
    ("tests/unit/a.py::test_b[x@y]", "tests/unit/a.py"),                 # an @ inside a parameter is no group
])
def test_each_test_has_its_group(nodeid, group):
    assert group_of(nodeid) == group


def test_a_module_runs_on_one_worker_whatever_its_parameters():
    ids = [f"tests/integration/docs/test_commands.py::test_the_commands_of_the_page_run[{page}]"
           for page in ("README.md", "docs/serving.md")] + ["tests/integration/docs/test_commands.py::test_x"]
    assert {group_of(i) for i in ids} == {"tests/integration/docs/test_commands.py"}


def test_every_longest_first_group_still_names_tests():
    """A moved or renamed module would silently lose its place at the front."""
    for group in LONGEST_FIRST:
        if group in ("ray", "browser"):
            continue
        path, _, test = group.partition("::")
        assert (ROOT / path).is_file(), f"LONGEST_FIRST names {path}, which does not exist"
        if test:
            script = test.removeprefix("test_smoke[").removesuffix("]")
            assert (ROOT / "benchmarks" / script).is_file(), f"LONGEST_FIRST names {group}: no benchmarks/{script}"


def test_the_longest_groups_go_first_then_integration_then_unit():
    order = sorted(["tests/unit/test_imports.py::test_a", "tests/integration/serve/test_engine.py::test_b",
                    "tests/cluster/test_launch.py::test_c", "tests/integration/docs/test_commands.py::test_d"],
                   key=rank)
    assert order == ["tests/integration/docs/test_commands.py::test_d", "tests/cluster/test_launch.py::test_c",
                     "tests/integration/serve/test_engine.py::test_b", "tests/unit/test_imports.py::test_a"]


def test_an_xdist_worker_has_the_longest_groups_first(request):
    """The conftest's hook sorted this worker's collection (every worker sorts the same collection alike)."""
    if not hasattr(request.config, "workerinput"):
        pytest.skip("without xdist (-n 0) the collection keeps its order")
    keys = [rank(item.nodeid) for item in request.session.items]
    assert keys == sorted(keys)
