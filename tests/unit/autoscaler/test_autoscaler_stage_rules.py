"""The per-stage rules of a staged service (issue 24) when its image encoder pool falls behind (pure).

Fault 1: the pool's Utilization (HPA) rule asks for at most x 1/target per decision because the busy fraction
saturates at 100 %, and holds while replicas start; a pool whose requests in flight (queued included) stay above
twice its slots and hold more than its target's worth of arrivals is sized from that observation (Little's law, KPA:
``ceil(in_flight / (slots x target utilization))``, ``ScaleUpForObservedQueue``) by its second decision.

Fault 2: every image request holds a front slot while it waits in the pool's queue, so the front's observed time
and queue grow with the pool's backlog; the front does not count that wait as its own demand (its image classes'
observed time less the pool's queue wait) and its queue rules hold while the pool is backlogged
(``HeldForImageEncoder``).

Numbers by hand in each test.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from modalscale.api.inferenceservice import parse_isvc
from modalscale.api.isvc_status import ScalerState
from modalscale.autoscaler.features import Modality
from modalscale.autoscaler.metrics_reading import MetricsReading
from modalscale.autoscaler.policy import (
    Observation,
    Reason,
    ScalingPolicy,
    WorkloadClass,
    image_encoder_policy,
    recommend,
)
from modalscale.autoscaler.stages import front_pool_figures
from tests.factories import inference_service

T0 = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
SCALING = {"mode": "Predictive", "minReplicas": 1, "maxReplicas": 200, "targetUtilizationPercent": 90,
           "targetP95LatencyMilliseconds": 5000, "scaleDownStabilizationSeconds": 300,
           "scaleUpStabilizationSeconds": 0, "maxStepReplicas": 64, "tolerancePercent": 10,
           "decisionIntervalSeconds": 15}
SPEC = parse_isvc(inference_service("vc", "ml", uid="u", scaling=SCALING,
                                    stages={"imageEncoder": {"minReplicas": 1, "maxReplicas": 200}}))
assert SPEC.stages is not None
POOL = image_encoder_policy(SPEC.scaling, SPEC.stages.image_encoder)


def pool_obs(at: datetime, current: int, ready: int, in_flight: float | None, rate_rps: float = 5.0,
             utilization: float = 1.0, exec_ms: float = 400.0) -> Observation:
    """The pool's observation as ``decide_pool_once`` builds it: one image class, its busy fraction and its
    requests in flight (the model ``image_encoder``'s ``modalscale_inflight_requests`` + Triton's pending)."""
    return Observation(observed_at=at, current_replicas=current, ready_replicas=ready,
                       workload=(WorkloadClass(Modality.IMAGE, rate_rps, mean_image_pixels=1e6, mean_image_count=1.0,
                                               observed_service_ms=exec_ms),),
                       utilization_ratio=utilization, in_flight_requests=in_flight)


# ------------------------------------------------------------------------------- fault 1: the pool's backlog


def test_a_saturated_pool_with_a_standing_queue_is_sized_from_its_requests_in_flight_by_its_second_decision(
) -> None:
    # 1 ready replica (1 slot) 100 % busy, 30 then 45 requests in flight at 5 req/s: 6 s then 9 s of arrivals
    # (Little's law) against the 5 s target, above 2 x 1 slot at both decisions.
    first = recommend(pool_obs(T0, 1, 1, 30.0), POOL, ScalerState(), None, T0)
    # HPA: ceil(1 x 100 % / 90 %) = 2; the queue is seen once only: not yet a persisting one
    assert (first.desired_replicas, first.reason) == (2, Reason.SCALE_UP_FOR_UTILIZATION)
    t1 = T0 + timedelta(seconds=15)
    second = recommend(pool_obs(t1, 2, 1, 45.0), POOL, first.state, None, t1)
    # before the rule: HPA counts the starting replica idle, ceil(1 / 0.9) = 2 = current: no change while 45 wait.
    # Now KPA's rule on the observation: ceil(45 / (1 slot x 90 %)) = 50
    assert (second.desired_replicas, second.reason) == (50, Reason.SCALE_UP_FOR_OBSERVED_QUEUE)
    assert second.features["observed_queue_need_replicas"] == 50.0
    assert "45 requests in flight" in second.message


def test_the_pools_queue_rule_needs_a_queue_beyond_its_slots_that_holds_more_than_the_targets_worth_of_arrivals(
) -> None:
    t1 = T0 + timedelta(seconds=15)
    state = recommend(pool_obs(T0, 4, 4, 7.0), POOL, ScalerState(), None, T0).state
    # 8 in flight on 4 slots: a queue of at most 2 x the slots is a busy pool, not a backlog
    short = recommend(pool_obs(t1, 4, 4, 8.0), POOL, state, None, t1)
    assert short.reason != Reason.SCALE_UP_FOR_OBSERVED_QUEUE
    # 20 in flight at 50 req/s is 0.4 s of arrivals, well within the 5 s target: the queue drains in time
    state = recommend(pool_obs(T0, 4, 4, 20.0, rate_rps=50.0), POOL, ScalerState(), None, T0).state
    fast = recommend(pool_obs(t1, 4, 4, 20.0, rate_rps=50.0), POOL, state, None, t1)
    assert fast.reason != Reason.SCALE_UP_FOR_OBSERVED_QUEUE
    # unknown in flight (an older runtime without the gauge): the HPA rule alone, as before
    unknown = recommend(pool_obs(t1, 2, 1, None), POOL, state, None, t1)
    assert unknown.reason != Reason.SCALE_UP_FOR_OBSERVED_QUEUE


def test_the_pools_queue_rule_takes_the_pools_share_of_the_target_when_the_target_is_split() -> None:
    # 12 in flight at 5 req/s = 2.4 s of arrivals: within the service's 5 s target, beyond the pool's 2 s share
    t1 = T0 + timedelta(seconds=15)
    state = recommend(pool_obs(T0, 2, 2, 12.0), POOL, ScalerState(), None, T0).state
    whole = recommend(pool_obs(t1, 2, 2, 12.0), POOL, state, None, t1)
    assert whole.reason != Reason.SCALE_UP_FOR_OBSERVED_QUEUE
    obs = pool_obs(t1, 2, 2, 12.0)
    split = recommend(Observation(**{**{f: getattr(obs, f) for f in obs.__slots__}, "stage_target_p95_ms": 2000.0}),
                      POOL, state, None, t1)
    assert (split.desired_replicas, split.reason) == (14, Reason.SCALE_UP_FOR_OBSERVED_QUEUE)  # ceil(12 / 0.9)


def test_a_one_piece_service_in_utilization_mode_keeps_the_plain_hpa_rule_under_the_same_queue() -> None:
    # The standing-queue check is the pool's (image_encoder_policy); a one-piece Utilization service is sized by the
    # HPA rule alone, as its users expect of Utilization mode: the same 30 -> 45 in flight gives 2, not 50.
    one_piece = ScalingPolicy.from_typed(SPEC.scaling, SPEC.runtime)
    plain = ScalingPolicy(**{**{f: getattr(POOL, f) for f in POOL.__slots__}, "standing_queue_rule": False})
    assert POOL.standing_queue_rule and not one_piece.standing_queue_rule
    first = recommend(pool_obs(T0, 1, 1, 30.0), plain, ScalerState(), None, T0)
    t1 = T0 + timedelta(seconds=15)
    second = recommend(pool_obs(t1, 2, 1, 45.0), plain, first.state, None, t1)
    assert (second.desired_replicas, second.reason) != (50, Reason.SCALE_UP_FOR_OBSERVED_QUEUE)
    assert second.desired_replicas == 2, (second.desired_replicas, second.reason, second.message)


# ------------------------------------------------------------------------ fault 2: the front waits on the pool


class FlatModel:
    """Predicts 500 ms for every request (the front's service-time model, its own part plus the images')."""

    def predict(self, x: Any) -> Any:
        return np.full(len(x), 500.0)


FRONT = ScalingPolicy.from_typed(SPEC.scaling, SPEC.runtime)


def front_obs(**pool: Any) -> Observation:
    """A front of 10 replicas (1 slot each) at 10 image req/s whose requests held their slots 3000 ms on average, of
    which 2500 ms waiting in the pool's queue (the model's 500 ms is the rest); 60 requests in flight, 6 s old on
    average (beyond the 5 s target), a seeded history at 10. ``pool``: the pool's figures the front is given."""
    return Observation(observed_at=T0, current_replicas=10, ready_replicas=10,
                       workload=(WorkloadClass(Modality.IMAGE, 10.0, mean_image_pixels=1e6, mean_image_count=1.0,
                                               observed_service_ms=3000.0),),
                       in_flight_requests=60.0, in_flight_age_ms=6000.0, **pool)


def steady_front() -> ScalerState:
    """The front's state after a decision 15 s before ``T0`` that read the same 60 requests in flight."""
    return ScalerState(in_flight_history=(60.0,), in_flight_times=(T0 - timedelta(seconds=15),),
                       recommendations=((T0 - timedelta(seconds=15), 10),))


def test_a_front_whose_requests_wait_on_a_backlogged_pool_does_not_scale_for_that_wait() -> None:
    # Without the pool's figures: 3000 ms observed is 6x the model, sized as observed: 10 req/s x 3 s = 30
    # erlangs, and the observed-queue rule wants ceil(60 / 0.9) = 67 (the step limit takes 10 -> 74 max).
    blind = recommend(front_obs(), FRONT, ScalerState(), FlatModel(), T0)
    assert blind.desired_replicas > 30
    # With them: 2500 ms of the 3000 were the pool's queue; the front's own 500 ms is the model's (10 req/s x 0.5 s =
    # 5 erlangs: fewer than the 10 it has, the scale-down held by its window), and the 60 in flight wait on a pool
    # with 40 queued on its 4 ready slots: more front replicas shorten none of them. The observed-queue rule drains
    # them at the slot time they were timed at (own 500 + the pool's 2500 ms): ceil((10 x 3 + 60 x 3 / 60) / 0.9)
    # = 37, held at 10.
    held = recommend(front_obs(image_encoder_wait_ms=2500.0, image_encoder_queued_requests=40.0,
                               image_encoder_ready_slots=4), FRONT, steady_front(), FlatModel(), T0)
    assert held.features["observed_service_ms"] == 500.0
    assert held.features["held_queue_need_replicas"] == 37.0
    assert (held.desired_replicas, held.reason) == (10, Reason.HELD_FOR_IMAGE_ENCODER)
    assert "image encoder pool" in held.message and "40 queued" in held.message


def test_a_front_keeps_its_queue_rules_while_the_pool_keeps_up() -> None:
    # The pool's queue (2) within its 4 ready slots: the pool is not the bottleneck, and the front's 60 in flight
    # are its own (the wait subtracted is 0 here): the observed-queue rule sizes them as before, to drain at the
    # 3000 ms they were timed at: ceil((10 x 3 + 60 x 3 / 60) / 0.9) = 37 (KPA's slot per request: 67).
    d = recommend(front_obs(image_encoder_wait_ms=0.0, image_encoder_queued_requests=2.0,
                            image_encoder_ready_slots=4), FRONT, steady_front(), FlatModel(), T0)
    assert d.reason in (Reason.SCALE_UP_FOR_OBSERVED_QUEUE, Reason.LIMITED_BY_MAX_STEP)
    assert d.features["observed_queue_need_replicas"] == 37.0


def test_a_fronts_queue_drains_at_the_slot_time_its_requests_hold_with_the_pools_wait() -> None:
    # Review of the drain rule: a front of 12 whose image requests hold a slot 1500 ms (its own 1000, the model's,
    # + 500 ms in the pool's queue; the pool keeps up: 5 queued on 8 slots), 60 in flight grown from 50. Its own
    # service time comes out of the other rules without the pool's wait, but its slot stays held through it: the
    # drain at 1000 ms asked for 12 (WithinTolerance); at 1500 ms, ceil((10 x 1.5 + 60 x 1.5 / 60) / 0.9) = 19 (KPA's
    # slot per request: 67).
    class Model1000:
        def predict(self, x: Any) -> Any:
            return np.full(len(x), 1000.0)

    obs = Observation(observed_at=T0, current_replicas=12, ready_replicas=12,
                      workload=(WorkloadClass(Modality.IMAGE, 10.0, mean_image_pixels=1e6, mean_image_count=1.0,
                                              observed_service_ms=1500.0),),
                      in_flight_requests=60.0, in_flight_age_ms=6000.0, image_encoder_wait_ms=500.0,
                      image_encoder_queued_requests=5.0, image_encoder_ready_slots=8)
    d = recommend(obs, FRONT, ScalerState(in_flight_history=(40.0, 50.0),
                                          in_flight_times=(T0 - timedelta(seconds=30), T0 - timedelta(seconds=15)),
                                          recommendations=((T0 - timedelta(seconds=15), 12),)), Model1000(), T0)
    assert d.features["observed_service_ms"] == 1000.0  # the front's own time, as the other rules size it
    assert d.features["observed_queue_need_replicas"] == 19.0, d.message
    assert d.reason in (Reason.SCALE_UP_FOR_OBSERVED_QUEUE, Reason.LIMITED_BY_MAX_STEP)


def test_the_fronts_view_of_the_pool_is_its_queue_wait_its_queue_and_its_ready_slots() -> None:
    # 5 req/s x 400 ms executions (batches of 1), 3000 ms mean request duration: 2600 ms waiting in its queue
    pool = MetricsReading(observed_at=T0, workload=(WorkloadClass(Modality.IMAGE, 5.0, mean_image_pixels=1e6,
                                                                  mean_image_count=1.0, observed_service_ms=400.0),),
                          queued_requests=40.0, extra={"mean_latency_ms": 3000.0})
    assert front_pool_figures(pool, 2, 2) == {"image_encoder_wait_ms": 2600.0, "image_encoder_queued_requests": 40.0,
                                              "image_encoder_ready_slots": 4}
    unknown = front_pool_figures(None, 2, 2)
    assert set(unknown.values()) == {None}
    no_duration = front_pool_figures(MetricsReading(observed_at=T0, workload=pool.workload, queued_requests=1.0), 1, 1)
    assert no_duration["image_encoder_wait_ms"] is None and no_duration["image_encoder_queued_requests"] == 1.0
