"""Shared fixtures: the real local control plane for integration tests (one per test session)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import _signals

REPO = Path(__file__).resolve().parents[1]
CRD_DIR = REPO / "crds"
EXAMPLES_DIR = CRD_DIR / "examples"


LANE_ENV = "MODALSCALE_TEST_LANE"
"""When set, this pytest process runs only the tests of one lane (scripts/test.sh runs the lanes side by side)."""
LANES = ("realnode", "operator", "rest")
"""The suite's lanes: each runs in its own pytest process with its own session cluster and port range. ``realnode``:
every test on the machine's one real node (only one cluster can hold it); ``operator``: the other operator tests
(tests/integration/operator), which mostly wait on the operator's loops, and the unit tests (tests/unit); ``rest``:
everything else (runtime, gateway and the other integration tests: most of the CPU work). :data:`PLACED` moves a
few modules that start a control plane of their own, to even the lanes out."""
PLACED = {
    # the real-node lane took the two-real-node chaos module (378 s alone) at 33becf3; test_ha (~270 s, its own
    # KWOK control plane) moved to the lightest lane
    "tests/integration/operator/test_ha.py": "rest",
    "tests/integration/operator/test_first_start.py": "rest",
}
"""Modules whose tests start their own control plane (so no lane's session cluster matters to them), placed by
time: in the lane run at 140bb7f (pytest per lane, three helpers' tests beside it) ``realnode`` took 871 s,
``operator`` 1,422 s and ``rest`` 1,098 s; these three took 146 s, 85 s and 65 s of ``operator``'s. At f419a54
``realnode`` took 36.5 min (the two-real-node chaos module ~14.5 min of it), ``operator`` 20.9 and ``rest`` 23.2:
the spend-anomaly module (its own control plane) went back to ``operator`` and the control plane's own tests to
``rest``, all but the one that needs the real node beside it (test_cluster_real_node.py). CI at ce30573 (stop 32):
``rest`` 52.3 min, the whole run 59.5; ``operator`` about 28-32 min in clean-clone runs: the unit tests (pure CPU,
8-11 min) moved from ``rest`` to ``operator``, which mostly waits on the operator's loops."""


FIRST_IN_REALNODE = ("tests/integration/test_cluster_real_node.py", "tests/integration/test_real_node.py")
"""Modules of the ``realnode`` lane that use none of the project's container images (busybox, built here in
seconds): run first, while scripts/test.sh's background image build makes the code layers. In pytest's own order
the lane's first test waited for that build instead (ci58: 125 s of setup in test_budget_tenant_real_node, the
lane 30.6 min), and these two modules (about 126 s) came last."""


def run_order(module_paths: list[str], first: tuple[str, ...] = FIRST_IN_REALNODE) -> list[int]:
    """Indexes of the tests (each given by its module's path) in the order to run them: those of ``first``'s
    modules ahead, each group in its own order (a stable sort: a module's tests stay together and in order)."""
    return sorted(range(len(module_paths)), key=lambda i: module_paths[i] not in first)


def lane_of(module_path: str, uses_real_node: bool) -> str:
    """The lane (one of :data:`LANES`) of a test, from its module's path relative to the repository
    (``/``-separated) and whether it uses the ``real_node_cluster`` fixture."""
    if uses_real_node:
        return "realnode"
    if module_path in PLACED:
        return PLACED[module_path]
    if module_path.startswith(("tests/integration/operator/", "tests/unit/")):
        return "operator"
    return "rest"


def lane_environment(lane: str) -> dict[str, str]:
    """Variables a lane's pytest process sets for itself and everything it starts (pure).

    Outside ``realnode`` no cluster may take the machine's one real node: ``MODALSCALE_REAL_NODE=0`` turns the
    default (take it where the machine supports it) off for every cluster such a lane starts, in process or through
    the CLI. Without it, at ci72 (stop 45) a control plane of the ``rest`` lane started with the default in the half
    minute when the ``realnode`` lane's session cluster had handed its node to the two-node chaos module and not yet
    taken it back: it took the node, the session cluster came back KWOK-only, and every later real-node test errored.
    A cluster that asks with ``real_node=True`` is not affected (no such one runs outside ``realnode``).
    """
    if lane not in LANES:
        raise ValueError(f"{LANE_ENV}={lane!r}: not a lane; use one of {', '.join(LANES)}")
    from modalscale.devenv.cluster import REAL_NODE_ENV

    return {} if lane == "realnode" else {REAL_NODE_ENV: "0"}


def pytest_configure(config: pytest.Config) -> None:
    _signals.pytest_configure(config)  # SIGTERM tears the session down
    lane = os.environ.get(LANE_ENV, "")
    if lane in LANES:
        os.environ.update(lane_environment(lane))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "/integration/" in str(item.fspath):
            item.add_marker(pytest.mark.integration)
    lane = os.environ.get(LANE_ENV, "")
    if not lane:
        return
    if lane not in LANES:
        raise pytest.UsageError(f"{LANE_ENV}={lane!r}: not a lane; use one of {', '.join(LANES)} or leave it unset")
    keep, drop = [], []
    for item in items:
        rel = Path(str(item.fspath)).resolve().relative_to(REPO).as_posix()
        uses_real_node = "real_node_cluster" in getattr(item, "fixturenames", ())
        (keep if lane_of(rel, uses_real_node) == lane else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
    if lane == "realnode":
        paths = [Path(str(item.fspath)).resolve().relative_to(REPO).as_posix() for item in keep]
        keep = [keep[i] for i in run_order(paths)]
    items[:] = keep


MODULE_SECONDS: dict[str, float] = {}
"""Module path -> seconds its tests' setup, call and teardown took in this session (what the lanes are balanced on;
a session fixture's setup counts in the first test that needs it)."""


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = report.nodeid.split("::", 1)[0]
    MODULE_SECONDS[module] = MODULE_SECONDS.get(module, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The 15 modules that took longest in this session, with their seconds, so a lane's time can be read per
    module from CI's output (``--durations`` shows single tests only)."""
    if not MODULE_SECONDS:
        return
    terminalreporter.section("slowest 15 modules (setup + call + teardown)")
    for module, seconds in sorted(MODULE_SECONDS.items(), key=lambda kv: -kv[1])[:15]:
        terminalreporter.write_line(f"{seconds:8.1f}s {module}")
    terminalreporter.write_line(f"{sum(MODULE_SECONDS.values()):8.1f}s in all {len(MODULE_SECONDS)} modules")


NO_TEST_NEEDS_REAL_NODE = "no collected test needs the real node"


def session_needs_real_node(items: list[pytest.Item]) -> bool:
    """Whether any collected test uses the ``real_node_cluster`` fixture (directly or through another fixture)."""
    return any("real_node_cluster" in getattr(item, "fixturenames", ()) for item in items)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory,
            request: pytest.FixtureRequest) -> Iterator["LocalCluster"]:  # noqa: F821
    """A real etcd + kube-apiserver + controller-manager + scheduler + KWOK with 2 fake GPU nodes (8 GPUs each),
    and the real kubelet node ``real-node-0`` where the machine supports it and a collected test asks for it
    through ``real_node_cluster`` (``cluster.has_real_node``; pods opt in with
    ``modalscale.devenv.realnode.real_node_placement()``; tests/integration/test_real_node.py).

    Binaries come from the cache (built once from the Go module proxy when missing). Set
    ``MODALSCALE_TEST_KEEP_CLUSTER=1`` to leave it running after the session for debugging.
    """
    from modalscale.devenv.cluster import LocalCluster

    workdir = tmp_path_factory.mktemp("cluster")
    c = LocalCluster(workdir, log=lambda m: print(m, flush=True))
    # The machine has one real node: take it only when a collected test needs it (another cluster, e.g. the
    # demo or a benchmark, may want it meanwhile); where one does, the default applies (the node where the
    # machine supports it; ``real_node_cluster`` fails in CI when it did not start).
    wanted = None if session_needs_real_node(request.session.items) else False
    try:
        c.up(nodes=2, gpus_per_node=8, gpu_type="nvidia-l4", real_node=wanted,
             real_node_off_reason=None if wanted is None else NO_TEST_NEEDS_REAL_NODE)
        yield c
    finally:
        if not os.environ.get("MODALSCALE_TEST_KEEP_CLUSTER"):
            c.down()


@pytest.fixture(scope="session")
def real_node_cluster(cluster: "LocalCluster") -> "LocalCluster":  # noqa: F821
    """The session cluster, which must have its real node: a failure in CI (which has one), else a skip (another
    cluster on this machine owns its one real node, or ``MODALSCALE_REAL_NODE=0``)."""
    if not cluster.has_real_node:
        reason = cluster.real_node_status()["reason"]
        if os.environ.get("CI"):
            pytest.fail(f"the session cluster has no real node in CI: {reason}")
        pytest.skip(f"the session cluster has no real node: {reason}")
    return cluster


@pytest.fixture(scope="session")
def api(cluster: "LocalCluster"):  # noqa: F821
    """A ``kubernetes.client.ApiClient`` bound to the session cluster."""
    client = cluster.api_client()
    yield client
    client.close()


@pytest.fixture(scope="session")
def crds_installed(api) -> list[str]:
    """Install every CRD from ``crds/`` and wait until each is Established; returns their names."""
    from modalscale.devenv.kube import install_crds

    return install_crds(api, CRD_DIR)
