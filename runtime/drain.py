"""Wait until a Triton server has no request in flight, before it is sent SIGTERM.

Why: on SIGTERM, Triton 2.51 waits only for *queued* requests (its scheduler's in-flight count is the queue plus
the batch being formed, not the batch being executed), then unloads every model. A router model that is waiting
on a BLS (business logic scripting) call to a batched model is therefore invisible to Triton's drain; its
models are unloaded under it, and the requests fail or the server crashes (seen here: SIGSEGV in
``libtriton_python.so`` with ten 4-image requests in flight). The modalscale models export
``modalscale_inflight_requests`` (requests inside ``execute``); this module waits until that gauge and Triton's
``nv_inference_pending_request_count`` have both been 0 for ``quiet_s`` seconds, so Triton's own drain then has
nothing left to lose.

Used by ``modalscale runtime serve`` on SIGTERM, by :meth:`modalscale.runtime.server.TritonProcess.stop`, and as
the pod's ``preStop`` hook (``python3 -m modalscale.runtime.drain``), which Kubernetes runs before SIGTERM.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from modalscale.runtime.model.metrics import INFLIGHT_REQUESTS

PENDING_REQUESTS = "nv_inference_pending_request_count"
"""Triton's gauge of requests queued per model (not yet executing)."""


def inflight_requests(samples: Mapping[str, float]) -> float:
    """Requests in flight on one server: the sum of ``modalscale_inflight_requests`` and
    ``nv_inference_pending_request_count`` over all their label sets.

    Args:
        samples: Parsed ``/metrics`` (``{'name{labels}': value}``, see
            :func:`modalscale.runtime.client.parse_metrics`).
    Returns:
        The count (0.0 when neither series is exported, e.g. a user's own model with metrics off).
    """
    total = 0.0
    for key, value in samples.items():
        name = key.split("{", 1)[0]
        if name in (INFLIGHT_REQUESTS, PENDING_REQUESTS):
            total += value
    return total


@dataclass(frozen=True)
class DrainResult:
    """Outcome of :func:`wait_until_drained`."""

    drained: bool
    """True when nothing was in flight for ``quiet_s`` seconds before the deadline."""
    waited_s: float
    """Seconds spent waiting."""
    inflight: float | None
    """Requests in flight at the last successful scrape (None if no scrape succeeded)."""
    reason: str
    """``Drained``, ``Timeout`` or ``MetricsUnavailable`` (the server did not answer: nothing to wait for)."""


def wait_until_drained(scrape: Callable[[], Mapping[str, float]], timeout_s: float, quiet_s: float = 1.0,
                       poll_s: float = 0.1, clock: Callable[[], float] = time.monotonic,
                       sleep: Callable[[float], None] = time.sleep) -> DrainResult:
    """Poll ``scrape`` until :func:`inflight_requests` has been 0 for ``quiet_s`` seconds, or ``timeout_s`` passes.

    Args:
        scrape: Returns the parsed metrics; raising ``OSError`` or an ``httpx.HTTPError`` (any ``Exception``)
            means the server is not answering, and the wait ends at once (never blocks a shutdown on a dead
            endpoint).
        timeout_s: Longest wait, seconds.
        quiet_s: How long the server must stay idle, seconds (a request between two polls restarts it).
        poll_s: Seconds between scrapes.
        clock: Monotonic clock in seconds (injectable for tests).
        sleep: Sleep function (injectable for tests).
    Returns:
        A :class:`DrainResult`.
    """
    start = clock()
    idle_since: float | None = None
    last: float | None = None
    while True:
        now = clock()
        try:
            last = inflight_requests(scrape())
        except Exception:  # a dead or refusing endpoint has nothing left to drain
            return DrainResult(False, now - start, last, "MetricsUnavailable")
        if last > 0:
            idle_since = None
        elif idle_since is None:
            idle_since = now
        if idle_since is not None and now - idle_since >= quiet_s:
            return DrainResult(True, now - start, last, "Drained")
        if now - start >= timeout_s:
            return DrainResult(False, now - start, last, "Timeout")
        sleep(poll_s)


def drain_url(metrics_url: str, timeout_s: float, quiet_s: float = 1.0) -> DrainResult:
    """:func:`wait_until_drained` on Triton's ``/metrics`` at ``metrics_url`` (2 s per scrape)."""
    from modalscale.runtime.client import scrape_metrics

    return wait_until_drained(lambda: scrape_metrics(metrics_url, timeout_s=2.0), timeout_s, quiet_s)


def main(argv: list[str] | None = None) -> int:
    """``python -m modalscale.runtime.drain``: the pod's preStop hook. Always exits 0 (a hook failure would
    only add a warning Event; Triton's own drain still follows)."""
    parser = argparse.ArgumentParser(prog="python -m modalscale.runtime.drain", description=__doc__.split("\n")[0])
    parser.add_argument("--metrics-url", default="http://127.0.0.1:8002/metrics", help="Triton's /metrics URL")
    parser.add_argument("--timeout-s", type=float, default=30.0, help="Longest wait, seconds")
    parser.add_argument("--quiet-s", type=float, default=1.0, help="Seconds with nothing in flight")
    args = parser.parse_args(argv)
    result = drain_url(args.metrics_url, args.timeout_s, args.quiet_s)
    print(f"drain: {result.reason} after {result.waited_s:.1f} s (in flight: {result.inflight})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
