"""Benchmark (not a test): the spend-anomaly detector's detection delay and false alarms, against a baseline.

Two series, each scored by the detector of ``modalscale.costmodel.anomaly`` (robust z over a seasonal baseline,
``robust``) and, side by side on the same samples, by a plain z-score over the same baselines (mean and
standard deviation instead of median and MAD, otherwise identical: ``plain``, the usual first detector):

* ``synthetic week``: 8 days of 5-min samples of one service whose replicas follow a daily cycle (2 at night, 6
  at 14:00, +/-1 noise), 20 seeds; spikes of 3x the replicas for 40 min injected on day 8 at a random time;
* ``simulated trace``: the predictive autoscaler's ready replicas (every 15 s) from the simulator replaying a
  real trace (``--trace``, default the Azure LLM 2023 conversation hour from ``/work/shared/data``; a
  generated hour if absent). One hour has no season, so the recent baseline (15 min) decides; spikes of +8
  replicas for 5 min are injected at random times after a 20-min warm-up, one per round.

Printed per detector: false alarms on the quiet series (per day of samples; after the warm-up), detection
rate and delay of the injected spikes (median and max seconds from the first spiked sample). A/A row: the
robust detector against itself on a second, independent set of seeds.

Run: ``.venv/bin/python benchmarks/budget_anomaly.py [--trace PATH] [--rounds N]``
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from modalscale.costmodel import anomaly
from modalscale.costmodel.anomaly import AnomalyConfig, BurnSample, for_interval, replay

T0 = datetime(2026, 11, 1, tzinfo=UTC)
PRICE = 0.754276239  # one L4 replica (4 CPU, 16Gi) in the packaged catalog, USD/h
DEFAULT_TRACE = Path("/work/shared/data/azure_llm_2023_conv_1h.csv")


def plain_score(history, sample, cfg=AnomalyConfig()):  # type: ignore[no-untyped-def]
    """The baseline detector: mean and standard deviation instead of median and MAD (same baselines, floors)."""
    base, kind = anomaly._baseline(history, sample.time, cfg)
    if not base:
        return None
    values = [b.usd_per_hour for b in base]
    mean = statistics.fmean(values)
    sd = statistics.pstdev(values)
    scale = max(sd, cfg.floor_ratio * abs(mean), cfg.min_excess_usd_per_hour / cfg.z_threshold, 1e-12)
    window = [h.usd_per_hour for h in history if 0 < (sample.time - h.time).total_seconds() < cfg.smooth_s]
    value = statistics.median(window + [sample.usd_per_hour])
    return anomaly.Score((value - mean) / scale, value, mean, scale, kind, len(base),
                         statistics.median(b.replicas for b in base),
                         statistics.median(b.usd_per_replica_hour for b in base))


def run_detector(samples: list[BurnSample], cfg: AnomalyConfig, plain: bool) -> list[anomaly.Anomaly]:
    if not plain:
        return replay(samples, cfg)
    saved = anomaly.score
    anomaly.score = plain_score  # detect() looks the scorer up at call time
    try:
        return replay(samples, cfg)
    finally:
        anomaly.score = saved


def daily(seed: int, spike_at_h: float | None) -> list[BurnSample]:
    rng = random.Random(seed)
    out = []
    for i in range(8 * 288):
        hour = i * 300 / 3600
        replicas = max(1, round(4 - 2 * math.cos(2 * math.pi * (hour - 2) / 24) + rng.choice((-1, 0, 0, 1))))
        if spike_at_h is not None and spike_at_h <= hour < spike_at_h + 40 / 60:
            replicas *= 3
        out.append(BurnSample(T0 + timedelta(seconds=i * 300), replicas * PRICE, replicas, PRICE))
    return out


def simulated(trace_path: Path | None) -> tuple[list[BurnSample], str]:
    from modalscale.autoscaler.simulate import SimulationConfig, run_simulation
    from modalscale.autoscaler.simulate_cli import load_trace
    from modalscale.autoscaler.traces import TraceSpec, generate_trace

    if trace_path is not None and trace_path.exists():
        trace, name = load_trace(trace_path), trace_path.name
    else:
        trace, name = generate_trace(TraceSpec(duration_s=3600, mean_rate_rps=5.5, random_state=1)), "generated 1 h"
    run = run_simulation(trace, SimulationConfig(policies=("predictive",), random_state=1))["predictive"]
    return [BurnSample(T0 + timedelta(seconds=t), r * PRICE, r, PRICE)
            for t, r in zip(run["decision_times_s"], run["ready_replicas"])], name


def evaluate(label: str, quiet_runs: list[list[BurnSample]], spiked_runs: list[tuple[list[BurnSample], datetime]],
             cfg: AnomalyConfig, warmup: timedelta, plain: bool) -> None:
    alarms = 0
    quiet_s = 0.0
    for q in quiet_runs:
        start = q[0].time + warmup
        alarms += sum(1 for a in run_detector(q, cfg, plain) if a.sample.time >= start)
        quiet_s += (q[-1].time - start).total_seconds()
    delays, hits = [], 0
    for s, at in spiked_runs:
        found = [a for a in run_detector(s, cfg, plain) if a.sample.time >= at]
        if found:
            hits += 1
            delays.append((found[0].sample.time - at).total_seconds())
    days = quiet_s / 86_400
    print(f"  {label:<24} false alarms {alarms:>3} in {days:6.2f} days of quiet samples "
          f"({alarms / days if days else float('nan'):6.2f}/day); spikes found {hits}/{len(spiked_runs)}, "
          f"delay median {statistics.median(delays) if delays else float('nan'):5.0f} s, "
          f"max {max(delays) if delays else float('nan'):5.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="trace CSV for the simulated series")
    parser.add_argument("--rounds", type=int, default=20, help="seeds / injected spikes per series")
    args = parser.parse_args()
    started = time.perf_counter()
    print(f"load {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs (a machine shared with other work: wall times "
          f"are not comparable, counts and delays are)")

    cfg = for_interval(AnomalyConfig(), 300)  # as the operator runs it at evaluationIntervalSeconds 300
    print("synthetic week: 8 days of 5-min samples, daily cycle; 3x replicas for 40 min on day 8")
    for label, seeds in (("robust", range(args.rounds)), ("robust (A/A, other seeds)", range(100, 100 + args.rounds)),
                         ("plain z (baseline)", range(args.rounds))):
        rng = random.Random(7)
        spikes = [7 * 24 + rng.uniform(0, 23) for _ in seeds]
        quiet = [daily(seed, None) for seed in seeds]
        spiked = [(daily(seed, at), T0 + timedelta(seconds=math.ceil(at * 3600 / 300) * 300))
                  for seed, at in zip(seeds, spikes)]
        evaluate(label, quiet, spiked, cfg, timedelta(days=1), plain=label.startswith("plain"))

    sim, name = simulated(args.trace)
    sim_cfg = for_interval(replace(AnomalyConfig(), recent_s=900), 15)
    print(f"simulated trace ({name}): predictive autoscaler, {len(sim)} samples every 15 s, "
          f"replicas {min(s.replicas for s in sim)}..{max(s.replicas for s in sim)}; +8 replicas for 5 min")
    rng = random.Random(11)
    spiked = []
    for _ in range(args.rounds):
        i = rng.randrange(80, len(sim) - 20)  # after 20 min
        series = [BurnSample(s.time, (s.replicas + 8) * PRICE, s.replicas + 8, PRICE) if i <= j < i + 20 else s
                  for j, s in enumerate(sim)]
        spiked.append((series, sim[i].time))
    for label, plain in (("robust", False), ("plain z (baseline)", True)):
        evaluate(label, [sim], spiked, sim_cfg, timedelta(minutes=20), plain)
    print(f"wall {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
