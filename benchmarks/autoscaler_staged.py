"""One-piece against staged serving (issue 24) in the autoscaler simulator, on the Pareto benchmark's traces.

For each trace and seed both layouts replay the same requests, service-time draws and start-up law
(``simulate_staged.compare_layouts``): the one-piece pool under the predictive policy, and the staged layout (front
pool + image encoder pool, the front's slot held while the pool encodes its images) under the operator's per-stage
rules (the front: ``recommend`` in Predictive mode on its own workload; the pool: ``image_encoder_policy``'s
Utilization rule raised by the stage latency rule on its ``split_slo`` share). Replica-CPU-hours = replica-hours x
cores per replica: 2 for a one-piece, a front and an encoder replica (the CRD's defaults for ``spec.resources.cpu``
and ``spec.stages.imageEncoder.resources.cpu``). It prints:

- shipped: both at the shipped setting (targetUtilizationPercent 90): SLO-minutes, replica-hours (front + pool),
  replica-CPU-hours and the ratio staged / one-piece;
- at equal SLO-minutes: each layout swept over targetUtilizationPercent (``simulate.SWEEP_GRID``; the staged
  layout's one knob sizes both pools, as the CRD has one), the cheapest point of each whose SLO-minutes reach the
  one-piece shipped point's, and their ratio (issue 24's target: <= 0.75);
- parts taken away (staged at the shipped setting): the front's slot freed while the pool works (``front_waits``
  off, a decoupled front the runtime does not have) and the pool without its share of the target (``split_slo``
  off: the Utilization rule alone);
- A/A: the staged run repeated (deterministic per seed: it must be identical).

Traces (passed by path, never copied; see /work/shared/data/README.md), as ``benchmarks/autoscaler_pareto.py`` builds
them: --azure (2 s p95 target), --mooncake (10 s), --servegen (2 s) and the generated modality-shift trace (5 s,
always). Service times: the predictive policy's regressor with its residual noise, split between the stages by the
model's image terms (``simulate_staged`` docstring); start-up delay lognormal, median 30 s, p90 60 s.

    .venv/bin/python benchmarks/autoscaler_staged.py --azure ../shared/data/azure_llm_2023_conv_1h.csv \\
        --mooncake ../shared/data/mooncake_fast25_conversation_1h.csv \\
        --servegen ../shared/data/servegen_mm_image_rate_windows.csv --seeds 3
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from modalscale.autoscaler.simulate import SWEEP_GRID, SimulationConfig, train_default_model
from modalscale.autoscaler.simulate_staged import StagedConfig, compare_layouts
from modalscale.autoscaler.traces import Trace
from modalscale.devenv.provenance import code_version

_spec = importlib.util.spec_from_file_location("autoscaler_pareto", Path(__file__).with_name("autoscaler_pareto.py"))
assert _spec is not None and _spec.loader is not None
pareto = importlib.util.module_from_spec(_spec)
sys.modules["autoscaler_pareto"] = pareto
_spec.loader.exec_module(pareto)

STAGED = StagedConfig()


def cheapest(points: list[tuple[float, float, float]], slo: float) -> tuple[float, float, float] | None:
    """The cheapest ``(knob, SLO-minutes, CPU-h)`` point whose SLO-minutes reach ``slo``; None when none does."""
    reaching = [p for p in points if p[1] >= slo - 1e-12]
    return min(reaching, key=lambda p: p[2]) if reaching else None


def one_trace(trace: Trace, config: SimulationConfig, model: Any) -> dict[str, Any]:
    """Every figure of one trace and seed (module docstring)."""
    shipped = compare_layouts(trace, config, STAGED, model)
    one, staged = shipped["one_piece"], shipped["staged"]
    knob = config.predictive_target_utilization_percent
    one_points = [(knob, one["slo_minutes_fraction"], one["replica_cpu_hours"])]
    staged_points = [(knob, staged["slo_minutes_fraction"], staged["replica_cpu_hours"])]
    for value in SWEEP_GRID["predictive"]:
        if value == knob:
            continue
        swept = replace(config, predictive_target_utilization_percent=value)
        r = compare_layouts(trace, swept, STAGED, model)
        one_points.append((value, r["one_piece"]["slo_minutes_fraction"], r["one_piece"]["replica_cpu_hours"]))
        staged_points.append((value, r["staged"]["slo_minutes_fraction"], r["staged"]["replica_cpu_hours"]))
    parts = {name: compare_layouts(trace, config, replace(STAGED, **change), model, one_piece=False)["staged"]
             for name, change in (("front slot freed while the pool works", {"front_waits": False}),
                                  ("pool without its SLO share", {"split_slo": False}))}
    again = compare_layouts(trace, config, STAGED, model, one_piece=False)["staged"]
    same = (again["slo_minutes_fraction"], again["replica_cpu_hours"]) == (
        staged["slo_minutes_fraction"], staged["replica_cpu_hours"])
    return {"one": one, "staged": staged, "one_points": one_points, "staged_points": staged_points,
            "parts": parts, "aa": same}


def show(trace: Trace, seed: int, target_ms: float, f: dict[str, Any]) -> None:
    one, staged = f["one"], f["staged"]
    gaps = np.diff(trace.arrival_s)
    images = float((trace.image_count > 0).mean())
    print(f"\n== {trace.name} (seed {seed}): {len(trace)} requests, {trace.duration_s / 60:.0f} min, "
          f"{len(trace) / max(trace.duration_s, 1.0):.2f} req/s, inter-arrival CV {gaps.std() / gaps.mean():.2f}, "
          f"{images:.0%} with images, p95 target {target_ms / 1000:g} s; work {one['work_s'] / 3600:.2f} h, "
          f"{staged['encoder_work_s'] / max(one['work_s'], 1e-9):.0%} of it image encoding")
    print(f"  one-piece: {one['slo_minutes_fraction']:.1%} SLO-min, {one['replica_hours']:.2f} replica-h, "
          f"{one['replica_cpu_hours']:.2f} CPU-h")
    print(f"  staged:    {staged['slo_minutes_fraction']:.1%} SLO-min, {staged['replica_hours']:.2f} replica-h "
          f"(front {staged['front_replica_hours']:.2f} + pool {staged['encoder_replica_hours']:.2f}), "
          f"{staged['replica_cpu_hours']:.2f} CPU-h = {staged['replica_cpu_hours'] / one['replica_cpu_hours']:.2f}x; "
          f"front slot-h held {staged['front_hold_s'] / 3600:.2f} for {staged['front_work_s'] / 3600:.2f} of own work; "
          f"max front {max(staged['front_desired_replicas'])}, max pool {max(staged['encoder_desired_replicas'])} "
          f"replicas (one-piece max {max(one['desired_replicas'])})")
    print("  pool decisions: " + ", ".join(f"{k} {v}" for k, v in sorted(staged["encoder_reasons"].items(),
                                                                       key=lambda kv: -kv[1])))
    for label, points in (("one-piece", f["one_points"]), ("staged", f["staged_points"])):
        print(f"  {label:<9} swept (targetUtilizationPercent: SLO-min / CPU-h): "
              + ", ".join(f"{k:g}: {s:.1%} / {c:.2f}" for k, s, c in sorted(points)))
    print("  parts taken away (staged, shipped): " + "; ".join(
        f"{name}: {r['slo_minutes_fraction']:.1%} / {r['replica_cpu_hours']:.2f} CPU-h = "
        f"{r['replica_cpu_hours'] / one['replica_cpu_hours']:.2f}x" for name, r in f["parts"].items()))
    print(f"  A/A: staged re-run {'identical' if f['aa'] else 'DIFFERENT'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--azure", type=Path, help="azure_llm_2023_conv_1h.csv")
    parser.add_argument("--mooncake", type=Path, help="mooncake_fast25_conversation_1h.csv")
    parser.add_argument("--servegen", type=Path, help="servegen_mm_image_rate_windows.csv")
    parser.add_argument("--seeds", type=int, default=1, help="rounds with different image/noise seeds")
    parser.add_argument("--only", help="comma list of trace names to run (default: all given)")
    args = parser.parse_args()
    started = time.perf_counter()
    commit = code_version()
    print(f"git {commit}; machine load (1/5/15 min): {' '.join(f'{x:.2f}' for x in os.getloadavg())} on "
          f"{os.cpu_count()} CPUs (shared: wall time indicative only; the figures are simulated and deterministic "
          f"per seed)")
    base = SimulationConfig(service_source="regressor", startup_delay_s=30.0, startup_delay_p90_s=60.0)
    model = train_default_model(base)
    only = set(args.only.split(",")) if args.only else None
    rows: list[tuple[str, int, dict[str, Any]]] = []
    for seed in range(args.seeds):
        traces = pareto.image_traces(args.azure, args.mooncake, args.servegen, seed)
        for trace, target in traces:
            if only is not None and trace.name not in only:
                continue
            figures = one_trace(trace, replace(base, target_p95_ms=target, random_state=seed), model)
            show(trace, seed, target, figures)
            rows.append((trace.name, seed, figures))

    print("\n== staged / one-piece replica-CPU-hours (2 cores per replica in each pool; issue 24's target <= 0.75x "
          "at equal SLO-minutes)")
    print(f"{'trace':<19}{'seed':>5}{'one SLO':>9}{'one CPU-h':>10}{'stg SLO':>9}{'stg CPU-h':>10}{'shipped':>9}"
          f"{'equal-SLO one':>15}{'equal-SLO stg':>15}{'ratio':>7}{'decoupled':>11}{'A/A':>11}")
    for name, seed, f in rows:
        one, staged = f["one"], f["staged"]
        slo = one["slo_minutes_fraction"]
        best_one, best_staged = cheapest(f["one_points"], slo), cheapest(f["staged_points"], slo)
        at_one = f"{best_one[2]:.2f}@{best_one[0]:g}" if best_one else "none"
        at_staged = f"{best_staged[2]:.2f}@{best_staged[0]:g}" if best_staged else "none"
        ratio = f"{best_staged[2] / best_one[2]:.2f}" if best_one and best_staged else "-"
        free = f["parts"]["front slot freed while the pool works"]
        print(f"{name:<19}{seed:>5}{slo:>9.1%}{one['replica_cpu_hours']:>10.2f}"
              f"{staged['slo_minutes_fraction']:>9.1%}{staged['replica_cpu_hours']:>10.2f}"
              f"{staged['replica_cpu_hours'] / one['replica_cpu_hours']:>9.2f}{at_one:>15}{at_staged:>15}{ratio:>7}"
              f"{free['replica_cpu_hours'] / one['replica_cpu_hours']:>11.2f}{'identical' if f['aa'] else 'DIFF':>11}")
    print(f"\n{time.perf_counter() - started:.0f} s wall; load now {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
