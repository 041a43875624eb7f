"""The local cluster's node-loss knobs (issue 21, scenario 2): the controller-manager's node-monitor flags per
cluster, and the crash helper's guard (the crash itself runs on a real node in test_chaos_nodes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from modalscale.devenv.cluster import (
    DEFAULT_NODE_MONITOR_GRACE_PERIOD_S,
    ClusterConfig,
    LocalCluster,
    node_monitor_args,
)
from modalscale.devenv.realnode import RealNode, RealNodeError


@pytest.mark.parametrize(("grace_s", "expected"), [
    (200, ["--node-monitor-period=25s", "--node-monitor-grace-period=200s"]),  # the local default, as before
    (40, ["--node-monitor-period=5s", "--node-monitor-grace-period=40s"]),  # Kubernetes' pair before 1.29
    (20, ["--node-monitor-period=2s", "--node-monitor-grace-period=20s"]),
    (3600, ["--node-monitor-period=25s", "--node-monitor-grace-period=3600s"]),
], ids=["default", "short", "shortest", "long"])
def test_node_monitor_flags_check_an_eighth_of_the_grace_period_at_most_every_25_s(grace_s: int,
                                                                                   expected: list[str]) -> None:
    assert node_monitor_args(grace_s) == expected


def test_a_grace_period_under_two_lease_renewals_is_refused() -> None:
    with pytest.raises(ValueError, match="under 20 s"):
        node_monitor_args(19)


def test_the_grace_period_is_recorded_per_cluster_and_an_old_record_keeps_the_default(tmp_path: Path) -> None:
    assert ClusterConfig().node_monitor_grace_period_s == DEFAULT_NODE_MONITOR_GRACE_PERIOD_S == 200
    (tmp_path / "cluster.json").write_text(json.dumps({"etcd_client_port": 1, "etcd_peer_port": 2,
                                                       "apiserver_port": 3}))  # written before the setting
    cfg = LocalCluster(tmp_path).load_config()
    assert cfg is not None and cfg.node_monitor_grace_period_s == 200


def test_node_0_cannot_crash_it_is_the_machines_network_namespace(tmp_path: Path) -> None:
    with pytest.raises(RealNodeError, match="machine's network namespace"):
        RealNode(tmp_path, log=lambda _m: None, index=0).crash()
