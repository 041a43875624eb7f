"""``modalscale cluster up|down|status``: the local control plane with fake GPU nodes."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from modalscale.devenv.binaries import BuildError, ensure_binaries, tool_dirs
from modalscale.devenv.cluster import ClusterError, LocalCluster, check_fake_gpu_nodes, default_workdir
from modalscale.devenv.nodelayout import MAX_REAL_NODES, check_real_node_count


def add_parser(sub: Any) -> None:
    """Register ``cluster`` and its subcommands on ``sub`` (an argparse subparsers action)."""
    p = sub.add_parser("cluster", help="local control plane: etcd, apiserver, controller-manager, scheduler, KWOK")
    p.add_argument("--workdir", type=Path, default=None,
                   help=f"cluster state directory (default: {default_workdir()})")
    csub = p.add_subparsers(dest="cluster_command", metavar="ACTION", required=True)
    up = csub.add_parser("up", help="build or reuse the binaries, start the control plane, create fake GPU nodes")
    up.add_argument("--nodes", type=int, default=2, help="fake GPU nodes (default 2)")
    up.add_argument("--gpus-per-node", type=int, default=None,
                    help="nvidia.com/gpu capacity of new fake nodes (default 8; existing nodes are kept as they are, "
                         "a warning names a difference)")
    up.add_argument("--gpu-type", default=None,
                    help="nvidia.com/gpu.product label of new fake nodes (default nvidia-l4; existing nodes are kept "
                         "as they are, a warning names a difference)")
    up.add_argument("--spot-nodes", type=int, default=1,
                    help="fake Spot GPU nodes kwok-gpu-spot-<i> besides, labelled and tainted "
                         "karpenter.sh/capacity-type=spot (for the SwitchToSpot budget action; default 1)")
    up.add_argument("--real-node", action=argparse.BooleanOptionalAction, default=None,
                    help="also run a real kubelet node (containerd, runc, CNI bridge, kube-proxy); default: on where "
                         "the machine supports it (root, containerd, runc, CNI plugins, cgroup controllers), "
                         "otherwise KWOK-only with a message naming what is missing")
    up.add_argument("--real-nodes", type=int, default=None, metavar="N",
                    help=f"real kubelet nodes real-node-0..N-1 when the real node runs (1..{MAX_REAL_NODES}; default: "
                         "as many as the cluster runs, 1 at first; a smaller N stops the nodes beyond it): node 0 in "
                         "the machine's network namespace, each other one in network and mount namespaces of its "
                         "own with its own containerd, kubelet, kube-proxy, pod CIDR 10.<88+i>.0.0/16 and routes; "
                         "each node's allocatable is its share of the machine")
    up.add_argument("--spot-real-node", type=int, action="append", default=[], metavar="I",
                    help="mark real node I Spot: label and taint karpenter.sh/capacity-type=spot (repeatable)")
    up.add_argument("--real-node-gpu", action="append", default=[], metavar="I=PRODUCT",
                    help="label real node I nvidia.com/gpu.product=PRODUCT, what the cost model prices it as "
                         "(repeatable; the node has no GPU device). With any of --real-nodes, --spot-real-node and "
                         "--real-node-gpu the nodes get exactly the Spot and GPU labels given (others are removed); "
                         "with none of them they keep theirs")
    up.set_defaults(func=_up)
    down = csub.add_parser("down", help="stop exactly the processes `up` started")
    down.set_defaults(func=_down)
    env = csub.add_parser("env", help="print shell exports: KUBECONFIG of this cluster, and the cached kubectl and "
                                      "helm on PATH (eval \"$(modalscale cluster env)\")")
    env.set_defaults(func=_env)
    st = csub.add_parser("status", help="tell what runs")
    st.add_argument("--json", action="store_true", help="print JSON")
    st.set_defaults(func=_status)
    build = csub.add_parser("build", help="only build (or find cached) binaries: helm, kubelet, kube-proxy and "
                                          "a Prometheus with Kubernetes discovery included")
    build.set_defaults(func=_build)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _up(args: argparse.Namespace) -> int:
    from modalscale.devenv.realnode import real_node_labels

    try:  # before anything starts: a bad value refused by the apiserver would leave the control plane running
        for flag, count in (("--nodes", args.nodes), ("--spot-nodes", args.spot_nodes)):
            if count < 0:
                raise ValueError(f"{flag} {count}: must be >= 0")
        check_fake_gpu_nodes(args.gpus_per_node, args.gpu_type)
    except ValueError as exc:
        _log(f"modalscale cluster up: {exc}")
        return 2
    cluster = LocalCluster(args.workdir, log=_log)
    labels = None  # none of the real-node flags: the nodes keep their count and labels
    try:
        if args.real_nodes is not None:
            check_real_node_count(args.real_nodes)
        if args.real_nodes is not None or args.spot_real_node or args.real_node_gpu:
            count = args.real_nodes if args.real_nodes is not None else cluster.real_node_count
            labels = real_node_labels(count, args.spot_real_node, args.real_node_gpu)
    except ValueError as exc:
        _log(f"modalscale cluster up: {exc}")
        return 2
    started = time.monotonic()
    try:
        cluster.up(nodes=args.nodes, gpus_per_node=args.gpus_per_node, gpu_type=args.gpu_type,
                   real_node=args.real_node, spot_nodes=args.spot_nodes, real_nodes=args.real_nodes,
                   real_node_labels=labels)
    except (ClusterError, BuildError) as exc:
        _log(f"cluster up failed: {exc}")
        return 1
    _log(f"Control plane ready in {time.monotonic() - started:.1f} s; {real_node_summary(cluster.real_node_status())}")
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    return 0


def real_node_summary(status: dict[str, Any]) -> str:
    """``real node: ...`` for ``cluster up``'s last line, from :meth:`LocalCluster.real_node_status`: the node's
    name, the reason it was turned off (``off (--no-real-node)``), or ``none (<what the machine lacks>)``."""
    if status.get("enabled"):
        more = list(status.get("nodes") or {})
        return f"real nodes: {', '.join(['real-node-0', *more])}" if more else "real node: real-node-0"
    reason = str(status.get("reason") or "unknown")
    return f"real node: {reason}" if reason.startswith("off (") else f"real node: none ({reason})"


def _env(args: argparse.Namespace) -> int:
    kubeconfig = LocalCluster(args.workdir, log=_log).kubeconfig
    path = ":".join(shlex.quote(str(d)) for d in tool_dirs())
    print(f"export KUBECONFIG={shlex.quote(str(kubeconfig))}")
    print(f'export PATH={path}:"$PATH"')
    return 0


def _down(args: argparse.Namespace) -> int:
    stopped = LocalCluster(args.workdir, log=_log).down()
    _log(f"Stopped: {', '.join(stopped) if stopped else 'nothing was running'}")
    return 0


def _status(args: argparse.Namespace) -> int:
    st = LocalCluster(args.workdir, log=_log).status()
    if args.json:
        print(json.dumps(st, indent=2))
    else:
        for name, pid in st["processes"].items():
            print(f"{name:24} {'running pid ' + str(pid) if pid else 'stopped'}")
        for name, pid in st["realNode"]["processes"].items():
            print(f"{name:24} {'running pid ' + str(pid) if pid else 'stopped'}")
        for node, procs in st["realNode"].get("nodes", {}).items():
            for name, pid in procs.items():
                print(f"{node + ' ' + name:24} {'running pid ' + str(pid) if pid else 'stopped'}")
        if st["realNode"]["reason"]:
            print(f"{'real node':24} {st['realNode']['reason']}")
        print(f"{'apiserver ready':24} {st['apiserverReady']}")
        print(f"{'kubeconfig':24} {st['kubeconfig']}")
    return 0 if st["apiserverReady"] else 3


def _build(args: argparse.Namespace) -> int:
    from modalscale.devenv.binaries import ensure_helm, ensure_kwok, ensure_node_binaries, ensure_prometheus

    try:
        bins = ensure_binaries(_log)
        kwok = ensure_kwok(_log)
        helm = ensure_helm(_log)
        node = ensure_node_binaries(_log)
        prometheus = ensure_prometheus(_log)
    except BuildError as exc:
        _log(str(exc))
        return 1
    for k, v in {**vars(bins), "kwok": kwok, **vars(node), "helm": helm, "prometheus_k8s_sd": prometheus}.items():
        print(f"{k:24} {v}")
    return 0
