"""Benchmark (not a test): N InferenceServices on M fake GPU nodes against the real local control plane.

Prints: time until all are Ready, reconcile duration p50/p99 (from the operator's own histogram), API writes per
object (the operator's counter) during creation and during an idle minute, and the operator's peak RSS.

Usage: .venv/bin/python benchmarks/operator_scale.py [--services 500] [--nodes 50] [--idle-s 60]
The baseline printed beside it is the same run's first-service latency (one object alone), for a ratio.

``--startup [--rounds 3]`` measures instead what a newcomer waits for, on a small control plane with only ``crds/``
installed: time from starting ``modalscale operator`` to the first reconcile of an InferenceService that already
exists, peering on (the default) against a standalone operator run side by side in alternating rounds (plus a second
standalone column, the A/A row), and the operator's idle RSS. It also times importing the operator's modules in a
fresh interpreter, against the same import with torch imported first (what the operator paid before it stopped
importing torch).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes import client

from modalscale.devenv.cluster import LocalCluster
from modalscale.devenv.kube import install_crds, wait_for
from modalscale.devenv.operator_process import OperatorProcess

REPO = Path(__file__).resolve().parents[1]


def isvc(name: str) -> dict[str, Any]:
    return {"apiVersion": "modalscale.io/v1alpha1", "kind": "InferenceService", "metadata": {"name": name},
            "spec": {"resources": {"cpu": "100m", "memory": "256Mi", "gpu": {"count": 1, "type": "nvidia-l4"}},
                     "scaling": {"mode": "Fixed", "replicas": 1, "minReplicas": 1, "maxReplicas": 2}}}


def ready_count(custom: client.CustomObjectsApi, ns: str) -> int:
    items = custom.list_namespaced_custom_object("modalscale.io", "v1alpha1", ns, "inferenceservices")["items"]
    return sum(1 for o in items for c in (o.get("status") or {}).get("conditions") or []
               if c["type"] == "Ready" and c["status"] == "True")


def quantile_from_histogram(op: OperatorProcess, q: float) -> float:
    """Upper bound of the histogram bucket that holds quantile ``q`` of reconcile durations, seconds."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{op.metrics_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    buckets: list[tuple[float, float]] = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "modalscale_reconcile_duration_seconds_bucket" and s.labels.get("kind") == "InferenceService":
                buckets.append((float(s.labels["le"]), s.value))
    buckets.sort()
    total = buckets[-1][1] if buckets else 0
    for le, count in buckets:
        if total and count >= q * total:
            return le
    return float("nan")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def current_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


IMPORT_PROBE = """
import resource, sys, time
t0 = time.perf_counter()
if sys.argv[1] == "with-torch":
    import torch
import kopf
import modalscale.cli
modalscale.cli.build_parser(["operator"])
from modalscale.operator import handlers
from modalscale.operator.autoscale import handlers as autoscale_handlers
from modalscale.operator.budget import handlers as budget_handlers
from modalscale.operator.settings import Settings
handlers.register(kopf.OperatorRegistry(), Settings())
print(time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "torch" in sys.modules)
"""


def spread(values: list[float]) -> str:
    return f"median {statistics.median(values):.2f} (min {min(values):.2f}, max {max(values):.2f}, n={len(values)})"


def import_rounds(rounds: int) -> None:
    """Import time and peak RSS of the operator's modules in a fresh interpreter, with and without torch."""
    runs: dict[str, list[tuple[float, float]]] = {"without-torch": [], "with-torch": [], "without-torch (A/A)": []}
    for _ in range(rounds):
        for label in runs:
            out = subprocess.run([sys.executable, "-c", IMPORT_PROBE, label.split()[0]], capture_output=True,
                                 text=True, check=True, cwd=REPO).stdout.split()
            runs[label].append((float(out[0]), float(out[1])))
            assert out[2] == str(label.startswith("with-")), f"torch imported: {out[2]} for {label}"
    print("import of the operator's modules (fresh interpreter; what `modalscale operator` loads):")
    base_s = statistics.median(t for t, _ in runs["without-torch"])
    base_mb = statistics.median(m for _, m in runs["without-torch"])
    for label, vals in runs.items():
        s_, mb = [t for t, _ in vals], [m for _, m in vals]
        print(f"  {label:22s} time s {spread(s_)}  peak RSS MB {spread(mb)}  ratio to without-torch: "
              f"time {statistics.median(s_) / base_s:.2f}x, RSS {statistics.median(mb) / base_mb:.2f}x")


def startup_rounds(rounds: int, idle_s: float) -> None:
    """Time from process start to the first reconcile, peering on against standalone, and idle RSS.

    "peering after SIGKILL" starts right after a peering operator was killed (its record left in the peering
    object, alive for one lifetime): with random priorities that start waited up to 30 s whenever the dead one had
    drawn the higher number.
    """
    standalone = {"MODALSCALE_STANDALONE": "true"}
    variants: dict[str, tuple[dict[str, str], bool]] = {
        "standalone": (standalone, False), "peering": ({}, False), "peering after SIGKILL": ({}, True),
        "standalone (A/A)": (standalone, False)}
    first_s: dict[str, list[float]] = {k: [] for k in variants}
    idle_mb: dict[str, list[float]] = {k: [] for k in variants}
    with tempfile.TemporaryDirectory(prefix="opstart-") as tmp:
        cluster = LocalCluster(Path(tmp) / "cluster", log=lambda _m: None)
        try:
            cluster.up(nodes=1, gpus_per_node=16, gpu_type="nvidia-l4")
            api = cluster.api_client()
            install_crds(api, REPO / "crds")  # crds/ only, as a newcomer applies it (kopf's peering CRDs included)
            custom = client.CustomObjectsApi(api)

            def reconciled(name: str) -> bool:
                obj = custom.get_namespaced_custom_object("modalscale.io", "v1alpha1", "default", "inferenceservices",
                                                          name)
                return (obj.get("status") or {}).get("observedGeneration") == obj["metadata"]["generation"]

            def create(name: str) -> None:
                custom.create_namespaced_custom_object("modalscale.io", "v1alpha1", "default", "inferenceservices",
                                                       isvc(name))

            for r in range(rounds):
                for v, (label, (env, after_kill)) in enumerate(variants.items()):
                    name = f"first-{r}-{v}"
                    if after_kill:
                        create(f"{name}-pre")
                        pre = OperatorProcess(cluster.kubeconfig, Path(tmp) / f"operator-{name}-pre.log", env,
                                              resync_s=30.0)
                        wait_for(lambda: reconciled(f"{name}-pre"), 300, "the predecessor's reconcile", 0.05)
                        pre.kill()
                    create(name)
                    t0 = time.monotonic()
                    op = OperatorProcess(cluster.kubeconfig, Path(tmp) / f"operator-{name}.log", env, resync_s=30.0)
                    try:
                        wait_for(lambda: reconciled(name), 300, f"first reconcile of {name} ({label})", 0.05)
                        first_s[label].append(time.monotonic() - t0)
                        time.sleep(idle_s)
                        idle_mb[label].append(current_rss_mb(op.proc.pid))
                    finally:
                        op.stop()
        finally:
            cluster.down()
    print("time from starting `modalscale operator` to the first reconcile (1 InferenceService already there):")
    base = statistics.median(first_s["standalone"])
    for label in variants:
        print(f"  {label:22s} s {spread(first_s[label])}  ratio to standalone "
              f"{statistics.median(first_s[label]) / base:.2f}x;  idle RSS after {idle_s:.0f} s: MB "
              f"{spread(idle_mb[label])}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--services", type=int, default=500)
    ap.add_argument("--nodes", type=int, default=50)
    ap.add_argument("--idle-s", type=float, default=60.0)
    ap.add_argument("--startup", action="store_true",
                    help="measure time to first reconcile and idle RSS instead of the N-service run")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of each variant in --startup mode")
    ap.add_argument("--startup-idle-s", type=float, default=10.0,
                    help="--startup mode: seconds after the first reconcile before the idle RSS is read")
    args = ap.parse_args()
    if args.startup:
        print(f"load average before: {os.getloadavg()} on {os.cpu_count()} CPUs (shared with other work: "
              "compare the columns of one run, not absolute figures)")
        import_rounds(args.rounds)
        startup_rounds(args.rounds, args.startup_idle_s)
        print(f"load average after: {os.getloadavg()}")
        return
    with tempfile.TemporaryDirectory(prefix="opscale-") as tmp:
        cluster = LocalCluster(Path(tmp) / "cluster", log=lambda _m: None)
        op = None
        try:
            cluster.up(nodes=args.nodes, gpus_per_node=16, gpu_type="nvidia-l4")
            api = cluster.api_client()
            install_crds(api, REPO / "crds")
            op = OperatorProcess(cluster.kubeconfig, Path(tmp) / "operator.log", resync_s=30.0)
            op.wait_healthy()
            custom = client.CustomObjectsApi(api)
            client.CoreV1Api(api).create_namespace({"metadata": {"name": "bench"}})

            t0 = time.monotonic()
            custom.create_namespaced_custom_object("modalscale.io", "v1alpha1", "bench", "inferenceservices",
                                                   isvc("single"))
            wait_for(lambda: ready_count(custom, "bench") == 1, 120, "the single service Ready", 0.05)
            single_s = time.monotonic() - t0

            writes0 = op.metric("modalscale_api_writes_total")
            t0 = time.monotonic()
            for i in range(args.services):
                custom.create_namespaced_custom_object("modalscale.io", "v1alpha1", "bench", "inferenceservices",
                                                       isvc(f"svc-{i:04d}"))
            created_s = time.monotonic() - t0
            wait_for(lambda: ready_count(custom, "bench") == args.services + 1, 3600, "all Ready", 1.0)
            all_ready_s = time.monotonic() - t0
            writes1 = op.metric("modalscale_api_writes_total")
            time.sleep(args.idle_s)
            writes2 = op.metric("modalscale_api_writes_total")
            print(f"services={args.services} nodes={args.nodes} (KWOK, 16 GPUs each)")
            print(f"baseline: one service alone Ready in {single_s:.2f} s")
            print(f"created {args.services} objects in {created_s:.1f} s; all Ready after {all_ready_s:.1f} s "
                  f"({all_ready_s / args.services:.3f} s per service, {all_ready_s / single_s:.1f}x the single one)")
            print(f"reconcile duration p50 <= {quantile_from_histogram(op, 0.5)} s, "
                  f"p99 <= {quantile_from_histogram(op, 0.99)} s (histogram bucket bounds)")
            print(f"API writes per object while creating: {(writes1 - writes0) / args.services:.2f}; "
                  f"during {args.idle_s:.0f} s idle: {writes2 - writes1:.0f} in total")
            print(f"operator peak RSS: {rss_mb(op.proc.pid):.0f} MB")
        finally:
            if op:
                op.stop()
            cluster.down()


if __name__ == "__main__":
    main()
