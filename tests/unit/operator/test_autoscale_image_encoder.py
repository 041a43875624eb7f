"""The image encoder pool's own decision (issue 24): the pool's Triton figures (``component="image-encoder"``)
-> ``parse_answers`` -> ``build_observation`` -> ``recommend`` with ``image_encoder_policy`` (the HPA rule of
Utilization mode with the service's windows and the pool's bounds) -> ``plan_image_encoder_autoscale``.

Expected counts by hand: busy erlangs per pod = requests/s x execution ms / 1000 / mean batch size (Triton adds a
batch's compute time to each of its requests; ``metrics_parse``), utilization = busy / (ready x instanceCount),
need = ceil(ready x utilization / target).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from modalscale.api.inferenceservice import parse_isvc
from modalscale.api.isvc_status import IsvcStatus, ScalerState, StageRecord, write_isvc_status
from modalscale.autoscaler.metrics_parse import parse_answers
from modalscale.autoscaler.metrics_reading import MetricsReading
from modalscale.autoscaler.policy import (
    Decision,
    Reason,
    ScalingMode,
    WorkloadClass,
    image_encoder_policy,
    recommend,
)
from modalscale.autoscaler.queueing import response_quantile_ms
from modalscale.autoscaler.stages import MAX_SHARE, MIN_SHARE, split_features, split_slo
from modalscale.operator.autoscale.metrics import AutoscalerMetrics
from modalscale.operator.autoscale.observe import build_observation
from modalscale.operator.autoscale.plan import plan_image_encoder_autoscale
from modalscale.runtime.repo_config import IMAGE_ENCODER_MODEL
from tests.factories import inference_service

T0 = dt.datetime(2026, 12, 3, 12, 0, tzinfo=dt.UTC)
SCALING = {"mode": "Utilization", "minReplicas": 1, "maxReplicas": 8, "targetUtilizationPercent": 50,
           "scaleDownStabilizationSeconds": 300, "scaleUpStabilizationSeconds": 0, "maxStepReplicas": 4,
           "tolerancePercent": 10}
STAGES = {"imageEncoder": {"minReplicas": 1, "maxReplicas": 6, "runtime": {"instanceCount": 2}}}
SPEC = parse_isvc(inference_service("vc", "ml", uid="u", scaling=SCALING, stages=STAGES))
OWNED = {"ownerReferences": [{"kind": "InferenceService", "name": "vc", "uid": "u1", "controller": True}]}
"""The metadata of the daemon's stand-in Deployments: the service's own (uid u1), as ``read_own_deployment`` reads
only those."""
assert SPEC.stages is not None
POLICY = image_encoder_policy(SPEC.scaling, SPEC.stages.image_encoder)


def pool_answers(now: dt.datetime, pods: int, rps_per_pod: float, exec_ms: float = 200.0, batch: float = 2.0,
                 pending: float = 0.0, down: int = 0, compute: str | None = None, images: int = 1,
                 inflight: float | None = None) -> dict[str, list[dict[str, Any]]]:
    """Prometheus' answers to the pool's queries (component already matched): ``pods`` encoder pods, each serving
    ``rps_per_pod`` image requests of ``images`` images (Triton's ``nv_inference_count`` counts the images: the
    model's batch dimension), ``exec_ms`` per execution of ``batch`` requests, ``pending`` waiting in its Triton
    queue; the first ``down`` pods did not answer; ``compute`` replaces each compute value; ``inflight``: the
    model's ``modalscale_inflight_requests`` per pod (None = not exported)."""
    t = now.timestamp() - 2
    out: dict[str, list[dict[str, Any]]] = {}

    def add(key: str, labels: dict[str, str], value: float | str) -> None:
        out.setdefault(key, []).append({"metric": labels, "value": [t, str(value)]})

    for i in range(pods):
        pod = {"pod": f"vc-image-encoder-{i}", "instance": f"10.0.2.{i}:8002", "job": "ml/image-encoders"}
        add("up", pod, 0.0 if i < down else 1.0)
        add("scraped", pod, t)
        if i < down:
            continue
        for p in ("", "recent_"):
            add(p + "requests", {**pod, "modality": "image"}, rps_per_pod)
            add(p + "images", {**pod, "modality": "image"}, rps_per_pod * images)
            add(p + "pixels", {**pod, "modality": "image"}, rps_per_pod * images * 640 * 480)
        model = {**pod, "model": IMAGE_ENCODER_MODEL, "version": "1"}
        add("nv_count", model, rps_per_pod * images)
        add("nv_success", model, rps_per_pod)
        add("nv_exec", model, rps_per_pod / batch)
        add("nv_compute_us", model, compute if compute is not None else rps_per_pod * exec_ms * 1000)
        add("nv_request_us", model, rps_per_pod * exec_ms * 1100)
        add("nv_pending", model, pending)
        if inflight is not None:
            add("inflight", {**pod, "model": IMAGE_ENCODER_MODEL}, inflight)
    return out


def decide(answers: dict[str, list[dict[str, Any]]], now: dt.datetime, current: int, ready: int | None = None,
           state: ScalerState | None = None, cap: int | None = None) -> tuple[MetricsReading, Decision]:
    reading = parse_answers(answers, IMAGE_ENCODER_MODEL)
    obs = build_observation(reading, current_replicas=current, ready_replicas=current if ready is None else ready,
                            slots_per_replica=POLICY.slots_per_replica, budget_max_replicas=cap, now=now)
    return reading, recommend(obs, POLICY, state or ScalerState(), None, now)


def test_the_pools_policy_is_the_utilization_rule_with_the_services_knobs_and_the_pools_bounds() -> None:
    assert (POLICY.mode, POLICY.min_replicas, POLICY.max_replicas, POLICY.slots_per_replica) == (
        ScalingMode.UTILIZATION, 1, 6, 2)
    assert (POLICY.target_utilization_percent, POLICY.scale_down_stabilization_s, POLICY.max_step_replicas,
            POLICY.tolerance_percent, POLICY.scale_to_zero_after_s) == (50.0, 300.0, 4, 10.0, None)
    predictive = dataclasses.replace(SPEC.scaling, mode="Predictive")
    assert image_encoder_policy(predictive, SPEC.stages.image_encoder).mode == ScalingMode.UTILIZATION  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="Fixed"):
        image_encoder_policy(dataclasses.replace(SPEC.scaling, mode="Fixed", replicas=2),
                             SPEC.stages.image_encoder)  # type: ignore[union-attr]


def test_a_predictive_services_pool_takes_predictives_defaults_when_the_spec_leaves_them_unset() -> None:
    # The pool runs the Utilization rule, but with the service's knobs: unset in a Predictive spec, those are
    # Predictive mode's (SCALING_MODE_DEFAULTS), as the staged simulator's pool has them.
    spec = parse_isvc(inference_service("vc", "ml", uid="u", stages=STAGES,
                                        scaling={"mode": "Predictive", "minReplicas": 1, "maxReplicas": 8}))
    assert spec.stages is not None
    pool = image_encoder_policy(spec.scaling, spec.stages.image_encoder)
    assert (pool.mode, pool.target_utilization_percent, pool.scale_down_stabilization_s, pool.max_step_replicas) == (
        ScalingMode.UTILIZATION, 90.0, 60.0, 32)


def test_image_load_scales_the_pool_up() -> None:
    """2 pods x 20 req/s x 200 ms over batches of 2 = 2.0 erlangs each, 100 % of their 2 slots; target 50 %:
    ceil(2 x 1.0 / 0.5) = 4. At 10 req/s each: 50 %, steady at 2."""
    reading, d = decide(pool_answers(T0, pods=2, rps_per_pod=20.0), T0, current=2)
    assert reading.busy_erlangs == pytest.approx(4.0)
    assert (d.valid, d.desired_replicas, d.reason) == (True, 4, Reason.SCALE_UP_FOR_UTILIZATION)
    _, steady = decide(pool_answers(T0, pods=2, rps_per_pod=10.0), T0, current=2)
    assert (steady.desired_replicas, steady.reason) == (2, Reason.STEADY)  # 1.0 erlang of 2 slots = the 50 % target


def test_a_pool_queue_that_stands_for_two_decisions_is_sized_from_the_pools_requests_in_flight() -> None:
    """Issue 24's fault 1, through the operator's reading: the pool's queries read its Triton pending count and its
    model's in-flight gauge (``component="image-encoder"``), so its observation has the requests in flight (4
    queued + 2 executing = 6). 1 pod at 2 req/s x 1 s: 2 erlangs, 100 % of its 2 slots; HPA: ceil(1 x 1.0 / 0.5) =
    2. At the next decision the new replica still starts: HPA counts it idle, ceil(1 / 0.5) = 2 = current, and
    would hold while 6 wait; 6 > 2 x 2 ready slots at both decisions and 6 / 2 req/s = 3 s of arrivals, beyond the
    target: KPA's ceil(6 / (2 x 50 %)) = 6 (``ScaleUpForObservedQueue``)."""
    assert POLICY.target_p95_latency_ms < 3000
    answers = pool_answers(T0, pods=1, rps_per_pod=2.0, exec_ms=1000.0, batch=1.0, pending=4.0, inflight=2.0)
    reading, first = decide(answers, T0, current=1)
    assert reading.in_flight_requests == 6.0 and reading.queued_requests == 4.0
    assert (first.desired_replicas, first.reason) == (2, Reason.SCALE_UP_FOR_UTILIZATION)
    t1 = T0 + dt.timedelta(seconds=15)
    _, second = decide(pool_answers(t1, pods=1, rps_per_pod=2.0, exec_ms=1000.0, batch=1.0, pending=4.0,
                                    inflight=2.0), t1, current=2, ready=1, state=first.state)
    assert (second.desired_replicas, second.reason) == (6, Reason.SCALE_UP_FOR_OBSERVED_QUEUE)


def test_requests_of_several_images_count_their_whole_execution_time() -> None:
    """A front sends each request's images to the pool in one Triton request, and Triton adds an execution's compute
    time to each request in it while ``nv_inference_count`` counts images (measured on the encoder stage server: 4
    requests of 3 photos, one per execution: count 12, success 4, exec 4, compute 2.35 s = 0.59 s per execution). 2
    pods x 10 req/s of 3 images x 200 ms over executions of 2 requests = 1.0 erlang each (the pods' 2 slots at the
    50 % target: steady at 2); divided by the images per execution (6) instead, a third of it, and the pool would be
    sized at 1."""
    reading, d = decide(pool_answers(T0, pods=2, rps_per_pod=10.0, images=3), T0, current=2)
    assert reading.busy_erlangs == pytest.approx(2.0)
    assert (d.valid, d.desired_replicas, d.reason) == (True, 2, Reason.STEADY)
    _, up = decide(pool_answers(T0, pods=2, rps_per_pod=20.0, images=3), T0, current=2)
    assert (up.desired_replicas, up.reason) == (4, Reason.SCALE_UP_FOR_UTILIZATION)


def test_an_idle_pool_goes_down_to_min_replicas_only_after_the_scale_down_window() -> None:
    state = ScalerState()
    d = None
    for k in range(0, 301, 15):  # 0 .. 300 s: each decision asks for 1 replica, the window holds 3
        now = T0 + dt.timedelta(seconds=k)
        _, d = decide(pool_answers(now, pods=3, rps_per_pod=0.5), now, current=3, state=state)
        state = d.state
        if k == 0:
            assert (d.desired_replicas, d.reason) == (3, Reason.SCALE_DOWN_STABILIZED)  # history seeded with 3
    assert d is not None and (d.desired_replicas, d.reason) == (1, Reason.SCALE_DOWN_FOR_UTILIZATION)
    assert d.features["needed_replicas"] == 1.0


@pytest.mark.parametrize(("answers", "why"), [
    (lambda now: pool_answers(now, pods=3, rps_per_pod=0.5, compute="NaN"), "non-finite"),
    (lambda now: {}, "no targets"),
    (lambda now: pool_answers(now, pods=3, rps_per_pod=0.5, down=3), "all down"),
], ids=["nan-compute", "no-targets", "all-down"])
def test_unreadable_pool_metrics_hold_never_scale_down(answers: Any, why: str) -> None:
    reading, d = decide(answers(T0), T0, current=3, state=ScalerState(recommendations=((T0 - dt.timedelta(
        seconds=600), 1),)))
    assert reading.busy_erlangs is None, why
    assert (d.valid, d.desired_replicas, d.reason) == (False, 3, Reason.HELD_NO_METRICS)


def test_a_pool_target_down_reads_a_lower_bound_no_scale_down() -> None:
    """1 of 3 pods did not answer: the 2 that did read idle, but the pool never scales down on them."""
    old = ScalerState(recommendations=((T0 - dt.timedelta(seconds=600), 1),))
    reading, d = decide(pool_answers(T0, pods=3, rps_per_pod=0.5, down=1), T0, current=3, state=old)
    assert reading.partial and reading.per_pod_targets
    assert (d.desired_replicas, d.reason) == (3, Reason.HELD_PARTIAL_METRICS)


def test_a_budget_cap_bounds_the_pools_decision() -> None:
    _, d = decide(pool_answers(T0, pods=2, rps_per_pod=40.0), T0, current=2, cap=3)
    assert (d.desired_replicas, d.reason) == (3, Reason.CAPPED_BY_BUDGET)


def encoder_status(**autoscaler: Any) -> IsvcStatus:
    from modalscale.api.isvc_status import AutoscalerRecord

    block = AutoscalerRecord(**autoscaler) if autoscaler else None
    return IsvcStatus(desired_replicas=3, stages=(StageRecord("front", 3, 3, 3, "Steady"),
                                                  StageRecord("image-encoder", 2, 2, 2, "MinReplicas", "m", "ip",
                                                              block)))


def test_the_plan_records_a_valid_count_in_the_pool_item_and_keeps_the_front_item() -> None:
    reading, d = decide(pool_answers(T0, pods=2, rps_per_pod=20.0), T0, current=2)
    plan = plan_image_encoder_autoscale(encoder_status(), d, reading, now=T0, utilization_ratio=1.0)
    assert plan.desired_changed and plan.metrics_available
    front, pool = plan.status.stages  # type: ignore[misc]
    assert front == StageRecord("front", 3, 3, 3, "Steady")
    assert pool.autoscaler is not None and pool.autoscaler.desired_replicas == 4
    assert (pool.autoscaler.reason, pool.autoscaler.valid, pool.autoscaler.mode) == (
        "ScaleUpForUtilization", True, "Utilization")
    assert pool.autoscaler.features is not None and pool.autoscaler.features["utilization_ratio"] == 1.0
    assert pool.autoscaler.state is not None and pool.autoscaler.state.recommendations[-1] == (T0, 4)
    stored = dataclasses.replace(encoder_status(), stages=plan.status.stages)
    again = plan_image_encoder_autoscale(stored, d, reading, now=T0 + dt.timedelta(seconds=15))
    assert again.status == IsvcStatus() and not again.desired_changed  # same outcome, fresh: nothing written


def test_a_hold_keeps_the_last_valid_count_and_is_written_once() -> None:
    reading, d = decide({}, T0, current=4)
    stored = encoder_status(mode="Utilization", valid=True, reason="ScaleUpForUtilization", desired_replicas=4,
                            metrics_available=True, last_decision_time=T0)
    plan = plan_image_encoder_autoscale(stored, d, reading, now=T0 + dt.timedelta(seconds=15))
    pool = plan.status.stages[1].autoscaler  # type: ignore[index]
    assert not plan.desired_changed and pool is not None
    assert (pool.desired_replicas, pool.valid, pool.metrics_available, pool.reason) == (4, False, False,
                                                                                       "HeldNoMetrics")
    assert "NoScrapeTargets" not in pool.message and "no scrape target" in pool.message.lower()  # type: ignore[operator]


def test_with_the_front_at_zero_the_pool_records_no_decision_and_restarts_from_min_replicas() -> None:
    stored = encoder_status(mode="Utilization", valid=True, reason="ScaleUpForUtilization", desired_replicas=4,
                            metrics_available=True, last_decision_time=T0, state=ScalerState(((T0, 4),)))
    plan = plan_image_encoder_autoscale(stored, None, MetricsReading(None, None), now=T0)
    pool = plan.status.stages[1].autoscaler  # type: ignore[index]
    assert pool is not None and (pool.reason, pool.valid, pool.desired_replicas, pool.state) == (
        "FrontAtZero", False, None, None)
    assert not plan.desired_changed


def test_a_new_pool_count_comes_with_one_event_naming_the_pool_and_a_rerun_posts_none() -> None:
    """First decision: from the count the reconcile applied (the item's 2) to 4; the same decision again, and its
    heartbeat rewrite after ``refresh_s``, post nothing."""
    reading, d = decide(pool_answers(T0, pods=2, rps_per_pod=20.0), T0, current=2)
    plan = plan_image_encoder_autoscale(encoder_status(), d, reading, now=T0, utilization_ratio=1.0)
    assert plan.events == (("Normal", "ScaleUpForUtilization",
                            f"image encoder pool: 2 -> 4 (ScaleUpForUtilization: {d.message})"),)
    stored = dataclasses.replace(encoder_status(), stages=plan.status.stages)
    assert plan_image_encoder_autoscale(stored, d, reading, now=T0 + dt.timedelta(seconds=15)).events == ()
    heartbeat = plan_image_encoder_autoscale(stored, d, reading, now=T0 + dt.timedelta(seconds=60), refresh_s=60)
    assert heartbeat.status != IsvcStatus() and heartbeat.events == ()


def test_the_pools_event_counts_from_its_last_valid_decision() -> None:
    """A stored block of 1 (the last valid count): 1 -> 4, whatever the item's own (reconciled) count says."""
    reading, d = decide(pool_answers(T0, pods=2, rps_per_pod=20.0), T0, current=2)
    stored = encoder_status(mode="Utilization", valid=True, reason="Steady", desired_replicas=1,
                            metrics_available=True, last_decision_time=T0)
    [(type_, reason, message)] = plan_image_encoder_autoscale(stored, d, reading, now=T0).events
    assert (type_, reason) == ("Normal", "ScaleUpForUtilization")
    assert message.startswith("image encoder pool: 1 -> 4 (ScaleUpForUtilization: ")


def test_a_held_or_front_at_zero_pool_posts_no_event() -> None:
    stored = encoder_status(mode="Utilization", valid=True, reason="ScaleUpForUtilization", desired_replicas=4,
                            metrics_available=True, last_decision_time=T0)
    reading, held = decide({}, T0, current=4)
    plan = plan_image_encoder_autoscale(stored, held, reading, now=T0 + dt.timedelta(seconds=15))
    assert plan.status != IsvcStatus() and plan.events == ()  # the block is written, the count unchanged
    at_zero = plan_image_encoder_autoscale(stored, None, MetricsReading(None, None), now=T0)
    assert at_zero.status != IsvcStatus() and at_zero.events == ()


def test_nothing_is_written_before_the_reconcile_wrote_the_pools_item() -> None:
    reading, d = decide(pool_answers(T0, pods=2, rps_per_pod=20.0), T0, current=2)
    plan = plan_image_encoder_autoscale(IsvcStatus(), d, reading, now=T0)
    assert plan.status == IsvcStatus() and not plan.desired_changed


# ---------------------------------------------------------------------------------------------- the daemon's pass
def fresh_metrics() -> tuple[CollectorRegistry, AutoscalerMetrics]:
    registry = CollectorRegistry()
    return registry, AutoscalerMetrics(registry)


def samples(registry: CollectorRegistry, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples of ``name`` on ``registry``: sorted labels -> value."""
    return {tuple(sorted(s.labels.items())): s.value for family in registry.collect() for s in family.samples
            if s.name == name}


def daemon_pass(monkeypatch: pytest.MonkeyPatch, status: dict[str, Any], answers: dict[str, Any],
                pool_replicas: int = 2, metrics: tuple[CollectorRegistry, AutoscalerMetrics] | None = None,
                front: MetricsReading | None = None, stages: dict[str, Any] | None = STAGES,
                deployment_write_fails: bool = False, applied: StageRecord | None = None,
                annotations: dict[str, str] | None = None, front_replicas: int | None = 3) -> dict[str, Any]:
    """One ``decide_pool_once`` with stand-ins for the Kubernetes reads and writes: what it read, wrote, posted
    (``events``) and exported (``registry``: ``metrics``', default :func:`fresh_metrics`). ``front_replicas``: the
    front's Deployment ``vc`` (None: not found)."""
    import logging
    import threading
    import types

    from modalscale.operator.autoscale import handlers

    registry, exported = metrics or fresh_metrics()
    seen: dict[str, Any] = {"reads": [], "scaled": [], "patched": [], "events": [], "registry": registry}

    class Reader:
        def read(self, namespace: str, name: str, model_name: str, at: dt.datetime, *, gateway: bool = False,
                 component: str | None = None) -> MetricsReading:
            seen["reads"].append((namespace, name, model_name, gateway, component))
            return parse_answers(answers, model_name)

    raw = inference_service("vc", "ml", uid="u1", scaling=SCALING, stages=stages, annotations=annotations or {})
    raw["status"] = status
    pool = {"metadata": OWNED, "spec": {"replicas": pool_replicas}, "status": {"readyReplicas": pool_replicas}}
    deployments = {"vc-image-encoder": pool}
    if front_replicas is not None:
        deployments["vc"] = {"metadata": OWNED, "spec": {"replicas": front_replicas},
                             "status": {"readyReplicas": front_replicas}}
    deps: Any = types.SimpleNamespace(
        autoscale=types.SimpleNamespace(reader=Reader(), metrics=exported),
        observer=types.SimpleNamespace(
            read_isvc=lambda ns, name: raw,
            apps=types.SimpleNamespace(read_namespaced_deployment=lambda name, ns, **_: deployments.get(name))),
        writer=types.SimpleNamespace(patch_isvc_status=lambda ns, name, st, stored: seen["patched"].append(st),
                                     event=lambda body, type_, reason, message, log: seen["events"].append(
                                         (body["metadata"]["name"], type_, reason, message))),
        lock_for=lambda uid: threading.Lock(), clock=lambda: T0)
    monkeypatch.setattr(handlers, "read_json", lambda read, *args, **kw: read(*args, **kw))
    def scale_isvc(d: Any, r: Any, decision: Any, part: Any, log: Any, recorded: Any = None) -> None:
        seen["scaled"].append((decision, part))  # the status patch
        if recorded is not None:  # the planner's plan: its pool item is ``applied`` (None: the decision's count)
            pool = applied or StageRecord("image-encoder", 2, 2, part.stage("image-encoder").autoscaler
                                          .desired_replicas, "ScaleUpForUtilization", "m")
            recorded(types.SimpleNamespace(status=IsvcStatus(stages=(pool,)), desired_replicas=3))
        if deployment_write_fails:
            from kubernetes.client.exceptions import ApiException
            raise ApiException(status=409, reason="Conflict")

    monkeypatch.setattr(handlers, "scale_isvc", scale_isvc)
    seen["state"] = handlers.decide_pool_once(deps, "ml", "vc", None, logging.getLogger("test"), front)
    return seen


STORED = {"desiredReplicas": 3, "stages": [{"name": "front", "replicas": 3}, {"name": "image-encoder", "replicas": 2}]}


def test_the_daemon_reads_the_pools_own_series_and_scales_it_through_the_single_planner(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen = daemon_pass(monkeypatch, STORED, pool_answers(T0, pods=2, rps_per_pod=20.0))
    assert seen["reads"] == [("ml", "vc", "image_encoder", False, "image-encoder")]
    [(decision, part)] = seen["scaled"]
    assert decision is None and seen["patched"] == []  # the front follows its record; scale_isvc writes both
    block = part.stage("image-encoder").autoscaler
    assert (block.desired_replicas, block.reason) == (4, "ScaleUpForUtilization")
    assert seen["state"].recommendations[-1] == (T0, 4)
    [(name, type_, reason, message)] = seen["events"]  # posted on the InferenceService, after the scale
    assert (name, type_, reason) == ("vc", "Normal", "ScaleUpForUtilization")
    assert message.startswith("image encoder pool: 2 -> 4 (ScaleUpForUtilization: ")


def test_the_daemon_exports_the_pools_decision_with_the_image_encoder_stage_label(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen = daemon_pass(monkeypatch, STORED, pool_answers(T0, pods=2, rps_per_pod=20.0))
    ids = (("inferenceservice", "vc"), ("namespace", "ml"), ("stage", "image-encoder"))
    reg = seen["registry"]
    assert samples(reg, "modalscale_autoscaler_desired_replicas") == {ids: 4.0}
    assert samples(reg, "modalscale_autoscaler_utilization_ratio") == {ids: pytest.approx(1.0)}
    assert samples(reg, "modalscale_autoscaler_metrics_available") == {ids: 1.0}
    assert samples(reg, "modalscale_autoscaler_decisions_total") == {
        (*ids[:2], ("reason", "ScaleUpForUtilization"), ids[2], ("valid", "true")): 1.0}
    assert samples(reg, "modalscale_autoscaler_cost_model_loaded") == {}  # the pool has no service-time model


def test_a_rerun_of_the_same_pool_decision_posts_no_event(monkeypatch: pytest.MonkeyPatch) -> None:
    first = daemon_pass(monkeypatch, STORED, pool_answers(T0, pods=2, rps_per_pod=20.0))
    [(_, part)] = first["scaled"]
    again = daemon_pass(monkeypatch, {**STORED, "stages": write_isvc_status(part)["stages"]},
                        pool_answers(T0, pods=2, rps_per_pod=20.0), pool_replicas=4)
    assert again["scaled"] == [] and again["events"] == []


def test_the_daemon_takes_no_pool_decision_while_the_front_is_at_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    registry, exported = fresh_metrics()
    for stage in ("front", "image-encoder"):
        _, d = decide(pool_answers(T0, pods=2, rps_per_pod=20.0), T0, current=2)
        exported.record("ml", "vc", d, True, None, 1.0, stage=stage)
    seen = daemon_pass(monkeypatch, {**STORED, "desiredReplicas": 0}, {}, pool_replicas=0,
                       metrics=(registry, exported))
    assert seen["reads"] == [] and seen["scaled"] == [] and seen["events"] == []
    [part] = seen["patched"]
    assert part.stage("image-encoder").autoscaler.reason == "FrontAtZero"
    assert seen["state"] == ScalerState()
    # no pool decision: its gauges go (the front's stay)
    assert [dict(k)["stage"] for k in samples(registry, "modalscale_autoscaler_desired_replicas")] == ["front"]


def test_the_daemon_holds_the_pool_on_missing_metrics_and_writes_only_its_block(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen = daemon_pass(monkeypatch, STORED, {})
    assert seen["scaled"] == []
    [part] = seen["patched"]
    block = part.stage("image-encoder").autoscaler
    assert (block.valid, block.reason, block.desired_replicas, block.metrics_available) == (
        False, "HeldNoMetrics", None, False)
    assert seen["events"] == []
    ids = (("inferenceservice", "vc"), ("namespace", "ml"), ("stage", "image-encoder"))
    assert samples(seen["registry"], "modalscale_autoscaler_metrics_available") == {ids: 0.0}
    assert samples(seen["registry"], "modalscale_autoscaler_desired_replicas") == {}  # a hold sets no count


def test_the_pool_holds_its_count_while_a_cap_annotation_cannot_be_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unreadable cap may be below the count: the pool's decision holds (valid=False, no write) where it would
    scale 2 -> 4, and its message names the annotation (before: decided as if uncapped)."""
    broken = {"budget.modalscale.io/cap-0000000000": '{"maxReplicas": 1, "policy": "gone/p"}'}
    seen = daemon_pass(monkeypatch, STORED, pool_answers(T0, pods=2, rps_per_pod=20.0), annotations=broken)
    assert seen["scaled"] == [] and seen["events"] == []
    [part] = seen["patched"]
    block = part.stage("image-encoder").autoscaler
    assert (block.valid, block.reason) == (False, "CappedByBudget")
    assert "holding 2 replicas" in block.message and "budget.modalscale.io/cap-0000000000" in block.message


# ------------------------------------------------------------------- the p95 target split between the stages
def front_reading(image_rps: float = 40.0, image_ms: float = 300.0, text_rps: float = 50.0,
                  text_ms: float = 20.0) -> MetricsReading:
    """The front's reading: image requests (each calls the pool and waits) and text-only requests, batch 1."""
    return MetricsReading(T0, (WorkloadClass("image", image_rps, 640 * 480, 1.0, 0.0, 1.0, None, image_ms),
                               WorkloadClass("text", text_rps, 0.0, 0.0, 30.0, 1.0, None, text_ms)))


def pool_reading(rps_per_pod: float = 20.0, exec_ms: float = 200.0) -> MetricsReading:
    return parse_answers(pool_answers(T0, pods=2, rps_per_pod=rps_per_pod, exec_ms=exec_ms), IMAGE_ENCODER_MODEL)


def test_the_target_is_split_by_the_time_image_requests_spend_in_each_stage() -> None:
    """Pool: 40 req/s, each waits for its whole 200 ms execution (batch 2) = 8000 ms/s; its requests last 220 ms
    (Triton's request duration, queue included) = 8800 ms/s of the front's waiting. Front: 40 image req/s x 300 ms
    = 12000 ms/s, of which 8800 waited on the pool: 3200 ms/s its own. Pool share 8000 / 11200 = 5/7 of 2000 ms."""
    split = split_slo(2000.0, front_reading(), pool_reading())
    assert (split.pool_ms_per_s, split.front_ms_per_s) == (pytest.approx(8000.0), pytest.approx(3200.0))
    assert split.share == pytest.approx(5 / 7)
    assert split.image_encoder_target_ms == pytest.approx(2000.0 * 5 / 7)
    assert "split by measured stage time" in split.message
    assert split_features(split) == {"slo_split_target_p95_ms": 1428.6, "slo_split_share": 0.714}
    # text-only requests never reach the pool: they change nothing
    assert split_slo(2000.0, front_reading(text_rps=500.0, text_ms=90.0), pool_reading()).share == split.share


def test_a_front_that_only_waits_on_the_pool_still_keeps_its_tenth_of_the_target() -> None:
    split = split_slo(1000.0, front_reading(image_ms=200.0), pool_reading())  # 8000 ms/s < 8800 waited: own 0
    assert (split.front_ms_per_s, split.share, split.image_encoder_target_ms) == (0.0, MAX_SHARE, 900.0)
    light = split_slo(1000.0, front_reading(image_ms=5000.0), pool_reading())  # pool 8000 of 200000 ms/s
    assert light.share == MIN_SHARE


@pytest.mark.parametrize(("front", "pool", "why"), [
    (None, pool_reading(), "front's metrics are not readable"),
    (MetricsReading(T0, None), pool_reading(), "front's metrics are not readable"),
    (front_reading(), None, "pool's metrics are not readable"),
    (front_reading(), MetricsReading(T0, None), "pool's metrics are not readable"),
    (front_reading(image_rps=0.0), pool_reading(), "no image request with an observed time"),
    (MetricsReading(T0, (WorkloadClass("image", 4.0, 640 * 480, 1.0),)), pool_reading(),
     "no image request with an observed time"),
    (front_reading(), dataclasses.replace(pool_reading(), extra={}), "mean request duration is unknown"),
])
def test_without_both_stages_timed_the_target_is_not_split(front: MetricsReading | None,
                                                            pool: MetricsReading | None, why: str) -> None:
    split = split_slo(2000.0, front, pool)
    assert (split.image_encoder_target_ms, split.share, split_features(split)) == (None, None, {})
    assert why in split.message
    with pytest.raises(ValueError, match="target_p95_ms"):
        split_slo(0.0, front, pool)


def latency_decision(target_ms: float | None, rps_per_pod: float = 10.0, current: int = 2) -> Decision:
    reading = pool_reading(rps_per_pod)
    obs = dataclasses.replace(
        build_observation(reading, current_replicas=current, ready_replicas=current,
                          slots_per_replica=POLICY.slots_per_replica, budget_max_replicas=None, now=T0),
        stage_target_p95_ms=target_ms)
    return recommend(obs, POLICY, ScalerState(), None, T0)


def test_a_pool_within_its_utilization_target_scales_up_when_its_p95_share_needs_it() -> None:
    """2 pods x 10 req/s, 200 ms executions of 2 requests: 1.0 erlang of 2 slots each = the 50 % target (the
    Utilization rule holds 2). 10 executions/s of 200 ms (SCV 1: p95 ~600 ms alone, ~630 ms with the queueing of 2
    replicas' 4 slots) against a 620 ms share: the least count whose approximated p95 meets it, checked here with
    the queueing model directly."""
    assert latency_decision(None).desired_replicas == 2
    d = latency_decision(620.0)
    need = d.desired_replicas

    def p95_ms(replicas: int) -> float:
        return response_quantile_ms(10 * 2 / 2, 200.0, 1.0, replicas * POLICY.slots_per_replica)

    assert need > 2 and p95_ms(need) <= 620.0 < p95_ms(need - 1)
    assert (d.valid, d.reason) == (True, Reason.SCALE_UP_FOR_SLO)
    assert "raised by the stage latency rule" in d.message
    assert (d.features["stage_target_p95_ms"], d.features["stage_latency_replicas"]) == (620.0, float(need))
    loose = latency_decision(3000.0)  # the share needs fewer than the Utilization rule: it decides
    assert (loose.desired_replicas, loose.reason) == (2, Reason.STEADY)
    assert loose.features["stage_latency_replicas"] <= 2


def test_an_execution_longer_than_the_share_leaves_the_pool_to_its_utilization_rule() -> None:
    """200 ms executions with SCV 1 have a p95 of ~600 ms on their own: a 400 ms share cannot be met by any
    count (more replicas do not shorten an execution), so the rule says so and sizes nothing."""
    d = latency_decision(400.0)
    assert (d.desired_replicas, d.reason) == (2, Reason.STEADY)
    assert "more replicas cannot fix that" in d.message and "stage_latency_replicas" not in d.features
    with pytest.raises(ValueError, match="stage_target_p95_ms"):
        dataclasses.replace(build_observation(pool_reading(), current_replicas=2, ready_replicas=2,
                                              slots_per_replica=2, budget_max_replicas=None, now=T0),
                            stage_target_p95_ms=0.0)


def test_the_daemon_splits_the_services_target_with_the_fronts_reading_and_records_the_split(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The service's default target (500 ms) split with the front's reading of the same interval: the pool's
    share is 500 x 5/7 = 357 ms against 200 ms executions (SCV 1): no count meets it, so the Utilization rule
    decides (4) and the block records the split; a looser front target would raise the count instead."""
    seen = daemon_pass(monkeypatch, STORED, pool_answers(T0, pods=2, rps_per_pod=20.0), front=front_reading())
    [(_, part)] = seen["scaled"]
    block = part.stage("image-encoder").autoscaler
    assert block.desired_replicas == 4
    assert "split by measured stage time" in block.message and "pool 71% = 357 ms" in block.message
    assert block.features["slo_split_share"] == pytest.approx(0.714)
    without = daemon_pass(monkeypatch, STORED, pool_answers(T0, pods=2, rps_per_pod=20.0))
    [(_, part)] = without["scaled"]
    assert "not split between the stages" in part.stage("image-encoder").autoscaler.message


def test_the_pool_decision_runs_while_staged_and_once_after_and_never_for_an_unstaged_service(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from modalscale.operator.autoscale.handlers import pool_decision_due

    assert pool_decision_due(True, None) and pool_decision_due(True, ScalerState())
    assert not pool_decision_due(False, None)  # never staged: no second read of the object
    assert pool_decision_due(False, ScalerState())  # stages just removed: one pass drops the pool's gauges
    staged = daemon_pass(monkeypatch, STORED, pool_answers(T0, pods=2, rps_per_pod=20.0))
    assert staged["state"] is not None  # a staged pass keeps a state: the next pass is due
    registry, exported = fresh_metrics()
    staged = daemon_pass(monkeypatch, STORED, pool_answers(T0, pods=2, rps_per_pod=20.0),
                         metrics=(registry, exported))
    assert samples(registry, "modalscale_autoscaler_desired_replicas")
    after = daemon_pass(monkeypatch, STORED, pool_answers(T0, pods=2, rps_per_pod=20.0),
                        metrics=(registry, exported), stages=None)  # the stages went
    assert after["state"] is None and after["reads"] == []  # no pool read, no further pass due
    assert samples(registry, "modalscale_autoscaler_desired_replicas") == {}  # the pool's gauges dropped


def test_the_pools_event_is_posted_once_its_count_is_in_status_even_if_the_deployment_write_then_fails(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The count is recorded in status before any Deployment write, and the next reconcile applies it, so the
    decision stands; its Event goes out right after the status patch, not after the Deployment write."""
    from kubernetes.client.exceptions import ApiException

    events: list[Any] = []
    monkeypatch.setattr("modalscale.operator.autoscale.handlers._post",
                        lambda deps, raw, evs, log: events.extend(evs))
    with pytest.raises(ApiException):
        daemon_pass(monkeypatch, STORED, pool_answers(T0, pods=2, rps_per_pod=20.0), deployment_write_fails=True)
    [(type_, reason, message)] = events  # the pass raised (the daemon retries), the Event was already posted
    assert (type_, reason) == ("Normal", "ScaleUpForUtilization") and message.startswith(
        "image encoder pool: 2 -> 4 ")


def test_the_pools_event_says_what_the_cap_split_applies_not_the_autoscalers_count(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24 review: the pool's Event announced the autoscaler's 2 -> 4 while the single planner's cap split
    applied 3 (or held 2): the Event names what is applied after the cap, and the autoscaler's count beside it."""
    capped = StageRecord("image-encoder", 2, 2, 3, "CappedByBudget", "capped at 4 replica(s) over both stages")
    seen = daemon_pass(monkeypatch, STORED, pool_answers(T0, pods=2, rps_per_pod=20.0), applied=capped)
    [(_, type_, reason, message)] = seen["events"]
    assert (type_, reason) == ("Normal", "CappedByBudget")
    assert message.startswith("image encoder pool: 2 -> 3 (the autoscaler's 4, CappedByBudget: capped at 4 replica(s)"
                              " over both stages; ScaleUpForUtilization: ")
    held = StageRecord("image-encoder", 2, 2, 2, "CappedByBudget", "capped at 3 replica(s) over both stages")
    seen = daemon_pass(monkeypatch, STORED, pool_answers(T0, pods=2, rps_per_pod=20.0), applied=held)
    [(_, type_, reason, message)] = seen["events"]
    assert (type_, reason) == ("Normal", "CappedByBudget")
    assert message.startswith("image encoder pool: held at 2 by the budget cap (the autoscaler's 4, CappedByBudget: "
                              "capped at 3 replica(s) over both stages; ScaleUpForUtilization: ")
    assert "pool: 2 -> 4" not in message


def test_the_pools_event_is_the_decisions_when_the_planner_applies_it_or_refused_the_spec() -> None:
    reading, d = decide(pool_answers(T0, pods=2, rps_per_pod=20.0), T0, current=2)
    plan = plan_image_encoder_autoscale(encoder_status(), d, reading, now=T0, utilization_ratio=1.0)
    assert plan.applied_events(StageRecord("image-encoder", 2, 2, 4, "ScaleUpForUtilization", "m")) == plan.events
    assert plan.applied_events(None) == plan.events  # refused (InvalidSpec): nothing applied, the decision stands
    cut = plan.applied_events(StageRecord("image-encoder", 2, 2, 3, "CappedByBudget", "cut"))
    assert cut[0][2].startswith("image encoder pool: 2 -> 3 (the autoscaler's 4, CappedByBudget: cut; ")


def test_the_pools_autoscaler_decides_under_its_share_of_the_cap_and_the_planner_keeps_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 24 review: the pool decided under the service's whole cap (4 here: "capped by budget at 4") and the
    planner's split then wrote less. It decides under its share (``isvc.plan.image_encoder_budget_cap``): the front
    at 3 and its replica costlier, the split leaves the pool 3 of the cap of 4; the encoder's costlier, 1. The
    planner's split of that count keeps it, so a rerun writes no other count."""
    from decimal import Decimal

    from modalscale.api.annotations import BudgetCap, cap_annotation_key
    from modalscale.autoscaler.policy import split_staged_cap
    from modalscale.operator.autoscale import handlers

    cap = {cap_annotation_key("ml", "daily"): BudgetCap(4, "ml/daily", "CapReplicas").encode()}
    for prices, share in (((Decimal("0.80"), Decimal("0.52")), 3), ((Decimal("0.31"), Decimal("0.52")), 1)):
        monkeypatch.setattr(handlers, "pool_prices", lambda deps, spec, raw, p=prices: p)
        seen = daemon_pass(monkeypatch, STORED, pool_answers(T0, pods=2, rps_per_pod=20.0), annotations=cap)
        [(_, part)] = seen["scaled"]
        block = part.stage("image-encoder").autoscaler
        assert (block.desired_replicas, block.reason) == (share, "CappedByBudget")
        assert f"capped by budget at {share} (the image encoder pool's share of the cap of 4" in block.message
        assert split_staged_cap(3, share, 4, *prices).image_encoder == share  # the planner writes it


def test_the_pool_takes_no_decision_while_the_fronts_deployment_cannot_be_read() -> None:
    """Issue 24 review: the pool's share of a cap over both pools (``image_encoder_budget_cap``) is split with the
    front's count, which the planner takes from ``status.desiredReplicas`` only while the front's Deployment exists
    (``decide_replicas``: ``minReplicas`` without it). Without that Deployment (before the first reconcile creates
    it, or deleted) the front's count and its traffic to the pool are not known: the pool holds (no decision), as
    the front's own daemon does (``decide_once``), rather than scale on data that could not be read. So also
    without the pool's Deployment or its status item (the reconcile creates them first)."""
    from modalscale.operator.autoscale.plan import pool_decision_held

    stored = IsvcStatus(desired_replicas=3, stages=(StageRecord("front", 3, 3), StageRecord("image-encoder", 2, 2)))
    front, pool = {"spec": {"replicas": 3}}, {"spec": {"replicas": 2}}
    assert pool_decision_held(stored, front, pool) is None
    assert pool_decision_held(stored, None, pool) == "the front's Deployment is not found"
    assert pool_decision_held(stored, front, None) == "the image encoder pool's Deployment is not found"
    assert pool_decision_held(IsvcStatus(desired_replicas=3), front, pool) == (
        "status.stages has no image-encoder item yet")


def test_the_daemon_holds_the_pool_without_the_fronts_deployment_under_a_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    """With its front's Deployment (3 replicas) the pool scales 2 -> 3 under its share of the cap of 6 (the encoder
    replica costlier: 6 - 3); without it nothing is decided, written, posted or exported, and the scaler's memory
    is kept."""
    from decimal import Decimal

    from modalscale.api.annotations import BudgetCap, cap_annotation_key
    from modalscale.operator.autoscale import handlers

    cap = {cap_annotation_key("ml", "daily"): BudgetCap(6, "ml/daily", "CapReplicas").encode()}
    monkeypatch.setattr(handlers, "pool_prices", lambda deps, spec, raw: (Decimal("0.31"), Decimal("0.52")))
    seen = daemon_pass(monkeypatch, STORED, pool_answers(T0, pods=2, rps_per_pod=20.0), annotations=cap)
    [(_, part)] = seen["scaled"]
    assert part.stage("image-encoder").autoscaler.desired_replicas == 3
    held = daemon_pass(monkeypatch, STORED, pool_answers(T0, pods=2, rps_per_pod=20.0), annotations=cap,
                       front_replicas=None)
    assert (held["scaled"], held["patched"], held["events"], held["state"]) == ([], [], [], None)


def test_the_pools_share_is_a_count_the_planners_split_keeps() -> None:
    """No churn: any count within the pool's share is what ``staged_replicas`` writes for it, for every front
    count, cap and price order of a small range (the split's own rule, ``split_staged_cap``)."""
    import itertools
    from decimal import Decimal

    from modalscale.autoscaler.policy import split_staged_cap
    from modalscale.operator.isvc.plan import image_encoder_budget_cap

    dear, cheap = Decimal("0.8"), Decimal("0.3")
    for prices in ((dear, cheap), (cheap, dear), (dear, dear), (None, dear)):
        for front, cap in itertools.product(range(1, 8), range(9)):
            status = IsvcStatus(desired_replicas=front)
            share = image_encoder_budget_cap(SPEC, status, cap, *prices)
            assert share is not None and share <= cap
            front_runs = min(front, cap)  # the front's own count within its bounds (1..8) and the whole cap
            for d in range(1, max(share, 1) + 1):
                assert split_staged_cap(front_runs, min(d, cap), cap, *prices).image_encoder == (d if cap else 0)
    assert image_encoder_budget_cap(SPEC, IsvcStatus(desired_replicas=3), None, dear, cheap) is None


def _cap_seen_by_recommend(monkeypatch: pytest.MonkeyPatch, raw: dict[str, Any], price_replica: Any,
                           replicas: int, observed: dict[str, Any] | None = None) -> int | None:
    """Run ``autoscale.handlers.decide_once`` once on InferenceService ``raw`` (its front's Deployment at
    ``replicas``, no metrics, replica prices from ``price_replica(resources, tier)``) and return the
    ``budget_max_replicas`` it handed ``recommend`` (``observed["observation"]``: the whole observation)."""
    import logging
    import threading
    import types

    from modalscale.operator.autoscale import handlers

    seen: dict[str, Any] = {}

    def recommend(observation: Any, *_: Any) -> Decision:
        seen["cap"] = observation.budget_max_replicas
        if observed is not None:
            observed["observation"] = observation
        return Decision(replicas, False, Reason.HELD_NO_METRICS, "held", {}, ScalerState(), ScalingMode.UTILIZATION)

    deps: Any = types.SimpleNamespace(
        autoscale=types.SimpleNamespace(reader=types.SimpleNamespace(read=lambda *a, **k: parse_answers({}, "byo")),
                                        metrics=types.SimpleNamespace(record=lambda *a, **k: None)),
        prices=types.SimpleNamespace(price_replica=price_replica),
        observer=types.SimpleNamespace(read_isvc=lambda ns, name: raw, apps=types.SimpleNamespace(
            read_namespaced_deployment=lambda name, ns, **_: {"metadata": OWNED, "spec": {"replicas": replicas},
                                                               "status": {"readyReplicas": replicas}})),
        writer=types.SimpleNamespace(patch_isvc_status=lambda *a: None),
        lock_for=lambda uid: threading.Lock(), clock=lambda: T0)
    monkeypatch.setattr(handlers, "read_json", lambda read, *args, **kw: read(*args, **kw))
    monkeypatch.setattr(handlers, "recommend", recommend)
    handlers.decide_once(deps, "ml", "vc", None, logging.getLogger("test"))
    return seen["cap"]


def test_a_staged_fronts_autoscaler_decides_under_its_share_of_the_cap_over_both_pools(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``decide_once`` hands ``recommend`` the front's share of a BudgetPolicy cap (``isvc.plan.front_budget_cap``,
    the pools priced by ``isvc.reconcile.stage_prices``), not the whole cap: the count the planner's split leaves
    the front, so its decision is never undone by the next reconcile. Cap 4, the pool's own count 3: the front's
    replica costlier -> its share is 1; the pool's costlier -> 3 (the pool goes to 1 first); one piece -> 4."""
    import types
    from decimal import Decimal

    from modalscale.api.annotations import BudgetCap, cap_annotation_key

    def share(prices: tuple[str, str], stages: dict[str, Any] | None = STAGES) -> int | None:
        raw = inference_service("vc", "ml", uid="u1", generation=1, scaling=SCALING, stages=stages,
                                model={"name": "byo", "source": "BuiltIn"},
                                annotations={cap_annotation_key("ml", "daily"): BudgetCap(4, "ml/daily",
                                                                                          "CapReplicas").encode()})
        raw["status"] = {"desiredReplicas": 2, "stages": [
            {"name": "front", "replicas": 2},
            {"name": "image-encoder", "replicas": 3, "autoscaler": {"valid": True, "desiredReplicas": 3}}]}
        asked = iter(Decimal(p) for p in prices)  # the front's replica first, then the pool's
        return _cap_seen_by_recommend(monkeypatch, raw, lambda res, tier: types.SimpleNamespace(
            usd_per_hour=next(asked)), replicas=2)

    assert share(("0.80", "0.52")) == 1
    assert share(("0.31", "0.52")) == 3
    assert share(("0.52", "0.52")) == 2  # equal prices: the larger pool first, so the two meet at 2 + 2
    assert share(("0.80", "0.52"), stages=None) == 4  # one piece: the cap itself, nothing priced


@pytest.mark.parametrize("stages", [STAGES, None], ids=["staged-front", "one-piece"])
def test_the_fronts_autoscaler_is_told_a_cap_annotation_cannot_be_read(monkeypatch: pytest.MonkeyPatch,
                                                                        stages: dict[str, Any] | None) -> None:
    """``decide_once`` hands ``recommend`` the decode error of an unreadable cap annotation (so it holds) beside the
    readable caps (before: the annotation was skipped and the front decided as if uncapped)."""
    import types
    from decimal import Decimal

    raw = inference_service("vc", "ml", uid="u1", generation=1, scaling=SCALING, stages=stages,
                            model={"name": "byo", "source": "BuiltIn"},
                            annotations={"budget.modalscale.io/cap-0000000000": "not json"})
    raw["status"] = {"desiredReplicas": 2}
    observed: dict[str, Any] = {}
    cap = _cap_seen_by_recommend(monkeypatch, raw, lambda res, tier: types.SimpleNamespace(
        usd_per_hour=Decimal("0.5")), replicas=2, observed=observed)
    assert cap is None
    assert "budget.modalscale.io/cap-0000000000" in observed["observation"].budget_cap_unreadable


def test_a_staged_fronts_share_is_priced_at_the_tier_its_pods_run_on_under_a_switch_to_spot(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a ``SwitchToSpot`` the planner (the full reconcile and every scale pass: ``with_spot_placement``)
    splits the cap by the Spot prices of the two pools, so ``decide_once`` must price the front's share at Spot too.
    Here the ranking flips with the tier (a GPU's Spot discount is not a CPU's): on demand the encoder replica costs
    more (share 3), at Spot the front's does (share 1). A share at on-demand prices would decide 3 where the planner
    writes 1: every decision interval a new desiredReplicas, a status patch and a scale Event."""
    import types
    from decimal import Decimal

    from modalscale.api.annotations import BudgetCap, SpotSwitch, cap_annotation_key, spot_annotation_key

    raw = inference_service("vc", "ml", uid="u1", generation=1, scaling=SCALING, stages=STAGES,
                            model={"name": "byo", "source": "BuiltIn"},
                            annotations={cap_annotation_key("ml", "daily"): BudgetCap(4, "ml/daily",
                                                                                      "CapReplicas").encode(),
                                         spot_annotation_key("ml", "daily"): SpotSwitch("ml/daily", 50).encode()})
    raw["status"] = {"desiredReplicas": 1, "stages": [
        {"name": "front", "replicas": 1},
        {"name": "image-encoder", "replicas": 3, "autoscaler": {"valid": True, "desiredReplicas": 3}}]}
    # (front, encoder) USD/h of a replica at each tier, asked front first
    table = {"OnDemand": (Decimal("0.31"), Decimal("0.52")), "Spot": (Decimal("0.28"), Decimal("0.14"))}
    asked: list[str] = []

    def price_replica(res: Any, tier: Any) -> Any:
        tier = getattr(tier, "value", tier)
        asked.append(tier)
        return types.SimpleNamespace(usd_per_hour=table[tier][(asked.count(tier) - 1) % 2])

    cap = _cap_seen_by_recommend(monkeypatch, raw, price_replica, replicas=1)
    assert set(asked) == {"Spot"}
    assert cap == 1  # the planner's split at Spot prices: the front costlier, down to 1 first
