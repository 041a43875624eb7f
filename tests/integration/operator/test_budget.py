"""BudgetPolicy governance on the real control plane: spend accrues, alerts arrive once, caps scale down.

Everything is real: kube-apiserver + etcd + scheduler + KWOK fake nodes, the ``modalscale operator``
subprocess, and chat receivers on 127.0.0.1 that verify each platform's payload and signature.

Spend accrues in seconds without a test-only price: the services are priced by the packaged catalog and
request a realistic 8 x H100 replica (64 CPU, 512Gi, 8 nvidia-h100-80gb: about 84 USD/h, like an
a3-highgpu-8g), on a fake KWOK node of their own (no other test's pods fit its GPU label), against budgets of
a few dollars. The limits are chosen so that thresholds are seconds apart at a 1 s evaluation interval.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from modalscale.api.annotations import SpotSwitch, cap_annotation_key, spot_annotation_key
from modalscale.costmodel.catalog import ReplicaResources, load_catalog
from modalscale.costmodel.ledger import parse_time
from modalscale.devenv.kube import describe_workload, wait_for
from modalscale.devenv.receivers import ChatReceiver, Reply
from modalscale.operator.isvc.objects import TERMINATION_GRACE_S
from tests.integration.operator.isvc_helpers import wait_event

GROUP, VERSION = "modalscale.io", "v1alpha1"
REPO = Path(__file__).resolve().parents[3]
GPU_TYPE = "nvidia-h100-80gb"
RESOURCES = {"cpu": "64", "memory": "512Gi", "gpu": {"count": 8, "type": GPU_TYPE}}
PRICE_USD_PER_REPLICA_HOUR = load_catalog().price_replica(
    ReplicaResources.from_quantities("64", "512Gi", 8, GPU_TYPE), "OnDemand")
SIGNING = "SEC-test-signing-secret"


# ------------------------------------------------------------------------------------------------ helpers
def custom(api: Any) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api)


def make_isvc(name: str, replicas: int, max_replicas: int = 4) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService", "metadata": {"name": name},
            "spec": {"resources": RESOURCES, "gateway": {"enabled": False},  # the replicas only (the direct Service)
                     "scaling": {"mode": "Fixed", "replicas": replicas, "minReplicas": 1,
                                 "maxReplicas": max_replicas}}}


def make_policy(name: str, limit: str, thresholds: list[dict[str, Any]], notifications: list[dict[str, Any]],
                **spec: Any) -> dict[str, Any]:
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "BudgetPolicy", "metadata": {"name": name},
            "spec": {"period": "Daily", "limit": {"amount": limit, "currency": "USD"}, "thresholds": thresholds,
                     "forecast": {"enabled": False}, "evaluationIntervalSeconds": 1,
                     "notifications": notifications}}
    body["spec"].update(spec)
    return body


def make_secret(api: Any, ns: str, name: str, **data: str) -> None:
    client.CoreV1Api(api).create_namespaced_secret(ns, {
        "metadata": {"name": name}, "type": "Opaque",
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}})


def get_isvc(api: Any, ns: str, name: str) -> dict[str, Any]:
    return custom(api).get_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", name)


def get_policy(api: Any, ns: str, name: str) -> dict[str, Any]:
    return custom(api).get_namespaced_custom_object(GROUP, VERSION, ns, "budgetpolicies", name)


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), None)


def running_pods(api: Any, ns: str, name: str) -> int:
    pods = client.CoreV1Api(api).list_namespaced_pod(ns, label_selector=f"modalscale.io/inferenceservice={name}")
    return sum(1 for p in pods.items if p.spec.node_name and not p.metadata.deletion_timestamp
               and p.status.phase == "Running")


def start_isvc(api: Any, ns: str, name: str, replicas: int, max_replicas: int = 4) -> None:
    custom(api).create_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices",
                                                make_isvc(name, replicas, max_replicas))
    wait_for(lambda: running_pods(api, ns, name) == replicas, 90, f"{replicas} running pods of {ns}/{name}",
             explain=lambda: describe_workload(api, ns, f"modalscale.io/inferenceservice={name}"))


def thresholds_alerted(status: dict[str, Any]) -> list[int]:
    start = status.get("periodStart")
    return sorted(r["percent"] for r in status.get("thresholds") or []
                  if not r.get("forecast") and r.get("alertedPeriodStart") == start and r.get("lastAlertTime"))


def percents_in(titles: list[str]) -> list[int]:
    return sorted(int(p) for t in titles for p in re.findall(r"(\d+) %", t.split(" of its ")[0]))


def titles(receiver: ChatReceiver) -> list[str]:
    out = []
    for r in receiver.accepted:
        p = r.payload
        if receiver.kind == "Slack":
            out.append(next(b["text"]["text"] for b in p["blocks"] if b["type"] == "header"))
        elif receiver.kind == "DingTalk":
            out.append(p["markdown"]["title"])
        elif receiver.kind == "Webhook":
            out.append(p["commonAnnotations"]["summary"])
        else:
            out.append(json.dumps(p))
    return out


def policy_events(api: Any, ns: str, name: str) -> list[dict[str, Any]]:
    """events.k8s.io Events about the policy, as raw dicts (the typed client refuses kopf's core Events)."""
    resp = client.EventsV1Api(api).list_namespaced_event(ns, _preload_content=False)
    return [e for e in json.loads(resp.data)["items"]
            if (e.get("regarding") or {}).get("kind") == "BudgetPolicy" and e["regarding"].get("name") == name]


def wait_policy_events(api: Any, ns: str, name: str, *reasons: str, timeout_s: float = 30) -> list[dict[str, Any]]:
    """Wait until the Events about the policy hold each of ``reasons`` (one Event per time a reason is named: pass
    a reason twice to wait for two); returns every Event about it then.

    The operator posts its Events through a queue after the status patch (``apply.EventPoster``), so a test that saw
    the status waits here instead of reading the Events once (stop 52's CI read an isvc's Events before the poster did).
    """
    def all_posted() -> list[dict[str, Any]] | None:
        events = policy_events(api, ns, name)
        posted = Counter(str(e.get("reason")) for e in events)
        return events if all(posted[r] >= n for r, n in Counter(reasons).items()) else None

    return wait_for(all_posted, timeout_s, f"{', '.join(reasons)} Event(s) about {ns}/{name}")


def evaluations_after(api: Any, ns: str, name: str, when: dt.datetime, seconds: float) -> dict[str, Any]:
    """Wait until the policy's status was evaluated ``seconds`` after ``when``; returns that policy."""
    def check() -> dict[str, Any] | None:
        p = get_policy(api, ns, name)
        last = (p.get("status") or {}).get("lastEvaluationTime")
        return p if last and parse_time(last, "lastEvaluationTime") >= when + dt.timedelta(seconds=seconds) else None

    return wait_for(check, 60, f"evaluations of {ns}/{name} {seconds} s after {when.isoformat()}")


def ledger_spent(status: dict[str, Any]) -> Decimal:
    return sum((Decimal(s["spent"]) for s in status["ledger"]["services"]), Decimal(0))


class ReplicaTimeline:
    """Polls a Deployment's spec/status replicas every 0.1 s with UTC timestamps (to measure reaction times)."""

    def __init__(self, api: Any, ns: str, name: str) -> None:
        self.samples: list[tuple[dt.datetime, int | None, int | None]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._apps = client.AppsV1Api(api)
        self._thread = threading.Thread(target=self._run, args=(ns, name), daemon=True)
        self._thread.start()

    def _run(self, ns: str, name: str) -> None:
        while not self._stop.is_set():
            try:
                # Bounded: a read hanging on a stale pooled connection would stop the sampling silently.
                d = self._apps.read_namespaced_deployment(name, ns, _request_timeout=(5, 5))
            except Exception as exc:  # the sampler must outlive any one failed read
                # 404 until the operator has created the Deployment; transport errors: try again at the next tick.
                self.errors.append(repr(exc)[:200])
            else:
                self.samples.append((dt.datetime.now(dt.UTC), d.spec.replicas, d.status.replicas))
            self._stop.wait(0.1)

    def first(self, pred: Any) -> dt.datetime | None:
        return next((t for t, spec, st in self.samples if pred(spec, st)), None)

    def alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


# ------------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def h100_node(cluster: Any) -> list[str]:
    """A fake node with 64 H100s that only these tests' services select (by their GPU label)."""
    return cluster.ensure_gpu_nodes(1, gpus_per_node=64, gpu_type=GPU_TYPE, cpu="1024", memory="16Ti",
                                    prefix="kwok-budget-h100-")


@pytest.fixture
def slack() -> Iterator[ChatReceiver]:
    with ChatReceiver("Slack") as r:
        yield r


@pytest.fixture
def dingtalk() -> Iterator[ChatReceiver]:
    with ChatReceiver("DingTalk", secret=SIGNING) as r:
        yield r


# ------------------------------------------------------------------------------------------------ tests
def test_thresholds_alert_once_each_then_cap_and_scale_down_through_the_inferenceservice(
        api: Any, operator: Any, namespace: str, h100_node: list[str], slack: ChatReceiver,
        dingtalk: ChatReceiver) -> None:
    ns = namespace
    make_secret(api, ns, "slack-hook", url=slack.url)
    make_secret(api, ns, "ding-hook", url=dingtalk.url, secret=SIGNING)
    start_isvc(api, ns, "big", replicas=3)
    timeline = ReplicaTimeline(api, ns, "big")
    # 3 replicas x ~84 USD/h = ~0.07 USD/s. Enforcement looks 1 s + the replicas' 90 s grace period ahead (~6.4 USD
    # at 3 replicas), so the first evaluation already enforces 80 % (CapReplicas 2) and 100 % (ScaleDown to the floor
    # of 1), alerting both ahead in one message; then 1 replica (~0.023 USD/s) crosses 50 % (0.50) about 20 s in and
    # reaches 100 % (1.00) about 40 s in. Each threshold is alerted once, in 2 messages per room. 50 % stays out of
    # the first message as long as the 3 replicas ran under ~7 s before the first evaluation (spend 0 at it in both
    # runs of 7 Dec 2026). The limit was 1.50: 63 s from the policy to 100 %, 21 s longer with nothing more checked.
    limit = Decimal("1.00")
    custom(api).create_namespaced_custom_object(GROUP, VERSION, ns, "budgetpolicies", make_policy(
        "budget", str(limit),
        [{"percent": 50, "actions": ["Alert"]},
         {"percent": 80, "actions": ["Alert", "CapReplicas"], "capReplicas": 2},
         {"percent": 100, "actions": ["Alert", "ScaleDown"]}],
        [{"name": "team-slack", "type": "Slack", "secretRef": {"name": "slack-hook"}},
         {"name": "oncall-dingtalk", "type": "DingTalk",
          "secretRef": {"name": "ding-hook", "signingSecretKey": "secret"}}],
        enforcement={"floorReplicas": 1}))
    try:
        status = wait_for(lambda: (s := get_policy(api, ns, "budget").get("status") or {}).get("state") == "Exceeded"
                          and thresholds_alerted(s) == [50, 80, 100] and s, 120, "state Exceeded, all alerted")
        wait_for(lambda: running_pods(api, ns, "big") == 1, 60, "scaled down to the floor of 1 running pod")
        for room in (dingtalk, slack):
            wait_for(lambda: percents_in(titles(room)) == [50, 80, 100], 60, f"{room.kind}: 50, 80 and 100 % alerted")
        # A few more evaluations later nothing was re-sent.
        evaluations_after(api, ns, "budget", dt.datetime.now(dt.UTC), 3)
        wait_for(lambda: timeline.first(lambda spec, st: spec == 1), 60, "the timeline's sample of spec.replicas 1")
    finally:
        timeline.stop()

    for room in (slack, dingtalk):
        assert percents_in(titles(room)) == [50, 80, 100], titles(room)
        assert len(room.received) == len(room.accepted) == 2  # DingTalk: every signature verified
    status = get_policy(api, ns, "budget")["status"]
    assert status["state"] == "Exceeded" and Decimal(status["spent"]) >= limit
    assert ledger_spent(status) >= limit
    assert Decimal(status["remaining"]) == limit - Decimal(status["spent"])
    assert status["enforcedServices"] == [{"namespace": ns, "name": "big", "action": "ScaleDown", "maxReplicas": 1,
                                           "since": status["enforcedServices"][0]["since"], "dryRun": False,
                                           "message": "at most 1 replica(s)"}]
    (svc,) = status["ledger"]["services"]
    assert svc["replicas"] == 1 and Decimal(svc["costUSDPerHour"]) == PRICE_USD_PER_REPLICA_HOUR
    conds = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    # 30 burn-rate samples (30 s at evaluationIntervalSeconds 1) before the first spend-anomaly decision
    assert conds.pop("SpendAnomalyDetection") in {("False", "InsufficientHistory"), ("True", "Detecting")}
    assert conds == {"Ready": ("True", "Evaluated"), "BudgetExceeded": ("True", "BudgetExceeded"),
                     "AlertDelivered": ("True", "Delivered")}

    isvc = get_isvc(api, ns, "big")
    cap = json.loads(isvc["metadata"]["annotations"][cap_annotation_key(ns, "budget")])
    assert cap == {"maxReplicas": 1, "policy": f"{ns}/budget", "action": "ScaleDown"}
    limited = condition(isvc, "BudgetLimited")
    assert limited and limited["status"] == "True" and f"{ns}/budget" in limited["message"]
    assert client.AppsV1Api(api).read_namespaced_deployment("big", ns).spec.replicas == 1
    assert isvc["spec"]["scaling"]["replicas"] == 3  # enforcement never touches the spec

    reasons = [e.get("reason") for e in wait_policy_events(api, ns, "budget", "ThresholdCrossed", "ThresholdCrossed",
                                                                     "BudgetEnforced")]
    assert reasons.count("ThresholdCrossed") == 2 and "BudgetEnforced" in reasons
    leaked = [slack.url, dingtalk.url, SIGNING]
    texts = (json.dumps(status) + " ".join(e.get("note") or "" for e in policy_events(api, ns, "budget"))
             + operator.log())
    assert not [s for s in leaked if s in texts]

    crossed = {r["percent"]: parse_time(r["lastAlertTime"], "t") for r in status["thresholds"] if not r.get("forecast")}
    capped = timeline.first(lambda spec, st: spec is not None and spec <= 2)
    floored = timeline.first(lambda spec, st: spec == 1)
    assert capped and floored
    print(f"\nfigure: 80 % alerted -> Deployment spec.replicas <= 2 after "
          f"{(capped - crossed[80]).total_seconds():.2f} s;"
          f" 100 % alerted -> 1 after {(floored - crossed[100]).total_seconds():.2f} s "
          f"(evaluation interval 1 s, timeline sampled every 0.1 s)")


def test_a_hard_cap_is_enforced_one_evaluation_and_one_replica_stop_before_the_spend_reaches_it(
        api: Any, operator: Any, namespace: str, h100_node: list[str], slack: ChatReceiver) -> None:
    ns = namespace
    make_secret(api, ns, "slack-hook", url=slack.url)
    start_isvc(api, ns, "one", replicas=1, max_replicas=1)
    # One replica (~82.56 USD/h) spends ~0.459 USD per 20 s evaluation interval, and a replica scaled away may run
    # its 90 s grace period more (TERMINATION_GRACE_S): enforcement looks 110 s ahead, ~2.52 USD, past the 0.70
    # limit already at evaluation 1 (at creation, spend 0), so it scales to zero then. Looking one interval ahead
    # only, it waited for evaluation 2 (~20 s, ~0.459 USD), and a replica draining its 90 s would have run the spend
    # to ~2.5 USD; acting only once spend had passed the limit waited for evaluation 3 (~40 s, ~0.92 USD).
    limit = Decimal("0.70")
    timeline = ReplicaTimeline(api, ns, "one")
    custom(api).create_namespaced_custom_object(GROUP, VERSION, ns, "budgetpolicies", make_policy(
        "budget", str(limit), [{"percent": 100, "actions": ["Alert", "ScaleToZero"]}],
        [{"name": "team-slack", "type": "Slack", "secretRef": {"name": "slack-hook"}}],
        evaluationIntervalSeconds=20))
    try:
        status = wait_for(lambda: (s := get_policy(api, ns, "budget").get("status") or {}).get("enforcedServices")
                          and s, 90, "ScaleToZero in status")
        wait_for(lambda: running_pods(api, ns, "one") == 0, 60, "scaled to zero running pods")
        assert slack.wait_for(1, timeout_s=60, accepted_only=True)
        # The sampler reads every 0.1 s plus the read's own latency (long on a loaded machine): stopped as soon as
        # the pods were gone, it had once not read the Deployment since the scale-down (its last sample said 1).
        # Wait for its sample of the state this test already saw, then stop it.
        wait_for(lambda: timeline.first(lambda spec, st: spec == 0), 60, "the timeline's sample of spec.replicas 0")
    finally:
        timeline.stop()

    assert status["enforcedServices"] == [{"namespace": ns, "name": "one", "action": "ScaleToZero", "maxReplicas": 0,
                                           "since": status["enforcedServices"][0]["since"], "dryRun": False,
                                           "message": "at most 0 replica(s)"}]
    spent = Decimal(status["spent"])
    assert spent < limit and status["state"] == "Warning"
    (record,) = [r for r in status["thresholds"] if not r.get("forecast")]
    assert record["crossed"] is False and record["alertedPeriodStart"] == status["periodStart"]
    # From the enforcing evaluation on, the ledger charges the capped rate: nothing.
    (svc,) = status["ledger"]["services"]
    assert svc["replicas"] == 0 and Decimal(svc["costUSDPerHour"]) == 0
    conds = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert conds["BudgetExceeded"] == ("False", "ThresholdAhead")
    assert titles(slack) == [f"Budget {ns}/budget would cross 100 % of its daily limit within "
                             f"{20 + TERMINATION_GRACE_S} s at the current burn rate: enforcing now, "
                             f"ahead of the crossing"]
    assert client.AppsV1Api(api).read_namespaced_deployment("one", ns).spec.replicas == 0
    enforced_at = parse_time(status["enforcedServices"][0]["since"], "since")
    zeroed = timeline.first(lambda spec, st: spec == 0)
    assert zeroed, (f"the timeline saw no spec.replicas 0 ({len(timeline.samples)} samples, last "
                    f"{timeline.samples[-1:]}, errors {timeline.errors[-2:]}, sampler alive {timeline.alive()})")
    # Issue 12: the alert delivery wakes the policy for an evaluation while the pod may still be listed (not yet
    # marked for deletion). Every later evaluation must charge only what ran: the pod until it was gone, never
    # the interval after it. One evaluation interval after the enforcing one the budget is still under its limit,
    # not a false "Exceeded" (which charged the snapshot of one replica for the whole 20 s interval: +0.46 USD).
    # Status is written only when something moved, so a spec change (the forecast is off: no effect) makes the
    # evaluation after that interval write what it integrated.
    wait_for(lambda: dt.datetime.now(dt.UTC) >= enforced_at + dt.timedelta(seconds=22), 60,
             "one evaluation interval after the enforcing evaluation")
    custom(api).patch_namespaced_custom_object(GROUP, VERSION, ns, "budgetpolicies", "budget",
                                               {"spec": {"forecast": {"enabled": False, "alertAtPercent": 150}}})
    generation = get_policy(api, ns, "budget")["metadata"]["generation"]
    later = wait_for(lambda: (s := get_policy(api, ns, "budget").get("status") or {}).get("observedGeneration")
                     == generation and s, 60, "the evaluation after the spec change")
    (svc,) = later["ledger"]["services"]
    assert svc["replicas"] == 0 and Decimal(svc["costUSDPerHour"]) == 0
    assert later["state"] == "Warning" and Decimal(later["spent"]) < limit, later
    assert not [e for e in policy_events(api, ns, "budget") if e.get("reason") == "BudgetExceeded"]
    print(f"\nfigure: hard cap enforced at {spent} of {limit} USD ({spent / limit * 100:.1f} %), one 20 s interval "
          f"and a {TERMINATION_GRACE_S} s grace period ahead; Deployment spec.replicas 1->0 "
          f"{(zeroed - enforced_at).total_seconds():.2f} s after the enforcing evaluation (timeline sampled every "
          f"0.1 s); {later['spent']} USD spent at the evaluation "
          f"{(parse_time(later['lastEvaluationTime'], 't') - enforced_at).total_seconds():.0f} s later")


def test_an_evaluation_that_sees_a_pod_mid_scale_down_charges_only_what_ran(
        api: Any, operator: Any, namespace: str, h100_node: list[str], slack: ChatReceiver, cluster: Any) -> None:
    """Issue 12's race made certain: the ReplicaSet controller is held (SIGSTOP of kube-controller-manager) from
    before the enforcing evaluation until the evaluation woken by the alert delivery has run, so that evaluation
    lists the pod running and not yet marked for deletion. The ledger must charge that pod for the time it was
    seen and nothing after it is gone; charging the snapshot for the whole next 20 s interval (+0.46 USD) made
    the budget read "Exceeded" although the replica ran to under the limit."""
    ns = namespace
    make_secret(api, ns, "slack-hook", url=slack.url)
    start_isvc(api, ns, "one", replicas=1, max_replicas=1)
    limit = Decimal("0.70")  # as in the test above: ScaleToZero enforced ahead at the first evaluation
    controller_manager = cluster.pids()["kube-controller-manager"]
    assert controller_manager
    os.kill(controller_manager, signal.SIGSTOP)
    try:
        custom(api).create_namespaced_custom_object(GROUP, VERSION, ns, "budgetpolicies", make_policy(
            "budget", str(limit), [{"percent": 100, "actions": ["Alert", "ScaleToZero"]}],
            [{"name": "team-slack", "type": "Slack", "secretRef": {"name": "slack-hook"}}],
            evaluationIntervalSeconds=20))
        # The evaluation after the delivery records it: by then it has listed the pod, still running.
        woken = wait_for(lambda: (s := get_policy(api, ns, "budget").get("status") or {}).get("enforcedServices")
                         and (condition({"status": s}, "AlertDelivered") or {}).get("status") == "True" and s,
                         120, "enforced and the alert delivered (the woken evaluation ran)")
        assert running_pods(api, ns, "one") == 1  # the pod is still there: the controller is held
    finally:
        os.kill(controller_manager, signal.SIGCONT)
    assert slack.wait_for(1, timeout_s=60, accepted_only=True)
    wait_for(lambda: running_pods(api, ns, "one") == 0, 60, "scaled to zero running pods")
    enforced_at = parse_time(woken["enforcedServices"][0]["since"], "since")
    (svc,) = woken["ledger"]["services"]
    assert svc["replicas"] == 0, woken["ledger"]  # held at the cap, not the snapshot of the running pod
    wait_for(lambda: dt.datetime.now(dt.UTC) >= enforced_at + dt.timedelta(seconds=22), 60,
             "one evaluation interval after the enforcing evaluation")
    custom(api).patch_namespaced_custom_object(GROUP, VERSION, ns, "budgetpolicies", "budget",
                                               {"spec": {"forecast": {"enabled": False, "alertAtPercent": 150}}})
    generation = get_policy(api, ns, "budget")["metadata"]["generation"]
    later = wait_for(lambda: (s := get_policy(api, ns, "budget").get("status") or {}).get("observedGeneration")
                     == generation and s, 60, "the evaluation after the spec change")
    (svc,) = later["ledger"]["services"]
    assert svc["replicas"] == 0 and Decimal(svc["costUSDPerHour"]) == 0
    assert later["state"] == "Warning" and Decimal(later["spent"]) < limit, later
    assert not [e for e in policy_events(api, ns, "budget") if e.get("reason") == "BudgetExceeded"]
    print(f"\nfigure: pod held by a paused controller until the woken evaluation had listed it; spent "
          f"{woken['spent']} USD at that evaluation, {later['spent']} USD "
          f"{(parse_time(later['lastEvaluationTime'], 't') - enforced_at).total_seconds():.0f} s after the enforcing "
          f"one (limit {limit} USD)")


def test_the_status_schema_accepts_a_spend_anomaly_in_the_outbox(api: Any, operator: Any, namespace: str) -> None:
    """The planner's SpendAnomaly outbox entry, written as the operator writes status, passes the CRD schema."""
    from modalscale.costmodel.anomaly import BurnSample
    from modalscale.costmodel.catalog import load_catalog as catalog
    from modalscale.operator.budget.plan import BudgetObserved, plan_policy

    ns = namespace
    body = make_policy("budget", "1000", [{"percent": 100, "actions": ["Alert"]}],
                       [{"name": "room", "type": "Slack", "secretRef": {"name": "absent"}}],
                       evaluationIntervalSeconds=3600)
    created = custom(api).create_namespaced_custom_object(GROUP, VERSION, ns, "budgetpolicies", body)
    isvc = {**make_isvc("vc", 2), "metadata": {"name": "vc", "namespace": ns}}
    pods = [{"metadata": {"name": f"vc-{i}", "labels": {"modalscale.io/inferenceservice": "vc"}},
             "spec": {"nodeName": "n"}, "status": {"phase": "Running"}} for i in range(4)]
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    price = float(PRICE_USD_PER_REPLICA_HOUR)  # 40 min at one replica, now four
    history = {(ns, "vc"): [BurnSample(now - dt.timedelta(minutes=40 - i), price, 1, price) for i in range(40)]}
    plan = plan_policy(created, BudgetObserved([isvc], {ns: pods}), catalog(), [], now, history=history)
    assert [a.kind.value for a in plan.alerts] == ["SpendAnomaly"]
    written = custom(api).patch_namespaced_custom_object_status(
        GROUP, VERSION, ns, "budgetpolicies", "budget", {"status": plan.status_patch},
        _content_type="application/merge-patch+json")
    (entry,) = written["status"]["pendingAlerts"]
    assert entry["kind"] == "SpendAnomaly" and entry["title"] == f"Budget {ns}/budget: spend anomaly in {ns}/vc"
    assert any(f["label"] == "Anomaly" and "driver: replicas 1 -> 4" in f["value"] for f in entry["facts"])


def test_webhook_answering_429_then_200_gets_the_alert_exactly_once(api: Any, operator: Any, namespace: str,
                                                                    h100_node: list[str]) -> None:
    ns = namespace
    with ChatReceiver("Webhook", secret=SIGNING) as hook:
        hook.script(Reply(status=429, body="slow down", headers={"Retry-After": "1"}))
        make_secret(api, ns, "hook", url=hook.url, hmac=SIGNING)
        start_isvc(api, ns, "one", replicas=1)
        custom(api).create_namespaced_custom_object(GROUP, VERSION, ns, "budgetpolicies", make_policy(
            "budget", "0.20", [{"percent": 50}],
            [{"name": "alertmanager", "type": "Webhook", "secretRef": {"name": "hook", "signingSecretKey": "hmac"}}]))
        wait_for(lambda: (c := condition(get_policy(api, ns, "budget"), "AlertDelivered")) and c["status"] == "True",
                 90, "AlertDelivered=True")
        evaluations_after(api, ns, "budget", dt.datetime.now(dt.UTC), 3)
        assert [r.status for r in hook.received] == [429, 200]
        (msg,) = hook.accepted
        assert msg.payload["commonLabels"]["threshold_percent"] == "50"
    assert thresholds_alerted(get_policy(api, ns, "budget")["status"]) == [50]


def test_missing_secret_sets_the_condition_and_other_receivers_still_get_the_alert(
        api: Any, operator: Any, namespace: str, h100_node: list[str], slack: ChatReceiver) -> None:
    ns = namespace
    make_secret(api, ns, "slack-hook", url=slack.url)
    start_isvc(api, ns, "one", replicas=1)
    custom(api).create_namespaced_custom_object(GROUP, VERSION, ns, "budgetpolicies", make_policy(
        "budget", "0.20", [{"percent": 50}],
        [{"name": "team-slack", "type": "Slack", "secretRef": {"name": "slack-hook"}},
         {"name": "finops-feishu", "type": "Feishu", "secretRef": {"name": "no-such-secret",
                                                                  "signingSecretKey": "secret"}}]))
    c = wait_for(lambda: (c := condition(get_policy(api, ns, "budget"), "AlertDelivered")) and c["status"] == "False"
                 and c, 90, "AlertDelivered=False")
    assert c["reason"] == "SecretNotFound" and f"{ns}/no-such-secret" in c["message"]
    assert slack.wait_for(1, timeout_s=30, accepted_only=True)
    assert percents_in(titles(slack)) == [50]
    wait_for(lambda: any(e.get("reason") == "SecretNotFound" and e.get("type") == "Warning"
                         for e in policy_events(api, ns, "budget")), 30, "a SecretNotFound Event")
    # Still alive and still evaluating; the alert was not sent again to anyone.
    evaluations_after(api, ns, "budget", dt.datetime.now(dt.UTC), 2)
    assert operator.proc.poll() is None
    assert len(slack.received) == 1
    assert (condition(get_policy(api, ns, "budget"), "Ready") or {}).get("status") == "True"


def test_an_alert_that_fails_past_the_senders_retries_is_delivered_once_after_the_receiver_recovers(
        api: Any, operator: Any, namespace: str, h100_node: list[str]) -> None:
    ns = namespace
    with ChatReceiver("Slack") as slack:
        slack.outage()  # 503 to every request, however many retries come
        make_secret(api, ns, "slack-hook", url=slack.url)
        start_isvc(api, ns, "one", replicas=1)
        # ~84 USD/h = ~0.023 USD/s: 50 % of 0.20 after ~4 s. The sender's round is 6 attempts over ~30 s.
        custom(api).create_namespaced_custom_object(GROUP, VERSION, ns, "budgetpolicies", make_policy(
            "budget", "0.20", [{"percent": 50}],
            [{"name": "team-slack", "type": "Slack", "secretRef": {"name": "slack-hook"}}]))
        failing = wait_for(lambda: (p := get_policy(api, ns, "budget")) and (c := condition(p, "AlertDelivered"))
                           and c["status"] == "False" and p, 120, "AlertDelivered=False after a failed round")
        status = failing["status"]
        (entry,) = status["pendingAlerts"]
        assert (entry["notification"], entry["kind"], entry["attempts"], entry["lastReason"]) == (
            "team-slack", "ThresholdCrossed", 1, "ServerError")
        assert entry["thresholdsPercent"] == [50] and thresholds_alerted(status) == [50]
        # Retried 30 s after the evaluation that recorded the failed round (its time is lastEvaluationTime or
        # later, and that round ended after the first attempt).
        retry_at = parse_time(entry["nextAttemptTime"], "nextAttemptTime")
        assert retry_at - parse_time(entry["firstAttemptTime"], "firstAttemptTime") >= dt.timedelta(seconds=30)
        assert [r.status for r in slack.received] == [503] * 6 and slack.accepted == []
        c = condition(failing, "AlertDelivered")
        assert c is not None and c["reason"] == "ServerError" and "team-slack" in c["message"]
        slack.recover()
        done = wait_for(lambda: (p := get_policy(api, ns, "budget")) and (c := condition(p, "AlertDelivered"))
                        and c["status"] == "True" and p, 120, "AlertDelivered=True after recovery")
        assert not done["status"].get("pendingAlerts")
        evaluations_after(api, ns, "budget", dt.datetime.now(dt.UTC), 3)
        statuses = [r.status for r in slack.received]
        assert statuses[-1] == 200 and set(statuses[:-1]) == {503}  # one delivery, after the failed rounds
        (msg,) = slack.accepted
        assert msg.received_at >= retry_at.timestamp() - 1  # not before the backoff (1 s: clock rounding)
        assert percents_in(titles(slack)) == [50]
        reasons = [(e.get("type"), e.get("reason")) for e in wait_policy_events(api, ns, "budget", "ServerError",
                                                                                "Delivered")]
        assert ("Warning", "ServerError") in reasons and ("Normal", "Delivered") in reasons
        assert slack.url not in json.dumps(get_policy(api, ns, "budget"))


def test_a_hanging_webhook_blocks_neither_evaluation_nor_deletion(api: Any, operator: Any, namespace: str,
                                                                   h100_node: list[str]) -> None:
    ns = namespace
    with ChatReceiver("Slack") as hanging:
        # Every attempt (the first and all retries) is held open for 120 s: this delivery can never finish.
        hanging.script(*[Reply(delay_s=120)] * 8)
        make_secret(api, ns, "slack-hook", url=hanging.url)
        start_isvc(api, ns, "one", replicas=2)
        custom(api).create_namespaced_custom_object(GROUP, VERSION, ns, "budgetpolicies", make_policy(
            "budget", "0.20", [{"percent": 10, "actions": ["Alert", "CapReplicas"], "capReplicas": 1}],
            [{"name": "team-slack", "type": "Slack", "secretRef": {"name": "slack-hook"}}]))
        assert hanging.wait_for_arrivals(1, timeout_s=60)
        # Evaluation goes on while the request hangs: the cap is applied and spend (1 replica) keeps being counted.
        evaluations_after(api, ns, "budget", dt.datetime.now(dt.UTC), 2)
        key = cap_annotation_key(ns, "budget")
        assert key in (get_isvc(api, ns, "one")["metadata"].get("annotations") or {})
        custom(api).delete_namespaced_custom_object(GROUP, VERSION, ns, "budgetpolicies", "budget")

        def gone() -> bool:
            try:
                get_policy(api, ns, "budget")
            except client.exceptions.ApiException as exc:
                return exc.status == 404
            return False

        wait_for(gone, 40, "the policy deleted (finalizer removed)")
        assert hanging.received == []  # no attempt was ever answered: deletion did not wait for delivery
        wait_for(lambda: key not in (get_isvc(api, ns, "one")["metadata"].get("annotations") or {}), 30,
                 "the cap lifted with the policy")
        assert operator.proc.poll() is None


def test_dry_run_reports_enforcement_without_annotating_or_scaling(api: Any, operator: Any, namespace: str,
                                                                  h100_node: list[str]) -> None:
    ns = namespace
    start_isvc(api, ns, "two", replicas=2)
    custom(api).create_namespaced_custom_object(GROUP, VERSION, ns, "budgetpolicies", make_policy(
        "budget", "0.20", [{"percent": 10, "actions": ["CapReplicas"], "capReplicas": 1},
                           {"percent": 50, "actions": ["ScaleToZero"]}], [],
        enforcement={"dryRun": True}))
    status = wait_for(lambda: (s := get_policy(api, ns, "budget").get("status") or {}).get("enforcedServices")
                      and s["enforcedServices"][0]["action"] == "ScaleToZero" and s, 90, "ScaleToZero reported")
    assert status["enforcedServices"] == [{"namespace": ns, "name": "two", "action": "ScaleToZero", "maxReplicas": 0,
                                           "since": status["enforcedServices"][0]["since"], "dryRun": True,
                                           "message": "at most 0 replica(s)"}]
    evaluations_after(api, ns, "budget", dt.datetime.now(dt.UTC), 3)
    isvc = get_isvc(api, ns, "two")
    assert not [k for k in isvc["metadata"].get("annotations") or {} if k.startswith("budget.modalscale.io/")]
    assert (condition(isvc, "BudgetLimited") or {}).get("status") == "False"
    assert client.AppsV1Api(api).read_namespaced_deployment("two", ns).spec.replicas == 2
    assert running_pods(api, ns, "two") == 2
    reasons = [(e.get("reason"), e.get("note")) for e in wait_policy_events(api, ns, "budget", "BudgetEnforced")]
    assert any(r == "BudgetEnforced" and "dry run" in (n or "") for r, n in reasons)


def test_deleting_the_policy_lifts_its_cap(api: Any, operator: Any, namespace: str, h100_node: list[str]) -> None:
    ns = namespace
    start_isvc(api, ns, "two", replicas=2)
    custom(api).create_namespaced_custom_object(GROUP, VERSION, ns, "budgetpolicies", make_policy(
        "budget", "0.10", [{"percent": 10, "actions": ["CapReplicas"], "capReplicas": 1}], []))
    wait_for(lambda: running_pods(api, ns, "two") == 1, 60, "capped to 1 running pod")
    custom(api).delete_namespaced_custom_object(GROUP, VERSION, ns, "budgetpolicies", "budget")
    wait_for(lambda: running_pods(api, ns, "two") == 2, 60, "back to 2 running pods after the policy was deleted")
    assert cap_annotation_key(ns, "budget") not in (get_isvc(api, ns, "two")["metadata"].get("annotations") or {})


def test_an_unreadable_cap_annotation_holds_the_count_until_it_is_deleted(api: Any, operator: Any, namespace: str,
                                                                         h100_node: list[str]) -> None:
    """A cap annotation that does not decode (hand-edited, or written by another version) is neither exceeded nor
    a reason to scale down: the Deployment holds its count and ``BudgetLimited`` names the key; deleted, the spec's
    count applies. Before, it was skipped and the service scaled to the spec's 3 at once (fail open)."""
    ns, key = namespace, "budget.modalscale.io/cap-0000000000"
    start_isvc(api, ns, "two", replicas=2)
    custom(api).patch_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", "two", {"metadata": {
        "annotations": {key: '{"maxReplicas": 1, "policy": "gone/budget"}'}}})  # no "action": does not decode

    def held() -> dict[str, Any] | None:
        c = condition(get_isvc(api, ns, "two"), "BudgetLimited")
        return c if c is not None and c["reason"] == "BudgetCapUnreadable" else None

    c = wait_for(held, 60, "BudgetLimited=True BudgetCapUnreadable")
    assert c["status"] == "True" and key in c["message"] and "holds (now 2)" in c["message"]
    custom(api).patch_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", "two",
                                               {"spec": {"scaling": {"replicas": 3}}})
    wait_for(lambda: (get_isvc(api, ns, "two").get("status") or {}).get("observedGeneration") == 2, 60,
             "the new generation observed")
    dep = client.AppsV1Api(api).read_namespaced_deployment("two", ns)
    assert dep.spec.replicas == 2 and running_pods(api, ns, "two") == 2
    custom(api).patch_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", "two",
                                               {"metadata": {"annotations": {key: None}}})
    wait_for(lambda: running_pods(api, ns, "two") == 3, 90, "3 running pods once the annotation is deleted")
    wait_for(lambda: (lambda c: c is not None and (c["status"], c["reason"]) == ("False", "WithinBudget"))(
        condition(get_isvc(api, ns, "two"), "BudgetLimited")), 30, "BudgetLimited=False WithinBudget")


def test_an_unreadable_spot_annotation_moves_no_pod_until_it_is_deleted(api: Any, operator: Any, namespace: str,
                                                                        h100_node: list[str]) -> None:
    """A Spot annotation that does not decode is no reason to roll the replicas off Spot: the Deployment's pod
    template (and so its generation) holds and ``BudgetLimited`` names the key; deleted, the Spot placement goes.
    Before, it was skipped and the next reconcile rolled every replica onto on-demand nodes."""
    ns, key = namespace, spot_annotation_key("gone", "budget")
    isvc = make_isvc("one", 1)
    isvc["metadata"]["annotations"] = {key: SpotSwitch("gone/budget", 50).encode()}
    custom(api).create_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", isvc)
    apps = client.AppsV1Api(api)

    def spot_selector() -> str | None:
        try:
            dep = apps.read_namespaced_deployment("one", ns)
        except client.ApiException as exc:
            if exc.status == 404:
                return "(no Deployment yet)"
            raise
        return (dep.spec.template.spec.node_selector or {}).get("karpenter.sh/capacity-type")

    wait_for(lambda: spot_selector() == "spot", 60, "the Deployment placed on Spot")
    generation = apps.read_namespaced_deployment("one", ns).metadata.generation
    custom(api).patch_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", "one", {"metadata": {
        "annotations": {key: '{"policy": "gone/budget", "capacityType": "Spot"}'}}})  # no thresholdPercent

    def held() -> dict[str, Any] | None:
        c = condition(get_isvc(api, ns, "one"), "BudgetLimited")
        return c if c is not None and c["reason"] == "BudgetAnnotationUnreadable" else None

    c = wait_for(held, 60, "BudgetLimited=True BudgetAnnotationUnreadable")
    assert c["status"] == "True" and key in c["message"] and "stay on Spot capacity" in c["message"], c
    wait_event(api, ns, "one", "BudgetAnnotationUnreadable")  # posted through the queue after the status (stop 52's CI)
    assert any(e.reason == "BudgetAnnotationUnreadable" and e.type == "Warning" for e in client.CoreV1Api(
        api).list_namespaced_event(ns, field_selector="involvedObject.name=one").items)
    dep = apps.read_namespaced_deployment("one", ns)
    assert spot_selector() == "spot" and dep.metadata.generation == generation, dep.spec.template.spec
    custom(api).patch_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", "one",
                                               {"metadata": {"annotations": {key: None}}})
    wait_for(lambda: spot_selector() is None, 60, "the Spot placement taken off once the annotation is deleted")
    # the status patch follows the Deployment's in the same reconcile (ci91 read the condition in between)
    wait_for(lambda: (lambda c: c is not None and (c["status"], c["reason"]) == ("False", "WithinBudget"))(
        condition(get_isvc(api, ns, "one"), "BudgetLimited")), 30, "BudgetLimited=False WithinBudget")


def test_cost_export_writes_focus_rows_that_add_up_to_the_ledger(api: Any, operator: Any, namespace: str,
                                                                 h100_node: list[str], cluster: Any,
                                                                 tmp_path: Path) -> None:
    import csv

    ns = namespace
    start_isvc(api, ns, "one", replicas=1)
    custom(api).create_namespaced_custom_object(GROUP, VERSION, ns, "budgetpolicies", make_policy(
        "budget", "100", [{"percent": 50}], []))
    wait_for(lambda: Decimal(((get_policy(api, ns, "budget").get("status") or {}).get("spent")) or "0") > 0, 60,
             "some spend")
    out = tmp_path / "focus.csv"
    proc = subprocess.run([sys.executable, "-m", "modalscale.cli", "cost", "export", "--namespace", ns,
                           "--output", str(out), "--kubeconfig", str(cluster.kubeconfig)],
                          capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(out.open(newline="")))
    status = get_policy(api, ns, "budget")["status"]  # read after: spend only grows, so the CSV is <= it
    (row,) = rows
    assert (row["SubAccountId"], row["ResourceName"], row["BillingCurrency"]) == (ns, "one", "USD")
    assert Decimal("0") < Decimal(row["BilledCost"]) <= ledger_spent(status)
    assert row["BillingPeriodStart"] == status["periodStart"]
    assert json.loads(row["Tags"])["modalscale.io/budgetpolicy"] == f"{ns}/budget"


# ------------------------------------------------------------------------------------------------ restart
@pytest.fixture(scope="module")
def own_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A control plane of its own: the restart test kills its operator, which must not be the session's."""
    from modalscale.devenv.cluster import running_cluster

    with running_cluster(tmp_path_factory.mktemp("budget-restart-cluster"), nodes=0, crd_dir=REPO / "crds") as c:
        c.ensure_gpu_nodes(1, gpus_per_node=16, gpu_type=GPU_TYPE, cpu="256", memory="4Ti", prefix="kwok-h100-")
        yield c


def test_restart_mid_period_resends_nothing_and_continues_the_ledger(own_cluster: Any, tmp_path: Path,
                                                                     slack: ChatReceiver) -> None:
    from modalscale.devenv.operator_process import OperatorProcess

    api = own_cluster.api_client()
    ns = "default"
    first = OperatorProcess(own_cluster.kubeconfig, tmp_path / "first.log")
    second = None
    try:
        first.wait_healthy()
        make_secret(api, ns, "slack-hook", url=slack.url)
        start_isvc(api, ns, "one", replicas=1)
        # ~84 USD/h = ~0.0235 USD/s: 10 % of 1.00 after ~4 s, 50 % after ~21 s (before or after the restart,
        # depending on how long the new operator waits for the killed peer's record to expire, up to 30 s).
        custom(api).create_namespaced_custom_object(GROUP, VERSION, ns, "budgetpolicies", make_policy(
            "budget", "1.00", [{"percent": 10}, {"percent": 50}],
            [{"name": "team-slack", "type": "Slack", "secretRef": {"name": "slack-hook"}}]))
        assert slack.wait_for(1, timeout_s=60, accepted_only=True)
        # Delivery is at least once: the alert leaves status.pendingAlerts at the evaluation after Slack accepted
        # it, and a kill before that write sends it once more. Killed after it, nothing is sent again.
        before = wait_for(lambda: thresholds_alerted(s := get_policy(api, ns, "budget")["status"]) == [10]
                          and not s.get("pendingAlerts") and s, 30, "10 % recorded and delivered")
        first.kill(signal.SIGKILL)  # no graceful shutdown: whatever was in flight is lost
        killed_at = dt.datetime.now(dt.UTC)
        second = OperatorProcess(own_cluster.kubeconfig, tmp_path / "second.log")
        second.wait_healthy()
        after = evaluations_after(api, ns, "budget", killed_at, 2)["status"]
        resumed_s = (parse_time(after["lastEvaluationTime"], "t") - killed_at).total_seconds()

        # Spend continues from the ledger: the second operator integrated exactly the time since the last
        # observation the first one stored (its downtime included), at the same rate: not reset, not doubled.
        (s1,), (s2,) = before["ledger"]["services"], after["ledger"]["services"]
        assert s1["costUSDPerHour"] == s2["costUSDPerHour"] and s1["replicas"] == s2["replicas"] == 1
        rate = Decimal(s1["costUSDPerHour"])
        t1 = parse_time(before["ledger"]["observedTime"], "t1")
        t2 = parse_time(after["ledger"]["observedTime"], "t2")
        seconds = Decimal(int((t2 - t1).total_seconds()))
        expected = rate * seconds / Decimal(3600)
        grown = Decimal(s2["spent"]) - Decimal(s1["spent"])
        assert seconds >= 2 and grown > 0
        assert abs(grown - expected) <= Decimal("1e-9") * seconds, (grown, expected)
        assert after["periodStart"] == before["periodStart"]
        # The 10 % alert was not sent again; 50 % alerts exactly once, from the second operator.
        final = wait_for(lambda: thresholds_alerted(s := get_policy(api, ns, "budget")["status"]) == [10, 50] and s,
                         90, "50 % recorded by the second operator")
        assert slack.wait_for(2, timeout_s=60, accepted_only=True)
        evaluations_after(api, ns, "budget", parse_time(final["lastEvaluationTime"], "t"), 2)
        assert percents_in(titles(slack)) == [10, 50] and len(slack.received) == 2
        assert "Evaluated BudgetPolicy" in second.log()
        print(f"\nfigure: operator SIGKILLed, the new one evaluated again {resumed_s:.1f} s later (peering); "
              f"ledger grew {grown} USD over {seconds} s "
              f"(expected {expected.quantize(Decimal('1e-9'))} at {rate} USD/h)")
    finally:
        first.stop()
        if second is not None:
            second.stop()
        api.close()


def test_an_alert_pending_when_the_operator_is_killed_is_delivered_once_by_the_next_operator(
        own_cluster: Any, tmp_path: Path, slack: ChatReceiver) -> None:
    from modalscale.devenv.operator_process import OperatorProcess

    api = own_cluster.api_client()
    ns = "outbox"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": ns}})
    first = OperatorProcess(own_cluster.kubeconfig, tmp_path / "first.log")
    second = None
    try:
        first.wait_healthy()
        slack.outage()
        make_secret(api, ns, "slack-hook", url=slack.url)
        start_isvc(api, ns, "one", replicas=1)
        custom(api).create_namespaced_custom_object(GROUP, VERSION, ns, "budgetpolicies", make_policy(
            "budget", "1.00", [{"percent": 10}],
            [{"name": "team-slack", "type": "Slack", "secretRef": {"name": "slack-hook"}}]))
        pending = wait_for(lambda: [e for e in (get_policy(api, ns, "budget").get("status") or {}).get(
            "pendingAlerts") or [] if e["attempts"] >= 1], 120, "a pending alert after a failed round")
        assert pending[0]["lastReason"] == "ServerError" and slack.accepted == []
        first.kill(signal.SIGKILL)
        failed_requests = len(slack.received)
        slack.recover()
        killed_at = dt.datetime.now(dt.UTC)
        second = OperatorProcess(own_cluster.kubeconfig, tmp_path / "second.log")
        second.wait_healthy()
        done = wait_for(lambda: (p := get_policy(api, ns, "budget")) and (c := condition(p, "AlertDelivered"))
                        and c["status"] == "True" and p, 150, "AlertDelivered=True from the second operator")
        assert not done["status"].get("pendingAlerts")
        evaluations_after(api, ns, "budget", parse_time(done["status"]["lastEvaluationTime"], "t"), 2)
        (msg,) = slack.accepted
        assert len(slack.received) == failed_requests + 1 and msg.received_at >= killed_at.timestamp()
        assert percents_in(titles(slack)) == [10]
        assert thresholds_alerted(done["status"]) == [10]
    finally:
        first.stop()
        if second is not None:
            second.stop()
        api.close()
