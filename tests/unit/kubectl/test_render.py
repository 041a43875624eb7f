"""``kubectl modalscale`` reports on statuses the operator's planners wrote (tests/unit/kubectl/statuses.py)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from modalscale.kubectl.render import (
    age,
    budget_report,
    cost_report,
    ordered_features,
    render_budget,
    render_cost,
    render_why,
    table,
    why_report,
)
from tests.unit.kubectl.statuses import (
    T0,
    budget_body,
    evaluated_policy,
    held_isvc,
    int8_isvc,
    isvc_body,
    scaled_isvc,
    staged_isvc,
)

NOW = T0 + dt.timedelta(hours=1, minutes=5)


def test_why_shows_the_latest_decision_with_its_features_and_the_history_newest_first() -> None:
    report = why_report(scaled_isvc(), NOW)
    d = report["lastDecision"]
    assert (d["mode"], d["reason"], d["valid"], d["age"]) == ("Predictive", "ScaleDownIdle", True, "54m")
    # The arrival rate, service time and predicted p95 lead the features, each with the unit its name carries.
    assert [(f["name"], f["value"], f["unit"]) for f in d["features"][:3]] == [
        ("arrival_rps", 10.0, "req/s"), ("mean_service_ms", 100.0, "ms"), ("predicted_p95_ms", 381.8359, "ms")]
    assert [(h["from"], h["to"], h["reason"]) for h in report["scalingHistory"]] == [
        (5, 2, "ScaleDownIdle"), (1, 5, "LimitedByMaxStep")]
    assert report["replicas"] == {"desired": 2, "current": 5, "ready": 5}
    text = render_why(report)
    assert "Last decision (54m ago, 2026-11-30T10:11:00Z): Predictive ScaleDownIdle (valid)" in text
    assert "5 -> 2     ScaleDownIdle" in text and "1 -> 5     LimitedByMaxStep" in text
    assert any(line.split() == ["arrival_rps", "10", "req/s"] for line in text.splitlines())
    assert any(line.split()[:3] == ["MetricsAvailable", "True", "MetricsRead"] for line in text.splitlines())


def test_why_shows_a_held_decision_as_held_with_the_reason_and_keeps_the_history() -> None:
    report = why_report(held_isvc(), NOW)
    d = report["lastDecision"]
    assert (d["valid"], d["reason"], d["metricsAvailable"]) == (False, "HeldNoMetrics", False)
    assert report["replicas"]["desired"] == 2 and len(report["scalingHistory"]) == 2
    text = render_why(report)
    assert "Predictive HeldNoMetrics (held: metrics missing or stale, replicas unchanged)" in text
    assert any(line.split()[:2] == ["MetricsAvailable", "False"] for line in text.splitlines())


def test_why_last_limits_the_history_to_the_newest_changes() -> None:
    assert [h["to"] for h in why_report(scaled_isvc(), NOW, last=1)["scalingHistory"]] == [2]
    assert why_report(scaled_isvc(), NOW, last=0)["scalingHistory"] == []


def test_why_on_a_service_no_operator_has_seen_says_so_instead_of_failing() -> None:
    text = render_why(why_report(isvc_body(), NOW))
    assert "Last decision: <none>" in text and "Scaling history: <none>" in text
    assert "Conditions: <none> (no operator has written this status yet)" in text


def test_why_shows_the_image_encoder_pools_own_decision_after_the_fronts() -> None:
    report = why_report(staged_isvc(), NOW)
    pool = report["imageEncoderPool"]
    assert pool["replicas"] == {"desired": 1, "current": 0, "ready": 0} and pool["reason"] == "MinReplicas"
    d = pool["lastDecision"]
    assert (d["mode"], d["valid"], d["desiredReplicas"], d["reason"], d["utilizationRatio"], d["time"]) == (
        "Utilization", True, 2, "ScaleUpForUtilization", 0.9, "2026-11-30T10:01:00Z")
    assert d["message"] == "1 ready x 90% busy = 0.90 busy replicas / target 60% -> 2"
    lines = render_why(report).splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Image encoder pool"))
    assert at > next(i for i, line in enumerate(lines) if line.startswith("Last decision"))  # after the front's
    assert lines[at].split("   ")[1] == "replicas: 1 desired, 0 current, 0 ready"
    assert lines[at + 1] == ("  Last decision (1h ago, 2026-11-30T10:01:00Z): Utilization ScaleUpForUtilization "
                             "(valid), desired 2, utilization 0.9 (0..1)")
    assert lines[at + 2].strip() == d["message"]


def test_why_of_a_service_without_stages_has_no_pool_section_and_a_pool_without_a_decision_says_so() -> None:
    report = why_report(scaled_isvc(), NOW)
    assert report["imageEncoderPool"] is None and "Image encoder pool" not in render_why(report)
    staged = staged_isvc()
    pool_item = staged["status"]["stages"][1]
    assert pool_item["name"] == "image-encoder"
    del pool_item["autoscaler"]
    text = render_why(why_report(staged, NOW))
    assert "Image encoder pool" in text and "  Last decision: <none> (no pool autoscaler decision" in text


def test_why_says_on_how_many_pods_the_int8_image_encoder_fell_back_to_fp32() -> None:
    fell = render_why(why_report(int8_isvc(1, pods=2), NOW)).splitlines()
    assert any(line.split() == ["image_int8_fallback_pods", "1", "pods"] for line in fell)
    assert "  INT8 images: FP32 on 1 of 2 pod(s): their INT8 image encoder missed its fidelity bound" in "\n".join(fell)
    kept = render_why(why_report(int8_isvc(0, pods=3), NOW))
    assert "  INT8 images: served in INT8 on all 3 pod(s) that asked for them" in kept
    assert "INT8 images" not in render_why(why_report(scaled_isvc(), NOW))  # no gauge exported: no line


def test_features_that_are_not_finite_numbers_are_left_out() -> None:
    got = ordered_features({"zeta_s": 2, "arrival_rps": 1.5, "bad": float("nan"), "flag": True, "none": None})
    assert [(f["name"], f["unit"]) for f in got] == [("arrival_rps", "req/s"), ("zeta_s", "s")]


def test_cost_reads_the_burn_rate_and_the_spend_each_ledger_counts() -> None:
    isvc = scaled_isvc()
    other_ns = evaluated_policy(isvc_body("vc", "elsewhere"), name="other")  # counts elsewhere/vc, not ml/vc
    report = cost_report(isvc, [evaluated_policy(), other_ns], NOW)
    assert report["costUSDPerHour"] == "3.0006"  # 5 running replicas x 0.600125239 USD/h, written by plan_isvc
    (b,) = report["budgets"]
    assert (b["budgetPolicy"], b["spent"], b["costUSDPerHour"], b["counted"]) == (
        "ml/daily", "1.200250478", "0.600125239", True)
    assert b["enforcement"] == {"action": "CapReplicas", "maxReplicas": 1, "dryRun": False,
                                "message": "at most 1 replica(s)"}
    text = render_cost(report)  # money in cents, as everywhere (docs/budgets.md); the JSON report keeps it exact
    assert "Burn rate now: 3.00 USD/h" in text
    assert any(line.split()[:7] == ["ml/daily", "Daily", "2026-11-30T00:00Z..2026-12-01T00:00Z", "1.20", "USD",
                                    "0.60", "USD/h"] for line in text.splitlines()), text
    assert "1.200250478" not in text and "0.600125239" not in text


def test_cost_lists_a_selecting_policy_not_evaluated_yet_and_says_when_nothing_meters_the_service() -> None:
    isvc = scaled_isvc()
    (b,) = cost_report(isvc, [budget_body()], NOW)["budgets"]
    assert (b["budgetPolicy"], b["counted"], b["spent"]) == ("ml/daily", False, None)
    assert "not counted yet" in render_cost(cost_report(isvc, [budget_body()], NOW))
    none = render_cost(cost_report(isvc, [], NOW, policies_scope="namespace ml"))
    assert "Spend: not metered (no BudgetPolicy in namespace ml counts this service" in none


def test_budget_shows_spend_thresholds_and_the_next_action_with_the_spend_it_starts_at() -> None:
    report = budget_report(evaluated_policy(), NOW)
    assert (report["spent"], report["limit"], report["percentUsed"], report["burnRatePerHour"]) == (
        "1.20", "2", "60.0", "1.20")
    assert [(t["percent"], t["crossed"], t["alertedThisPeriod"]) for t in report["thresholds"]] == [
        (50, True, True), (100, False, False)]
    # 100 % of 2 USD; 0.80 USD to go at 1.20 USD/h = 0.67 h; ScaleDown acts one 60 s evaluation and a replica's
    # 90 s grace period ahead, as the operator does (enforcement_horizon_s): 2.00 - 1.20 x 150 / 3600 = 1.95 USD.
    n = report["nextAction"]
    assert (n["percent"], n["atSpend"], n["toGo"], n["hoursAtBurnRate"], n["enforcesFromSpend"], n["enforcedAhead"]
            ) == (100, "2.00", "0.80", 0.67, "1.95", False)
    assert n["actions"] == ["Alert (team-slack)", "ScaleDown: every selected service to 1 replica(s)"]
    assert [(a["notification"], a["kind"]) for a in report["pendingAlerts"]] == [("team-slack", "ThresholdCrossed")]
    text = render_budget(report)
    assert "Spent:      1.20 USD of 2.00 USD (60.0 %), remaining 0.80 USD" in text
    assert "Next action: at 100 % (spend 2.00 USD, 0.80 USD to go, in 0.67 h at the current burn rate)" in text
    assert ("enforced from spend 1.95 USD (one evaluation and a replica's 90 s grace period ahead of the crossing)"
            in text)
    assert any(line.split()[:2] == ["ml/vc", "CapReplicas"] for line in text.splitlines())
    # the ledger's rows in cents too (they showed its exact 1e-9 USD: 0.600125239 USD/h, 1.200250478 USD)
    assert ["ml/vc", "1", "0.60", "USD/h", "1.20", "USD"] in [line.split() for line in text.splitlines()], text


def test_a_next_threshold_enforced_ahead_of_its_crossing_says_so() -> None:
    # Evaluated every hour: after 30 min 0.60 USD is spent, and 0.60 + 1.20 USD/h x 1 h reaches the 50 % threshold
    # (1.00 USD) before the next evaluation, so the operator caps ahead of the crossing (ENFORCEMENT_METHOD).
    report = budget_report(evaluated_policy(step=dt.timedelta(minutes=30), evaluationIntervalSeconds=3600), NOW)
    n = report["nextAction"]
    assert (report["spent"], n["percent"], n["enforcedAhead"]) == ("0.60", 50, True)
    assert [e["action"] for e in report["enforcedServices"]] == ["CapReplicas"]
    text = render_budget(report)
    assert "enforced already (ahead of the crossing" in text and "enforced from spend" not in text


def test_the_next_action_reads_the_exact_spend_the_operator_compares_not_the_cents_status_shows() -> None:
    # 99 min 48 s of two L4 replicas: the ledger holds 1.996416628 USD, status.spent shows it to the cent as 2.00.
    # The operator compares the exact spend: the 100 % threshold (2.00 USD) is not crossed, it is enforced ahead.
    report = budget_report(evaluated_policy(step=dt.timedelta(minutes=99, seconds=48)),
                           T0 + dt.timedelta(minutes=100))
    assert report["spent"] == "2.00" and [t["crossed"] for t in report["thresholds"]] == [True, False]
    assert report["percentUsed"] == "99.8"  # 1.996416628 / 2, not 2.00 / 2
    n = report["nextAction"]
    # 0.003583372 to go reads as itself (it read 0.00, as if reached).
    assert n is not None and (n["percent"], n["atSpend"], n["toGo"], n["enforcedAhead"]) == (100, "2.00", "0.0035",
                                                                                             True)
    text = render_budget(report)
    assert "every threshold is reached" not in text
    assert "Next action: at 100 % (spend 2.00 USD" in text and "enforced already (ahead of the crossing" in text


def test_budget_past_every_threshold_has_no_next_action() -> None:
    report = budget_report(evaluated_policy(hours=2), NOW + dt.timedelta(hours=1))
    assert report["state"] == "Exceeded" and report["nextAction"] is None
    assert [t["crossed"] for t in report["thresholds"]] == [True, True]
    assert "Next action: <none> (every threshold is reached" in render_budget(report)


def test_budget_not_evaluated_yet_and_with_a_spec_the_operator_refuses() -> None:
    fresh = budget_report(budget_body(), NOW)
    assert fresh["state"] is None and fresh["nextAction"] is None and fresh["percentUsed"] is None
    assert "state not evaluated yet" in render_budget(fresh)
    bad = budget_body()
    bad["spec"]["limit"]["amount"] = "1e999"  # refused by the CRD's pattern and by the operator's parser
    report = budget_report(bad, NOW)
    assert report["specError"] is not None and report["specError"].startswith("spec.limit.amount")
    assert "spec does not parse (the operator refuses it too): spec.limit.amount" in render_budget(report)


@pytest.mark.parametrize(("field", "value"), [("periodEnd", "tomorrow"), ("spent", "1e3"), ("forecast", 1.5),
                                              ("lastEvaluationTime", "noon")])
def test_budget_names_a_status_field_that_does_not_read_instead_of_showing_it_as_absent(field: str,
                                                                                         value: Any) -> None:
    policy = evaluated_policy()
    policy["status"][field] = value
    report = budget_report(policy, NOW)
    assert report["statusProblem"] is not None and report["statusProblem"].startswith(f"status.{field}"), report
    assert f"status does not read (shown as absent below): status.{field}" in render_budget(report)
    assert budget_report(evaluated_policy(), NOW)["statusProblem"] is None


@pytest.mark.parametrize("make", [lambda: why_report(scaled_isvc(), NOW), lambda: why_report(staged_isvc(), NOW),
                                  lambda: cost_report(scaled_isvc(), [evaluated_policy()], NOW),
                                  lambda: budget_report(evaluated_policy(), NOW)],
                         ids=["why", "why-staged", "cost", "budget"])
def test_reports_are_plain_json(make: Any) -> None:
    report = make()
    assert json.loads(json.dumps(report)) == report


@pytest.mark.parametrize(("seconds", "want"), [(0, "0s"), (59, "59s"), (60, "1m"), (3599, "59m"), (3600, "1h"),
                                               (86399, "23h"), (86400 * 2, "2d"), (86400 * 400, "1y")])
def test_age_is_kubectls_short_human_duration(seconds: int, want: str) -> None:
    assert age((T0 - dt.timedelta(seconds=seconds)).isoformat(), T0) == want


def test_age_of_an_unreadable_time_is_none_and_of_a_future_one_invalid() -> None:
    assert age("yesterday", T0) == "<none>" and age(None, T0) == "<none>"
    assert age("2026-11-30T10:00:05Z", T0) == "<invalid>"


def test_table_aligns_columns_and_shows_empty_cells_as_none() -> None:
    assert table(["A", "LONG"], [["xyz", None], ["", 7]]).splitlines() == [
        "A        LONG", "xyz      <none>", "<none>   7"]


def test_budget_of_a_tenant_policy_names_the_tenants_and_the_services_refusing_them() -> None:
    policy = budget_body()
    policy["spec"]["selector"] = {"tenants": ["acme"]}
    policy["spec"]["thresholds"] = [{"percent": 100, "actions": ["Alert", "Reject"]}]
    policy["status"] = {"spent": "2.00", "rejectedTenants": [
        {"namespace": "ml", "name": "vc", "tenant": "acme", "thresholdPercent": 100,
         "since": "2026-11-30T10:30:00Z", "until": "2026-12-01T00:00:00Z"}]}
    report = budget_report(policy, NOW)
    assert report["tenants"] == ["acme"] and report["specError"] is None
    text = render_budget(report)
    assert "Tenants: acme" in text
    assert any(line.split()[:3] == ["ml/vc", "acme", "2026-11-30T10:30:00Z"] for line in text.splitlines()), text
    assert [t["actions"] for t in report["thresholds"]] == [["Alert", "Reject"]]


def test_values_a_newer_operator_wrote_are_shown_as_read_and_called_unknown_never_hidden() -> None:
    # An action, a Spot state, an alert kind and a budget state this plugin does not know: the typed read of the
    # whole part failed, and the plugin showed "Enforced now: <none>", "state not evaluated yet", every threshold
    # "not crossed" and "Pending alerts: <none>", hiding what the operator is doing.
    policy = evaluated_policy()
    status = policy["status"]
    status["enforcedServices"][0]["action"] = "Throttle"
    status["spotServices"] = [{"namespace": "ml", "name": "vc", "thresholdPercent": 50, "state": "Preempted",
                               "since": "2026-11-30T11:00:00Z"}]
    status["state"] = "Frozen"
    status["pendingAlerts"][0]["kind"] = "TenantSpike"
    report = budget_report(policy, NOW)
    assert report["statusProblem"] is not None and "Throttle" in report["statusProblem"]
    assert report["state"] == "Frozen (unknown to this plugin)"
    assert [(e["namespace"], e["name"], e["action"], e["maxReplicas"], e["message"])
            for e in report["enforcedServices"]] == [
        ("ml", "vc", "Throttle (unknown to this plugin)", 1, "at most 1 replica(s)")]
    assert [(s["name"], s["state"]) for s in report["spotServices"]] == [("vc", "Preempted (unknown to this plugin)")]
    assert [(t["percent"], t["crossed"], t["alertedThisPeriod"]) for t in report["thresholds"]] == [
        (50, True, True), (100, False, False)]
    assert [(a["notification"], a["kind"]) for a in report["pendingAlerts"]] == [
        ("team-slack", "TenantSpike (unknown to this plugin)")]
    assert report["periodStart"] == "2026-11-30T00:00:00Z"
    text = render_budget(report)
    assert "Enforced now: <none>" not in text and "Pending alerts: <none>" not in text
    assert "state Frozen (unknown to this plugin)" in text
    assert any(line.split()[:3] == ["ml/vc", "Throttle", "(unknown"] for line in text.splitlines()), text
    assert "Preempted (unknown to this plugin)" in text and "TenantSpike (unknown to this plugin)" in text
    assert "status does not read here (its items are shown below as stored" in text
    cost = cost_report(scaled_isvc(), [policy], NOW)
    (budget,) = cost["budgets"]
    assert budget["state"] == "Frozen (unknown to this plugin)"
    assert budget["enforcement"] is not None and budget["enforcement"]["action"] == "Throttle (unknown to this plugin)"
    assert "Throttle (unknown to this plugin): at most 1 replica(s)" in render_cost(cost)
    assert json.loads(json.dumps(report)) == report


def test_budget_with_a_spec_the_operator_refuses_shows_its_thresholds_as_written() -> None:
    """A spec that does not parse showed its thresholds from status alone: none on a policy the operator never
    evaluated (so no "Thresholds:" table at all), and ``<none>`` actions on one it had, which read as thresholds
    without actions. They are now the spec's own items, each action as written, joined with status's records;
    the amount each is at stays unknown (the operator refuses the spec, so nothing is in force)."""
    bad = budget_body()
    bad["spec"]["timeZone"] = "Mars/Olympus"  # the operator refuses the zone
    bad["spec"]["thresholds"] = [{"percent": 50}, {"percent": 100, "actions": ["Alert", "ScaleDown"]},
                                 {"percent": "lots"}]
    report = budget_report(bad, NOW)
    assert report["specError"] is not None
    assert [(t["percent"], t["forecast"], t["actions"], t["atSpend"]) for t in report["thresholds"]] == [
        (50, False, ["Alert"], None), (100, False, ["Alert", "ScaleDown"], None)]
    text = render_budget(report)
    assert "Alert,ScaleDown" in text and "Thresholds (as written; the spec is refused, so none acts from it" in text

    evaluated = evaluated_policy(hours=2)
    evaluated["spec"]["timeZone"] = "Mars/Olympus"
    rows = {(t["percent"], t["forecast"]): t for t in budget_report(evaluated, NOW)["thresholds"]}
    written = {(t["percent"], False) for t in evaluated["spec"]["thresholds"]}
    assert written <= set(rows) and all(rows[k]["crossed"] for k in written)  # joined with status's records
    assert all(rows[k]["actions"] for k in written)


def test_a_refused_spec_with_caps_held_does_not_say_nothing_is_enforced() -> None:
    """Found by review: the heading said "none is in force" above "Enforced now: ml/vc ..." (a hold keeps the
    enforcement in force)."""
    policy = evaluated_policy(hours=2)
    policy["spec"]["timeZone"] = "Mars/Olympus"
    report = budget_report(policy, NOW)
    assert report["enforcedServices"]
    text = render_budget(report)
    assert "none is in force" not in text and "enforcement already in force is held" in text


def test_a_threshold_only_status_holds_is_not_shown_as_written_without_actions() -> None:
    """Found by review: 50 % removed in the refused edit was listed under "as written" with ``<none>`` actions."""
    policy = evaluated_policy(hours=2)
    policy["spec"]["timeZone"] = "Mars/Olympus"
    policy["spec"]["thresholds"] = [policy["spec"]["thresholds"][1]]
    report = budget_report(policy, NOW)
    rows = {t["percent"]: t["actions"] for t in report["thresholds"] if not t["forecast"]}
    assert rows[50] is None and rows[policy["spec"]["thresholds"][0]["percent"]]
    assert "(not in the spec)" in render_budget(report)
