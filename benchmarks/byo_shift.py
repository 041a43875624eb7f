"""How many decisions Predictive takes to follow a modality shift of a user's own model (issue 19's figure: within 2
decisions), against the HPA-like Utilization rule on the same readings, side by side.

What runs (nothing simulated but the replica count): the user's own Python-backend model of
``benchmarks/byo_mape.py`` (its ``spec.model.source: ConfigMap`` form, inputs ``PHOTOS`` / ``PROMPT``; real image
decoding and text work) in one real ``tritonserver``; ``modalscale gateway`` in its own process in front (the
model's input names set), which reads the features from the wire; a real Prometheus scraping the gateway and the
replica with the labels the chart's PodMonitors give them; the operator's own reading code
(``PrometheusReader.read(..., gateway=True)`` -> ``build_observation``) and policy (``recommend``) every
``--interval-s`` seconds (the product's default decision interval, 15 s), with the product's defaults for everything
``--p95-ms`` and ``--target-utilization`` do not set. The service-time model is the product's
``ServiceTimeRegressor`` (``additive``, ``modalscale profile``'s default) fitted on ``--fit-requests`` requests of a
1:1:1 mix measured as ``modalscale profile`` measures them (``byo_mape.Meter``: features from the gateway's series,
service time from Triton's compute statistics).

Only the replica count is virtual: one real replica serves every request, and each policy's decision is taken as
its new count of Ready replicas at once (start-up is not what this measures). The offered load is kept well under
one real replica's capacity, so the readings are not those of a queueing replica; a low ``--target-utilization``
makes that load worth several replicas, so the count has room to move. The scrape targets a virtual replica would add
do not exist: ``targets_expected`` is set to the targets that answered.

Load per round: open-loop Poisson arrivals at ``--rate`` req/s through the gateway (a new connection per request),
``--pre-s`` seconds of ``--mix-before`` (text / image / image_text shares, all COCO sizes), then ``--post-s`` of
``--mix-after`` with only the large half of COCO sizes (ServeGen's image-count and text-token PMFs, real
photographs, as ``byo_mape.Workload`` draws them). Decisions start ``--warm-s`` seconds into the round (so the
60 s window holds only this round's pre-shift traffic; each policy starts at 1 replica with a fresh state) and run to
the end. Per policy and round: the count before the shift (the last decision before it), the settled count after it
(the last decision's, its 60 s window all post-shift), and **decisions to follow**: the first decision after the shift
whose count reached the settled count (1 = the first decision after the shift). Also each decision's sized load
(Predictive: the regressor's erlangs; Utilization: the busy fraction read) and the measured busy erlangs (Triton's
compute time over the window). ::

    PYTHONPATH=src .venv/bin/python benchmarks/byo_shift.py \\
        --image-sizes ../shared/data/coco_val2017_image_sizes.csv \\
        --pmf ../shared/data/servegen_mm_image_aggregate_pmf.csv [--rounds 3] [--rate 12]

Prints the machine's load average (a shared 2-core machine moves service times).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import byo_mape as bm  # the model, workload, gateway and meter of the MAPE benchmark

from modalscale.api.inferenceservice import parse_isvc
from modalscale.api.isvc_status import ScalerState
from modalscale.autoscaler.policy import ScalingPolicy, recommend
from modalscale.autoscaler.regressor import ServiceTimeRegressor
from modalscale.devenv.prometheus import PrometheusProcess, ScrapeTarget, gateway_target
from modalscale.operator.autoscale.observe import PrometheusReader, build_observation

NS, SVC = "bench", "byo-shift"


def policy_for(mode: str, p95_ms: int, utilization_percent: int, interval_s: int) -> ScalingPolicy:
    """The product's policy for ``spec.scaling`` of ``mode`` with these settings and every other default."""
    body = {"apiVersion": "modalscale.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": SVC, "namespace": NS, "uid": "u", "generation": 1},
            "spec": {"model": {"source": "ConfigMap", "name": bm.MODEL, "configMap": {"name": "byo"},
                               "inputs": {"images": bm.IMAGES_INPUT, "text": bm.TEXT_INPUT},
                               **({"costModelRef": {"name": "m", "key": "model.skops"}}
                                  if mode == "Predictive" else {})},
                     "scaling": {"mode": mode, "minReplicas": 1, "maxReplicas": 40,
                                 "targetP95LatencyMilliseconds": p95_ms,
                                 "targetUtilizationPercent": utilization_percent,
                                 "decisionIntervalSeconds": interval_s}}}
    spec = parse_isvc(body)
    return ScalingPolicy.from_typed(spec.scaling, spec.runtime)


@dataclass
class Scaler:
    """One policy's virtual service: its count and state, and what each decision said."""

    name: str
    policy: ScalingPolicy
    model: Any
    replicas: int = 1
    state: ScalerState = field(default_factory=ScalerState)
    log: list[dict[str, Any]] = field(default_factory=list)

    def decide(self, reading: Any, now: dt.datetime, t_s: float) -> None:
        obs = build_observation(reading, current_replicas=self.replicas, ready_replicas=self.replicas,
                                slots_per_replica=self.policy.slots_per_replica, budget_max_replicas=None, now=now)
        obs = replace(obs, targets_expected=obs.targets_up)  # the virtual replicas are no scrape targets
        d = recommend(obs, self.policy, self.state, self.model, now)
        self.state = d.state
        if d.valid:
            self.replicas = d.desired_replicas
        self.log.append({"t_s": t_s, "replicas": self.replicas, "valid": d.valid, "reason": d.reason.value,
                         "need": d.features.get("needed_replicas"),
                         "load": d.features.get("offered_load_erlangs", d.features.get("utilization_ratio")),
                         "busy": reading.busy_erlangs, "message": d.message})


async def replay(url: str, arrivals: Sequence[float], requests: Sequence[Any], t0: float,
                 failures: list[str]) -> int:
    """Send ``requests[i]`` at ``t0 + arrivals[i]`` (monotonic), each on a new connection; returns answered."""
    import tritonclient.http as triton_http
    import tritonclient.http.aio as triton_aio

    answered = 0

    async def one(req: Any) -> None:
        nonlocal answered
        (images, text), _ = req
        client = triton_aio.InferenceServerClient(url, conn_timeout=120)
        try:
            await client.infer(bm.MODEL, bm.build_inputs(images, text),
                               outputs=[triton_http.InferRequestedOutput("EMBEDDING")])
            answered += 1
        except Exception as exc:  # counted and printed
            failures.append(f"{type(exc).__name__}: {exc}"[:200])
        finally:
            await client.close()

    tasks = []
    for at, req in zip(arrivals, requests, strict=True):
        delay = t0 + at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(req)))
    await asyncio.gather(*tasks)
    return answered


def follow(log: list[dict[str, Any]], shift_s: float) -> tuple[int | None, int | None, int | None]:
    """(count before the shift, settled count after it, decisions to reach it: 1 = the first after the shift;
    None when it never did or there was nothing to follow)."""
    before = [e["replicas"] for e in log if e["t_s"] < shift_s]
    after = [e for e in log if e["t_s"] >= shift_s]
    if not before or not after:
        return None, None, None
    settled = after[-1]["replicas"]
    if settled == before[-1]:
        return before[-1], settled, 0
    up = settled > before[-1]
    k = next((i + 1 for i, e in enumerate(after)
              if (e["replicas"] >= settled if up else e["replicas"] <= settled)), None)
    return before[-1], settled, k


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--image-sizes", type=Path, required=True, help="COCO image-size CSV (width, height)")
    p.add_argument("--pmf", type=Path, required=True, help="ServeGen aggregate PMF CSV")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rate", type=float, default=12.0, help="Arrivals, req/s (open loop, Poisson)")
    p.add_argument("--pre-s", type=float, default=95.0)
    p.add_argument("--post-s", type=float, default=125.0)
    p.add_argument("--warm-s", type=float, default=62.0, help="Seconds of traffic before the first decision")
    p.add_argument("--interval-s", type=int, default=15, help="decisionIntervalSeconds (product default 15)")
    p.add_argument("--p95-ms", type=int, default=1000)
    p.add_argument("--target-utilization", type=int, default=10, help="targetUtilizationPercent of both policies")
    p.add_argument("--fit-requests", type=int, default=150)
    p.add_argument("--max-images", type=int, default=4)
    p.add_argument("--mix-before", type=float, nargs=3, default=(8, 1, 1), metavar=("TEXT", "IMAGE", "IMAGE_TEXT"))
    p.add_argument("--mix-after", type=float, nargs=3, default=(1, 3, 1), metavar=("TEXT", "IMAGE", "IMAGE_TEXT"))
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    print(f"machine: {bm.cpu_name()}, {os.cpu_count()} CPUs; load average before: {bm.load()}", flush=True)
    workload = bm.Workload(args.image_sizes, args.pmf, args.max_images)
    tmp = Path(tempfile.mkdtemp(prefix="byo-shift-"))
    replica = bm.start_replica(tmp)
    gateway, ports = bm.start_gateway(replica)
    prom = PrometheusProcess(tmp / "prometheus", scrape_interval_s=1.0)
    results: dict[str, list[tuple[int | None, int | None, int | None]]] = {"Predictive": [], "Utilization": []}
    try:
        prom.start([ScrapeTarget(f"127.0.0.1:{replica.metrics_port}",
                                 {"namespace": NS, "inferenceservice": SVC, "component": "inference-server",
                                  "pod": f"{SVC}-0"}),
                    gateway_target(f"127.0.0.1:{ports['METRICS']}", NS, SVC)])
        meter = bm.Meter(replica, ports)
        try:
            meter.run(workload.requests(12, args.seed + 999, (1, 1, 1)))  # first runs, not recorded
            rows = meter.run(workload.requests(args.fit_requests, args.seed + 998, (1, 1, 1)))
        finally:
            meter.close()
        table = bm.table_of(rows)
        model = ServiceTimeRegressor().fit(table)
        mod, y = np.asarray(table["modality"]).astype(str), table["service_ms"]
        print(f"fitted the additive regressor on {len(y)} profiled requests (1:1:1); median service ms "
              + ", ".join(f"{m} {np.median(y[mod == m]):.1f}" for m in bm.MODALITIES)
              + "; coefficients " + ", ".join(f"{k} {v:.2f}" for k, v in model.coefficients_ms().items() if v > 1e-9)
              + f"; load {bm.load()}", flush=True)
        reader = PrometheusReader(prom.url)
        url = f"127.0.0.1:{ports['HTTP']}"
        for r in range(args.rounds):
            seed = args.seed + 1000 * (r + 1)
            rng = np.random.default_rng(seed)
            n_pre, n_post = int(args.rate * args.pre_s * 1.5) + 10, int(args.rate * args.post_s * 1.5) + 10
            gaps = rng.exponential(1.0 / args.rate, n_pre + n_post)
            pre_at = np.cumsum(gaps[:n_pre])
            pre_at = pre_at[pre_at < args.pre_s]
            post_at = args.pre_s + np.cumsum(gaps[n_pre:])
            post_at = post_at[post_at < args.pre_s + args.post_s]
            reqs = (workload.requests(len(pre_at), seed, args.mix_before)
                    + workload.requests(len(post_at), seed + 1, args.mix_after, large_only=True))
            arrivals = list(pre_at) + list(post_at)
            scalers = [Scaler("Predictive", policy_for("Predictive", args.p95_ms, args.target_utilization,
                                                       args.interval_s), model),
                       Scaler("Utilization", policy_for("Utilization", args.p95_ms, args.target_utilization,
                                                        args.interval_s), None)]
            failures: list[str] = []
            stop = threading.Event()
            t0 = time.monotonic() + 2.0

            def decide_loop(t0: float = t0, scalers: list[Scaler] = scalers) -> None:
                k = 0
                while not stop.is_set():
                    at = t0 + args.warm_s + k * args.interval_s
                    if at > t0 + args.pre_s + args.post_s:
                        return
                    while time.monotonic() < at and not stop.is_set():
                        time.sleep(0.05)
                    now = dt.datetime.now(dt.UTC)
                    reading = reader.read(NS, SVC, bm.MODEL, now, gateway=True)
                    for s in scalers:
                        s.decide(reading, now, time.monotonic() - t0)
                    k += 1

            thread = threading.Thread(target=decide_loop, daemon=True)
            thread.start()
            answered = asyncio.run(replay(url, arrivals, reqs, t0, failures))
            thread.join(timeout=args.interval_s * 2 + 30)
            stop.set()
            print(f"\nround {r + 1}/{args.rounds} (seed {seed}): {len(pre_at)} requests of mix "
                  f"{tuple(args.mix_before)} for {args.pre_s:.0f} s, then {len(post_at)} of mix "
                  f"{tuple(args.mix_after)} (large half of COCO sizes) for {args.post_s:.0f} s; answered {answered}, "
                  f"failed {len(failures)}"
                  f"{' (' + failures[0] + ')' if failures else ''}; load {bm.load()}", flush=True)
            for s in scalers:
                before, settled, k = follow(s.log, args.pre_s)
                results[s.name].append((before, settled, k))
                print(f"  {s.name}: {before} replicas before the shift, settled at {settled}; decisions to follow: "
                      f"{'-' if k is None else k}")
                for e in s.log:
                    busy = "-" if e["busy"] is None else f"{e['busy']:.3f}"
                    load = "-" if e["load"] is None else f"{e['load']:.3f}"
                    print(f"    t {e['t_s'] - args.pre_s:+6.1f} s: {e['replicas']:2d} replicas "
                          f"({'valid' if e['valid'] else 'HOLD'}, {e['reason']}); sized load {load}, measured busy "
                          f"erlangs {busy}")
        print("\nSummary, per policy: decisions after the shift until the count reached its settled value "
              f"(1 = the first decision after the shift; decision interval {args.interval_s} s), per round:")
        for name, rs in results.items():
            moved = [k for b, st, k in rs if b is not None and st is not None and b != st]
            if not moved:
                verdict = "; the count never moved at the shift: nothing measured"
            elif len(moved) == len(rs) and all(k is not None and k <= 2 for k in moved):
                verdict = "; within 2 decisions in every round"
            else:
                verdict = (f"; within 2 decisions in {sum(1 for k in moved if k is not None and k <= 2)} of "
                           f"{len(rs)} rounds (the count moved in {len(moved)})")
            print(f"  {name}: " + ", ".join(f"{b} -> {st} in {'-' if k is None else k}" for b, st, k in rs) + verdict)
    finally:
        prom.stop()
        gateway.send_signal(signal.SIGTERM)
        gateway.wait(30)
        replica.stop(drain=False)
    print(f"load average after: {bm.load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
