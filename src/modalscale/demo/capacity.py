"""Measured capacity of the demo's scale-ups (pure): p95 and throughput under the same offered load before and after
each scale-up, time from the decision to the new replicas Ready, and the budget's scale-down of real pods.

Times are seconds since the replay started (``t_s``). Requests are ``(arrival_s, latency_ms, modality, ok)``
records of the open-loop replay: ``latency_ms`` runs from the request's scheduled arrival to its answer, so any
wait on the client side counts too. Decisions come from the InferenceService's ``status.scalingHistory``
(RFC 3339, 1 s resolution); Ready times from each pod's ``Ready`` condition ``lastTransitionTime`` (1 s resolution).
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from modalscale.api.isvc_status import ScalingChange

Record = tuple[float, float, str, bool]
"""(arrival_s, latency_ms, modality, ok) of one replayed request."""

NOT_AUTOSCALER = ("CappedByBudget", "FixedReplicas", "Activated")
"""scalingHistory reasons that are not the autoscaler's scale-ups under load, whose capacity the demo measures: a
budget's cap, Fixed mode's replicas, and a start from zero (``Activated``, 0 -> 1 for a request the gateway holds:
no capacity before it to compare with; the demo reports it apart). Counted as one, the demo's own start from zero
armed the budget story before the replay began (a run at c94f82f)."""
SETTLE_S = 15.0
"""Seconds after the new replicas are Ready before the 'after' window opens (the old replica's queue drains)."""
WINDOW_S = 30.0
"""Longest 'after' window, seconds."""
MIN_WINDOW_REQUESTS = 10
"""A window with fewer answered requests is too small to judge."""
SAME_LOAD_TOLERANCE = 0.15
"""The offered rates of the two windows may differ by this share, or by twice the Poisson counting noise of the two
windows' arrivals (``2 * sqrt(1/n_before + 1/n_after)``), whichever is larger, and still count as the same offered
load (one trace at a constant rate: a short window's count alone varies by that much)."""


def wall_to_t(rfc3339: str, t0_wall: float) -> float:
    """Seconds between the replay start ``t0_wall`` (epoch seconds) and an RFC 3339 timestamp (``...Z``)."""
    return dt.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp() - t0_wall


@dataclass
class PodRecord:
    """One pod of the InferenceService as the demo saw it (times in ``t_s``; None = not (yet) seen)."""

    name: str
    node: str | None
    node_real: bool | None
    created_s: float
    ready_s: float | None = None
    deleted_s: float | None = None


@dataclass
class WindowStats:
    """Requests that arrived in ``[start_s, end_s)``.

    Attributes:
        offered_rps: Arrivals per second (the trace's offered load in the window).
        throughput_rps: Answers completed per second in the window (whatever their arrival).
        p95_ms: 95th percentile latency of the answered arrivals; None under ``MIN_WINDOW_REQUESTS``.
    """

    start_s: float
    end_s: float
    sent: int
    answered: int
    failed: int
    offered_rps: float
    throughput_rps: float
    p95_ms: float | None

    def line(self) -> str:
        p95 = f"{self.p95_ms:.0f} ms" if self.p95_ms is not None else "-"
        return (f"[{self.start_s:.0f}, {self.end_s:.0f}) s: offered {self.offered_rps:.2f} req/s, throughput "
                f"{self.throughput_rps:.2f} req/s, p95 {p95} ({self.answered} answered, {self.failed} failed)")


@dataclass
class ScaleUp:
    """One scale-up (consecutive decisions taken before the previous one's replicas were Ready are merged)."""

    decision_s: float
    from_replicas: int
    to_replicas: int
    reasons: list[str]
    ready_s: float | None = None
    before: WindowStats | None = None
    after: WindowStats | None = None
    nodes: list[str] = field(default_factory=list)
    ready_replicas: int | None = None
    """Replicas Ready at ``ready_s``: ``to_replicas``, or fewer (but more than ``from_replicas``) when the full
    count was never Ready at once (a replica still starting when the budget removed it): the capacity actually
    added, which the windows then measure."""

    @property
    def decision_to_ready_s(self) -> float | None:
        return None if self.ready_s is None else self.ready_s - self.decision_s


def p95(values: list[float]) -> float | None:
    """Inclusive 95th percentile; None under ``MIN_WINDOW_REQUESTS`` values."""
    if len(values) < MIN_WINDOW_REQUESTS:
        return None
    return statistics.quantiles(values, n=20, method="inclusive")[18]


def window_stats(records: list[Record], start_s: float, end_s: float) -> WindowStats:
    """Offered load, throughput and p95 of the window ``[start_s, end_s)`` (see :class:`WindowStats`).

    Raises:
        ValueError: ``end_s <= start_s``.
    """
    if end_s <= start_s:
        raise ValueError(f"empty window [{start_s}, {end_s})")
    span = end_s - start_s
    arrived = [r for r in records if start_s <= r[0] < end_s]
    ok = [r for r in arrived if r[3]]
    completed = [r for r in records if r[3] and start_s <= r[0] + r[1] / 1000 < end_s]
    return WindowStats(start_s, end_s, len(arrived), len(ok), len(arrived) - len(ok), len(arrived) / span,
                       len(completed) / span, p95([r[1] for r in ok]))


def ready_count_at(pods: list[PodRecord], t_s: float) -> int:
    """Pods Ready at ``t_s`` and not yet deleted."""
    return sum(1 for p in pods if p.ready_s is not None and p.ready_s <= t_s
               and (p.deleted_s is None or p.deleted_s > t_s))


def ready_time(pods: list[PodRecord], replicas: int, after_s: float) -> float | None:
    """First time at or after ``after_s`` when ``replicas`` pods were Ready at once; None if never seen."""
    for t in sorted({p.ready_s for p in pods if p.ready_s is not None and p.ready_s >= after_s} | {after_s}):
        if ready_count_at(pods, t) >= replicas:
            return t
    return None


def _ready_step(pods: list[PodRecord], frm: int, to: int, after_s: float) -> tuple[float | None, int | None]:
    """``(time, count)``: when ``to`` replicas were first Ready at once after ``after_s``, else the largest count
    above ``frm`` that was; ``(None, None)`` when no replica was added."""
    for n in range(to, frm, -1):
        t = ready_time(pods, n, after_s)
        if t is not None:
            return t, n
    return None, None


def scale_ups(history: Sequence[ScalingChange], t0_wall: float, pods: list[PodRecord]) -> list[ScaleUp]:
    """The autoscaler's scale-ups from ``status.scalingHistory``, each with the time its replicas were all Ready
    (or, when they never all were, the time the most of them were: ``ScaleUp.ready_replicas``).

    A decision taken while the previous scale-up's replicas were still starting joins it (1 -> 2 -> 3 before the
    second pod was Ready is one scale-up 1 -> 3): there was no moment with the intermediate capacity to measure.
    """
    out: list[ScaleUp] = []
    for h in history:
        if h.to_replicas <= h.from_replicas or h.reason in NOT_AUTOSCALER:
            continue
        t = h.time.timestamp() - t0_wall
        if out and (out[-1].ready_s is None or t < out[-1].ready_s):
            last = out[-1]
            last.to_replicas = h.to_replicas
            last.reasons.append(h.reason)
            last.ready_s, last.ready_replicas = _ready_step(pods, last.from_replicas, last.to_replicas,
                                                            last.decision_s)
            continue
        out.append(ScaleUp(t, h.from_replicas, h.to_replicas, [h.reason],
                           *_ready_step(pods, h.from_replicas, h.to_replicas, t)))
    for up in out:
        if up.ready_s is None:
            up.ready_replicas = None
        up.nodes = sorted({p.node for p in pods if p.node and p.created_s >= up.decision_s - 1.0
                           and (up.ready_s is None or p.created_s <= up.ready_s)})
    return out


def measure(ups: list[ScaleUp], records: list[Record], end_s: float, budget_cap_s: float | None,
            settle_s: float = SETTLE_S, window_s: float = WINDOW_S) -> list[ScaleUp]:
    """Fill each scale-up's ``before`` (arrivals from the decision until its replicas were Ready: the old
    capacity under the new load) and ``after`` window (from ``settle_s`` after Ready, at most ``window_s``, cut at
    the next scale-up's decision, the budget's first cap and the end of the replay ``end_s``)."""
    for i, up in enumerate(ups):
        if up.ready_s is None:
            continue
        if up.ready_s - up.decision_s >= 1.0:
            up.before = window_stats(records, up.decision_s, up.ready_s)
        stop = min([end_s, up.ready_s + settle_s + window_s]
                   + ([ups[i + 1].decision_s] if i + 1 < len(ups) else [])
                   + ([budget_cap_s] if budget_cap_s is not None and budget_cap_s > up.ready_s else []))
        if stop - (up.ready_s + settle_s) >= 5.0:
            up.after = window_stats(records, up.ready_s + settle_s, stop)
    return ups


def judge_scale_ups(ups: list[ScaleUp], slo_ms: float) -> tuple[bool, str]:
    """PASS when at least one scale-up found the service over its SLO, and every such scale-up lowered the
    measured p95 under the same offered load (offered rates within ``SAME_LOAD_TOLERANCE``).

    A scale-up whose 'before' p95 was within the SLO (headroom ahead of demand) is reported, not judged: there was
    no overload to lower. The same offered load: see ``SAME_LOAD_TOLERANCE``. Returns ``(ok, what was seen)``.
    """
    judged, lines, ok = 0, [], True
    for up in ups:
        head = f"{up.from_replicas}->{up.to_replicas} at {up.decision_s:.0f} s"
        b, a = up.before, up.after
        if b is None or a is None or b.p95_ms is None or a.p95_ms is None:
            lines.append(f"{head}: not measured (before {b.line() if b else '-'}; after {a.line() if a else '-'})")
            continue
        tolerance = max(SAME_LOAD_TOLERANCE, 2 * math.sqrt(1 / max(b.sent, 1) + 1 / max(a.sent, 1)))
        same = abs(a.offered_rps - b.offered_rps) <= tolerance * max(b.offered_rps, 1e-9)
        figures = (f"p95 {b.p95_ms:.0f} -> {a.p95_ms:.0f} ms, throughput {b.throughput_rps:.2f} -> "
                   f"{a.throughput_rps:.2f} req/s at offered {b.offered_rps:.2f} / {a.offered_rps:.2f} req/s")
        if b.p95_ms <= slo_ms:
            lines.append(f"{head}: {figures} (within the SLO before: not judged)")
            continue
        judged += 1
        lowered = a.p95_ms < b.p95_ms
        ok = ok and lowered and same
        lines.append(f"{head}: {figures}" + ("" if lowered else " (p95 NOT lowered)")
                     + ("" if same else " (offered load differs)"))
    if judged == 0:
        ok = False
        lines.append("no scale-up was measured over the SLO")
    return ok, "; ".join(lines) if lines else "no scale-up"


def budget_scale_downs(history: Sequence[ScalingChange]) -> list[ScalingChange]:
    """The budget's scale-downs (``CappedByBudget`` to fewer replicas) of ``status.scalingHistory``."""
    return [h for h in history if h.reason == "CappedByBudget" and h.to_replicas < h.from_replicas]


def judge_budget_scale_down(history: Sequence[ScalingChange], t0_wall: float, pods: list[PodRecord], sent: int,
                            answered: int, failed: int) -> tuple[bool, str]:
    """PASS when the budget's scale-down (CappedByBudget to fewer replicas) deleted at least one pod on the real
    node and no request failed: every request sent was answered. Returns ``(ok, what was seen)``."""
    caps = budget_scale_downs(history)
    if not caps:
        return False, f"no budget scale-down; sent {sent}, answered {answered}, failed {failed}"
    first = caps[0].time.timestamp() - t0_wall
    removed = [p for p in pods if p.deleted_s is not None and p.deleted_s >= first - 1.0]
    real = [p for p in removed if p.node_real]
    ok = bool(real) and failed == 0 and sent == answered
    steps = ", ".join(f"{h.from_replicas}->{h.to_replicas}" for h in caps)
    return ok, (f"{steps}; pods removed {', '.join(f'{p.name} on {p.node}' for p in removed) or 'none'} "
                f"({len(real)} on the real node); requests sent {sent}, answered {answered}, failed {failed}")


OVERLOAD_FACTOR = 1.3
"""Post-shift rate of the demo's trace as a multiple of one replica's measured capacity on the post-shift mix: after
the shift one replica is overloaded (its queue grows at 0.3x its capacity, so p95 leaves the SLO within seconds),
two replicas run at 65 % and three at 43 %. Not more: the budget later scales back to one replica while the
post-shift load lasts, and that replica's backlog grows at the same 0.3x (at 1.4x, with 2Gi per replica, the
backlog's full batches of large images OOM-killed the runtime's Python backend)."""
PRE_SHIFT_UTILIZATION = 0.15
"""Pre-shift rate as a share of one replica's measured capacity on the pre-shift mix. The probe's closed loop keeps
8 requests in flight, so Triton batches them; the open-loop replay at a low rate mostly runs batches of 1-2, and the
autoscaler's service-time model is fitted per request. Two runs that kept the post-shift rate before the shift (30 %
and 35 % of the measured pre-shift capacity, 6.4 and 6.7 req/s) had one replica over the SLO 18-25 s into the
replay, before any scale-up, with other work on the shared machine at load average 6-15; a run at a constant 3 req/s
(about 15 %) kept the pre-shift p95 at 50-100 ms."""


@dataclass(frozen=True)
class LoadPlan:
    """The demo's offered rates, sized from one replica's measured capacity (closed loop through the Service).

    The trace's rate steps up at the modality shift, from ``rate_before_rps`` to ``rate_after_rps``; each scale-up's
    before/after windows lie after the shift, so they see the same offered rate.

    Attributes:
        rate_before_rps: Arrival rate before the shift, req/s.
        rate_after_rps: Arrival rate from the shift on, req/s.
        pre_capacity_rps: One replica's measured throughput on the pre-shift mix, req/s.
        post_capacity_rps: One replica's measured throughput on the post-shift mix, req/s.
        overload: ``rate_after_rps / post_capacity_rps``: one replica's offered load after the shift.
        pre_utilization: ``rate_before_rps / pre_capacity_rps``: one replica's load before the shift.
    """

    rate_before_rps: float
    rate_after_rps: float
    pre_capacity_rps: float
    post_capacity_rps: float
    overload: float
    pre_utilization: float


def plan_offered_rate(pre_capacity_rps: float, post_capacity_rps: float, overload: float = OVERLOAD_FACTOR,
                      pre_utilization: float = PRE_SHIFT_UTILIZATION) -> LoadPlan:
    """The trace's rates: ``overload`` x one replica's post-shift capacity from the shift on, and before it
    ``pre_utilization`` x its pre-shift capacity (never more than the post-shift rate). An open-loop rate
    ``rho = rate / capacity > 1`` grows the queue by ``(rho - 1) x capacity`` requests per second (a single server
    past saturation), so p95 rises without bound until capacity is added. Rates are rounded to 0.01 req/s.

    Raises:
        ValueError: a capacity that is not a positive number (the probe answered nothing), ``overload`` <= 1 or
            ``pre_utilization`` outside (0, 1).
    """
    for name, value in (("pre_capacity_rps", pre_capacity_rps), ("post_capacity_rps", post_capacity_rps)):
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(f"{name} must be a positive number of req/s (did the capacity probe get answers?), "
                             f"got {value!r}")
    if not overload > 1:
        raise ValueError(f"overload must exceed 1 (one replica must be overloaded after the shift), got {overload!r}")
    if not 0 < pre_utilization < 1:
        raise ValueError(f"pre_utilization must be in (0, 1) (one replica serves the pre-shift mix), "
                         f"got {pre_utilization!r}")
    after = round(overload * post_capacity_rps, 2)
    before = round(min(pre_utilization * pre_capacity_rps, after), 2)
    return LoadPlan(before, after, pre_capacity_rps, post_capacity_rps, after / post_capacity_rps,
                    before / pre_capacity_rps)
