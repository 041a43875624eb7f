"""What Prometheus said about one InferenceService's traffic: the value the autoscaler's metrics parse returns.

A plain value type in its own module so that the operator's planner (``modalscale.operator.autoscale.plan``)
reads it without importing the Prometheus I/O (``modalscale.operator.autoscale.observe``).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field

from modalscale.autoscaler.policy import WorkloadClass


@dataclass(frozen=True)
class MetricsReading:
    """What Prometheus said about one InferenceService (pure data; made by the metrics parse).

    Attributes:
        observed_at: When the data were scraped (timezone-aware UTC): the oldest of the up targets' newest
            sample times (a target scraped minutes ago makes the reading that old, so stale); None = no target up.
        workload: Per-class traffic over the stable window; None = unusable (``problem`` says why); ``()`` = no
            traffic.
        recent_workload: Same over the recent window; None = not enough samples.
        busy_erlangs: Execution slots busy on average (sum over executing models); None = no Triton metrics.
        p95_latency_ms: Client-facing model's p95 request duration, ms (Triton summary quantiles when enabled
            with ``--metrics-config summary_latencies=true``); None = not exported.
        queued_requests: Requests waiting in Triton queues now; None = unknown.
        in_flight_requests: Requests in the service now, as the client sees them: the client-facing model's
            ``modalscale_inflight_requests`` (inside ``execute``; a router counts its requests until answered) plus
            its Triton pending count; None = unknown (either missing).
        targets_up: Scrape targets answering now.
        targets_total: Scrape targets Prometheus has for the InferenceService.
        down_targets: Each scrape target that is down, by pod identity: its ``pod`` (down when every scrape of
            it is), else its ``instance``.
        per_pod_targets: Every target carries a ``pod`` label (a PodMonitor or pod discovery: one target per
            replica), so the answering targets are compared with the ready replicas; otherwise (a shared or
            static target) with the targets Prometheus has.
        problem: ``(reason, message)`` when the reading is unusable or partial; None = complete.
        extra: Further numbers for status and metrics (mean latency ms, batch sizes ...).
        arrival_counts: Requests per ``COUNT_BIN_S`` bin, oldest first (bins without a value are left out); None =
            no answer or a non-finite count.
        in_flight_at: When ``in_flight_requests`` was scraped: the newest scrape of its source (the gateway's pods
            when the demand is the gateway's, else the replicas'), which ``observed_at`` (the older of the two sources'
            newest) need not be; None = ``observed_at``.
        gateway_targets_up: The request gateway's scrape targets answering now (pods; 0 without the gateway).
        gateway_targets_total: The gateway's scrape targets Prometheus has; 0 = demand read from the replicas
            (``spec.gateway.enabled`` false). A gateway target that is down is in ``down_targets`` too.
    """

    observed_at: dt.datetime | None
    workload: tuple[WorkloadClass, ...] | None
    recent_workload: tuple[WorkloadClass, ...] | None = None
    busy_erlangs: float | None = None
    p95_latency_ms: float | None = None
    queued_requests: float | None = None
    targets_up: int = 0
    targets_total: int = 0
    down_targets: tuple[str, ...] = ()
    per_pod_targets: bool = False
    problem: tuple[str, str] | None = None
    extra: Mapping[str, float] = field(default_factory=dict)
    arrival_counts: tuple[float, ...] | None = None
    in_flight_requests: float | None = None
    in_flight_at: dt.datetime | None = None
    gateway_targets_up: int = 0
    gateway_targets_total: int = 0

    @property
    def partial(self) -> bool:
        """Some scrape targets are down but the others were read."""
        return bool(self.down_targets) and self.targets_up > 0


def unavailable(reason: str, message: str) -> MetricsReading:
    """A reading with nothing in it (Prometheus not configured or unreachable)."""
    return MetricsReading(observed_at=None, workload=None, problem=(reason, message))


__all__ = ["MetricsReading", "unavailable"]
