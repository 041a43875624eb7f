"""Open-loop rate sweep of the runtime's variants, with the issue-13 headline (not a test).

Per variant, Poisson arrivals at offered rates that are fractions of naive's capacity (capacity = usable cores /
naive's server CPU-s per request, measured first with a closed loop, or given with ``--naive-capacity-rps``); each
request is the mixed workload of ``benchmarks/runtime_capacity.py`` (text, image-only JPEG and PNG from 224x224 to
1600x1200, several images, image + text; every image's bytes distinct, so no cache hits). Latency counts from each
request's scheduled arrival (a late client counts against the server too, as in ``modalscale load``).

Printed per (variant, offered rate): achieved rate, errors, p50 and p99 per modality and overall, each with n and a
95 % percentile-bootstrap interval (a ``*`` marks a p99 from fewer than 2,000 latencies: indicative only), Triton's
own mean queue and compute time per request (``nv_inference_queue_duration_us`` / ``compute_infer``; with the router
the modality models' are shown), and server CPU-ms per request from ``/proc``. The SLO is naive's overall p99 at 70 %
of its capacity (interpolated between measured rates); each variant's headline is the highest offered rate whose p99
stays within it (all lower rates too), as a ratio to naive's. Variants run alternately at each rate, rates ascending.
A point stops sending when more than ``--max-backlog`` requests are in flight (the server is past saturation); the
requests not sent are counted as shed and the point fails the SLO.

The machine this runs on is shared: the load average and steal are printed before and after, and the capacity used
for the rates is a CPU figure, so rates near 1.0 may already saturate a machine whose other jobs take CPU.

Usage: ``python benchmarks/runtime_open_loop.py [--variants naive,fastest] [--fractions 0.3,0.5,0.7,0.9,1.1,1.3]
[--requests 2000] [--naive-capacity-rps R]``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from modalscale.runtime import proctree
from modalscale.runtime.client import AsyncMultimodalClient, InferenceError, Protocol, scrape_metrics
from modalscale.runtime.cores import available_cores
from modalscale.runtime.repo_config import PRESETS, Engine, Precision, config_flags
from modalscale.runtime.server import TritonProcess, free_port, write_repository
from modalscale.runtime.sweep import (
    MIN_REQUESTS_FOR_P99,
    headline_rps,
    load_points,
    percentile_ci,
    poisson_arrivals_s,
    quantile_ratio_ci,
    slo_ms,
)

_spec = importlib.util.spec_from_file_location("runtime_capacity", Path(__file__).with_name("runtime_capacity.py"))
assert _spec is not None and _spec.loader is not None
capacity = importlib.util.module_from_spec(_spec)
sys.modules["runtime_capacity"] = capacity
_spec.loader.exec_module(capacity)

MODALITIES = ("text", "image", "image_text")



def print_machine_after(jiffies0: dict[str, int]) -> None:
    """The run's closing machine line: load average now and the CPU steal since ``jiffies0``
    (``proctree.cpu_jiffies()`` taken before the run)."""
    load1, jiffies1 = proctree.loadavg(), proctree.cpu_jiffies()
    print(f"after: load average {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}; steal "
          f"{100 * proctree.steal_fraction(jiffies0, jiffies1):.2f} % (machine shared with other jobs)")


def warm_up(server: TritonProcess, names: list[str], specs: list["capacity.RequestSpec"]) -> None:
    """Send the capacity workload twice to each variant (distinct bytes each time, so no cache hits) before anything
    is measured: the first pass of each input shape allocates and picks kernels in each instance (as in
    ``runtime_capacity``)."""
    for name in names:
        for warm in (-3, -4):
            capacity.measure(server, name, name, warm, specs, concurrency=4)


def serve_variants(names: list[str], table: dict[str, "capacity.Variant"], prefix: str) -> tuple[TritonProcess, Path]:
    """One tritonserver (started, ready) serving each variant of ``names`` as its own model, and the fresh temp folder
    (named ``prefix…``) holding its model repository; the caller stops the server and removes the folder."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    repo = work / "repo"
    for name in names:
        write_repository(capacity.repository_files(table[name]), repo)
    server = TritonProcess(repo, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                           exit_timeout_s=5, temp_paths=[work])
    server.start(ready_timeout_s=900)
    return server, work

def extra_variants() -> dict[str, "capacity.Variant"]:
    """The variants of the p99-at-load comparison (issue 13's "plain dynamic batching of the same engine"), kept here,
    not as public presets; all engine openvino INT8 without the embedding cache (every request's bytes are distinct
    anyway):

    * ``ov_dynamic``: plain dynamic batching: one model, Triton ``dynamic_batching`` (max batch 8, the CRD default,
      queue delay 2 ms), no modality queues, 2 instances x 1 thread like ``fastest``;
    * ``ov_modality``: the modality-aware layout (router in front of image / text / image+text batched models), the
      ``default`` preset with the engine of ``fastest``;
    * ``fastest_no_cache`` (from ``runtime_capacity.py``): ``fastest``'s layout, every request alone.
    """
    fastest = PRESETS["fastest"]
    return {
        "ov_dynamic": capacity.Variant("ov_dynamic", fastest.replace(
            max_batch_size=8, dynamic_batching=True, max_queue_delay_microseconds=2000, embedding_cache=False)),
        "ov_modality": capacity.Variant("ov_modality", PRESETS["default"].replace(
            cpu_cores=available_cores(), engine=Engine.OPENVINO, precision=Precision.INT8, embedding_cache=False,
            image_int8_min_side_pixels=fastest.image_int8_min_side_pixels)),
    }


async def open_loop(url: str, model: str, contents: list[tuple[list[bytes] | None, str | None]],
                    arrivals_s: list[float], max_backlog: int, protocol: Protocol = "grpc"
                    ) -> tuple[list[tuple[int, float]], int, int, float]:
    """Send request i at ``arrivals_s[i]`` whatever is in flight; returns ``([(index, latency_ms)], errors, shed,
    wall_s)`` with latency from the scheduled arrival."""
    client = AsyncMultimodalClient(url, protocol, model, timeout_s=600)
    done: list[tuple[int, float]] = []
    errors = 0
    inflight = 0
    tasks: list[asyncio.Task[None]] = []

    async def one(i: int, due: float) -> None:
        nonlocal errors, inflight
        images, text = contents[i]
        try:
            await client.infer(images=images, text=text)
            done.append((i, 1000 * (time.perf_counter() - due)))
        except InferenceError:
            errors += 1
        finally:
            inflight -= 1

    start = time.perf_counter()
    shed = 0
    try:
        for i, at in enumerate(arrivals_s):
            delay = start + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            if inflight >= max_backlog:
                shed = len(arrivals_s) - i
                break
            inflight += 1
            tasks.append(asyncio.create_task(one(i, start + at)))
        await asyncio.gather(*tasks)
    finally:
        await client.close()
    return done, errors, shed, time.perf_counter() - start


def triton_times(metrics: dict[str, float], models: list[str]) -> tuple[float, float, float]:
    """Sum over ``models`` of (success count, queue us, compute-infer us) from Triton's counters."""
    ok = queue = compute = 0.0
    for m in models:
        ok += metrics.get(f'nv_inference_request_success{{model="{m}",version="1"}}', 0.0)
        queue += metrics.get(f'nv_inference_queue_duration_us{{model="{m}",version="1"}}', 0.0)
        compute += metrics.get(f'nv_inference_compute_infer_duration_us{{model="{m}",version="1"}}', 0.0)
    return ok, queue, compute


def run_point(server: TritonProcess, table: dict[str, "capacity.Variant"], name: str, rate: float, seed: int,
              requests: int, max_backlog: int) -> dict[str, object]:
    """One (variant, offered rate) point: ``requests`` Poisson arrivals of the mixed workload (workload and arrival
    seeds depend on ``seed`` only, so variants given the same seed see the same requests at the same times)."""
    assert server.pid is not None
    specs = capacity.workload(requests, seed=seed + 100)
    contents = [capacity.encode(s, f"ol:{seed}:{name}:{i}") for i, s in enumerate(specs)]
    arrivals = [float(a) for a in poisson_arrivals_s(rate, len(specs), seed=seed)]
    models = [name, f"{name}_image", f"{name}_text", f"{name}_image_text"]
    load_before = proctree.loadavg()[0]
    m0, cpu0 = scrape_metrics(server.metrics_url), capacity._tree_cpu(server.pid)
    done, errors, shed, wall = asyncio.run(open_loop(server.grpc_url, name, contents, arrivals, max_backlog))
    cpu1, m1 = capacity._tree_cpu(server.pid), scrape_metrics(server.metrics_url)
    inner = models[1:] if table[name].config.uses_router else models[:1]
    ok0, q0, c0 = triton_times(m0, inner)
    ok1, q1, c1 = triton_times(m1, inner)
    n_ok = max(1.0, ok1 - ok0)
    by_mod: dict[str, list[float]] = {m: [] for m in MODALITIES}
    for i, lat in done:
        by_mod[specs[i].modality].append(lat)
    return {"offered": rate, "achieved": len(done) / wall if wall > 0 else 0.0, "errors": errors,
            "shed": shed, "n": len(done), "queue_ms": (q1 - q0) / 1000 / n_ok, "compute_ms": (c1 - c0) / 1000 / n_ok,
            "server_ms": 1000 * capacity._delta_cpu(cpu0, cpu1) / max(1, len(done)),
            "load_before": load_before, "load_after": proctree.loadavg()[0],
            "all": [lat for _, lat in done], **by_mod}


def p99_at_load(args: argparse.Namespace, table: dict[str, "capacity.Variant"]) -> int:
    """Issue 13's mixed-modality p99 target: ``--p99-baseline`` (plain dynamic batching) against the other
    ``--variants``, each at 70 % of its own capacity and all at 70 % of the baseline's (see ``load_points``)."""
    baseline = args.p99_baseline
    names = [baseline] + [n for n in dict.fromkeys(args.variants.split(",")) if n and n != baseline]
    unknown = [n for n in names if n not in table]
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; known: {sorted(table)}")
    cores = len(os.sched_getaffinity(0))
    print("\n".join(capacity.header(names, table)))
    for name in names:
        extra = " ".join(f"{k}={v}" for k, v in table[name].parameters)
        print(f"  {name}: modalscale runtime serve {' '.join(config_flags(table[name].config))}"
              f"{'; model parameters ' + extra if extra else ''}")
    load0, jiffies0 = proctree.loadavg(), proctree.cpu_jiffies()
    print(f"before: load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} (machine shared with other jobs)")
    server, work = serve_variants(names, table, "bench-p99-")
    rows: list[tuple[str, str, dict[str, object]]] = []  # (variant, point/round, row)
    caps: dict[str, float] = {}
    try:
        warm_up(server, names, capacity.workload(args.capacity_requests, args.seed + 1))
        for name in names:
            w = capacity.measure(server, name, name, -2, capacity.workload(args.capacity_requests, args.seed + 1),
                                 concurrency=4)
            cpu_rps, wall_rps = cores * 1000 / w.server_ms, (w.requests - w.errors) / w.wall_s
            caps[name] = cpu_rps if args.capacity_basis == "cpu" else wall_rps
            print(f"capacity {name:<17} {cores} cores / {w.server_ms:.1f} server CPU-ms per request = {cpu_rps:.1f} "
                  f"req/s; closed loop (concurrency 4, {w.requests} requests) {wall_rps:.1f} req/s; using "
                  f"{args.capacity_basis}: {caps[name]:.1f} req/s, load {proctree.loadavg()[0]:.1f}", flush=True)
        # common points share one seed (same requests, same arrival times); own points another
        plan = load_points(caps, baseline, 0.7)
        for rnd in range(args.rounds):
            for name, rate, label in (plan if rnd % 2 == 0 else plan[::-1]):  # baseline first, then last
                seed = args.seed + 10 * rnd + (0 if "common" in label else 1)
                row = run_point(server, table, name, rate, seed, args.requests, args.max_backlog)
                label = f"{label}/r{rnd}"
                rows.append((name, label, row))
                print(f"  {name:<17} {label:<13} offered {rate:6.1f} req/s: achieved {row['achieved']:6.1f}, n "
                      f"{row['n']}, errors {row['errors']}, shed {row['shed']}, p99 "
                      f"{percentile_ci(row['all'], 99, seed=1)} ms, load {row['load_before']:.1f} -> "  # type: ignore[arg-type]
                      f"{row['load_after']:.1f}", flush=True)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    print_machine_after(jiffies0)
    print("\nlatency ms from scheduled arrival: p50 / p99 [95 % bootstrap interval] (n); * = p99 from < "
          f"{MIN_REQUESTS_FOR_P99} latencies; queue / compute = Triton's mean per request (router: modality models)")
    print(f"{'variant':<17} {'point':<13} {'offered':>7} {'achieved':>8} {'err':>4} {'shed':>5} {'queue':>6} "
          f"{'compute':>7} {'srvCPU':>6} {'load':>9}  " + "  ".join(f"{m + ' p50 / p99 (n)':<34}"
                                                                   for m in (*MODALITIES, "all")))
    for name, label, r in rows:
        cells = [f"{percentile_ci(r[m], 50, seed=2).value_ms:.0f} / {percentile_ci(r[m], 99, seed=3)!s} "  # type: ignore[arg-type]
                 f"({len(r[m])})" for m in (*MODALITIES, "all")]  # type: ignore[arg-type]
        print(f"{name:<17} {label:<13} {r['offered']:7.1f} {r['achieved']:8.1f} {r['errors']:4d} {r['shed']:5d} "
              f"{r['queue_ms']:6.0f} {r['compute_ms']:7.0f} {r['server_ms']:6.0f} "
              f"{r['load_before']:4.1f}-{r['load_after']:<4.1f}  " + "  ".join(f"{c:<34}" for c in cells))
    print(f"\nmixed-modality p99 ratio = {baseline}'s p99 / variant's p99 (> 1: the variant is lower; target >= 2), "
          "95 % bootstrap interval; a point that shed or failed requests has no valid p99")
    for name, label, r in rows:
        if name == baseline:
            continue
        base_row = next(b for n, lab, b in rows if n == baseline and lab.endswith("/" + label.split("/")[1]))
        ratio, low, high = quantile_ratio_ci(base_row["all"], r["all"], 99, seed=4)  # type: ignore[arg-type]
        valid = not (r["shed"] or r["errors"] or base_row["shed"] or base_row["errors"])
        verdict = ("met" if low >= 2 else "not met") if valid else "undefined (shed or errors)"
        if min(r["n"], base_row["n"]) < MIN_REQUESTS_FOR_P99:  # type: ignore[call-overload]
            verdict += f" (indicative only: p99 from < {MIN_REQUESTS_FOR_P99} latencies)"
        reading = ("the issue's reading: same offered load" if label.startswith("common")
                   else "each at 70 % of its own capacity")
        print(f"verdict {name:<17} {label:<10} ({reading}): {ratio:.2f}x [{low:.2f}-{high:.2f}] -> target {verdict}; "
              "per modality " + ", ".join(
                  f"{m} {quantile_ratio_ci(base_row[m], r[m], 99, seed=5)[0]:.2f}x" for m in MODALITIES))  # type: ignore[arg-type]
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="naive,fastest", help="names of benchmarks/runtime_capacity.py")
    parser.add_argument("--fractions", default="0.3,0.5,0.7,0.9,1.1,1.3",
                        help="offered rates as fractions of naive's capacity (0.7 is needed for the SLO)")
    parser.add_argument("--requests", type=int, default=MIN_REQUESTS_FOR_P99, help="requests per (variant, rate)")
    parser.add_argument("--naive-capacity-rps", type=float, default=None,
                        help="skip the closed-loop capacity measurement and use this")
    parser.add_argument("--capacity-requests", type=int, default=96)
    parser.add_argument("--capacity-basis", choices=("cpu", "wall"), default="cpu",
                        help="naive's capacity as cores / server CPU per request (cpu, the issue's definition) or as "
                             "its closed-loop throughput now (wall: what a machine shared with other jobs gives it)")
    parser.add_argument("--max-backlog", type=int, default=256)
    parser.add_argument("--seed", type=int, default=17)
    parser.add_argument("--rounds", type=int, default=1,
                        help="with --p99-baseline: repeat the points, the order reversed every other round (the "
                             "baseline first, then last); verdicts pair each round with its own baseline point")
    parser.add_argument("--p99-baseline", default=None, metavar="VARIANT",
                        help="instead of the sweep: issue 13's p99-at-70%%-load comparison of --variants against this "
                             "one (plain dynamic batching: ov_dynamic), each at 70%% of its own capacity and all at "
                             "70%% of the baseline's")
    args = parser.parse_args()
    table = {**capacity.variants(), **extra_variants()}
    if args.p99_baseline:
        return p99_at_load(args, table)
    names = ["naive"] + [n for n in dict.fromkeys(args.variants.split(",")) if n and n != "naive"]
    unknown = [n for n in names if n not in table]
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {sorted(table)}")
    fractions = sorted(float(f) for f in args.fractions.split(","))
    if 0.7 not in fractions:
        parser.error("--fractions must include 0.7 (the SLO is naive's p99 there)")
    cores = len(os.sched_getaffinity(0))
    print("\n".join(capacity.header(names, table)))
    load0, jiffies0 = proctree.loadavg(), proctree.cpu_jiffies()
    print(f"before: load average {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} (machine shared with other jobs)")

    server, work = serve_variants(names, table, "bench-openloop-")
    results: dict[tuple[str, float], dict[str, object]] = {}
    try:
        assert server.pid is not None
        warm_up(server, names, capacity.workload(args.capacity_requests, args.seed + 1))
        naive_rps = args.naive_capacity_rps
        if naive_rps is None:
            w = capacity.measure(server, "naive", "naive", -2, capacity.workload(args.capacity_requests, args.seed + 1),
                                 concurrency=4)
            cpu_rps, wall_rps = cores * 1000 / w.server_ms, (w.requests - w.errors) / w.wall_s
            naive_rps = cpu_rps if args.capacity_basis == "cpu" else wall_rps
            print(f"naive capacity: {cores} cores / {w.server_ms:.1f} server CPU-ms per request = {cpu_rps:.1f} req/s; "
                  f"closed-loop throughput (concurrency 4, {w.requests} requests) {wall_rps:.1f} req/s; "
                  "the rates below "
                  f"use the {args.capacity_basis} figure, {naive_rps:.1f} req/s")
        else:
            print(f"naive capacity (given): {naive_rps:.1f} req/s")
        for k, fraction in enumerate(fractions):
            rate = fraction * naive_rps
            order = names if k % 2 == 0 else names[::-1]
            for name in order:
                specs = capacity.workload(args.requests, seed=args.seed + 100 + k)
                contents = [capacity.encode(s, f"ol:{k}:{name}:{i}") for i, s in enumerate(specs)]
                arrivals = [float(a) for a in poisson_arrivals_s(rate, len(specs), seed=args.seed + k)]
                models = [name, f"{name}_image", f"{name}_text", f"{name}_image_text"]
                m0, cpu0 = scrape_metrics(server.metrics_url), capacity._tree_cpu(server.pid)
                done, errors, shed, wall = asyncio.run(open_loop(server.grpc_url, name, contents, arrivals,
                                                                 args.max_backlog))
                cpu1, m1 = capacity._tree_cpu(server.pid), scrape_metrics(server.metrics_url)
                inner = models[1:] if table[name].config.uses_router else models[:1]
                ok0, q0, c0 = triton_times(m0, inner)
                ok1, q1, c1 = triton_times(m1, inner)
                n_ok = max(1.0, ok1 - ok0)
                by_mod: dict[str, list[float]] = {m: [] for m in MODALITIES}
                for i, lat in done:
                    by_mod[specs[i].modality].append(lat)
                row = {"offered": rate, "achieved": len(done) / wall if wall > 0 else 0.0, "errors": errors,
                       "shed": shed, "n": len(done), "queue_ms": (q1 - q0) / 1000 / n_ok,
                       "compute_ms": (c1 - c0) / 1000 / n_ok,
                       "server_ms": 1000 * capacity._delta_cpu(cpu0, cpu1) / max(1, len(done)),
                       "all": [lat for _, lat in done], **by_mod}
                results[(name, fraction)] = row
                p99 = percentile_ci(row["all"], 99, seed=1)  # type: ignore[arg-type]
                print(f"  {name:<10} offered {rate:6.1f} req/s: achieved {row['achieved']:6.1f}, n {len(done)}, "
                      f"errors {errors}, shed {shed}, p99 {p99} ms, load {proctree.loadavg()[0]:.1f}", flush=True)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    print_machine_after(jiffies0)

    print("\nlatency ms from scheduled arrival: value [95 % bootstrap interval], n; * = p99 from < "
          f"{MIN_REQUESTS_FOR_P99} latencies")
    print(f"{'variant':<10} {'offered':>7} {'achieved':>8} {'err':>4} {'shed':>5} {'queue':>6} {'compute':>7} "
          f"{'srvCPU':>6}  " + "  ".join(f"{m + ' p50 / p99 (n)':<34}" for m in (*MODALITIES, "all")))
    for fraction in fractions:
        for name in names:
            r = results[(name, fraction)]
            cells = []
            for m in (*MODALITIES, "all"):
                lat = r[m]
                cells.append(f"{percentile_ci(lat, 50, seed=2)!s:<12} / {percentile_ci(lat, 99, seed=3)!s:<14} "  # type: ignore[arg-type]
                             f"({len(lat)})")  # type: ignore[arg-type]
            print(f"{name:<10} {r['offered']:7.1f} {r['achieved']:8.1f} {r['errors']:4d} {r['shed']:5d} "
                  f"{r['queue_ms']:6.0f} {r['compute_ms']:7.0f} {r['server_ms']:6.0f}  "
                  + "  ".join(f"{c:<34}" for c in cells))

    def points(name: str) -> list[tuple[float, float]]:
        out = []
        for f in fractions:
            r = results[(name, f)]
            p = percentile_ci(r["all"], 99).value_ms if not r["shed"] and not r["errors"] else float("nan")  # type: ignore[arg-type]
            out.append((float(r["offered"]), p))  # type: ignore[arg-type]
        return out

    slo = slo_ms(points("naive"), naive_rps)
    if slo != slo:  # NaN: naive shed requests or failed at 70 % of its capacity
        r70 = results[("naive", 0.7)]
        print(f"\nno SLO: naive did not sustain 70 % of its capacity ({0.7 * naive_rps:.1f} req/s offered, "
              f"{r70['achieved']:.1f} achieved, {r70['shed']} shed, {r70['errors']} errors), so the headline is "
              f"undefined; on a machine shared with other jobs try --capacity-basis wall")
        return 0
    base = headline_rps(points("naive"), slo)
    print(f"\nSLO = naive's overall p99 at 70 % of its capacity ({0.7 * naive_rps:.1f} req/s): {slo:.0f} ms")
    for name in names:
        head = headline_rps(points(name), slo)
        ratio = head / base if base > 0 else float("nan")
        print(f"headline {name:<10} highest offered rate within the SLO: {head:.1f} req/s = {ratio:.2f}x naive's "
              f"{base:.1f} (grid of offered rates: {', '.join(f'{f:g}' for f in fractions)} x naive capacity; the "
              f"ratio's resolution is that grid)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
