"""M/G/c helpers against closed forms and table values computed by hand."""

from __future__ import annotations

import math

import pytest

from modalscale.autoscaler.queueing import (
    allen_cunneen_mean_wait_ms,
    erlang_b,
    erlang_c,
    mmc_mean_wait_ms,
    offered_load_erlangs,
    replicas_for_slo,
    response_quantile_ms,
    response_tail_probability,
    slo_attainable,
)


@pytest.mark.parametrize(
    ("servers", "erlangs", "expected"),
    [
        (1, 0.5, 0.5),  # M/M/1: P(wait) = rho
        (2, 1.0, 1 / 3),  # M/M/2: 2 rho^2 / (1 + rho) at rho = 0.5
        (2, 0.5, 0.1),  # B(2, .5) = 1/13 -> C = (2/13) / (2 - 0.5 * 12/13)
        (10, 8.0, 0.4092),  # Erlang C table, 10 agents at 8 erlangs
    ],
    ids=["mm1", "mm2-half", "mm2-quarter", "table-10-8"],
)
def test_erlang_c_matches_hand_and_table_values(servers: int, erlangs: float, expected: float) -> None:
    assert erlang_c(servers, erlangs) == pytest.approx(expected, abs=5e-5)


def test_erlang_b_two_servers_one_erlang_is_one_fifth() -> None:
    assert erlang_b(2, 1.0) == pytest.approx(0.2)  # (1/2) / (2 + 1/2)


def test_erlang_c_is_one_when_overloaded() -> None:
    assert erlang_c(3, 3.0) == 1.0
    assert erlang_c(3, 5.0) == 1.0


def test_mm1_mean_wait_is_rho_over_mu_minus_lambda() -> None:
    # lambda = 5/s, mean 100 ms (mu = 10/s): Wq = 0.5 / 5 s = 100 ms
    assert mmc_mean_wait_ms(5.0, 100.0, 1) == pytest.approx(100.0)


def test_allen_cunneen_equals_pollaczek_khinchine_for_one_server() -> None:
    # M/D/1, lambda = 5/s, S = 100 ms: Wq = lambda E[S^2] / (2 (1 - rho)) = 5 * 0.01 / 1 s = 50 ms
    assert allen_cunneen_mean_wait_ms(5.0, 100.0, 0.0, 1) == pytest.approx(50.0)
    # M/G/1 with SCV 3: E[S^2] = 4 * 0.01 -> 200 ms
    assert allen_cunneen_mean_wait_ms(5.0, 100.0, 3.0, 1) == pytest.approx(200.0)


def test_mean_wait_is_infinite_when_unstable() -> None:
    assert math.isinf(allen_cunneen_mean_wait_ms(20.0, 100.0, 1.0, 2))


def test_mm1_response_p95_is_ln20_over_mu_minus_lambda() -> None:
    # M/M/1 response time ~ Exp(mu - lambda) = Exp(5/s): p95 = ln(20) / 5 s = 599.15 ms
    assert response_quantile_ms(5.0, 100.0, 1.0, 1) == pytest.approx(1000 * math.log(20) / 5, rel=1e-3)


@pytest.mark.parametrize("t_s", [0.05, 0.2, 0.59, 1.0])
def test_mm2_response_tail_matches_hand_derived_closed_form(t_s: float) -> None:
    # M/M/2, lambda = 5/s, mu = 10/s: C = 0.1, theta = 2 mu - lambda = 15/s
    # P(R > t) = 0.9 e^{-10t} + 0.1 [e^{-15t} + 3 e^{-10t} (1 - e^{-5t})] = 1.2 e^{-10t} - 0.2 e^{-15t}
    expected = 1.2 * math.exp(-10 * t_s) - 0.2 * math.exp(-15 * t_s)
    assert response_tail_probability(1000 * t_s, 5.0, 100.0, 1.0, 2) == pytest.approx(expected, rel=1e-4)


def test_no_load_response_quantile_is_the_service_quantile() -> None:
    # exponential service, no queueing: p95 = ln(20) * mean
    assert response_quantile_ms(1e-9, 100.0, 1.0, 1) == pytest.approx(100 * math.log(20), rel=1e-3)


@pytest.mark.parametrize(("servers", "erlangs"), [(2, 1.0), (5, 0.5), (5, 4.5), (40, 39.0)])
def test_deterministic_arrivals_and_service_never_queue_while_stable(servers: int, erlangs: float) -> None:
    # D/D/c (both SCVs 0): Allen-Cunneen's wait is 0, so the tail is the service time's own (the staged
    # simulator's pool divided by zero here at d06fc87, when the forecast was first sized at utilization 1.0)
    service_only = response_tail_probability(300.0, 0.0, 100.0, 0.0, servers)
    tail = response_tail_probability(300.0, erlangs * 10.0, 100.0, 0.0, servers, scv_arrival=0.0)
    assert tail == pytest.approx(service_only)
    # the least count above the load (at the load itself it is unstable)
    assert replicas_for_slo(erlangs * 10.0, 100.0, 0.0, 1, 300.0, 1.0, 100, scv_arrival=0.0) == math.floor(erlangs) + 1
    # a vanishing P(wait) (many servers, little load) is the service time's tail: exponential, e^-3 at 3 means
    assert response_tail_probability(300.0, 1.0, 100.0, 1.0, 400) == pytest.approx(math.exp(-3.0), rel=1e-6)


def test_a_p_wait_at_the_smallest_float_is_no_wait_not_a_division_by_zero() -> None:
    # The staged benchmark's servegen-peak-hour, seed 2, at d06fc87: replicas_for_slo's bisection tried 201 servers
    # for 1.87 erlangs; P(wait) was 5e-324, Allen-Cunneen's mean wait underflowed to 0 and 0 / P(wait) = 0 was
    # divided into 1 (ZeroDivisionError). The operator's sizer searches up to 2 x maxReplicas + 1 servers too.
    args = dict(t_ms=1302.5982402678067, arrival_rps=18.935336506526305, mean_service_ms=98.57791962367371,
                scv_service=0.6044297550092614, servers=201, scv_arrival=10.020816630800173)
    assert erlang_c(201, offered_load_erlangs(args["arrival_rps"], args["mean_service_ms"])) == 5e-324
    service_only = response_tail_probability(args["t_ms"], 0.0, args["mean_service_ms"], args["scv_service"], 1)
    assert response_tail_probability(**args) == pytest.approx(service_only, rel=1e-9)


def test_response_quantile_falls_as_servers_are_added() -> None:
    values = [response_quantile_ms(40.0, 100.0, 1.5, c) for c in range(5, 12)]
    assert all(a > b for a, b in zip(values, values[1:]))


def test_replicas_for_slo_utilization_bound_by_hand() -> None:
    # 10 req/s x 100 ms = 1 erlang; at 50 % target utilization 2 replicas; p95 target loose
    assert replicas_for_slo(10.0, 100.0, 1.0, 1, 10_000.0, 0.5, 100) == 2
    # two slots per replica halve it
    assert replicas_for_slo(10.0, 100.0, 1.0, 2, 10_000.0, 0.5, 100) == 1


def test_replicas_for_slo_latency_bound_by_hand() -> None:
    # M/M/1 at 5 req/s, 100 ms: p95 = 599.15 ms. A 600 ms target fits in 1 replica, 590 ms needs 2
    # (M/M/2: P(R > 0.59 s) = 1.2 e^-5.9 - 0.2 e^-8.85 = 0.0033 <= 0.05)
    assert replicas_for_slo(5.0, 100.0, 1.0, 1, 600.0, 1.0, 100) == 1
    assert replicas_for_slo(5.0, 100.0, 1.0, 1, 590.0, 1.0, 100) == 2


def test_replicas_for_slo_zero_traffic_needs_zero() -> None:
    assert replicas_for_slo(0.0, 100.0, 1.0, 1, 500.0, 0.7, 10) == 0


def test_unattainable_target_returns_max_replicas() -> None:
    # exponential 100 ms service: p95 alone is 300 ms > 200 ms
    assert not slo_attainable(100.0, 1.0, 200.0)
    assert replicas_for_slo(1.0, 100.0, 1.0, 1, 200.0, 0.7, 37) == 37


def test_replicas_for_slo_is_monotone_in_load() -> None:
    needs = [replicas_for_slo(rate, 250.0, 2.0, 1, 2000.0, 0.8, 500) for rate in range(1, 80, 3)]
    assert needs == sorted(needs)
    assert needs[-1] >= math.ceil(79 * 0.25 / 0.8)


@pytest.mark.parametrize(
    "kwargs",
    [dict(arrival_rps=-1.0), dict(slots_per_replica=0), dict(target_utilization_ratio=0.0), dict(target_p95_ms=0.0)],
    ids=["negative-rate", "no-slots", "zero-utilization", "zero-target"],
)
def test_replicas_for_slo_rejects_invalid_arguments(kwargs: dict) -> None:
    args = dict(arrival_rps=1.0, mean_service_ms=100.0, scv_service=1.0, slots_per_replica=1, target_p95_ms=500.0,
                target_utilization_ratio=0.7, max_replicas=10)
    args.update(kwargs)
    with pytest.raises(ValueError):
        replicas_for_slo(**args)
