"""Benchmark (not a test): what this machine gives 1, 2 and 3 CFS-quota-bound replicas of the runtime's pipeline
without Kubernetes, Triton or a request path: the ceiling of issue 19's replica-scaling figure.

Issue 19 asks ``benchmarks/real_node.py`` section 2 for 3 replicas of 250m >= 2.7x one replica's throughput
through the gateway; it measured 2.61x with every replica at its quota (so balancing left none idle) and the
per-answer CPU rising with co-located pods. This runs the same work in bare processes: each one loads the
runtime's encoders (``runtime.model.pipeline.MultimodalPipeline`` with the settings of ``real_node.py``'s
InferenceService: engine torch, FP32, 1 intra-op thread, no embedding cache, no modality-aware batching), moves
itself into a cgroup-v1 ``cpu`` group of its own with the quota of a ``--cpu`` pod (``cpu.cfs_quota_us`` /
``cpu.cfs_period_us``, 25000 / 100000 for 250m: what the kubelet gives a pod's container), and serves requests in
a closed loop (prepare = decode + tokenize, then run, one at a time, as one Triton instance does) for
``--load-s`` s after a ``--warmup-s`` s warm-up; the requests are section 2's (a distinct photograph 288-351 x
216-279 and a short text each, JPEG-encoded before the clock). Rounds of 1, 2 and 3 processes in shuffled order
and a second run of 1 (the A/A row); per round the ratio against that round's single process. Also printed: each
process's CPU from its group's ``cpuacct.usage`` against its quota and its throttled periods (``cpu.stat``), and the
CPU per answer. A ratio below N with every process at its quota is the machine's (two vCPUs shared by N quotas,
caches and memory bandwidth), not a request path's.

Needs root and cgroup v1's ``cpu,cpuacct`` hierarchy (as the real node's kubelet here); the groups are removed
after each run.

Usage: .venv/bin/python benchmarks/cpu_ceiling.py [--rounds 3] [--load-s 20] [--warmup-s 5] [--cpu 250m]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import statistics
import time
from pathlib import Path
from typing import Any

CPU_ROOT = Path("/sys/fs/cgroup/cpu")
ACCT_ROOT = Path("/sys/fs/cgroup/cpuacct")
PERIOD_US = 100_000


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]" if values else "-"


def requests(offset: int, n: int) -> list[tuple[bytes, str]]:
    """``real_node.py`` section 2's requests number ``offset`` .. ``offset + n - 1``."""
    from modalscale.runtime.workload import photo_at, photo_names

    names = photo_names()
    out = []
    for i in range(offset, offset + n):
        out.append((photo_at(names[i % len(names)], 288 + (i // len(names)) % 64, 216 + (i // (64 * len(names))) % 64),
                    f"photo number {i} of a table"))
    return out


def group(name: str) -> tuple[Path, Path]:
    """The ``cpu`` and ``cpuacct`` directories of one group (the same group when the two are co-mounted)."""
    return CPU_ROOT / name, ACCT_ROOT / name


def worker(name: str, quota_us: int, work: list[tuple[bytes, str]], ready: Any, start: Any, seconds: float,
           warmup_s: float, out: Any) -> None:
    """One replica: into its group, load the encoders, warm up, then count answers for ``seconds``."""
    import numpy as np
    import torch

    from modalscale.runtime.model.encoders import MultimodalEncoder
    from modalscale.runtime.model.pipeline import MultimodalPipeline
    from modalscale.runtime.model.settings import ModelSettings

    cpu, acct = group(name)
    for d in {cpu, acct}:
        d.mkdir(exist_ok=True)
        (d / "tasks").write_text(str(os.getpid()))
    (cpu / "cpu.cfs_period_us").write_text(str(PERIOD_US))
    (cpu / "cpu.cfs_quota_us").write_text(str(quota_us))
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    settings = ModelSettings(embedding_cache=False, modality_aware_batching=False)
    encoder = MultimodalEncoder(settings.precision, "cpu", settings.preload, settings.int8_text, settings.image_bf16,
                                settings.engine, settings.intra_op_threads, settings.image_int8_min_side_pixels)
    pipeline = MultimodalPipeline(settings, encoder)
    pipeline.warm_up(settings.preload)

    def one(i: int) -> None:
        image, text = work[i % len(work)]
        prepared = pipeline.prepare(np.array([image], dtype=object), np.array([text.encode()], dtype=object))
        pipeline.run([prepared])

    i = 0
    end = time.monotonic() + warmup_s
    while time.monotonic() < end:
        one(i)
        i += 1
    ready.wait()
    start.wait()
    usage0 = int((acct / "cpuacct.usage").read_text())
    stat0 = dict(line.split() for line in (cpu / "cpu.stat").read_text().splitlines())
    t0 = time.monotonic()
    done = 0
    while time.monotonic() - t0 < seconds:
        one(i)
        i += 1
        done += 1
    elapsed = time.monotonic() - t0
    usage = (int((acct / "cpuacct.usage").read_text()) - usage0) / 1e9
    stat = dict(line.split() for line in (cpu / "cpu.stat").read_text().splitlines())
    periods = int(stat["nr_periods"]) - int(stat0["nr_periods"])
    throttled = int(stat["nr_throttled"]) - int(stat0["nr_throttled"])
    out.put((name, done, elapsed, usage, throttled / max(periods, 1)))


def run(n: int, quota_us: int, seconds: float, warmup_s: float, rnd: int) -> dict[str, Any]:
    """``n`` replicas side by side: answers/s in all, and per process CPU / quota, throttled share, ms per answer."""
    ctx = mp.get_context("spawn")
    ready, start, out = ctx.Barrier(n + 1), ctx.Barrier(n + 1), ctx.Queue()
    names = [f"modalscale-ceiling-{os.getpid()}-{rnd}-{n}-{k}" for k in range(n)]
    procs = [ctx.Process(target=worker, args=(name, quota_us, requests(10_000 * k, 400), ready, start, seconds,
                                              warmup_s, out)) for k, name in enumerate(names)]
    for p in procs:
        p.start()
    try:
        ready.wait(timeout=600)
        start.wait(timeout=60)
        rows = [out.get(timeout=seconds + 120) for _ in procs]
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
        for name in names:
            for d in set(group(name)):
                if d.exists():
                    d.rmdir()
    rps = sum(done / elapsed for _, done, elapsed, _, _ in rows)
    cores = [usage / elapsed for _, _, elapsed, usage, _ in rows]
    return {"rps": rps, "quota_use": [c / (quota_us / PERIOD_US) for c in cores],
            "throttled": [t for *_, t in rows],
            "cpu_ms_per_answer": 1000 * sum(u for *_, u, _ in rows) / max(1, sum(d for _, d, *_ in rows))}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--load-s", type=float, default=20.0)
    ap.add_argument("--warmup-s", type=float, default=5.0)
    ap.add_argument("--cpu", default="250m", help="each process's quota, as a pod's CPU limit (250m, 0.5, 1)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if not (CPU_ROOT / "cpu.cfs_quota_us").exists() or os.geteuid() != 0:
        raise SystemExit(f"needs root and cgroup v1's cpu hierarchy at {CPU_ROOT}")
    cores = float(args.cpu[:-1]) / 1000 if args.cpu.endswith("m") else float(args.cpu)
    quota_us = round(cores * PERIOD_US)
    rng = random.Random(args.seed)
    print(f"replicas of {args.cpu} (cfs quota {quota_us} / {PERIOD_US} us) as bare processes, closed loop, "
          f"{args.load_s:g} s each after {args.warmup_s:g} s; {os.cpu_count()} CPUs; load "
          + " ".join(f"{x:.1f}" for x in os.getloadavg()))
    labels = ["1", "2", "3", "1 (A/A)"]
    tput: dict[str, list[float]] = {k: [] for k in labels}
    ratio: dict[str, list[float]] = {k: [] for k in labels[1:]}
    use: dict[str, list[float]] = {k: [] for k in labels}
    thr: dict[str, list[float]] = {k: [] for k in labels}
    per: dict[str, list[float]] = {k: [] for k in labels}
    for rnd in range(args.rounds):
        order = [1, 2, 3]
        rng.shuffle(order)
        got = {}
        for label, n in [(str(n), n) for n in order] + [("1 (A/A)", 1)]:
            r = run(n, quota_us, args.load_s, args.warmup_s, rnd)
            got[label] = r["rps"]
            tput[label].append(r["rps"])
            use[label].extend(r["quota_use"])
            thr[label].extend(r["throttled"])
            per[label].append(r["cpu_ms_per_answer"])
            print(f"  round {rnd + 1}, {label} process(es): {r['rps']:.2f} answers/s; CPU / quota "
                  f"{', '.join(f'{x:.2f}' for x in r['quota_use'])}; throttled "
                  f"{', '.join(f'{x:.0%}' for x in r['throttled'])}; {r['cpu_ms_per_answer']:.1f} ms CPU per answer; "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
        for label in labels[1:]:
            ratio[label].append(got[label] / got["1"])
    print(f"\n{args.rounds} rounds, median [min-max]:")
    for label in labels:
        print(f"  {label:<8} process(es): {spread(tput[label])} answers/s"
              + (f", {spread(ratio[label])}x one" if label in ratio else "")
              + f"; CPU / quota {spread(use[label])}; throttled {spread(thr[label])}; CPU per answer "
              f"{spread(per[label])} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
