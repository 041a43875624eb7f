"""Several real nodes on one machine: each node's paths, sockets, names, addresses, pod CIDR, cgroup root and ports
are its own (kubernetes/kubernetes#131977: a second kubelet on the first one's default dirs breaks pods), and the
routes join every node's pods to every other node's."""

from __future__ import annotations

import ipaddress
import itertools
from pathlib import Path

import pytest

from modalscale.devenv.nodelayout import (
    CNI_BRIDGE,
    KUBELET_DEVICE_PLUGIN_DIR,
    MAX_REAL_NODES,
    POD_CIDR,
    Route,
    cluster_layouts,
    next_hop,
    node_layout,
    node_routes,
)
from modalscale.devenv.realnode import (
    CAPACITY_TYPE_LABEL,
    GPU_PRODUCT_LABEL,
    RealNode,
    _is_node_link,
    containerd_address,
    extra_node_indices,
    kubelet_root_dir,
    real_node_labels,
)
from modalscale.runtime.server import free_port

CACHE = Path("/cache/modalscale")
_SUN_PATH_MAX_BYTES = 107
# The kubelet binds these below its root dir (``pod-resources/<10 digits>`` then renamed); containerd adds ``.ttrpc``.
_KUBELET_SOCKETS = ("pod-resources/1749108107", "pod-resources/kubelet.sock",
                    "plugins_registry/modalscale.example.com-reg.sock")


def _under(a: Path, b: Path) -> bool:
    return a == b or b in a.parents


def test_node_0_keeps_the_single_node_layout_byte_for_byte(tmp_path: Path) -> None:
    """--real-nodes 1 is today's node: the machine's namespace, cni0, 10.88/16, <workdir>/node, the hashed socket
    and kubelet root of before, the kubelet's own device-plugin dir and the root cgroup."""
    lay = node_layout(tmp_path, 0, CACHE)
    assert lay.name == "real-node-0" and lay.node_dir == tmp_path / "node"
    assert lay.address == containerd_address(tmp_path) and lay.kubelet_root == kubelet_root_dir(tmp_path)
    assert lay.pid_dir == tmp_path / "pids" and lay.log_dir == tmp_path / "logs"
    assert lay.containerd_root == CACHE / "node" / "containerd-root"
    assert (lay.pod_cidr, lay.bridge) == (POD_CIDR, CNI_BRIDGE) == ("10.88.0.0/16", "cni0")
    assert lay.device_plugin_dir == KUBELET_DEVICE_PLUGIN_DIR
    assert (lay.netns, lay.netns_path, lay.veth_host, lay.node_ip, lay.cgroup_root) == (None,) * 5
    assert node_routes(lay) == []


@pytest.mark.parametrize("workdir", [
    "/tmp/pytest-of-root/pytest-160/test_cluster_down_leaves_no_co0/private",
    "/tmp/" + "a-very-long-directory-name/" * 12 + "cluster",
])
def test_no_two_nodes_share_a_path_socket_name_address_cidr_or_cgroup(workdir: str) -> None:
    nodes = cluster_layouts(workdir, MAX_REAL_NODES, CACHE)
    for a, b in itertools.combinations(nodes, 2):
        for (ka, pa), (kb, pb) in itertools.product(a.paths().items(), b.paths().items()):
            # pid_dir and log_dir of node 0 are the cluster's own dirs; the others' are below them, with their
            # own file names, so no file is shared: compare the component files instead.
            if {ka, kb} <= {"pid_dir", "log_dir"} and a.index == 0:
                continue
            assert not _under(pa, pb) and not _under(pb, pa), (a.name, ka, pa, b.name, kb, pb)
        files_a = {a.pid_dir / f"{c}.pid" for c in ("containerd", "kubelet", "kube-proxy")}
        files_b = {b.pid_dir / f"{c}.pid" for c in ("containerd", "kubelet", "kube-proxy")}
        assert not files_a & files_b
        assert a.name != b.name and a.bridge != b.bridge and a.cgroup_root != b.cgroup_root
        assert not ipaddress.ip_network(a.pod_cidr).overlaps(ipaddress.ip_network(b.pod_cidr))
        if a.own_netns and b.own_netns:
            assert a.netns != b.netns and a.veth_host != b.veth_host and a.netns_path != b.netns_path
            assert a.netns_path and Path("/run/netns") not in a.netns_path.parents  # see nodelayout's docstring
            assert a.transit_cidr and b.transit_cidr
            assert not ipaddress.ip_network(a.transit_cidr).overlaps(ipaddress.ip_network(b.transit_cidr))
    # Nor the control plane's networks: Services 10.0.0.0/16, KWOK pods 10.244.0.0/16, every node's pods/links.
    nets = [ipaddress.ip_network(n.pod_cidr) for n in nodes]
    nets += [ipaddress.ip_network(n.transit_cidr) for n in nodes if n.transit_cidr]
    for fixed in ("10.0.0.0/16", "10.244.0.0/16"):
        assert not any(ipaddress.ip_network(fixed).overlaps(n) for n in nets)
    for n in nodes[1:]:
        assert len(str(n.veth_host)) <= 15 and len(str(n.netns)) <= 255  # IFNAMSIZ - 1
        assert n.cgroup_root and n.cgroup_root.startswith("/") and "kubepods" not in n.cgroup_root
        sockets = [n.kubelet_root / s for s in _KUBELET_SOCKETS] + [n.address, Path(f"{n.address}.ttrpc")]
        sockets.append(KUBELET_DEVICE_PLUGIN_DIR / "kubelet.sock")  # bound there in the node's mount namespace
        assert [str(s) for s in sockets if len(str(s).encode()) > _SUN_PATH_MAX_BYTES] == []
    # Two clusters never share a node's paths either.
    other = cluster_layouts(workdir + "-2", MAX_REAL_NODES, CACHE)
    for a, b in zip(nodes[1:], other[1:], strict=True):
        assert a.address != b.address and a.kubelet_root != b.kubelet_root and a.netns != b.netns
        assert a.cgroup_root != b.cgroup_root and a.veth_host != b.veth_host


def test_the_ports_of_several_nodes_are_distinct() -> None:
    """The node's four ports (kubelet, its healthz, kube-proxy's metrics and healthz) come from free_port, which
    never hands out a port twice in a row of calls: several nodes started by one process get distinct ones."""
    ports = [free_port() for _ in range(4 * MAX_REAL_NODES)]
    assert len(set(ports)) == len(ports)


def test_routes_join_every_nodes_pods_to_every_other_nodes_pods() -> None:
    nodes = cluster_layouts("/tmp/cluster", 3, CACHE)
    assert node_routes(nodes[1]) == [Route(None, "10.89.0.0/16", "10.87.1.2", nodes[1].veth_host or ""),
                                     Route(nodes[1].netns, "default", "10.87.1.1", "eth0")]
    for src, dst in itertools.product(nodes, nodes):
        pod_ip = str(next(ipaddress.ip_network(dst.pod_cidr).hosts()) + 5)
        ns, seen = src.netns, []
        for _ in range(4):  # a pod's packet crosses at most: its node -> the machine -> the other node
            hop = next_hop(nodes, ns, pod_ip)
            assert hop is not None, (src.name, dst.name, seen)
            seen.append(hop)
            if hop.startswith("pods:"):
                break
            ns = None if hop == "host" else hop
        assert seen[-1] == f"pods:{dst.name}", (src.name, dst.name, seen)
        assert len(seen) <= 3
    # The apiserver at the machine's address is reached from every node through the machine.
    for n in nodes[1:]:
        assert next_hop(nodes, n.netns, "192.0.2.2") == "host"
    # Without the routes a node's pods are unreachable from the machine: the check can fail.
    assert next_hop(nodes[:1], None, "10.89.0.6") is None


def test_node_indices_and_counts_out_of_range_are_refused() -> None:
    with pytest.raises(ValueError, match="--real-nodes must be within 1..8"):
        cluster_layouts("/tmp/c", 0, CACHE)
    with pytest.raises(ValueError, match="--real-nodes must be within 1..8"):
        cluster_layouts("/tmp/c", MAX_REAL_NODES + 1, CACHE)
    with pytest.raises(ValueError, match="out of range"):
        node_layout("/tmp/c", -1, CACHE)


def test_real_node_objects_follow_the_layout(tmp_path: Path) -> None:
    n1 = RealNode(tmp_path, index=1)
    assert n1.dir == tmp_path / "node-1" and n1.name == "real-node-1"
    assert n1._pidfile("kubelet") == tmp_path / "pids" / "node-1" / "kubelet.pid"
    assert n1.address != RealNode(tmp_path).address and n1.kubelet_root != RealNode(tmp_path).kubelet_root
    (tmp_path / "node").mkdir()
    for d in ("node-2", "node-1", "node-x", "node-99"):
        (tmp_path / d).mkdir()
    assert extra_node_indices(tmp_path) == [1, 2]


def test_node_ip_skips_the_bridge_and_the_nodes_veths() -> None:
    assert _is_node_link("5: cni0    inet 10.88.0.1/16 brd 10.88.255.255 scope global cni0")
    assert _is_node_link("9: ms0123abcdv1@if2    inet 10.87.1.1/30 scope global ms0123abcdv1")
    assert not _is_node_link("4: eth0    inet 192.0.2.2/24 brd 192.0.2.255 scope global eth0")


def test_spot_and_gpu_labels_per_node_and_their_errors() -> None:
    assert real_node_labels(1, [], []) == {}
    assert real_node_labels(2, [1], ["1=nvidia-l4", "0=NVIDIA-A100-SXM4-40GB"]) == {
        1: {CAPACITY_TYPE_LABEL: "spot", GPU_PRODUCT_LABEL: "nvidia-l4"},
        0: {GPU_PRODUCT_LABEL: "NVIDIA-A100-SXM4-40GB"}}
    with pytest.raises(ValueError, match=r"--spot-real-node 2: real nodes are numbered 0..1"):
        real_node_labels(2, [2], [])
    with pytest.raises(ValueError, match=r"--real-node-gpu 'nvidia-l4': write INDEX=PRODUCT"):
        real_node_labels(2, [], ["nvidia-l4"])
    with pytest.raises(ValueError, match="valid label value"):
        real_node_labels(2, [], ["1=bad product"])
    with pytest.raises(ValueError, match="numbered 0..0"):
        real_node_labels(1, [], ["1=nvidia-l4"])


def test_a_spot_real_node_registers_with_the_spot_taint_and_its_labels(tmp_path: Path) -> None:
    spot = RealNode(tmp_path, index=1, labels=real_node_labels(2, [1], ["1=nvidia-l4"])[1])
    assert spot._extra_taints() == [{"key": CAPACITY_TYPE_LABEL, "value": "spot", "effect": "NoSchedule"}]
    assert RealNode(tmp_path, index=1)._extra_taints() == []
