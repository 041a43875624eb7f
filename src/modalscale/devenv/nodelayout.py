"""Where each real kubelet node of a local cluster keeps its state: paths, sockets, network names, addresses, pod
CIDR, cgroup root and routes (pure: computed from the work dir and the node's index, nothing touched).

Node 0 is the node of a one-node cluster, exactly as before several nodes existed: the machine's network
namespace, the ``cni0`` bridge and pod CIDR ``10.88.0.0/16``, state under ``<workdir>/node``, the kubelet's pods
in the ``kubepods`` cgroup at the root of each hierarchy. Node ``i >= 1`` is a node of its own:

- a network namespace (named ``modalscale-<hash>-<i>`` here; kept by a bind mount on the file
  ``/run/modalscale/<hash>-<i>/netns``, not in ``/run/netns``: ``ip netns add`` turns ``/run/netns`` into a
  shared mount of itself, which hides the pod namespaces node 0's containerd mounted there before, so that
  they can no longer be unmounted) joined to the machine by a veth pair: ``ms<hash8>v<i>`` on the
  machine (``10.87.<i>.1/30``), ``eth0`` in the node (``10.87.<i>.2/30``, its InternalIP and the kubelet's
  listen address), a default route through the machine and, on the machine, a route to its pod CIDR
  ``10.<88+i>.0.0/16`` (bridge ``cni<i>``); kube-proxy runs in that namespace and programs its own iptables;
- a mount namespace shared by its containerd and kubelet, where ``/var/lib/kubelet/device-plugins`` (a path the
  kubelet hard-codes whatever ``--root-dir`` says; kubernetes/kubernetes#68567) is a bind mount of the node's own
  directory: a second kubelet on the machine's one would clean the first one's sockets and share its device
  checkpoint;
- its own containerd root, state and socket, kubelet root, pod logs, CNI config and IPAM data, PID and log files,
  and cgroup root ``/modalscale-<hash>-<i>`` (two kubelets under one ``kubepods`` would each remove the other's
  pods as orphans).

What stays shared on purpose: the kubelet's links in ``/var/log/containers`` (named by container ID, so distinct),
libcni's result cache ``/var/lib/cni/results`` (named by network and container ID) and containerd's shim socket
directory ``/run/containerd/s`` (named by a hash of the node's containerd address and the container).
"""

from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import dataclass
from pathlib import Path

MAX_REAL_NODES = 8
"""Most real nodes one cluster runs (their pod CIDRs are 10.88/16 .. 10.95/16)."""
POD_CIDR = "10.88.0.0/16"
"""Pod addresses of node 0's CNI bridge (host-local IPAM); node ``i`` has ``10.<88+i>.0.0/16``."""
CNI_BRIDGE = "cni0"
"""Node 0's bridge, in the machine's network namespace."""
LOCK_DIR = Path("/run/modalscale")
"""The machine's real-node lock and owner record; the containerd sockets live in per-node directories here."""
KUBELET_STATE_DIR = Path("/var/lib/modalscale")
"""Parent of the kubelets' root dirs (on disk: pods' emptyDir volumes live there)."""
KUBELET_DEVICE_PLUGIN_DIR = Path("/var/lib/kubelet/device-plugins")
"""The kubelet's device-plugin socket and checkpoint directory (fixed path, whatever ``--root-dir`` says)."""
TRANSIT_NET = "10.87.0.0/16"
"""Node ``i``'s veth link is ``10.87.<i>.0/30``: the machine's end ``.1``, the node's ``.2``."""
NODE_NAME_PREFIX = "real-node-"


def check_real_node_count(count: int) -> None:
    """Refuse a real-node count outside 1 .. :data:`MAX_REAL_NODES` (``cluster up --real-nodes``).

    Raises:
        ValueError: ``--real-nodes must be within 1..8, got <count>``.
    """
    if not 1 <= count <= MAX_REAL_NODES:
        raise ValueError(f"--real-nodes must be within 1..{MAX_REAL_NODES}, got {count}")


def workdir_digest(workdir: Path | str) -> str:
    """12 hex characters naming the cluster at ``workdir`` in short machine-wide paths (socket paths have at most
    107 bytes; interface names 15)."""
    return hashlib.sha256(str(Path(workdir).resolve()).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class NodeLayout:
    """Everything of one real node that must not be shared with another node (see the module docstring).

    Paths are absolute; ``netns`` (a name for messages and routes), ``netns_path``, ``veth_host``, ``host_ip``,
    ``node_ip``, ``transit_cidr`` and ``cgroup_root``
    are None for node 0 (the machine's network namespace, its primary IPv4, the root cgroup).
    """

    index: int
    name: str
    node_dir: Path
    pid_dir: Path
    log_dir: Path
    containerd_root: Path
    containerd_state: Path
    runc_root: Path
    address: Path
    kubelet_root: Path
    device_plugin_dir: Path
    pod_logs_dir: Path
    cni_conf_dir: Path
    cni_ipam_dir: Path
    pod_cidr: str
    bridge: str
    netns: str | None
    netns_path: Path | None
    veth_host: str | None
    host_ip: str | None
    node_ip: str | None
    transit_cidr: str | None
    cgroup_root: str | None

    @property
    def own_netns(self) -> bool:
        """True for a node in a network namespace of its own (index >= 1)."""
        return self.netns is not None

    def paths(self) -> dict[str, Path]:
        """Every path field by name (for the no-two-nodes-share-a-path check)."""
        return {k: v for k, v in vars(self).items() if isinstance(v, Path)}


def node_layout(workdir: Path | str, index: int, cache: Path) -> NodeLayout:
    """The layout of real node ``index`` of the cluster at ``workdir``.

    Args:
        workdir: The cluster's work dir.
        index: 0 .. :data:`MAX_REAL_NODES` - 1.
        cache: The machine-wide cache dir (``modalscale.devenv.binaries.cache_dir()``); containerd's root
            (content store, snapshots) is there so that imported images survive ``cluster down``.
    Raises:
        ValueError: ``index`` out of range.
    """
    if not 0 <= index < MAX_REAL_NODES:
        raise ValueError(f"real node index {index} is out of range 0..{MAX_REAL_NODES - 1}")
    workdir = Path(workdir)
    digest = workdir_digest(workdir)
    if index == 0:
        node_dir = workdir / "node"
        short = digest
        return NodeLayout(
            index=0, name=f"{NODE_NAME_PREFIX}0", node_dir=node_dir, pid_dir=workdir / "pids",
            log_dir=workdir / "logs", containerd_root=cache / "node" / "containerd-root",
            containerd_state=node_dir / "containerd" / "state",
            runc_root=node_dir / "containerd" / "state" / "runc",
            address=LOCK_DIR / short / "containerd.sock", kubelet_root=KUBELET_STATE_DIR / short / "kubelet",
            device_plugin_dir=KUBELET_DEVICE_PLUGIN_DIR, pod_logs_dir=node_dir / "pod-logs",
            cni_conf_dir=node_dir / "cni" / "net.d", cni_ipam_dir=node_dir / "cni" / "ipam",
            pod_cidr=POD_CIDR, bridge=CNI_BRIDGE, netns=None, netns_path=None, veth_host=None, host_ip=None,
            node_ip=None, transit_cidr=None, cgroup_root=None)
    node_dir = workdir / f"node-{index}"
    short = f"{digest}-{index}"
    transit = ipaddress.ip_network(f"10.87.{index}.0/30")
    hosts = list(transit.hosts())
    return NodeLayout(
        index=index, name=f"{NODE_NAME_PREFIX}{index}", node_dir=node_dir, pid_dir=workdir / "pids" / f"node-{index}",
        log_dir=workdir / "logs" / f"node-{index}",
        containerd_root=cache / "node" / f"containerd-root-{index}",
        containerd_state=node_dir / "containerd" / "state",
        runc_root=node_dir / "containerd" / "state" / "runc",
        address=LOCK_DIR / short / "containerd.sock", kubelet_root=KUBELET_STATE_DIR / short / "kubelet",
        device_plugin_dir=KUBELET_STATE_DIR / short / "device-plugins", pod_logs_dir=node_dir / "pod-logs",
        cni_conf_dir=node_dir / "cni" / "net.d", cni_ipam_dir=node_dir / "cni" / "ipam",
        pod_cidr=f"10.{88 + index}.0.0/16", bridge=f"cni{index}", netns=f"modalscale-{digest}-{index}",
        netns_path=LOCK_DIR / short / "netns",
        veth_host=f"ms{digest[:8]}v{index}", host_ip=str(hosts[0]), node_ip=str(hosts[1]),
        transit_cidr=str(transit), cgroup_root=f"/modalscale-{digest}-{index}")


def cluster_layouts(workdir: Path | str, count: int, cache: Path) -> list[NodeLayout]:
    """Layouts of nodes ``0 .. count - 1``.

    Raises:
        ValueError: ``count`` is not within 1 .. :data:`MAX_REAL_NODES`.
    """
    check_real_node_count(count)
    return [node_layout(workdir, i, cache) for i in range(count)]


@dataclass(frozen=True)
class Route:
    """One route: in ``netns`` (None: the machine's), to ``dst`` (a CIDR or ``default``) via ``via`` on ``dev``."""

    netns: str | None
    dst: str
    via: str
    dev: str


def node_routes(layout: NodeLayout) -> list[Route]:
    """The routes that join node ``layout`` to the others (``[]`` for node 0, whose pods are on the machine's own
    bridge): on the machine, its pod CIDR via its end of the veth; in the node, a default route via the machine's
    end (the apiserver, the other nodes' pod CIDRs and the internet all go through the machine)."""
    if not layout.own_netns:
        return []
    assert layout.node_ip and layout.host_ip and layout.veth_host
    return [Route(None, layout.pod_cidr, layout.node_ip, layout.veth_host),
            Route(layout.netns, "default", layout.host_ip, "eth0")]


def next_hop(layouts: list[NodeLayout], netns: str | None, dst_ip: str) -> str | None:
    """Where a packet to ``dst_ip`` leaving network namespace ``netns`` goes, by longest prefix over the connected
    networks (bridge, veth) and :func:`node_routes` of ``layouts``: the namespace it enters next (``"host"`` for the
    machine's), ``"pods:<node name>"`` when it is delivered on that node's bridge, None when no route matches.
    Pure: the check that every node's pods reach every other node's."""
    ip = ipaddress.ip_address(dst_ip)
    table: list[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str]] = []
    for lay in layouts:
        ns = lay.netns
        if ns == netns:
            table.append((ipaddress.ip_network(lay.pod_cidr), f"pods:{lay.name}"))
        if lay.own_netns and lay.transit_cidr:
            # The veth's /30 is connected on both ends.
            if netns is None:
                table.append((ipaddress.ip_network(lay.transit_cidr), lay.netns or "host"))
            elif ns == netns:
                table.append((ipaddress.ip_network(lay.transit_cidr), "host"))
        for r in node_routes(lay):
            if r.netns == netns:
                dst = ipaddress.ip_network("0.0.0.0/0" if r.dst == "default" else r.dst)
                table.append((dst, "host" if r.netns is not None else (lay.netns or "host")))
    matches = [(net.prefixlen, target) for net, target in table if ip in net]
    return max(matches)[1] if matches else None
