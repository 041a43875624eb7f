"""Each kind's status has one read and one write (``modalscale.api.isvc_status``,
``modalscale.costmodel.budget.status``), and no other module parses or builds it.

- Round trip: every field of :class:`IsvcStatus` survives ``read(write(x))`` through JSON, and a status the planners
  wrote reads and writes back byte for byte.
- Old, partial and malformed stored objects read without raising (absent fields None, a bad state fresh).
- Guard: a status-only key (one no other object the operator reads has) is read (``x[K]``, ``x.get(K)``) or built
  (a dict key) only in its kind's codec (``modalscale.api.isvc_status``, ``modalscale.costmodel.budget.status``);
  the modules not folded in yet are listed exactly, so a new reader fails here and one folded in must leave the list.
"""

from __future__ import annotations

import ast
import datetime as dt
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from modalscale.api.isvc_status import (
    DELETE,
    AutoscalerRecord,
    GatewayRecord,
    IsvcStatus,
    ScalerState,
    ScalingChange,
    StageRecord,
    merge_isvc_status,
    read_isvc_status,
    write_isvc_status,
)
from modalscale.costmodel.budget import PolicyRef
from modalscale.costmodel.budget.status import budget_status_json, read_budget_status, write_budget_status
from tests.factories import merge_patch
from tests.unit.kubectl.statuses import evaluated_policy, scaled_isvc

REPO = Path(__file__).resolve().parents[3]
T0 = dt.datetime(2026, 12, 2, 16, 43, 20, tzinfo=dt.UTC)
CONDITION = {"type": "Ready", "status": "True", "observedGeneration": 3, "lastTransitionTime": "2026-12-02T16:40:00Z",
             "reason": "MinimumReplicasAvailable", "message": "2/2 replicas ready"}
FULL = IsvcStatus(
    observed_generation=3, replicas=2, ready_replicas=1, desired_replicas=4, selector="app=vc",
    url="http://vc.ml.svc:8000", cost_usd_per_hour=Decimal("1.2345"), last_scale_reason="ScaleUpForSLO",
    scaling_history=(ScalingChange(T0, 1, 2, "ScaleUpForSLO", "p95 410 ms > 300 ms"),
                     ScalingChange(T0 + dt.timedelta(minutes=1), 2, 4, "ScaleUpForBurst")),
    autoscaler=AutoscalerRecord(
        mode="Predictive", valid=True, reason="ScaleUpForSLO", message="p95 410 ms > 300 ms", last_decision_time=T0,
        metrics_available=True, features={"arrival_rps": 2.5, "busy_erlangs": 0.1235},
        state=ScalerState(recommendations=((T0, 2), (T0 + dt.timedelta(seconds=15), 4)), service_scale=1.25,
                          latency_scale=0.8, last_change_at=T0, in_flight_history=(4.0, 7.5),
                          in_flight_times=(T0 - dt.timedelta(seconds=15, milliseconds=250), T0),
                          idle_since=T0 - dt.timedelta(seconds=30), scaled_to_zero_at=T0 - dt.timedelta(hours=1))),
    gateway=GatewayRecord(2, 1, "http://vc-replicas.ml.svc:8000"),
    stages=(StageRecord("front", 2, 1, 4, "ScaleUpForSLO"),
            StageRecord("image-encoder", 2, 2, 2, "ScaleUpForUtilization", "1 ready x 140% busy", "10.0.0.40:8001",
                        AutoscalerRecord(mode="Utilization", valid=True, reason="ScaleUpForUtilization",
                                         message="1 ready x 140% busy", last_decision_time=T0,
                                         metrics_available=True, features={"utilization_ratio": 1.4},
                                         state=ScalerState(recommendations=((T0, 2),), last_change_at=T0),
                                         desired_replicas=2))),
    conditions=(CONDITION,))  # type: ignore[arg-type]


def _wire(status: dict[str, Any]) -> dict[str, Any]:
    return {"status": json.loads(json.dumps(status))}


def test_every_field_round_trips_through_the_json_written() -> None:
    written = write_isvc_status(FULL)
    assert read_isvc_status(_wire(written)) == FULL
    assert set(written) == {"observedGeneration", "replicas", "readyReplicas", "desiredReplicas", "selector", "url",
                            "costUSDPerHour", "lastScaleReason", "scalingHistory", "autoscaler", "gateway",
                            "stages", "conditions"}
    assert written["costUSDPerHour"] == "1.2345" and written["scalingHistory"][1] == {
        "time": "2026-12-02T16:44:20Z", "from": 2, "to": 4, "reason": "ScaleUpForBurst"}


def test_a_scaler_state_key_the_new_state_lacks_is_removed_from_status_not_kept() -> None:
    # Review of f3a5a16: status is merge-patched and the state's optional keys were left out when unset, so a history
    # the policy had cleared (a decision without the in-flight count) and an idle run that had ended stayed in status,
    # for the next operator to read after a restart (an idleSince two hours old: a scale to zero at once).
    rec = ((T0, 2),)
    old = ScalerState(recommendations=rec, in_flight_history=(40.0, 80.0), last_change_at=T0,
                      in_flight_times=(T0 - dt.timedelta(seconds=15), T0), idle_since=T0 - dt.timedelta(hours=2),
                      scaled_to_zero_at=T0 - dt.timedelta(hours=3))
    stored = write_isvc_status(IsvcStatus(autoscaler=AutoscalerRecord(reason="Steady", state=old)))
    new = ScalerState(recommendations=rec, last_change_at=T0)
    patch = write_isvc_status(IsvcStatus(autoscaler=AutoscalerRecord(reason="Steady", state=new)), stored)
    assert {k: v for k, v in patch["autoscaler"]["state"].items() if v is None} == {
        "inFlightHistory": None, "inFlightTimes": None, "idleSince": None, "scaledToZeroTime": None}
    assert read_isvc_status({"status": merge_patch(stored, patch)}).scaler_state == new
    # the same state again writes nothing (no null for a key status does not have)
    again = merge_patch(stored, patch)
    assert write_isvc_status(IsvcStatus(autoscaler=AutoscalerRecord(reason="Steady", state=new)), again) == {}
    # sample times keep their milliseconds (a rate is taken over them)
    assert write_isvc_status(FULL)["autoscaler"]["state"]["inFlightTimes"] == [
        "2026-12-02T16:43:04.750Z", "2026-12-02T16:43:20.000Z"]


def test_the_image_encoder_pools_autoscaler_block_round_trips_inside_its_stage_item() -> None:
    """``status.stages[image-encoder].autoscaler``: the pool's decision with its count and scaler state, written
    with the stage item (the list is written whole); the service's own block never carries a count."""
    written = write_isvc_status(FULL)
    pool = written["stages"][1]["autoscaler"]
    assert pool["desiredReplicas"] == 2 and pool["mode"] == "Utilization"
    assert pool["state"]["recommendations"] == [{"time": "2026-12-02T16:43:20Z", "replicas": 2}]
    assert "desiredReplicas" not in written["autoscaler"] and "autoscaler" not in written["stages"][0]
    read = read_isvc_status(_wire(written))
    assert read.stage("image-encoder") == FULL.stage("image-encoder") and read.stage("front") is not None
    assert read.stage("image-encoder").autoscaler.state.recommendations == ((T0, 2),)  # type: ignore[union-attr]
    assert IsvcStatus(stages=DELETE).stage("front") is None and IsvcStatus().stage("front") is None
    # a malformed block reads as absent; the item itself stays
    broken = {"status": {"stages": [{"name": "image-encoder", "autoscaler": {"state": 5, "desiredReplicas": -1}}]}}
    item = read_isvc_status(broken).stage("image-encoder")
    assert item is not None and item.autoscaler is not None and item.autoscaler.desired_replicas is None
    assert read_isvc_status({"status": {"stages": [{"name": "image-encoder", "autoscaler": 3}]}}).stage(
        "image-encoder") == StageRecord("image-encoder")


def test_a_status_the_planners_wrote_reads_and_writes_back_byte_for_byte() -> None:
    stored = scaled_isvc()["status"]
    again = write_isvc_status(read_isvc_status({"status": stored}))
    assert json.dumps(again, sort_keys=True) == json.dumps(stored, sort_keys=True)
    assert write_isvc_status(read_isvc_status({"status": stored}), stored) == {}  # rerun writes nothing


@pytest.mark.parametrize("obj", [
    None, {}, {"status": None}, {"status": "x"}, {"status": {}},
    {"status": {"replicas": 2}},  # partial
    {"status": {"observedGeneration": 1, "conditions": [], "autoscaler": {"reason": "Steady"}}},  # before state
    {"status": {"desiredReplicas": "3", "replicas": True, "costUSDPerHour": "NaN", "scalingHistory": [{"to": 1}, 7],
                "autoscaler": {"state": {"recommendations": [{"time": "yesterday", "replicas": 1}]},
                               "features": {"a": "b", "c": 1}},
                "gateway": "on", "conditions": [{"status": "True"}, "x"]}},  # malformed everywhere
], ids=["none", "no-status", "null", "not-a-map", "empty", "partial", "old", "malformed"])
def test_old_partial_and_malformed_objects_read_without_raising(obj: Any) -> None:
    status = read_isvc_status(obj)
    assert status.scaler_state == ScalerState() and status.ready_gateway_pods == 0
    write_isvc_status(status)  # and write back without raising
    if obj and isinstance(obj.get("status"), dict) and "desiredReplicas" in obj["status"]:
        assert (status.desired_replicas, status.replicas, status.cost_usd_per_hour) == (None, None, None)
        assert status.scaling_history == () and status.conditions == ()
        assert status.autoscaler is not None and status.autoscaler.features == {"c": 1.0}


@pytest.mark.parametrize("status", [
    {"autoscaler": {"state": {"inFlightHistory": 5}}},
    {"autoscaler": {"state": {"inFlightHistory": {"a": 1}}}},
    {"autoscaler": {"state": {"serviceScale": 10 ** 400}}},
    {"autoscaler": {"features": {"big": 10 ** 400, "c": 1}}},
    {"scalingHistory": 5, "conditions": 5, "gateway": {"replicas": []}},
], ids=["history-number", "history-map", "huge-scale", "huge-feature", "numbers-for-lists"])
def test_a_field_of_the_wrong_shape_reads_as_absent_never_raises(status: dict[str, Any]) -> None:
    """Shapes the CRD's schema would refuse, but an object stored under an older CRD (or written by hand with the
    schema off) can hold: every part of the read is guarded (the reader's contract, the house rule)."""
    read = read_isvc_status({"status": status})
    assert read.scaler_state == ScalerState()
    if "features" in status.get("autoscaler", {}):
        assert read.autoscaler is not None and read.autoscaler.features == {"c": 1.0}
    write_isvc_status(read)


def test_old_object_reads_what_it_holds() -> None:
    status = read_isvc_status({"status": {"observedGeneration": 1, "autoscaler": {"reason": "Steady"}}})
    assert status == IsvcStatus(observed_generation=1, autoscaler=AutoscalerRecord(reason="Steady"))


def test_the_write_is_a_merge_patch_against_the_stored_status() -> None:
    stored = write_isvc_status(FULL)
    new_features = AutoscalerRecord(**{**FULL.autoscaler.__dict__, "features": {"arrival_rps": 3.0}})  # type: ignore[union-attr]
    patch = write_isvc_status(IsvcStatus(autoscaler=new_features, gateway=DELETE, replicas=2), stored)
    assert patch == {"autoscaler": {**stored["autoscaler"], "features": {"arrival_rps": 3.0, "busy_erlangs": None}},
                     "gateway": None}
    assert write_isvc_status(IsvcStatus(gateway=DELETE), {}) == {}  # nothing to delete
    assert write_isvc_status(IsvcStatus(stages=DELETE), stored) == {"stages": None}
    assert write_isvc_status(IsvcStatus(stages=DELETE), {}) == {}
    assert write_isvc_status(IsvcStatus(stages=FULL.stages), stored) == {}  # unchanged: not written


def test_merge_takes_every_field_a_later_part_sets() -> None:
    merged = merge_isvc_status(FULL, IsvcStatus(desired_replicas=7), IsvcStatus(conditions=()))
    assert merged == IsvcStatus(**{**FULL.__dict__, "desired_replicas": 7, "conditions": ()})


# ---------------------------------------------------------------------------------------------------- the guard
ISVC_ONLY_KEYS = {"desiredReplicas", "scalingHistory", "lastScaleReason", "lastDecisionTime", "metricsAvailable",
                  "serviceScale", "latencyScale", "inFlightHistory", "inFlightTimes", "idleSince", "scaledToZeroTime",
                  "replicasUrl", "lastChangeTime"}
"""Keys only an InferenceService's status has (``costUSDPerHour`` is also a budget ledger item's)."""
BUDGET_ONLY_KEYS = {"periodStart", "periodEnd", "burnRatePerHour", "lastEvaluationTime", "enforcedServices",
                    "spotServices", "rejectedTenants", "tenantSpent", "spendAnomalies", "pendingAlerts",
                    "alertedPeriodStart", "lastAlertTime", "observedTime", "calmSince", "fallbackTime",
                    "nextAttemptTime", "firstAttemptTime"}
PRODUCT = ("operator", "costmodel", "autoscaler", "runtime", "src/modalscale")
ISVC_CODEC = "src/modalscale/api/isvc_status.py"
ISVC_NOT_FOLDED: set[str] = set()
"""Modules that still read the status themselves (none; one added here must be folded in soon)."""
BUDGET_CODEC = "costmodel/budget/status.py"
BUDGET_NOT_FOLDED: set[str] = set()
"""Modules that still read the status themselves (none)."""
REPORTS = {"src/modalscale/kubectl/render.py"}
"""``kubectl modalscale``'s reports: JSON whose names follow the status's, built from the typed reads."""
NOT_STATUS = {"src/modalscale/api/annotations.py"}
"""Spells ``thresholdPercent`` of its own JSON (the reject annotation), not a status."""


def _product_files() -> list[Path]:
    out: list[Path] = []
    for root in PRODUCT:
        out += sorted((REPO / root).rglob("*.py"))
    return sorted({p.resolve() for p in out if ".venv" not in p.parts})


def status_key_uses(source: str, keys: set[str]) -> tuple[list[str], list[str]]:
    """``(reads, builds)`` of ``keys`` in ``source``: ``x[K]`` / ``x.get(K)`` / ``K in x``, and dict-literal keys."""
    reads, builds = [], []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Dict):
            builds += [f"{node.lineno}:{k.value}" for k in node.keys
                       if isinstance(k, ast.Constant) and k.value in keys]
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value in keys:
            reads.append(f"{node.lineno}:{node.slice.value}")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
              and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in keys):
            reads.append(f"{node.lineno}:{node.args[0].value}")
        elif (isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant) and node.left.value in keys
              and isinstance(node.ops[0], (ast.In, ast.NotIn))):
            reads.append(f"{node.lineno}:{node.left.value}")
    return reads, builds


def _spellers(keys: set[str]) -> dict[str, tuple[list[str], list[str]]]:
    out = {}
    for path in _product_files():
        reads, builds = status_key_uses(path.read_text(), keys)
        if reads or builds:
            out[str(path.relative_to(REPO.resolve()))] = (reads, builds)
    return out


def test_only_the_codec_reads_or_builds_an_inferenceservice_status() -> None:
    found = _spellers(ISVC_ONLY_KEYS)
    offenders = {f: rb for f, rb in found.items() if f != ISVC_CODEC and f not in ISVC_NOT_FOLDED | REPORTS}
    assert offenders == {}, f"parse or build status through modalscale.api.isvc_status: {offenders}"
    assert ISVC_CODEC in found
    assert ISVC_NOT_FOLDED <= set(found), "a module was folded in: remove it from ISVC_NOT_FOLDED"


def test_only_the_codec_reads_or_builds_a_budgetpolicy_status() -> None:
    found = set(_spellers(BUDGET_ONLY_KEYS)) - NOT_STATUS - REPORTS
    assert found - BUDGET_NOT_FOLDED == {BUDGET_CODEC}, "parse or build status through costmodel.budget.status"
    assert BUDGET_NOT_FOLDED <= found, "a module was folded in: remove it from BUDGET_NOT_FOLDED"


def test_the_reports_take_the_status_only_from_the_typed_reads() -> None:
    for report in REPORTS:
        source = (REPO / report).read_text()
        assert 'get("status") or {}' not in source, report  # an object's status, read by hand
        assert "read_isvc_status(" in source and "read_budget_status(" in source, report


def test_the_guard_sees_reads_and_builds() -> None:
    reads, builds = status_key_uses('s.get("desiredReplicas"); s["idleSince"]; {"scalingHistory": []}; '
                                    '"serviceScale" in s; s.get("replicas")', ISVC_ONLY_KEYS)
    assert [r.split(":")[1] for r in reads] == sorted(["desiredReplicas", "idleSince", "serviceScale"],
                                                      key=["desiredReplicas", "idleSince", "serviceScale"].index)
    assert [b.split(":")[1] for b in builds] == ["scalingHistory"]


# ------------------------------------------------------------------------------------------ BudgetPolicy
def _budget_json() -> dict[str, Any]:
    """A status the planner wrote after 30 evaluations (thresholds crossed, enforcement, the outbox), with the
    parts only other actions write added as the planner writes them."""
    stored = evaluated_policy(hours=30, forecast={"enabled": True})["status"]
    return {**stored, "tenantSpent": "1.250000000",
            "spotServices": [{"namespace": "ml", "name": "vc", "thresholdPercent": 50, "state": "OnDemandFallback",
                              "since": "2026-11-30T01:00:00Z", "dryRun": False, "message": "Spot pods pending",
                              "fallbackTime": "2026-11-30T01:10:00Z"}],
            "rejectedTenants": [{"namespace": "ml", "name": "vc", "tenant": "acme", "thresholdPercent": 80,
                                 "since": "2026-11-30T02:00:00Z", "until": "2026-12-01T00:00:00Z", "dryRun": True}],
            "spendAnomalies": [{"namespace": "ml", "name": "vc", "since": "2026-11-30T03:00:00Z",
                                "calmSince": "2026-11-30T03:05:00Z"}]}


def test_every_budget_field_round_trips_byte_for_byte() -> None:
    stored = _budget_json()
    assert {"thresholds", "enforcedServices", "pendingAlerts", "ledger", "forecast", "burnRatePerHour",
            "conditions"} <= {k for k, v in stored.items() if v}, "the fixture must exercise every part"
    status = read_budget_status({"status": stored}, PolicyRef("ml", "daily"))
    assert status.problem is None and status.outbox and status.alert_state.enforced and status.rejections
    written = budget_status_json(status)
    assert json.dumps(written, sort_keys=True) == json.dumps(stored, sort_keys=True)
    assert read_budget_status({"status": json.loads(json.dumps(written))}, PolicyRef("ml", "daily")) == status
    policy = {"status": stored}
    assert write_budget_status(status, policy) == {}  # a rerun writes nothing
    assert write_budget_status(status, policy, heartbeat_s=3600, now=T0 + dt.timedelta(days=1)) == {}


@pytest.mark.parametrize("obj", [None, {}, {"status": None}, {"status": []}, {"status": {}},
                                 {"status": {"spent": "1.00", "conditions": [{"type": "Ready", "status": "True"}]}},
                                 {"status": {"observedGeneration": 2, "periodStart": "2026-11-30T00:00:00Z"}}],
                         ids=["none", "no-status", "null", "not-a-map", "empty", "partial", "old"])
def test_old_and_partial_budget_statuses_read_without_a_problem(obj: Any) -> None:
    status = read_budget_status(obj)
    assert status.problem is None and status.ledger is not None and status.outbox == ()
    budget_status_json(status)


@pytest.mark.parametrize(("stored", "field"), [
    ({"thresholds": 5}, "status.thresholds"),
    ({"enforcedServices": 5}, "status.thresholds/enforcedServices"),
    ({"spotServices": 5}, "spotServices"),
    ({"conditions": 5}, "conditions"),
    ({"ledger": 5}, "status.ledger"),
    ({"pendingAlerts": {"a": 1}}, "status.pendingAlerts"),
], ids=["thresholds", "enforced", "spot", "conditions", "ledger", "outbox"])
def test_a_budget_field_of_the_wrong_shape_is_named_never_raised(stored: dict[str, Any], field: str) -> None:
    status = read_budget_status({"status": stored})
    assert status.problem is not None and field in status.problem, status.problem
    budget_status_json(status)


@pytest.mark.parametrize(("stored", "field"), [
    ({"ledger": {"services": [{"namespace": "a", "name": "b", "spent": "x"}]}}, "status.ledger.services[0].spent"),
    ({"thresholds": [{"percent": "50"}]}, "status.thresholds[0].percent"),
    ({"pendingAlerts": [{"kind": "Nope"}]}, "status.pendingAlerts[0]"),
    ({"spendAnomalies": [{"namespace": "ml"}]}, "status.spendAnomalies[0]"),
    ({"rejectedTenants": [{"namespace": "other", "name": "vc"}]}, "status.rejectedTenants[0]"),
    ({"tenantSpent": "much"}, "status.tenantSpent"),
], ids=["ledger", "thresholds", "outbox", "anomalies", "rejected", "tenant-spent"])
def test_a_malformed_budget_field_is_named_never_raised(stored: dict[str, Any], field: str) -> None:
    status = read_budget_status({"status": stored})
    assert status.problem is not None and field in status.problem
    if "rejectedTenants" in stored:
        assert status.held_namespaces == ("other",)  # caps and reject annotations there can still be lifted
