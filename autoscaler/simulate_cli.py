"""``modalscale simulate``: replay a trace under the predictive, HPA-like, KPA-like and oracle policies.

Without ``--trace`` it uses the generated trace (``traces.generate_trace``; ``--shift`` for the modality-shift
trace). ``--trace`` takes modalscale's trace CSV, Azure's LLM trace CSV, the Mooncake conversation trace CSV, or
ServeGen's per-client rate windows (arrivals generated from them), each recognised by its header.

``--sweep`` sweeps each family's knob instead (predictive and HPA-like target utilization, KPA-like target
concurrency, fixed pool size) and with ``--json`` prints exactly::

    {"trace": ..., "points": [{"policy": "predictive"|"utilization"|"concurrency"|"fixed"|"oracle",
                               "param": <number or null>, "default": true|false,
                               "slo_minutes_fraction": x, "replica_hours": y, "requests_over_slo": n,
                               "burst_requests_over_slo": m}, ...]}

with one ``default: true`` point per policy (see ``simulate.run_sweep``).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from modalscale.autoscaler.simulate import POLICIES, SimulationConfig, run_simulation, run_sweep
from modalscale.autoscaler.traces import (
    ImageMix,
    Trace,
    TraceSpec,
    generate_trace,
    modality_shift_trace,
    read_azure_llm_trace,
    read_mooncake_trace,
    read_trace_csv,
    servegen_trace,
)
from modalscale.cli import UsageError, reading


def load_trace(path: Path | None, shift: bool = False, image_fraction: float = 0.5, seed: int = 0) -> Trace:
    """The trace the command runs on: a file (format from its header), or a generated one.

    Raises:
        UsageError: ``--trace``: the file cannot be read as text, is empty, its header matches no known format,
            or a row is invalid (the reader's message, with the line).
    """
    if path is None:
        return modality_shift_trace(random_state=seed + 1) if shift else generate_trace(TraceSpec(random_state=seed))
    with reading("--trace", path, "a trace CSV", " (or leave --trace out for the generated trace)"):
        return _read_trace_file(path, image_fraction, seed)


def _read_trace_file(path: Path, image_fraction: float, seed: int) -> Trace:
    with path.open(encoding="utf-8") as fh:
        header = fh.readline()
    if not header.strip():
        raise ValueError(f"{path} is empty; a trace CSV starts with its header line")
    if "TIMESTAMP" in header and "ContextTokens" in header:
        return read_azure_llm_trace(path, ImageMix(image_fraction=image_fraction), random_state=seed)
    if "timestamp_ms" in header and "input_length" in header:
        return read_mooncake_trace(path, ImageMix(image_fraction=image_fraction), random_state=seed)
    if "window_start_s" in header and "rate_rps" in header:
        return servegen_trace(path, random_state=seed)
    if "arrival_s" in header:
        return read_trace_csv(path)
    raise ValueError(f"{path}: header {header.strip()!r} is none of: a modalscale trace CSV, an Azure LLM trace, "
                     f"the Mooncake conversation trace, ServeGen rate windows")


def add_parser(subparsers: Any) -> None:
    """Register ``simulate`` on the ``modalscale`` sub-command parser."""
    parser = subparsers.add_parser(
        "simulate",
        help="compare autoscaling policies on a request trace",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("--trace", type=Path, default=None,
                        help="trace CSV (modalscale, Azure LLM, Mooncake conversation, or ServeGen rate windows)")
    parser.add_argument("--shift", action="store_true", help="without --trace: use the modality-shift trace")
    parser.add_argument("--image-fraction", type=float, default=0.5,
                        help="Azure traces: fraction of requests given ServeGen-shaped images (default 0.5)")
    parser.add_argument("--target-p95-ms", type=float, default=None,
                        help="p95 latency target in ms (default 2000; 5000 with --shift)")
    parser.add_argument("--predictive-utilization-percent", type=float, default=90.0,
                        help="targetUtilizationPercent of the predictive policy (default 90)")
    parser.add_argument("--startup-delay-s", type=float, default=30.0,
                        help="replica start-up delay in s (the median with --startup-delay-p90-s)")
    parser.add_argument("--startup-delay-p90-s", type=float, default=None,
                        help="p90 of a lognormal start-up delay (default: every replica takes --startup-delay-s)")
    parser.add_argument("--startup-delays-s", default="",
                        help="comma list of measured start-up delays in s, drawn per new replica (overrides both)")
    parser.add_argument("--service-source", choices=("regressor", "law"), default="regressor",
                        help="service times of traces without them: the regressor's prediction with its residual "
                             "noise (default) or the synthetic law")
    parser.add_argument("--sweep", action="store_true", help="sweep each policy family's knob (Pareto data)")
    parser.add_argument("--policies", default=",".join(POLICIES),
                        help=f"comma list out of {','.join(POLICIES)} (fixed pools: --sweep)")
    parser.add_argument("--seed", type=int, default=0, help="seed of generated traces and service times")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.set_defaults(func=run)


def config_from_args(args: argparse.Namespace) -> SimulationConfig:
    """The :class:`SimulationConfig` of the parsed flags, every flag checked first (pure).

    Raises:
        UsageError: A flag out of its range (the flag named, with the range or the fix).
    """
    def positive(flag: str, value: float | None, example: str) -> None:
        if value is not None and not (math.isfinite(value) and value > 0):
            raise UsageError(flag, f"{value:g} must be > 0 and finite; e.g. {example}")

    target = args.target_p95_ms if args.target_p95_ms is not None else (5000.0 if args.shift else 2000.0)
    positive("--target-p95-ms", target, "2000 (ms)")
    util = args.predictive_utilization_percent
    if not (math.isfinite(util) and 0 < util <= 100):
        raise UsageError("--predictive-utilization-percent", f"{util:g} is not in (0, 100]; e.g. 90")
    if not (math.isfinite(args.startup_delay_s) and args.startup_delay_s >= 0):
        raise UsageError("--startup-delay-s", f"{args.startup_delay_s:g} must be >= 0 s and finite")
    positive("--startup-delay-p90-s", args.startup_delay_p90_s, "60 (s)")
    if args.startup_delay_p90_s is not None and args.startup_delay_p90_s < args.startup_delay_s:
        raise UsageError("--startup-delay-p90-s", f"{args.startup_delay_p90_s:g} s is below the median "
                                                  f"--startup-delay-s {args.startup_delay_s:g} s; give a p90 >= it")
    try:
        delays = tuple(float(x) for x in args.startup_delays_s.split(",") if x.strip())
    except ValueError:
        raise UsageError("--startup-delays-s", f"{args.startup_delays_s!r} is not a comma list of seconds "
                                               "(e.g. 21.5,30,44)") from None
    if any(not (math.isfinite(d) and d >= 0) for d in delays):
        raise UsageError("--startup-delays-s", f"{args.startup_delays_s!r}: every delay must be >= 0 s and finite")
    if not (math.isfinite(args.image_fraction) and 0 <= args.image_fraction <= 1):
        raise UsageError("--image-fraction", f"{args.image_fraction:g} is not in [0, 1]; e.g. 0.5")
    if args.seed < 0:
        raise UsageError("--seed", f"{args.seed} must be >= 0")
    policies = tuple(p.strip() for p in args.policies.split(",") if p.strip())
    if not policies:
        raise UsageError("--policies", f"name at least one of {','.join(POLICIES)}")
    if "fixed" in policies:
        raise UsageError("--policies", "fixed pools have no single size to simulate; --sweep sweeps every size "
                                       f"(choose among {','.join(POLICIES)})")
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise UsageError("--policies", f"unknown {','.join(unknown)}; choose among {','.join(POLICIES)}")
    return SimulationConfig(
        target_p95_ms=target,
        predictive_target_utilization_percent=util,
        startup_delay_s=args.startup_delay_s,
        startup_delay_p90_s=args.startup_delay_p90_s,
        startup_delay_samples_s=delays,
        service_source=args.service_source,
        policies=policies,
        random_state=args.seed,
    )


def run(args: argparse.Namespace) -> int:
    """Run the simulation and print the results; returns the exit code.

    Raises:
        UsageError: A bad flag or trace file (``modalscale`` prints it in one line and exits 2).
    """
    config = config_from_args(args)
    target = config.target_p95_ms
    trace = load_trace(args.trace, args.shift, args.image_fraction, args.seed)
    if len(trace) == 0:
        raise UsageError("--trace", f"{args.trace} holds no request (only a header); give a trace with requests")
    if args.sweep:
        sweep = run_sweep(trace, config)
        if args.json:
            print(json.dumps(sweep))
            return 0
        for p in sweep["points"]:
            param = "-" if p["param"] is None else f"{p['param']:g}"
            print(f"{p['policy']:<12} {param:>6} {'default' if p['default'] else '':<8} "
                  f"SLO-minutes {p['slo_minutes_fraction']:6.1%}  replica-hours {p['replica_hours']:7.2f}")
        return 0
    results = run_simulation(trace, config)
    summary = {
        name: {"slo_minutes_fraction": r["slo_minutes_fraction"], "replica_hours": r["replica_hours"]}
        for name, r in results.items()
    }
    if args.json:
        print(json.dumps(summary))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(
        title=f"{trace.name}: {len(trace)} requests, {trace.duration_s / 60:.0f} min, p95 target {target:g} ms"
    )
    for column in ("policy", "SLO-minutes", "replica-hours", "p95 ms", "reversals"):
        table.add_column(column, justify="left" if column == "policy" else "right")
    for name, r in results.items():
        table.add_row(
            name,
            f"{r['slo_minutes_fraction']:.1%}",
            f"{r['replica_hours']:.2f}",
            f"{r['p95_latency_ms']:.0f}",
            str(r["direction_reversals"]),
        )
    Console().print(table)
    return 0
