"""Benchmark (not a test): the runtime on the local cluster's real kubelet node, image cached.

Prints:
1. Time from a scale-up decision to the new replica Ready: the InferenceService's replicas patched 1 -> 2 (and
   1 -> 3), timed from the patch, from the operator's decision (``status.scalingHistory``, 1 s resolution) and from
   each new pod's creation, to the Deployment's readyReplicas; repeated rounds, back to 1 in between.
2. Per-replica throughput on the real node: closed loop (``--concurrency`` workers, a new connection per request
   through the Service's ClusterIP) for ``--load-s`` s at 1, 2 and 3 replicas of 500m each, in rounds whose order
   is shuffled; ratios against the same round's 1-replica run, with a second 1-replica run as the A/A row.
3. The operator's RSS idle and with 100 InferenceServices (``--services``; on the KWOK GPU nodes): the operator
   runs as a subprocess (``modalscale operator``), as in the demo; not the Helm-installed pod.

Every section prints the machine's load average before and after: the machine is shared, so absolute figures move;
compare the ratios.

Usage: .venv/bin/python benchmarks/real_node.py [--rounds 2] [--concurrency 4] [--load-s 30] [--services 100]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from kubernetes import client

from modalscale.demo.capacity import wall_to_t
from modalscale.devenv.cluster import LocalCluster
from modalscale.devenv.images import build_images, import_into_cluster
from modalscale.devenv.kube import install_crds, wait_for
from modalscale.devenv.operator_process import OperatorProcess
from modalscale.devenv.realnode import real_node_placement
from modalscale.runtime.client import MultimodalClient
from modalscale.runtime.workload import photo_at

REPO = Path(__file__).resolve().parents[1]
NS = "bench"
NAME = "real"


def load() -> str:
    return "load " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]" if values else "-"


def real_isvc(image_ref: str) -> dict[str, Any]:
    image, _, version = image_ref.rpartition(":")
    return {"apiVersion": "modalscale.io/v1alpha1", "kind": "InferenceService", "metadata": {"name": NAME},
            "spec": {"model": {"source": "BuiltIn", "name": "multimodal"},
                     "runtime": {"image": image, "version": version, "instanceCount": 1, "intraOpThreads": 1,
                                 "modalityAwareBatching": False},
                     "resources": {"cpu": "500m", "memory": "2Gi"}, "placement": real_node_placement(),
                     "scaling": {"mode": "Fixed", "replicas": 1, "minReplicas": 1, "maxReplicas": 3}}}


def kwok_isvc(name: str) -> dict[str, Any]:
    return {"apiVersion": "modalscale.io/v1alpha1", "kind": "InferenceService", "metadata": {"name": name},
            "spec": {"resources": {"cpu": "100m", "memory": "256Mi", "gpu": {"count": 1, "type": "nvidia-l4"}},
                     "scaling": {"mode": "Fixed", "replicas": 1, "minReplicas": 1, "maxReplicas": 2}}}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Bench:
    def __init__(self, api: Any) -> None:
        self.core, self.apps, self.custom = client.CoreV1Api(api), client.AppsV1Api(api), client.CustomObjectsApi(api)

    def pods(self) -> list[Any]:
        return self.core.list_namespaced_pod(NS, label_selector=f"modalscale.io/inferenceservice={NAME}").items

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
        history = (self.custom.get_namespaced_custom_object("modalscale.io", "v1alpha1", NS, "inferenceservices",
                                                            NAME).get("status") or {}).get("scalingHistory") or []
        decided = [patched + wall_to_t(h["time"], patched) for h in history if h["to"] == to
                   and wall_to_t(h["time"], patched) >= -1.0]
        new = [p for p in self.pods() if p.metadata.name not in before]
        created = min(p.metadata.creation_timestamp.timestamp() for p in new)
        pod_ready = max(c.last_transition_time.timestamp() for p in new for c in p.status.conditions or []
                        if c.type == "Ready" and c.status == "True")
        return {"patch->Ready": ready - patched, "decision->Ready": (pod_ready - decided[0]) if decided else float("nan"),
                "pod created->Ready": pod_ready - created}

    def closed_loop(self, url: str, concurrency: int, seconds: float) -> tuple[float, int]:
        # Every request differs (photo, size, text), so the runtime's embedding cache cannot answer it.
        from modalscale.runtime.workload import photo_names

        names = photo_names()
        requests = [(photo_at(names[i % len(names)], 320 + 8 * (i % 16), 240 + 8 * (i // 16 % 8)),
                     f"photo number {i} of a table") for i in range(256)]
        counter = [0]
        stop = time.monotonic() + seconds
        done, errors = [0], [0]
        lock = threading.Lock()

        def worker() -> None:
            while time.monotonic() < stop:
                with lock:
                    image, text = requests[counter[0] % len(requests)]
                    counter[0] += 1
                try:
                    with MultimodalClient(url, model_name="multimodal", timeout_s=300) as c:
                        c.infer(images=[image], text=text)
                    with lock:
                        done[0] += 1
                except Exception:  # noqa: BLE001 - counted and printed
                    with lock:
                        errors[0] += 1

        started = time.monotonic()
        threads = [threading.Thread(target=worker) for _ in range(concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return done[0] / (time.monotonic() - started), errors[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=4, help="closed-loop workers of the throughput runs")
    ap.add_argument("--load-s", type=float, default=30.0, help="seconds of each throughput run")
    ap.add_argument("--services", type=int, default=100, help="InferenceServices for the operator's RSS")
    ap.add_argument("--idle-s", type=float, default=30.0, help="seconds idle before each RSS reading")
    args = ap.parse_args()
    rng = random.Random(0)
    with tempfile.TemporaryDirectory(prefix="bench-real-node-") as tmp:
        cluster = LocalCluster(Path(tmp) / "cluster")
        try:
            cluster.up(nodes=args.services // 8 + 2, real_node=True)  # a KWOK GPU for each service
            api = cluster.api_client()
            install_crds(api, REPO / "crds")
            (image,) = build_images(["runtime-cpu"])
            imported_s = import_into_cluster(image, cluster.workdir)
            print(f"image {image.full_ref}: {'cached' if image.cached else f'built in {image.build_s:.0f} s'}, "
                  f"import {imported_s:.1f} s; {load()}; shared machine (other helpers' work runs beside this)")
            b = Bench(api)
            b.core.create_namespace({"metadata": {"name": NS}})
            op = OperatorProcess(cluster.kubeconfig, Path(tmp) / "operator.log",
                                 {"MODALSCALE_STANDALONE": "true"}, resync_s=5.0)
            try:
                op.wait_healthy()
                time.sleep(args.idle_s)
                idle_mb = rss_mb(op.proc.pid)
                b.custom.create_namespaced_custom_object("modalscale.io", "v1alpha1", NS, "inferenceservices",
                                                         real_isvc(image.ref))
                started = time.monotonic()
                wait_for(lambda: b.settled(1), 900, "the first replica Ready")
                print(f"first replica Ready {time.monotonic() - started:.1f} s after the InferenceService was created")
                url = f"{b.core.read_namespaced_service(NAME, NS).spec.cluster_ip}:8000"

                print(f"\n1. scale-up decision -> new replica Ready (image cached), {args.rounds} rounds; {load()}")
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

                print(f"\n2. throughput through the Service, closed loop x{args.concurrency}, {args.load_s:.0f} s "
                      f"each, 1 image ~320x240 + text per request, no two alike; {load()}")
                tput: dict[str, list[float]] = {}
                ratios: dict[str, list[float]] = {}
                for _ in range(args.rounds):
                    order = [1, 2, 3]
                    rng.shuffle(order)
                    got: dict[str, float] = {}
                    for label, n in [(f"{n} replica(s)", n) for n in order] + [("1 replica (A/A)", 1)]:
                        b.scale(n)
                        wait_for(lambda n=n: b.settled(n), 600, f"{n} replicas")
                        rps, errs = b.closed_loop(url, args.concurrency, args.load_s)
                        got[label] = rps
                        tput.setdefault(label, []).append(rps)
                        if errs:
                            print(f"  {label}: {errs} failed requests")
                    for label, rps in got.items():
                        ratios.setdefault(label, []).append(rps / got["1 replica(s)"])
                for label in ["1 replica(s)", "2 replica(s)", "3 replica(s)", "1 replica (A/A)"]:
                    print(f"  {label:16s} req/s {spread(tput[label])}  ratio to 1 replica {spread(ratios[label])}")
                print(f"  per replica (500m): req/s {spread([v for v in tput['1 replica(s)']])}; {load()}")

                print(f"\n3. operator RSS (subprocess `modalscale operator`, not the Helm pod); {load()}")
                b.scale(1)
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
                wait_for(all_ready, 900, f"{args.services} services Ready")
                print(f"  {args.services} KWOK services Ready in {time.monotonic() - started:.0f} s")
                time.sleep(args.idle_s)
                print(f"  RSS idle (no service): {idle_mb:.0f} MB; with 1 real + {args.services} services, "
                      f"{args.idle_s:.0f} s after all Ready: {rss_mb(op.proc.pid):.0f} MB; {load()}")
            finally:
                op.stop()
        finally:
            cluster.down()


if __name__ == "__main__":
    main()
