"""Embedding-cache hit rate behind the gateway's balancer, 4 replicas against 1 (issue 19, item 5 and its figure).

Issue 19's figure: with 4 replicas the embedding-cache hit rate is >= 85 % of the single-replica hit rate on a
workload with repeated images (a Zipf draw over a public image set), and no replica is above 1.25x the mean load.

What is real and what is modelled:

* the pick is the gateway's own :class:`modalscale.gateway.balancer.Balancer` (consistent hashing with bounded
  loads, the idle-replica-first rule, least outstanding without an image), fed the outstanding counts it would see;
* each replica's Triton instances each hold the runtime's own :class:`modalscale.runtime.model.pipeline.EmbeddingCache`
  (an LRU of ``--cache-entries`` images, the runtime's default 1024), as the Python backend keeps one per instance;
  a replica serves FCFS on ``--instances`` slots and the instance that takes a request looks its images up;
* arrivals are a real trace's timestamps (``--trace``: the Azure LLM 2023 or the Mooncake FAST'25 conversation cut of
  ``../shared/data``), their time axis scaled so that each replica is offered ``--load`` of its no-hit capacity;
* images: a Zipf draw (exponent ``--zipf``, several given = one table row each) over the 5,000 image ids of
  ``--images`` (COCO val2017's list in ``../shared/data``); the number of images per request from ServeGen's
  production PMF (``--image-count-pmf``, field ``image_count``) when given, else 1; the affinity key is the first
  image's, as in the gateway;
* service time per request: the `fastest` preset's measured per-stage wall-ms (docs/benchmarks.md, runtime capacity,
  per-stage table): each image not in the cache costs decode 13.2 + image encoder 17.8 ms, a cached one nothing; the
  text encoder 8.2 ms per request.

Rows per Zipf exponent, side by side on the same draws: ``1 replica``; ``4 replicas``: the gateway's balancer;
``4, ring only``: bounded-load consistent hashing without the idle-first rule; ``4, least outstanding``: no
affinity (a request without a key); ``4, random``: a replica drawn per request (kube-proxy at best; per connection is
worse). Each run takes ``replicas x --requests-per-replica`` requests of the trace (every replica serves as many as
the single one) and counts hits over its second half (every cache warm). Each row over ``--seeds`` seeds (the Zipf
draw and the tie-breaks), mean [min-max]; the A/A row repeats the balancer row with the seeds shifted by 100, so its
spread is the draw noise. Columns: image hit rate, its ratio to
the single replica's, the busiest replica's share of the requests over the mean, mean and p95 latency in ms.

    .venv/bin/python benchmarks/cache_affinity.py --trace ../shared/data/azure_llm_2023_conv_1h.csv \\
        --images ../shared/data/coco_val2017_image_sizes.csv \\
        --image-count-pmf ../shared/data/servegen_mm_image_aggregate_pmf.csv --zipf 0.6 0.8 1.0
"""

from __future__ import annotations

import argparse
import csv
import heapq
import random
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from modalscale.gateway.affinity import choose as affinity_choose
from modalscale.gateway.balancer import Balancer, Endpoint
from modalscale.runtime.model.pipeline import EmbeddingCache

IMAGE_MISS_MS = 13.2 + 17.8
"""Decode + image encoder wall-ms of one image, `fastest` preset (docs/benchmarks.md, per-stage table)."""
TEXT_MS = 8.2
"""Text encoder wall-ms of one request, same table."""


def trace_arrivals_s(path: Path, limit: int) -> np.ndarray:
    """Arrival seconds from the first request, sorted: ``t_rel_s`` (Azure cut) or ``timestamp_ms`` (Mooncake cut)."""
    with path.open() as fh:
        rows = list(csv.DictReader(fh))
    if rows and "t_rel_s" in rows[0]:
        times = [float(r["t_rel_s"]) for r in rows]
    elif rows and "timestamp_ms" in rows[0]:
        times = [float(r["timestamp_ms"]) / 1000.0 for r in rows]
    else:
        raise SystemExit(f"{path}: no t_rel_s or timestamp_ms column")
    out = np.sort(np.array(times[:limit]))
    return out - out[0]


def image_ids(path: Path) -> list[str]:
    with path.open() as fh:
        return [r["image_id"] for r in csv.DictReader(fh)]


def image_count_pmf(path: Path | None) -> tuple[np.ndarray, np.ndarray]:
    """(counts, probabilities) of images per request among requests with images (ServeGen's ``image_count``)."""
    if path is None:
        return np.array([1]), np.array([1.0])
    with path.open() as fh:
        pairs = [(int(float(r["value"])), float(r["prob"])) for r in csv.DictReader(fh)
                 if r["field"] == "image_count" and int(float(r["value"])) > 0]
    counts = np.array([c for c, _ in pairs])
    probs = np.array([p for _, p in pairs])
    return counts, probs / probs.sum()


@dataclass
class Outcome:
    hit_rate: float
    max_share: float
    mean_ms: float
    p95_ms: float


Picker = Callable[[bytes | None, dict[str, int], float], str]


def simulate(arrivals_s: np.ndarray, images: list[list[bytes]], replicas: int, instances: int,
             cache_entries: int, pick: Picker) -> Outcome:
    """One run: FCFS per replica on ``instances`` slots, each slot with its own LRU; returns the figures."""
    names = [f"10.0.0.{i}:8000" for i in range(replicas)]
    caches = {(n, k): EmbeddingCache(cache_entries) for n in names for k in range(instances)}
    free: dict[str, list[int]] = {n: list(range(instances)) for n in names}
    waiting: dict[str, deque[int]] = {n: deque() for n in names}
    outstanding = dict.fromkeys(names, 0)
    served = dict.fromkeys(names, 0)
    done: list[tuple[float, int, str, int]] = []  # (finish s, request, replica, slot)
    latency = np.zeros(len(arrivals_s))
    hits = lookups = 0
    warm = len(arrivals_s) // 2  # hits counted over the second half: every cache warm, whatever the replica count

    def start(i: int, name: str, slot: int, now: float) -> None:
        nonlocal hits, lookups
        cache = caches[(name, slot)]
        ms = TEXT_MS
        for digest in images[i]:
            hit = cache.get(digest) is not None
            if i >= warm:
                lookups += 1
                hits += hit
            if not hit:
                ms += IMAGE_MISS_MS
                cache.put(digest, ())
        heapq.heappush(done, (now + ms / 1000.0, i, name, slot))

    def finish_until(t: float) -> None:
        while done and done[0][0] <= t:
            at, i, name, slot = heapq.heappop(done)
            latency[i] = at - arrivals_s[i]
            outstanding[name] -= 1
            if waiting[name]:
                start(waiting[name].popleft(), name, slot, at)
            else:
                free[name].append(slot)

    for i, t in enumerate(arrivals_s):
        finish_until(t)
        key = images[i][0] if images[i] else None
        name = pick(key, outstanding, t)
        outstanding[name] += 1
        served[name] += 1
        if free[name]:
            start(i, name, free[name].pop(), t)
        else:
            waiting[name].append(i)
    finish_until(float("inf"))
    counts = np.array(list(served.values()), dtype=float)
    return Outcome(hits / max(1, lookups), float(counts.max() / counts.mean()), float(latency.mean() * 1000),
                   float(np.percentile(latency, 95) * 1000))


def balancer_picker(names: Sequence[str], seed: int) -> Picker:
    """The gateway's own pick, with the outstanding counts the simulation keeps."""
    balancer = Balancer(rng=random.Random(seed))
    balancer.update(Endpoint(n.split(":")[0], 8000) for n in names)

    def pick(key: bytes | None, loads: dict[str, int], now_s: float) -> str:
        balancer._outstanding = {k: v for k, v in loads.items() if v}  # the counts the gateway would hold
        chosen = balancer.pick(key, now_s)
        assert chosen is not None
        return chosen.key

    return pick


def ring_picker(seed: int) -> Picker:
    return lambda key, loads, now_s: affinity_choose(key, loads).replica


def least_picker(seed: int) -> Picker:
    rng = random.Random(seed)

    def pick(key: bytes | None, loads: dict[str, int], now_s: float) -> str:
        low = min(loads.values())
        return rng.choice(sorted(k for k, v in loads.items() if v == low))

    return pick


def random_picker(seed: int) -> Picker:
    rng = random.Random(seed)
    return lambda key, loads, now_s: rng.choice(sorted(loads))


def draw_images(n: int, ids: list[str], zipf: float, counts: np.ndarray, probs: np.ndarray,
                seed: int) -> list[list[bytes]]:
    """Per request: its images' digests (Zipf ranks over a seeded shuffle of ``ids``; a count from the PMF)."""
    rng = np.random.default_rng(seed)
    order = list(ids)
    random.Random(seed).shuffle(order)
    weights = 1.0 / np.arange(1, len(order) + 1) ** zipf
    weights /= weights.sum()
    per_request = rng.choice(counts, size=n, p=probs)
    ranks = rng.choice(len(order), size=int(per_request.sum()), p=weights)
    out, k = [], 0
    for c in per_request:
        out.append([f"coco-{order[r]}".encode() for r in ranks[k:k + c]])
        k += c
    return out


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", type=Path, required=True)
    p.add_argument("--images", type=Path, required=True)
    p.add_argument("--image-count-pmf", type=Path)
    p.add_argument("--zipf", type=float, nargs="+", default=[0.8])
    p.add_argument("--requests-per-replica", type=int, default=3000,
                   help="each run takes replicas x this many requests from the trace, so every replica serves as "
                        "many as the single one")
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument("--instances", type=int, default=2)
    p.add_argument("--cache-entries", type=int, default=1024)
    p.add_argument("--load", type=float, default=0.7, help="offered load per replica, of its no-hit capacity")
    p.add_argument("--seeds", type=int, default=3)
    a = p.parse_args(argv)

    base = trace_arrivals_s(a.trace, a.requests_per_replica * a.replicas)
    ids = image_ids(a.images)
    counts, probs = image_count_pmf(a.image_count_pmf)
    miss_ms = TEXT_MS + IMAGE_MISS_MS * float((counts * probs).sum())
    per_replica_rps = a.load * a.instances * 1000.0 / miss_ms
    print(f"trace {a.trace.name}: up to {len(base)} requests over {base[-1]:.0f} s; {len(ids)} images, "
          f"{float((counts * probs).sum()):.2f} per request; no-hit service {miss_ms:.1f} ms; offered "
          f"{per_replica_rps:.1f} req/s per replica ({a.load:.0%} of its no-hit capacity on {a.instances} slots); "
          f"{a.cache_entries} cache entries per instance")
    names = [f"10.0.0.{i}:8000" for i in range(a.replicas)]
    rows: list[tuple[str, Callable[[int], Picker], int, int]] = [
        ("1 replica", lambda s: balancer_picker(names[:1], s), 1, 0),
        (f"{a.replicas} replicas, gateway balancer", lambda s: balancer_picker(names, s), a.replicas, 0),
        (f"{a.replicas}, A/A (seeds + 100)", lambda s: balancer_picker(names, s), a.replicas, 100),
        (f"{a.replicas}, ring only (no idle-first)", ring_picker, a.replicas, 0),
        (f"{a.replicas}, least outstanding", least_picker, a.replicas, 0),
        (f"{a.replicas}, random per request", random_picker, a.replicas, 0),
    ]
    for zipf in a.zipf:
        print(f"\nZipf {zipf}: image hit rate, ratio to 1 replica, busiest replica / mean requests, latency ms "
              f"(mean [min-max] over {a.seeds} seeds)")
        print("| row | hit rate | / 1 replica | max / mean load | mean ms | p95 ms |\n|---|---|---|---|---|---|")
        single: dict[int, float] = {}
        for label, make, n, shift in rows:
            part = base[:a.requests_per_replica * n]
            arrivals = part * (len(part) / part[-1]) / (per_replica_rps * n)  # mean rate = n x per-replica rate
            got = []
            for s in range(a.seeds):
                seed = s + shift
                imgs = draw_images(len(arrivals), ids, zipf, counts, probs, seed)
                got.append((seed, simulate(arrivals, imgs, n, a.instances, a.cache_entries, make(seed))))
            if n == 1:
                single = {seed: o.hit_rate for seed, o in got}
                for s in range(a.seeds):  # the single replica's rate for the A/A row's seeds too
                    seed = s + 100
                    imgs = draw_images(len(arrivals), ids, zipf, counts, probs, seed)
                    single[seed] = simulate(arrivals, imgs, 1, a.instances, a.cache_entries,
                                            make(seed)).hit_rate

            def cell(values: list[float], fmt: str) -> str:
                return f"{np.mean(values):{fmt}} [{min(values):{fmt}}-{max(values):{fmt}}]"

            print(f"| {label} | {cell([o.hit_rate for _, o in got], '.3f')} | "
                  f"{cell([o.hit_rate / single[seed] for seed, o in got], '.2f')} | "
                  f"{cell([o.max_share for _, o in got], '.2f')} | {cell([o.mean_ms for _, o in got], '.1f')} | "
                  f"{cell([o.p95_ms for _, o in got], '.1f')} |")


if __name__ == "__main__":
    main()
