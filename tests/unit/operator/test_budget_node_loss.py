"""Issue 21, scenario 2: the ledger stops charging the pods of a lost node at the node's last heartbeat.

A node whose kubelet died keeps its pods Running (or Terminating, once evicted) in the API server until the node is
deleted, and the ledger charged them until they were finally removed. The node lifecycle controller sets the
node's ``Ready`` condition to ``Unknown`` when the kubelet stops posting, keeping its ``lastHeartbeatTime``: the
pods stop there. Never less than what ran: a node that reports again with the same pod charges the gap too.

One replica of ``make_isvc`` (1 CPU, 2Gi, one nvidia-l4) costs 0.600125239 USD/h (see test_budget_plan), so
``s`` replica-seconds cost ``0.600125239 * s / 3600`` USD, quantized to 1e-9 USD per evaluation.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from types import SimpleNamespace
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from modalscale.costmodel.budget.status import budget_status_json, read_budget_status
from modalscale.costmodel.ledger import LedgerEntry, PodRun
from modalscale.operator.budget.observe import BudgetObserver
from modalscale.operator.budget.plan import (
    BudgetObserved,
    GonePod,
    NodeHealth,
    gone_pod_runs,
    plan_policy,
    pod_runs,
    read_node_health,
)
from tests.unit.operator.test_budget_plan import CATALOG, make_isvc, persisted
from tests.unit.operator.test_budget_pod_stops import T0, at, ledger_at_t0, pod, text

HEARD, LOST = "gpu-a", "gpu-b"


def usd(replica_s: int) -> Decimal:
    """``replica_s`` replica-seconds of one replica at 0.600125239 USD/h, quantized to 1e-9 USD half-even."""
    return (Decimal("0.600125239") * replica_s / 3600).quantize(Decimal("1e-9"))


def node(name: str, ready: str | None, heartbeat: dt.datetime | None = None) -> dict[str, Any]:
    """A Node as the API returns it; ``ready``: its ``Ready`` condition's status (None: no Ready condition)."""
    conditions = [] if ready is None else [{
        "type": "Ready", "status": ready, "reason": "NodeStatusUnknown" if ready == "Unknown" else "KubeletReady",
        "lastHeartbeatTime": text(heartbeat or at(0)), "lastTransitionTime": text(at(-7200))}]
    return {"metadata": {"name": name, "labels": {}},
            "status": {"conditions": conditions}}


def observed(pods: list[dict[str, Any]], nodes: dict[str, dict[str, Any] | None],
             gone: list[GonePod] | None = None) -> BudgetObserved:
    """What the observer reads: the pods, and each node they run on (None: the node is gone, a 404)."""
    return BudgetObserved([make_isvc()], {"ml": pods}, gone={"ml": gone or []},
                          node_labels={n: dict(((b or {}).get("metadata") or {}).get("labels") or {})
                                       for n, b in nodes.items()},
                          node_health={n: read_node_health(b) for n, b in nodes.items()})


def two_pods(deleting: dt.datetime | None = None) -> list[dict[str, Any]]:
    """vc-0 on the node that reports, vc-1 on the other, both running since two hours before T0."""
    return [pod("vc-0", start=at(-7200), node=HEARD), pod("vc-1", start=at(-7200), node=LOST, deleting=deleting)]


def evaluate(policy: dict[str, Any], obs: BudgetObserved, seconds: int) -> tuple[Decimal, dict[str, Any]]:
    """(spend of the period, the policy with the evaluation's status patch applied) at ``T0 + seconds``."""
    plan = plan_policy(policy, obs, CATALOG, [], at(seconds))
    assert plan.budget is not None
    return plan.budget.spent_usd, persisted(policy, plan.status_patch)


def ledger_services(policy: dict[str, Any]) -> list[dict[str, Any]]:
    return list(policy["status"]["ledger"]["services"])


def test_the_ready_condition_says_whether_the_kubelet_still_reports() -> None:
    assert read_node_health(node(LOST, "Unknown", at(20))) == NodeHealth("Unknown", at(20))
    assert read_node_health(node(HEARD, "True", at(55))) == NodeHealth("True", at(55))
    assert read_node_health(node(HEARD, None)) == NodeHealth(None, None)
    assert read_node_health(None) == NodeHealth(None, None, gone=True)
    assert NodeHealth("Unknown", at(20)).unheard_since == at(20)
    assert NodeHealth("True", at(55)).unheard_since is None
    assert NodeHealth("False", at(55)).unheard_since is None  # NotReady but reporting: the kubelet is there


def test_a_pod_on_a_node_whose_kubelet_stopped_reporting_stops_at_the_nodes_last_heartbeat() -> None:
    # At T0 both replicas run (the ledger counted to T0 with 2 in force). The kubelet of gpu-b posted its last
    # heartbeat at T0 + 20 s; at the evaluation at T0 + 60 s its node is Ready=Unknown and vc-1 is still listed
    # Running. vc-0 60 s + vc-1 20 s = 80 replica-seconds (before: 120, vc-1 charged to the evaluation).
    obs = observed(two_pods(), {HEARD: node(HEARD, "True", at(55)), LOST: node(LOST, "Unknown", at(20))})
    spent, policy = evaluate(ledger_at_t0(), obs, 60)
    assert spent == usd(80) == Decimal("0.013336116")
    (entry,) = ledger_services(policy)
    assert entry["replicas"] == 1  # vc-1 is not in force any more: the next interval does not charge it
    assert entry["unheardPods"] == [{"name": "vc-1", "chargedUntil": text(at(20))}]
    runs = {r.name: r for r in pod_runs(obs.pods["ml"] or [], obs.node_labels, obs.node_health)}
    assert runs["vc-1"].unheard_since == at(20) and runs["vc-0"].unheard_since is None
    # A second evaluation with the node still silent charges vc-0 only.
    spent2, policy2 = evaluate(policy, obs, 120)
    assert spent2 == usd(80) + usd(60)
    assert ledger_services(policy2)[0]["unheardPods"] == [{"name": "vc-1", "chargedUntil": text(at(20))}]


def test_a_node_that_reports_again_with_the_pod_still_running_charges_the_whole_time() -> None:
    # The same first evaluation; then gpu-b's kubelet posts again (Ready=True, heartbeat T0 + 110 s) and vc-1 is
    # still Running: the heartbeat gap was a missed status, not a stop. At T0 + 120 s the ledger charges vc-0 60 s,
    # vc-1 60 s and vc-1's gap [T0 + 20 s, T0 + 60 s) 40 s: 160 replica-seconds, 240 in all, as if never lost.
    lost = observed(two_pods(), {HEARD: node(HEARD, "True", at(55)), LOST: node(LOST, "Unknown", at(20))})
    _, policy = evaluate(ledger_at_t0(), lost, 60)
    back = observed(two_pods(), {HEARD: node(HEARD, "True", at(115)), LOST: node(LOST, "True", at(110))})
    spent, policy = evaluate(policy, back, 120)
    assert spent == usd(80) + usd(160) == Decimal("0.040008349")
    assert spent == usd(240)  # what both replicas ran over the two minutes
    (entry,) = ledger_services(policy)
    assert entry["replicas"] == 2 and "unheardPods" not in entry
    # Replayed (the status write lost, or a second evaluation at the same instant): nothing charged twice.
    again, _ = evaluate(policy, back, 120)
    assert again == spent


def test_a_node_silent_since_before_the_last_evaluation_is_credited_back_and_charged_the_gap_once_it_reports() -> None:
    # gpu-b's last heartbeat (T0 - 30 s) lies before the ledger's watermark T0: the 30 s to T0 were charged (both
    # pods ran then, as far as anyone knew). Cut at T0 + 60 s: vc-1 charges nothing more and its 30 s after the
    # heartbeat come back; the record says it is charged until T0 - 30 s. Back at T0 + 120 s: the gap
    # [T0 - 30 s, T0 + 120 s) is charged once, so the two minutes cost what both replicas ran.
    lost = observed(two_pods(), {HEARD: node(HEARD, "True", at(55)), LOST: node(LOST, "Unknown", at(-30))})
    spent, policy = evaluate(ledger_at_t0(), lost, 60)
    assert abs(spent - (usd(60) - usd(30))) <= Decimal("1e-9")
    assert ledger_services(policy)[0]["unheardPods"] == [{"name": "vc-1", "chargedUntil": text(at(-30))}]
    back = observed(two_pods(), {HEARD: node(HEARD, "True", at(115)), LOST: node(LOST, "True", at(110))})
    spent, _ = evaluate(policy, back, 120)
    assert abs(spent - usd(240)) <= Decimal("2e-9")


def test_a_deleted_node_keeps_its_pods_stopped_at_the_last_heartbeat_the_operator_saw() -> None:
    # The first evaluation saw gpu-b silent since T0 + 20 s. Then the node object is deleted (a cloud controller
    # removing the instance): at T0 + 120 s vc-1 is still listed, Terminating, its node gone (404). It stays charged
    # to T0 + 20 s: the ledger adds vc-0's 60 s only.
    lost = observed(two_pods(), {HEARD: node(HEARD, "True", at(55)), LOST: node(LOST, "Unknown", at(20))})
    _, policy = evaluate(ledger_at_t0(), lost, 60)
    deleted = observed(two_pods(deleting=at(185)), {HEARD: node(HEARD, "True", at(115)), LOST: None})
    spent, policy = evaluate(policy, deleted, 120)
    assert spent == usd(80) + usd(60)
    assert ledger_services(policy)[0]["replicas"] == 1
    # PodGC then deletes vc-1 (its node is gone) and the pod watch records it: still nothing more.
    gone = [GonePod(pod("vc-1", start=at(-7200), node=LOST, deleting=at(130)), at(130))]
    spent, _ = evaluate(policy, observed(two_pods()[:1], {HEARD: node(HEARD, "True", at(175)), LOST: None}, gone),
                        180)
    assert spent == usd(80) + usd(60) + usd(60)


def test_a_deleted_node_never_seen_silent_charges_its_pods_to_their_own_deletion() -> None:
    # All the operator knows: gpu-b is gone and vc-1 is Terminating with a deadline at T0 + 40 s (its deletion).
    deleted = observed(two_pods(deleting=at(40)), {HEARD: node(HEARD, "True", at(55)), LOST: None})
    spent, _ = evaluate(ledger_at_t0(), deleted, 60)
    assert spent == usd(100)  # vc-0 60 s + vc-1 40 s, as before


def test_a_deleted_node_the_observer_found_gone_charges_its_pods_to_when_it_found_it() -> None:
    # A Spot node reclaimed (issue 21, scenario 5): its kubelet stopped and its Node deleted before the node
    # controller marked it Unknown. vc-1 stays listed Running (nothing updates it) until the pod GC deletes it
    # 40-60 s later; the observer remembers when it first found gpu-b gone, T0 + 30 s: vc-1 is charged to there.
    lost = BudgetObserved([make_isvc()], {"ml": two_pods()}, node_labels={HEARD: {}, LOST: {}},
                          node_health={HEARD: NodeHealth("True", at(55)),
                                       LOST: NodeHealth(None, None, gone=True, gone_since=at(30))})
    spent, policy = evaluate(ledger_at_t0(), lost, 60)
    assert spent == usd(60 + 30)
    assert ledger_services(policy)[0]["replicas"] == 1
    gone = [GonePod(pod("vc-1", start=at(-7200), node=LOST, deleting=at(100)), at(100))]
    later = BudgetObserved([make_isvc()], {"ml": two_pods()[:1]}, gone={"ml": gone}, node_labels=lost.node_labels,
                           node_health=lost.node_health)
    spent, _ = evaluate(policy, later, 120)
    assert spent == usd(60 + 30) + usd(60)


def test_a_node_reporting_not_ready_still_charges_its_pods_through() -> None:
    # Ready=False is a kubelet that reports (its runtime or network is unhealthy): its pods' own stops decide.
    obs = observed(two_pods(), {HEARD: node(HEARD, "True", at(55)), LOST: node(LOST, "False", at(58))})
    spent, policy = evaluate(ledger_at_t0(), obs, 60)
    assert spent == usd(120)
    assert "unheardPods" not in ledger_services(policy)[0]


def test_nodes_that_could_not_be_read_change_nothing() -> None:
    obs = BudgetObserved([make_isvc()], {"ml": two_pods()})  # node_labels and node_health None
    spent, _ = evaluate(ledger_at_t0(), obs, 60)
    assert spent == usd(120)


def test_a_deleted_pod_recorded_by_the_watch_on_a_silent_node_stops_at_the_heartbeat() -> None:
    # The taint manager evicted vc-1 at T0 + 50 s (deadline T0 + 155 s) and someone force-deleted it at T0 + 52 s;
    # the watch recorded it. Its node is silent since T0 + 20 s: it stopped then, not at its deletion.
    gone = [GonePod(pod("vc-1", start=at(-7200), node=LOST, deleting=at(52)), at(52))]
    health = {LOST: NodeHealth("Unknown", at(20))}
    (run,) = gone_pod_runs(gone, None, health)
    assert run == PodRun("vc-1", at(-7200), at(52), None, unheard_since=at(20))
    obs = observed(two_pods()[:1], {HEARD: node(HEARD, "True", at(55)), LOST: node(LOST, "Unknown", at(20))}, gone)
    spent, _ = evaluate(ledger_at_t0(), obs, 60)
    assert spent == usd(80)


def test_the_unheard_pods_survive_a_status_round_trip() -> None:
    policy = ledger_at_t0()
    policy["status"]["ledger"]["services"][0]["unheardPods"] = [{"name": "vc-1", "chargedUntil": text(at(20))}]
    status = read_budget_status(policy)
    assert status.ledger is not None
    (entry,) = status.ledger.entries
    assert isinstance(entry, LedgerEntry) and entry.unheard == (("vc-1", at(20)),)
    assert budget_status_json(status)["ledger"]["services"][0]["unheardPods"] == [
        {"name": "vc-1", "chargedUntil": text(at(20))}]


def _answer(found: dict[str, Any] | int | None) -> Any:
    """What a ``_preload_content=False`` read returns for ``found`` (None: a 404; an int: that HTTP error)."""
    if found is None or isinstance(found, int):
        raise ApiException(status=found or 404)
    return SimpleNamespace(data=json.dumps(found).encode())


def _observer(fake: Any) -> BudgetObserver:
    """A real :class:`BudgetObserver` (its own constructor, so no attribute it needs is missing) reading ``fake``."""
    obs = BudgetObserver(ApiClient())
    obs.core = obs.leases = fake
    return obs


class _Nodes:
    """``CoreV1Api.read_node`` answering from a dict (None: 404; an int: that HTTP error)."""

    def __init__(self, nodes: dict[str, dict[str, Any] | int | None]) -> None:
        self.nodes = nodes

    def read_node(self, name: str, **_: Any) -> Any:
        return _answer(self.nodes[name])


def test_the_observer_reads_labels_and_health_in_one_read_per_node_and_a_404_is_a_gone_node() -> None:
    obs = _observer(_Nodes({HEARD: node(HEARD, "True", at(55)), LOST: None}))
    labels, health = obs.nodes({HEARD, LOST}, at(60))
    assert labels == {HEARD: {}, LOST: {}}
    assert health == {HEARD: NodeHealth("True", at(55)), LOST: NodeHealth(None, None, gone=True, gone_since=at(60))}
    # Gone since the first read that found it gone (a deleted Node says nothing more); found again, forgotten.
    assert obs.nodes({LOST}, at(70))[1] == {LOST: NodeHealth(None, None, gone=True, gone_since=at(60))}
    obs.core = _Nodes({LOST: node(LOST, "True", at(75))})  # type: ignore[assignment]
    assert obs.nodes({LOST}, at(80))[1] == {LOST: NodeHealth("True", at(75))} and obs.nodes_gone_since == {}
    obs.core = _Nodes({HEARD: 403})  # type: ignore[assignment]  # a namespaced install without get nodes
    assert obs.nodes({HEARD}) == (None, None)


def test_an_evaluation_that_integrates_nothing_keeps_the_gap_to_charge() -> None:
    # The node reports again, but the evaluation falls at the ledger's watermark (a rerun within the second):
    # nothing is integrated, so the record stays and the next evaluation charges the gap.
    lost = observed(two_pods(), {HEARD: node(HEARD, "True", at(55)), LOST: node(LOST, "Unknown", at(20))})
    _, policy = evaluate(ledger_at_t0(), lost, 60)
    back = observed(two_pods(), {HEARD: node(HEARD, "True", at(59)), LOST: node(LOST, "True", at(59))})
    spent, policy = evaluate(policy, back, 60)
    assert spent == usd(80)
    assert ledger_services(policy)[0]["unheardPods"] == [{"name": "vc-1", "chargedUntil": text(at(20))}]
    spent, _ = evaluate(policy, back, 120)
    assert spent == usd(80) + usd(160)


# ---------------------------------------------------------------------------------------------- the chaos test's faults
def lease(name: str, renewed: dt.datetime | None) -> dict[str, Any]:
    """The node's Lease in ``kube-node-lease`` as the API returns it (``renewed`` None: no renewTime)."""
    spec: dict[str, Any] = {"holderIdentity": name, "leaseDurationSeconds": 40}
    if renewed is not None:
        spec["renewTime"] = renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"metadata": {"name": name, "namespace": "kube-node-lease"}, "spec": spec}


def test_a_silent_node_was_last_heard_at_its_lease_renewal_when_that_is_later_than_its_status() -> None:
    # With node leases the kubelet posts its status only on a change or every 5 min, but renews its Lease every
    # 10 s: the node was heard at the later of the two.
    assert read_node_health(node(LOST, "Unknown", at(20)), lease(LOST, at(250))).unheard_since == at(250)
    assert read_node_health(node(LOST, "Unknown", at(20)), lease(LOST, at(10))).unheard_since == at(20)
    assert read_node_health(node(LOST, "Unknown", at(20)), lease(LOST, None)).unheard_since == at(20)
    assert read_node_health(node(LOST, "Unknown", at(20)), None).unheard_since == at(20)
    assert read_node_health(node(HEARD, "True", at(20)), lease(HEARD, at(250))).unheard_since is None
    assert read_node_health(None, lease(LOST, at(250))).gone


class _NodesAndLeases(_Nodes):
    """Also ``CoordinationV1Api.read_namespaced_lease`` from a dict (None: 404; an int: that HTTP error)."""

    def __init__(self, nodes: dict[str, dict[str, Any] | int | None],
                 leases: dict[str, dict[str, Any] | int | None]) -> None:
        super().__init__(nodes)
        self.leases, self.lease_reads = leases, []  # type: ignore[var-annotated]

    def read_namespaced_lease(self, name: str, namespace: str, **_: Any) -> Any:
        assert namespace == "kube-node-lease"
        self.lease_reads.append(name)
        return _answer(self.leases[name])


def test_the_observer_reads_the_lease_only_of_a_node_that_is_not_ready_and_a_refused_read_is_no_lease() -> None:
    fake = _NodesAndLeases({HEARD: node(HEARD, "True", at(55)), LOST: node(LOST, "Unknown", at(20))},
                           {HEARD: lease(HEARD, at(58)), LOST: lease(LOST, at(250))})
    obs = _observer(fake)
    _, health = obs.nodes({HEARD, LOST})
    assert health == {HEARD: NodeHealth("True", at(55), lease_renewed=None),
                      LOST: NodeHealth("Unknown", at(20), lease_renewed=at(250))}
    assert fake.lease_reads == [LOST]  # a Ready node's lease is not read
    fake.leases[LOST] = 403  # an install without get leases: the status heartbeat, as before
    _, health = obs.nodes({LOST})
    assert health == {LOST: NodeHealth("Unknown", at(20))}


def test_a_pod_charged_past_its_nodes_last_heartbeat_before_the_node_was_marked_is_credited_back() -> None:
    # The kubelet of gpu-b died at T0 + 20 s. The evaluation at T0 + 40 s still sees its node Ready (the node
    # lifecycle controller marks it Unknown only after its grace period) and charges vc-1 to T0 + 40 s. At T0 + 60 s
    # the node is Unknown, last heard at T0 + 20 s: vc-1's 20 s after it are taken back, so the spend is what ran,
    # vc-0 60 s + vc-1 20 s = 80 replica-seconds (before: 100, the lost pod charged to the evaluation that saw it).
    still = observed(two_pods(), {HEARD: node(HEARD, "True", at(35)), LOST: node(LOST, "True", at(15))})
    spent, policy = evaluate(ledger_at_t0(), still, 40)
    assert spent == usd(80)  # 2 x 40 s
    lost = observed(two_pods(), {HEARD: node(HEARD, "True", at(55)), LOST: node(LOST, "Unknown", at(20))})
    spent, policy = evaluate(policy, lost, 60)
    assert spent == usd(80) + usd(20) - usd(20)  # vc-0 20 s, vc-1 0 s, less vc-1's 20 s after its heartbeat
    assert abs(spent - usd(80)) <= Decimal("2e-9")  # per-evaluation rounding
    (entry,) = ledger_services(policy)
    assert entry["unheardPods"] == [{"name": "vc-1", "chargedUntil": text(at(20))}]
    # Still silent: nothing more for vc-1, and nothing taken back twice.
    spent2, policy2 = evaluate(policy, lost, 120)
    assert spent2 == spent + usd(60)
    # It reports again with vc-1 still running: the gap from its heartbeat is charged, as if never lost.
    back = observed(two_pods(), {HEARD: node(HEARD, "True", at(175)), LOST: node(LOST, "True", at(170))})
    spent3, _ = evaluate(policy2, back, 180)
    assert abs(spent3 - usd(360)) <= Decimal("4e-9")  # both replicas for 3 minutes


def test_the_credit_is_what_was_charged_a_pod_stopped_before_its_node_was_marked_gets_back_only_to_its_stop() -> None:
    # vc-1 was deleted with a deadline of T0 + 30 s (its deletionTimestamp, the ledger's stop for a terminating pod)
    # and charged to it; its node turns out silent since T0 + 20 s: 10 s come back, not the 40 s to the evaluation.
    still = observed(two_pods(deleting=at(30)), {HEARD: node(HEARD, "True", at(35)), LOST: node(LOST, "True", at(15))})
    spent, policy = evaluate(ledger_at_t0(), still, 40)
    assert spent == usd(70)  # vc-0 40 s + vc-1 30 s
    lost = observed(two_pods(deleting=at(30)),
                    {HEARD: node(HEARD, "True", at(55)), LOST: node(LOST, "Unknown", at(20))})
    spent, _ = evaluate(policy, lost, 60)
    assert abs(spent - usd(80)) <= Decimal("2e-9")  # vc-0 60 s + vc-1 20 s


def test_a_reclaimed_spot_nodes_pod_is_charged_to_when_the_node_was_found_gone_at_the_spot_price() -> None:
    # Issue 21, scenario 5 (ci40 of 4 Dec 2026 differed from its meter by 0.77 s at about the on-demand price): vc-1
    # asked for a Spot node (SwitchToSpot's nodeSelector) and ran on gpu-b, labelled Spot; vc-0 on an on-demand node.
    # gpu-b is reclaimed: its Node deleted, found gone at T0 + 90 s, vc-1 still listed. Its last 30 s are charged at
    # the Spot price, though the labels of the node it ran on can no longer be read.
    from modalscale.costmodel.catalog import ReplicaResources

    replica = ReplicaResources.from_quantities("1", "2Gi", 1, "nvidia-l4")
    on_demand, spot = CATALOG.price_replica(replica, "OnDemand"), CATALOG.price_replica(replica, "Spot")
    assert (on_demand, spot) == (Decimal("0.600125239"), Decimal("0.277239000"))
    pods = two_pods()
    pods[1]["spec"]["nodeSelector"] = {"karpenter.sh/capacity-type": "spot"}
    labels = {HEARD: {"karpenter.sh/capacity-type": "on-demand"}, LOST: {"karpenter.sh/capacity-type": "spot"}}
    running = BudgetObserved([make_isvc()], {"ml": pods}, node_labels=labels,
                             node_health={HEARD: NodeHealth("True", at(55)), LOST: NodeHealth("True", at(55))})
    before, policy = evaluate(ledger_at_t0(), running, 60)
    assert before == ((on_demand + spot) * 60 / 3600).quantize(Decimal("1e-9"))
    reclaimed = BudgetObserved([make_isvc()], {"ml": pods}, node_labels={HEARD: labels[HEARD], LOST: {}},
                               node_health={HEARD: NodeHealth("True", at(115)),
                                            LOST: NodeHealth(None, None, gone=True, gone_since=at(90))})
    after, policy = evaluate(policy, reclaimed, 120)
    assert after - before == ((on_demand * 60 + spot * 30) / 3600).quantize(Decimal("1e-9"))
    (service,) = ledger_services(policy)
    assert service["replicas"] == 1 and service["unheardPods"] == [{"name": "vc-1", "chargedUntil": text(at(90))}]


def test_a_pod_on_a_silent_node_does_not_stand_in_for_a_pod_recorded_gone_after_the_instant() -> None:
    # The second review of the ledger's fixes (F4): three replicas in force at T0. At T0 + 60 s gpu-b is silent
    # since T0 + 20 s (vc-1 cut there) and vc-2 was listed running, then force-deleted right after the listing (its
    # record stops at T0 + 61 s). The planner counts vc-0 and vc-1 (it knows no node health) and leaves vc-2 out:
    # 2; only vc-0 is in force from T0 + 60 s. At T0 + 120 s vc-0 60 s + vc-2 1 s are charged, no replica gone
    # unseen (a count of 2 charged one more for 60 s).
    policy = persisted(ledger_at_t0(), {"ledger": {"observedTime": text(T0), "services": [
        {"namespace": "ml", "name": "vc", "replicas": 3, "costUSDPerHour": "1.800375717", "spent": "0"}]}})
    pods = [pod("vc-0", start=at(-7200), node=HEARD), pod("vc-1", start=at(-7200), node=LOST),
            pod("vc-2", start=at(-7200), node=HEARD)]
    gone = [GonePod(pod("vc-2", start=at(-7200), node=HEARD, deleting=at(61)), at(61))]
    spent1, policy = evaluate(policy, observed(pods, {HEARD: node(HEARD, "True", at(55)),
                                                      LOST: node(LOST, "Unknown", at(20))}, gone), 60)
    assert spent1 == usd(60 + 20 + 60)
    assert ledger_services(policy)[0]["replicas"] == 1
    spent2, _ = evaluate(policy, observed(pods[:2], {HEARD: node(HEARD, "True", at(115)),
                                                    LOST: node(LOST, "Unknown", at(20))}, gone), 120)
    assert spent2 - spent1 == usd(60 + 1)
