"""``AutoscalerMetrics``: the front's and the image encoder pool's decisions, told apart by ``stage``."""

from __future__ import annotations

import datetime as dt

from prometheus_client import CollectorRegistry

from modalscale.api.isvc_status import ScalerState
from modalscale.autoscaler.policy import Decision, Reason, ScalingMode
from modalscale.operator.autoscale.metrics import STAGES, AutoscalerMetrics

T0 = dt.datetime(2026, 12, 3, 12, 0, tzinfo=dt.UTC)


def decision(replicas: int, reason: Reason, valid: bool = True, **features: float) -> Decision:
    return Decision(desired_replicas=replicas, reason=reason, mode_used=ScalingMode.UTILIZATION,
                    message="m", features=features, state=ScalerState(), valid=valid)


def samples(registry: CollectorRegistry, name: str) -> dict[tuple[str, ...], float]:
    """``(stage, other label values...)`` -> value of the samples of ``name``."""
    out = {}
    for family in registry.collect():
        for s in family.samples:
            if s.name == name:
                rest = tuple(v for k, v in sorted(s.labels.items()) if k not in ("namespace", "inferenceservice",
                                                                                    "stage"))
                out[(s.labels["stage"], *rest)] = s.value
    return out


def test_the_stage_label_keeps_the_front_and_the_pool_apart_and_the_front_is_the_default() -> None:
    registry = CollectorRegistry()
    m = AutoscalerMetrics(registry)
    m.record("ml", "vc", decision(3, Reason.STEADY, offered_load_erlangs=1.5), True, True, 0.4)
    m.record("ml", "vc", decision(4, Reason.SCALE_UP_FOR_UTILIZATION), True, None, 0.9, stage="image-encoder")
    m.record("ml", "vc", decision(4, Reason.HELD_NO_METRICS, valid=False), False, None, None,
             stage="image-encoder")
    assert STAGES == ("front", "image-encoder")
    assert samples(registry, "modalscale_autoscaler_desired_replicas") == {("front",): 3.0, ("image-encoder",): 4.0}
    assert samples(registry, "modalscale_autoscaler_utilization_ratio") == {("front",): 0.4,
                                                                             ("image-encoder",): 0.9}
    assert samples(registry, "modalscale_autoscaler_metrics_available") == {("front",): 1.0,
                                                                             ("image-encoder",): 0.0}
    assert samples(registry, "modalscale_autoscaler_cost_model_loaded") == {("front",): 1.0}
    assert samples(registry, "modalscale_autoscaler_offered_load_erlangs") == {("front",): 1.5}
    assert samples(registry, "modalscale_autoscaler_decisions_total") == {
        ("front", "Steady", "true"): 1.0, ("image-encoder", "ScaleUpForUtilization", "true"): 1.0,
        ("image-encoder", "HeldNoMetrics", "false"): 1.0}


def test_forget_drops_the_gauges_of_the_stages_named_and_by_default_of_both() -> None:
    registry = CollectorRegistry()
    m = AutoscalerMetrics(registry)
    for stage in STAGES:
        m.record("ml", "vc", decision(2, Reason.STEADY, image_rps=3.0), True, None, 0.5, stage=stage)
    m.forget("ml", "vc", ("image-encoder",))
    assert samples(registry, "modalscale_autoscaler_desired_replicas") == {("front",): 2.0}
    assert samples(registry, "modalscale_autoscaler_arrival_requests_per_second") == {("front", "image"): 3.0}
    m.forget("ml", "vc")
    assert samples(registry, "modalscale_autoscaler_desired_replicas") == {}
    assert samples(registry, "modalscale_autoscaler_arrival_requests_per_second") == {}
