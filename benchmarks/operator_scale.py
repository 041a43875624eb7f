"""Benchmark (not a test): N InferenceServices on M fake GPU nodes against the real local control plane.

Prints: time until all are Ready, reconcile duration p50/p99 (from the operator's own histogram), API writes per
object (the operator's counter) during creation and during an idle minute, and the operator's peak RSS.

Usage: .venv/bin/python benchmarks/operator_scale.py [--services 500] [--nodes 50] [--idle-s 60]
The baseline printed beside it is the same run's first-service latency (one object alone), for a ratio.
"""

from __future__ import annotations

import argparse
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
    from prometheus_client.parser import text_string_to_metric_families
    import urllib.request

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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--services", type=int, default=500)
    ap.add_argument("--nodes", type=int, default=50)
    ap.add_argument("--idle-s", type=float, default=60.0)
    args = ap.parse_args()
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
