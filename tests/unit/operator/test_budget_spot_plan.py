"""SwitchToSpot through the operator's pure planners: annotations, status, condition and Events of the policy;
the Deployment's Spot placement and its removal; pods priced by the tier of their node."""

from __future__ import annotations

import copy
import datetime as dt
import json
from typing import Any

import pytest

from modalscale.api.annotations import (
    BudgetCap,
    SpotSwitch,
    cap_annotation_key,
    spot_annotation_key,
    spot_switches,
)
from modalscale.api.capacity import SPOT_NODE_SELECTOR, SPOT_TOLERATION
from modalscale.api.inferenceservice import parse_isvc
from modalscale.costmodel.catalog import load_catalog
from modalscale.operator.budget.plan import BudgetObserved, lift_all, observed_namespaces, plan_policy
from modalscale.operator.conditions import get
from modalscale.operator.isvc.objects import build_deployment, image_encoder_spec
from modalscale.operator.isvc.plan import (
    IsvcObserved,
    PlanConfig,
    hold_spot_placement,
    observe_budget_cap,
    plan_isvc,
    with_spot_placement,
)
from tests.factories import budget_policy, inference_service

CATALOG = load_catalog()
T0 = dt.datetime(2026, 11, 30, 10, 0, tzinfo=dt.UTC)
SPOT_KEY = spot_annotation_key("ml", "daily")
SPOT_NODE = "kwok-gpu-spot-0"
NODES = {"kwok-gpu-0": {"type": "kwok"}, SPOT_NODE: {"type": "kwok", "karpenter.sh/capacity-type": "spot"}}


def make_policy(timeout_s: int = 120, limit: str = "2") -> dict[str, Any]:
    return budget_policy(uid="p-1", generation=1, limit={"amount": limit},
                         thresholds=[{"percent": 50, "actions": ["Alert", "SwitchToSpot"], "spotMaxPriority": 50}],
                         enforcement={"spotPendingTimeoutSeconds": timeout_s})


def make_isvc(name: str, priority: int, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return inference_service(name, "ml", uid=f"u-{name}", generation=1, annotations=annotations or {},
                             scaling={"mode": "Fixed", "replicas": 2, "minReplicas": 1, "maxReplicas": 4},
                             priority=priority)


def make_pod(isvc: str, i: int, node: str | None, spot: bool = False,
             created: str = "2026-11-30T09:00:00Z") -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeName": node} if node else {}
    if spot:
        spec.update(nodeSelector=dict(SPOT_NODE_SELECTOR), tolerations=[SPOT_TOLERATION])
    return {"metadata": {"name": f"{isvc}-{i}", "labels": {"modalscale.io/inferenceservice": isvc},
                         "creationTimestamp": created},
            "spec": spec, "status": {"phase": "Running" if node else "Pending", "startTime": "2026-11-30T10:00:00Z"}}


def persisted(policy: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(policy)
    status = out.setdefault("status", {})
    for k, v in patch.items():
        if v is None:
            status.pop(k, None)
        else:
            status[k] = copy.deepcopy(v)
    return out


def test_a_crossing_annotates_the_low_priority_service_and_reports_it() -> None:
    batch, search = make_isvc("batch", 10), make_isvc("search", 100)
    pods = [make_pod(n, i, "kwok-gpu-0") for n in ("batch", "search") for i in range(2)]
    obs = BudgetObserved([batch, search], {"ml": pods}, NODES)
    p1 = persisted(make_policy(), plan_policy(make_policy(), obs, CATALOG, [], T0).status_patch)
    # 4 replicas x 0.600125239 USD/h for 30 min = 1.20 of 2 USD: 50 % crossed.
    plan = plan_policy(p1, obs, CATALOG, [], T0 + dt.timedelta(minutes=30))
    (w,) = plan.annotation_writes
    assert (w.name, w.key) == ("batch", SPOT_KEY)
    assert SpotSwitch.decode(w.key, w.value or "") == SpotSwitch("ml/daily", 50)
    (record,) = plan.status_patch["spotServices"]
    assert (record["name"], record["state"], record["thresholdPercent"]) == ("batch", "Spot", 50)
    c = get(plan.status_patch["conditions"], "SpotFallback")
    assert (c["status"], c["reason"]) == ("False", "SpotAvailable") and "ml/batch" in c["message"]
    assert ("Warning", "SwitchedToSpot") in [(e[0], e[1]) for e in plan.events]


def test_spot_pods_pending_past_the_timeout_remove_the_annotation_with_condition_and_event() -> None:
    batch = make_isvc("batch", 10, {SPOT_KEY: SpotSwitch("ml/daily", 50).encode()})
    t1 = T0 + dt.timedelta(minutes=30)
    # On-demand pods still serve; the rollout's Spot pod waits since t1 (no Spot node has room).
    pods = [make_pod("batch", 0, "kwok-gpu-0"), make_pod("batch", 1, "kwok-gpu-0"),
            make_pod("batch", 2, None, spot=True, created="2026-11-30T10:30:00Z")]
    obs = BudgetObserved([batch], {"ml": pods}, NODES)
    base = make_policy(timeout_s=120, limit="1")  # 2 x 0.600125239 USD/h for 30 min: 60 % of 1 USD at t1
    p1 = persisted(base, plan_policy(base, obs, CATALOG, [], T0).status_patch)
    p2 = persisted(p1, plan_policy(p1, obs, CATALOG, [], t1).status_patch)
    still = plan_policy(p2, obs, CATALOG, [], t1 + dt.timedelta(seconds=119))
    assert still.annotation_writes == []
    p3 = persisted(p2, still.status_patch) if still.status_patch else p2
    plan = plan_policy(p3, obs, CATALOG, [], t1 + dt.timedelta(seconds=120))
    (w,) = plan.annotation_writes
    assert (w.name, w.key, w.value) == ("batch", SPOT_KEY, None)  # back to on-demand
    (record,) = plan.status_patch["spotServices"]
    assert record["state"] == "OnDemandFallback" and record["fallbackTime"] == "2026-11-30T10:32:00Z"
    c = get(plan.status_patch["conditions"], "SpotFallback")
    assert (c["status"], c["reason"]) == ("True", "SpotPendingTimeout") and "120 s" in c["message"]
    assert ("Warning", "SpotPendingTimeout") in [(e[0], e[1]) for e in plan.events]


def test_pods_on_a_spot_node_are_charged_at_the_spot_price() -> None:
    batch = make_isvc("batch", 10)
    pods = [make_pod("batch", 0, SPOT_NODE, spot=True), make_pod("batch", 1, "kwok-gpu-0")]
    plan = plan_policy(make_policy(), BudgetObserved([batch], {"ml": pods}, NODES), CATALOG, [], T0)
    (entry,) = plan.status_patch["ledger"]["services"]
    assert entry["costUSDPerHour"] == "0.877364239"  # 0.600125239 on-demand + 0.277239 Spot, by hand
    # The anomaly detector's sample carries the effective price per replica (a move to Spot is a price change).
    sample = plan.burn_samples[("ml", "batch")]
    assert (sample.replicas, sample.usd_per_replica_hour) == (2, 0.877364239 / 2)
    # Nodes not readable: the pod that asked for a Spot node is still priced at Spot.
    unread = plan_policy(make_policy(), BudgetObserved([batch], {"ml": pods}, None), CATALOG, [], T0)
    assert unread.status_patch["ledger"]["services"][0]["costUSDPerHour"] == "0.877364239"


def test_policies_without_switch_to_spot_get_no_spot_condition() -> None:
    policy = make_policy()
    policy["spec"]["thresholds"] = [{"percent": 50, "actions": ["Alert"]}]
    plan = plan_policy(policy, BudgetObserved([], {}), CATALOG, [], T0)
    assert get(plan.status_patch["conditions"], "SpotFallback") is None


# ------------------------------------------------------------------------------------------- the Deployment
def test_spot_placement_adds_selector_toleration_and_the_spot_tier() -> None:
    spec = parse_isvc(make_isvc("batch", 10))
    assert with_spot_placement(spec, ()) is spec
    spot = with_spot_placement(spec, (SpotSwitch("ml/daily", 50),))
    assert spot.pricing_tier == "Spot"
    pod = build_deployment(spot, 2, {})["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "nvidia-l4", "karpenter.sh/capacity-type": "spot"}
    assert SPOT_TOLERATION in pod["tolerations"]
    assert with_spot_placement(spot, (SpotSwitch("ml/daily", 50),)).placement.tolerations.count(SPOT_TOLERATION) == 1


def test_leaving_spot_nulls_the_selector_key_and_replaces_the_tolerations() -> None:
    spec = parse_isvc(make_isvc("batch", 10))
    tolerate_s = PlanConfig().node_loss_toleration_s  # the Deployment as the operator writes it
    on_spot = build_deployment(with_spot_placement(spec, (SpotSwitch("ml/daily", 50),)), 2, {},
                               node_loss_toleration_s=tolerate_s)
    on_spot["status"] = {"replicas": 2, "readyReplicas": 2, "updatedReplicas": 2, "observedGeneration": 1}
    on_spot["metadata"]["generation"] = 1
    obs = IsvcObserved(deployment=on_spot, service=None, configmap=None)
    plan = plan_isvc(spec, obs, {}, PlanConfig(), T0)
    (w,) = [w for w in plan.writes if w.kind == "Deployment" and w.name == "batch"]  # the replicas'
    pod = w.body["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "nvidia-l4", "karpenter.sh/capacity-type": None}
    assert SPOT_TOLERATION not in pod["tolerations"] and pod["tolerations"]  # the GPU toleration stays
    # The gateway (on by default) is created beside, never on Spot.
    (gw,) = [w for w in plan.writes if w.kind == "Deployment" and w.name == "batch-gateway"]
    assert json.dumps(gw.body).count("capacity-type") == 0
    # Already off Spot: no such patch.
    plain = build_deployment(spec, 2, {}, node_loss_toleration_s=tolerate_s)
    plain["status"], plain["metadata"]["generation"] = on_spot["status"], 1
    again = plan_isvc(spec, IsvcObserved(deployment=plain), {}, PlanConfig(), T0)
    assert not any(w.kind == "Deployment" and w.name == "batch" and "template" in w.body.get("spec", {})
                   for w in again.writes)
    assert json.dumps(plain).count("capacity-type") == 0


def test_a_deleted_policy_lifts_its_spot_annotation_and_switched_namespaces_stay_observed() -> None:
    other = {SPOT_KEY: SpotSwitch("ml/daily", 50).encode(), "budget.modalscale.io/spot-0000000000": "{}"}
    writes = lift_all(make_policy(), [make_isvc("batch", 10, other), make_isvc("search", 100)])
    assert [(w.name, w.key, w.value) for w in writes] == [("batch", SPOT_KEY, None)]  # only this policy's key
    policy = make_policy()
    policy["status"] = {"spotServices": [{"namespace": "ads", "name": "batch", "thresholdPercent": 50,
                                          "state": "Spot", "since": "2026-11-30T10:00:00Z"}]}
    assert observed_namespaces(policy) == ("ads", "ml")


def test_the_inferenceservice_says_it_runs_on_spot_in_budget_limited() -> None:
    spec = with_spot_placement(parse_isvc(make_isvc("batch", 10)), (SpotSwitch("ml/daily", 50),))
    obs = IsvcObserved(spot_policy="ml/daily")
    c = get(plan_isvc(spec, obs, {}, PlanConfig(), T0).status.conditions, "BudgetLimited")
    assert (c["status"], c["reason"]) == ("True", "MovedToSpot")
    assert c["message"] == "BudgetPolicy ml/daily runs the pods on Spot capacity (karpenter.sh/capacity-type=spot)"
    obs.budget_cap_replicas, obs.budget_cap_policy = 1, "ml/daily"
    c = get(plan_isvc(spec, obs, {}, PlanConfig(), T0).status.conditions, "BudgetLimited")
    assert c["reason"] == "CappedByBudget" and c["message"].endswith("; BudgetPolicy ml/daily runs the pods on Spot "
                                                                     "capacity (karpenter.sh/capacity-type=spot)")
    plain = get(plan_isvc(parse_isvc(make_isvc("batch", 10)), IsvcObserved(), {}, PlanConfig(), T0
                          ).status.conditions, "BudgetLimited")
    assert (plain["status"], plain["reason"]) == ("False", "WithinBudget")


def _deployed(spec: Any) -> dict[str, Any]:
    """``spec``'s Deployment as the operator writes it, rolled out."""
    dep = build_deployment(spec, 2, {}, node_loss_toleration_s=PlanConfig().node_loss_toleration_s)
    dep["status"] = {"replicas": 2, "readyReplicas": 2, "updatedReplicas": 2, "observedGeneration": 1}
    dep["metadata"]["generation"] = 1
    return dep


def test_an_unreadable_spot_annotation_moves_no_pod_and_budget_limited_names_it() -> None:
    """A Spot annotation that does not decode is skipped by ``spot_switches``: before, the reconcile took the Spot
    placement off a Deployment on Spot (a rollout of every replica) on data it could not read."""
    annotations = {SPOT_KEY: '{"policy":"ml/daily","capacityType":"spot?"'}  # truncated: not JSON
    raw = make_isvc("batch", 10, annotations)
    spec = with_spot_placement(parse_isvc(raw), spot_switches(annotations))
    assert spec.pricing_tier != "Spot"  # what the reconcile read before observing
    for on_spot in (True, False):
        dep = _deployed(with_spot_placement(spec, (SpotSwitch("ml/daily", 50),)) if on_spot else spec)
        obs = IsvcObserved(deployment=dep, service=None, configmap=None)
        observe_budget_cap(obs, annotations)
        held = hold_spot_placement(spec, obs, annotations)
        assert (held.pricing_tier == "Spot") is on_spot
        plan = plan_isvc(held, obs, {}, PlanConfig(), T0)
        assert not [w for w in plan.writes if w.kind == "Deployment" and w.name == "batch"
                    and "template" in w.body.get("spec", {})], "the pods' placement must hold"
        c = get(plan.status.conditions, "BudgetLimited")
        assert (c["status"], c["reason"]) == ("True", "BudgetAnnotationUnreadable"), c
        assert f"annotation {SPOT_KEY}" in c["message"]
        assert f"stay on {'Spot' if on_spot else 'on-demand'} capacity" in c["message"], c["message"]
    # A readable switch or none at all: the hold does nothing.
    readable = {SPOT_KEY: SpotSwitch("ml/daily", 50).encode()}
    obs = IsvcObserved(deployment=_deployed(spec))
    assert hold_spot_placement(spec, obs, readable) is spec and hold_spot_placement(spec, obs, {}) is spec
    # Deleted: the next reconcile takes the pods off Spot as before.
    dep = _deployed(with_spot_placement(spec, (SpotSwitch("ml/daily", 50),)))
    obs = IsvcObserved(deployment=dep, service=None, configmap=None)
    observe_budget_cap(obs, {})
    plan = plan_isvc(hold_spot_placement(spec, obs, {}), obs, {}, PlanConfig(), T0)
    assert [w for w in plan.writes if w.kind == "Deployment" and w.name == "batch" and "template" in w.body["spec"]]
    assert get(plan.status.conditions, "BudgetLimited")["reason"] == "WithinBudget"


def test_an_unreadable_rejection_annotation_is_named_beside_a_readable_cap_and_an_event_posted() -> None:
    reject = "budget.modalscale.io/reject-0123456789"
    annotations = {reject: "not json",
                   cap_annotation_key("ml", "daily"): BudgetCap(1, "ml/daily", "CapReplicas").encode()}
    spec = parse_isvc(make_isvc("batch", 10, annotations))
    obs = IsvcObserved(deployment=_deployed(spec), service=None, configmap=None)
    observe_budget_cap(obs, annotations)
    assert obs.budget_cap_replicas == 1, obs
    plan = plan_isvc(spec, obs, {}, PlanConfig(), T0)
    c = get(plan.status.conditions, "BudgetLimited")
    assert (c["status"], c["reason"]) == ("True", "BudgetAnnotationUnreadable"), c
    assert f"annotation {reject}" in c["message"] and "keeps refusing the tenants it last read" in c["message"]
    assert c["message"].endswith("BudgetPolicy ml/daily caps replicas at 1"), c["message"]
    assert ("Warning", "BudgetAnnotationUnreadable") in [(t, r) for t, r, _ in plan.events]


def test_a_spec_that_asks_for_spot_itself_is_not_moved_by_an_unreadable_annotation() -> None:
    """Found by review: the hold read the Spot node selector the user's own ``spec.placement`` asks for as a
    ``SwitchToSpot``'s, so an unreadable key switched the service to the Spot tier and the operator's toleration (a
    rollout of every replica)."""
    raw = make_isvc("batch", 10, {SPOT_KEY: "not json"})
    raw["spec"]["placement"] = {"nodeSelector": {"karpenter.sh/capacity-type": "spot"},
                                "tolerations": [{"key": "karpenter.sh/capacity-type", "operator": "Exists"}]}
    spec = parse_isvc(raw)
    obs = IsvcObserved(deployment=_deployed(spec))
    assert hold_spot_placement(spec, obs, raw["metadata"]["annotations"]) is spec


def test_a_staged_pool_on_spot_keeps_its_placement_while_the_front_deployment_is_missing() -> None:
    raw = make_isvc("batch", 10, {SPOT_KEY: "not json"})
    raw["spec"]["stages"] = {"imageEncoder": {"minReplicas": 1, "maxReplicas": 2}}
    spec = parse_isvc(raw)
    pool = build_deployment(image_encoder_spec(with_spot_placement(spec, (SpotSwitch("ml/daily", 50),))), 1, {})
    obs = IsvcObserved(deployment=None, image_encoder={"Deployment": pool})
    assert hold_spot_placement(spec, obs, raw["metadata"]["annotations"]).pricing_tier == "Spot"
    assert hold_spot_placement(spec, IsvcObserved(), raw["metadata"]["annotations"]) is spec  # nothing yet


def test_the_autoscaler_prices_a_held_staged_service_at_the_tier_the_planner_prices_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Found by review: the autoscaler's ``pool_prices`` placed the pods by the readable Spot annotations alone, so
    under a held Spot placement it priced both pools on-demand while the planner priced them at Spot; with Spot
    discounts that differ by GPU the two split a cap differently and every front decision was undone."""
    from types import SimpleNamespace

    from modalscale.operator.autoscale import handlers
    from modalscale.operator.isvc.reconcile import stage_prices

    annotations = {SPOT_KEY: "not json"}
    raw = make_isvc("batch", 10, annotations)
    raw["spec"]["stages"] = {"imageEncoder": {"minReplicas": 2, "maxReplicas": 4, "resources": {
        "cpu": "1", "memory": "2Gi", "gpu": {"count": 2, "type": "nvidia-t4"}}}}
    spec = parse_isvc(raw)
    front = _deployed(with_spot_placement(spec, (SpotSwitch("ml/daily", 50),)))
    reads: list[str] = []

    def read(name: str, namespace: str) -> dict[str, Any] | None:
        reads.append(name)
        return front if name == "batch" else None

    monkeypatch.setattr(handlers, "read_json", lambda fn, name, namespace: fn(name, namespace))
    book = SimpleNamespace(price_replica=lambda res, tier: SimpleNamespace(usd_per_hour=CATALOG.price_replica(res,
                                                                                                             tier)))
    deps = SimpleNamespace(prices=book, observer=SimpleNamespace(apps=SimpleNamespace(
        read_namespaced_deployment=read)))
    held = hold_spot_placement(spec, IsvcObserved(deployment=front), annotations)
    assert held.pricing_tier == "Spot"
    assert handlers.pool_prices(deps, spec, raw) == stage_prices(deps, held)  # type: ignore[arg-type]
    assert reads == ["batch", "batch-image-encoder"]
    reads.clear()
    readable = {SPOT_KEY: SpotSwitch("ml/daily", 50).encode()}
    assert handlers.pool_prices(deps, spec, {**raw, "metadata": {**raw["metadata"], "annotations": readable}}) \
        == stage_prices(deps, held)  # type: ignore[arg-type]
    assert reads == []  # no read without an unreadable annotation
