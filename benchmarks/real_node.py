"""Benchmark (not a test): the runtime and the operator on the local cluster's real kubelet node, image cached.

Prints:
1. Time from a scale-up decision to the new replica Ready: the InferenceService's replicas patched 1 -> 2 (and
   1 -> 3), timed from the patch, from the operator's decision (``status.scalingHistory``, 1 s resolution) and from
   each new pod's creation, to the Deployment's readyReplicas; repeated rounds, back to 1 in between.
2. Per-replica throughput on the real node: closed-loop saturation (``--workers-per-replica`` x replicas workers,
   a new connection per request through the Service's ClusterIP, or one kept-alive connection per sender with
   ``--client keepalive``, as SDKs and gRPC clients hold) for ``--load-s`` s at 1, 2 and 3 replicas of
   ``--cpu`` each (default 250m: 3 replicas, the client and the control plane fit in 2 cores, so each replica is
   bound by its own CFS quota, not by the machine), in rounds whose order is shuffled, after a warm-up of every
   pod; ratios 2/1 and 3/1 against the same round's 1-replica run, with a second 1-replica run as the A/A row (its
   spread is the noise). Each run also prints where the CPU went: every pod's CPU from its cgroup
   (``cpuacct.usage``, in cores, against its quota ``cpu.cfs_quota_us``) and the share of its CFS periods that
   were throttled (``cpu.stat``: a quota-bound pod is throttled in most periods), the client's own CPU (this
   process, ``os.times``: in cores and ms per answer) and the whole machine's busy cores (``/proc/stat``), so a
   ratio below the replica count can be told apart: pods under their quota and the machine busy = contention.
   ``--paths direct,gateway`` measures both request paths side by side in each round (their order shuffled too):
   ``direct`` is the Service straight to the replicas (kube-proxy, ``spec.gateway.enabled: false``), ``gateway``
   the Service to the request gateway's pods, which balance each request over the replicas (issue 19's target:
   2 and 3 replicas >= 1.85x and >= 2.7x one replica); the gateway pods' CPU is printed per answer beside the
   replicas' (target: <= 5 %).
   ``--senders N`` holds the senders at N whatever the replica count (with ``--client keepalive``: N long-lived
   connections, as an SDK or a gRPC client holds; kube-proxy places each connection once, the gateway each request).
   ``--cpu-shares N`` gives the pods' ``kubepods`` cgroup and the client's own cgroup CPU weight ``N`` during the
   section (a shared machine's other work otherwise outweighs them; restored after). No
   request is answered from a cache: the InferenceService turns the runtime's embedding cache off
   (``embeddingCache: false``; the response cache is off by default) and every request is also a distinct image
   (photo and size) and text.
3. The operator in its pod: the chart (``helm install charts/modalscale``, the built operator image, 2 replicas
   with peering, the chart's RBAC) on the real node, Prometheus discovering the runtime pods, the autoscaler of the
   active operator pod switched on for the real InferenceService under load: its ``status.autoscaler`` (read from
   Prometheus: reason, ``metricsAvailable``, features) and the scale-up it decided. Then the RSS of each operator
   pod's process (``VmRSS`` of ``/proc/<pid>/status`` of the container's processes, found by the container id in
   ``/proc/<pid>/cgroup``, and the container's cgroup-v1 ``memory.stat`` rss) idle and with ``--services``
   InferenceServices (on the KWOK GPU nodes) reconciled by the pod.

4. Starts from zero through the gateway (issue 19's figure: 0 failed requests, each start's added latency <= the
   pod's own time to Ready + 1 s): the InferenceService in Predictive mode with ``minReplicas: 0``,
   ``scaleToZeroAfterSeconds`` ``--zero-idle-s`` and the gateway in front; the operator reads a real Prometheus
   that discovers the runtime and gateway pods (started with the subprocess operator when section 4 runs). Each
   of ``--zero-starts`` cycles waits until the autoscaler has scaled to zero from Prometheus' reading (no request
   in the 60 s window, then the idle time) and the last runtime pod is gone, then ``--zero-clients`` waiting
   clients each send one request (a new connection each) through the Service: held by the gateway, which asks the
   operator for a replica. Per start: the requests answered and failed, each request's latency, the replica pod
   first seen (0.2 s polls) and seen Ready, the pod's own time to Ready (seen Ready - seen created) and the added
   latency (latency - the pod's own time to Ready), and the decision in ``status.scalingHistory``.

The pod reaches Prometheus (which listens on 127.0.0.1) through a TCP relay this script runs on the node's IP.
Every section prints the machine's load average: the machine is shared, so absolute figures move; compare ratios.

Usage: .venv/bin/python benchmarks/real_node.py [--rounds 3] [--load-s 20] [--cpu 250m] [--cpu-shares 32768]
       [--services 100] [--skip 1,3] [--paths direct,gateway] [--client keepalive] [--zero-starts 10]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from modalscale.demo.capacity import wall_to_t
from modalscale.devenv.binaries import ensure_helm
from modalscale.devenv.cluster import LocalCluster
from modalscale.devenv.images import build_images, import_into_cluster
from modalscale.devenv.kube import install_crds, wait_for
from modalscale.devenv.operator_process import OperatorProcess
from modalscale.devenv.prometheus import PodDiscovery, PrometheusProcess
from modalscale.devenv.realnode import node_ip, real_node_placement
from modalscale.runtime.client import MultimodalClient
from modalscale.runtime.workload import photo_at, photo_names

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "modalscale"
NS = "bench"
NAME = "real"
OP_NS = "modalscale-system"
RELEASE = "bench"


def load() -> str:
    return "load " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]" if values else "-"


def real_isvc(image_ref: str, cpu: str = "250m", gateway: bool = False) -> dict[str, Any]:
    image, _, version = image_ref.rpartition(":")
    return {"apiVersion": "modalscale.io/v1alpha1", "kind": "InferenceService", "metadata": {"name": NAME},
            "spec": {"model": {"source": "BuiltIn", "name": "multimodal"},
                     "runtime": {"image": image, "version": version, "instanceCount": 1, "intraOpThreads": 1,
                                 "modalityAwareBatching": False, "embeddingCache": False},
                     "resources": {"cpu": cpu, "memory": "2Gi"}, "placement": real_node_placement(),
                     "scaling": {"mode": "Fixed", "replicas": 1, "minReplicas": 1, "maxReplicas": 3},
                     # kube-proxy to the replicas unless section 2 measures the gateway's path (on by default).
                     "gateway": {"enabled": gateway}}}


def kwok_isvc(name: str) -> dict[str, Any]:
    return {"apiVersion": "modalscale.io/v1alpha1", "kind": "InferenceService", "metadata": {"name": name},
            "spec": {"resources": {"cpu": "100m", "memory": "256Mi", "gpu": {"count": 1, "type": "nvidia-l4"}},
                     "scaling": {"mode": "Fixed", "replicas": 1, "minReplicas": 1, "maxReplicas": 2},
                     "gateway": {"enabled": False}}}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def container_processes(container_id: str) -> list[tuple[int, str]]:
    """Host PIDs (and their cgroup-v1 memory path) of the processes of a container, by its id in
    ``/proc/<pid>/cgroup`` (kubelet's cgroupfs driver names each container's cgroup after its id)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            lines = (entry / "cgroup").read_text().splitlines()
            if any(container_id in line for line in lines):
                memory = next((line.split(":", 2)[2] for line in lines if line.split(":", 2)[1] == "memory"), "")
                out.append((int(entry.name), memory))
    return out


def cgroup_rss_mb(memory_path: str) -> float:
    stat = Path("/sys/fs/cgroup/memory") / memory_path.lstrip("/") / "memory.stat"
    with contextlib.suppress(OSError):
        for line in stat.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "rss":
                return int(value) / 2**20
    return float("nan")


CGROUP_ROOT = Path("/sys/fs/cgroup")


def pod_cgroup(uid: str, controller: str) -> Path | None:
    """The pod's cgroup-v1 directory in ``controller``'s hierarchy (kubelet's cgroupfs driver:
    ``kubepods[/<qos>]/pod<uid>``), or None when there is none (e.g. cgroup v2)."""
    base = CGROUP_ROOT / controller
    return next(iter(sorted(base.glob(f"kubepods*/**/pod{uid}"))), None) if base.is_dir() else None


def read_cpu(uid: str) -> dict[str, float]:
    """The pod's cumulative CPU: ``usage_s`` (``cpuacct.usage``, ns -> s), ``periods`` and ``throttled``
    (``cpu.stat`` ``nr_periods``/``nr_throttled``) and ``quota_cores`` (``cpu.cfs_quota_us / cpu.cfs_period_us``).
    Missing files give NaN."""
    out = {"usage_s": float("nan"), "periods": float("nan"), "throttled": float("nan"), "quota_cores": float("nan")}
    acct, cpu = pod_cgroup(uid, "cpuacct"), pod_cgroup(uid, "cpu")
    if acct is not None:
        with contextlib.suppress(OSError, ValueError):
            out["usage_s"] = int((acct / "cpuacct.usage").read_text()) / 1e9
    if cpu is not None:
        with contextlib.suppress(OSError, ValueError, KeyError):
            stat = dict(line.split() for line in (cpu / "cpu.stat").read_text().splitlines())
            out["periods"], out["throttled"] = float(stat["nr_periods"]), float(stat["nr_throttled"])
            quota = int((cpu / "cpu.cfs_quota_us").read_text())
            period = int((cpu / "cpu.cfs_period_us").read_text())
            out["quota_cores"] = quota / period if quota > 0 else float("inf")
    return out


def host_busy() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs from ``/proc/stat`` (busy = total - idle - iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return float(sum(fields) - fields[3] - fields[4]), float(sum(fields))


class CpuMeter:
    """Where the CPU went during one run: each pod's cgroup, this process (the client) and the whole machine."""

    def __init__(self, pods: list[Any]) -> None:
        self.uids = {p.metadata.name: p.metadata.uid for p in pods}

    def __enter__(self) -> CpuMeter:
        self.pods0 = {name: read_cpu(uid) for name, uid in self.uids.items()}
        t = os.times()
        self.client0, self.host0, self.wall0 = t.user + t.system, host_busy(), time.monotonic()
        return self

    def __exit__(self, *_: object) -> None:
        self.wall_s = time.monotonic() - self.wall0
        t = os.times()
        self.client_s = t.user + t.system - self.client0
        busy, total = host_busy()
        self.host_cores = (busy - self.host0[0]) / max(total - self.host0[1], 1) * (os.cpu_count() or 1)
        self.pods = {}
        for name, uid in self.uids.items():
            a, b = self.pods0[name], read_cpu(uid)
            periods = b["periods"] - a["periods"]
            throttled = (b["throttled"] - a["throttled"]) / periods if periods > 0 else float("nan")
            self.pods[name] = {"cores": (b["usage_s"] - a["usage_s"]) / self.wall_s, "quota": b["quota_cores"],
                               "throttled": throttled}

    def line(self, answered: int) -> str:
        pods = ", ".join(f"{v['cores']:.2f}/{v['quota']:.2f} cores, throttled {100 * v['throttled']:.0f} %"
                         for v in self.pods.values())
        per = 1000 * self.client_s / answered if answered else float("nan")
        return (f"pods [{pods}]; client {self.client_s / self.wall_s:.2f} cores ({1000 * self.client_s:.0f} "
                f"CPU-ms, {per:.1f} ms per answer); machine {self.host_cores:.2f} of {os.cpu_count()} cores busy")


class CpuPriority:
    """``--cpu-shares N``: the measured system gets CPU weight ``N`` over the other work of a shared machine (cgroup
    v1 ``cpu.shares``; a process at the root weighs 1024, the kubelet gives ``kubepods`` its allocatable
    millicores): the ``kubepods`` cgroup (every pod) and this process (the client), moved into a cgroup of its own.
    Without it, a neighbour's dozen busy processes outweigh the pods, which then miss their quota and no replica
    count can show its capacity. Restored on exit, with the ``kubepods`` value read back first (the kubelet could
    have reset it)."""

    def __init__(self, shares: int) -> None:
        self.shares = shares
        self.root = CGROUP_ROOT / "cpu"
        self.kubepods = self.root / "kubepods" / "cpu.shares"
        self.own = self.root / f"modalscale-bench-{os.getpid()}"

    def __enter__(self) -> CpuPriority:
        self.before = int(self.kubepods.read_text())
        self.kubepods.write_text(str(self.shares))
        self.own.mkdir(exist_ok=True)
        (self.own / "cpu.shares").write_text(str(self.shares))
        (self.own / "cgroup.procs").write_text(str(os.getpid()))  # v1: moves every thread of this process
        return self

    def __exit__(self, *_: object) -> None:
        (self.root / "cgroup.procs").write_text(str(os.getpid()))
        self.own.rmdir()
        self.at_end = int(self.kubepods.read_text())
        self.kubepods.write_text(str(self.before))

    def line(self) -> str:
        return (f"CPU weight (cpu.shares) of kubepods {self.before} -> {self.shares} and of the client {self.shares}, "
                f"against 1024 per process of other work")


class Relay:
    """TCP relay ``listen_host:port`` -> ``target`` (``host:port``) in a thread: pods reach a 127.0.0.1 server."""

    def __init__(self, listen_host: str, target: str) -> None:
        self.listen_host, (self.target_host, port) = listen_host, target.rsplit(":", 1)
        self.target_port = int(port)
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.port = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            t_reader, t_writer = await asyncio.open_connection(self.target_host, self.target_port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(self._pipe(reader, t_writer), self._pipe(t_reader, writer))

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._handle, self.listen_host, 0))
        self.port = server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()
        server.close()

    def start(self) -> Relay:
        self.thread.start()
        self.ready.wait(10)
        return self

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    @property
    def url(self) -> str:
        return f"http://{self.listen_host}:{self.port}"


class Bench:
    def __init__(self, api: Any) -> None:
        self.core, self.apps, self.custom = client.CoreV1Api(api), client.AppsV1Api(api), client.CustomObjectsApi(api)
        self.sequence = 0  # distinct request number across the whole run

    def pods(self) -> list[Any]:
        return self.core.list_namespaced_pod(NS, label_selector=f"modalscale.io/inferenceservice={NAME}").items

    def isvc(self) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object("modalscale.io", "v1alpha1", NS, "inferenceservices", NAME)

    def gateway_pods(self) -> list[Any]:
        return [p for p in self.core.list_namespaced_pod(NS, label_selector=f"modalscale.io/gateway={NAME}").items
                if p.metadata.deletion_timestamp is None]

    def set_path(self, path: str) -> float:
        """Put the Service's ``path`` (``direct`` or ``gateway``) in place and wait until its endpoints are only
        that path's Ready pods (the gateway's pods, or the replicas); returns the seconds it took."""
        started = time.monotonic()
        self.custom.patch_namespaced_custom_object("modalscale.io", "v1alpha1", NS, "inferenceservices", NAME,
                                                   {"spec": {"gateway": {"enabled": path == "gateway"}}})

        def in_place() -> bool:
            subsets = self.core.read_namespaced_endpoints(NAME, NS).subsets or []
            ips = {a.ip for sub in subsets for a in sub.addresses or []}
            want = {p.status.pod_ip for p in (self.gateway_pods() if path == "gateway" else self.pods())
                    if p.metadata.deletion_timestamp is None and p.status.pod_ip}
            return bool(ips) and ips <= want and (path == "direct" or len(ips) >= 2)

        wait_for(in_place, 600, f"the Service on the {path} path")
        return time.monotonic() - started

    def settled(self, n: int) -> bool:
        try:
            d = self.apps.read_namespaced_deployment(NAME, NS)
        except client.exceptions.ApiException as exc:
            if exc.status == 404:  # the operator has not created it yet
                return False
            raise
        live = [p for p in self.pods() if p.metadata.deletion_timestamp is None]
        return (d.status.ready_replicas or 0) == n and len(live) == n and len(self.pods()) == n

    def scale(self, n: int) -> float:
        self.custom.patch_namespaced_custom_object("modalscale.io", "v1alpha1", NS, "inferenceservices", NAME,
                                                   {"spec": {"scaling": {"replicas": n}}})
        return time.time()

    def scale_up_round(self, to: int) -> dict[str, float]:
        before = {p.metadata.name for p in self.pods()}
        patched = self.scale(to)
        wait_for(lambda: (self.apps.read_namespaced_deployment(NAME, NS).status.ready_replicas or 0) >= to, 600,
                 f"{to} ready replicas")
        ready = time.time()
        history = (self.isvc().get("status") or {}).get("scalingHistory") or []
        decided = [patched + wall_to_t(h["time"], patched) for h in history if h["to"] == to
                   and wall_to_t(h["time"], patched) >= -1.0]
        new = [p for p in self.pods() if p.metadata.name not in before]
        created = min(p.metadata.creation_timestamp.timestamp() for p in new)
        pod_ready = max(c.last_transition_time.timestamp() for p in new for c in p.status.conditions or []
                        if c.type == "Ready" and c.status == "True")
        decision_to_ready = (pod_ready - decided[0]) if decided else float("nan")
        return {"patch->Ready": ready - patched, "decision->Ready": decision_to_ready,
                "pod created->Ready": pod_ready - created}

    def request(self) -> tuple[bytes, str]:
        """A request no earlier one equals: photo and size from a running number (64 x 64 sizes x 6 photos before
        a size repeats), the number in the text too."""
        i = self.sequence  # called from one thread only (requests are made before the senders start)
        self.sequence += 1
        names = photo_names()
        return (photo_at(names[i % len(names)], 288 + (i // len(names)) % 64, 216 + (i // (64 * len(names))) % 64),
                f"photo number {i} of a table")

    def closed_loop(self, url: str, workers: int, seconds: float,
                    meter: CpuMeter | None = None, keepalive: bool = False) -> tuple[float, int, int]:
        """(answers/s, answered, failed) of ``workers`` closed-loop senders for ``seconds``; requests are made
        (JPEG-encoded) before the clock and ``meter`` (entered around the senders only) start. ``keepalive``: each
        sender keeps one connection (a new one after a failure), else a new connection per request."""
        batch = [self.request() for _ in range(int(workers * seconds * 4) + 1)]  # ample: 4 req/s per sender
        counter = [0]
        stop = time.monotonic() + seconds
        done, errors = [0], [0]
        lock = threading.Lock()

        def worker() -> None:
            kept: MultimodalClient | None = None
            while time.monotonic() < stop:
                with lock:
                    image, text = batch[counter[0] % len(batch)]
                    counter[0] += 1
                try:
                    if keepalive:
                        kept = kept or MultimodalClient(url, model_name="multimodal", timeout_s=300)
                        kept.infer(images=[image], text=text)
                    else:
                        with MultimodalClient(url, model_name="multimodal", timeout_s=300) as c:
                            c.infer(images=[image], text=text)
                    with lock:
                        done[0] += 1
                except Exception:  # counted and printed
                    with lock:
                        errors[0] += 1
                    if kept is not None:
                        with contextlib.suppress(Exception):
                            kept.close()
                        kept = None
            if kept is not None:
                with contextlib.suppress(Exception):
                    kept.close()

        with meter or contextlib.nullcontext():
            started = time.monotonic()
            stop = started + seconds
            threads = [threading.Thread(target=worker) for _ in range(workers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            elapsed = time.monotonic() - started
        if counter[0] > len(batch):
            print(f"  (warning: {counter[0]} requests from {len(batch)} distinct; some repeated)")
        return done[0] / elapsed, done[0], errors[0]


def section_throughput(b: Bench, url: str, args: argparse.Namespace, rng: random.Random) -> None:
    """Section 2 (see the module docstring)."""
    paths = [x.strip() for x in args.paths.split(",") if x.strip()]
    keepalive = args.client == "keepalive"
    conn = "one kept-alive connection each" if keepalive else "a new connection per request"
    senders = (f"{args.senders} senders in all" if args.senders
               else f"{args.workers_per_replica} senders per replica")
    print(f"\n2. throughput through the Service ({' and '.join(paths)} path), closed loop, {senders}, replicas of "
          f"{args.cpu} ({conn}), "
          f"{args.load_s:.0f} s each after a {args.warmup_s:.0f} s warm-up, "
          f"1 distinct image 288-351 x 216-279 + text per request, embedding cache off; "
          f"{args.rounds} rounds in shuffled order; median [min-max]; {load()}")
    labels = ["1 replica(s)", "2 replica(s)", "3 replica(s)", "1 replica (A/A)"]
    tput: dict[tuple[str, str], list[float]] = {}
    ratios: dict[tuple[str, str], list[float]] = {}
    pod_use: dict[tuple[str, int], list[float]] = {}  # each replica's CPU / its quota, per path and replica count
    throttled: dict[tuple[str, int], list[float]] = {}
    gateway_share: dict[int, list[float]] = {}  # gateway pods' CPU / the replicas' CPU, per replica count
    client_cores: list[float] = []
    for rnd in range(args.rounds):
        for path in rng.sample(paths, len(paths)):
            switch_s = b.set_path(path)
            print(f"  round {rnd + 1}: the Service on the {path} path ({switch_s:.1f} s)")
            order = [1, 2, 3]
            rng.shuffle(order)
            got: dict[str, float] = {}
            for label, n in [(f"{n} replica(s)", n) for n in order] + [("1 replica (A/A)", 1)]:
                b.scale(n)
                wait_for(lambda n=n: b.settled(n), 600, f"{n} replicas")
                workers = args.senders or args.workers_per_replica * n
                b.closed_loop(url, workers, args.warmup_s, keepalive=keepalive)
                replicas = [p for p in b.pods() if p.metadata.deletion_timestamp is None]
                gateways = b.gateway_pods() if path == "gateway" else []
                m = CpuMeter(replicas + gateways)
                rps, answered, errs = b.closed_loop(url, workers, args.load_s, meter=m, keepalive=keepalive)
                got[label] = rps
                tput.setdefault((path, label), []).append(rps)
                names = {p.metadata.name for p in gateways}
                replica_cores = sum(v["cores"] for k, v in m.pods.items() if k not in names)
                gateway_cores = sum(v["cores"] for k, v in m.pods.items() if k in names)
                for k, v in m.pods.items():
                    if k not in names:
                        pod_use.setdefault((path, n), []).append(v["cores"] / v["quota"])
                        throttled.setdefault((path, n), []).append(v["throttled"])
                if gateways and replica_cores > 0:
                    gateway_share.setdefault(n, []).append(gateway_cores / replica_cores)
                client_cores.append(m.client_s / m.wall_s)
                extra = (f"; gateway pods {gateway_cores:.2f} cores = {100 * gateway_cores / replica_cores:.1f} % of "
                         f"the replicas' {replica_cores:.2f}" if gateways and replica_cores > 0 else "")
                print(f"  round {rnd + 1} {path} {label}: {rps:.2f} req/s ({answered} answered, {errs} failed); "
                      f"{m.line(answered)}{extra}; {load()}")
            for label, rps in got.items():
                ratios.setdefault((path, label), []).append(rps / got["1 replica(s)"])
    for path in paths:
        for label in labels:
            print(f"  {path:8s} {label:16s} req/s {spread(tput[(path, label)])}  ratio to 1 replica "
                  f"{spread(ratios[(path, label)])}")
        aa = [abs(r - 1) for r in ratios[(path, "1 replica (A/A)")]]
        print(f"  {path:8s} noise: A/A ratio off 1 by {100 * max(aa):.0f} % at most; per replica ({args.cpu}): "
              f"req/s {spread(tput[(path, '1 replica(s)')])}")
        for n in (1, 2, 3):
            print(f"  {path:8s} {n} replica(s): each replica's CPU / its quota {spread(pod_use.get((path, n), []))}, "
                  f"share of CFS periods throttled {spread(throttled.get((path, n), []))}")
    for n, shares in sorted(gateway_share.items()):
        print(f"  gateway pods' CPU / the replicas' CPU at {n} replica(s): "
              f"{spread([100 * x for x in shares])} %")
    print(f"  client (this process): {spread(client_cores)} cores; {load()}")


WARM_ENV = "MODALSCALE_GATEWAY_WARM_PROBE_INTERVAL_S"
"""The gateway's setting of its readiness checks of starting replicas (0 = off; ``modalscale.gateway.health``)."""


def arm_order(arms: list[str], n: int) -> list[str]:
    """``n`` starts over ``arms``: one arm alone, or two as A B B A A B B A ... (each arm as often early as late)."""
    if len(arms) == 1:
        return arms * n
    return [arms[((i + 1) // 2) % 2] for i in range(n)]


def set_warm_probe(b: Bench, on: bool) -> float:
    """The gateway Deployment's readiness checks of starting replicas on (its default) or off (``WARM_ENV=0`` in
    its pods' env, which the operator leaves alone: it only adds what it wants); waits until only the new template's
    2 pods are there, Ready. Returns the seconds it took (0 when already so)."""
    name = f"{NAME}-gateway"
    dep = b.apps.read_namespaced_deployment(name, NS)
    container = dep.spec.template.spec.containers[0]
    serialize = client.ApiClient().sanitize_for_serialization
    env = [serialize(e) for e in container.env or [] if e.name != WARM_ENV]
    if not on:
        env.append({"name": WARM_ENV, "value": "0"})
    if any(e.name == WARM_ENV for e in container.env or []) != (not on):
        started = time.monotonic()
        b.apps.patch_namespaced_deployment(name, NS, [{"op": "replace", "path": "/spec/template/spec/containers/0/env",
                                                       "value": env}])

        def rolled_out() -> bool:
            d = b.apps.read_namespaced_deployment(name, NS)
            st = d.status
            return ((st.observed_generation or 0) >= (d.metadata.generation or 0) and st.updated_replicas == 2
                    and st.ready_replicas == 2 and st.replicas == 2 and len(b.gateway_pods()) == 2)

        wait_for(rolled_out, 300, f"the gateway rolled out with its readiness checks {'on' if on else 'off'}",
                 interval_s=0.5)
        time.sleep(3)  # the gateway Service's endpoints follow the new pods
        return time.monotonic() - started
    return 0.0


def section_zero_starts(b: Bench, url: str, args: argparse.Namespace) -> None:
    """Section 4 (see the module docstring); the operator reads Prometheus."""
    from modalscale.runtime.workload import photo_at

    print(f"\n4. starts from zero through the gateway: {args.zero_starts} starts, {args.zero_clients} waiting clients "
          f"each (a new connection per request), scaleToZeroAfterSeconds {args.zero_idle_s:.0f}, replicas of "
          f"{args.cpu}; {load()}")
    b.custom.patch_namespaced_custom_object(
        "modalscale.io", "v1alpha1", NS, "inferenceservices", NAME,
        {"spec": {"scaling": {"mode": "Predictive", "replicas": None, "minReplicas": 0, "maxReplicas": 1,
                              "scaleToZeroAfterSeconds": int(args.zero_idle_s), "decisionIntervalSeconds": 5},
                  "gateway": {"enabled": True, "queue": {"timeoutSeconds": 300}}}})
    b.set_path("gateway")

    def at_zero() -> bool:
        d = b.apps.read_namespaced_deployment(NAME, NS)
        return (d.spec.replicas or 0) == 0 and not b.pods()

    latencies: list[float] = []
    own_ready: list[float] = []
    added: list[float] = []
    to_zero: list[float] = []
    answered, failed, within = 0, 0, 0
    reasons: dict[str, int] = {}
    last_answer = time.monotonic()
    image = photo_at("coffee", 320, 240)
    arms = [a.strip() for a in args.zero_arms.split(",") if a.strip()]
    if not arms or any(a not in ("on", "off") for a in arms) or len(arms) > 2:
        raise SystemExit(f"--zero-arms {args.zero_arms!r}: one or two of on, off")
    order = arm_order(arms, args.zero_starts)
    by_arm: dict[str, list[tuple[int, list[float], bool]]] = {a: [] for a in arms}
    for start in range(args.zero_starts):
        try:
            wait_for(at_zero, 600, "the autoscaler's scale to zero and the last replica pod gone", interval_s=0.5)
        except TimeoutError:
            st = b.isvc().get("status") or {}
            print(f"  start {start + 1}: not at zero after 600 s; status.autoscaler {json.dumps(st.get('autoscaler'))}")
            break
        to_zero.append(time.monotonic() - last_answer)
        if len(arms) > 1 or order[start] == "off":
            rolled_s = set_warm_probe(b, order[start] == "on")
            if rolled_s:
                print(f"  (gateway rolled out with its readiness checks {order[start]} in {rolled_s:.1f} s)")
        env = b.apps.read_namespaced_deployment(f"{NAME}-gateway", NS).spec.template.spec.containers[0].env or []
        if any(e.name == WARM_ENV for e in env) != (order[start] == "off"):
            raise SystemExit(f"start {start + 1}: the gateway's env no longer says arm {order[start]} (the operator "
                             "rewrote it?): the A/B cannot go on")
        results: list[tuple[float, str | None]] = []
        lock = threading.Lock()

        def one(k: int, start: int = start) -> None:
            try:
                with MultimodalClient(url, model_name="multimodal", timeout_s=300) as c:
                    c.infer(images=[image], text=f"a start from zero, number {start} client {k}")
                err = None
            except Exception as exc:  # counted and printed
                err = f"{type(exc).__name__}: {exc}"
            with lock:
                results.append((time.monotonic(), err))

        sent = time.monotonic()
        threads = [threading.Thread(target=one, args=(k,)) for k in range(args.zero_clients)]
        for t in threads:
            t.start()
        seen_created: float | None = None
        seen_ready: float | None = None
        while any(t.is_alive() for t in threads) or seen_ready is None:
            pods = b.pods()
            now = time.monotonic()
            if pods and seen_created is None:
                seen_created = now
            if seen_ready is None and any(c.type == "Ready" and c.status == "True"
                                          for p in pods for c in p.status.conditions or []):
                seen_ready = now
            if now - sent > 420:
                break
            time.sleep(0.2)
        for t in threads:
            t.join(timeout=60)
        errors = [e for _, e in results if e]
        answered += len(results) - len(errors)
        failed += len(errors) + (args.zero_clients - len(results))
        lat = [t - sent for t, e in results if e is None]
        latencies.extend(lat)
        last_answer = max((t for t, _ in results), default=time.monotonic())
        history = (b.isvc().get("status") or {}).get("scalingHistory") or []
        reason = next((h["reason"] for h in reversed(history) if h["from"] == 0 and h["to"] == 1), "-")
        reasons[reason] = reasons.get(reason, 0) + 1
        own = (seen_ready - seen_created) if seen_ready is not None and seen_created is not None else float("nan")
        own_ready.append(own)
        extra = [x - own for x in lat]
        added.extend(extra)
        within += int(bool(extra) and max(extra) <= 1.0 and not errors)
        by_arm[order[start]].append((start + 1, extra, bool(extra) and max(extra) <= 1.0 and not errors))
        print(f"  start {start + 1} [{order[start]}]: {len(results) - len(errors)} answered, {len(errors)} failed"
              f"{' (' + errors[0][:160] + ')' if errors else ''}; at zero {to_zero[-1]:.0f} s after the last answer; "
              f"pod seen {(seen_created or float('nan')) - sent:.1f} s after sending, Ready "
              f"{(seen_ready or float('nan')) - sent:.1f} s (its own {own:.1f} s); latency "
              f"{', '.join(f'{x:.1f}' for x in sorted(lat))} s, added "
              f"{', '.join(f'{x:+.2f}' for x in sorted(extra))} s; 0 -> 1 {reason}; {load()}")
    n = len(own_ready)
    print(f"  {n} starts: requests {answered + failed} sent / {answered} answered / {failed} failed; latency s "
          f"{spread(latencies)}; the pod's own time to Ready s {spread([x for x in own_ready if x == x])}; added "
          f"latency s {spread(added)} (max {max(added, default=float('nan')):.2f}); starts with every request "
          f"answered within its pod's own time to Ready + 1 s: {within} of {n}; 0 -> 1 decisions {reasons}; "
          f"time from the last answer to zero s {spread(to_zero[1:])}")
    if len(arms) > 1:
        print(f"  by arm of the gateway's readiness checks of starting replicas ({', '.join(order)}):")
        for arm, rows in by_arm.items():
            values = [x for _, extra, _ in rows for x in extra]
            halves = [[x for i, (_, extra, _) in enumerate(rows) if i % 2 == h for x in extra] for h in (0, 1)]
            print(f"    {arm}: {len(rows)} starts, added latency s {spread(values)}, within 1 s in "
                  f"{sum(ok for _, _, ok in rows)} of {len(rows)}; A/A (its starts taken alternately) "
                  f"{spread(halves[0])} vs {spread(halves[1])}")
        on_v = [x for _, e, _ in by_arm.get("on", []) for x in e]
        off_v = [x for _, e, _ in by_arm.get("off", []) for x in e]
        if on_v and off_v:
            print(f"    median added latency on - off: {statistics.median(on_v) - statistics.median(off_v):+.2f} s")
    if "off" in arms:
        set_warm_probe(b, True)
    b.custom.patch_namespaced_custom_object(
        "modalscale.io", "v1alpha1", NS, "inferenceservices", NAME,
        {"spec": {"scaling": {"mode": "Fixed", "replicas": 1, "minReplicas": 1, "maxReplicas": 3,
                              "scaleToZeroAfterSeconds": None},
                  "gateway": {"enabled": False}}})


def helm_env(home: Path) -> dict[str, str]:
    return {**os.environ, **{k: str(home / k.lower()) for k in ("HELM_CACHE_HOME", "HELM_CONFIG_HOME",
                                                               "HELM_DATA_HOME")}}


def section_operator_pod(b: Bench, cluster: LocalCluster, tmp: Path, url: str, args: argparse.Namespace) -> None:
    """Section 3 (see the module docstring); the subprocess operator is stopped before this."""
    print(f"\n3. the operator in its pod (helm install of charts/modalscale on the real node); {load()}")
    (op_image,) = build_images(["operator"], log=lambda _m: None)
    seconds = import_into_cluster(op_image, cluster.workdir, log=lambda _m: None)
    how = "cached" if op_image.cached else f"built in {op_image.build_s:.0f} s"
    print(f"  operator image {op_image.full_ref}: {how}"
          f", import {seconds:.1f} s")
    prom = PrometheusProcess(tmp / "prometheus", scrape_interval_s=1.0,
                             discovery=PodDiscovery.for_cluster(cluster, (NS,)))
    prom.start([])
    relay = Relay(node_ip(), prom.url.removeprefix("http://")).start()
    helm = [str(ensure_helm(log=lambda _m: None))]
    env = helm_env(tmp / "helm")
    values = {**real_node_placement(), "config": {"resyncIntervalSeconds": 10, "prometheusUrl": relay.url}}
    (tmp / "values.yaml").write_text(yaml.safe_dump(values))
    kc = str(cluster.kubeconfig)
    try:
        started = time.monotonic()
        subprocess.run([*helm, "install", RELEASE, str(CHART), "--namespace", OP_NS, "--create-namespace",
                        "--kubeconfig", kc, "--wait", "--timeout", "300s", "-f", str(tmp / "values.yaml")],
                       check=True, env=env, capture_output=True, text=True, timeout=400)
        print(f"  helm install --wait: {time.monotonic() - started:.1f} s; Prometheus (pod discovery) reached by the "
              f"pods at {relay.url} (relay to {prom.url})")
        op_pods = b.core.list_namespaced_pod(OP_NS, label_selector=f"app.kubernetes.io/instance={RELEASE}").items
        containers = {p.metadata.name: p.status.container_statuses[0].container_id.split("://", 1)[1]
                      for p in op_pods}

        def rss_line() -> str:
            parts = []
            for pod, cid in containers.items():
                procs = container_processes(cid)
                vm = sum(rss_mb(pid) for pid, _ in procs)
                cg = cgroup_rss_mb(procs[0][1]) if procs else float("nan")
                parts.append(f"{pod}: VmRSS {vm:.0f} MB ({len(procs)} process(es)), cgroup rss {cg:.0f} MB")
            return "; ".join(parts)

        def active_pod() -> str | None:
            for p in op_pods:
                log = b.core.read_namespaced_pod_log(p.metadata.name, OP_NS, container="operator")
                if f"Wrote kind=inferenceservices verb=patch-status namespace={NS} name={NAME}" in log:
                    return str(p.metadata.name)
            return None

        time.sleep(args.idle_s)
        print(f"  RSS idle (1 real InferenceService, {args.idle_s:.0f} s after install; one pod active, one "
              f"standing by): {rss_line()}; {load()}")

        # The autoscaler in the pod, reading Prometheus: Utilization mode (no service-time model needed), a low target,
        # load through the Service, until the pod's autoscaler decides a scale-up.
        b.custom.patch_namespaced_custom_object(
            "modalscale.io", "v1alpha1", NS, "inferenceservices", NAME,
            {"spec": {"scaling": {"mode": "Utilization", "replicas": None, "minReplicas": 1, "maxReplicas": 2,
                                  "targetUtilizationPercent": 30, "decisionIntervalSeconds": 5,
                                  "scaleUpStabilizationSeconds": 0}}})
        stop = threading.Event()

        def pressure() -> None:
            while not stop.is_set():
                b.closed_loop(url, 4, 5)

        sender = threading.Thread(target=pressure, daemon=True)
        sender.start()
        started = time.monotonic()
        try:
            def decided() -> dict[str, Any] | None:
                st = b.isvc().get("status") or {}
                ups = [h for h in st.get("scalingHistory") or [] if h["to"] > h["from"]
                       and h["reason"] not in ("FixedReplicas", "CappedByBudget")]
                return st if ups and (st.get("autoscaler") or {}).get("metricsAvailable") else None

            st = wait_for(decided, 300, "a scale-up decided by the pod's autoscaler from Prometheus", interval_s=2)
        finally:
            stop.set()
            sender.join(60)
        # Which pod wrote it: the operator's one writer logs every write (the subprocess operator was stopped).
        active = wait_for(active_pod, 60, "the operator pod that wrote the real InferenceService's status")
        auto = st["autoscaler"]
        up = [h for h in st["scalingHistory"] if h["to"] > h["from"]][-1]
        cond = next((c for c in st.get("conditions") or [] if c["type"] == "MetricsAvailable"), {})
        print(f"  autoscaler in {active}: scale-up {up['from']}->{up['to']} ({up['reason']}) "
              f"{time.monotonic() - started:.0f} s after load began; status.autoscaler reason {auto['reason']}, "
              f"metricsAvailable {auto['metricsAvailable']}, MetricsAvailable condition {cond.get('reason')}: "
              f"{cond.get('message')}")
        print(f"  status.autoscaler.features (read from Prometheus): {json.dumps(auto.get('features'))}")
        log = b.core.read_namespaced_pod_log(active, OP_NS, container="operator")
        scale_writes = [line for line in log.splitlines() if f"namespace={NS} name={NAME}" in line
                        and "Wrote kind=" in line and "patch-status" not in line]
        print(f"  the pod's log: {len(scale_writes)} write(s) other than status for {NS}/{NAME}"
              + (f", last: {scale_writes[-1][-160:]}" if scale_writes else ""))
        b.custom.patch_namespaced_custom_object("modalscale.io", "v1alpha1", NS, "inferenceservices", NAME,
                                                {"spec": {"scaling": {"mode": "Fixed", "replicas": 1}}})
        wait_for(lambda: b.settled(1), 600, "1 replica")

        for i in range(args.services):
            b.custom.create_namespaced_custom_object("modalscale.io", "v1alpha1", NS, "inferenceservices",
                                                     kwok_isvc(f"svc-{i:03d}"))

        def all_ready() -> bool:
            items = b.custom.list_namespaced_custom_object("modalscale.io", "v1alpha1", NS,
                                                           "inferenceservices")["items"]
            return sum(1 for o in items if any(c["type"] == "Ready" and c["status"] == "True"
                                               for c in (o.get("status") or {}).get("conditions") or [])
                       ) >= args.services
        started = time.monotonic()
        wait_for(all_ready, 900, f"{args.services} services Ready", interval_s=2)
        print(f"  {args.services} KWOK services Ready in {time.monotonic() - started:.0f} s (reconciled by the pod)")
        time.sleep(args.idle_s)
        print(f"  RSS with 1 real + {args.services} services, {args.idle_s:.0f} s after all Ready: {rss_line()}; "
              f"{load()}")
    finally:
        subprocess.run([*helm, "uninstall", RELEASE, "--namespace", OP_NS, "--kubeconfig", kc, "--wait",
                        "--timeout", "120s"], check=False, env=env, capture_output=True, timeout=200)
        relay.stop()
        prom.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cpu", default="250m", help="CPU limit (= request) of each replica")
    ap.add_argument("--cpu-shares", type=int, default=0,
                    help="during section 2, CPU weight of the pods and the client over other work (0: leave as is)")
    ap.add_argument("--workers-per-replica", type=int, default=6, help="closed-loop senders per replica")
    ap.add_argument("--senders", type=int, default=0,
                    help="section 2: this many closed-loop senders whatever the replica count (0: per replica), as a "
                         "client with a few kept-alive connections holds")
    ap.add_argument("--load-s", type=float, default=20.0, help="seconds of each throughput run")
    ap.add_argument("--warmup-s", type=float, default=5.0, help="seconds of closed loop before each throughput run")
    ap.add_argument("--services", type=int, default=100, help="InferenceServices for the operator's RSS")
    ap.add_argument("--idle-s", type=float, default=20.0, help="seconds idle before each RSS reading")
    ap.add_argument("--skip", default="", help="comma-separated sections to skip (1, 2, 3, 4)")
    ap.add_argument("--zero-starts", type=int, default=10, help="section 4's starts from zero")
    ap.add_argument("--zero-clients", type=int, default=2, help="section 4's waiting clients per start")
    ap.add_argument("--zero-idle-s", type=float, default=5.0, help="section 4's scaleToZeroAfterSeconds")
    ap.add_argument("--zero-arms", default="on",
                    help="section 4's arms of the gateway's readiness checks of starting replicas, comma-separated "
                         "(on, off): with two, the starts go ABBA ABBA..., the gateway rolled out between arms")
    ap.add_argument("--paths", default="direct",
                    help="section 2's request paths, comma-separated: direct (kube-proxy), gateway")
    ap.add_argument("--client", choices=("new", "keepalive"), default="new",
                    help="section 2's senders: a new connection per request, or one kept-alive connection each")
    args = ap.parse_args()
    unknown = {x.strip() for x in args.paths.split(",")} - {"direct", "gateway"}
    if unknown:
        ap.error(f"--paths: unknown {', '.join(sorted(unknown))}; use direct and/or gateway")
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    gateway = "gateway" in args.paths or "4" not in skip
    rng = random.Random(0)
    with tempfile.TemporaryDirectory(prefix="bench-real-node-") as tmp_name:
        tmp = Path(tmp_name)
        cluster = LocalCluster(tmp / "cluster")
        try:
            cluster.up(nodes=args.services // 8 + 2, real_node=True)  # a KWOK GPU for each service
            api = cluster.api_client()
            install_crds(api, REPO / "crds")
            # The gateway's pods run the operator image.
            for image in build_images(["runtime-cpu", "operator"] if gateway else ["runtime-cpu"]):
                imported_s = import_into_cluster(image, cluster.workdir)
                print(f"image {image.full_ref}: {'cached' if image.cached else f'built in {image.build_s:.0f} s'}, "
                      f"import {imported_s:.1f} s; {load()}; shared machine (other helpers' work runs beside this)")
            image = build_images(["runtime-cpu"])[0]
            b = Bench(api)
            b.core.create_namespace({"metadata": {"name": NS}})
            prom = None
            if "4" not in skip:  # section 4's autoscaler reads Prometheus (the runtime's and the gateway's pods)
                prom = PrometheusProcess(tmp / "prometheus-4", scrape_interval_s=1.0,
                                         discovery=PodDiscovery.for_cluster(cluster, (NS,)))
                prom.start([])
            op = OperatorProcess(cluster.kubeconfig, tmp / "operator.log",
                                 {"MODALSCALE_STANDALONE": "true",
                                  **({"MODALSCALE_PROMETHEUS_URL": prom.url} if prom else {})}, resync_s=5.0)
            try:
                op.wait_healthy()
                b.custom.create_namespaced_custom_object("modalscale.io", "v1alpha1", NS, "inferenceservices",
                                                         real_isvc(image.ref, args.cpu, gateway=False))
                started = time.monotonic()
                wait_for(lambda: b.settled(1), 900, "the first replica Ready")
                print(f"first replica Ready {time.monotonic() - started:.1f} s after the InferenceService was created")
                url = f"{b.core.read_namespaced_service(NAME, NS).spec.cluster_ip}:8000"

                if "1" not in skip:
                    print(f"\n1. scale-up decision -> new replica Ready (image cached, subprocess operator), "
                          f"{args.rounds} rounds; {load()}")
                    times: dict[str, dict[str, list[float]]] = {}
                    for _ in range(args.rounds):
                        for to in (2, 3):
                            r = b.scale_up_round(to)
                            for k, v in r.items():
                                times.setdefault(f"1->{to}", {}).setdefault(k, []).append(v)
                            b.scale(1)
                            wait_for(lambda: b.settled(1), 600, "back to 1 replica")
                    for step, r in times.items():
                        print(f"  {step}: " + ", ".join(f"{k} s {spread(v)}" for k, v in r.items()))
                    print(f"  {load()}")

                if "2" not in skip:
                    priority = CpuPriority(args.cpu_shares) if args.cpu_shares else contextlib.nullcontext()
                    with priority:
                        section_throughput(b, url, args, rng)
                    if isinstance(priority, CpuPriority):
                        print(f"  {priority.line()}; kubepods read back at the end: {priority.at_end} (restored to "
                              f"{priority.before})")
                b.scale(1)
                wait_for(lambda: b.settled(1), 600, "1 replica")
                if "4" not in skip:
                    section_zero_starts(b, url, args)
                    wait_for(lambda: b.settled(1), 600, "1 replica")
            finally:
                op.stop()
                if prom is not None:
                    prom.stop()
            if "3" not in skip:
                section_operator_pod(b, cluster, tmp, url, args)
        finally:
            cluster.down()


if __name__ == "__main__":
    main()
