"""Simulator sanity against queueing theory, policy behaviour in the simulator, and the CLI."""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from modalscale.autoscaler.simulate import POLICIES, SimulationConfig, replay_fixed, run_simulation
from modalscale.autoscaler.simulate_cli import add_parser
from modalscale.autoscaler.traces import ImageMix, Trace, TraceSpec, generate_trace, write_trace_csv


class ConstantModel:
    def __init__(self, ms: float) -> None:
        self.ms = ms

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.full(X.shape[0], self.ms)


def poisson_text_trace(rate_rps: float, duration_s: float, mean_service_ms: float, seed: int) -> Trace:
    """Poisson arrivals of identical text requests with exponential service times (an M/M/c workload)."""
    rng = np.random.default_rng(seed)
    arrival = np.cumsum(rng.exponential(1.0 / rate_rps, int(rate_rps * duration_s * 1.2)))
    arrival = arrival[arrival < duration_s]
    zeros = np.zeros(arrival.size, dtype=np.int64)
    return Trace(arrival, zeros, zeros, zeros, np.full(arrival.size, 100),
                 rng.exponential(mean_service_ms, arrival.size))


def mmc_response_tail(t_s: float, rate: float, mu: float, c: int) -> float:
    """P(R > t) in M/M/c, closed form, written independently of the module under test."""
    a = rate / mu
    head = sum(a**k / math.factorial(k) for k in range(c))
    top = a**c / math.factorial(c) * c / (c - a)
    p_wait = top / (head + top)
    theta = (c - a) * mu
    if math.isclose(theta, mu):  # integral of theta e^{-theta w} e^{-mu (t - w)} over [0, t] is theta t e^{-mu t}
        waited = math.exp(-theta * t_s) + theta * t_s * math.exp(-mu * t_s)
    else:
        waited = (math.exp(-theta * t_s)
                  + theta * math.exp(-mu * t_s) * (1 - math.exp(-(theta - mu) * t_s)) / (theta - mu))
    return (1 - p_wait) * math.exp(-mu * t_s) + p_wait * waited


def test_fixed_pool_mean_wait_matches_erlang_c() -> None:
    # M/M/3, 25 req/s, 100 ms: C(3, 2.5) = 0.7022, Wq = C / (3 mu - lambda) = 0.7022 / 5 s = 140.4 ms
    trace = poisson_text_trace(25.0, 1600.0, 100.0, seed=3)
    wait_ms = replay_fixed(trace, 3) - trace.service_ms
    assert wait_ms.mean() == pytest.approx(140.4, rel=0.1)


def test_constant_load_gets_the_mm_c_predicted_replicas() -> None:
    # 50 req/s x 100 ms exponential = 5 erlangs; p95 <= 350 ms needs c = 7 in M/M/c (6 gives 9 % above 350 ms)
    assert mmc_response_tail(0.35, 50, 10, 6) > 0.05 >= mmc_response_tail(0.35, 50, 10, 7)
    trace = poisson_text_trace(50.0, 600.0, 100.0, seed=7)
    config = SimulationConfig(
        target_p95_ms=350, predictive_target_utilization_percent=100, tolerance_percent=0,
        policies=("predictive",), initial_replicas=7,
        predictive_forecaster=None,  # the M/M/c sizing alone (the peak forecaster provisions for noisy 15 s bins)
    )
    result = run_simulation(trace, config, ConstantModel(100.0))["predictive"]
    settled = result["desired_replicas"][len(result["desired_replicas"]) // 2 :]
    assert set(settled) == {7}
    latency = replay_fixed(trace, 7)
    assert np.percentile(latency, 95) <= 350


def test_no_flapping_under_steady_load() -> None:
    trace = generate_trace(TraceSpec(duration_s=600, mean_rate_rps=20, rate_swing_ratio=0.0, random_state=5))
    # with HPA's 300 s scale-down window (the CRD default) not one reversal
    hpa_window = SimulationConfig(policies=("predictive",), predictive_scale_down_stabilization_s=300)
    assert run_simulation(trace, hpa_window)["predictive"]["direction_reversals"] == 0
    # the simulator's predictive default (60 s, forecast-driven scale-down) sits at a 7/8 boundary here: at most
    # one down-and-up in 10 minutes (measured: 2 reversals; 4 with a 30 s window)
    result = run_simulation(trace, SimulationConfig(policies=("predictive",)))["predictive"]
    assert result["direction_reversals"] <= 2


def test_more_image_traffic_at_equal_rate_needs_more_replicas() -> None:
    def mean_replicas(image_fraction: float) -> float:
        spec = TraceSpec(duration_s=600, mean_rate_rps=15, rate_swing_ratio=0.0, random_state=8,
                         mix=ImageMix(image_fraction=image_fraction))
        trace = generate_trace(spec)
        return run_simulation(trace, SimulationConfig(policies=("predictive",)))["predictive"]["mean_replicas"]

    assert mean_replicas(0.7) > 1.5 * mean_replicas(0.1)


def test_new_replicas_serve_only_after_the_startup_delay() -> None:
    trace = poisson_text_trace(50.0, 300.0, 100.0, seed=2)
    config = SimulationConfig(policies=("predictive",), initial_replicas=2, startup_delay_s=30, decision_interval_s=15)
    result = run_simulation(trace, config, ConstantModel(100.0))["predictive"]
    desired, ready = result["desired_replicas"], result["ready_replicas"]
    k = next(i for i, d in enumerate(desired) if d > 2)  # first scale-up (decisions are 15 s apart)
    assert ready[k] == 2 and ready[k + 1] == 2  # 0 s and 15 s after the decision: still starting
    assert ready[k + 2] >= desired[k]  # 30 s after: ready


def test_all_policies_report_metrics_in_range() -> None:
    trace = generate_trace(TraceSpec(duration_s=300, mean_rate_rps=10, random_state=3))
    results = run_simulation(trace, SimulationConfig())
    assert set(results) == set(POLICIES)
    for name, r in results.items():
        assert 0.0 <= r["slo_minutes_fraction"] <= 1.0, name
        assert r["replica_hours"] > 0, name
        assert len(r["minute_p95_ms"]) == 5
    assert results["oracle"]["slo_minutes_fraction"] == 1.0


def test_simulate_cli_prints_one_json_object(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = generate_trace(TraceSpec(duration_s=120, mean_rate_rps=5, random_state=1))
    write_trace_csv(trace, tmp_path / "trace.csv")
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["simulate", "--trace", str(tmp_path / "trace.csv"), "--json"])
    assert args.func(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"predictive", "utilization", "concurrency", "oracle"}
    for values in out.values():
        assert set(values) == {"slo_minutes_fraction", "replica_hours"}


# ------------------------------------------------------------------------- a truthful simulator (issue 11)


def test_startup_delays_follow_the_configured_law() -> None:
    assert SimulationConfig(startup_delay_s=30).startup_delays()() == 30.0
    draw = SimulationConfig(startup_delay_s=30, startup_delay_p90_s=90).startup_delays()
    delays = np.array([draw() for _ in range(4000)])
    assert np.median(delays) == pytest.approx(30, rel=0.06) and np.percentile(delays, 90) == pytest.approx(90, rel=0.08)
    measured = SimulationConfig(startup_delay_samples_s=(12.0, 47.0)).startup_delays()
    assert {measured() for _ in range(50)} == {12.0, 47.0}
    assert SimulationConfig(startup_delay_samples_s=(12.0, 47.0)).startup_horizon_s() == pytest.approx(43.5)
    with pytest.raises(ValueError, match="p90"):
        SimulationConfig(startup_delay_s=30, startup_delay_p90_s=10)


def test_each_new_replica_draws_its_own_startup_delay() -> None:
    trace = poisson_text_trace(50.0, 600.0, 100.0, seed=2)
    config = SimulationConfig(policies=("predictive",), initial_replicas=1, startup_delay_s=20,
                              startup_delay_samples_s=(20.0, 120.0), max_step_replicas=1, decision_interval_s=15)
    ready = run_simulation(trace, config, ConstantModel(100.0))["predictive"]["ready_replicas"]
    desired = run_simulation(trace, config, ConstantModel(100.0))["predictive"]["desired_replicas"]
    assert ready == run_simulation(trace, config, ConstantModel(100.0))["predictive"]["ready_replicas"]  # seeded
    assert max(desired) > 3 and ready != desired  # some replicas lag by 120 s, some by 20 s


def test_service_times_from_the_regressor_carry_its_residual_noise() -> None:
    from modalscale.autoscaler.simulate import residual_sigma, service_times_ms, train_default_model

    config = SimulationConfig(service_source="regressor")
    model = train_default_model(config)
    trace = generate_trace(TraceSpec(duration_s=300, mean_rate_rps=20, random_state=2))
    predicted = model.predict(trace.features())
    drawn = service_times_ms(trace, config, model)
    sigma = residual_sigma(model, config)
    assert 0.01 < sigma < 1.0
    ratio = np.log(drawn / predicted)
    assert ratio.std() == pytest.approx(sigma, rel=0.1)  # the draw's spread is the residual spread
    assert float(np.mean(drawn / predicted)) == pytest.approx(1.0, abs=0.02)  # mean-one noise
    with pytest.raises(ValueError, match="regressor"):
        service_times_ms(trace, config, None)


def test_arrivals_are_replayed_as_the_trace_has_them_and_counted_per_bin() -> None:
    from modalscale.autoscaler.simulate import _Metrics

    arrival = np.array([1.0, 2.0, 16.0, 17.0, 18.0, 44.0])
    zeros = np.zeros(6, dtype=np.int64)
    trace = Trace(arrival, zeros, zeros, zeros, np.full(6, 10), np.full(6, 50.0))
    metrics = _Metrics(trace, trace.service_ms)
    assert metrics.counts(45.0, 15.0, 600.0) == (2.0, 3.0, 1.0)  # bins (0,15], (15,30], (30,45] end at now
    assert metrics.counts(20.0, 15.0, 600.0) is None  # fewer than two whole bins
    fixed = run_simulation(trace, SimulationConfig(policies=("fixed",), fixed_replicas=2), ConstantModel(50.0))
    assert fixed["fixed"]["replica_hours"] == pytest.approx(2 * 60.0 / 3600.0)  # 2 replicas for the whole minute


def test_fixed_policy_needs_a_pool_size() -> None:
    with pytest.raises(ValueError, match="fixed_replicas"):
        SimulationConfig(policies=("fixed",))


def test_sweep_json_has_exactly_the_issue_interface(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = generate_trace(TraceSpec(duration_s=240, mean_rate_rps=8, random_state=1))
    write_trace_csv(trace, tmp_path / "trace.csv")
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["simulate", "--trace", str(tmp_path / "trace.csv"), "--sweep", "--json"])
    assert args.func(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"trace", "points"} and out["trace"] == "trace"
    policies = {"predictive", "utilization", "concurrency", "fixed", "oracle"}
    for p in out["points"]:
        assert set(p) == {"policy", "param", "default", "slo_minutes_fraction", "replica_hours",
                          "requests_over_slo", "burst_requests_over_slo"}
        assert p["policy"] in policies and isinstance(p["default"], bool)
        assert (p["param"] is None) == (p["policy"] == "oracle")
        assert 0 <= p["slo_minutes_fraction"] <= 1 and p["replica_hours"] > 0
    for name in policies:
        assert sum(1 for p in out["points"] if p["policy"] == name and p["default"]) == 1, name
    defaults = {p["policy"]: p["param"] for p in out["points"] if p["default"]}
    assert defaults["predictive"] == 90 and defaults["utilization"] == 70 and defaults["concurrency"] == 0.7
    fixed = sorted((p for p in out["points"] if p["policy"] == "fixed"), key=lambda p: p["param"])
    assert [p["replica_hours"] for p in fixed] == sorted(p["replica_hours"] for p in fixed)  # bigger pools cost more


def test_measured_arrival_scv_keeps_the_slo_on_bursty_arrivals_where_poisson_sizing_misses() -> None:
    # constant 10 req/s, gamma renewal arrivals with CV 3 (SCV 9); forecasts off to isolate the sizing
    trace = generate_trace(TraceSpec(duration_s=900, mean_rate_rps=10, rate_swing_ratio=0.0, arrival_cv=3.0,
                                     random_state=2))
    config = SimulationConfig(policies=("predictive",), target_p95_ms=1500, predictive_forecaster=None)
    aware = run_simulation(trace, config)["predictive"]
    poisson = run_simulation(trace, replace(config, predictive_burst_aware=False))["predictive"]
    # measured: 86.7 % vs 26.7 % SLO-minutes, for 1.55 vs 1.80 replica-hours (before issue 20's observed-queue
    # rule Poisson sizing got 20.0 % for 1.33: the rule now buys back a few minutes late, at more cost)
    assert aware["slo_minutes_fraction"] >= poisson["slo_minutes_fraction"] + 0.3


def test_long_requests_under_a_model_predicting_ms_scale_up_on_the_observation() -> None:
    # issue 20's shape: ~0.1 req/s of long requests (lognormal, median 20 s, capped at 70 s) plus one client's
    # burst of 120 requests within 3 min; the model predicts 5 ms, the p95 target is 120 s. The old policy stayed
    # at 1 replica (the model's sizing, never overruled); the observation must scale it up
    rng = np.random.default_rng(20)
    background = np.cumsum(rng.exponential(10.0, 400))
    background = background[background < 3600.0]
    burst = np.sort(rng.uniform(1200.0, 1380.0, 120))
    arrival = np.sort(np.concatenate([background, burst]))
    service = np.minimum(rng.lognormal(math.log(20_000.0), 0.6, arrival.size), 70_000.0)
    zeros = np.zeros(arrival.size, dtype=np.int64)
    trace = Trace(arrival, zeros, zeros, zeros, np.full(arrival.size, 100), service)
    config = SimulationConfig(policies=("predictive",), target_p95_ms=120_000, initial_replicas=1, max_replicas=50)
    result = run_simulation(trace, config, ConstantModel(5.0))["predictive"]
    assert max(result["desired_replicas"]) >= 10
    assert result["slo_minutes_fraction"] >= 0.9


# ------------------------------------------------------------------------- long requests and bursts (issue 20)


def test_oracle_does_not_buy_max_replicas_for_a_request_no_count_can_serve_in_time() -> None:
    # 20 requests of 1 s a minute; in minute 1 two of them take 20 s against a 5 s p95 target, so that minute's
    # p95 (np.percentile of 20: 95 % of the way from the 19th to the 20th) is 20 s with any replica count. The
    # oracle must stop where more replicas stop helping, not buy max_replicas.
    arrival = np.concatenate([np.linspace(0, 50, 20), np.linspace(60, 110, 20)])
    service = np.full(arrival.size, 1000.0)
    service[[30, 35]] = 20000.0
    zeros = np.zeros(arrival.size, dtype=np.int64)
    trace = Trace(arrival, zeros, zeros, zeros, np.full(arrival.size, 10), service)
    config = SimulationConfig(target_p95_ms=5000.0, max_replicas=50, policies=("oracle",))
    result = run_simulation(trace, config, ConstantModel(1000.0))["oracle"]
    assert result["slo_minutes_fraction"] == 0.5
    assert max(result["desired_replicas"] + [1]) <= 2  # one request per ~2.6 s, each 1 s: 1-2 replicas suffice
    assert result["replica_hours"] < 3 * 2 / 60


def test_burst_minutes_are_onsets_against_the_minutes_before() -> None:
    from modalscale.autoscaler.simulate import burst_minutes

    per_minute = [0, 0, 10, 10, 10, 10, 10, 10, 25, 10, 0]  # onset at 2; 3-4 against idle minutes; 8: 2.5x
    arrival = np.concatenate([m * 60.0 + np.linspace(0, 59, n) for m, n in enumerate(per_minute)])
    bursts = burst_minutes(arrival, 660.0)
    # minute 3: 10 >= 2 x mean(0, 0, 10) = 6.7; 4: 10 >= 2 x mean(0, 0, 10, 10) = 10; 5: 10 < 2 x 6 = 12
    assert [m for m, b in enumerate(bursts) if b] == [2, 3, 4, 8]


def test_observed_service_time_is_of_the_requests_completed_in_the_window() -> None:
    # Triton records a request's compute time when it completes: over [15 s, 75 s] the completed requests are the
    # ten 50 s ones (arrived at 0-9 s, done at 50-59 s) and the ten 1 s ones (arrived 60-69 s): mean 25.5 s. The
    # requests that ARRIVED in the window and completed are only the short ones (1 s): biased short.
    from modalscale.autoscaler.simulate import _Metrics, _Pool

    arrival = np.concatenate([np.arange(10.0), 60.0 + np.arange(10.0)])
    service_ms = np.concatenate([np.full(10, 50_000.0), np.full(10, 1_000.0)])
    zeros = np.zeros(arrival.size, dtype=np.int64)
    trace = Trace(arrival, zeros, zeros, zeros, np.full(arrival.size, 10), service_ms)
    pool = _Pool(arrival, service_ms / 1000.0, 1)
    for _ in range(10):
        pool.add(0.0, 0.0)
    pool.advance(75.0)
    (text,) = _Metrics(trace, service_ms).workload(pool, 15.0, 75.0)
    assert text.observed_service_ms == pytest.approx(25_500.0)
    assert text.rate_rps == pytest.approx(10 / 60)  # the rate is still by arrival
    # only what the operator reads (metrics_parse): no per-class service-time SCV, which no series gives it (this
    # window's would be 0.92, and the simulator passed such a value until 6 Dec 2026)
    assert text.service_scv is None


def test_the_predictive_forecast_horizon_follows_the_start_up_law_unless_set() -> None:
    from modalscale.autoscaler.policy import ScalingMode

    config = SimulationConfig(startup_delay_s=30.0, startup_delay_p90_s=60.0)
    assert config.scaling_policy(ScalingMode.PREDICTIVE).forecast_horizon_s == 60.0
    at_once = replace(config, startup_delay_s=0.0, startup_delay_p90_s=None)
    assert at_once.scaling_policy(ScalingMode.PREDICTIVE).forecast_horizon_s == 0.0
    kept = replace(at_once, predictive_forecast_horizon_s=60.0)
    assert kept.scaling_policy(ScalingMode.PREDICTIVE).forecast_horizon_s == 60.0


@pytest.mark.parametrize("arrivals", [[0.0], [0.0, 0.0, 0.0]], ids=["one-row", "one-instant"])
def test_a_trace_of_one_instant_is_simulated_over_its_minute_not_divided_by_zero(arrivals: list[float]) -> None:
    # Before: end_s = 0 -> ZeroDivisionError (replica_s / end_s) for a trace whose arrivals are all at 0.
    n = len(arrivals)
    zeros = np.zeros(n, dtype=np.int64)
    trace = Trace(np.asarray(arrivals), zeros, zeros, zeros, np.full(n, 100), np.full(n, 50.0))
    config = SimulationConfig(policies=("predictive", "utilization", "concurrency", "oracle"))
    result = run_simulation(trace, config, ConstantModel(50.0))
    for name, r in result.items():
        assert r["mean_replicas"] >= 1 and math.isfinite(r["mean_replicas"]), name
        assert r["slo_minutes_fraction"] == 1.0, name
