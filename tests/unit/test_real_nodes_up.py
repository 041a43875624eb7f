"""Re-running ``cluster up`` on a cluster with several real nodes (issue 21 section 1): what ``up`` records (so that
``status``, ``stop_real_node``, a later ``up`` and ``down`` know every node), the labels it removes, each node's
share of the machine, and the cgroup tree removal the nodes' stop uses. The nodes themselves are started in
tests/integration/test_real_node.py; these are the decisions, on the cluster's own ``cluster.json`` in a tmp dir
(no process is started: ``real_node=False``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from modalscale.api.capacity import CAPACITY_TYPE_LABEL, SPOT_TAINT
from modalscale.devenv.cluster import LocalCluster, real_node_record, real_node_request
from modalscale.devenv.nodelayout import MAX_REAL_NODES, check_real_node_count
from modalscale.devenv.realnode import (
    GPU_PRODUCT_LABEL,
    REAL_NODE_TAINT,
    RealNode,
    _rmdir_tree,
    node_label_patch,
    node_reserve,
)

SPOT = {CAPACITY_TYPE_LABEL: "spot"}


def _cpu_m(q: str) -> int:
    return int(q[:-1]) if q.endswith("m") else int(q) * 1000


def _mi(q: str) -> int:
    assert q.endswith("Mi"), q
    return int(q[:-2])


# ---------------------------------------------------------------------------------------------- the record
def test_a_rerun_without_real_node_flags_keeps_the_recorded_nodes_and_labels(tmp_path: Path) -> None:
    """Defect: ``up`` again on a running 2-node cluster wrote a record without node 1 (status, stop_real_node and
    later calls no longer knew it)."""
    cluster = LocalCluster(tmp_path, log=lambda _m: None)
    cluster._write_real_node_info(real_node_record(True, None, 2, {1: dict(SPOT)}))
    cluster._up_real_node(False, "test")  # what `up` records when asked nothing about the real nodes
    assert cluster.real_node_count == 2
    assert cluster._real_node_info()["labels"] == {"1": SPOT}
    assert list(cluster.real_node_status()["nodes"]) == ["real-node-1"]


def test_an_explicit_count_and_labels_replace_the_recorded_ones(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, log=lambda _m: None)
    cluster._write_real_node_info(real_node_record(True, None, 3, {1: dict(SPOT), 2: dict(SPOT)}))
    cluster._up_real_node(False, "test", count=2, labels={})
    info = cluster._real_node_info()
    assert cluster.real_node_count == 2 and "labels" not in info
    assert info["enabled"] is False and info["reason"] == "off (test)"
    with pytest.raises(Exception, match=r"--real-nodes must be within 1..8, got 9"):
        cluster._up_real_node(False, "test", count=9)


def test_stop_real_node_keeps_the_count_and_labels_for_the_next_up(tmp_path: Path) -> None:
    cluster = LocalCluster(tmp_path, log=lambda _m: None)
    cluster._write_real_node_info(real_node_record(True, None, 2, {1: dict(SPOT)}))
    cluster.stop_real_node()  # nothing runs; no apiserver: only the record changes
    info = cluster._real_node_info()
    assert info == {"enabled": False, "reason": "stopped", "count": 2, "labels": {"1": SPOT}}
    assert cluster.real_node_names == []


def test_the_request_keeps_or_replaces_and_refuses_labels_of_absent_nodes() -> None:
    recorded = real_node_record(True, None, 3, {1: dict(SPOT), 2: {GPU_PRODUCT_LABEL: "nvidia-l4"}})
    assert real_node_request({}, None, None) == (1, {})
    assert real_node_request(recorded, None, None) == (3, {1: SPOT, 2: {GPU_PRODUCT_LABEL: "nvidia-l4"}})
    assert real_node_request(recorded, 2, None) == (2, {1: SPOT})  # node 2 is no longer wanted
    assert real_node_request(recorded, None, {}) == (3, {})
    assert real_node_request(recorded, 1, {0: dict(SPOT)}) == (1, {0: SPOT})
    with pytest.raises(ValueError, match=r"real node 2 has labels but real nodes are numbered 0..1"):
        real_node_request(recorded, 2, {2: dict(SPOT)})
    with pytest.raises(ValueError, match=r"--real-nodes must be within 1..8, got 0"):
        real_node_request(recorded, 0, None)


def test_one_real_node_count_check() -> None:
    for ok in (1, MAX_REAL_NODES):
        check_real_node_count(ok)
    for bad in (0, -1, MAX_REAL_NODES + 1):
        with pytest.raises(ValueError, match=f"--real-nodes must be within 1..8, got {bad}"):
            check_real_node_count(bad)
    with pytest.raises(ValueError, match="got 9"):
        RealNode("/tmp/c", nodes=9)


# ---------------------------------------------------------------------------------------------- labels
def test_a_label_no_longer_asked_for_is_removed_with_its_spot_taint() -> None:
    """Defect: ``--spot-real-node 1`` then ``up`` without it left node 1 labelled and tainted Spot."""
    have = {"kubernetes.io/hostname": "real-node-1", "modalscale.io/node-type": "real", **SPOT,
            GPU_PRODUCT_LABEL: "nvidia-l4"}
    not_ready = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
    taints = [dict(REAL_NODE_TAINT), dict(SPOT_TAINT), not_ready]
    patch = node_label_patch(have, taints, {}, [])
    assert patch == {"metadata": {"labels": {CAPACITY_TYPE_LABEL: None, GPU_PRODUCT_LABEL: None}},
                     "spec": {"taints": [REAL_NODE_TAINT, not_ready]}}
    # Only the GPU product changes: its value, no taint.
    assert node_label_patch(have, taints, {**SPOT, GPU_PRODUCT_LABEL: "nvidia-a100"}, [dict(SPOT_TAINT)]) == {
        "metadata": {"labels": {GPU_PRODUCT_LABEL: "nvidia-a100"}}}


def test_labels_and_the_spot_taint_are_added_once_and_a_node_as_wanted_is_left_alone() -> None:
    have = {"modalscale.io/node-type": "real"}
    patch = node_label_patch(have, [dict(REAL_NODE_TAINT)], dict(SPOT), [dict(SPOT_TAINT)])
    assert patch == {"metadata": {"labels": SPOT}, "spec": {"taints": [REAL_NODE_TAINT, SPOT_TAINT]}}
    assert node_label_patch({**have, **SPOT}, [dict(REAL_NODE_TAINT), dict(SPOT_TAINT)], dict(SPOT),
                            [dict(SPOT_TAINT)]) is None
    assert node_label_patch(have, [dict(REAL_NODE_TAINT)], {}, []) is None


# ---------------------------------------------------------------------------------------------- shares
@pytest.mark.parametrize(("cpus", "gib"), [(1, 4), (2, 24), (16, 128)])
def test_each_node_of_several_gets_its_share_and_together_no_more_than_one_node(cpus: int, gib: int) -> None:
    """Defect: every node's allocatable was the whole machine's pods' pool, so N nodes advertised N machines."""
    mem_mi = gib * 1024

    def allocatable(r: dict[str, dict[str, str]]) -> tuple[int, int]:
        cpu = cpus * 1000 - _cpu_m(r["kubeReserved"]["cpu"]) - _cpu_m(r["systemReserved"].get("cpu", "0"))
        return cpu, mem_mi - _mi(r["kubeReserved"]["memory"]) - _mi(r["systemReserved"]["memory"])

    one_cpu, one_mem = allocatable(node_reserve(cpus, gib * 2**30))
    assert node_reserve(cpus, gib * 2**30, 1) == node_reserve(cpus, gib * 2**30)  # one node: as before
    for n in range(2, MAX_REAL_NODES + 1):
        r = node_reserve(cpus, gib * 2**30, n)
        assert r["kubeReserved"] == node_reserve(cpus, gib * 2**30)["kubeReserved"]
        cpu, mem = allocatable(r)
        assert cpu == one_cpu // n and mem == one_mem // n, (n, cpu, mem)
        assert n * cpu <= one_cpu and n * mem <= one_mem


def test_two_nodes_on_the_2_core_24_gib_machine_get_750m_each() -> None:
    r = node_reserve(2, 24 * 2**30, 2)
    assert r == {"kubeReserved": {"cpu": "500m", "memory": "6144Mi"},
                 "systemReserved": {"cpu": "750m", "memory": "9472Mi"}}
    with pytest.raises(ValueError, match="got 9"):
        node_reserve(2, 24 * 2**30, 9)


# ---------------------------------------------------------------------------------------------- cgroup trees
def test_rmdir_tree_removes_empty_dirs_deepest_first_and_keeps_what_is_in_use(tmp_path: Path) -> None:
    top = tmp_path / "kubepods"
    (top / "burstable" / "pod1" / "c1").mkdir(parents=True)
    (top / "besteffort" / "pod2").mkdir(parents=True)
    busy = top / "guaranteed" / "pod3"
    busy.mkdir(parents=True)
    (busy / "tasks").write_text("123\n")  # a cgroup with a process: rmdir fails, like a non-empty dir here
    _rmdir_tree(top)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "kubepods", "kubepods/guaranteed", "kubepods/guaranteed/pod3", "kubepods/guaranteed/pod3/tasks"]
    busy.joinpath("tasks").unlink()
    _rmdir_tree(top)
    assert not top.exists()
    _rmdir_tree(top)  # absent: nothing to do


@pytest.mark.parametrize("member", ["index.json", "./index.json"])
def test_archive_digest_reads_index_json_with_or_without_a_dot_prefix(tmp_path: Path, member: str) -> None:
    """The node's busybox archive (``tar cf -C layout .``) names it ``./index.json``: import_into_cluster failed
    with KeyError on it."""
    import io
    import json
    import tarfile

    from modalscale.devenv.images import archive_digest

    data = json.dumps({"manifests": [{"digest": "sha256:abc"}]}).encode()
    with tarfile.open(tmp_path / "a.tar", "w") as tar:
        info = tarfile.TarInfo(member)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    assert archive_digest(tmp_path / "a.tar") == "sha256:abc"
