"""``modalscale simulate``: replay a trace under the predictive, HPA-like, KPA-like and oracle policies.

Without ``--trace`` it uses the generated trace (``traces.generate_trace``; ``--shift`` for the modality-shift
trace). ``--trace`` takes modalscale's trace CSV or Azure's LLM trace CSV (recognised by its header).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from modalscale.autoscaler.simulate import POLICIES, SimulationConfig, run_simulation
from modalscale.autoscaler.traces import (
    ImageMix,
    Trace,
    TraceSpec,
    generate_trace,
    modality_shift_trace,
    read_azure_llm_trace,
    read_trace_csv,
)


def load_trace(path: Path | None, shift: bool = False, image_fraction: float = 0.5, seed: int = 0) -> Trace:
    """The trace the command runs on: a file (format from its header), or a generated one.

    Raises:
        ValueError: the file's header matches neither known format.
    """
    if path is None:
        return modality_shift_trace(random_state=seed + 1) if shift else generate_trace(TraceSpec(random_state=seed))
    with path.open() as fh:
        header = fh.readline()
    if "TIMESTAMP" in header and "ContextTokens" in header:
        return read_azure_llm_trace(path, ImageMix(image_fraction=image_fraction), random_state=seed)
    if "arrival_s" in header:
        return read_trace_csv(path)
    raise ValueError(f"{path}: header {header.strip()!r} is neither a modalscale trace CSV nor an Azure LLM trace")


def add_parser(subparsers: Any) -> None:
    """Register ``simulate`` on the ``modalscale`` sub-command parser."""
    parser = subparsers.add_parser(
        "simulate",
        help="compare autoscaling policies on a request trace",
        description=__doc__.splitlines()[0],
    )
    parser.add_argument("--trace", type=Path, default=None, help="trace CSV (modalscale or Azure LLM format)")
    parser.add_argument("--shift", action="store_true", help="without --trace: use the modality-shift trace")
    parser.add_argument("--image-fraction", type=float, default=0.5,
                        help="Azure traces: fraction of requests given ServeGen-shaped images (default 0.5)")
    parser.add_argument("--target-p95-ms", type=float, default=None,
                        help="p95 latency target in ms (default 2000; 5000 with --shift)")
    parser.add_argument("--predictive-utilization-percent", type=float, default=80.0,
                        help="targetUtilizationPercent of the predictive policy (default 80)")
    parser.add_argument("--startup-delay-s", type=float, default=30.0, help="replica start-up delay in s")
    parser.add_argument("--policies", default=",".join(POLICIES), help=f"comma list out of {','.join(POLICIES)}")
    parser.add_argument("--seed", type=int, default=0, help="seed of generated traces and service times")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the simulation and print the results; returns the exit code."""
    trace = load_trace(args.trace, args.shift, args.image_fraction, args.seed)
    target = args.target_p95_ms if args.target_p95_ms is not None else (5000.0 if args.shift else 2000.0)
    config = SimulationConfig(
        target_p95_ms=target,
        predictive_target_utilization_percent=args.predictive_utilization_percent,
        startup_delay_s=args.startup_delay_s,
        policies=tuple(p.strip() for p in args.policies.split(",") if p.strip()),
        random_state=args.seed,
    )
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

    table = Table(title=f"{trace.name}: {len(trace)} requests, {trace.duration_s / 60:.0f} min, p95 target {target:g} ms")
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
