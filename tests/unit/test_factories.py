"""The shared test factories (tests/factories.py) build what the api parsers accept, with the defaults they document:
a spec change that the factories miss fails here, not in twenty tests at once."""

from __future__ import annotations

from decimal import Decimal

import pytest

from modalscale.api.budgetpolicy import InvalidBudgetSpec, ThresholdAction, parse_budget_spec
from modalscale.api.errors import InvalidSpec
from modalscale.api.inferenceservice import parse_isvc
from modalscale.autoscaler.policy import WorkloadClass
from tests.factories import OBSERVED_AT, budget_policy, inference_service, observation


def test_the_default_inference_service_parses_with_its_documented_defaults() -> None:
    isvc = parse_isvc(inference_service("vc", "ml", uid="u-1", generation=1))
    assert (isvc.namespace, isvc.name, isvc.uid, isvc.generation) == ("ml", "vc", "u-1", 1)
    assert (isvc.resources.cpu, isvc.resources.memory) == ("1", "2Gi")
    assert (isvc.resources.gpu_count, isvc.resources.gpu_type) == (1, "nvidia-l4")
    assert (isvc.scaling.mode, isvc.scaling.replicas, isvc.scaling.min_replicas, isvc.scaling.max_replicas) == (
        "Fixed", 2, 1, 6)
    assert isvc.gateway.enabled  # no gateway member: the CRD default (on)


def test_an_inference_service_override_replaces_the_whole_member_and_parses() -> None:
    body = inference_service(scaling={"mode": "Predictive", "minReplicas": 2, "maxReplicas": 4},
                             gateway={"enabled": False}, labels={"team": "a"}, annotations={"note": "x"})
    assert body["spec"]["scaling"] == {"mode": "Predictive", "minReplicas": 2, "maxReplicas": 4}  # no "replicas"
    assert body["metadata"] == {"name": "vc", "labels": {"team": "a"}, "annotations": {"note": "x"}}
    isvc = parse_isvc(body)
    assert (isvc.scaling.mode, isvc.scaling.replicas, isvc.gateway.enabled, isvc.labels) == (
        "Predictive", None, False, {"team": "a"})


def test_an_inference_service_the_parser_refuses_still_raises_through_the_factory() -> None:
    """The parse checks above can fail: a factory body with a bad member is refused."""
    with pytest.raises(InvalidSpec, match="spec.scaling"):
        parse_isvc(inference_service(scaling={"mode": "Fixed", "minReplicas": 1, "maxReplicas": 6}))  # no replicas


def test_factory_bodies_are_fresh_copies() -> None:
    a, b = inference_service(), inference_service()
    a["spec"]["resources"]["gpu"]["count"] = 0
    a["spec"]["scaling"]["replicas"] = 5
    assert b["spec"]["resources"]["gpu"]["count"] == 1 and b["spec"]["scaling"]["replicas"] == 2
    p, q = budget_policy(), budget_policy()
    p["spec"]["thresholds"][0]["capReplicas"] = 7
    p["spec"]["limit"]["amount"] = "9"
    assert q["spec"]["thresholds"][0]["capReplicas"] == 1 and q["spec"]["limit"]["amount"] == "2"


def test_the_default_budget_policy_parses_with_its_documented_defaults() -> None:
    body = budget_policy(uid="p-1", generation=1)
    assert body["metadata"] == {"name": "daily", "namespace": "ml", "uid": "p-1", "generation": 1}
    spec = parse_budget_spec(body["spec"])
    assert (spec.period, spec.limit.amount, spec.limit.currency) == ("Daily", Decimal("2"), "USD")
    assert [(t.percent, t.actions, t.cap_replicas) for t in spec.thresholds] == [
        (50, (ThresholdAction.ALERT, ThresholdAction.CAP_REPLICAS), 1),
        (100, (ThresholdAction.ALERT, ThresholdAction.SCALE_DOWN), None)]
    assert spec.enforcement.floor_replicas == 1
    assert not spec.forecast.enabled
    assert spec.evaluation_interval_s == 60


def test_a_budget_policy_override_parses_and_a_bad_one_is_refused() -> None:
    spec = parse_budget_spec(budget_policy(limit={"amount": "5.50"}, evaluationIntervalSeconds=30)["spec"])
    assert (spec.limit.amount, spec.evaluation_interval_s) == (Decimal("5.50"), 30)
    with pytest.raises(InvalidBudgetSpec, match="thresholds"):
        parse_budget_spec(budget_policy(thresholds=[])["spec"])


def test_the_default_observation_is_valid_and_all_ready() -> None:
    obs = observation()
    assert (obs.observed_at, obs.current_replicas, obs.ready_replicas) == (OBSERVED_AT, 1, 1)
    assert obs.observed_at.utcoffset() is not None
    assert obs.workload is None and obs.window_s == 60.0
    text = (WorkloadClass(modality="text", rate_rps=5.0, mean_text_tokens=100),)
    some = observation(current_replicas=4, ready_replicas=3, workload=text, p95_latency_ms=float("nan"))
    assert (some.current_replicas, some.ready_replicas, some.workload) == (4, 3, text)
    assert some.p95_latency_ms is None  # the class's own validation runs (non-finite = unknown)
