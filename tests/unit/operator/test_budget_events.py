"""BudgetPolicy Events and messages (user report item 14): ``HistoryUnavailable`` is a Warning, and
``AlertDelivered`` names each failing receiver once however many of its alerts are pending."""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

from modalscale.costmodel.outbox import OutboxUpdate
from modalscale.operator.budget.plan import PolicyPlan, _alert_condition, plan_policy
from modalscale.operator.budget.spend_anomalies import HistoryRead
from tests.unit.operator.test_budget_plan import (
    CATALOG,
    T0,
    _flat_history,
    first_alert,
    make_isvc,
    make_pod,
    make_policy,
    observed,
    persisted,
)


def get_condition(plan: PolicyPlan, type_: str) -> tuple[str, str, str]:
    c = next(c for c in plan.status_patch["conditions"] if c["type"] == type_)
    return c["status"], c["reason"], c["message"]


def test_a_spend_anomaly_history_that_cannot_be_read_is_a_warning_event() -> None:
    p0 = make_policy()
    ok = plan_policy(p0, observed(make_isvc()), CATALOG, [], T0, history_read=HistoryRead(True, "Read 0 samples"))
    p1 = persisted(p0, ok.status_patch)
    down = plan_policy(p1, observed(make_isvc()), CATALOG, [], T0 + dt.timedelta(minutes=1),
                       history_read=HistoryRead(False, "Prometheus at http://p did not answer"))
    assert [e[:2] for e in down.events if e[1] == "HistoryUnavailable"] == [("Warning", "HistoryUnavailable")]
    # Back: a Normal Event.
    back = plan_policy(persisted(p1, down.status_patch), observed(make_isvc()), CATALOG, [],
                       T0 + dt.timedelta(minutes=2), history_read=HistoryRead(True, "Read 2 samples"))
    assert [e[:2] for e in back.events if e[1] == "HistoryRead"] == [("Normal", "HistoryRead")]


def test_alert_delivered_lists_each_failing_receiver_once() -> None:
    _, plan = first_alert()
    slack, ding = plan.sends
    when = slack.next_attempt_time
    failing = [replace(slack, attempts=3, last_reason="ServerError", last_error="Slack answered HTTP 503",
                       next_attempt_time=when + dt.timedelta(minutes=2)),
               replace(slack, message=replace(slack.message, created_at=when + dt.timedelta(minutes=1)), attempts=1,
                       last_reason="ServerError", last_error="Slack answered HTTP 503",
                       next_attempt_time=when + dt.timedelta(minutes=1)),
               replace(ding, attempts=1, last_reason="SecretNotFound", last_error="Secret ml/d was not found",
                       next_attempt_time=when + dt.timedelta(seconds=30))]
    c = _alert_condition([], OutboxUpdate(tuple(failing), (), ()))
    assert (c.status, c.reason) == ("False", "ServerError")
    assert c.message.count("slack:") == 1 and c.message.count("ding:") == 1
    assert "slack: Slack answered HTTP 503 (2 alerts pending, attempt 3 failed; retrying at" in c.message
    assert "ding: Secret ml/d was not found (attempt 1 failed" in c.message


def test_spend_anomaly_detection_says_it_cannot_decide_when_no_service_is_priced_any_more() -> None:
    """Detecting (a flat history of 2 replicas), then the one service loses its price (a GPU type the catalog does
    not know) and then its pods cannot be listed: no burn-rate sample, nothing is scored. The condition stayed
    True/Detecting (stale: 'every priced InferenceService (1) is scored'); now Unknown, naming the service and why."""
    p0 = make_policy(evaluationIntervalSeconds=1800)
    two = observed(make_isvc(), pods={"ml": [make_pod("vc", n) for n in range(2)]})
    first = plan_policy(p0, two, CATALOG, [], T0, history=_flat_history(1800, 96))
    assert get_condition(first, "SpendAnomalyDetection")[:2] == ("True", "Detecting")
    p1 = persisted(p0, first.status_patch)
    t1 = T0 + dt.timedelta(seconds=1800)
    unpriced = observed(make_isvc(gpu_type="nvidia-z9"), pods={"ml": [make_pod("vc", n) for n in range(2)]})
    lost = plan_policy(p1, unpriced, CATALOG, [], t1, history=_flat_history(1800, 97))
    assert lost.burn_samples == {}
    status, reason, message = get_condition(lost, "SpendAnomalyDetection")
    assert (status, reason) == ("Unknown", "NothingPriced")
    assert message.startswith("No spend anomaly is decided: no selected InferenceService has a burn rate now "
                              "(ml/vc: The pricing catalog has no ") and "nvidia-z9" in message
    unlisted = plan_policy(p1, observed(make_isvc(), pods={"ml": None}), CATALOG, [], t1,
                           history=_flat_history(1800, 97))
    assert get_condition(unlisted, "SpendAnomalyDetection")[:2] == ("Unknown", "NothingPriced")
    assert "ml/vc: replica count could not be read" in get_condition(unlisted, "SpendAnomalyDetection")[2]
    # And the selector matching nothing any more: nothing to watch.
    gone = plan_policy(p1, observed(), CATALOG, [], t1, history=_flat_history(1800, 97))
    assert get_condition(gone, "SpendAnomalyDetection")[:2] == ("Unknown", "NoServicesSelected")
    # A policy that never had a priced service has no such condition (nothing was ever watched).
    never = plan_policy(p0, unpriced, CATALOG, [], T0)
    assert "SpendAnomalyDetection" not in [c["type"] for c in never.status_patch["conditions"]]


def test_prometheus_unreadable_is_one_warning_event_not_also_a_normal_one() -> None:
    """Detecting, then the operator restarts while Prometheus does not answer: SpendAnomalyHistory=False is the
    cause's Warning Event; SpendAnomalyDetection, True to False for the same cause, posted a Normal
    HistoryUnavailable Event repeating it (2 Events for one cause, of two types)."""
    p0 = make_policy(evaluationIntervalSeconds=1800)
    two = observed(make_isvc(), pods={"ml": [make_pod("vc", n) for n in range(2)]})
    first = plan_policy(p0, two, CATALOG, [], T0, history=_flat_history(1800, 96),
                        history_read=HistoryRead(True, "Read 96 samples"))
    assert get_condition(first, "SpendAnomalyDetection")[:2] == ("True", "Detecting")
    down = plan_policy(persisted(p0, first.status_patch), two, CATALOG, [], T0 + dt.timedelta(seconds=1800),
                       history={}, history_read=HistoryRead(False, "Prometheus at http://p did not answer"))
    assert get_condition(down, "SpendAnomalyDetection")[:2] == ("False", "HistoryUnavailable")
    assert [e[:2] for e in down.events if e[1] == "HistoryUnavailable"] == [("Warning", "HistoryUnavailable")]
    assert "SpendAnomalyHistory=False" in [e[2] for e in down.events if e[1] == "HistoryUnavailable"][0]


def test_a_service_that_can_no_longer_be_priced_is_one_warning_event() -> None:
    """Its pods cannot be listed: Ready=False/GovernanceBlind (Warning), BudgetExceeded=Unknown/GovernanceBlind
    (Normal), the GovernanceBlind alert's Warning and SpendAnomalyDetection=Unknown/NothingPriced (Normal): 4 Events
    for one cause, 3 of one reason in both types. Now Ready's Warning only, which names the service and why."""
    p0 = make_policy()
    p1 = persisted(p0, plan_policy(p0, observed(make_isvc()), CATALOG, [], T0).status_patch)
    blind = plan_policy(p1, observed(make_isvc(), pods={"ml": None}), CATALOG, [], T0 + dt.timedelta(minutes=1))
    assert [a.kind.value for a in blind.alerts] == ["GovernanceBlind"]
    assert [e[:2] for e in blind.events] == [("Warning", "GovernanceBlind")]
    assert blind.events[0][2].startswith("Ready=False: ") and "ml/vc: replica count could not be read" in \
        blind.events[0][2]


def test_a_spot_fallback_is_one_warning_event_per_service() -> None:
    """SpotFallback=True/SpotPendingTimeout posted a Normal Event besides the service's own Warning of the same
    reason and text (2 Events, of two types, for one fallback); now the service's Warning only."""
    from tests.unit.operator.test_budget_spot_plan import CATALOG as SPOT_CATALOG
    from tests.unit.operator.test_budget_spot_plan import NODES, SPOT_KEY, BudgetObserved, SpotSwitch
    from tests.unit.operator.test_budget_spot_plan import make_isvc as spot_isvc
    from tests.unit.operator.test_budget_spot_plan import make_pod as spot_pod
    from tests.unit.operator.test_budget_spot_plan import make_policy as spot_policy
    from tests.unit.operator.test_budget_spot_plan import persisted as spot_persisted

    batch = spot_isvc("batch", 10, {SPOT_KEY: SpotSwitch("ml/daily", 50).encode()})
    pods = [spot_pod("batch", 0, "kwok-gpu-0"), spot_pod("batch", 1, "kwok-gpu-0"),
            spot_pod("batch", 2, None, spot=True, created="2026-11-30T10:30:00Z")]
    obs = BudgetObserved([batch], {"ml": pods}, NODES)
    base = spot_policy(timeout_s=120, limit="1")
    t1 = T0 + dt.timedelta(minutes=30)
    p1 = spot_persisted(base, plan_policy(base, obs, SPOT_CATALOG, [], T0).status_patch)
    p2 = spot_persisted(p1, plan_policy(p1, obs, SPOT_CATALOG, [], t1).status_patch)
    plan = plan_policy(p2, obs, SPOT_CATALOG, [], t1 + dt.timedelta(seconds=120))
    assert get_condition(plan, "SpotFallback")[:2] == ("True", "SpotPendingTimeout")
    assert [e[:2] for e in plan.events if e[1] == "SpotPendingTimeout"] == [("Warning", "SpotPendingTimeout")]
    assert "InferenceService ml/batch: " in [e[2] for e in plan.events if e[1] == "SpotPendingTimeout"][0]


def test_spend_anomaly_history_says_so_once_prometheus_is_no_longer_configured() -> None:
    """The history was unreadable (False/HistoryUnavailable), then the operator was restarted without
    MODALSCALE_PROMETHEUS_URL (history_read None: memory only): the condition kept saying Prometheus did not answer,
    for good. Now Unknown/PrometheusNotConfigured naming the setting; a policy that never had one gets none."""
    p0 = make_policy()
    down = plan_policy(p0, observed(make_isvc()), CATALOG, [], T0,
                       history_read=HistoryRead(False, "Prometheus at http://p did not answer"))
    assert get_condition(down, "SpendAnomalyHistory")[:2] == ("False", "HistoryUnavailable")
    memory = plan_policy(persisted(p0, down.status_patch), observed(make_isvc()), CATALOG, [],
                         T0 + dt.timedelta(minutes=1))
    status, reason, message = get_condition(memory, "SpendAnomalyHistory")
    assert (status, reason) == ("Unknown", "PrometheusNotConfigured")
    assert "MODALSCALE_PROMETHEUS_URL" in message and "memory" in message
    assert [e[:2] for e in memory.events if e[1] == "PrometheusNotConfigured"] == [
        ("Normal", "PrometheusNotConfigured")]
    never = plan_policy(p0, observed(make_isvc()), CATALOG, [], T0)
    assert "SpendAnomalyHistory" not in [c["type"] for c in never.status_patch["conditions"]]


class _Recorder:
    """The writer, observer and settings ``lift_caps`` reads (a recording fake: every patch succeeds)."""

    def __init__(self, isvcs: list[dict[str, Any]]) -> None:
        self.isvcs = isvcs
        self.events: list[tuple[str, str, str]] = []
        self.regarding: list[tuple[str, str, str, str | None, str]] = []  # kind, namespace, name, uid, reason
        self.writer, self.observer, self.budget = self, self, self
        self.settings = SimpleNamespace(budget_admin_namespaces=())

    def list_isvcs(self, namespaces: Any) -> list[dict[str, Any]]:
        return self.isvcs

    def patch_annotations(self, plural: str, namespace: str, name: str, patch: dict[str, Any]) -> bool:
        return True

    def event(self, obj: Any, type_: str, reason: str, message: str, logger: Any, queued: bool = True) -> None:
        self.events.append((type_, reason, message))
        m = obj["metadata"]
        self.regarding.append((obj["kind"], m["namespace"], m["name"], m.get("uid"), reason))


def test_deleting_a_policy_posts_one_event_per_service_and_lifted_action() -> None:
    """Each annotation deleted was an EnforcementLifted 'Budget cap lifted' Event: a service capped and on Spot got
    2 alike, and each selected service of a tenant-scoped policy 1 for a cap it never had (its budgeted-tenants
    list). Now one Event per service and what held it: the cap, the Spot switch (SpotLifted), the tenants refused
    (TenantsAdmitted); none for the list of budgeted tenants."""
    from modalscale.api.annotations import (
        cap_annotation_key,
        reject_annotation_key,
        spot_annotation_key,
        tenants_annotation_key,
    )
    from modalscale.operator.budget.handlers import lift_caps

    keys = {k: f("ml", "daily") for k, f in (("cap", cap_annotation_key), ("spot", spot_annotation_key),
                                                ("reject", reject_annotation_key),
                                                ("tenants", tenants_annotation_key))}
    both = make_isvc("vc", annotations={keys["cap"]: "{}", keys["spot"]: "{}"})
    listed = make_isvc("ocr", annotations={keys["tenants"]: '["acme"]'})
    refused = make_isvc("asr", annotations={keys["reject"]: "{}", keys["tenants"]: '["acme"]'})
    rec = _Recorder([both, listed, refused])
    lifted = lift_caps(rec, rec, make_policy(), logging.getLogger("test"))  # type: ignore[arg-type]  # a fake
    assert lifted == 5  # annotations deleted
    assert sorted(rec.events) == [
        ("Normal", "EnforcementLifted", "Budget cap lifted from InferenceService ml/vc: BudgetPolicy ml/daily deleted"),
        ("Normal", "SpotLifted", "InferenceService ml/vc back on on-demand capacity: BudgetPolicy ml/daily deleted"),
        ("Normal", "TenantsAdmitted", "InferenceService ml/asr: tenants admitted again: BudgetPolicy ml/daily deleted"),
    ]


def test_a_deleted_policys_lift_events_regard_each_service_not_the_gone_policy() -> None:
    """New-user trial (7 Dec 2026): ``kubectl delete mbudget trial-tiny`` with a CapReplicas in force on service
    echo posted ``EnforcementLifted`` on budgetpolicy/trial-tiny, an object then gone; the service got none.
    budgets.md: each service gets one Normal Event per action lifted. The pure part: which Events, on which
    objects (the InferenceService, with its uid, in its own namespace)."""
    from modalscale.api.annotations import cap_annotation_key, spot_annotation_key
    from modalscale.operator.budget.plan import lift_all, lift_events

    policy = make_policy()
    policy["metadata"].update(name="trial-tiny", namespace="default")
    echo = make_isvc("echo", ns="default", annotations={cap_annotation_key("default", "trial-tiny"): "{}"})
    other = make_isvc("vc", ns="ml", annotations={cap_annotation_key("default", "trial-tiny"): "{}",
                                                  spot_annotation_key("default", "trial-tiny"): "{}"})
    isvcs = [other, echo]
    events = lift_events(policy, lift_all(policy, isvcs), isvcs)
    assert [(obj["kind"], obj["metadata"]["namespace"], obj["metadata"]["name"], obj["metadata"]["uid"], r)
            for obj, _, r, _ in events] == [
        ("InferenceService", "default", "echo", "u-echo", "EnforcementLifted"),
        ("InferenceService", "ml", "vc", "u-vc", "EnforcementLifted"),
        ("InferenceService", "ml", "vc", "u-vc", "SpotLifted"),
    ]
    assert all(obj["apiVersion"] == "modalscale.io/v1alpha1" for obj, *_ in events)
    assert events[0][1:] == ("Normal", "EnforcementLifted",
                             "Budget cap lifted from InferenceService default/echo: BudgetPolicy default/trial-tiny "
                             "deleted")


def test_deleting_a_policy_posts_its_lift_events_on_the_services() -> None:
    from modalscale.api.annotations import cap_annotation_key
    from modalscale.operator.budget.handlers import lift_caps

    policy = make_policy()
    echo = make_isvc("echo", annotations={cap_annotation_key(policy["metadata"]["namespace"],
                                                             policy["metadata"]["name"]): "{}"})
    rec = _Recorder([echo])
    assert lift_caps(rec, rec, policy, logging.getLogger("test")) == 1  # type: ignore[arg-type]  # a fake
    assert rec.regarding == [("InferenceService", "ml", "echo", "u-echo", "EnforcementLifted")]
