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

from modalscale.api.inferenceservice import parse_isvc
from modalscale.api.isvc_status import ScalerState
from modalscale.autoscaler.features import Modality
from modalscale.autoscaler.policy import Observation, Reason, WorkloadClass, image_encoder_policy, recommend
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
