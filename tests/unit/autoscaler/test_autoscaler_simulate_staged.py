"""The staged layout in the simulator (issue 24): the work split, the synchronous call path and the per-stage
deciders, against the one-piece simulator on the same draws."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from modalscale.api.inferenceservice import parse_isvc
from modalscale.autoscaler.policy import image_encoder_policy
from modalscale.autoscaler.regressor import ServiceTimeRegressor
from modalscale.autoscaler.simulate import SimulationConfig, run_simulation, service_times_ms, train_default_model
from modalscale.autoscaler.simulate_staged import (
    StagedConfig,
    _StagedPools,
    compare_layouts,
    encoder_pool_policy,
    image_service_share,
    simulate_staged,
    split_service_ms,
)
from modalscale.autoscaler.traces import Trace, TraceSpec, generate_trace, modality_shift_trace
from tests.factories import inference_service

CONFIG = SimulationConfig(target_p95_ms=2000.0, startup_delay_s=30.0, service_source="regressor")


@pytest.fixture(scope="module")
def model() -> ServiceTimeRegressor:
    return train_default_model(CONFIG)


def mixed_trace(seed: int = 0, duration_s: float = 600.0, rate_rps: float = 6.0) -> Trace:
    return generate_trace(TraceSpec(duration_s=duration_s, mean_rate_rps=rate_rps, random_state=seed))


def text_only(trace: Trace) -> Trace:
    zeros = np.zeros(len(trace), dtype=np.int64)
    return Trace(trace.arrival_s, zeros, zeros, zeros, np.maximum(trace.text_tokens, 1), None, "text")


def test_the_image_share_is_the_additive_models_image_terms_and_zero_without_images(
        model: ServiceTimeRegressor) -> None:
    trace = mixed_trace()
    share = image_service_share(trace, model.predict)
    c = model.coefficients_ms()
    mp = trace.image_pixels / 1e6
    image_ms = (c["megapixels"] + c["megapixels_per_batch"]) * mp + (c["images"] + c["images_per_batch"]) \
        * trace.image_count
    expected = image_ms / model.predict(trace.features())
    assert share == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert (share[trace.image_count == 0] == 0.0).all()
    assert 0.3 < share[trace.image_count > 0].mean() < 0.95  # images dominate the synthetic law's requests


def test_the_split_conserves_each_requests_service_time(model: ServiceTimeRegressor) -> None:
    trace = mixed_trace()
    service = service_times_ms(trace, CONFIG, model)
    front, encoder = split_service_ms(service, image_service_share(trace, model.predict))
    assert front + encoder == pytest.approx(service, rel=1e-12)
    assert (front > 0).all() and (encoder >= 0).all()


def test_a_text_only_trace_never_reaches_the_encoder_pool(model: ServiceTimeRegressor) -> None:
    trace = text_only(mixed_trace())
    out = compare_layouts(trace, CONFIG, StagedConfig(encoder_min_replicas=1), model)
    staged = out["staged"]
    assert staged["encoder_requests"] == 0 and staged["encoder_work_s"] == 0.0
    assert set(staged["encoder_desired_replicas"]) == {1}  # held at its minimum the whole trace
    end_h = np.ceil(trace.duration_s / 60.0) / 60.0
    assert staged["encoder_replica_hours"] == pytest.approx(end_h)
    assert staged["front_hold_s"] == pytest.approx(staged["front_work_s"])  # no slot ever waits


def test_with_zero_cost_images_the_staged_front_replays_the_one_piece_run_exactly(
        model: ServiceTimeRegressor) -> None:
    base = mixed_trace(seed=3)
    service = service_times_ms(base, CONFIG, model)
    trace = replace(base, service_ms=service)
    config = replace(CONFIG, initial_replicas=2, policies=("predictive",))
    one = run_simulation(trace, config, model)["predictive"]
    staged = simulate_staged(trace, service, np.zeros(len(trace)), config, StagedConfig(), model, (2, 1))
    assert staged["encoder_requests"] == int((trace.image_count > 0).sum()) > 0  # they all called the pool
    assert staged["front_desired_replicas"] == one["desired_replicas"]
    assert staged["front_replica_hours"] == one["replica_hours"]
    assert staged["slo_minutes_fraction"] == one["slo_minutes_fraction"]
    assert staged["minute_p95_ms"] == one["minute_p95_ms"]
    assert staged["requests_over_slo"] == one["requests_over_slo"]


def test_work_served_in_both_pools_equals_the_traces_work(model: ServiceTimeRegressor) -> None:
    trace = modality_shift_trace(duration_s=900.0, rate_rps=8.0, shift_at_s=450.0, random_state=2)
    out = compare_layouts(trace, replace(CONFIG, target_p95_ms=5000.0), StagedConfig(), model)
    staged, one = out["staged"], out["one_piece"]
    assert np.isfinite(staged["response_ms"]).all()  # every request answered
    assert staged["front_work_s"] + staged["encoder_work_s"] == pytest.approx(one["work_s"], rel=1e-9)
    assert staged["encoder_work_s"] > 0.3 * one["work_s"]
    assert staged["front_hold_s"] >= staged["front_work_s"]  # the front's slot also holds the wait for the pool
    assert staged["replica_cpu_hours"] == pytest.approx(2.0 * staged["replica_hours"])
    assert one["replica_cpu_hours"] == pytest.approx(2.0 * one["replica_hours"])
    # the pool's need was raised by the stage latency rule on its share of the target (stages.split_slo) ...
    assert staged["encoder_reasons"].get("ScaleUpForSLO", 0) > 0
    alone = compare_layouts(trace, replace(CONFIG, target_p95_ms=5000.0), StagedConfig(split_slo=False), model,
                            one_piece=False)["staged"]
    assert "ScaleUpForSLO" not in alone["encoder_reasons"]  # ... which the Utilization rule alone never gives


def three_requests() -> tuple[Trace, np.ndarray, np.ndarray]:
    """Two image requests (front 100 ms, pool 1 s each) at 0 and 10 ms, a text request (front 100 ms) at 20 ms."""
    trace = Trace(np.array([0.0, 0.01, 0.02]), np.array([1, 1, 0]), np.array([100, 100, 0]),
                  np.array([100, 100, 0]), np.array([10, 10, 10]), None, "three")
    return trace, np.array([100.0, 100.0, 100.0]), np.array([1000.0, 1000.0, 0.0])


def test_the_front_holds_its_slot_until_the_pool_answers(model: ServiceTimeRegressor) -> None:
    # 2 front replicas, 1 encoder replica: the second image waits 1 s in the pool, holding the second front slot
    trace, front, encoder = three_requests()
    config = replace(CONFIG, initial_replicas=2, min_replicas=2, max_replicas=2)
    pool = StagedConfig(encoder_max_replicas=1)
    waits = simulate_staged(trace, front, encoder, config, pool, model, (2, 1))
    free = simulate_staged(trace, front, encoder, config, replace(pool, front_waits=False), model, (2, 1))
    assert waits["response_ms"] == pytest.approx([1000.0, 1990.0, 1080.0])  # text starts when the first is answered
    assert free["response_ms"] == pytest.approx([1000.0, 1990.0, 180.0])  # decoupled: when A's front part ends
    assert waits["front_hold_s"] == pytest.approx(1.0 + 1.99 + 0.1) and free["front_hold_s"] == pytest.approx(0.3)
    assert waits["encoder_work_s"] == pytest.approx(2.0) and waits["front_work_s"] == pytest.approx(0.3)


def test_a_front_replica_removed_while_its_slot_waits_costs_until_the_pool_answers(
        model: ServiceTimeRegressor) -> None:
    trace, front, encoder = three_requests()
    pools = _StagedPools(trace, front, encoder, CONFIG, StagedConfig())
    for _ in range(2):
        pools.front.add(0.0, 0.0)
    pools.encoder.add(0.0, 0.0)
    pools.advance(0.5)  # the second image request holds its front slot until the pool answers it at 2.0 s
    pools.front.remove(2, 0.5)
    pools.advance(math.inf)
    assert [r.drained_s for r in pools.front.replicas] == pytest.approx([1.0, 2.0])
    assert pools.front.replica_seconds(60.0) == pytest.approx(3.0)
    assert math.isnan(pools.answered_s[2])  # no front replica was left for the text request


def test_the_pool_runs_the_operators_image_encoder_policy() -> None:
    scaling = {"mode": "Predictive", "minReplicas": 1, "maxReplicas": 200, "targetP95LatencyMilliseconds": 2000,
               "targetUtilizationPercent": 90, "tolerancePercent": 10, "scaleUpStabilizationSeconds": 0,
               "maxStepReplicas": 32, "decisionIntervalSeconds": 15}  # unset window: 60 s less the 2 s target
    stages = {"imageEncoder": {"minReplicas": 1, "maxReplicas": 200, "resources": {"cpu": "2"}}}
    spec = parse_isvc(inference_service("vc", "ml", uid="u", scaling=scaling, stages=stages))
    assert spec.stages is not None
    assert encoder_pool_policy(CONFIG, StagedConfig()) == image_encoder_policy(spec.scaling, spec.stages.image_encoder)
    with pytest.raises(ValueError, match="integer"):
        encoder_pool_policy(replace(CONFIG, predictive_target_utilization_percent=92.5), StagedConfig())


def test_a_staged_run_is_deterministic_for_a_seed(model: ServiceTimeRegressor) -> None:
    trace = mixed_trace(seed=5, duration_s=300.0)
    first = compare_layouts(trace, CONFIG, StagedConfig(), model, one_piece=False)["staged"]
    again = compare_layouts(trace, CONFIG, StagedConfig(), model, one_piece=False)["staged"]
    assert first["replica_cpu_hours"] == again["replica_cpu_hours"]
    assert first["encoder_desired_replicas"] == again["encoder_desired_replicas"]
    assert np.array_equal(first["response_ms"], again["response_ms"], equal_nan=True)
