"""Simulator sanity against queueing theory, policy behaviour in the simulator, and the CLI."""

from __future__ import annotations

import argparse
import json
import math
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
    return Trace(arrival, zeros, zeros, zeros, np.full(arrival.size, 100), rng.exponential(mean_service_ms, arrival.size))


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
        waited = math.exp(-theta * t_s) + theta * math.exp(-mu * t_s) * (1 - math.exp(-(theta - mu) * t_s)) / (theta - mu)
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
    )
    result = run_simulation(trace, config, ConstantModel(100.0))["predictive"]
    settled = result["desired_replicas"][len(result["desired_replicas"]) // 2 :]
    assert set(settled) == {7}
    latency = replay_fixed(trace, 7)
    assert np.percentile(latency, 95) <= 350


def test_no_flapping_under_steady_load() -> None:
    trace = generate_trace(TraceSpec(duration_s=600, mean_rate_rps=20, rate_swing_ratio=0.0, random_state=5))
    result = run_simulation(trace, SimulationConfig(policies=("predictive",)))["predictive"]
    assert result["direction_reversals"] <= 1


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
