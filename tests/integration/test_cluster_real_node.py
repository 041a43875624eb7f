"""The local control plane beside the session cluster that holds the machine's one real node (the ``realnode``
lane): a second cluster never takes it. The rest of the control plane's own tests are in test_cluster.py, in the
``rest`` lane, whose session cluster has no real node."""

from __future__ import annotations

from pathlib import Path

from kubernetes import client

from modalscale.devenv.cluster import LocalCluster


def test_real_node_off_is_recorded_and_a_second_cluster_never_takes_the_machines_real_node(
        tmp_path: Path, real_node_cluster: LocalCluster) -> None:
    """Without --real-node the cluster says why it has none; while the session cluster runs the machine's real
    node, another cluster asking for one runs KWOK-only and names the owner."""
    cluster = real_node_cluster
    third = LocalCluster(tmp_path / "third", log=lambda _m: None)
    try:
        third.up(nodes=1, real_node=False)
        assert third.real_node_status()["enabled"] is False
        assert third.real_node_status()["reason"] == "off (--no-real-node)"
        third.up(nodes=1, real_node=True)
        st = third.real_node_status()
        assert st["enabled"] is False and str(cluster.workdir) in st["reason"], st
        assert not any(st["processes"].values())
        names = [n.metadata.name for n in client.CoreV1Api(third.api_client()).list_node().items]
        assert names == ["kwok-gpu-0"]
    finally:
        third.down()
    assert cluster.has_real_node and cluster.real_node_status()["enabled"]
