"""The whole suite's lanes (tests/conftest.py, scripts/test.sh): every test lands in exactly one lane, the script
runs every lane, and the lanes' port ranges never overlap each other, the kernel's ephemeral ports or NodePorts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from modalscale.devenv.realnode import real_node_plan
from modalscale.runtime.server import port_range
from tests.conftest import FIRST_IN_REALNODE, LANES, PLACED, lane_environment, lane_of, run_order

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "test.sh"


@pytest.mark.parametrize(("path", "real", "lane"), [
    ("tests/integration/test_images.py", True, "realnode"),
    ("tests/integration/operator/test_gateway_real_node.py", True, "realnode"),
    ("tests/integration/operator/test_budget.py", False, "operator"),
    ("tests/integration/operator/test_reconcile.py", False, "operator"),
    ("tests/integration/test_helm.py", False, "rest"),
    ("tests/integration/runtime/test_runtime_cli.py", False, "rest"),
    ("tests/unit/test_suite_lanes.py", False, "operator"),
    ("tests/integration/operator/test_spend_anomaly.py", False, "operator"),
    ("tests/integration/test_cluster.py", False, "rest"),
    ("tests/integration/test_cluster_real_node.py", True, "realnode"),
])
def test_each_test_has_one_lane(path: str, real: bool, lane: str) -> None:
    assert lane_of(path, real) == lane


def test_placed_modules_exist_and_name_a_lane() -> None:
    root = SCRIPT.parents[1]
    for module, lane in PLACED.items():
        assert (root / module).is_file(), module
        assert lane in LANES, (module, lane)


def _script_lanes() -> tuple[list[str], dict[str, str]]:
    text = SCRIPT.read_text(encoding="utf-8")
    loops = re.findall(r"^\s*for lane in ([a-z ]+); do$", text, re.M)
    ranges = dict(re.findall(r"\[([a-z]+)\]=(\d+-\d+)", text))
    assert len(loops) >= 2 and len(set(loops)) == 1, loops  # start, outcome table, exit codes: the same lanes
    return loops[0].split(), ranges


def test_the_script_runs_every_lane_each_with_its_own_port_range() -> None:
    lanes, ranges = _script_lanes()
    assert lanes == list(LANES) and sorted(ranges) == sorted(LANES)
    bounds = sorted(r for r in (port_range(v) for v in ranges.values()) if r is not None)
    assert len(bounds) == len(LANES)
    for (_, high), (low, _) in zip(bounds, bounds[1:], strict=False):
        assert high < low, bounds  # disjoint
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert bounds[-1][1] < min(ephemeral_low, 30000), bounds  # below ephemeral ports and the NodePort range


def test_the_realnode_lane_runs_its_modules_without_images_first_each_in_its_own_order() -> None:
    paths = ["tests/integration/operator/test_budget_tenant_real_node.py",
             "tests/integration/operator/test_chaos_nodes.py", "tests/integration/operator/test_chaos_nodes.py",
             "tests/integration/test_cluster_real_node.py", "tests/integration/test_images.py",
             "tests/integration/test_real_node.py", "tests/integration/test_real_node.py"]
    assert [paths[i] for i in run_order(paths)] == [paths[3], paths[5], paths[6], paths[0], paths[1], paths[2],
                                                    paths[4]]
    assert run_order(paths) == [3, 5, 6, 0, 1, 2, 4]  # the two test_real_node tests kept in their order


def test_the_modules_run_first_exist_use_the_real_node_and_no_project_image() -> None:
    root = SCRIPT.parents[1]
    for module in FIRST_IN_REALNODE:
        text = (root / module).read_text(encoding="utf-8")
        assert "real_node_cluster" in text or "real: LocalCluster" in text, module
        assert "images_imported" not in text and "build_images" not in text, module


@pytest.mark.parametrize("lane", LANES)
def test_only_the_realnode_lane_lets_a_cluster_take_the_real_node_by_default(lane: str) -> None:
    """ci72: a ``rest``-lane control plane started with the default took the machine's node while the ``realnode``
    lane's session cluster was between stopping and restarting it."""
    env = lane_environment(lane)
    start, reason = real_node_plan(None, env.get("MODALSCALE_REAL_NODE", ""), [])
    assert start is (lane == "realnode"), (lane, env, reason)
    assert real_node_plan(True, env.get("MODALSCALE_REAL_NODE", ""), []) == (True, None)  # asking still works


def test_a_lane_that_is_not_one_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="MODALSCALE_TEST_LANE='fast'.*realnode, operator, rest"):
        lane_environment("fast")


def test_the_scripts_python_processes_share_one_bytecode_cache_in_the_venv() -> None:
    """With ``PYTHONDONTWRITEBYTECODE=1`` in the environment (as on the CI machines) and uv installing without
    bytecode, every Python process the suite starts compiled scikit-learn, SciPy, torch, the Kubernetes client ...
    from source again: 12.6 s of user CPU to import the suite's heavy packages in a fresh interpreter, 7.7 s with
    their bytecode cached (shared 2-core machine), and the unit tests alone start dozens of such interpreters.
    scripts/env.sh has every process of the script read and write one cache inside .venv (out of the source tree
    and of site-packages, so images and wheels built from the tree are unchanged)."""
    import os
    import subprocess

    root = SCRIPT.parents[1]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPYCACHEPREFIX", None)
    shown = subprocess.run(
        ["bash", "-c", '. scripts/env.sh && use_bytecode_cache && echo "${PYTHONDONTWRITEBYTECODE-unset}" '
                       '"${PYTHONPYCACHEPREFIX-unset}"'],
        cwd=root, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.split() == ["unset", f"{root}/.venv/pycache"]
    env_sh = (root / "scripts" / "env.sh").read_text(encoding="utf-8")
    ensure = env_sh[env_sh.index("ensure_python_env() {"):]
    assert "\n  use_bytecode_cache\n" in ensure[:ensure.index("\n}\n")]  # test.sh, --fast and demo.sh alike
