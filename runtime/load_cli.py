"""``modalscale load``: replay an arrival trace (or a synthetic Poisson one) against a running runtime and
report throughput and p50/p95/p99 latency per modality.

Trace CSV: ``arrival_s,image_count,image_width,image_height,text_tokens`` (see ``runtime/README.md``).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from modalscale.runtime.loadgen import LoadReport, replay
from modalscale.runtime.workload import read_trace, synthetic_trace, write_trace


def add_parser(subparsers: Any) -> None:
    """Register ``load``."""
    parser = subparsers.add_parser("load", help="Replay an arrival trace against the runtime and report latency")
    parser.add_argument("--url", default="127.0.0.1:8001", help="host:port of the gRPC (or HTTP) endpoint")
    parser.add_argument("--protocol", choices=["grpc", "http"], default="grpc")
    parser.add_argument("--model", default="multimodal")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--trace", type=Path, help="Trace CSV to replay")
    source.add_argument("--rate-rps", type=float, default=5.0, help="Synthetic Poisson trace: arrivals per second")
    parser.add_argument("--duration-s", type=float, default=30.0, help="Synthetic trace length in seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save-trace", type=Path, default=None, help="Write the replayed trace as CSV")
    parser.add_argument("--time-scale", type=float, default=1.0, help="Multiply arrival times (0.5 = 2x faster)")
    parser.add_argument("--repeat-images", action="store_true",
                        help="Send byte-identical images for equal photo and size (cache friendly)")
    parser.add_argument("--json", type=Path, default=None, help="Write the report as JSON")
    parser.set_defaults(func=run_load)


def run_load(args: argparse.Namespace) -> int:
    """Replay and print the report; returns 0, or 1 if any request failed.

    Raises:
        UsageError: a rate, duration or time scale that is not > 0 and finite, or a trace that cannot be read
            (``modalscale`` prints it in one line, naming the flag, and exits 2).
    """
    from modalscale.cli import positive_finite, reading

    positive_finite("--time-scale", args.time_scale, "0.5 (twice as fast)")
    if args.trace:
        with reading("--trace", args.trace, "a trace CSV", " (or --rate-rps for a synthetic one)"):
            trace = read_trace(args.trace)
    else:
        trace = synthetic_trace(positive_finite("--rate-rps", args.rate_rps, "5 (requests/s)"),
                                positive_finite("--duration-s", args.duration_s, "30 (s)"), args.seed)
    if args.save_trace:
        write_trace(trace, args.save_trace)
    report = asyncio.run(replay(trace, args.url, args.protocol, args.model, repeat_images=args.repeat_images,
                                time_scale=args.time_scale))
    print_report(report)
    if (hint := protocol_hint(report, args.protocol, args.url)) is not None:
        print(hint, file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(report_as_dict(report), indent=2), encoding="utf-8")
    return 1 if any(s.errors for s in report.stats) else 0


def protocol_hint(report: LoadReport, protocol: str, url: str) -> str | None:
    """What to check when every request failed: the port may speak the other protocol (Triton: HTTP 8000, gRPC
    8001; ``modalscale profile --url`` takes the HTTP one). None when any request was answered."""
    every = next((s for s in report.stats if s.modality == "all"), None)
    if every is None or every.requests == 0 or every.errors < every.requests:
        return None
    other = "http" if protocol == "grpc" else "grpc"
    return (f"modalscale load: every request failed over {protocol} to {url}: is it the {protocol} port "
            f"({'8001' if protocol == 'grpc' else '8000'} on Triton)? For the {other} port add --protocol {other}.")


def report_as_dict(report: LoadReport) -> dict[str, Any]:
    """JSON-ready form of the report."""
    return {"wall_s": report.wall_s, "stats": [dataclasses.asdict(s) for s in report.stats],
            "errors": report.errors}


def print_report(report: LoadReport, title: str = "Load report") -> None:
    """Print the per-modality table with rich."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{title} ({report.wall_s:.1f} s)")
    for column in ("modality", "requests", "errors", "throughput req/s", "p50 ms", "p95 ms", "p99 ms"):
        table.add_column(column, justify="left" if column == "modality" else "right")
    for s in report.stats:
        table.add_row(s.modality, str(s.requests), str(s.errors), f"{s.throughput_rps:.2f}", f"{s.p50_ms:.0f}",
                      f"{s.p95_ms:.0f}", f"{s.p99_ms:.0f}")
    console = Console()
    console.print(table)
    for message, count in report.errors.items():
        console.print(f"[red]{count} x {message}[/red]")
