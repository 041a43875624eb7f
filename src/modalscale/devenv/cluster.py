"""A real local Kubernetes control plane on 127.0.0.1, without Docker.

etcd, kube-apiserver, kube-controller-manager, kube-scheduler and, once fake nodes are wanted, KWOK (fake
kubelets) run as child processes started with their own session, so they outlive ``modalscale cluster up``.
Everything lives in one working directory: ``cluster.json`` (ports, versions), ``pki/``, ``etcd/``, ``logs/``,
``pids/`` and ``kubeconfig``. ``down`` stops the processes recorded in ``pids/`` whose command line is ours.

The flags follow envtest (apiserver with a client certificate in ``system:masters``, RBAC on) plus a
controller-manager (garbage collection, Deployments, ReplicaSets), a scheduler and KWOK managing only nodes
annotated ``kwok.x-k8s.io/node=fake``. Where the machine supports it, a real kubelet node (containerd, runc, a
CNI bridge, kube-proxy) runs beside any KWOK GPU nodes: see :mod:`modalscale.devenv.realnode`.

The fake GPU nodes are tainted :data:`FAKE_GPU_TAINT` (``nvidia.com/gpu=present:NoSchedule``), as GKE and AKS
taint GPU node pools, and the apiserver runs the ``ExtendedResourceToleration`` admission plugin, which adds the
matching toleration to every pod that requests ``nvidia.com/gpu``. So GPU workloads land on the fake nodes and
nothing else does: a pod with no GPU and no placement (a plain ``helm install`` of the operator) no longer shows
Running on a node that runs no container. A non-GPU pod that belongs there on purpose (a test of the chart's
objects and RBAC) says so with :func:`fake_node_placement`; a pod for the real node with
:func:`modalscale.devenv.realnode.real_node_placement`.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import ipaddress
import json
import os
import re
import signal
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from modalscale.api.inferenceservice import GPU_RESOURCE
from modalscale.devenv.binaries import (
    ETCD_VERSION,
    KUBERNETES_VERSION,
    KWOK_VERSION,
    Binaries,
    Log,
    cache_dir,
    ensure_binaries,
    ensure_kwok,
)
from modalscale.runtime.server import free_port

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
"""Processes of a local cluster, in start order; KWOK only with fake nodes (:attr:`LocalCluster.runs_kwok`)."""

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
"""Node label that carries the GPU type (as NVIDIA's GPU feature discovery sets it)."""
SPOT_NODE_PREFIX = "kwok-gpu-spot-"
"""Name prefix of the fake Spot GPU nodes (``modalscale cluster up --spot-nodes``)."""
FAKE_NODE_LABEL = "type"
"""Label of the KWOK nodes (value :data:`FAKE_NODE_LABEL_VALUE`), as KWOK's own examples label them."""
FAKE_NODE_LABEL_VALUE = "kwok"
FAKE_GPU_TAINT = {"key": GPU_RESOURCE, "value": "present", "effect": "NoSchedule"}
"""Taint of every fake GPU node: only pods that tolerate ``nvidia.com/gpu`` run there. GKE taints GPU node pools
``nvidia.com/gpu=present:NoSchedule`` and AKS recommends the same; with :data:`ADMISSION_PLUGINS` a pod that
requests ``nvidia.com/gpu`` gets the toleration from the apiserver, and the operator writes it into its GPU
Deployments itself (``operator/isvc/objects.py``)."""
ADMISSION_PLUGINS = ("ExtendedResourceToleration",)
"""Admission plugins the apiserver enables besides its defaults. ExtendedResourceToleration (kubernetes#55080)
adds ``{key: <resource>, operator: Exists, effect: NoSchedule}`` to a pod for each extended resource it requests."""


REAL_NODE_ENV = "MODALSCALE_REAL_NODE"
"""``0`` turns the real node off where ``up`` is not told either way (``1`` requires it)."""


def fake_node_placement() -> dict[str, Any]:
    """Pod-spec fields that put a pod with no GPU on the fake GPU nodes on purpose (a chart install whose objects
    and RBAC a test checks, CPU-only services whose reconcile a test follows): ``nodeSelector`` ``type: kwok`` and
    the toleration of :data:`FAKE_GPU_TAINT`. Its containers never run there: KWOK only marks the pod Running."""
    return {"nodeSelector": {FAKE_NODE_LABEL: FAKE_NODE_LABEL_VALUE},
            "tolerations": [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]}


def fake_gpu_node(name: str, gpus_per_node: int = 8, gpu_type: str = "nvidia-l4", cpu: str = "32",
                  memory: str = "256Gi", spot: bool = False) -> dict[str, Any]:
    """The Node object of one fake GPU node that KWOK manages (annotation ``kwok.x-k8s.io/node: fake``).

    Args:
        gpus_per_node: ``nvidia.com/gpu`` capacity and allocatable.
        gpu_type: Value of :data:`GPU_PRODUCT_LABEL`.
        cpu: CPU capacity as a Kubernetes quantity (``"32"``); memory likewise (``"256Gi"``).
        spot: Also Karpenter's label ``karpenter.sh/capacity-type=spot`` and its ``NoSchedule`` taint.
    Returns:
        The Node body: tainted :data:`FAKE_GPU_TAINT` (and the Spot taint), Ready.
    """
    from modalscale.api.capacity import CAPACITY_TYPE_LABEL, SPOT_LABEL_VALUE, SPOT_TAINT

    capacity = {"cpu": cpu, "memory": memory, "pods": "110", GPU_RESOURCE: str(gpus_per_node)}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake"},
            "labels": {
                "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", FAKE_NODE_LABEL: FAKE_NODE_LABEL_VALUE,
                "nvidia.com/gpu.present": "true", GPU_PRODUCT_LABEL: gpu_type,
                **({CAPACITY_TYPE_LABEL: SPOT_LABEL_VALUE} if spot else {}),
            },
        },
        "spec": {"taints": [dict(FAKE_GPU_TAINT), *([dict(SPOT_TAINT)] if spot else [])]},
        "status": {
            "capacity": capacity, "allocatable": capacity,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kwok"}],
        },
    }


DEFAULT_GPUS_PER_NODE = 8
DEFAULT_GPU_TYPE = "nvidia-l4"
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
"""A Kubernetes label value, not empty (the apiserver refuses a node with another with 422)."""


def check_fake_gpu_nodes(gpus_per_node: int | None, gpu_type: str | None) -> None:
    """Refuse fake GPU node settings the apiserver would refuse or that make no GPU node (None: not given).

    Raises:
        ValueError: ``--gpus-per-node`` below 1 or a ``--gpu-type`` that is not a label value (the flag named).
    """
    if gpus_per_node is not None and gpus_per_node < 1:
        raise ValueError(f"--gpus-per-node {gpus_per_node}: must be >= 1 (GPUs of each fake GPU node)")
    if gpu_type is not None and not _LABEL_VALUE.fullmatch(gpu_type):
        raise ValueError(f"--gpu-type {gpu_type!r}: not a valid node label value (letters, digits, '-', '_', '.', "
                         "at most 63, starting and ending with a letter or digit), e.g. nvidia-l4")


def fake_node_differences(labels: dict[str, str], capacity: dict[str, str], gpu_type: str | None,
                          gpus_per_node: int | None) -> list[str]:
    """What an existing fake GPU node has that the flags given (None: not given) differ from, e.g.
    ``nvidia.com/gpu.product=nvidia-l4, not --gpu-type nvidia-h100-80gb`` (pure)."""
    out = []
    have_type = labels.get(GPU_PRODUCT_LABEL)
    if gpu_type is not None and have_type != gpu_type:
        out.append(f"{GPU_PRODUCT_LABEL}={have_type}, not --gpu-type {gpu_type}")
    have_gpus = capacity.get(GPU_RESOURCE)
    if gpus_per_node is not None and have_gpus != str(gpus_per_node):
        out.append(f"{have_gpus} GPUs, not --gpus-per-node {gpus_per_node}")
    return out


def missing_taints(existing: list[dict[str, Any]], wanted: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The taints of ``wanted`` that ``existing`` lacks, compared by ``key``, ``value`` and ``effect`` (a taint's
    identity; ``timeAdded`` ignored). A node made before a taint existed gets only what it lacks."""
    have = {(t.get("key"), t.get("value") or "", t.get("effect")) for t in existing}
    return [dict(t) for t in wanted if (t.get("key"), t.get("value") or "", t.get("effect")) not in have]


def apiserver_args(binary: str, cfg: ClusterConfig, pki: Path, pod_ip: str | None) -> list[str]:
    """The kube-apiserver command line of a local cluster (envtest's flags plus what the pods and the real node
    need; admission: :data:`ADMISSION_PLUGINS` on, ServiceAccount off).

    Args:
        binary: Path of the kube-apiserver binary.
        cfg: The cluster's ports.
        pki: Directory with ``admin.crt/key``, ``ca.crt`` and ``sa.pub/key``.
        pod_ip: The machine's IPv4 that pods reach the apiserver at; None: loopback only.
    """
    return [
        binary,
        f"--etcd-servers=http://127.0.0.1:{cfg.etcd_client_port}",
        # Pods (the operator installed by Helm) reach the apiserver through the `kubernetes` Service, whose
        # endpoint is the advertise address: the machine's IPv4 when it has one (EndpointSlices refuse
        # loopback, hence no endpoint reconciler without one). Clients on the machine keep 127.0.0.1.
        *(["--bind-address=0.0.0.0", f"--advertise-address={pod_ip}"] if pod_ip else
          ["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none"]),
        f"--secure-port={cfg.apiserver_port}", f"--cert-dir={pki}",
        f"--tls-cert-file={pki / 'admin.crt'}", f"--tls-private-key-file={pki / 'admin.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        "--service-cluster-ip-range=10.0.0.0/16", "--allow-privileged=true",
        "--authorization-mode=RBAC", f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
        "--disable-admission-plugins=ServiceAccount",
        "--enable-priority-and-fairness=false",
        # The real node's kubelet (logs, exec) at its InternalIP, authenticated by client certificate.
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        f"--kubelet-client-certificate={pki / 'admin.crt'}", f"--kubelet-client-key={pki / 'admin.key'}",
        "--max-requests-inflight=0", "--max-mutating-requests-inflight=0", "--v=1",
    ]


def real_node_request(record: dict[str, Any], count: int | None,
                      labels: dict[int, dict[str, str]] | None) -> tuple[int, dict[int, dict[str, str]]]:
    """How many real nodes ``up`` runs and their labels (pure): what it was asked, else what the cluster records.

    Args:
        record: ``cluster.json``'s ``realNode`` entry (``count``, ``labels`` keyed by the index as a string; ``{}``
            before the first ``up``).
        count: ``--real-nodes``, or None to keep the recorded count (1 when none is recorded).
        labels: Labels by node index (:func:`modalscale.devenv.realnode.real_node_labels`), or None to keep the
            recorded ones (those of nodes that are no longer wanted dropped).
    Returns:
        ``(count, labels)``.
    Raises:
        ValueError: ``count`` out of 1..8, or a label for a node index >= ``count`` (the message names the flag).
    """
    from modalscale.devenv.nodelayout import check_real_node_count

    wanted = count if count is not None else int(record.get("count") or 1)
    check_real_node_count(wanted)
    if labels is None:
        labels = {int(i): dict(v) for i, v in (record.get("labels") or {}).items() if int(i) < wanted}
    for i in labels:
        if not 0 <= i < wanted:
            raise ValueError(f"real node {i} has labels but real nodes are numbered 0..{wanted - 1} "
                             f"(--real-nodes {wanted})")
    return wanted, {i: dict(v) for i, v in sorted(labels.items()) if v}


def real_node_record(enabled: bool, reason: str | None, count: int,
                     labels: dict[int, dict[str, str]]) -> dict[str, Any]:
    """``cluster.json``'s ``realNode`` entry: whether the real nodes run (``reason`` why not), how many this
    cluster runs (``count``: nodes 0..count-1; written before node 1 starts, so that ``status``, ``stop_real_node``
    and a later ``up`` know every node one that fails midway left running) and their labels (keys: the index as a
    string, JSON's only key type)."""
    return {"enabled": enabled, "reason": reason, "count": count,
            **({"labels": {str(i): v for i, v in sorted(labels.items())}} if labels else {})}


class ClusterError(RuntimeError):
    """The local control plane could not be started or did not become ready; the message names the log."""


DEFAULT_NODE_MONITOR_GRACE_PERIOD_S = 200
"""The local clusters' default ``--node-monitor-grace-period``, seconds (3m20s, with a 25 s monitor period, as the
first local control plane had it, the values kwokctl uses): far longer than Kubernetes' 50 s, so a kubelet or kwok
slowed by a loaded 2-core machine is not taken for a lost node. A test that loses a node on purpose asks for a
shorter one (``LocalCluster.up(node_monitor_grace_period_s=...)``)."""
MIN_NODE_MONITOR_GRACE_PERIOD_S = 20
"""The shortest grace period :func:`node_monitor_args` accepts, seconds: two of the kubelet's node-lease renewals
(every 10 s, a quarter of ``nodeLeaseDurationSeconds`` 40), so one late renewal never marks a node lost."""


@dataclass
class ClusterConfig:
    """Ports and versions of one local cluster, saved as ``cluster.json`` in its working directory."""

    etcd_client_port: int = 0
    etcd_peer_port: int = 0
    apiserver_port: int = 0
    kubernetes_version: str = KUBERNETES_VERSION
    etcd_version: str = ETCD_VERSION
    kwok_version: str = KWOK_VERSION
    extra: dict[str, Any] = field(default_factory=dict)
    node_monitor_grace_period_s: int = DEFAULT_NODE_MONITOR_GRACE_PERIOD_S
    """How long a real node's kubelet may stay silent before the node lifecycle controller marks it ``Unknown``
    and taints it unreachable, seconds (``--node-monitor-grace-period``; :func:`node_monitor_args`)."""


def node_monitor_args(grace_period_s: int) -> list[str]:
    """The controller-manager's node-monitor flags for a grace period of ``grace_period_s`` seconds.

    The node lifecycle controller checks every ``--node-monitor-period``: an eighth of the grace period, between
    1 and 25 s (25 s at the default 200 s as before; 5 s at 40 s, Kubernetes' own pairing before 1.29), so a
    lost node is marked within grace + period.

    Raises:
        ValueError: ``grace_period_s`` under :data:`MIN_NODE_MONITOR_GRACE_PERIOD_S`.
    """
    if grace_period_s < MIN_NODE_MONITOR_GRACE_PERIOD_S:
        raise ValueError(f"node monitor grace period {grace_period_s} s is under {MIN_NODE_MONITOR_GRACE_PERIOD_S} s "
                         "(two node-lease renewals)")
    period_s = max(1, min(25, grace_period_s // 8))
    return [f"--node-monitor-period={period_s}s", f"--node-monitor-grace-period={grace_period_s}s"]


def default_workdir() -> Path:
    """Working directory of ``modalscale cluster`` when none is given: ``<cache>/clusters/default``."""
    return cache_dir() / "clusters" / "default"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except OSError:
        return False


def _cmdline(pid: int, settle_s: float = 1.0) -> list[str]:
    """Arguments of ``pid`` ([] if it is gone).

    Right after ``execve`` the kernel has switched the process to the new image (so ``Popen`` has returned) but
    may not have set up its argument area yet, and ``/proc/<pid>/cmdline`` reads empty: an apiserver started a
    millisecond earlier was taken for "not ours" and reported as exited (seen in CI). An empty read is retried
    for up to ``settle_s`` seconds.
    """
    deadline = time.monotonic() + settle_s
    while True:
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return []
        if raw or time.monotonic() > deadline:
            return raw.decode(errors="replace").split("\0") if raw else []
        time.sleep(0.01)


def _terminate(pid: int, timeout_s: float) -> None:
    """SIGTERM ``pid``, SIGKILL it after ``timeout_s`` seconds, and return once it is gone."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while _pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if _pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        while _pid_alive(pid):
            time.sleep(0.05)


class LocalCluster:
    """One local control plane rooted at ``workdir``.

    Args:
        workdir: Directory for its state; created on ``up``.
        log: Progress printer.
    """

    def __init__(self, workdir: Path | str | None = None, log: Log = print) -> None:
        self.workdir = Path(workdir) if workdir else default_workdir()
        self.log = log
        self._started: dict[str, subprocess.Popen[bytes]] = {}

    # ------------------------------------------------------------------ paths and config
    @property
    def kubeconfig(self) -> Path:
        """Path of the admin kubeconfig (client certificate in ``system:masters``)."""
        return self.workdir / "kubeconfig"

    def _pidfile(self, name: str) -> Path:
        return self.workdir / "pids" / f"{name}.pid"

    def _logfile(self, name: str) -> Path:
        return self.workdir / "logs" / f"{name}.log"

    def load_config(self) -> ClusterConfig | None:
        """The saved ``cluster.json``, or None before the first ``up``."""
        path = self.workdir / "cluster.json"
        if not path.exists():
            return None
        return ClusterConfig(**json.loads(path.read_text()))

    def _config(self) -> ClusterConfig:
        cfg = self.load_config()
        if cfg is None:
            cfg = ClusterConfig(
                etcd_client_port=free_port(), etcd_peer_port=free_port(), apiserver_port=free_port()
            )
            self.workdir.mkdir(parents=True, exist_ok=True)
            (self.workdir / "cluster.json").write_text(json.dumps(asdict(cfg), indent=2))
        return cfg

    @property
    def server_url(self) -> str:
        """``https://127.0.0.1:<port>`` of the apiserver."""
        cfg = self.load_config()
        if cfg is None:
            raise ClusterError(f"no cluster in {self.workdir}: run `modalscale cluster up` first")
        return f"https://127.0.0.1:{cfg.apiserver_port}"

    # ------------------------------------------------------------------ status
    def pids(self) -> dict[str, int | None]:
        """Running PID per component (None when not running or not ours)."""
        out: dict[str, int | None] = {}
        for name in COMPONENTS:
            pf = self._pidfile(name)
            pid = int(pf.read_text()) if pf.exists() else None
            if pid is not None and _pid_alive(pid) and self._is_ours(pid, name):
                out[name] = pid
            else:
                out[name] = None
        return out

    def _is_ours(self, pid: int, name: str) -> bool:
        cmd = _cmdline(pid)
        return bool(cmd) and Path(cmd[0]).name == name and any(str(self.workdir) in a for a in cmd)

    def raw_get(self, path: str, timeout_s: float = 10.0) -> bytes:
        """GET ``path`` (e.g. ``/metrics``) from the apiserver with the admin certificate.

        Raises:
            OSError: The apiserver did not answer 200.
        """
        pki = self.workdir / "pki"
        ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        with urllib.request.urlopen(f"{self.server_url}{path}", context=ctx, timeout=timeout_s) as r:
            return bytes(r.read())

    def apiserver_ready(self, timeout_s: float = 2.0) -> bool:
        """True when ``/readyz`` answers 200 with the admin certificate."""
        if not self.kubeconfig.exists() or self.load_config() is None:
            return False
        try:
            return self.raw_get("/readyz", timeout_s) == b"ok"
        except OSError:
            return False

    def status(self) -> dict[str, Any]:
        """What runs: PIDs per component (KWOK only where :attr:`runs_kwok`), apiserver readiness, kubeconfig
        path, versions."""
        cfg = self.load_config()
        return {
            "workdir": str(self.workdir),
            "kubeconfig": str(self.kubeconfig) if self.kubeconfig.exists() else None,
            "server": self.server_url if cfg else None,
            "apiserverReady": self.apiserver_ready(),
            "processes": {n: pid for n, pid in self.pids().items() if n != "kwok" or self.runs_kwok},
            "realNode": self.real_node_status(),
            "versions": {
                "kubernetes": cfg.kubernetes_version if cfg else KUBERNETES_VERSION,
                "etcd": cfg.etcd_version if cfg else ETCD_VERSION,
                "kwok": cfg.kwok_version if cfg else KWOK_VERSION,
            },
        }

    def real_node_status(self) -> dict[str, Any]:
        """``{"enabled": bool, "reason": why not (or None), "processes": {containerd, kubelet, kube-proxy: PID}}``
        of node 0; with ``--real-nodes N`` > 1 also ``"nodes": {"real-node-<i>": {component: PID}}`` for
        ``i`` in 1..N-1."""
        from modalscale.devenv.realnode import RealNode

        cfg = self.load_config()
        info = (cfg.extra if cfg else {}).get("realNode") or {}
        out: dict[str, Any] = {"enabled": bool(info.get("enabled")), "reason": info.get("reason"),
                               "processes": RealNode(self.workdir).pids()}
        count = int(info.get("count") or 1)
        if count > 1:
            extra = [RealNode(self.workdir, index=i) for i in range(1, count)]
            out["nodes"] = {n.name: n.pids() for n in extra}
        return out

    @property
    def has_real_node(self) -> bool:
        """True when this cluster's real nodes run (kubelet and containerd alive on each)."""
        st = self.real_node_status()
        return st["enabled"] and all(st["processes"].values()) and all(
            all(p.values()) for p in st.get("nodes", {}).values())

    @property
    def real_node_count(self) -> int:
        """How many real nodes this cluster runs or, stopped, ran last (``cluster.json``; 1 before any)."""
        return int(self._real_node_info().get("count") or 1)

    @property
    def real_node_names(self) -> list[str]:
        """Names of the real nodes ``up`` started (``[]`` when none): ``real-node-0`` .. ``real-node-<N-1>``."""
        st = self.real_node_status()
        return ["real-node-0", *st.get("nodes", {})] if st["enabled"] else []

    # ------------------------------------------------------------------ up
    def up(self, nodes: int = 2, gpus_per_node: int | None = None, gpu_type: str | None = None,
           binaries: Binaries | None = None, timeout_s: float = 120.0, real_node: bool | None = None,
           spot_nodes: int = 0, real_node_off_reason: str | None = None, real_nodes: int | None = None,
           real_node_labels: dict[int, dict[str, str]] | None = None,
           node_monitor_grace_period_s: int | None = None) -> None:
        """Start the control plane (idempotent: running components are left alone) and create fake GPU nodes.

        Args:
            nodes: Fake GPU nodes wanted (created if missing, never deleted here). With 0 and no ``spot_nodes``
                KWOK is neither built nor started, unless this cluster already runs it (:attr:`runs_kwok`).
            spot_nodes: Fake Spot GPU nodes ``kwok-gpu-spot-<i>`` wanted besides (label and taint
                ``karpenter.sh/capacity-type=spot``; see :meth:`ensure_gpu_nodes`).
            gpus_per_node: ``nvidia.com/gpu`` capacity of each new fake node (None: 8; see :meth:`ensure_gpu_nodes`
                for existing ones).
            gpu_type: Value of the ``nvidia.com/gpu.product`` label of new fake nodes (None: ``nvidia-l4``).
            binaries: Prebuilt binaries; built or taken from the cache when None.
            timeout_s: Deadline for the apiserver to become ready, in seconds.
            real_node: Run the real kubelet node too. None (the default): where the machine supports it, unless
                ``MODALSCALE_REAL_NODE=0``; otherwise a message names the missing piece and the cluster runs
                KWOK-only. True: a machine that cannot run it is an error. False: KWOK-only. Either way, when
                another cluster already runs this machine's real node, this one runs KWOK-only and says so.
            real_node_off_reason: With ``real_node=False``, why it is off, recorded as ``off (<reason>)`` in
                :meth:`real_node_status` (default ``--no-real-node``).
            real_nodes: How many real nodes (1..8) when the real node runs: ``real-node-0`` in the machine's
                network namespace, ``real-node-<i>`` each in namespaces of its own
                (:mod:`modalscale.devenv.nodelayout`). None: as many as the cluster records (1 at first). Nodes
                beyond it that this cluster runs are stopped and their Node objects deleted.
            real_node_labels: Extra labels by node index (:func:`modalscale.devenv.realnode.real_node_labels`);
                a managed label (:data:`modalscale.devenv.realnode.MANAGED_NODE_LABELS`) a node has and this
                lacks is removed, with its Spot taint. None: the recorded labels.
            node_monitor_grace_period_s: How long a silent kubelet's node stays ``Ready`` before it is marked
                ``Unknown`` (:func:`node_monitor_args`), seconds; recorded in ``cluster.json``, and a running
                controller-manager with another value is restarted. None: the recorded value (at first
                :data:`DEFAULT_NODE_MONITOR_GRACE_PERIOD_S`).
        Raises:
            ClusterError: A component exited, the apiserver was not ready in time, or ``real_node=True`` on a
                machine without what the node needs (the message names the missing pieces).
            modalscale.devenv.binaries.BuildError: Building the binaries failed.
            ValueError: A ``gpus_per_node`` below 1 or a ``gpu_type`` that is not a label value (nothing started).
        """
        check_fake_gpu_nodes(gpus_per_node, gpu_type)  # before anything starts (ValueError)
        bins = binaries or ensure_binaries(self.log)
        cfg = self._config()
        monitor = node_monitor_args(node_monitor_grace_period_s or cfg.node_monitor_grace_period_s)
        if node_monitor_grace_period_s is not None and node_monitor_grace_period_s != cfg.node_monitor_grace_period_s:
            cfg.node_monitor_grace_period_s = node_monitor_grace_period_s
            (self.workdir / "cluster.json").write_text(json.dumps(asdict(cfg), indent=2))
        for d in ("pki", "logs", "pids"):
            (self.workdir / d).mkdir(parents=True, exist_ok=True)
        (self.workdir / "etcd").mkdir(mode=0o700, exist_ok=True)
        pod_ip = pod_reachable_address()
        self._ensure_pki(pod_ip, regenerate_ok=not self.pids()["kube-apiserver"])
        self._write_kubeconfig(cfg)
        running = self.pids()
        w = self.workdir
        pki = w / "pki"
        cm_pid = running["kube-controller-manager"]
        if cm_pid is not None and not set(monitor) <= set(_cmdline(cm_pid)):
            self.log("Restarting kube-controller-manager: another node monitor grace period")
            self._stop_component("kube-controller-manager")
            running["kube-controller-manager"] = None

        if not running["etcd"]:
            self._start("etcd", [
                str(bins.etcd), "--name=node0", f"--data-dir={w / 'etcd'}", "--logger=zap", "--log-level=warn",
                f"--listen-client-urls=http://127.0.0.1:{cfg.etcd_client_port}",
                f"--advertise-client-urls=http://127.0.0.1:{cfg.etcd_client_port}",
                f"--listen-peer-urls=http://127.0.0.1:{cfg.etcd_peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{cfg.etcd_peer_port}",
                f"--initial-cluster=node0=http://127.0.0.1:{cfg.etcd_peer_port}",
                # Progress notifications let the apiserver's watch cache send BOOKMARKs on idle resources,
                # so kopf's watches do not reconnect every inactivity timeout (kubeadm uses 5 s too).
                "--watch-progress-notify-interval=5s",
                "--unsafe-no-fsync", "--auto-compaction-retention=1", "--quota-backend-bytes=2147483648",
            ])
            self._wait(lambda: self._http_ok(f"http://127.0.0.1:{cfg.etcd_client_port}/health"), "etcd", 30)

        if not running["kube-apiserver"]:
            self._start("kube-apiserver", apiserver_args(str(bins.kube_apiserver), cfg, pki, pod_ip))
        self._wait(self.apiserver_ready, "kube-apiserver", timeout_s)

        kc = f"--kubeconfig={self.kubeconfig}"
        if not running["kube-controller-manager"]:
            self._start("kube-controller-manager", [
                str(bins.kube_controller_manager), kc,
                f"--authentication-kubeconfig={self.kubeconfig}", f"--authorization-kubeconfig={self.kubeconfig}",
                "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0",
                f"--root-ca-file={pki / 'ca.crt'}", f"--service-account-private-key-file={pki / 'sa.key'}",
                "--use-service-account-credentials=false",
                *monitor,
                "--concurrent-gc-syncs=5", "--kube-api-qps=500", "--kube-api-burst=1000", "--v=1",
                "--profiling=false", f"--cluster-name=modalscale-{w.name}",
            ])
        if not running["kube-scheduler"]:
            self._start("kube-scheduler", [
                str(bins.kube_scheduler), kc,
                f"--authentication-kubeconfig={self.kubeconfig}", f"--authorization-kubeconfig={self.kubeconfig}",
                "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0",
                "--kube-api-qps=500", "--kube-api-burst=1000", "--v=1",
            ])
        time.sleep(0.5)
        dead = [n for n, pid in self.pids().items() if pid is None and n != "kwok"]
        if dead:
            raise ClusterError(f"{', '.join(dead)} exited at start; see {self._logfile(dead[0])}")
        if nodes or self.runs_kwok:
            self.ensure_gpu_nodes(nodes, gpus_per_node, gpu_type)
        if spot_nodes:
            self.ensure_gpu_nodes(spot_nodes, gpus_per_node, gpu_type, prefix=SPOT_NODE_PREFIX, spot=True)
        self._wait(lambda: self._default_service_account_ready(), "namespace default", 60)
        self._up_real_node(real_node, real_node_off_reason, real_nodes, real_node_labels)

    def _up_real_node(self, wanted: bool | None, off_reason: str | None = None, count: int | None = None,
                      labels: dict[int, dict[str, str]] | None = None) -> None:
        from modalscale.devenv.realnode import (
            RealNode,
            RealNodeError,
            extra_node_indices,
            machine_support,
            real_node_plan,
        )

        try:
            count, labels = real_node_request(self._real_node_info(), count, labels)
            start, reason = real_node_plan(wanted, os.environ.get(REAL_NODE_ENV, ""),
                                           [] if wanted is False else machine_support())
        except (ValueError, RealNodeError) as exc:
            raise ClusterError(str(exc)) from exc
        if wanted is False and off_reason:
            reason = f"off ({off_reason})"
        if start:
            ca, api = self.workdir / "pki" / "ca.crt", self.api_client()
            # An explicit smaller --real-nodes: the nodes beyond it go (their Node objects too).
            for i in [i for i in extra_node_indices(self.workdir) if i >= count]:
                RealNode(self.workdir, log=self.log, index=i).stop()
                self._delete_nodes([f"real-node-{i}"])
            try:
                reason = RealNode(self.workdir, log=self.log, labels=labels.get(0), nodes=count).start(
                    self.kubeconfig, ca, api)
            except RealNodeError as exc:
                self._write_real_node_info(real_node_record(False, f"did not start: {exc}", count, labels))
                raise ClusterError(f"the real node did not start: {exc}") from exc
            if reason is None:
                # Recorded before node 1 starts: one that fails leaves the nodes before it running, and `status`,
                # `stop_real_node` and the next `up` must know them (`down` finds every node by its dir anyway).
                self._write_real_node_info(real_node_record(True, None, count, labels))
                for i in range(1, count):
                    try:
                        why = RealNode(self.workdir, log=self.log, index=i, labels=labels.get(i), nodes=count).start(
                            self.kubeconfig, ca, api)
                    except (RealNodeError, OSError, subprocess.SubprocessError) as exc:  # it stopped itself
                        why = f"{type(exc).__name__}: {exc}"
                    if why is not None:
                        running = ", ".join(f"real-node-{j}" for j in range(i))
                        raise ClusterError(f"real-node-{i} did not start: {why} ({running} kept running; "
                                           "`modalscale cluster down` stops every node)")
        if reason is not None and not reason.startswith("off ("):
            self.log(f"No real node: {reason}; the cluster runs KWOK-only (fake GPU nodes)")
        self._write_real_node_info(real_node_record(reason is None, reason, count, labels))

    def _real_node_info(self) -> dict[str, Any]:
        """``cluster.json``'s ``realNode`` entry (:func:`real_node_record`; ``{}`` before the first ``up``)."""
        cfg = self.load_config()
        return dict((cfg.extra if cfg else {}).get("realNode") or {})

    def _write_real_node_info(self, info: dict[str, Any]) -> None:
        cfg = self._config()
        cfg.extra["realNode"] = info
        (self.workdir / "cluster.json").write_text(json.dumps(asdict(cfg), indent=2))

    def _delete_nodes(self, names: list[str]) -> None:
        """Delete these Node objects (absent ones are fine); nothing when the apiserver does not answer."""
        if not names or not self.apiserver_ready():
            return
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        core = client.CoreV1Api(self.api_client())
        for name in names:
            try:
                core.delete_node(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise

    def _default_service_account_ready(self) -> bool:
        # The ServiceAccount admission plugin is off, but the controller-manager still creates `default`
        # ServiceAccounts; Deployments do not need them. Wait only for the namespace itself.
        from kubernetes import client

        api = client.CoreV1Api(self.api_client())
        try:
            api.read_namespace("default")
            return True
        except Exception:  # any failure means "not yet"; the deadline reports it
            return False

    def restart_apiserver(self, down_s: float = 0.0, timeout_s: float = 120.0) -> float:
        """SIGKILL the kube-apiserver, keep it down ``down_s`` s, start it again with the same flags (chaos tests:
        issue 21's scenario 7). Everything else keeps running; its clients reconnect on their own.

        Returns:
            Seconds from the kill until the apiserver answered ready again.
        Raises:
            ClusterError: It was not running, did not stop, or was not ready again within ``timeout_s``.
        """
        pid = self.pids()["kube-apiserver"]
        if pid is None:
            raise ClusterError("kube-apiserver is not running; start the cluster first (modalscale cluster up)")
        killed = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        proc = self._started.get("kube-apiserver")
        if proc is not None:
            proc.wait(timeout=30)
        self._wait(lambda: not _pid_alive(pid), "kube-apiserver (stopping)", 30)
        time.sleep(max(0.0, down_s - (time.monotonic() - killed)))
        bins = ensure_binaries(self.log)
        self._start("kube-apiserver", apiserver_args(str(bins.kube_apiserver), self._config(), self.workdir / "pki",
                                                     pod_reachable_address()))
        self._wait(self.apiserver_ready, "kube-apiserver", timeout_s)
        return time.monotonic() - killed

    def _start(self, name: str, cmd: list[str]) -> None:
        self.log(f"Starting {name}")
        logf = open(self._logfile(name), "ab")  # handed to the child
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=self.workdir)
        logf.close()
        self._pidfile(name).write_text(str(proc.pid))
        self._started[name] = proc

    def _wait(self, ready: Any, name: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready():
                return
            proc = self._started.get(name)
            exited = proc.poll() is not None if proc is not None else self.pids().get(name) is None
            if name in COMPONENTS and exited:
                code = f" with code {proc.returncode}" if proc is not None else ""
                raise ClusterError(f"{name} exited{code}; see {self._logfile(name)}:\n{self._tail(name)}")
            time.sleep(0.2)
        raise ClusterError(f"{name} was not ready within {timeout_s:.0f} s; see {self._logfile(name)}")

    def _tail(self, name: str, lines: int = 20) -> str:
        try:
            return "\n".join(self._logfile(name).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    @staticmethod
    def _http_ok(url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    # ------------------------------------------------------------------ down
    def down(self, timeout_s: float = 10.0) -> list[str]:
        """Stop the processes this cluster started (by recorded PID, newest first; then any whose pid file is gone
        but whose arguments name this work dir); returns their names.

        The real node goes first: its containers, shims, mounts, network namespaces, veths, the ``cni0`` bridge
        and the ``KUBE-``/``CNI-`` iptables chains are removed too.
        """
        stopped = []
        if (self.workdir / "node").exists():
            from modalscale.devenv.realnode import RealNode

            stopped += RealNode(self.workdir, log=self.log).stop()
        for name in reversed(COMPONENTS):
            if self._stop_component(name, timeout_s):
                stopped.append(name)
        # Pid files lost (a removed or half-torn-down work dir): the processes still name it in their arguments.
        for name, pid in self._unrecorded_processes():
            self.log(f"Stopping {name} (pid {pid}), which ran without its pid file")
            _terminate(pid, timeout_s)
            stopped.append(name)
        return stopped

    def _unrecorded_processes(self) -> list[tuple[str, int]]:
        """``(component, pid)`` of this cluster's components found in ``/proc`` (newest component first): a
        process whose program is one of :data:`COMPONENTS` and one of whose arguments names this work dir."""
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and _pid_alive(int(entry.name)):
                cmd = _cmdline(int(entry.name), settle_s=0.0)
                name = Path(cmd[0]).name if cmd else ""
                if name in COMPONENTS and self._is_ours(int(entry.name), name):
                    found.append((name, int(entry.name)))
        return sorted(found, key=lambda np: -COMPONENTS.index(np[0]))

    def _stop_component(self, name: str, timeout_s: float = 10.0) -> bool:
        """Stop control-plane component ``name`` by its recorded PID (SIGTERM, SIGKILL after ``timeout_s``);
        True when it ran."""
        pf = self._pidfile(name)
        if not pf.exists():
            return False
        pid = int(pf.read_text())
        ran = _pid_alive(pid) and self._is_ours(pid, name)
        if ran:
            _terminate(pid, timeout_s)
        pf.unlink(missing_ok=True)
        proc = self._started.pop(name, None)
        if proc is not None:
            proc.poll()  # reap our own child
        return ran

    def stop_real_node(self) -> list[str]:
        """Stop only the real nodes (the control plane and the KWOK nodes keep running) and delete their Node
        objects; ``up`` starts them again, as many as before with the same labels.

        Returns:
            The node components that were running.
        """
        from modalscale.devenv.realnode import RealNode

        names = self.real_node_names or ["real-node-0"]
        stopped = RealNode(self.workdir, log=self.log).stop()  # node 0 stops the others first
        if self.load_config() is not None:
            self._write_real_node_info({**self._real_node_info(), "enabled": False, "reason": "stopped"})
        self._delete_nodes(names)  # their pods are gone with them; the scheduler must not count on them
        return stopped

    # ------------------------------------------------------------------ clients and nodes
    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` for the admin kubeconfig."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    @property
    def runs_kwok(self) -> bool:
        """True once this cluster has started KWOK (``cluster.json``): it has fake nodes, and every ``up`` keeps
        KWOK running for them. A cluster ``up`` with ``nodes=0`` and no Spot nodes never builds or starts KWOK."""
        cfg = self.load_config()
        return bool(cfg and cfg.extra.get("kwok"))

    def _ensure_kwok(self) -> None:
        """Start KWOK (building it first if not cached) unless it runs; record that this cluster runs it.

        Raises:
            ClusterError: KWOK exited at start.
            modalscale.devenv.binaries.BuildError: Building it failed.
        """
        if self.pids()["kwok"]:
            return
        kwok = ensure_kwok(self.log)
        self._start("kwok", [
            str(kwok), f"--kubeconfig={self.kubeconfig}", "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--node-ip=127.0.0.1", "--node-lease-duration-seconds=40", "--cidr=10.244.0.0/16",
        ])
        cfg = self._config()
        cfg.extra["kwok"] = True
        (self.workdir / "cluster.json").write_text(json.dumps(asdict(cfg), indent=2))
        time.sleep(0.5)
        if not self.pids()["kwok"]:
            raise ClusterError(f"kwok exited at start; see {self._logfile('kwok')}:\n{self._tail('kwok')}")

    def ensure_gpu_nodes(self, count: int, gpus_per_node: int | None = None, gpu_type: str | None = None,
                         cpu: str = "32", memory: str = "256Gi", prefix: str = "kwok-gpu-",
                         spot: bool = False) -> list[str]:
        """Create fake GPU nodes ``<prefix>0..count-1`` that KWOK manages (:func:`fake_gpu_node`); existing ones
        are kept and given the taints they lack (a node made before :data:`FAKE_GPU_TAINT` existed). An existing
        node whose GPU type or count differs from ``gpu_type`` / ``gpus_per_node`` given is kept as it is and a
        warning names what it keeps (``modalscale cluster down`` first remakes the nodes). None: the defaults
        (:data:`DEFAULT_GPU_TYPE`, :data:`DEFAULT_GPUS_PER_NODE`) for new nodes, no check of existing ones.

        Args:
            spot: Make them Spot nodes: Karpenter's label ``karpenter.sh/capacity-type=spot`` and the taint
                ``karpenter.sh/capacity-type=spot:NoSchedule`` (:mod:`modalscale.api.capacity`), so only pods that
                tolerate it (a service a ``SwitchToSpot`` budget action moved) run there, priced at Spot.
        Returns:
            The names of the nodes that now exist with that prefix.
        """
        from kubernetes import client
        from kubernetes.client.rest import ApiException

        check_fake_gpu_nodes(gpus_per_node, gpu_type)
        self._ensure_kwok()
        api = client.CoreV1Api(self.api_client())
        names = []
        kept: dict[str, list[str]] = {}
        for i in range(count):
            name = f"{prefix}{i}"
            names.append(name)
            body = fake_gpu_node(name, DEFAULT_GPUS_PER_NODE if gpus_per_node is None else gpus_per_node,
                                 gpu_type or DEFAULT_GPU_TYPE, cpu, memory, spot)
            try:
                api.create_node(body)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                # Made by an older `cluster up` without today's taints: add what it lacks (resourceVersion
                # makes a concurrent write, e.g. the node controller's not-ready taint, a conflict, not a loss).
                node = api.read_node(name)
                if differs := fake_node_differences(node.metadata.labels or {}, (node.status.capacity or {}),
                                                    gpu_type, gpus_per_node):
                    kept.setdefault("; ".join(differs), []).append(name)
                existing = [api.api_client.sanitize_for_serialization(t) for t in node.spec.taints or []]
                if add := missing_taints(existing, body["spec"]["taints"]):
                    api.patch_node(name, {"metadata": {"resourceVersion": node.metadata.resource_version},
                                          "spec": {"taints": existing + add}})
        for what, nodes in kept.items():
            self.log(f"warning: fake node(s) {', '.join(nodes)} exist with {what}: kept as they are (nodes are never "
                     f"changed; `modalscale cluster down` first to make them with the flags)")
        deadline = time.monotonic() + 60
        while not all(schedulable_fake_node(api.read_node(n)) for n in names):
            if time.monotonic() > deadline:
                raise ClusterError(f"fake nodes {names} were not Ready without a not-ready taint within 60 s; "
                                   f"see {self._logfile('kwok')}:\n{self._tail('kwok')}")
            time.sleep(0.2)
        return names

    # ------------------------------------------------------------------ PKI and kubeconfig
    def _ensure_pki(self, pod_ip: str | None = None, regenerate_ok: bool = True) -> None:
        """CA, the apiserver's serving/admin certificate and the service-account key, made once per work dir.

        The serving certificate names 127.0.0.1, ``pod_ip`` and the ``kubernetes`` Service (IP 10.0.0.1 and its
        DNS names) so in-cluster clients verify it; an older one lacking them is remade while the apiserver
        is stopped (``regenerate_ok``).
        """
        pki = self.workdir / "pki"
        wanted = {"127.0.0.1", KUBERNETES_SERVICE_IP, *([pod_ip] if pod_ip else [])}
        if (pki / "admin.crt").exists() and (pki / "sa.pub").exists():
            if not regenerate_ok or wanted <= _certificate_ips(pki / "admin.crt"):
                return
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        now = dt.datetime.now(dt.UTC)
        valid = dt.timedelta(days=365)

        def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
            return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                     serialization.NoEncryption())

        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "modalscale-local-ca")])
        ca_cert = (
            x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
            .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + valid)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False,
                                         encipher_only=False, decipher_only=False), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        admin_key = ec.generate_private_key(ec.SECP256R1())
        admin_cert = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:masters"),
                                     x509.NameAttribute(NameOID.COMMON_NAME, "admin")]))
            .issuer_name(ca_name).public_key(admin_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + valid)
            .add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(ip)) for ip in sorted(wanted)]
                + [x509.DNSName(n) for n in ("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
                                             "kubernetes.default.svc.cluster.local")]), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                  ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        sa_key = ec.generate_private_key(ec.SECP256R1())
        pki.mkdir(parents=True, exist_ok=True)
        (pki / "ca.key").write_bytes(pem_key(ca_key))
        (pki / "ca.crt").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
        (pki / "admin.key").write_bytes(pem_key(admin_key))
        (pki / "admin.crt").write_bytes(admin_cert.public_bytes(serialization.Encoding.PEM))
        (pki / "sa.key").write_bytes(pem_key(sa_key))
        (pki / "sa.pub").write_bytes(sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        for f in ("ca.key", "admin.key", "sa.key"):
            (pki / f).chmod(0o600)

    def _write_kubeconfig(self, cfg: ClusterConfig) -> None:
        import yaml

        pki = self.workdir / "pki"
        doc = {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "modalscale-local", "cluster": {
                "server": f"https://127.0.0.1:{cfg.apiserver_port}", "certificate-authority": str(pki / "ca.crt")}}],
            "users": [{"name": "admin", "user": {
                "client-certificate": str(pki / "admin.crt"), "client-key": str(pki / "admin.key")}}],
            "contexts": [{"name": "modalscale-local",
                          "context": {"cluster": "modalscale-local", "user": "admin", "namespace": "default"}}],
            "current-context": "modalscale-local",
        }
        self.kubeconfig.write_text(yaml.safe_dump(doc, sort_keys=False))


KUBERNETES_SERVICE_IP = "10.0.0.1"
"""ClusterIP of the ``kubernetes`` Service (first address of --service-cluster-ip-range 10.0.0.0/16)."""


def pod_reachable_address() -> str | None:
    """This machine's primary IPv4, where pods on the real node reach the apiserver; None without one."""
    from modalscale.devenv.realnode import RealNodeError, node_ip

    try:
        return node_ip()
    except (RealNodeError, OSError, subprocess.SubprocessError):
        return None


def _certificate_ips(path: Path) -> set[str]:
    """IP addresses in the subjectAltName of the PEM certificate at ``path`` (empty when unreadable)."""
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, x509.ExtensionNotFound):
        return set()
    return {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}


NOT_READY_TAINT_KEYS = frozenset({"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"})
"""Taints the node lifecycle controller puts on a node whose Ready condition is not True (kubernetes
``TaintNodesByCondition``); a pod created while a fresh fake node still has one waits for the scheduler's requeue."""


def schedulable_fake_node(node: Any) -> bool:
    """Whether a ``V1Node`` has ``Ready=True`` (KWOK set it) and none of :data:`NOT_READY_TAINT_KEYS`."""
    conditions = (node.status.conditions if node.status else None) or []
    ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
    return ready and not any(t.key in NOT_READY_TAINT_KEYS for t in node.spec.taints or [])


@contextlib.contextmanager
def running_cluster(workdir: Path, nodes: int = 2, gpus_per_node: int = 8, gpu_type: str = "nvidia-l4",
                    crd_dir: Path | None = None) -> Iterator[LocalCluster]:
    """A local control plane for the duration of a ``with`` block, with the CRDs of ``crd_dir`` installed.

    Tests that kill or restart operators use one of their own, so that no other operator acts on their objects.
    """
    from modalscale.devenv.kube import install_crds

    cluster = LocalCluster(workdir, log=lambda _m: None)
    try:
        # No real node: only one can run per machine, and the session cluster has it.
        cluster.up(nodes=nodes, gpus_per_node=gpus_per_node, gpu_type=gpu_type, real_node=False)
        if crd_dir is not None:
            install_crds(cluster.api_client(), crd_dir)
        yield cluster
    finally:
        cluster.down()
