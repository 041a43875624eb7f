"""The pure BudgetPolicy planner of the operator: annotations, status written only on change, conditions, Events.

Prices come from the packaged catalog: one replica with 1 CPU, 2Gi and one nvidia-l4 costs
1 x 0.031611 + 2 x 0.004237 + 0.560040239 = 0.600125239 USD/h, so two replicas cost 1.200250478 USD/h.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pytest

from modalscale.api.annotations import cap_annotation_key
from modalscale.api.budgetpolicy import parse_budget_spec
from modalscale.costmodel.catalog import load_catalog
from modalscale.costmodel.outbox import POSSIBLE_DUPLICATE_FACT, Attempt
from modalscale.operator.budget.plan import (
    BudgetObserved,
    cap_annotation_value,
    heartbeat_s,
    lift_all,
    longest_stop_s,
    observed_namespaces,
    plan_policy,
    receiver_problem,
    selected_services,
)
from modalscale.operator.conditions import get
from tests.factories import budget_policy, inference_service

CATALOG = load_catalog()
T0 = dt.datetime(2026, 11, 30, 10, 0, tzinfo=dt.UTC)
KEY = "budget.modalscale.io/cap-cfac823678"  # sha256("ml/daily")[:10], computed once by hand with hashlib
TWO_REPLICAS_USD_PER_HOUR = Decimal("1.200250478")


def make_policy(**spec: Any) -> dict[str, Any]:
    return budget_policy(uid="p-1", generation=1, **spec)


def make_isvc(name: str = "vc", ns: str = "ml", gpu_type: str = "nvidia-l4", labels: dict[str, str] | None = None,
              annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    return inference_service(name, ns, uid=f"u-{name}", generation=1, labels=labels or {},
                             annotations=annotations or {}, **{
                                 "resources": {"cpu": "1", "memory": "2Gi", "gpu": {"count": 1, "type": gpu_type}},
                                 "scaling": {"mode": "Fixed", "replicas": 2, "minReplicas": 1, "maxReplicas": 4},
                                 **spec})


def make_pod(isvc: str, i: int, node: str | None = "kwok-gpu-0", phase: str = "Running",
             deleting: bool = False, grace_s: int | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"{isvc}-{i}", "labels": {"modalscale.io/inferenceservice": isvc}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T09:00:00Z"
    spec: dict[str, Any] = {"nodeName": node} if node else {}
    if grace_s is not None:
        spec["terminationGracePeriodSeconds"] = grace_s
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def observed(*isvcs: dict[str, Any], pods: dict[str, list[dict[str, Any]] | None] | None = None) -> BudgetObserved:
    if pods is None:
        pods = {"ml": [make_pod(i["metadata"]["name"], n) for i in isvcs for n in range(2)]}
    return BudgetObserved(isvcs=list(isvcs), pods=pods)


def persisted(policy: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """The policy after the apiserver applied ``patch`` to its status (JSON merge patch: null deletes)."""
    out = copy.deepcopy(policy)
    status = out.setdefault("status", {})
    for k, v in patch.items():
        if v is None:
            status.pop(k, None)
        else:
            status[k] = copy.deepcopy(v)
    return out


def annotated(isvc: dict[str, Any], writes: list[Any]) -> dict[str, Any]:
    out = copy.deepcopy(isvc)
    for w in writes:
        if (w.namespace, w.name) == (out["metadata"]["namespace"], out["metadata"]["name"]):
            if w.value is None:
                out["metadata"]["annotations"].pop(w.key, None)
            else:
                out["metadata"]["annotations"][w.key] = w.value
    return out


def test_cap_annotation_key_is_the_contract_prefix_and_ten_hex_of_the_policy_hash() -> None:
    assert cap_annotation_key("ml", "daily") == KEY
    assert cap_annotation_key("ml", "daily2") != KEY


def test_cap_annotation_value_is_the_contract_json() -> None:
    from modalscale.costmodel.budget import PolicyRef

    assert json.loads(cap_annotation_value(PolicyRef("ml", "daily"), "CapReplicas", 2)) == {
        "maxReplicas": 2, "policy": "ml/daily", "action": "CapReplicas"}


def test_running_replicas_count_bound_live_pods_only() -> None:
    from modalscale.api.budgetpolicy import parse_budget_spec

    pods = {"ml": [make_pod("vc", 0), make_pod("vc", 1, node=None), make_pod("vc", 2, phase="Succeeded"),
                   make_pod("vc", 3, phase="Failed"), make_pod("vc", 4, deleting=True), make_pod("other", 5)]}
    (svc,) = selected_services(parse_budget_spec(make_policy()["spec"]), "ml",
                               BudgetObserved([make_isvc()], pods), CATALOG)
    assert svc.replicas == 1
    assert svc.usd_per_replica_hour == Decimal("0.600125239")


def test_the_gateway_pods_are_not_charged_only_the_replicas_are() -> None:
    # docs/budgets.md "What is charged": the gateway's pods (on by default) carry modalscale.io/gateway, not the
    # replicas' label: they are never replicas (they are charged apart, at their own price: test_budget_pod_stops).
    from modalscale.api.inferenceservice import parse_isvc
    from modalscale.operator.isvc.objects import gateway_labels

    isvc = make_isvc()
    gateway = [{"metadata": {"name": f"vc-gateway-{i}", "labels": gateway_labels(parse_isvc(isvc))},
                "spec": {"nodeName": "real-node-0"}, "status": {"phase": "Running"}} for i in range(2)]
    pods = {"ml": [make_pod("vc", 0), make_pod("vc", 1), *gateway]}
    (svc,) = selected_services(parse_budget_spec(make_policy()["spec"]), "ml", BudgetObserved([isvc], pods), CATALOG)
    assert svc.replicas == 2
    assert sorted(r.name for r in svc.pods or []) == ["vc-0", "vc-1"]


def test_a_staged_services_image_encoder_pods_are_charged_at_the_pools_own_price() -> None:
    # Issue 24: the encoder pool's pods carry modalscale.io/image-encoder, not the replicas' label; the ledger read
    # only the replicas', so they ran free. They are charged apart, at spec.stages.imageEncoder.resources' price.
    from modalscale.api.inferenceservice import parse_isvc
    from modalscale.costmodel.catalog import PricingTier, ReplicaResources
    from modalscale.operator.isvc.objects import image_encoder_labels

    isvc = make_isvc(stages={"imageEncoder": {"minReplicas": 2, "maxReplicas": 2, "resources": {
        "cpu": "3", "memory": "4Gi", "gpu": {"count": 1, "type": "nvidia-l4"}}}})
    encoders = [{"metadata": {"name": f"vc-image-encoder-{i}", "labels": image_encoder_labels(parse_isvc(isvc))},
                 "spec": {"nodeName": "kwok-gpu-1"}, "status": {"phase": "Running"}} for i in range(2)]
    observed = BudgetObserved([isvc], {"ml": [make_pod("vc", 0), make_pod("vc", 1)]},
                              image_encoder_pods={"ml": encoders})
    (svc,) = selected_services(parse_budget_spec(make_policy()["spec"]), "ml", observed, CATALOG)
    assert svc.replicas == 2 and sorted(r.name for r in svc.pods or []) == ["vc-0", "vc-1"]
    (pool,) = svc.pools
    assert sorted(r.name for r in pool.pods) == ["vc-image-encoder-0", "vc-image-encoder-1"]
    per_pod = CATALOG.price_replica(ReplicaResources.from_quantities("3", "4Gi", 1, "nvidia-l4"),
                                    PricingTier.ON_DEMAND)
    assert svc.cost_usd_per_hour == TWO_REPLICAS_USD_PER_HOUR + 2 * per_pod
    # the unstaged service has no pool, and an encoder pod of another service is not its own
    other = {"ml": [{**encoders[0], "metadata": {**encoders[0]["metadata"], "labels": {
        "modalscale.io/image-encoder": "other"}}}]}
    (plain,) = selected_services(parse_budget_spec(make_policy()["spec"]), "ml", BudgetObserved(
        [make_isvc()], {"ml": [make_pod("vc", 0), make_pod("vc", 1)]}, image_encoder_pods=other), CATALOG)
    assert plain.pools == () and plain.cost_usd_per_hour == TWO_REPLICAS_USD_PER_HOUR


def test_encoder_pods_left_after_stages_are_turned_off_are_priced_from_their_own_requests() -> None:
    # spec.stages removed: the encoder pool's pods run on until the front's rollout ends and the pool is deleted.
    # Priced from the spec they were no longer (no spec.stages), so the service went Unknown and a GovernanceBlind
    # alert went out for a minute or two at every switch; they are priced from their own container requests and
    # node selector, at the service's tier, and never count toward a cap (pool_max_replicas stays 0).
    from modalscale.api.inferenceservice import parse_isvc
    from modalscale.costmodel.catalog import PricingTier, ReplicaResources
    from modalscale.operator.isvc.objects import image_encoder_labels

    staged = make_isvc(stages={"imageEncoder": {"minReplicas": 2, "maxReplicas": 2, "resources": {
        "cpu": "3", "memory": "4Gi", "gpu": {"count": 1, "type": "nvidia-l4"}}}})
    container = {"name": "tritonserver", "resources": {
        "requests": {"cpu": "3", "memory": "4Gi", "nvidia.com/gpu": "1"},
        "limits": {"memory": "4Gi", "nvidia.com/gpu": "1"}}}
    encoders = [{"metadata": {"name": f"vc-image-encoder-{i}", "labels": image_encoder_labels(parse_isvc(staged))},
                 "spec": {"nodeName": "kwok-gpu-1", "nodeSelector": {"nvidia.com/gpu.product": "nvidia-l4"},
                          "containers": [container]},
                 "status": {"phase": "Running"}} for i in range(2)]
    observed = BudgetObserved([make_isvc()], {"ml": [make_pod("vc", 0), make_pod("vc", 1)]},
                              image_encoder_pods={"ml": encoders})
    (svc,) = selected_services(parse_budget_spec(make_policy()["spec"]), "ml", observed, CATALOG)
    assert svc.unknown_reason == "" and svc.pool_max_replicas == 0
    per_pod = CATALOG.price_replica(ReplicaResources.from_quantities("3", "4Gi", 1, "nvidia-l4"),
                                    PricingTier.ON_DEMAND)
    assert svc.cost_usd_per_hour == TWO_REPLICAS_USD_PER_HOUR + 2 * per_pod
    # a leftover pod whose requests cannot be read stays unpriced, and says so
    unreadable = [{**encoders[0], "spec": {"nodeName": "kwok-gpu-1"}}]
    (blind,) = selected_services(parse_budget_spec(make_policy()["spec"]), "ml", BudgetObserved(
        [make_isvc()], {"ml": [make_pod("vc", 0)]}, image_encoder_pods={"ml": unreadable}), CATALOG)
    assert "image-encoder pool pods" in blind.unknown_reason and blind.cost_usd_per_hour is None


def test_a_staged_services_maximum_counts_both_pools_for_a_cap() -> None:
    # A cap bounds a staged service's replicas over both pools: its maximum is the front's maxReplicas plus the
    # pool's, so min(maximum, capReplicas) never clips a cap the two pools could use to the front's maximum alone.
    isvc = make_isvc(scaling={"mode": "Fixed", "replicas": 2, "maxReplicas": 3},
                     stages={"imageEncoder": {"minReplicas": 1, "maxReplicas": 4}})
    (svc,) = selected_services(parse_budget_spec(make_policy()["spec"]), "ml", BudgetObserved([isvc], {"ml": []}),
                               CATALOG)
    assert (svc.max_replicas, svc.pool_max_replicas) == (3, 4)
    (plain,) = selected_services(parse_budget_spec(make_policy()["spec"]), "ml", BudgetObserved(
        [make_isvc()], {"ml": []}), CATALOG)
    assert plain.pool_max_replicas == 0


def test_selector_picks_by_namespace_and_labels() -> None:
    from modalscale.api.budgetpolicy import parse_budget_spec

    spec = parse_budget_spec({**make_policy()["spec"], "selector": {"matchLabels": {"team": "search"}}})
    obs = BudgetObserved([make_isvc("a", labels={"team": "search"}), make_isvc("b", labels={"team": "ads"}),
                          make_isvc("c", ns="other", labels={"team": "search"})], {"ml": [], "other": []})
    assert [s.name for s in selected_services(spec, "ml", obs, CATALOG)] == ["a"]


def test_observed_namespaces_add_those_enforced_on_to_the_selector() -> None:
    p = make_policy(selector={"namespaces": ["b", "a"]})
    p["status"] = {"enforcedServices": [{"namespace": "c", "name": "x", "action": "CapReplicas"}]}
    assert observed_namespaces(p, admin_namespaces=("ml",)) == ("a", "b", "c")
    assert observed_namespaces(p) == ("c", "ml")  # not an admin namespace: its own, and c to lift the cap there
    assert observed_namespaces(make_policy()) == ("ml",)


def test_first_evaluation_writes_status_with_the_rate_and_unknown_alert_condition() -> None:
    plan = plan_policy(make_policy(), observed(make_isvc()), CATALOG, [], T0)
    s = plan.status_patch
    assert (s["spent"], s["remaining"], s["state"], s["burnRatePerHour"]) == ("0.00", "2.00", "Ok", "1.20")
    assert s["ledger"]["services"] == [{"namespace": "ml", "name": "vc", "replicas": 2,
                                        "costUSDPerHour": "1.200250478", "spent": "0.000000000"}]
    assert s["periodStart"] == "2026-11-30T00:00:00Z" and s["periodEnd"] == "2026-12-01T00:00:00Z"
    conds = {c["type"]: (c["status"], c["reason"]) for c in s["conditions"]}
    assert conds == {"Ready": ("True", "Evaluated"), "BudgetExceeded": ("False", "WithinBudget"),
                     "AlertDelivered": ("Unknown", "NoNotifications"),
                     # a priced service without a burn-rate history yet: no spend anomaly is decided, and it says so
                     "SpendAnomalyDetection": ("False", "InsufficientHistory")}
    assert plan.annotation_writes == [] and plan.alerts == () and plan.events == []


def test_only_the_clock_moving_writes_nothing_until_the_heartbeat() -> None:
    p1 = persisted(make_policy(), plan_policy(make_policy(), observed(make_isvc()), CATALOG, [], T0).status_patch)
    beat = plan_policy(p1, observed(make_isvc()), CATALOG, [], T0 + dt.timedelta(seconds=heartbeat_s(60)))
    assert heartbeat_s(60) == 600 and heartbeat_s(1) == 60
    # 600 s x 1.200250478 / 3600 = 0.200041746333... -> 0.200041746 in the ledger, 0.20 displayed.
    assert beat.status_patch["spent"] == "0.20"
    assert beat.status_patch["ledger"]["services"][0]["spent"] == "0.200041746"
    # 10 s more at 1.200250478 USD/h is 0.0033 USD: displayed money (0.20) unchanged, rate unchanged -> no write.
    p2 = persisted(p1, beat.status_patch)
    assert plan_policy(p2, observed(make_isvc()), CATALOG, [], T0 + dt.timedelta(seconds=610)).status_patch == {}
    # The same 10 s from 0 is money shown changing (0.00 -> 0.0033: an amount under a cent reads as itself).
    assert plan_policy(p1, observed(make_isvc()), CATALOG, [], T0 + dt.timedelta(seconds=10)
                       ).status_patch["spent"] == "0.0033"


def test_a_rate_change_is_written_even_when_money_shown_is_unchanged() -> None:
    p1 = persisted(make_policy(), plan_policy(make_policy(), observed(make_isvc()), CATALOG, [], T0).status_patch)
    one_pod = observed(make_isvc(), pods={"ml": [make_pod("vc", 0)]})
    plan = plan_policy(p1, one_pod, CATALOG, [], T0 + dt.timedelta(seconds=5))
    assert plan.status_patch["ledger"]["services"][0]["costUSDPerHour"] == "0.600125239"
    assert plan.status_patch["burnRatePerHour"] == "0.60"


def test_crossing_a_cap_threshold_annotates_once_and_alerts_once_per_period() -> None:
    isvc = make_isvc()
    p1 = persisted(make_policy(), plan_policy(make_policy(), observed(isvc), CATALOG, [], T0).status_patch)
    # One hour at 1.200250478 USD/h = 1.20 of 2 USD = 60 %: the 50 % threshold (Alert, CapReplicas 1) is crossed.
    t1 = T0 + dt.timedelta(hours=1)
    plan = plan_policy(p1, observed(isvc), CATALOG, [], t1)
    assert plan.status_patch["spent"] == "1.20" and plan.status_patch["state"] == "Warning"
    (w,) = plan.annotation_writes
    assert (w.namespace, w.name, w.key) == ("ml", "vc", KEY)
    assert json.loads(w.value or "") == {"maxReplicas": 1, "policy": "ml/daily", "action": "CapReplicas"}
    (alert,) = plan.alerts
    assert alert.thresholds_percent == (50,)
    assert plan.status_patch["enforcedServices"] == [{"namespace": "ml", "name": "vc", "action": "CapReplicas",
                                                      "maxReplicas": 1, "since": "2026-11-30T11:00:00Z",
                                                      "dryRun": False, "message": "at most 1 replica(s)"}]
    reasons = [e[1] for e in plan.events]
    assert "ThresholdCrossed" in reasons and "BudgetEnforced" in reasons
    # The ledger charges the capped rate from now on: 1 replica, 0.600125239 USD/h.
    (entry,) = plan.status_patch["ledger"]["services"]
    assert (entry["replicas"], entry["costUSDPerHour"]) == (1, "0.600125239")
    # The cap took effect: the next evaluation only records the lower burn rate it now observes.
    p2 = persisted(p1, plan.status_patch)
    capped = observed(annotated(isvc, plan.annotation_writes), pods={"ml": [make_pod("vc", 0)]})
    settled = plan_policy(p2, capped, CATALOG, [], t1 + dt.timedelta(seconds=1))
    assert settled.annotation_writes == [] and settled.alerts == ()
    assert settled.status_patch["burnRatePerHour"] == "0.60"
    assert settled.status_patch["ledger"]["services"][0]["replicas"] == 1
    # Replayed after that was persisted: nothing to write, nothing to send.
    again = plan_policy(persisted(p2, settled.status_patch), capped, CATALOG, [], t1 + dt.timedelta(seconds=2))
    assert again.annotation_writes == [] and again.alerts == () and again.status_patch == {}


def test_a_staged_service_under_a_cap_below_two_is_reported_as_the_one_plus_one_it_runs() -> None:
    """Issue 24 review: the cap of 1 (50 % threshold, CapReplicas 1) leaves a staged service 1 front + 1 image
    encoder replica (a cap never takes a running stage to 0). The BudgetEnforced Event and the enforcedServices
    entry said "at most 1"; both must say what runs: 2. The annotation still carries the cap itself (the split is
    the InferenceService planner's)."""
    isvc = make_isvc(stages={"imageEncoder": {"minReplicas": 1, "maxReplicas": 2}})
    p1 = persisted(make_policy(), plan_policy(make_policy(), observed(isvc), CATALOG, [], T0).status_patch)
    plan = plan_policy(p1, observed(isvc), CATALOG, [], T0 + dt.timedelta(hours=1))
    (w,) = plan.annotation_writes
    assert json.loads(w.value or "")["maxReplicas"] == 1
    runs = "capped at 1; a staged service runs at least 1 front + 1 image-encoder replica: 2"
    (entry,) = plan.status_patch["enforcedServices"]
    assert (entry["maxReplicas"], entry["message"]) == (1, runs)
    (event,) = [e for e in plan.events if e[1] == "BudgetEnforced"]
    assert event == ("Warning", "BudgetEnforced", f"CapReplicas InferenceService ml/vc: {runs}")
    assert "at most 1 " not in event[2]
    # read back from status: the same report, so the next evaluation posts no second Event
    again = plan_policy(persisted(p1, plan.status_patch), observed(annotated(isvc, plan.annotation_writes)),
                        CATALOG, [], T0 + dt.timedelta(hours=1, seconds=1))
    assert [e for e in again.events if e[1] == "BudgetEnforced"] == []
    assert "enforcedServices" not in again.status_patch


def test_dry_run_reports_enforcement_but_writes_no_annotation() -> None:
    policy = make_policy(enforcement={"dryRun": True, "floorReplicas": 1})
    p1 = persisted(policy, plan_policy(policy, observed(make_isvc()), CATALOG, [], T0).status_patch)
    plan = plan_policy(p1, observed(make_isvc()), CATALOG, [], T0 + dt.timedelta(hours=1))
    assert plan.annotation_writes == []
    assert [(e["name"], e["dryRun"]) for e in plan.status_patch["enforcedServices"]] == [("vc", True)]
    assert len(plan.alerts) == 1 and plan.alerts[0].dry_run


def test_dry_run_switched_on_removes_a_cap_already_written() -> None:
    isvc = make_isvc(annotations={KEY: cap_annotation_value_for(1)})
    policy = make_policy(enforcement={"dryRun": True})
    plan = plan_policy(policy, observed(isvc), CATALOG, [], T0)
    assert [(w.name, w.value) for w in plan.annotation_writes] == [("vc", None)]


def cap_annotation_value_for(n: int) -> str:
    from modalscale.costmodel.budget import PolicyRef

    return cap_annotation_value(PolicyRef("ml", "daily"), "CapReplicas", n)


def test_unknown_gpu_price_makes_governance_blind_and_enforces_nothing() -> None:
    p1 = persisted(make_policy(), plan_policy(make_policy(), observed(make_isvc(gpu_type="nvidia-b999")), CATALOG,
                                              [], T0).status_patch)
    conds = {c["type"]: (c["status"], c["reason"]) for c in p1["status"]["conditions"]}
    assert conds["Ready"] == ("False", "GovernanceBlind")
    assert conds["BudgetExceeded"] == ("Unknown", "GovernanceBlind")
    assert p1["status"]["state"] == "Unknown" and "burnRatePerHour" not in p1["status"]
    assert "nvidia-b999" in get(p1["status"]["conditions"], "Ready")["message"]
    later = plan_policy(p1, observed(make_isvc(gpu_type="nvidia-b999")), CATALOG, [], T0 + dt.timedelta(hours=5))
    assert later.annotation_writes == [] and later.alerts == ()


@pytest.mark.parametrize("typo_pods", [0, 2], ids=["typo-not-running", "typo-running"])
def test_a_mistyped_gpu_type_does_not_switch_off_the_hard_cap_of_the_priced_services(typo_pods: int) -> None:
    # Issue 12 on the operator's planner: big ran 2 x 0.600125239 USD/h for an hour (1.20 USD of a 1 USD daily
    # cap); typo asks for an unknown GPU type (no price).
    policy = make_policy(limit={"amount": "1", "currency": "USD"},
                         thresholds=[{"percent": 100, "actions": ["Alert", "ScaleToZero"]}])
    policy["status"] = {"periodStart": "2026-11-30T00:00:00Z", "ledger": {
        "observedTime": "2026-11-30T09:00:00Z",
        "services": [{"namespace": "ml", "name": "big", "replicas": 2, "costUSDPerHour": "1.200250478", "spent": "0"}]}}
    pods = {"ml": [make_pod("big", n) for n in range(2)] + [make_pod("typo", n) for n in range(typo_pods)]}
    plan = plan_policy(policy, observed(make_isvc("big"), make_isvc("typo", gpu_type="nvidia-b999"), pods=pods),
                       CATALOG, [], T0)
    assert plan.status_patch["state"] == "Exceeded"
    assert plan.status_patch["spent"] == "1.20"
    caps = {w.name: json.loads(w.value)["maxReplicas"] for w in plan.annotation_writes if w.value}
    assert caps["big"] == 0
    conds = {c["type"]: (c["status"], c["reason"]) for c in plan.status_patch["conditions"]}
    assert conds["BudgetExceeded"] == ("True", "BudgetExceeded")
    if typo_pods:  # running without a price: its part is unknown, reported, and it is enforced on too
        assert caps["typo"] == 0 and conds["Ready"] == ("False", "GovernanceBlind")
        assert "nvidia-b999" in get(plan.status_patch["conditions"], "Ready")["message"]
        assert [a.kind.value for a in plan.alerts] == ["GovernanceBlind", "ThresholdCrossed"]
    else:  # no pod costs 0, priced or not
        assert conds["Ready"] == ("True", "Evaluated") and plan.status_patch["burnRatePerHour"] == "1.20"
        assert [a.kind.value for a in plan.alerts] == ["ThresholdCrossed"]


def test_unreadable_pods_make_governance_blind() -> None:
    plan = plan_policy(make_policy(), observed(make_isvc(), pods={"ml": None}), CATALOG, [], T0)
    assert plan.status_patch["state"] == "Unknown"
    assert "replica count could not be read" in get(plan.status_patch["conditions"], "Ready")["message"]


def test_invalid_spec_is_reported_and_holds_caps_in_force() -> None:
    isvc = make_isvc(annotations={KEY: cap_annotation_value_for(1)})
    plan = plan_policy(make_policy(limit={"amount": "2", "currency": "EUR"}), observed(isvc), CATALOG, [], T0)
    ready = get(plan.status_patch["conditions"], "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert "only USD" in ready["message"]
    assert plan.annotation_writes == [] and plan.alerts == ()
    assert [e[:2] for e in plan.events] == [("Warning", "InvalidSpec")]


def test_a_new_period_lifts_the_caps_of_the_old_one() -> None:
    isvc = make_isvc()
    p1 = persisted(make_policy(), plan_policy(make_policy(), observed(isvc), CATALOG, [], T0).status_patch)
    crossed = plan_policy(p1, observed(isvc), CATALOG, [], T0 + dt.timedelta(hours=1))
    p2, capped = persisted(p1, crossed.status_patch), annotated(isvc, crossed.annotation_writes)
    nextday = plan_policy(p2, observed(capped), CATALOG, [], dt.datetime(2026, 12, 1, 0, 0, 1, tzinfo=dt.UTC))
    assert [(w.name, w.value) for w in nextday.annotation_writes] == [("vc", None)]
    assert nextday.status_patch["enforcedServices"] == []
    assert [a.kind.value for a in nextday.alerts] == ["Recovered"]
    assert ("Normal", "EnforcementLifted") in [e[:2] for e in nextday.events]


def test_a_service_that_left_the_selector_loses_the_cap() -> None:
    isvc = make_isvc(labels={"team": "ads"}, annotations={KEY: cap_annotation_value_for(1)})
    plan = plan_policy(make_policy(selector={"matchLabels": {"team": "search"}}), observed(isvc), CATALOG, [], T0)
    assert [(w.name, w.value) for w in plan.annotation_writes] == [("vc", None)]


NOTIFICATIONS = [{"name": "slack", "type": "Slack", "secretRef": {"name": "s"}},
                 {"name": "ding", "type": "DingTalk", "secretRef": {"name": "d"}}]
CROSSED_50 = 3000  # s after T0: 1.200250478 USD/h x 3000 s = 1.000208732 USD >= 50 % of 2 USD


def alerting_policy(**spec: Any) -> dict[str, Any]:
    return make_policy(thresholds=[{"percent": 50}], notifications=NOTIFICATIONS, **spec)


def first_alert() -> tuple[dict[str, Any], Any]:
    """The policy after the evaluation at T0 + 3000 s that crossed 50 %, and that evaluation's plan."""
    p0 = alerting_policy()
    p1 = persisted(p0, plan_policy(p0, observed(make_isvc()), CATALOG, [], T0).status_patch)
    plan = plan_policy(p1, observed(make_isvc()), CATALOG, [], T0 + dt.timedelta(seconds=CROSSED_50))
    return persisted(p1, plan.status_patch), plan


def test_an_alert_enters_the_outbox_once_per_target_in_the_patch_that_marks_it_alerted() -> None:
    p2, plan = first_alert()
    now = T0 + dt.timedelta(seconds=CROSSED_50)
    (alert,) = plan.alerts
    items = plan.status_patch["pendingAlerts"]
    assert [(i["notification"], i["kind"], i["attempts"], i["nextAttemptTime"]) for i in items] == [
        ("slack", "ThresholdCrossed", 0, "2026-11-30T10:50:00Z"),
        ("ding", "ThresholdCrossed", 0, "2026-11-30T10:50:00Z")]
    assert all(i["title"] == alert.title == "Budget ml/daily crossed 50 % of its daily limit" for i in items)
    assert [r["alertedPeriodStart"] for r in plan.status_patch["thresholds"] if r["percent"] == 50] == [
        "2026-11-30T00:00:00Z"]
    # Sent after this patch: both entries, due now; nothing else is due later.
    assert [e.notification for e in plan.sends] == ["slack", "ding"]
    assert all(e.message.created_at == now for e in plan.sends) and plan.next_due_s is None
    # An evaluation while they are in flight sends nothing and writes nothing new about them.
    busy = plan_policy(p2, observed(make_isvc()), CATALOG, [], now + dt.timedelta(seconds=1),
                       in_flight={e.key for e in plan.sends})
    assert busy.sends == () and "pendingAlerts" not in busy.status_patch and busy.alerts == ()


def test_the_patch_written_before_sending_marks_each_entry_sent_and_a_takeover_resends_it_marked() -> None:
    """Issue 21, scenario 3: the leader sent the alert and was killed before recording the answer. The status it
    wrote before sending says who was sending; the operator that takes over sends it again, saying it may be a
    duplicate (an unrecorded outcome is unknown: at least once, never silently twice)."""
    p0 = alerting_policy()
    p1 = persisted(p0, plan_policy(p0, observed(make_isvc()), CATALOG, [], T0, holder="op-a").status_patch)
    now = T0 + dt.timedelta(seconds=CROSSED_50)
    plan = plan_policy(p1, observed(make_isvc()), CATALOG, [], now, holder="op-a")
    assert [(i["sendingSince"], i["sendingBy"]) for i in plan.status_patch["pendingAlerts"]] == [
        ("2026-11-30T10:50:00Z", "op-a")] * 2
    assert all(POSSIBLE_DUPLICATE_FACT not in e.message.fact_pairs for e in plan.sends)
    p2 = persisted(p1, plan.status_patch)
    later = now + dt.timedelta(seconds=30)
    takeover = plan_policy(p2, observed(make_isvc()), CATALOG, [], later, holder="op-b")
    assert [e.notification for e in takeover.sends] == ["slack", "ding"] and takeover.alerts == ()
    assert all(e.message.fact_pairs[-1] == POSSIBLE_DUPLICATE_FACT for e in takeover.sends)
    assert [i["sendingBy"] for i in takeover.status_patch["pendingAlerts"]] == ["op-b", "op-b"]


def test_one_target_fails_the_other_is_removed_and_the_failed_one_is_retried_after_backoff() -> None:
    p2, plan = first_alert()
    slack, ding = plan.sends
    sent = T0 + dt.timedelta(seconds=CROSSED_50)
    t1 = sent + dt.timedelta(seconds=5)
    attempts = [Attempt(slack.key, True, "Delivered", "Slack accepted the message", sent),
                Attempt(ding.key, False, "ServerError", "DingTalk answered HTTP 503 (gave up after 6 attempts)", sent)]
    after = plan_policy(p2, observed(make_isvc()), CATALOG, attempts, t1)
    (item,) = after.status_patch["pendingAlerts"]
    # 30 s after the evaluation that recorded the first failed round: 10:50:05 + 30 s.
    assert (item["notification"], item["attempts"], item["firstAttemptTime"], item["nextAttemptTime"],
            item["lastReason"]) == ("ding", 1, "2026-11-30T10:50:00Z", "2026-11-30T10:50:35Z", "ServerError")
    assert after.sends == () and after.next_due_s == 30.0
    c = get(after.status_patch["conditions"], "AlertDelivered")
    assert (c["status"], c["reason"]) == ("False", "ServerError")
    assert "ding: DingTalk answered HTTP 503" in c["message"] and "retrying at 2026-11-30T10:50:35Z" in c["message"]
    assert ("Warning", "ServerError") in [e[:2] for e in after.events]
    p3 = persisted(p2, after.status_patch)
    assert plan_policy(p3, observed(make_isvc()), CATALOG, [], t1 + dt.timedelta(seconds=29)).sends == ()
    due = plan_policy(p3, observed(make_isvc()), CATALOG, [], t1 + dt.timedelta(seconds=30))
    (retry,) = due.sends
    assert retry.notification == "ding" and retry.attempts == 1 and due.alerts == ()
    # The retry succeeds: outbox empty, AlertDelivered back to True.
    t2 = t1 + dt.timedelta(seconds=31)
    done = plan_policy(p3, observed(make_isvc()), CATALOG,
                       [Attempt(retry.key, True, "Delivered", "DingTalk accepted the message", t1)], t2)
    assert done.status_patch["pendingAlerts"] == [] and done.sends == ()
    c = get(done.status_patch["conditions"], "AlertDelivered")
    assert (c["status"], c["reason"], c["message"]) == ("True", "Delivered", "Delivered to ding")


def test_a_missing_secret_is_a_failed_round_like_any_other() -> None:
    p2, plan = first_alert()
    slack, ding = plan.sends
    n = parse_budget_spec(p2["spec"]).notifications[0]
    problem = receiver_problem(n, "SecretNotFound", "Secret ml/s (secretRef of notification slack) was not found")
    sent = T0 + dt.timedelta(seconds=CROSSED_50)
    attempts = [Attempt(slack.key, problem.delivered, problem.reason, problem.message, sent),
                Attempt(ding.key, True, "Delivered", "DingTalk accepted", sent)]
    after = plan_policy(p2, observed(make_isvc()), CATALOG, attempts, sent + dt.timedelta(seconds=1))
    c = get(after.status_patch["conditions"], "AlertDelivered")
    assert (c["status"], c["reason"]) == ("False", "SecretNotFound") and "ml/s" in c["message"]
    assert [i["notification"] for i in after.status_patch["pendingAlerts"]] == ["slack"]
    assert ("Warning", "SecretNotFound") in [e[:2] for e in after.events]


def test_removing_a_notification_abandons_its_entries_with_a_warning_event() -> None:
    p2, plan = first_alert()
    p2["spec"]["notifications"] = NOTIFICATIONS[:1]
    p2["metadata"]["generation"] = 2
    after = plan_policy(p2, observed(make_isvc()), CATALOG, [], T0 + dt.timedelta(seconds=CROSSED_50 + 1))
    assert [i["notification"] for i in after.status_patch["pendingAlerts"]] == ["slack"]
    c = get(after.status_patch["conditions"], "AlertDelivered")
    assert (c["status"], c["reason"]) == ("False", "DeliveryAbandoned")
    (event,) = [e for e in after.events if e[1] == "DeliveryAbandoned"]
    assert event[0] == "Warning" and "notification ding" in event[2] and "removed from spec.notifications" in event[2]
    assert [e.notification for e in after.sends] == ["slack"]


def test_renaming_a_notification_carries_its_pending_entries_to_the_same_target() -> None:
    """spec.notifications[].name renamed (ding to oncall) while ding's entry waits for its retry: the target (type,
    Secret and URL key) is the same, so the entry goes on to it with its failed rounds, as an Alertmanager receiver
    renamed in its config keeps getting the alerts that still fire. It was abandoned (DeliveryAbandoned: 1 of 2
    entries lost)."""
    p2, plan = first_alert()
    slack, ding = plan.sends
    sent = T0 + dt.timedelta(seconds=CROSSED_50)
    failed = plan_policy(p2, observed(make_isvc()), CATALOG,
                         [Attempt(slack.key, True, "Delivered", "ok", sent),
                          Attempt(ding.key, False, "ServerError", "DingTalk answered HTTP 503", sent)],
                         sent + dt.timedelta(seconds=1))
    p3 = persisted(p2, failed.status_patch)
    p3["spec"]["notifications"] = [NOTIFICATIONS[0], {**NOTIFICATIONS[1], "name": "oncall"}]
    p3["metadata"]["generation"] = 2
    later = sent + dt.timedelta(seconds=40)
    after = plan_policy(p3, observed(make_isvc()), CATALOG, [], later)
    assert [(i["notification"], i["attempts"], i["lastReason"]) for i in after.status_patch["pendingAlerts"]] == [
        ("oncall", 1, "ServerError")]
    assert [(e.notification, e.message.title) for e in after.sends] == [("oncall", ding.message.title)]
    assert "DeliveryAbandoned" not in [e[1] for e in after.events]
    c = get(after.status_patch["conditions"], "AlertDelivered")
    assert (c["status"], c["reason"]) == ("False", "ServerError") and c["message"].startswith("oncall: ")
    # Renamed to a notification with another Secret: another target, so the entry is given up, and reported.
    p3["spec"]["notifications"] = [NOTIFICATIONS[0], {**NOTIFICATIONS[1], "name": "oncall",
                                                      "secretRef": {"name": "d2"}}]
    moved = plan_policy(p3, observed(make_isvc()), CATALOG, [], later)
    assert moved.status_patch["pendingAlerts"] == [] and moved.sends == ()
    (event,) = [e for e in moved.events if e[1] == "DeliveryAbandoned"]
    assert event[0] == "Warning" and "notification ding" in event[2]


def test_an_entry_still_failing_at_the_end_of_its_period_is_abandoned_and_reported() -> None:
    p2, plan = first_alert()
    slack, ding = plan.sends
    sent = T0 + dt.timedelta(seconds=CROSSED_50)
    p3 = persisted(p2, plan_policy(p2, observed(make_isvc()), CATALOG,
                                   [Attempt(slack.key, True, "Delivered", "ok", sent),
                                    Attempt(ding.key, False, "ConnectionFailed", "Connection to DingTalk failed",
                                            sent)],
                                   sent + dt.timedelta(seconds=1)).status_patch)
    midnight = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    after = plan_policy(p3, observed(make_isvc()), CATALOG, [], midnight)
    # Only the new period's Recovered notice, which resolves the 50 % alert, is pending (one per target): the
    # ThresholdCrossed entry still failing for ding is gone.
    pending = after.status_patch["pendingAlerts"]
    assert sorted((i["notification"], i["kind"]) for i in pending) == [("ding", "Recovered"), ("slack", "Recovered")]
    assert sorted(s.key[:2] for s in after.sends) == [("ding", "Recovered"), ("slack", "Recovered")]
    c = get(after.status_patch["conditions"], "AlertDelivered")
    assert (c["status"], c["reason"]) == ("False", "DeliveryAbandoned")
    assert "notification ding after 1 attempt: its budget period ended" in c["message"]
    assert "last error: Connection to DingTalk failed" in c["message"]
    assert ("Warning", "DeliveryAbandoned") in [e[:2] for e in after.events]


def test_emptying_the_notifications_abandons_what_is_pending_then_reports_no_delivery_not_a_failure() -> None:
    """With every notification removed after a failed round, AlertDelivered stayed False/DeliveryAbandoned for good:
    only a later delivery lifted it, and none could come. The abandonment is that evaluation's Warning (as before);
    from then on the condition says there is nothing to deliver to. A policy with notifications before any alert is
    NoAlertSent, as before."""
    assert get(plan_policy(alerting_policy(), observed(make_isvc()), CATALOG, [], T0).status_patch["conditions"],
               "AlertDelivered")["reason"] == "NoAlertSent"
    p2, plan = first_alert()
    slack, ding = plan.sends
    sent = T0 + dt.timedelta(seconds=CROSSED_50)
    p3 = persisted(p2, plan_policy(p2, observed(make_isvc()), CATALOG,
                                   [Attempt(slack.key, True, "Delivered", "ok", sent),
                                    Attempt(ding.key, False, "ServerError", "DingTalk answered HTTP 503", sent)],
                                   sent + dt.timedelta(seconds=1)).status_patch)
    p3["spec"]["notifications"] = []
    emptied = plan_policy(p3, observed(make_isvc()), CATALOG, [], sent + dt.timedelta(seconds=2))
    c = get(emptied.status_patch["conditions"], "AlertDelivered")
    assert (c["status"], c["reason"]) == ("False", "DeliveryAbandoned") and "notification ding" in c["message"]
    assert emptied.status_patch["pendingAlerts"] == [] and emptied.sends == ()
    assert [e[:2] for e in emptied.events if e[0] == "Warning"] == [("Warning", "DeliveryAbandoned")]
    p4 = persisted(p3, emptied.status_patch)
    later = plan_policy(p4, observed(make_isvc()), CATALOG, [], sent + dt.timedelta(seconds=3))
    c = get(persisted(p4, later.status_patch)["status"]["conditions"], "AlertDelivered")
    assert (c["status"], c["reason"]) == ("Unknown", "NoNotifications") and "spec.notifications" in c["message"]
    assert [e[:2] for e in later.events] == [("Normal", "NoNotifications")]


def test_an_invalid_spec_sends_nothing_but_records_finished_rounds() -> None:
    p2, plan = first_alert()
    slack, ding = plan.sends
    sent = T0 + dt.timedelta(seconds=CROSSED_50)
    p2["spec"]["limit"] = {"amount": "-1"}
    held = plan_policy(p2, observed(make_isvc()), CATALOG, [Attempt(slack.key, True, "Delivered", "ok", sent)],
                       sent + dt.timedelta(seconds=1))
    assert held.sends == () and [i["notification"] for i in held.status_patch["pendingAlerts"]] == ["ding"]
    assert (get(held.status_patch["conditions"], "Ready") or {}).get("reason") == "InvalidSpec"


def test_lift_all_deletes_only_this_policys_key() -> None:
    other = "budget.modalscale.io/cap-0123456789"
    isvcs = [make_isvc("a", annotations={KEY: "{}", other: "{}"}), make_isvc("b", annotations={other: "{}"})]
    writes = lift_all(make_policy(), isvcs)
    assert [(w.name, w.key, w.value) for w in writes] == [("a", KEY, None)]


@pytest.mark.parametrize("seconds,expected", [(1, 60), (60, 600), (3600, 36000)], ids=["1s", "60s", "1h"])
def test_heartbeat_is_ten_intervals_but_at_least_a_minute(seconds: int, expected: int) -> None:
    assert heartbeat_s(seconds) == expected


def test_the_operators_heartbeat_floor_refreshes_an_unchanged_status_sooner_and_nothing_else() -> None:
    """``MODALSCALE_BUDGET_STATUS_HEARTBEAT_SECONDS`` (``status_heartbeat_min_s``) lowers the floor of the heartbeat;
    10 evaluation intervals still bound it from below."""
    assert heartbeat_s(1, 10) == 10 and heartbeat_s(60, 10) == 600 and heartbeat_s(1, 120) == 120
    policy = make_policy(evaluationIntervalSeconds=1)
    p0 = persisted(policy, plan_policy(policy, observed(make_isvc()), CATALOG, [], T0).status_patch)
    # 60 s at 1.200250478 USD/h: 0.020004175 in the ledger, 0.02 shown (past a cent: spend shown in cents).
    p1 = persisted(p0, plan_policy(p0, observed(make_isvc()), CATALOG, [], T0 + dt.timedelta(seconds=60)
                                   ).status_patch)
    # Within 10 s more the displayed cents stay 0.02: only the heartbeat can write.
    at = {s: T0 + dt.timedelta(seconds=60 + s) for s in (9, 10)}
    assert plan_policy(p1, observed(make_isvc()), CATALOG, [], at[9], status_heartbeat_min_s=10).status_patch == {}
    assert plan_policy(p1, observed(make_isvc()), CATALOG, [], at[10]).status_patch == {}  # default floor: 60 s
    beat = plan_policy(p1, observed(make_isvc()), CATALOG, [], at[10], status_heartbeat_min_s=10)
    # + 10 s x 1.200250478 / 3600 = 0.003334029... -> 0.023338204 in the ledger
    assert beat.status_patch["ledger"]["services"][0]["spent"] == "0.023338204", beat.status_patch
    assert beat.status_patch["ledger"]["observedTime"] == "2026-11-30T10:01:10Z"


def test_the_cap_is_written_one_evaluation_and_a_replica_grace_period_before_the_crossing_and_held() -> None:
    # 50 % of 2 USD = 1.00. The horizon is the 60 s interval + the 90 s grace period the operator gives every
    # replica (TERMINATION_GRACE_S): 150 s at 1.200250478 USD/h is 0.050010437 USD. After 2849 s,
    # 0.949864892 + 0.050010437 = 0.999875329 < 1.00: nothing yet. After 2850 s: 0.950198295 + 0.050010437 =
    # 1.000208732.
    isvc = make_isvc()
    p1 = persisted(make_policy(), plan_policy(make_policy(), observed(isvc), CATALOG, [], T0).status_patch)
    early = plan_policy(p1, observed(isvc), CATALOG, [], T0 + dt.timedelta(seconds=2849))
    assert early.annotation_writes == [] and early.alerts == ()
    plan = plan_policy(p1, observed(isvc), CATALOG, [], T0 + dt.timedelta(seconds=2850))
    assert plan.budget is not None and plan.budget.spent_usd == Decimal("0.950198295")
    (w,) = plan.annotation_writes
    assert json.loads(w.value or "") == {"maxReplicas": 1, "policy": "ml/daily", "action": "CapReplicas"}
    (alert,) = plan.alerts
    assert alert.title == ("Budget ml/daily would cross 50 % of its daily limit within 150 s at the current burn rate: "
                           "enforcing now, ahead of the crossing")
    assert plan.status_patch["state"] == "Warning"
    assert [r["crossed"] for r in plan.status_patch["thresholds"] if r["percent"] == 50] == [False]
    # One pod now (0.600125239 USD/h), yet the cap stays and nothing resends; and with no pod running at all (the
    # horizon must not shrink to the interval once the replicas are gone: at 1d22b6d it did, the hold lifted and
    # issue 21's scenario 6 saw the replicas come back and the limit passed by 59 %) the cap still holds.
    p2, capped = persisted(p1, plan.status_patch), annotated(isvc, plan.annotation_writes)
    one_pod = observed(capped, pods={"ml": [make_pod("vc", 0)]})
    later = plan_policy(p2, one_pod, CATALOG, [], T0 + dt.timedelta(seconds=2851))
    assert later.annotation_writes == [] and later.alerts == ()
    assert later.budget is not None and later.budget.thresholds_enforced == (50,)
    none = plan_policy(persisted(p2, later.status_patch), observed(capped, pods={"ml": []}), CATALOG, [],
                       T0 + dt.timedelta(seconds=2852))
    assert none.annotation_writes == [] and none.budget is not None and none.budget.thresholds_enforced == (50,)


def test_a_replica_with_a_longer_grace_period_moves_the_cap_earlier_still() -> None:
    # Pods whose grace period is 120 s (longer than the operator's 90 s): the horizon is 60 + 120 s, 0.060012524
    # USD. After 2819 s, 0.939862805 + 0.060012524 = 0.999875329 < 1.00; after 2820 s, 0.940196208 + 0.060012524
    # = 1.000208732.
    isvc = make_isvc()
    pods = {"ml": [make_pod("vc", n, grace_s=120) for n in range(2)]}
    p1 = persisted(make_policy(), plan_policy(make_policy(), observed(isvc, pods=pods), CATALOG, [], T0).status_patch)
    early = plan_policy(p1, observed(isvc, pods=pods), CATALOG, [], T0 + dt.timedelta(seconds=2819))
    assert early.annotation_writes == [] and early.alerts == ()
    plan = plan_policy(p1, observed(isvc, pods=pods), CATALOG, [], T0 + dt.timedelta(seconds=2820))
    (w,) = plan.annotation_writes
    assert json.loads(w.value or "") == {"maxReplicas": 1, "policy": "ml/daily", "action": "CapReplicas"}
    (alert,) = plan.alerts
    assert alert.title == ("Budget ml/daily would cross 50 % of its daily limit within 180 s at the current burn rate: "
                           "enforcing now, ahead of the crossing")


@pytest.mark.parametrize(("pods", "expected"), [
    ([], 0),
    ([make_pod("vc", 0, grace_s=90), make_pod("vc", 1, grace_s=10)], 90),
    ([make_pod("vc", 0)], 30),
    ([make_pod("vc", 0, node=None, grace_s=90), make_pod("vc", 1, grace_s=10)], 10),
    ([make_pod("vc", 0, phase="Succeeded", grace_s=90), make_pod("vc", 1, phase="Failed", grace_s=90)], 0),
    ([make_pod("vc", 0, deleting=True, grace_s=45)], 45),
], ids=["none", "longest", "unset-is-30", "unscheduled-skipped", "finished-skipped", "terminating-counts"])
def test_longest_stop_is_the_longest_grace_period_of_a_running_pod(pods: list[dict[str, Any]], expected: int) -> None:
    assert longest_stop_s(pods) == expected


def test_a_cap_that_did_not_take_effect_is_charged_at_the_replicas_still_running() -> None:
    isvc = make_isvc()
    p1 = persisted(make_policy(), plan_policy(make_policy(), observed(isvc), CATALOG, [], T0).status_patch)
    t1 = T0 + dt.timedelta(hours=1)
    capped = plan_policy(p1, observed(isvc), CATALOG, [], t1)  # CapReplicas 1; the ledger assumes 1 from t1
    p2 = persisted(p1, capped.status_patch)
    # 60 s later both pods still run (the InferenceService never applied the cap): both are charged by their own
    # timestamps for [t1, t1+60), although the ledger had assumed the cap from t1: 1.200250478 + 0.020004175.
    later = plan_policy(p2, observed(annotated(isvc, capped.annotation_writes)), CATALOG, [],
                        t1 + dt.timedelta(seconds=60))
    assert later.budget is not None and later.budget.spent_usd == Decimal("1.220254653")
    # The ledger keeps assuming the cap in force from now on; pods still listed next time are charged as here.
    (entry,) = later.status_patch["ledger"]["services"]
    assert (entry["replicas"], entry["costUSDPerHour"]) == (1, "0.600125239")
    again = plan_policy(persisted(p2, later.status_patch), observed(annotated(isvc, capped.annotation_writes)),
                        CATALOG, [], t1 + dt.timedelta(seconds=120))
    assert again.budget is not None and again.budget.spent_usd == Decimal("1.220254653") + Decimal("0.020004175")


def test_after_an_enforced_scale_to_zero_an_evaluation_mid_scale_down_charges_no_interval_nobody_ran() -> None:
    # Issue 12, fault 2, on the pure planner: the enforcing evaluation E0 scales to zero ahead of the crossing;
    # E1, 1 s later (woken by the alert delivery), still lists one pod not yet marked for deletion and one
    # terminating; at E2, 10 s later, both are gone. The ledger must charge what ran (both pods for the second
    # before E1), not E1's snapshot of one pod for the whole interval to E2.
    policy = make_policy(limit={"amount": "2", "currency": "USD"}, evaluationIntervalSeconds=10,
                         thresholds=[{"percent": 100, "actions": ["Alert", "ScaleToZero"]}])
    # 5990 s at 1.200250478 USD/h = 1.997083434; + 10 s at that rate = 2.000417463 >= 2: enforced ahead at E0.
    policy["status"] = {"periodStart": "2026-11-30T00:00:00Z", "ledger": {
        "observedTime": (T0 - dt.timedelta(seconds=5990)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "services": [{"namespace": "ml", "name": "vc", "replicas": 2, "costUSDPerHour": "1.200250478", "spent": "0"}]}}
    started = {"startTime": "2026-11-30T08:00:00Z"}
    running = [dict(make_pod("vc", n), status={"phase": "Running", **started}) for n in range(2)]
    isvc = make_isvc()
    e0 = plan_policy(policy, observed(isvc, pods={"ml": running}), CATALOG, [], T0)
    assert e0.budget is not None and e0.budget.spent_usd == Decimal("1.997083434") and e0.budget.actions[0].ahead
    assert [json.loads(w.value or "")["maxReplicas"] for w in e0.annotation_writes] == [0]
    p1 = persisted(policy, e0.status_patch)
    isvc = annotated(isvc, e0.annotation_writes)
    terminating = dict(running[1], metadata={**running[1]["metadata"], "deletionTimestamp": "2026-11-30T10:00:30Z"})
    e1 = plan_policy(p1, observed(isvc, pods={"ml": [running[0], terminating]}), CATALOG, [],
                     T0 + dt.timedelta(seconds=1))
    (entry,) = e1.status_patch["ledger"]["services"]
    assert (entry["replicas"], Decimal(entry["costUSDPerHour"])) == (0, 0)  # held at the cap, not the snapshot
    p2 = persisted(p1, e1.status_patch)
    e2 = plan_policy(p2, observed(isvc, pods={"ml": []}), CATALOG, [], T0 + dt.timedelta(seconds=11))
    # Both pods ran the second [E0, E1): 2 x 0.600125239 / 3600 = 0.000333403; nothing after.
    assert e2.budget is not None and e2.budget.spent_usd == Decimal("1.997083434") + Decimal("0.000333403")
    assert e2.budget.state.value == "Warning"


def test_a_pod_counted_before_its_kubelet_wrote_start_time_is_not_also_charged_as_a_replica_gone_unseen() -> None:
    # Issue 21, the over-charge of test_ha's mid-reconcile kill (ci49: +27 pod-seconds; stop 37's CI: +2): E0 at T0
    # lists vc-0 bound at T0 - 1 s (PodScheduled) with no startTime yet: it is one of E0's replicas, charged from
    # its binding (pod_start's documented upper bound). Its kubelet then writes startTime T0 + 3 s, and the next
    # evaluation comes 10 s later (the operator was killed between). The pod listed then started after E0, so the
    # ledger took it for a new pod and E0's replica for one gone unseen, charging that one all of [T0, T0 + 10 s)
    # on top of the pod's own run: 18 s for a pod that ran 7. It is the same pod, counted since its binding:
    # E0's 1 s + its own 7 s = 8 s (at most the meter's 7 s + its binding-to-start 4 s).
    policy = make_policy(limit={"amount": "100", "currency": "USD"})
    pod = dict(make_pod("vc", 0), status={"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-30T09:59:59Z"}]})
    pod["metadata"]["creationTimestamp"] = "2026-11-30T09:59:58Z"
    isvc = make_isvc(scaling={"minReplicas": 1, "maxReplicas": 1})
    e0 = plan_policy(policy, observed(isvc, pods={"ml": [pod]}), CATALOG, [], T0)
    started = dict(pod, status={**pod["status"], "phase": "Running", "startTime": "2026-11-30T10:00:03Z"})
    e1 = plan_policy(persisted(policy, e0.status_patch), observed(isvc, pods={"ml": [started]}), CATALOG, [],
                     T0 + dt.timedelta(seconds=10))
    second_usd = Decimal("0.600125239") / 3600
    assert e0.budget is not None and e0.budget.spent_usd == (1 * second_usd).quantize(Decimal("1e-9"))
    assert e1.budget is not None
    assert e1.budget.spent_usd == e0.budget.spent_usd + (7 * second_usd).quantize(Decimal("1e-9"))


def test_a_pod_bound_while_the_evaluation_listed_the_pods_is_charged_once_by_its_own_run() -> None:
    # Issue 21, test_ha's kill (ci58: 3.000 pod-seconds over the meter): E0 reads its clock at T0 (10:00:00.x),
    # then lists the pods; vc-1 was bound during the listing, its PodScheduled stamped 10:00:01, after E0's
    # instant. It is one of E0's two replicas. At E1 (T0 + 30 s) it has started (10:00:02): charged by its own run
    # (28 s), and it accounts for the replica it was counted as. Before: that replica was charged again as one gone
    # unseen, 30 s more (88 replica-seconds for 58).
    policy = make_policy(limit={"amount": "100", "currency": "USD"})
    first = dict(make_pod("vc", 0), status={"phase": "Running", "startTime": "2026-11-30T08:00:00Z"})
    bound = {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-30T10:00:01Z"}
    second = dict(make_pod("vc", 1), status={"phase": "Pending", "conditions": [bound]})
    second["metadata"]["creationTimestamp"] = "2026-11-30T10:00:01Z"
    isvc = make_isvc()
    e0 = plan_policy(policy, observed(isvc, pods={"ml": [first, second]}), CATALOG, [], T0)
    (entry,) = e0.status_patch["ledger"]["services"]
    assert entry["replicas"] == 2 and entry["lateBoundPods"] == ["vc-1"]
    started = dict(second, status={"phase": "Running", "startTime": "2026-11-30T10:00:02Z", "conditions": [bound]})
    e1 = plan_policy(persisted(policy, e0.status_patch), observed(isvc, pods={"ml": [first, started]}), CATALOG, [],
                     T0 + dt.timedelta(seconds=30))
    assert e0.budget is not None and e1.budget is not None
    second_usd = Decimal("0.600125239") / 3600
    assert e1.budget.spent_usd - e0.budget.spent_usd == (58 * second_usd).quantize(Decimal("1e-9"))
    assert "lateBoundPods" not in e1.status_patch["ledger"]["services"][0]


def test_pod_runs_take_each_pods_own_start_and_stop() -> None:
    from modalscale.costmodel.ledger import PodRun
    from modalscale.operator.budget.plan import pod_runs

    def at(text: str) -> dt.datetime:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))

    started = {"phase": "Running", "startTime": "2026-11-30T08:00:00Z"}
    finished = {"phase": "Succeeded", "startTime": "2026-11-30T08:00:00Z", "containerStatuses": [
        {"state": {"terminated": {"finishedAt": "2026-11-30T09:30:00Z"}}},
        {"state": {"terminated": {"finishedAt": "2026-11-30T09:45:00Z"}}}]}
    pods = [dict(make_pod("vc", 0), status=started),
            dict(make_pod("vc", 1, deleting=True), status=started),
            make_pod("vc", 2),  # no startTime: counted as running since before the interval
            make_pod("vc", 3, node=None),  # never bound: never ran
            dict(make_pod("vc", 4), status=finished),
            make_pod("vc", 5, phase="Failed")]  # finished, no finishedAt: left out
    assert pod_runs(pods) == (
        PodRun("vc-0", at("2026-11-30T08:00:00Z")),
        PodRun("vc-1", at("2026-11-30T08:00:00Z"), at("2026-11-30T09:00:00Z")),
        PodRun("vc-2", None),
        PodRun("vc-4", at("2026-11-30T08:00:00Z"), at("2026-11-30T09:45:00Z")))


def test_a_bound_pod_without_a_start_time_starts_at_its_binding_then_its_creation() -> None:
    # CI of stop 32 (scenario 4 of issue 21): pods bound to the real node a moment before the kubelet gave them
    # status.startTime were charged for their evaluation's whole interval (31 replica-seconds over 5 pods). The
    # earliest each can have run is when it was bound (its PodScheduled condition turned True), else when it was
    # created: both still bounds from above on its charge, far tighter than the interval's start.
    from modalscale.costmodel.ledger import PodRun
    from modalscale.operator.budget.plan import pod_runs

    scheduled = {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-30T09:59:58Z"}
    created = "2026-11-30T09:59:50Z"
    bound = make_pod("vc", 0, phase="Pending")
    bound["metadata"]["creationTimestamp"] = created
    bound["status"]["conditions"] = [{"type": "Initialized", "status": "True",
                                      "lastTransitionTime": "2026-11-30T09:59:59Z"}, scheduled]
    only_created = make_pod("vc", 1, phase="Pending")
    only_created["metadata"]["creationTimestamp"] = created
    unscheduled_cond = make_pod("vc", 2, phase="Pending")  # a False PodScheduled is not its binding
    unscheduled_cond["metadata"]["creationTimestamp"] = created
    unscheduled_cond["status"]["conditions"] = [dict(scheduled, status="False")]
    started = dict(make_pod("vc", 3), status={"phase": "Running", "startTime": "2026-11-30T10:00:01Z",
                                               "conditions": [scheduled]})
    at = dt.datetime.fromisoformat
    assert pod_runs([bound, only_created, unscheduled_cond, started]) == (
        PodRun("vc-0", at("2026-11-30T09:59:58+00:00"), bound=at("2026-11-30T09:59:58+00:00")),
        PodRun("vc-1", at("2026-11-30T09:59:50+00:00"), bound=at("2026-11-30T09:59:50+00:00")),
        PodRun("vc-2", at("2026-11-30T09:59:50+00:00"), bound=at("2026-11-30T09:59:50+00:00")),
        # its own start wins; it was counted since its binding
        PodRun("vc-3", at("2026-11-30T10:00:01+00:00"), bound=at("2026-11-30T09:59:58+00:00")))


def test_a_pod_bound_mid_interval_without_a_start_time_is_charged_from_its_binding_not_the_interval() -> None:
    # The ledger end to end: the last evaluation 15 s ago saw 1 replica; now a second pod is bound 5 s ago and
    # the kubelet has not yet written its startTime. It ran at most 5 s: charged 15 + 5 replica-seconds, not 30.
    policy = make_policy(limit={"amount": "100", "currency": "USD"}, evaluationIntervalSeconds=15)
    policy["status"] = {"periodStart": "2026-11-30T00:00:00Z", "ledger": {
        "observedTime": (T0 - dt.timedelta(seconds=15)).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "services": [{"namespace": "ml", "name": "vc", "replicas": 1, "costUSDPerHour": "0.600125239",
                      "spent": "0"}]}}
    first = dict(make_pod("vc", 0), status={"phase": "Running", "startTime": "2026-11-30T08:00:00Z"})
    second = make_pod("vc", 1, phase="Pending")
    second["metadata"]["creationTimestamp"] = (T0 - dt.timedelta(seconds=6)).strftime("%Y-%m-%dT%H:%M:%SZ")
    second["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime":
                                       (T0 - dt.timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ")}]
    plan = plan_policy(policy, observed(make_isvc(), pods={"ml": [first, second]}), CATALOG, [], T0)
    # 20 replica-seconds at 0.600125239 USD/h = 0.003334029 USD (rounded to the ledger's 9 places).
    assert plan.budget is not None and plan.budget.spent_usd == Decimal("0.003334029")


def test_a_spend_anomaly_is_alerted_once_through_the_outbox_naming_the_driver() -> None:
    from modalscale.costmodel.anomaly import BurnSample

    price = 0.600125239  # one L4 replica of make_isvc
    history = {("ml", "vc"): [BurnSample(T0 - dt.timedelta(minutes=40 - i), 2 * price, 2, price) for i in range(40)]}
    policy = make_policy(notifications=[{"name": "room", "type": "Slack", "secretRef": {"name": "hook"}}])
    ten = observed(make_isvc(), pods={"ml": [make_pod("vc", n) for n in range(10)]})
    plan = plan_policy(policy, ten, CATALOG, [], T0, history=history)
    (alert,) = plan.alerts
    assert alert.kind.value == "SpendAnomaly" and alert.title == "Budget ml/daily: spend anomaly in ml/vc"
    facts = dict(alert.facts())
    # smoothed over 120 s: the median of the samples at T0 - 60 s (2 replicas) and now (10) is 6 replicas
    assert ("ml/vc burns 6.00 USD/h (median of the last samples 3.60) against a recent baseline of 1.20 USD/h "
            "(robust z 8.0)") in facts["Anomaly"]
    assert "driver: replicas 2 -> 10" in facts["Anomaly"]
    assert [(e["kind"], e["notification"]) for e in plan.status_patch["pendingAlerts"]] == [("SpendAnomaly", "room")]
    assert ("Warning", "SpendAnomaly", alert.title) in plan.events
    assert plan.burn_samples[("ml", "vc")].replicas == 10
    # The next evaluation, still at 10 replicas: the anomaly lasts, nothing new is alerted.
    history[("ml", "vc")].append(plan.burn_samples[("ml", "vc")])
    assert plan.status_patch["spendAnomalies"] == [{"namespace": "ml", "name": "vc", "since": "2026-11-30T10:00:00Z"}]
    # The state is read back from the status the apiserver stored, not passed along in memory.
    again = plan_policy(persisted(policy, plan.status_patch), ten, CATALOG, [], T0 + dt.timedelta(minutes=1),
                        history=history)
    assert again.alerts == () and ("ml", "vc") in again.anomaly_state.active


def test_pod_resources_sums_the_containers_requests_and_refuses_what_it_cannot_read() -> None:
    from decimal import Decimal

    from modalscale.costmodel.catalog import ReplicaResources
    from modalscale.operator.budget.plan import pod_resources

    def pod(*requests: dict[str, str], selector: dict[str, str] | None = None) -> dict:
        containers = [{"name": f"c{i}", "resources": {"requests": r}} for i, r in enumerate(requests)]
        return {"spec": {"nodeSelector": selector or {}, "containers": containers}}

    assert pod_resources(pod({"cpu": "1500m", "memory": "1Gi"}, {"cpu": "500m", "memory": "512Mi"})) == \
        ReplicaResources(Decimal("2"), 1536 * 2**20, 0, None)
    assert pod_resources(pod({"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"},
                             selector={"nvidia.com/gpu.product": "nvidia-l4"})) == \
        ReplicaResources.from_quantities("2", "4Gi", 1, "nvidia-l4")
    assert pod_resources(pod({"cpu": "2"})) is None  # no memory request
    assert pod_resources(pod({"cpu": "two", "memory": "1Gi"})) is None
    assert pod_resources({"spec": {}}) is None


def test_a_cap_annotation_stored_as_a_float_is_rewritten_by_the_policy_that_owns_it() -> None:
    """``{"maxReplicas": 1.0, ...}`` does not decode (the autoscaler holds: ``BudgetCapUnreadable``), but JSON
    equality took it for the ``1`` the policy wants, so the policy never rewrote it and the service stayed held
    for the rest of the period."""
    policy = make_policy(limit={"amount": "0.01"},
                         thresholds=[{"percent": 50, "actions": ["Alert", "CapReplicas"], "capReplicas": 1}])
    isvc = make_isvc()
    first = plan_policy(policy, observed(isvc), CATALOG, [], T0)
    capped = annotated(isvc, first.annotation_writes)
    wanted = capped["metadata"]["annotations"][KEY]
    capped["metadata"]["annotations"][KEY] = wanted.replace('"maxReplicas":1', '"maxReplicas":1.0')
    second = plan_policy(persisted(policy, first.status_patch), observed(capped), CATALOG, [],
                         T0 + dt.timedelta(minutes=1))
    assert [(w.key, w.value) for w in second.annotation_writes] == [(KEY, wanted)]


def test_a_time_zone_change_mid_period_keeps_the_cap_and_re_alerts_nothing_through_the_stored_status() -> None:
    """The operator's round trip of the zone change (``costmodel/test_budget_zone_change.py``): the status written
    under UTC (periodStart/periodEnd) is read back, the spec now says America/New_York (its day began at 05:00Z):
    the cap annotation stays, nothing is alerted, no Event says enforcement was lifted, the spend carries."""
    isvc = make_isvc()
    p1 = persisted(make_policy(), plan_policy(make_policy(), observed(isvc), CATALOG, [], T0).status_patch)
    t1 = T0 + dt.timedelta(hours=1)
    crossed = plan_policy(p1, observed(isvc), CATALOG, [], t1)
    assert crossed.alerts and crossed.annotation_writes
    p2 = persisted(p1, crossed.status_patch)
    p2["spec"]["timeZone"] = "America/New_York"
    capped = observed(annotated(isvc, crossed.annotation_writes), pods={"ml": [make_pod("vc", 0)]})
    moved = plan_policy(p2, capped, CATALOG, [], t1 + dt.timedelta(seconds=30))
    assert moved.alerts == () and moved.annotation_writes == []
    assert not any(e[1] in ("EnforcementLifted", "Recovered") for e in moved.events), moved.events
    assert moved.status_patch["periodStart"] == "2026-11-30T05:00:00Z"
    assert moved.status_patch["spent"] == "1.21"  # 1.200250478 + 30 s at 0.600125239 USD/h, not reset


def test_a_service_whose_replicas_cannot_be_read_keeps_its_spend_anomaly_and_is_not_alerted_again() -> None:
    """A service in an anomaly whose pods could not be listed has no burn sample this evaluation: nothing is known
    about it, so its anomaly neither ends nor restarts. It was dropped from ``status.spendAnomalies`` as if the
    service were gone, and the next readable evaluation, still at 10 replicas, alerted the same anomaly again."""
    from modalscale.costmodel.anomaly import BurnSample

    price = 0.600125239  # one L4 replica of make_isvc
    history = {("ml", "vc"): [BurnSample(T0 - dt.timedelta(minutes=40 - i), 2 * price, 2, price) for i in range(40)]}
    policy = make_policy(notifications=[{"name": "room", "type": "Slack", "secretRef": {"name": "hook"}}])
    ten = observed(make_isvc(), pods={"ml": [make_pod("vc", n) for n in range(10)]})
    first = plan_policy(policy, ten, CATALOG, [], T0, history=history)
    assert [a.kind.value for a in first.alerts] == ["SpendAnomaly"]
    history[("ml", "vc")].append(first.burn_samples[("ml", "vc")])
    policy = persisted(policy, first.status_patch)
    blind = plan_policy(policy, observed(make_isvc(), pods={"ml": None}), CATALOG, [], T0 + dt.timedelta(minutes=1),
                        history=history)
    assert ("ml", "vc") not in blind.burn_samples  # replicas unknown: no sample
    assert ("ml", "vc") in blind.anomaly_state.active
    assert "spendAnomalies" not in blind.status_patch  # held as stored, not cleared
    again = plan_policy(persisted(policy, blind.status_patch), ten, CATALOG, [], T0 + dt.timedelta(minutes=2),
                        history=history)
    assert "SpendAnomaly" not in [a.kind.value for a in again.alerts]
    assert ("ml", "vc") in again.anomaly_state.active


def _flat_history(interval_s: int, n: int) -> dict[tuple[str, str], list[Any]]:
    from modalscale.costmodel.anomaly import BurnSample

    price = 0.600125239  # one L4 replica of make_isvc
    return {("ml", "vc"): [BurnSample(T0 - dt.timedelta(seconds=interval_s * (n - i)), 2 * price, 2, price)
                           for i in range(n)]}


def test_a_flat_history_at_1800_s_is_decided_on_and_too_little_history_says_so_in_a_condition() -> None:
    """A flat history at evaluationIntervalSeconds 1800 over 2 days (96 samples) decided nothing (the recent hour
    holds 1 sample, 30 were needed; a day's slot 3, 10 were needed) and no condition said so."""
    policy = make_policy(evaluationIntervalSeconds=1800)
    two = observed(make_isvc(), pods={"ml": [make_pod("vc", n) for n in range(2)]})
    plan = plan_policy(policy, two, CATALOG, [], T0, history=_flat_history(1800, 96))
    detection = get(plan.status_patch["conditions"], "SpendAnomalyDetection")
    assert detection is not None and (detection["status"], detection["reason"]) == ("True", "Detecting")
    # 3 samples of history: no decision, and the status names what is held and when detection starts.
    early = plan_policy(policy, two, CATALOG, [], T0, history=_flat_history(1800, 3))
    detection = get(early.status_patch["conditions"], "SpendAnomalyDetection")
    assert detection is not None and (detection["status"], detection["reason"]) == ("False", "InsufficientHistory")
    assert detection["message"] == (
        "ml/vc: no spend anomaly is decided until its baseline holds 5 burn-rate samples of the last 10920 s (at "
        "evaluationIntervalSeconds 1800); it has burn-rate samples from 2026-11-30T08:30:00Z, so the first decision "
        "comes at 2026-11-30T11:00:00Z")  # 2 more evaluations at 1800 s
    assert not [e for e in early.events if e[1] == "InsufficientHistory"]  # a new policy's warm-up: no Event
    # Decided from then on: one Normal Event on the transition, none at the evaluations after it.
    later = plan_policy(persisted(policy, early.status_patch), two, CATALOG, [], T0, history=_flat_history(1800, 5))
    assert [e[:2] for e in later.events if e[1] == "Detecting"] == [("Normal", "Detecting")]
