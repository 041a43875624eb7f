"""Benchmark (not a test): goodput of the staged layout against the one-piece layout at equal CPU on the real node.

Issue 24's first figure: on an image-heavy load, goodput within the p95 SLO of a staged InferenceService (a front pool
of text encoder + fusion calling its image-encoder pool, ``spec.stages.imageEncoder``) against the one-piece layout
at equal CPU quota, side by side in one run, with an A/A row.

What runs, on the local cluster's real kubelet node (the CPU runtime image, the operator as a subprocess, Fixed mode,
the embedding cache off so every image is encoded):

- ``one``: the one-piece layout, 2 replicas of ``--cpu`` each (CFS quota = request);
- ``st``: the staged layout, 1 front replica of ``--front-cpu`` + 1 image-encoder replica of ``--encoder-cpu``
  (``--front-cpu`` + ``--encoder-cpu`` = 2 x ``--cpu``: equal CPU quota, checked).

This process sends each request straight to a Ready pod (KServe v2 gRPC, port 8001) of the layout under test: for
``one`` the replica with the fewest requests in flight, ties at random (per-request least-outstanding, the rule of
the product's gateway, so kube-proxy's per-connection placement adds no noise to either row), for ``st`` its front
pod, which calls its pool at the pool Service's ClusterIP. The gateway is off for both services.

Requests (built before the clock; every image's bytes distinct): images per request from ServeGen's production
image-count PMF (``--image-count-pmf``: ``servegen_mm_image_aggregate_pmf.csv``, Qwen-VL traffic, 99.4 % of requests
carry images, mean ~1.6) up to ``--max-images``, each image one of the photos shipped with scikit-image resized to a
COCO val2017 size (``--images``: ``coco_val2017_image_sizes.csv``) and JPEG-encoded; text of a length drawn from the
same PMF file's ``text_tokens`` (clipped to 256 tokens, MiniLM's window, with at least 3). Both layouts get the same
requests at the same offered times at each point.

Steps: warm-up of both layouts; each layout's capacity from a closed loop of ``--senders`` senders for ``--capacity-s``
s; then ``--rounds`` rounds of open-loop Poisson points at offered rates ``--fractions`` x the one-piece capacity,
rates ascending, rows in an order shuffled per point: ``one`` (A), ``st`` and ``one`` again (A', the A/A row). A point
sheds (stops sending) when more than ``--max-backlog`` requests are in flight, and then fails the SLO.

The p95 SLO is A's p95 at 70 % of A's capacity (interpolated, as ``runtime_open_loop``'s p99 SLO; median over rounds).
Headline per row and round: the highest offered rate whose p95 is within the SLO with every lower rate within it too
(``sweep.headline_rps``); its ratio to A's in the same round, median [min-max] over rounds; A'/A is the noise. Each
point also prints goodput (answers within the SLO per second of the point), p95, each pod's CPU against its quota and
the machine's busy cores.

Usage: .venv/bin/python benchmarks/staged_goodput.py --images ../shared/data/coco_val2017_image_sizes.csv \\
       --image-count-pmf ../shared/data/servegen_mm_image_aggregate_pmf.csv [--cpu 350m] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import importlib.util
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from kubernetes import client

from modalscale.autoscaler.traces import servegen_aggregate_pmf
from modalscale.devenv.cluster import LocalCluster
from modalscale.devenv.images import build_images, import_into_cluster
from modalscale.devenv.kube import install_crds, wait_for
from modalscale.devenv.operator_process import OperatorProcess
from modalscale.devenv.realnode import real_node_placement
from modalscale.runtime.client import AsyncMultimodalClient, InferenceError
from modalscale.runtime.sweep import headline_rps, poisson_arrivals_s
from modalscale.runtime.workload import photo_at, photo_names, text_of_tokens

_spec = importlib.util.spec_from_file_location("real_node", Path(__file__).with_name("real_node.py"))
assert _spec is not None and _spec.loader is not None
real_node = importlib.util.module_from_spec(_spec)
sys.modules["real_node"] = real_node
_spec.loader.exec_module(real_node)

REPO = Path(__file__).resolve().parents[1]
NS = "staged-bench"
EXAMPLE = yaml.safe_load((REPO / "crds" / "examples" / "inferenceservice-real-node.yaml").read_text())
MODEL = EXAMPLE["spec"]["model"]["name"]
MAX_TEXT_TOKENS = 256
Request = tuple[list[bytes] | None, str | None]


def millicores(q: str) -> int:
    return int(q[:-1]) if q.endswith("m") else int(float(q) * 1000)


def service(name: str, cpu: str, replicas: int, stages: tuple[str, str] | None) -> dict[str, Any]:
    """The InferenceService ``name`` of the CPU runtime on the real node in Fixed mode, gateway off, embedding cache
    off; ``stages``: (front cpu, encoder cpu) of a staged one with 1 replica each."""
    body = yaml.safe_load(yaml.safe_dump(EXAMPLE))
    body["metadata"] = {"name": name}
    body["spec"]["resources"]["cpu"] = stages[0] if stages else cpu
    body["spec"]["runtime"]["embeddingCache"] = False
    body["spec"]["placement"] = real_node_placement()
    body["spec"]["scaling"] = {"mode": "Fixed", "replicas": replicas, "minReplicas": 1, "maxReplicas": replicas}
    body["spec"]["gateway"] = {"enabled": False}
    if stages:
        body["spec"]["stages"] = {"imageEncoder": {"minReplicas": 1, "maxReplicas": 1, "resources": {
            "cpu": stages[1], "memory": body["spec"]["resources"]["memory"]}}}
    return body


class Workload:
    """Requests drawn from ServeGen's image-count and text-token PMFs with COCO image sizes (module docstring)."""

    def __init__(self, sizes_path: Path, pmf_path: Path, max_images: int) -> None:
        with sizes_path.open() as fh:
            self.sizes = [(int(r["width"]), int(r["height"])) for r in csv.DictReader(fh)]
        self.counts, self.count_p = servegen_aggregate_pmf(pmf_path, "image_count")
        self.tokens, self.token_p = servegen_aggregate_pmf(pmf_path, "text_tokens")
        self.max_images = max_images
        self.photos = photo_names()
        self.serial = 0

    def requests(self, n: int, seed: int) -> list[Request]:
        rng = np.random.default_rng(seed)
        out: list[Request] = []
        for _ in range(n):
            k = min(int(rng.choice(self.counts, p=self.count_p)), self.max_images)
            images = []
            for _ in range(k):
                w, h = self.sizes[int(rng.integers(len(self.sizes)))]
                # A distinct size per image of the whole run (a 1-2 px change), so no two images share bytes.
                self.serial += 1
                images.append(photo_at(self.photos[int(rng.integers(len(self.photos)))],
                                       max(32, w - self.serial % 2), max(32, h - (self.serial // 2) % 2)))
            tokens = int(min(MAX_TEXT_TOKENS, max(3, rng.choice(self.tokens, p=self.token_p))))
            out.append((images or None, text_of_tokens(tokens, seed=int(rng.integers(1 << 30)))))
        return out

    def mean_images(self) -> float:
        return float(np.sum(np.minimum(self.counts, self.max_images) * self.count_p))


class Layout:
    """One service's pods that this process sends to: the replicas (one-piece) or the front (staged)."""

    def __init__(self, name: str, pods: list[Any], meter_pods: list[Any]) -> None:
        self.name = name
        self.targets = [f"{p.status.pod_ip}:8001" for p in pods]
        self.meter_pods = meter_pods  # every pod whose CPU counts for the layout (the staged pool's too)


async def _send(layout: Layout, contents: list[Request], arrivals_s: list[float] | None, senders: int,
                seconds: float, max_backlog: int) -> tuple[list[float], int, int, float]:
    """Open loop (``arrivals_s``) or closed loop (``senders`` for ``seconds``); per-request least outstanding over
    the layout's targets. Returns (latencies ms from the scheduled arrival or the send, errors, shed, wall s)."""
    clients = [AsyncMultimodalClient(t, "grpc", MODEL, timeout_s=600) for t in layout.targets]
    inflight = [0] * len(clients)
    pick = random.Random(len(contents))
    lat: list[float] = []
    errors = [0]

    async def one(i: int, due: float) -> None:
        least = min(inflight)
        k = pick.choice([j for j, x in enumerate(inflight) if x == least])  # ties at random, as the gateway
        inflight[k] += 1
        images, text = contents[i % len(contents)]
        try:
            await clients[k].infer(images=images, text=text)
            lat.append(1000 * (time.perf_counter() - due))
        except InferenceError:
            errors[0] += 1
        finally:
            inflight[k] -= 1

    start = time.perf_counter()
    shed = 0
    try:
        if arrivals_s is not None:
            tasks = []
            for i, at in enumerate(arrivals_s):
                delay = start + at - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                if sum(inflight) >= max_backlog:
                    shed = len(arrivals_s) - i
                    break
                tasks.append(asyncio.create_task(one(i, start + at)))
            await asyncio.gather(*tasks)
        else:
            counter = [0]
            stop = start + seconds

            async def sender() -> None:
                while time.perf_counter() < stop:
                    i = counter[0]
                    counter[0] += 1
                    await one(i, time.perf_counter())

            await asyncio.gather(*(sender() for _ in range(senders)))
    finally:
        for c in clients:
            with contextlib.suppress(Exception):
                await c.close()
    return lat, errors[0], shed, time.perf_counter() - start


def run(layout: Layout, contents: list[Request], arrivals_s: list[float] | None = None, senders: int = 0,
        seconds: float = 0.0, max_backlog: int = 64) -> dict[str, Any]:
    meter = real_node.CpuMeter(layout.meter_pods)
    with meter:
        lat, errors, shed, wall = asyncio.run(_send(layout, contents, arrivals_s, senders, seconds, max_backlog))
    return {"lat": lat, "errors": errors, "shed": shed, "wall": wall, "cpu": meter.line(len(lat)),
            "p95": float(np.percentile(lat, 95)) if lat and not shed else float("nan")}


def interpolate(points: list[tuple[float, float]], at: float) -> float:
    pts = sorted(points)
    for (r0, p0), (r1, p1) in zip(pts, pts[1:], strict=False):
        if r0 <= at <= r1:
            return p0 if r1 == r0 else p0 + (p1 - p0) * (at - r0) / (r1 - r0)
    raise SystemExit(f"A was not measured around {at:.2f} req/s (rates {[r for r, _ in pts]}): widen --fractions")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=Path, required=True, help="COCO val2017 image-size table (csv)")
    ap.add_argument("--image-count-pmf", type=Path, required=True, help="ServeGen aggregate PMF (csv)")
    ap.add_argument("--cpu", default="350m", help="CPU of each one-piece replica (2 of them)")
    ap.add_argument("--front-cpu", default="", help="CPU of the staged front replica (default --cpu)")
    ap.add_argument("--encoder-cpu", default="", help="CPU of the staged image-encoder replica (default --cpu)")
    ap.add_argument("--max-images", type=int, default=8)
    ap.add_argument("--senders", type=int, default=8, help="closed-loop senders of the capacity runs")
    ap.add_argument("--capacity-s", type=float, default=30.0)
    ap.add_argument("--point-s", type=float, default=30.0, help="seconds of offered load per point")
    ap.add_argument("--fractions", default="0.4,0.6,0.8,1.0", help="offered rates as fractions of A's capacity")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-backlog", type=int, default=64)
    ap.add_argument("--cpu-shares", type=int, default=32768, help="CPU weight of the pods and this process (0: off)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    front_cpu, encoder_cpu = args.front_cpu or args.cpu, args.encoder_cpu or args.cpu
    if millicores(front_cpu) + millicores(encoder_cpu) != 2 * millicores(args.cpu):
        ap.error(f"--front-cpu + --encoder-cpu must equal 2 x --cpu (equal CPU quota), got {front_cpu} + "
                 f"{encoder_cpu} against 2 x {args.cpu}")
    fractions = sorted(float(x) for x in args.fractions.split(","))
    workload = Workload(args.images, args.image_count_pmf, args.max_images)
    rng = random.Random(args.seed)
    print(f"staged vs one-piece at equal CPU: one = 2 x {args.cpu}; st = front {front_cpu} + image-encoder "
          f"{encoder_cpu}; ServeGen image mix (mean {workload.mean_images():.2f} images a request, at most "
          f"{args.max_images}); {real_node.load()}")
    with tempfile.TemporaryDirectory(prefix="bench-staged-") as tmp_name:
        tmp = Path(tmp_name)
        cluster = LocalCluster(tmp / "cluster")
        try:
            cluster.up(nodes=0, real_node=True)
            api = cluster.api_client()
            install_crds(api, REPO / "crds")
            (image,) = build_images(["runtime-cpu"])
            print(f"image {image.full_ref}: {'cached' if image.cached else 'built'}, import "
                  f"{import_into_cluster(image, cluster.workdir):.1f} s")
            core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
            core.create_namespace({"metadata": {"name": NS}})
            op = OperatorProcess(cluster.kubeconfig, tmp / "operator.log", {"MODALSCALE_STANDALONE": "true"},
                                 resync_s=5.0)
            try:
                op.wait_healthy()
                for body in (service("one", args.cpu, 2, None), service("st", args.cpu, 1, (front_cpu, encoder_cpu))):
                    custom.create_namespaced_custom_object("modalscale.io", "v1alpha1", NS, "inferenceservices", body)

                def ready(selector: str) -> list[Any]:
                    return [p for p in core.list_namespaced_pod(NS, label_selector=selector).items
                            if p.metadata.deletion_timestamp is None and any(
                                c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]

                started = time.monotonic()
                wait_for(lambda: len(ready("modalscale.io/inferenceservice=one")) == 2
                         and len(ready("modalscale.io/inferenceservice=st")) == 1
                         and len(ready("modalscale.io/image-encoder=st")) == 1, 900, "all pods Ready", interval_s=1)
                print(f"4 pods Ready in {time.monotonic() - started:.0f} s")
                one_pods = ready("modalscale.io/inferenceservice=one")
                front, pool = ready("modalscale.io/inferenceservice=st"), ready("modalscale.io/image-encoder=st")
                layouts = {"A": Layout("one", one_pods, one_pods), "st": Layout("st", front, front + pool),
                           "A'": Layout("one", one_pods, one_pods)}
                priority = real_node.CpuPriority(args.cpu_shares) if args.cpu_shares else contextlib.nullcontext()
                with priority:
                    measure(args, workload, layouts, fractions, rng)
            finally:
                op.stop()
        finally:
            cluster.down()


def measure(args: argparse.Namespace, workload: Workload, layouts: dict[str, Layout], fractions: list[float],
            rng: random.Random) -> None:
    warm = workload.requests(24, seed=10_000 + args.seed)
    for row in ("A", "st"):
        r = run(layouts[row], warm, senders=4, seconds=20)
        print(f"warm-up {row}: {len(r['lat'])} answered, {r['errors']} errors")
    capacity: dict[str, float] = {}
    cap_requests = workload.requests(max(64, int(args.capacity_s * 8)), seed=20_000 + args.seed)
    for row in ("A", "st"):
        r = run(layouts[row], cap_requests, senders=args.senders, seconds=args.capacity_s)
        capacity[row] = len(r["lat"]) / r["wall"]
        print(f"capacity {row}: {capacity[row]:.2f} req/s ({len(r['lat'])} answered, {r['errors']} errors, closed "
              f"loop of {args.senders}); {r['cpu']}")
    rates = [f * capacity["A"] for f in fractions]
    points: dict[str, dict[int, list[tuple[float, float]]]] = {row: {} for row in layouts}
    lats: dict[tuple[str, int, float], list[float]] = {}
    print(f"\nopen-loop points, {args.point_s:.0f} s each, rates {', '.join(f'{x:.2f}' for x in rates)} req/s; "
          f"{real_node.load()}")
    for rnd in range(args.rounds):
        for k, rate in enumerate(rates):
            n = max(10, int(rate * args.point_s))
            seed = 1000 * rnd + k + 100 * args.seed
            contents = workload.requests(n, seed=seed)
            arrivals = [float(a) for a in poisson_arrivals_s(rate, n, seed=seed)]
            order = list(layouts)
            rng.shuffle(order)
            for row in order:
                r = run(layouts[row], contents, arrivals_s=arrivals, max_backlog=args.max_backlog)
                points[row].setdefault(rnd, []).append((rate, r["p95"]))
                lats[(row, rnd, rate)] = r["lat"]
                print(f"  round {rnd} {rate:.2f} req/s {row:>2}: answered {len(r['lat'])}/{n}, errors {r['errors']}, "
                      f"shed {r['shed']}, p95 {r['p95']:.0f} ms, achieved {len(r['lat']) / r['wall']:.2f} req/s; "
                      f"{r['cpu']}")
    slo = statistics.median(interpolate(points["A"][rnd], 0.7 * capacity["A"]) for rnd in points["A"])
    print(f"\np95 SLO = A's p95 at 70 % of A's capacity ({0.7 * capacity['A']:.2f} req/s), median over rounds: "
          f"{slo:.0f} ms")
    print("| row | capacity req/s | headline req/s per round | headline / A's, median [min-max] | goodput at each "
          "rate (answers within SLO per s, round 0) |")
    print("|---|---|---|---|---|")
    for row in layouts:
        heads = [headline_rps(points[row][rnd], slo) for rnd in sorted(points[row])]
        base = [headline_rps(points["A"][rnd], slo) for rnd in sorted(points["A"])]
        ratios = [h / b for h, b in zip(heads, base, strict=True) if b > 0]
        good = ", ".join(f"{sum(1 for x in lats[(row, 0, rate)] if x <= slo) / args.point_s:.2f}" for rate, _ in
                         points[row][0])
        cap = capacity.get(row, capacity["A"])
        ratio = real_node.spread(ratios) if row != "A" else "1"
        print(f"| {row} | {cap:.2f} | {', '.join(f'{h:.2f}' for h in heads)} | {ratio} | {good} |")
    print(f"capacity st / A: {capacity['st'] / capacity['A']:.2f}; {real_node.load()}")


if __name__ == "__main__":
    main()
