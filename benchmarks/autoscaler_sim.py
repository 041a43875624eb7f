"""Benchmark: the predictive autoscaler against HPA-like, KPA-like and oracle policies in the trace simulator.

Runs each policy side by side on
  1. the generated trace (ServeGen-shaped requests, 20 req/s mean with a +-45 % swing over the hour),
  2. the modality-shift trace (constant 20 req/s; 10 % -> 70 % image requests and 4x pixels at minute 30),
  3. the same generated trace with service times 1.3x slower than the profile the model was trained on
     (the online calibration has to catch it),
  4. every ``--trace PATH`` given (modalscale trace CSV or Azure LLM trace CSV, e.g. the files described in
     /work/shared/data/README.md; images are attached with ``--image-fraction``).

Prints SLO-minutes, replica-hours and their ratios to the oracle and to the HPA-like policy, how many decision
periods each policy takes to follow the modality shift, and the project's goals with MET / NOT MET.

    .venv/bin/python benchmarks/autoscaler_sim.py [--trace PATH ...] [--image-fraction 0.5]

Service times are SYNTHETIC (``profile_data.SyntheticServiceLaw``) until a real runtime profile exists.
"""

from __future__ import annotations

import argparse
import math
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from modalscale.autoscaler.queueing import replicas_for_slo
from modalscale.autoscaler.simulate import SimulationConfig, run_simulation, service_times_ms, train_default_model
from modalscale.autoscaler.simulate_cli import load_trace
from modalscale.autoscaler.traces import Trace, generate_trace, modality_shift_trace

SHIFT_AT_S = 1800.0


def fluid_replica_hours(trace: Trace, config: SimulationConfig) -> float:
    """Replica-hours of sizing each minute with the queueing model on that minute's TRUE rate, mean and SCV of
    service time, replicas ready at once: what the predictive policy would cost without estimation noise, lag
    or stabilization (a reference, not a policy)."""
    service = service_times_ms(trace, config)
    minute = (trace.arrival_s // 60).astype(int)
    total = 0
    for m in range(int(math.ceil(trace.duration_s / 60))):
        s = service[minute == m]
        if s.size == 0:
            total += config.min_replicas
            continue
        c = replicas_for_slo(s.size / 60.0, float(s.mean()), float(s.var() / s.mean() ** 2), config.slots_per_replica,
                             config.target_p95_ms, config.predictive_target_utilization_percent / 100.0,
                             config.max_replicas)
        total += max(c, config.min_replicas)
    return total / 60.0


def run_scenario(name: str, trace: Trace, config: SimulationConfig, model: Any) -> dict[str, dict[str, Any]]:
    """All policies, plus the predictive policy at 70 % target utilization (Utilization mode's default; the CRD's
    for every mode before 6 Dec 2026)."""
    started = time.perf_counter()
    results = run_simulation(trace, config, model)
    at70 = run_simulation(
        trace, replace(config, predictive_target_utilization_percent=70.0, policies=("predictive",)), model
    )
    results["predictive@70"] = at70["predictive"]
    elapsed = time.perf_counter() - started
    oracle, hpa = results["oracle"], results["utilization"]
    print(f"\n== {name}: {len(trace)} requests, {trace.duration_s / 60:.0f} min, p95 target "
          f"{config.target_p95_ms:g} ms, startup {config.startup_delay_s:g} s, decisions every "
          f"{config.decision_interval_s:g} s ({elapsed:.1f} s to simulate)")
    print(f"{'policy':<16}{'SLO-minutes':>12}{'replica-h':>11}{'x oracle':>10}{'x HPA-like':>12}{'p95 ms':>9}"
          f"{'reversals':>11}")
    order = ["predictive", "predictive@70", "utilization", "concurrency", "oracle"]
    label = {"predictive": f"predictive@{config.predictive_target_utilization_percent:g}",
             "utilization": "HPA-like@70", "concurrency": "KPA-like@70"}
    for key in order:
        r = results[key]
        print(f"{label.get(key, key):<16}{r['slo_minutes_fraction']:>11.1%} {r['replica_hours']:>10.2f}"
              f"{r['replica_hours'] / oracle['replica_hours']:>10.2f}{r['replica_hours'] / hpa['replica_hours']:>12.2f}"
              f"{r['p95_latency_ms']:>9.0f}{r['direction_reversals']:>11d}")
    fluid = fluid_replica_hours(trace, config)
    print(f"(reference) the queueing model sized on each minute's true load, no lag: {fluid:.2f} replica-h = "
          f"{fluid / oracle['replica_hours']:.2f}x oracle")
    return results


def periods_to_follow(
    results: dict[str, dict[str, Any]], config: SimulationConfig, shift_at_s: float
) -> dict[str, Any]:
    """Decision periods after the shift until a policy asks for >= 90 % of the oracle's post-shift replicas."""
    minutes = results["oracle"]["desired_replicas"]  # per minute from minute 1
    settled = sorted(minutes[int(shift_at_s // 60) + 4 :])
    level = settled[len(settled) // 2]
    out: dict[str, Any] = {"oracle_level": level}
    for name in ("predictive", "predictive@70", "utilization", "concurrency"):
        times, desired = results[name]["decision_times_s"], results[name]["desired_replicas"]
        hit = next((t for t, d in zip(times, desired) if t >= shift_at_s and d >= 0.9 * level), None)
        out[name] = None if hit is None else math.ceil((hit - shift_at_s) / config.decision_interval_s - 1e-9)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, action="append", default=[], help="extra trace CSV (repeatable)")
    parser.add_argument("--image-fraction", type=float, default=0.5, help="images attached to Azure traces")
    args = parser.parse_args()

    base = SimulationConfig(target_p95_ms=2000.0)
    model = train_default_model(base)
    goals: list[tuple[str, bool, str]] = []

    def judge(name: str, results: dict[str, dict[str, Any]]) -> None:
        p, o, h = results["predictive"], results["oracle"], results["utilization"]
        goals.append((f"{name}: predictive SLO-minutes >= 99 %", p["slo_minutes_fraction"] >= 0.99,
                      f"{p['slo_minutes_fraction']:.1%}"))
        goals.append((f"{name}: replica-hours <= 1.10x oracle", p["replica_hours"] <= 1.10 * o["replica_hours"],
                      f"{p['replica_hours'] / o['replica_hours']:.2f}x"))
        better = p["slo_minutes_fraction"] >= h["slo_minutes_fraction"]
        saving = 1 - p["replica_hours"] / h["replica_hours"]
        goals.append((f"{name}: >= 30 % fewer replica-hours than HPA-like at equal or better SLO",
                      better and saving >= 0.30, f"{saving:.0%} fewer, SLO {p['slo_minutes_fraction']:.1%} vs "
                      f"{h['slo_minutes_fraction']:.1%}"))

    generated = run_scenario("generated (ServeGen-shaped, swinging rate)", generate_trace(), base, model)
    judge("generated", generated)

    shift_config = replace(base, target_p95_ms=5000.0)
    shift = run_scenario("modality shift at minute 30 (10 % -> 70 % images, 4x pixels)",
                         modality_shift_trace(shift_at_s=SHIFT_AT_S), shift_config, model)
    judge("shift", shift)
    follow = periods_to_follow(shift, shift_config, SHIFT_AT_S)
    print(f"decision periods ({shift_config.decision_interval_s:g} s) until >= 90 % of the oracle's post-shift "
          f"{follow['oracle_level']} replicas: " + ", ".join(
              f"{k}={'never' if v is None else v}" for k, v in follow.items() if k != "oracle_level"))
    after = int(SHIFT_AT_S // 60)
    after_p95_ms = {k: r["minute_p95_ms"][after:] for k, r in shift.items()}
    print("SLO-minutes after the shift: " + ", ".join(
        f"{k}={sum(x <= shift_config.target_p95_ms for x in m) / len(m):.1%}" for k, m in after_p95_ms.items()))
    baselines_slow = all(follow[k] is None or follow[k] > 2 for k in ("utilization", "concurrency"))
    goals.append(("shift: predictive follows within 2 decision periods",
                  follow["predictive"] is not None and follow["predictive"] <= 2, str(follow["predictive"])))
    goals.append(("shift: HPA-like and KPA-like do not follow within 2", baselines_slow,
                  f"HPA-like={follow['utilization']}, KPA-like={follow['concurrency']}"))

    drift = run_scenario("generated, true service 1.3x slower than the profile (calibration)", generate_trace(),
                         replace(base, true_service_scale=1.3), model)
    judge("drift", drift)

    for path in args.trace:
        trace = load_trace(path, image_fraction=args.image_fraction)
        judge(path.name,
              run_scenario(f"{path.name} (images attached to {args.image_fraction:.0%})", trace, base, model))

    print("\n== goals")
    for text, ok, value in goals:
        print(f"{'MET    ' if ok else 'NOT MET'}  {text}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
