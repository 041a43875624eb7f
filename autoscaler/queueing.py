"""M/G/c queueing helpers: how many replicas a request rate needs to meet a p95 latency target.

A pool of ``replicas x slots_per_replica`` execution slots fed from one FCFS queue is modelled as a G/G/c queue
(c = slots), with arrivals at ``arrival_rps`` (Poisson by default, ``scv_arrival = 1``) and service times of
mean ``mean_service_ms`` and squared coefficient of variation ``scv_service``.

Formulas and sources:

- Erlang C (probability that an arrival waits, M/M/c), computed from the Erlang B recursion
  ``B(k) = a B(k-1) / (k + a B(k-1))``, ``C = c B / (c - a (1 - B))``; Kleinrock, *Queueing Systems* Vol. 1 (1975)
  eq. 3.40 and 3.46.
- Allen–Cunneen mean wait in G/G/c: ``Wq ~= C(c, a) / (c mu - lambda) * (ca^2 + cs^2) / 2``; A. O. Allen,
  *Probability, Statistics, and Queueing Theory*, 2nd ed., Academic Press (1990), §6; the ``(ca^2 + cs^2) / 2``
  factor is Kingman's heavy-traffic correction, J. F. C. Kingman, "The single server queue in heavy traffic",
  Proc. Cambridge Phil. Soc. 57 (1961) 902-904.
- Waiting-time tail: ``P(W > t) ~= C exp(-t / w)``, with ``w = Wq / C`` the mean conditional wait, so the mean
  matches Allen–Cunneen. Exact for M/M/c (Kleinrock 1975 eq. 3.40, ``w = 1 / (c mu - lambda)``); the exponential
  conditional wait for G/G/c is the standard approximation, e.g. W. Whitt, "Approximations for the GI/G/m queue",
  Production and Operations Management 2(2) (1993) 114-161.
- Response time ``R = W + S`` with ``S`` independent of ``W`` (FCFS) and ``S`` a gamma variable matched to
  ``mean_service_ms`` and ``scv_service`` (two-moment fit). ``P(R > t)`` is computed by Gauss–Legendre
  quadrature of the convolution; the p95 by bisection. For M/M/c this reproduces the exact response-time law
  (M/M/1: ``R ~ Exp(mu - lambda)``).
"""

from __future__ import annotations

import math
from typing import cast

import numpy as np
from numpy.typing import NDArray

_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(64)  # type: ignore[no-untyped-call]
_MIN_SCV = 0.01  # a gamma with shape 100 stands in for (near-)deterministic service


def offered_load_erlangs(arrival_rps: float, mean_service_ms: float) -> float:
    """Offered load ``a = lambda * E[S]`` in erlangs (busy slots needed on average)."""
    return arrival_rps * mean_service_ms / 1000.0


def erlang_b(servers: int, offered_erlangs: float) -> float:
    """Erlang B blocking probability for ``servers`` slots at ``offered_erlangs`` (stable recursion)."""
    if servers < 0 or offered_erlangs < 0:
        raise ValueError(f"need servers >= 0 and offered load >= 0, got {servers}, {offered_erlangs}")
    b = 1.0
    for k in range(1, servers + 1):
        b = offered_erlangs * b / (k + offered_erlangs * b)
    return b


def erlang_c(servers: int, offered_erlangs: float) -> float:
    """Erlang C: probability an arrival waits in M/M/c; 1.0 when ``offered_erlangs >= servers`` (unstable).

    Raises:
        ValueError: ``servers < 1`` or negative load.
    """
    if servers < 1:
        raise ValueError(f"servers must be >= 1, got {servers}")
    if offered_erlangs >= servers:
        return 1.0
    if offered_erlangs == 0:
        return 0.0
    b = erlang_b(servers, offered_erlangs)
    return servers * b / (servers - offered_erlangs * (1.0 - b))


def mmc_mean_wait_ms(arrival_rps: float, mean_service_ms: float, servers: int) -> float:
    """Exact M/M/c mean queueing delay ``C / (c mu - lambda)``, ms; ``inf`` when unstable."""
    return allen_cunneen_mean_wait_ms(arrival_rps, mean_service_ms, 1.0, servers, scv_arrival=1.0)


def allen_cunneen_mean_wait_ms(
    arrival_rps: float, mean_service_ms: float, scv_service: float, servers: int, scv_arrival: float = 1.0
) -> float:
    """Allen–Cunneen approximation of the mean queueing delay in G/G/c, ms (exact for M/M/c).

    Args:
        arrival_rps: Arrival rate, requests/s.
        mean_service_ms: Mean service time per request, ms.
        scv_service: Squared coefficient of variation of service time (1 = exponential).
        servers: Execution slots c >= 1.
        scv_arrival: SCV of inter-arrival times (1 = Poisson).
    Returns:
        Mean wait in ms; ``inf`` when the load is >= ``servers``.
    """
    a = offered_load_erlangs(arrival_rps, mean_service_ms)
    if a >= servers:
        return math.inf
    if a == 0:
        return 0.0
    spare_rate_per_ms = (servers - a) / mean_service_ms  # c mu - lambda, per ms
    return erlang_c(servers, a) / spare_rate_per_ms * (scv_arrival + scv_service) / 2.0


def _gamma_sf(t_ms: NDArray[np.float64], mean_ms: float, scv: float) -> NDArray[np.float64]:
    # Imported here, not at the top: scipy.special adds ~11 MB to the operator's RSS, needed only once a service is
    # sized by the queueing model (tests/unit/test_operator_imports.py keeps it out of the idle operator).
    from scipy.special import gammaincc

    scv = max(scv, _MIN_SCV)
    shape = 1.0 / scv
    return cast(NDArray[np.float64], gammaincc(shape, np.maximum(t_ms, 0.0) / (mean_ms * scv)))


def response_tail_probability(
    t_ms: float,
    arrival_rps: float,
    mean_service_ms: float,
    scv_service: float,
    servers: int,
    scv_arrival: float = 1.0,
) -> float:
    """Approximate ``P(response time > t_ms)`` (wait + service) in G/G/c; 1.0 when unstable.

    See the module docstring for the approximation and its sources.
    """
    if t_ms <= 0:
        return 1.0
    a = offered_load_erlangs(arrival_rps, mean_service_ms)
    if a >= servers:
        return 1.0
    service_sf = float(_gamma_sf(np.array([t_ms]), mean_service_ms, scv_service)[0])
    if a == 0:
        return service_sf
    p_wait = erlang_c(servers, a)
    # Allen-Cunneen's mean wait divided by P(wait), in closed form (no 0/0 when P(wait) underflows).
    mean_wait_if_waiting = mean_service_ms / (servers - a) * (scv_arrival + scv_service) / 2.0
    if p_wait <= 0.0 or not mean_wait_if_waiting > 0.0:
        # Waiting is negligible (P(wait) underflowed), or none at all: both SCVs 0 (D/D/c) has no queue when stable.
        return service_sf
    theta = 1.0 / mean_wait_if_waiting
    # P(W' + S > t) for W' ~ Exp(theta): e^{-theta t} + int_0^t theta e^{-theta w} P(S > t - w) dw
    w = 0.5 * t_ms * (_GL_NODES + 1.0)
    integral = 0.5 * t_ms * float(
        np.sum(_GL_WEIGHTS * theta * np.exp(-theta * w) * _gamma_sf(t_ms - w, mean_service_ms, scv_service))
    )
    waited_sf = math.exp(-theta * t_ms) + integral
    return min(1.0, (1.0 - p_wait) * service_sf + p_wait * waited_sf)


def response_quantile_ms(
    arrival_rps: float,
    mean_service_ms: float,
    scv_service: float,
    servers: int,
    quantile: float = 0.95,
    scv_arrival: float = 1.0,
) -> float:
    """Approximate response-time quantile (default p95), ms; ``inf`` when unstable.

    Raises:
        ValueError: ``quantile`` outside (0, 1) or ``mean_service_ms <= 0``.
    """
    if not 0 < quantile < 1:
        raise ValueError(f"quantile must be in (0, 1), got {quantile}")
    if mean_service_ms <= 0:
        raise ValueError(f"mean_service_ms must be > 0, got {mean_service_ms}")
    if offered_load_erlangs(arrival_rps, mean_service_ms) >= servers:
        return math.inf
    tail = 1.0 - quantile

    def exceeds(t: float) -> bool:
        return response_tail_probability(t, arrival_rps, mean_service_ms, scv_service, servers, scv_arrival) > tail

    hi = mean_service_ms
    while exceeds(hi):
        hi *= 2.0
    lo = 0.0
    while hi - lo > 1e-3 * hi:  # 0.1 %
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if exceeds(mid) else (lo, mid)
    return hi


def slo_attainable(mean_service_ms: float, scv_service: float, target_ms: float, quantile: float = 0.95) -> bool:
    """Whether the target is reachable at all: service time alone (no queueing) meets the quantile."""
    return float(_gamma_sf(np.array([target_ms]), mean_service_ms, scv_service)[0]) <= 1.0 - quantile


def replicas_for_slo(
    arrival_rps: float,
    mean_service_ms: float,
    scv_service: float,
    slots_per_replica: int,
    target_p95_ms: float,
    target_utilization_ratio: float,
    max_replicas: int,
    scv_arrival: float = 1.0,
    quantile: float = 0.95,
) -> int:
    """Least replicas meeting BOTH the p95 response-time target and the utilization target.

    Utilization target: ``a / (c * slots_per_replica) <= target_utilization_ratio``. Latency target:
    ``P(R > target_p95_ms) <= 1 - quantile`` with the approximation of :func:`response_tail_probability`.

    Args:
        arrival_rps: Arrival rate, requests/s (>= 0).
        mean_service_ms: Mean service time, ms (> 0 when ``arrival_rps > 0``).
        scv_service: Service-time SCV (>= 0).
        slots_per_replica: Concurrent execution slots per replica (>= 1).
        target_p95_ms: Response-time target at ``quantile``, ms.
        target_utilization_ratio: Highest acceptable slot utilization, in (0, 1].
        max_replicas: Search limit; returned when no smaller count meets both targets (check with
            :func:`slo_attainable`: if service time alone misses the target, no count does).
        scv_arrival: Inter-arrival SCV (1 = Poisson).
        quantile: Latency quantile of the target (0.95).
    Returns:
        Replicas in ``[0, max_replicas]``; 0 when ``arrival_rps == 0``.
    Raises:
        ValueError: a bound above is violated.
    """
    if arrival_rps < 0 or scv_service < 0 or slots_per_replica < 1 or max_replicas < 0 or target_p95_ms <= 0:
        raise ValueError(
            "need arrival_rps >= 0, scv_service >= 0, slots_per_replica >= 1, max_replicas >= 0, target_p95_ms > 0; "
            f"got {arrival_rps}, {scv_service}, {slots_per_replica}, {max_replicas}, {target_p95_ms}"
        )
    if not 0 < target_utilization_ratio <= 1:
        raise ValueError(f"target_utilization_ratio must be in (0, 1], got {target_utilization_ratio}")
    if arrival_rps == 0:
        return 0
    if mean_service_ms <= 0:
        raise ValueError(f"mean_service_ms must be > 0 when arrival_rps > 0, got {mean_service_ms}")
    a = offered_load_erlangs(arrival_rps, mean_service_ms)
    lo = max(1, math.ceil(a / (slots_per_replica * target_utilization_ratio) - 1e-9))
    if lo >= max_replicas:
        return max_replicas
    if not slo_attainable(mean_service_ms, scv_service, target_p95_ms, quantile):
        return max_replicas
    tail = 1.0 - quantile

    def meets(c: int) -> bool:
        p = response_tail_probability(
            target_p95_ms, arrival_rps, mean_service_ms, scv_service, c * slots_per_replica, scv_arrival
        )
        return p <= tail

    if meets(lo):
        return lo
    if not meets(max_replicas):
        return max_replicas
    bad, good = lo, max_replicas  # meets() is monotone in c
    while good - bad > 1:
        mid = (bad + good) // 2
        bad, good = (bad, mid) if meets(mid) else (mid, good)
    return good
