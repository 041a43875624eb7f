"""Which InferenceServices a BudgetPolicy may govern (user report items 3 and 13).

Item 3: a policy in ``default`` with ``selector.namespaces: [team-b]`` scaled ``team-b/victim`` to zero. Now only
policies in ``MODALSCALE_BUDGET_ADMIN_NAMESPACES`` may select other namespaces; any other policy gets
``Ready=False``/``NamespaceNotAllowed`` naming ``spec.selector.namespaces`` and the fix, and nothing there is read,
counted or enforced, while its own namespace is governed as before.

Item 13: a selector that matches nothing said ``Ready=True``/``Evaluated 0 InferenceServices``, state ``Ok``.

Prices: one replica (1 CPU, 2Gi, one nvidia-l4) costs 0.600125239 USD/h (see test_budget_plan.py).
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from modalscale.api.annotations import cap_annotation_key
from modalscale.operator.budget.plan import (
    BudgetObserved,
    observed_namespaces,
    plan_policy,
    refused_namespaces,
)
from modalscale.operator.conditions import get
from modalscale.operator.settings import ConfigError, Settings
from tests.unit.operator.test_budget_plan import CATALOG, T0, make_isvc, make_pod, make_policy, persisted

# 1 replica's price is 0.600125239 USD/h; a limit of 0.01 with ScaleToZero at 1 % is crossed at once.
TINY = {"limit": {"amount": "0.01", "currency": "USD"},
        "thresholds": [{"percent": 1, "actions": ["Alert", "ScaleToZero"]}]}


def policy(ns: str = "default", **spec: Any) -> dict[str, Any]:
    body = make_policy(**{**TINY, **spec})
    body["metadata"]["namespace"] = ns
    return body


def two_teams(*isvcs: dict[str, Any]) -> BudgetObserved:
    pods: dict[str, list[dict[str, Any]] | None] = {}
    for i in isvcs:
        pods.setdefault(i["metadata"]["namespace"], []).extend(
            make_pod(i["metadata"]["name"], n) | {"status": {"phase": "Running", "startTime": "2026-11-30T09:00:00Z"}}
            for n in range(2))
    return BudgetObserved(isvcs=list(isvcs), pods=pods)


def test_a_policy_may_select_other_namespaces_only_from_an_admin_namespace() -> None:
    assert refused_namespaces("default", ("team-b", "default"), ()) == ("team-b",)
    assert refused_namespaces("default", ("team-b", "team-a"), ("finops",)) == ("team-a", "team-b")
    assert refused_namespaces("finops", ("team-b",), ("finops",)) == ()
    assert refused_namespaces("default", ("team-b",), ("*",)) == ()
    assert refused_namespaces("default", (), ()) == ()  # empty: its own namespace


def test_a_policy_selecting_another_teams_namespace_neither_reads_nor_scales_it() -> None:
    victim, own = make_isvc("victim", ns="team-b"), make_isvc("mine", ns="default")
    body = policy(selector={"namespaces": ["team-b", "default"]})
    # What the operator reads: its own namespace only (team-b is never listed).
    assert observed_namespaces(body) == ("default",)
    plan = plan_policy(body, two_teams(victim, own), CATALOG, [], T0 + dt.timedelta(hours=1))
    # Its own service is governed as before: counted (from its pods' start, 09:00) and scaled to zero.
    assert [(w.namespace, w.name) for w in plan.annotation_writes] == [("default", "mine")]
    assert [s["namespace"] for s in plan.status_patch["enforcedServices"]] == ["default"]
    assert [s["namespace"] for s in plan.status_patch["ledger"]["services"]] == ["default"]
    ready = get(plan.status_patch["conditions"], "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "NamespaceNotAllowed")
    for words in ("spec.selector.namespaces", "team-b", "MODALSCALE_BUDGET_ADMIN_NAMESPACES",
                  "config.budgetAdminNamespaces", "create the policy in the namespace it governs"):
        assert words in ready["message"]
    assert ("Warning", "NamespaceNotAllowed") in [e[:2] for e in plan.events]


def test_only_team_b_selected_by_a_foreign_policy_counts_nothing_and_never_falls_back_to_its_own_namespace() -> None:
    victim, own = make_isvc("victim", ns="team-b"), make_isvc("mine", ns="default")
    body = policy(selector={"namespaces": ["team-b"]})
    plan = plan_policy(body, two_teams(victim, own), CATALOG, [], T0 + dt.timedelta(hours=1))
    assert plan.annotation_writes == [] and plan.status_patch["spent"] == "0.00"
    assert plan.status_patch["ledger"]["services"] == []
    assert get(plan.status_patch["conditions"], "Ready")["reason"] == "NamespaceNotAllowed"


def test_a_policy_in_an_admin_namespace_governs_the_namespaces_it_selects() -> None:
    victim = make_isvc("victim", ns="team-b")
    body = policy("finops", selector={"namespaces": ["team-b"]})
    assert observed_namespaces(body, ("finops",)) == ("team-b",)
    plan = plan_policy(body, two_teams(victim), CATALOG, [], T0 + dt.timedelta(hours=1), admin_namespaces=("finops",))
    assert [(w.namespace, w.name) for w in plan.annotation_writes] == [("team-b", "victim")]
    assert get(plan.status_patch["conditions"], "Ready")["reason"] == "Evaluated"


def test_caps_a_policy_holds_in_a_namespace_it_may_no_longer_select_are_lifted() -> None:
    # Written while the operator allowed it (admin namespaces changed since): the next evaluation lifts the cap.
    key = cap_annotation_key("default", "daily")
    victim = make_isvc("victim", ns="team-b", annotations={key: '{"maxReplicas":0,"policy":"default/daily",'
                                                              '"action":"ScaleToZero"}'})
    body = policy(selector={"namespaces": ["team-b"]})
    body["status"] = {"enforcedServices": [{"namespace": "team-b", "name": "victim", "action": "ScaleToZero",
                                            "maxReplicas": 0, "thresholdPercent": 1,
                                            "since": "2026-11-30T09:00:00Z", "dryRun": False}]}
    assert observed_namespaces(body) == ("default", "team-b")  # read to lift, not to govern
    plan = plan_policy(body, two_teams(victim), CATALOG, [], T0)
    assert [(w.namespace, w.name, w.key, w.value) for w in plan.annotation_writes] == [
        ("team-b", "victim", key, None)]
    assert plan.status_patch["enforcedServices"] == []


# ------------------------------------------------------------------ a selector that matches nothing (item 13)
def test_a_selector_matching_nothing_is_not_a_silent_ok_and_says_so_in_one_event() -> None:
    body = make_policy(selector={"matchLabels": {"team": "serach"}})
    obs = two_teams(make_isvc("vc", labels={"team": "search"}))
    first = plan_policy(body, obs, CATALOG, [], T0)
    ready = get(first.status_patch["conditions"], "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "NoServicesSelected")
    assert "team=serach" in ready["message"] and "spec.selector" in ready["message"]
    assert [e[:2] for e in first.events] == [("Warning", "NoServicesSelected")]
    # Once: the next write (heartbeat) posts no second Event.
    later = plan_policy(persisted(body, first.status_patch), obs, CATALOG, [], T0 + dt.timedelta(hours=1))
    assert later.status_patch and [e for e in later.events if e[1] == "NoServicesSelected"] == []


def test_a_selector_that_matches_again_returns_to_evaluated() -> None:
    body = make_policy(selector={"matchLabels": {"team": "search"}})
    p1 = persisted(body, plan_policy(body, two_teams(), CATALOG, [], T0).status_patch)
    plan = plan_policy(p1, two_teams(make_isvc("vc", labels={"team": "search"})), CATALOG, [],
                       T0 + dt.timedelta(seconds=5))
    assert get(plan.status_patch["conditions"], "Ready")["reason"] == "Evaluated"


# ------------------------------------------------------------------ the setting
def test_the_admin_namespaces_setting_is_read_validated_and_defaults_to_none() -> None:
    assert Settings.from_env({}).budget_admin_namespaces == ()
    assert Settings.from_env({"MODALSCALE_BUDGET_ADMIN_NAMESPACES": "finops, platform"}).budget_admin_namespaces == (
        "finops", "platform")
    assert Settings.from_env({"MODALSCALE_BUDGET_ADMIN_NAMESPACES": "*"}).budget_admin_namespaces == ("*",)
    with pytest.raises(ConfigError, match="MODALSCALE_BUDGET_ADMIN_NAMESPACES: 'Team_B'"):
        Settings.from_env({"MODALSCALE_BUDGET_ADMIN_NAMESPACES": "Team_B"})


def test_a_threshold_without_actions_is_refused_by_the_parser_and_the_crd() -> None:
    from pathlib import Path

    import yaml

    from modalscale.api.budgetpolicy import InvalidBudgetSpec, parse_budget_spec

    with pytest.raises(InvalidBudgetSpec) as err:
        parse_budget_spec({**make_policy()["spec"], "thresholds": [{"percent": 50, "actions": []}]})
    assert err.value.field == "spec.thresholds[0].actions"
    repo = Path(__file__).resolve().parents[3]
    for crd in (repo / "crds", repo / "charts" / "modalscale-crds" / "files" / "crds"):
        schema = yaml.safe_load((crd / "budgetpolicies.modalscale.io.yaml").read_text())
        spec = schema["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        assert spec["properties"]["thresholds"]["items"]["properties"]["actions"]["minItems"] == 1


def test_a_listed_namespace_that_selects_nothing_is_named_in_ready_while_the_rest_is_evaluated() -> None:
    """Found by a new-user audit (6 Dec 2026): ``namespaces: [ghost-ns, alerts]`` with a typo read Ready=True
    Evaluated with no word of ghost-ns, so the typo'd namespace escaped the budget quietly (NoServicesSelected
    says so only when nothing at all matches)."""
    victim = make_isvc("victim", ns="team-b")
    body = policy("finops", selector={"namespaces": ["team-b", "ghost-ns"]})
    plan = plan_policy(body, two_teams(victim), CATALOG, [], T0 + dt.timedelta(hours=1), admin_namespaces=("finops",))
    ready = get(plan.status_patch["conditions"], "Ready")
    assert (ready["status"], ready["reason"]) == ("True", "Evaluated")
    assert ready["message"].endswith("; spec.selector.namespaces lists ghost-ns, where it selects no "
                                     "InferenceService (a typo, or a namespace with none yet?)"), ready["message"]
    both = plan_policy(policy("finops", selector={"namespaces": ["team-b"]}), two_teams(victim), CATALOG, [],
                       T0 + dt.timedelta(hours=1), admin_namespaces=("finops",))
    assert "lists" not in get(both.status_patch["conditions"], "Ready")["message"]


def test_a_policy_blind_and_exceeded_while_a_namespace_is_refused_alerts_governance_blind_once() -> None:
    """typo runs without a price, big's spend passes the 1 USD limit, and spec.selector.namespaces also lists a
    namespace the policy may not select: Ready=False/NamespaceNotAllowed, state Exceeded. Neither said the last
    evaluation was blind (state Unknown or Ready's GovernanceBlind: how it was read back), so the GovernanceBlind
    alert went out again at every evaluation (3 of 4); the stored ledger says it too (typo's rate unknown): once."""
    from modalscale.operator.budget.plan import BudgetObserved, plan_policy

    p = make_policy(limit={"amount": "1", "currency": "USD"}, selector={"namespaces": ["ml", "other"]},
                    thresholds=[{"percent": 100, "actions": ["Alert"]}],
                    notifications=[{"name": "room", "type": "Slack", "secretRef": {"name": "hook"}}])
    pods = {"ml": [make_pod("big", n) for n in range(2)] + [make_pod("typo", n) for n in range(2)]}
    obs = BudgetObserved([make_isvc("big"), make_isvc("typo", gpu_type="nvidia-b999")], pods)
    kinds = []
    for hour in range(4):
        plan = plan_policy(p, obs, CATALOG, [], T0 + dt.timedelta(hours=hour))
        kinds.append([a.kind.value for a in plan.alerts])
        assert (get(plan.status_patch["conditions"], "Ready") or {}).get("reason") == "NamespaceNotAllowed"
        p = persisted(p, plan.status_patch)
    assert kinds == [["GovernanceBlind"], ["ThresholdCrossed"], [], []]
