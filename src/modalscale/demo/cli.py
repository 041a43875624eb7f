"""``modalscale demo``: run the product's main job end to end on this machine."""

from __future__ import annotations

import argparse
import math
import signal
import sys
from pathlib import Path
from typing import Any


def add_parser(sub: Any) -> None:
    """Register ``demo`` on ``sub`` (an argparse subparsers action)."""
    p = sub.add_parser("demo", help="local cluster with a real node: real pods, Prometheus, scaling and budget, live")
    p.add_argument("--duration", type=float, default=300.0, help="seconds of generated trace (default 300)")
    p.add_argument("--trace", type=Path, default=None,
                   help="trace CSV (arrival_s,image_count,image_width,image_height,text_tokens) instead")
    p.add_argument("--rate", type=float, default=None,
                   help="constant requests per second of the generated trace (default: on the real node, 15%% of "
                        "one replica's measured capacity before the shift, 1.3x after it; KWOK-only, 3)")
    p.add_argument("--report-dir", type=Path, default=Path("reports"), help="where the report goes (default reports/)")
    p.add_argument("--no-live", action="store_true", help="plain log lines instead of the live view")
    node = p.add_mutually_exclusive_group()
    node.add_argument("--real-node", dest="real_node", action="store_true", default=None,
                      help="require the real node (an error where the machine cannot run one)")
    node.add_argument("--no-real-node", dest="real_node", action="store_false",
                      help="KWOK-only fallback: pods are fakes, one local Triton serves every request")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from modalscale.cli import UsageError, positive_finite
    from modalscale.demo.run import DemoConfig, run_demo
    from modalscale.devenv.checkout import NotACheckoutError, source_root

    try:
        source_root("modalscale demo")  # its images and CRDs come from the checkout: say so before a cluster starts
    except NotACheckoutError as exc:
        print(exc, file=sys.stderr)
        return 2
    if not (math.isfinite(args.duration) and args.duration >= 30):
        raise UsageError("--duration", f"{args.duration:g} must be >= 30 (seconds) and finite; e.g. 300")
    if args.rate is not None:
        positive_finite("--rate", args.rate, "3")
    if args.trace is not None and not args.trace.is_file():
        raise UsageError("--trace", f"{args.trace}: no such file; give a trace CSV or leave --trace out")
    cfg = DemoConfig(duration_s=args.duration, trace=args.trace, rate_rps=args.rate, report_dir=args.report_dir,
                     live=not args.no_live and sys.stdout.isatty(), real_node=args.real_node)
    if cfg.trace is None:
        from modalscale.demo.run import shift_at_s

        try:
            shift_at_s(cfg, real=cfg.real_node is not False)
        except ValueError as exc:  # names --duration and the fix
            print(f"modalscale demo: {exc}", file=sys.stderr)
            return 2
    stop_on_sigterm()
    return run_demo(cfg, say=lambda m: print(m, flush=True))


def stop_on_sigterm() -> None:
    """Make SIGTERM (``kill``, a CI time limit, a terminal closed under ``nohup``) stop the demo as Ctrl-C does:
    a ``KeyboardInterrupt`` in the main thread, so ``run_demo``'s ``finally`` stops the cluster, the operator,
    Prometheus and the load it started. Python's default for SIGTERM ends the process at once, which left a
    control plane, a kubelet and containerd running with the real node held (seen 3 Dec 2026)."""

    def interrupt(_signum: int, _frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one teardown: a second SIGTERM must not cut it short
        raise KeyboardInterrupt("SIGTERM")

    signal.signal(signal.SIGTERM, interrupt)
