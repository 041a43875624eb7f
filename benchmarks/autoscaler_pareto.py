"""Pareto benchmark of the autoscaler: each policy family's knob swept on real traces, side by side in one run.

Families (``simulate.run_sweep``): predictive (targetUtilizationPercent), HPA-like (target utilization), KPA-like
(target in-flight per slot), fixed pools (every size), and the oracle. For every trace it prints each family's
Pareto frontier (SLO-minutes up, replica-hours down), the headline ratio

    predictive (shipped setting) replica-hours / the cheapest HPA-like, KPA-like or fixed point whose
    SLO-minutes are equal or better,

the issue's targets (predictive >= 95 % SLO-minutes; headline <= 0.75; <= 1.3x oracle) with MET / NOT MET and,
where missed, why: where predictive's replica-hours above the oracle's go (minutes after a demand drop vs
headroom at steady or rising demand), and what its missed minutes were (replicas still starting vs queueing
with the oracle's count ready). It also scores the demand forecasters on each trace (coverage of the next
start-up horizon's busiest 15 s bin, and over-forecast) and runs predictive with each, which is the evidence for
the shipped ``peak`` forecaster.

Traces (passed by path, never copied; see /work/shared/data/README.md):
  --azure     Azure LLM inference trace 2023, conversation (arrivals as recorded; images attached, 50 %)
  --mooncake  Mooncake FAST'25 conversation trace (arrivals as recorded; images attached, 50 %)
  --servegen  ServeGen mm-image per-client rate windows (arrivals generated per client and 600 s window with
              the fitted Gamma/Weibull law; the day's busiest hour)
  and the generated modality-shift trace (always).

Service times: the predictive policy's regressor (fitted on a SYNTHETIC profile, ``profile_data``) with its
residual noise, per request; start-up delay lognormal, median 30 s, p90 60 s, drawn per replica. p95 targets:
2 s (Azure, ServeGen), 5 s (shift, as in autoscaler_sim.py), 10 s (Mooncake: its prompts' median is ~6,900
tokens, so service time alone has a p95 of ~5 s and a 2 s target is unattainable for every policy).

    .venv/bin/python benchmarks/autoscaler_pareto.py --azure ../shared/data/azure_llm_2023_conv_1h.csv \\
        --mooncake ../shared/data/mooncake_fast25_conversation_1h.csv \\
        --servegen ../shared/data/servegen_mm_image_rate_windows.csv [--seeds 2]

The simulation is deterministic for a seed (the A/A row re-runs predictive and must match exactly); seeds change
the image draw and service-time noise. Wall time is printed with the machine load (shared machine).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from modalscale.autoscaler.arrivals import FORECASTERS, forecast_rate_rps
from modalscale.autoscaler.simulate import SimulationConfig, run_simulation, run_sweep, train_default_model
from modalscale.autoscaler.traces import (
    ImageMix,
    Trace,
    modality_shift_trace,
    read_azure_llm_trace,
    read_mooncake_trace,
    servegen_trace,
)

BASELINES = ("utilization", "concurrency", "fixed")
LABEL = {"predictive": "predictive", "utilization": "HPA-like", "concurrency": "KPA-like", "fixed": "fixed",
         "oracle": "oracle"}


def frontier(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Points no other point beats on both SLO-minutes (higher) and replica-hours (lower), by cost."""
    out = []
    for p in sorted(points, key=lambda p: (p["replica_hours"], -p["slo_minutes_fraction"])):
        if not out or p["slo_minutes_fraction"] > out[-1]["slo_minutes_fraction"]:
            out.append(p)
    return out


def headline(points: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(predictive's default point, the cheapest baseline point with equal or better SLO-minutes or None)."""
    pred = next(p for p in points if p["policy"] == "predictive" and p["default"])
    rivals = [p for p in points if p["policy"] in BASELINES
              and p["slo_minutes_fraction"] >= pred["slo_minutes_fraction"] - 1e-12]
    return pred, min(rivals, key=lambda p: p["replica_hours"]) if rivals else None


def diagnose(trace: Trace, config: SimulationConfig, model: Any) -> dict[str, Any]:
    """Where predictive's replica-hours above the oracle go, and what its missed minutes were."""
    r = run_simulation(trace, replace(config, policies=("predictive", "oracle")), model)
    pred, oracle = r["predictive"], r["oracle"]
    schedule = [oracle["desired_replicas"][0]] + list(oracle["desired_replicas"])  # minute 0 as minute 1
    times = np.asarray(pred["decision_times_s"])
    desired = np.asarray(pred["desired_replicas"], dtype=float)
    ready = np.asarray(pred["ready_replicas"], dtype=float)
    n = len(pred["minute_p95_ms"])
    after_drop = headroom = 0.0
    missed_starting = missed_queueing = 0
    for m in range(n):
        in_minute = (times > m * 60) & (times <= (m + 1) * 60)
        if not in_minute.any():
            continue
        o = schedule[min(m, len(schedule) - 1)]
        excess = max(0.0, float(desired[in_minute].mean()) - o) / 60.0  # replica-hours in this minute
        if o < max(schedule[max(0, m - 5):m] or [o]):
            after_drop += excess
        else:
            headroom += excess
        if pred["minute_p95_ms"][m] > config.target_p95_ms:
            if float(ready[in_minute].min()) < o:
                missed_starting += 1
            else:
                missed_queueing += 1
    return {"after_drop_h": after_drop, "headroom_h": headroom, "missed_starting": missed_starting,
            "missed_queueing": missed_queueing, "missed": missed_starting + missed_queueing, "minutes": n,
            "reasons": pred.get("reasons", {})}


def forecaster_scores(trace: Trace, config: SimulationConfig) -> dict[str, tuple[float, float]]:
    """Per forecaster: (coverage, mean over-forecast ratio) of the busiest 15 s bin of the next start-up horizon,
    at every decision time, from the counts of the last 10 min."""
    bin_s, horizon = config.count_bin_s, config.startup_horizon_s()
    arrival = trace.arrival_s
    out = {}
    decisions = np.arange(600.0, trace.duration_s - horizon, config.decision_interval_s)
    for rule in FORECASTERS:
        hits, ratios = 0, []
        for t in decisions:
            edges = t - bin_s * np.arange(40, -1, -1)
            counts = np.diff(np.searchsorted(arrival, edges, side="right")).astype(float)
            f = forecast_rate_rps(counts, bin_s, horizon, rule=rule)
            ahead = np.diff(np.searchsorted(arrival, t + bin_s * np.arange(0, math.ceil(horizon / bin_s) + 1),
                                            side="right")) / bin_s
            actual = float(ahead.max()) if ahead.size else 0.0
            if f is None or actual <= 0:
                continue
            hits += f.rate_rps >= actual
            ratios.append(f.rate_rps / actual)
        out[rule] = (hits / max(1, len(ratios)), float(np.mean(ratios)) if ratios else math.nan)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--azure", type=Path, help="azure_llm_2023_conv_1h.csv")
    parser.add_argument("--mooncake", type=Path, help="mooncake_fast25_conversation_1h.csv")
    parser.add_argument("--servegen", type=Path, help="servegen_mm_image_rate_windows.csv")
    parser.add_argument("--seeds", type=int, default=1, help="rounds with different image/noise seeds")
    parser.add_argument("--no-forecaster-study", action="store_true", help="skip the forecaster comparison")
    args = parser.parse_args()

    started = time.perf_counter()
    print(f"machine load (1/5/15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs "
          f"(shared with other work: wall times are indicative only; the figures below are simulated and "
          f"deterministic per seed)")
    base = SimulationConfig(service_source="regressor", startup_delay_s=30.0, startup_delay_p90_s=60.0)
    model = train_default_model(base)
    summary: list[tuple[str, int, dict[str, Any], dict[str, Any] | None, float, float]] = []

    for seed in range(args.seeds):
        traces: list[tuple[Trace, float]] = []
        mix = ImageMix(image_fraction=0.5)
        if args.azure:
            traces.append((read_azure_llm_trace(args.azure, mix, random_state=seed, name="azure-conv-2023"), 2000.0))
        if args.mooncake:
            traces.append((read_mooncake_trace(args.mooncake, mix, random_state=seed, name="mooncake-conv"), 10000.0))
        if args.servegen:
            traces.append((servegen_trace(args.servegen, random_state=seed, name="servegen-peak-hour"), 2000.0))
        traces.append((modality_shift_trace(random_state=seed + 1), 5000.0))
        for trace, target in traces:
            config = replace(base, target_p95_ms=target, random_state=seed)
            t0 = time.perf_counter()
            sweep = run_sweep(trace, config, model)
            points = sweep["points"]
            oracle = next(p for p in points if p["policy"] == "oracle")
            gaps = np.diff(trace.arrival_s)
            print(f"\n== {trace.name} (seed {seed}): {len(trace)} requests, {trace.duration_s / 60:.0f} min, "
                  f"inter-arrival CV {gaps.std() / gaps.mean():.2f}, p95 target {target / 1000:g} s "
                  f"({time.perf_counter() - t0:.0f} s to sweep)")
            for family in ("predictive", "utilization", "concurrency", "fixed"):
                mine = [p for p in points if p["policy"] == family]
                line = ", ".join(f"{p['param']:g}{'*' if p['default'] else ''}: {p['slo_minutes_fraction']:.1%} / "
                                 f"{p['replica_hours']:.2f} h" for p in frontier(mine))
                print(f"  {LABEL[family]:<10} frontier (knob: SLO-min / replica-h; * = shipped): {line}")
            print(f"  oracle     {oracle['slo_minutes_fraction']:.1%} / {oracle['replica_hours']:.2f} h")
            pred, rival = headline(points)
            x_oracle = pred["replica_hours"] / oracle["replica_hours"]
            ratio = pred["replica_hours"] / rival["replica_hours"] if rival else math.nan
            rival_text = (f"{LABEL[rival['policy']]}@{rival['param']:g} ({rival['slo_minutes_fraction']:.1%}, "
                          f"{rival['replica_hours']:.2f} h)" if rival else "none reaches predictive's SLO-minutes")
            print(f"  headline: predictive@{pred['param']:g} {pred['slo_minutes_fraction']:.1%} / "
                  f"{pred['replica_hours']:.2f} h; cheapest baseline at >= its SLO-minutes: {rival_text}; "
                  f"ratio {ratio:.2f}; {x_oracle:.2f}x oracle")
            summary.append((trace.name, seed, pred, rival, ratio, x_oracle))
            goals = [("SLO-minutes >= 95 %", pred["slo_minutes_fraction"] >= 0.95),
                     ("<= 0.75x the cheapest baseline at equal SLO", rival is None or ratio <= 0.75),
                     ("<= 1.3x oracle", x_oracle <= 1.3)]
            for text, ok in goals:
                print(f"  {'MET    ' if ok else 'NOT MET'} {text}")
            if not all(ok for _, ok in goals):
                d = diagnose(trace, config, model)
                print(f"  why: predictive's replica-hours above the oracle: {d['after_drop_h']:.2f} h in minutes "
                      f"after a demand drop (forecast memory + scale-down window), {d['headroom_h']:.2f} h of "
                      f"headroom at steady or rising demand (utilization target, arrival SCV, peak forecast); "
                      f"missed minutes {d['missed']}/{d['minutes']}: {d['missed_starting']} with fewer ready "
                      f"replicas than the oracle's (start-up lag), {d['missed_queueing']} with at least the oracle's "
                      f"count ready (queueing inside the minute)")
                print("  rules that set predictive's decisions: "
                      + ", ".join(f"{k} {v}" for k, v in sorted(d["reasons"].items(), key=lambda kv: -kv[1])))
                if rival is not None and ratio > 0.75:
                    print(f"  why (headline): {LABEL[rival['policy']]}@{rival['param']:g} already reaches "
                          f"{rival['slo_minutes_fraction']:.1%} at "
                          f"{rival['replica_hours'] / oracle['replica_hours']:.2f}x"
                          f" oracle, so 0.75x of it would be "
                          f"{0.75 * rival['replica_hours'] / oracle['replica_hours']:.2f}x oracle"
                          + (": below the oracle itself, unreachable by any policy" if
                             0.75 * rival["replica_hours"] < oracle["replica_hours"] else ""))
            if seed == 0 and not args.no_forecaster_study:
                scores = forecaster_scores(trace, config)
                print("  forecasters (coverage of the next horizon's busiest 15 s bin / mean forecast over it): "
                      + ", ".join(f"{k} {c:.0%} / {r:.2f}x" for k, (c, r) in scores.items()))
                for rule in (None,) + FORECASTERS:
                    r = run_simulation(trace, replace(config, policies=("predictive",), predictive_forecaster=rule),
                                       model)["predictive"]
                    print(f"    predictive@{base.predictive_target_utilization_percent:g} with forecaster "
                          f"{rule or 'none':<6}: {r['slo_minutes_fraction']:.1%} / {r['replica_hours']:.2f} h")
                crd = run_simulation(trace, replace(config, policies=("predictive",),
                                                    predictive_target_utilization_percent=70.0,
                                                    predictive_scale_down_stabilization_s=300.0), model)["predictive"]
                print(f"  predictive at the CRD defaults (70 %, 300 s scale-down window): "
                      f"{crd['slo_minutes_fraction']:.1%} / {crd['replica_hours']:.2f} h = "
                      f"{crd['replica_hours'] / oracle['replica_hours']:.2f}x oracle")
                aa = run_simulation(trace, replace(config, policies=("predictive",)), model)["predictive"]
                same = (aa["slo_minutes_fraction"], round(aa["replica_hours"], 9)) == (
                    pred["slo_minutes_fraction"], round(pred["replica_hours"], 9))
                print(f"  A/A: predictive re-run {aa['slo_minutes_fraction']:.1%} / {aa['replica_hours']:.2f} h "
                      f"({'identical' if same else 'DIFFERENT'})")

    print("\n== summary (predictive at its shipped setting)")
    print(f"{'trace':<22}{'seed':>5}{'SLO-min':>9}{'replica-h':>11}{'x oracle':>10}"
          f"{'x cheapest baseline':>21}  baseline")
    for name, seed, pred, rival, ratio, x_oracle in summary:
        base_text = f"{LABEL[rival['policy']]}@{rival['param']:g}" if rival else "-"
        print(f"{name:<22}{seed:>5}{pred['slo_minutes_fraction']:>9.1%}{pred['replica_hours']:>11.2f}"
              f"{x_oracle:>10.2f}{ratio:>21.2f}  {base_text}")
    print(f"\n{time.perf_counter() - started:.0f} s wall; load now {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
