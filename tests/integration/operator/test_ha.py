"""High availability and crash safety, on a control plane of their own (so no other operator interferes)."""

from __future__ import annotations

import datetime as dt
import json
import signal
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from modalscale.costmodel.catalog import ReplicaResources, load_catalog
from modalscale.costmodel.ledger import parse_time
from modalscale.costmodel.outbox import POSSIBLE_DUPLICATE_FACT
from modalscale.devenv.cluster import LocalCluster, fake_node_placement, running_cluster
from modalscale.devenv.kube import wait_for
from modalscale.devenv.operator_process import OperatorProcess
from modalscale.devenv.receivers import ChatReceiver, Reply
from tests.integration.operator.isvc_helpers import GROUP, PLURAL, VERSION, condition, create, make_isvc
from tests.integration.operator.meter import bind_to_start_usd, bound_at, pod_lifetime_usd, pods_usd
from tests.integration.operator.test_budget import (
    GPU_TYPE,
    PRICE_USD_PER_REPLICA_HOUR,
    get_policy,
    ledger_spent,
    make_policy,
    make_secret,
    percents_in,
    running_pods,
    start_isvc,
    thresholds_alerted,
    titles,
)

REPO = Path(__file__).resolve().parents[3]
SERVICE_LABEL = "modalscale.io/inferenceservice"


@pytest.fixture(scope="module")
def ha_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path_factory.mktemp("ha-cluster"), crd_dir=REPO / "crds") as c:
        yield c


@pytest.fixture
def ha_api(ha_cluster: LocalCluster) -> Iterator[Any]:
    api = ha_cluster.api_client()
    yield api
    api.close()


def _ready(api: Any, ns: str, name: str) -> bool:
    try:
        obj = client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
    except client.exceptions.ApiException:
        return False
    c = condition(obj, "Ready")
    return bool(c and c["status"] == "True")


def _of(pods: list[Any], service: str) -> list[Any]:
    """The pods of InferenceService ``service`` among ``pods``."""
    return [p for p in pods if (p.metadata.labels or {}).get(SERVICE_LABEL) == service]


def _wrote(op: OperatorProcess, name: str) -> bool:
    return f"namespace=default name={name}\n" in op.log() or f"namespace=default name={name} " in op.log()


@pytest.fixture(scope="module")
def ha_h100_node(ha_cluster: LocalCluster) -> list[str]:
    """A fake node with 64 H100s for the budget tests' ~84 USD/h replicas (``test_budget``'s service)."""
    return ha_cluster.ensure_gpu_nodes(1, gpus_per_node=64, gpu_type=GPU_TYPE, cpu="1024", memory="16Ti",
                                       prefix="kwok-ha-h100-")


def test_two_operators_only_one_acts_and_the_other_takes_over(ha_cluster: LocalCluster, ha_api: Any,
                                                              tmp_path: Path) -> None:
    a = OperatorProcess(ha_cluster.kubeconfig, tmp_path / "a.log")
    b = OperatorProcess(ha_cluster.kubeconfig, tmp_path / "b.log")
    try:
        a.wait_healthy()
        b.wait_healthy()
        # kopf peering: both start paused; only the replica that sees no live peer of higher priority
        # resumes (a lower one that had resumed first logs that it pauses in favour of the higher one).
        wait_for(lambda: [a.peering_active(), b.peering_active()].count(True) == 1, 60,
                 "exactly one active operator")
        time.sleep(3)
        assert [a.peering_active(), b.peering_active()].count(True) == 1
        create(ha_api, "default", make_isvc("ha-one"))
        wait_for(lambda: _ready(ha_api, "default", "ha-one"), 60, "ha-one Ready")
        acted = [op for op in (a, b) if _wrote(op, "ha-one")]
        assert len(acted) == 1, "exactly one operator must act"
        active, standby = acted[0], (b if acted[0] is a else a)

        active.kill(signal.SIGKILL)
        create(ha_api, "default", make_isvc("ha-two"))
        # The standby resumes once the dead peer's record expires (peering lifetime 30 s).
        wait_for(lambda: _ready(ha_api, "default", "ha-two"), 120, "ha-two Ready after failover")
        assert _wrote(standby, "ha-two")
        deps = client.AppsV1Api(ha_api).list_namespaced_deployment("default").items
        assert sorted(d.metadata.name for d in deps) == ["ha-one", "ha-two"]
    finally:
        a.stop()
        b.stop()


def test_operator_killed_mid_reconcile_converges_without_duplicates(ha_cluster: LocalCluster, ha_api: Any,
                                                                   tmp_path: Path) -> None:
    """Issue 21, chaos scenario 3 (the reconcile half, with the budget beside it; KWOK pods): one operator
    reconciling 8 new services and evaluating a BudgetPolicy over their namespace every second is SIGKILLed as
    soon as the first child exists; a new one takes over. Every service converges with one of each child and
    nothing rewritten, the threshold crossed afterwards is alerted exactly once, and the ledger equals an
    independent meter of the pods' own runs x the catalog's price (the kill's gap charged), above it by at most the
    pods' binding-to-start (the ledger's documented upper bound)."""
    core, apps = client.CoreV1Api(ha_api), client.AppsV1Api(ha_api)
    core.create_namespace({"metadata": {"name": "crash"}})
    first = OperatorProcess(ha_cluster.kubeconfig, tmp_path / "first.log")
    second = None
    names = [f"crash-{i}" for i in range(8)]
    resources = {"cpu": "500m", "memory": "1Gi"}
    # 25 % of the limit after ~30 s of all 16 replicas (8 services x 2), each priced as its requests.
    replica_usd_per_hour = load_catalog().price_replica(ReplicaResources.from_quantities("500m", "1Gi"), "OnDemand")
    limit = replica_usd_per_hour * 2 * len(names) * 30 / 3600 / Decimal("0.25")
    with ChatReceiver("Slack") as slack:
        try:
            first.wait_healthy()
            make_secret(ha_api, "crash", "slack-hook", url=slack.url)
            client.CustomObjectsApi(ha_api).create_namespaced_custom_object(
                GROUP, VERSION, "crash", "budgetpolicies", make_policy(
                    "budget", f"{limit:.6f}", [{"percent": 25, "actions": ["Alert"]}],
                    [{"name": "team-slack", "type": "Slack", "secretRef": {"name": "slack-hook"}}]))
            wait_for(lambda: (get_policy(ha_api, "crash", "budget").get("status") or {}).get("lastEvaluationTime"),
                     30, "the policy evaluated by the first operator")
            for n in names:  # CPU-only, so that GPU capacity left by the other test cannot matter; placed on the
                # fake nodes on purpose (they take only GPU pods otherwise)
                create(ha_api, "crash", make_isvc(n, resources=resources, placement=fake_node_placement()))
            # Kill as soon as the first child exists: the other reconciles are in flight or not started, and the
            # policy's evaluations (every second) go on until the kill.
            wait_for(lambda: apps.list_namespaced_deployment("crash").items, 30, "a first Deployment")
            first.kill(signal.SIGKILL)
            # No wait for the killed peer's record to expire: a replica started later has the higher peering
            # priority (its start time), so it resumes at once over the dead one's record.
            second = OperatorProcess(ha_cluster.kubeconfig, tmp_path / "second.log")
            second.wait_healthy()
            wait_for(lambda: all(_ready(ha_api, "crash", n) for n in names), 120, "all Ready after restart")
            deps = apps.list_namespaced_deployment("crash").items
            assert sorted(d.metadata.name for d in deps) == sorted(names)
            for d in deps:
                assert d.metadata.generation == 1, f"{d.metadata.name} was rewritten"
                rs = [r for r in apps.list_namespaced_replica_set("crash").items
                      if r.metadata.owner_references[0].name == d.metadata.name]
                assert len(rs) == 1
            pods = core.list_namespaced_pod("crash").items
            assert len(pods) == 2 * len(names)
            assert len(core.list_namespaced_service("crash").items) == len(names)
            assert len([c for c in core.list_namespaced_config_map("crash").items
                        if c.metadata.name.endswith("-model-repo")]) == len(names)

            status = wait_for(lambda: (s := get_policy(ha_api, "crash", "budget").get("status") or {})
                              and thresholds_alerted(s) == [25] and not s.get("pendingAlerts") and s,
                              120, "the 25 % alert delivered by the new operator")
            assert slack.wait_for(1, timeout_s=30)
            time.sleep(3)  # a few more evaluations: nothing re-sent
            assert percents_in(titles(slack)) == [25], titles(slack)
            observed = parse_time(status["ledger"]["observedTime"], "observedTime")
            pods = core.list_namespaced_pod("crash").items
            metered, spent = pods_usd(pods, observed), ledger_spent(status)
            # The ledger equals the meter, above it by at most what its documented upper bound (``pod_start``: a pod
            # listed bound before its kubelet wrote startTime is charged from its binding) may add. Two clean-clone
            # CI runs saw it above that (ci49: +27 pod-seconds; stop 37's: +2): a pod listed bound without a
            # startTime, started after that evaluation, was taken by the next for a new pod and its replica charged
            # again as one gone unseen, for the whole interval (the kill's gap included). PodRun.bound fixes it
            # (test_budget_plan's ..._not_also_charged_as_a_replica_gone_unseen). After it, ci58 (5 Dec 2026) saw
            # +0.000016702 USD against 0.000011135 USD of binding-to-start (3.000 pod-seconds over the meter): a pod
            # bound between an evaluation's clock read and its pod listing was one of its replicas, bound after its
            # instant, so the next one charged its replica as gone unseen too (operator/budget/handlers.py; not
            # fixed: reading the instant after the listing under-charged ci61's drain scenario). A failure prints
            # each service's ledger, meter and binding-to-start, each pod's times and status.ledger in full.
            slack_usd = bind_to_start_usd(pods)
            print(f"\nfigure: operator killed mid-reconcile with a policy evaluated every second; alerts "
                  f"{percents_in(titles(slack))}; ledger {spent} USD vs meter {metered:.9f} USD at "
                  f"{status['ledger']['observedTime']} ({spent - metered:+.9f} USD; the pods' binding-to-start "
                  f"{slack_usd:.9f} USD)")
            per_service = {e["name"]: (e["spent"], f"{pods_usd(_of(pods, e['name']), observed):.9f}",
                                       f"{bind_to_start_usd(_of(pods, e['name'])):.9f}")
                           for e in status["ledger"]["services"]}
            times = [(p.metadata.name, p.metadata.creation_timestamp, bound_at(p), p.status.start_time) for p in pods]
            tolerance = Decimal("0.000001")
            if not -tolerance <= spent - metered <= slack_usd + tolerance:
                # In full on stdout (pytest shortens an assertion's message): ci58's failure (+0.000016702 USD
                # against 0.000011135 USD of binding-to-start) showed neither which service nor which pod.
                print("service: (ledger, meter, binding-to-start) USD")
                for name, figures in sorted(per_service.items()):
                    print(f"  {name}: {figures}")
                print("pod: created, bound, started")
                for name, created, bound, started in sorted(times):
                    print(f"  {name}: {created}, {bound}, {started}")
                print(f"status.ledger: {json.dumps(status['ledger'], default=str)}")
            assert -tolerance <= spent - metered <= slack_usd + tolerance, (spent, metered, slack_usd)
        finally:
            first.stop()
            if second:
                second.stop()


def test_budget_leader_killed_mid_delivery_the_standby_resends_it_marked_and_alerts_the_rest_once(
        ha_cluster: LocalCluster, ha_api: Any, ha_h100_node: list[str], tmp_path: Path) -> None:
    """Issue 21, chaos scenario 3 (the budget half; no request load: KWOK pods): two operator replicas, a
    BudgetPolicy evaluated every second by the leader. The chat room holds its answer to the first alert for 8 s
    and the leader is SIGKILLed while it waits: the alert arrived, and nobody recorded it. The standby takes over,
    sends that alert again saying it may be a duplicate (an unrecorded outcome is unknown: at least once, never
    silently twice), alerts the later thresholds exactly once each, and its ledger charges the whole time, the gap
    included: equal to an independent meter of the pods' own start times x the catalog's price."""
    core, co = client.CoreV1Api(ha_api), client.CustomObjectsApi(ha_api)
    ns = "ha-budget"
    core.create_namespace({"metadata": {"name": ns}})
    a = OperatorProcess(ha_cluster.kubeconfig, tmp_path / "a.log")
    b = OperatorProcess(ha_cluster.kubeconfig, tmp_path / "b.log")
    with ChatReceiver("Slack") as slack:
        try:
            a.wait_healthy()
            b.wait_healthy()
            wait_for(lambda: [a.peering_active(), b.peering_active()].count(True) == 1, 60,
                     "exactly one active operator")
            make_secret(ha_api, ns, "slack-hook", url=slack.url)
            start_isvc(ha_api, ns, "big", replicas=2)
            # 2 replicas x ~84 USD/h = ~0.047 USD/s: 25 % of 4 USD after ~21 s, 50 % after ~43 s, 75 % after ~64 s.
            co.create_namespaced_custom_object(GROUP, VERSION, ns, "budgetpolicies", make_policy(
                "budget", "4", [{"percent": p, "actions": ["Alert"]} for p in (25, 50, 75)],
                [{"name": "team-slack", "type": "Slack", "secretRef": {"name": "slack-hook"}}]))
            slack.script(Reply(delay_s=8))  # the first alert arrives; its answer waits 8 s
            assert slack.wait_for_arrivals(1, timeout_s=90), "the 25 % alert did not arrive"
            leader = a if a.peering_active() else b
            standby = b if leader is a else a
            leader.kill(signal.SIGKILL)
            killed = dt.datetime.now(dt.UTC)

            def evaluated_after_kill() -> dt.datetime | None:
                last = (get_policy(ha_api, ns, "budget").get("status") or {}).get("lastEvaluationTime")
                when = parse_time(last, "lastEvaluationTime") if last else None
                return when if when and when > killed else None

            took_over = wait_for(evaluated_after_kill, 90, "the standby's first evaluation")
            status = wait_for(lambda: (s := get_policy(ha_api, ns, "budget").get("status") or {})
                              and thresholds_alerted(s) == [25, 50, 75] and not s.get("pendingAlerts") and s,
                              120, "50 % and 75 % alerted by the standby")
            assert slack.wait_for(4, timeout_s=30)
            time.sleep(3)  # a few more evaluations: nothing re-sent
            assert percents_in(titles(slack)) == [25, 25, 50, 75], titles(slack)
            assert len(slack.received) == 4
            notices = [POSSIBLE_DUPLICATE_FACT[1] in json.dumps(r.payload) for r in slack.received]
            # Only the copy of the unrecorded one is marked; the receiver records in the order answers complete, and
            # the original's answer was held 8 s, so the marked copy may come first (seen in a loaded CI run).
            assert sorted(notices) == [False, False, False, True], notices
            (marked,) = [r for r, n in zip(slack.received, notices, strict=True) if n]
            assert "25 %" in json.dumps(marked.payload), marked.payload
            assert standby.peering_active()

            # Spend continuous: the ledger at its observedTime = each pod's own run x the catalog's price.
            status = get_policy(ha_api, ns, "budget")["status"]
            observed = parse_time(status["ledger"]["observedTime"], "observedTime")
            pods = core.list_namespaced_pod(ns, label_selector="modalscale.io/inferenceservice=big").items
            assert running_pods(ha_api, ns, "big") == len(pods) == 2
            meter = pod_lifetime_usd(pods, observed, PRICE_USD_PER_REPLICA_HOUR)
            spent = ledger_spent(status)
            assert abs(spent - meter) <= Decimal("0.000001"), (spent, meter)
            print(f"\nfigure: budget leader killed at {killed.isoformat()}; standby's first evaluation "
                  f"{(took_over - killed).total_seconds():.1f} s later (kopf peering lifetime 30 s); alerts "
                  f"received {percents_in(titles(slack))} (the second 25 % marked); ledger {spent} USD vs meter "
                  f"{meter:.9f} USD at {status['ledger']['observedTime']}")
        finally:
            a.stop()
            b.stop()


def test_apiserver_restarted_nothing_deleted_or_rewritten_reconciles_and_the_ledger_resume(
        ha_cluster: LocalCluster, ha_h100_node: list[str], tmp_path: Path) -> None:
    """Issue 21, chaos scenario 7 (no request load: KWOK pods): the kube-apiserver is SIGKILLed for 15 s while the
    operator runs an InferenceService and a BudgetPolicy evaluated every second, then started again. Nothing is
    deleted or rewritten (the same pods, Deployment generation 1 until the spec changes), the operator stays up
    and applies a spec change made after the restart, the threshold alerted before is not alerted again and the
    next one once, and the ledger charged the outage too (= a meter of the pods' own times x price)."""
    api = ha_cluster.api_client()
    ns = "apiserver-restart"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": ns}})
    op = OperatorProcess(ha_cluster.kubeconfig, tmp_path / "op.log")

    def policy_status(a: Any) -> dict[str, Any]:
        obj = client.CustomObjectsApi(a).get_namespaced_custom_object(GROUP, VERSION, ns, "budgetpolicies", "budget")
        return dict(obj.get("status") or {})

    with ChatReceiver("Slack") as slack:
        try:
            op.wait_healthy()
            wait_for(op.peering_active, 60, "the operator active")
            make_secret(api, ns, "slack-hook", url=slack.url)
            start_isvc(api, ns, "big", replicas=2)
            # 2 replicas x ~84 USD/h = ~0.047 USD/s: 25 % of 4 USD after ~21 s, 50 % after ~43 s.
            client.CustomObjectsApi(api).create_namespaced_custom_object(
                GROUP, VERSION, ns, "budgetpolicies", make_policy(
                    "budget", "4", [{"percent": p, "actions": ["Alert"]} for p in (25, 50)],
                    [{"name": "team-slack", "type": "Slack", "secretRef": {"name": "slack-hook"}}]))
            wait_for(lambda: thresholds_alerted(policy_status(api)) == [25]
                     and not policy_status(api).get("pendingAlerts"), 90, "the 25 % alert delivered and recorded")
            core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
            pods_before = {p.metadata.uid for p in core.list_namespaced_pod(ns).items}
            assert len(pods_before) == 2

            ha_cluster.restart_apiserver(down_s=15)
            api.close()
            api = ha_cluster.api_client()
            core, apps = client.CoreV1Api(api), client.AppsV1Api(api)

            # The evaluations resume (status written after the restart) and alert 50 % once, never 25 % again.
            status = wait_for(lambda: (s := policy_status(api)) and thresholds_alerted(s) == [25, 50]
                              and not s.get("pendingAlerts") and s, 120, "50 % alerted after the restart")
            assert op.proc.poll() is None, "the operator exited"
            assert {p.metadata.uid for p in core.list_namespaced_pod(ns).items} == pods_before
            assert apps.read_namespaced_deployment("big", ns).metadata.generation == 1
            # A spec change made after the restart is reconciled.
            client.CustomObjectsApi(api).patch_namespaced_custom_object(
                GROUP, VERSION, ns, PLURAL, "big", {"spec": {"scaling": {"replicas": 3}}})
            wait_for(lambda: running_pods(api, ns, "big") == 3, 90, "the third replica running")
            assert apps.read_namespaced_deployment("big", ns).metadata.generation == 2
            time.sleep(2)  # more evaluations: nothing re-sent
            assert percents_in(titles(slack)) == [25, 50], titles(slack)

            # The ledger charged the outage: at its observedTime it equals each pod's own run x the price.
            status = wait_for(lambda: (s := policy_status(api)) and s["ledger"]["services"][0]["replicas"] == 3
                              and s, 30, "an evaluation that sees the third replica")
            observed = parse_time(status["ledger"]["observedTime"], "observedTime")
            pods = core.list_namespaced_pod(ns, label_selector="modalscale.io/inferenceservice=big").items
            meter = pod_lifetime_usd(pods, observed, PRICE_USD_PER_REPLICA_HOUR)
            spent = ledger_spent(status)
            assert abs(spent - meter) <= Decimal("0.000001"), (spent, meter)
            print(f"\nfigure: apiserver down 15 s; pods kept {len(pods_before)}/{len(pods_before)}; alerts "
                  f"{percents_in(titles(slack))}; ledger {spent} USD vs meter {meter:.9f} USD")
        finally:
            op.stop()
            api.close()
