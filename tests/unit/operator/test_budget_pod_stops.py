"""Issue 22, fault 1: pods gone between two evaluations are charged to when they stopped, from the pod watch.

One replica of ``make_isvc`` (1 CPU, 2Gi, one nvidia-l4) costs 0.600125239 USD/h (see test_budget_plan).
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest

from modalscale.costmodel.ledger import PodRun
from modalscale.operator.budget.plan import BudgetObserved, GonePod, gone_pod_runs, plan_policy, pod_runs
from modalscale.operator.budget.podstops import GonePods, trim_pod
from tests.unit.operator.test_budget_plan import CATALOG, T0, make_isvc, make_policy

LABEL = "modalscale.io/inferenceservice"


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def text(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(name: str, *, start: dt.datetime | None = None, deleting: dt.datetime | None = None,
        finished: list[dt.datetime | None] | None = None, node: str | None = "kwok-gpu-0",
        isvc: str = "vc", ns: str = "ml") -> dict[str, Any]:
    """A pod as the API returns it; ``finished``: per container, its ``finishedAt`` (None: still running)."""
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"uid-{name}", "labels": {LABEL: isvc},
                            "managedFields": [{"manager": "kubelet"}]}
    if deleting is not None:
        meta["deletionTimestamp"] = text(deleting)
    status: dict[str, Any] = {"phase": "Running"}
    if start is not None:
        status["startTime"] = text(start)
    if finished is not None:
        status["containerStatuses"] = [
            {"name": f"c{i}", "image": "x", "state": {"terminated": {"finishedAt": text(f), "exitCode": 0}}
             if f is not None else {"running": {"startedAt": text(start or T0)}}} for i, f in enumerate(finished)]
    return {"metadata": meta, "spec": {"nodeName": node, "containers": [{"name": "c0"}]} if node else {},
            "status": status}


def ledger_at_t0() -> dict[str, Any]:
    """A policy whose ledger has counted up to T0 with 2 replicas of ml/vc in force."""
    policy = make_policy(limit={"amount": "100", "currency": "USD"})
    policy["status"] = {"periodStart": "2026-11-30T00:00:00Z", "ledger": {
        "observedTime": text(T0),
        "services": [{"namespace": "ml", "name": "vc", "replicas": 2, "costUSDPerHour": "1.200250478",
                      "spent": "0"}]}}
    return policy


def test_a_pod_gone_before_the_next_listing_is_charged_to_its_containers_finish_not_to_the_evaluation() -> None:
    # At T0 vc-0 and vc-1 run. vc-1 is deleted at T0 + 20 s (grace 30 s: deletionTimestamp T0 + 50 s), its
    # containers finish at T0 + 18 s and T0 + 20 s, and it is gone at T0 + 21 s. vc-2 starts at T0 + 5 s and is
    # deleted at T0 + 34 s, its container finishing at T0 + 35 s: no listing ever shows it. The evaluation at
    # T0 + 60 s lists vc-0 only; the pod watch recorded both deletions. vc-0 60 s + vc-1 20 s + vc-2 30 s = 110
    # replica-seconds x 0.600125239 USD/h = 0.018337160 USD (the listing alone: vc-0 60 s + vc-1 to the
    # evaluation 60 s = 0.020004175, and vc-2 nothing).
    listed = pod("vc-0", start=at(-7200))
    vc1 = pod("vc-1", start=at(-7200), deleting=at(50), finished=[at(18), at(20)])
    vc2 = pod("vc-2", start=at(5), deleting=at(64), finished=[at(35)])
    gone = {"ml": [GonePod(vc1, at(21)), GonePod(vc2, at(36))]}
    watched = plan_policy(ledger_at_t0(), BudgetObserved([make_isvc()], {"ml": [listed]}, gone=gone), CATALOG, [],
                          at(60))
    assert watched.budget is not None and watched.budget.spent_usd == Decimal("0.018337160")
    listing_only = plan_policy(ledger_at_t0(), BudgetObserved([make_isvc()], {"ml": [listed]}), CATALOG, [], at(60))
    assert listing_only.budget is not None and listing_only.budget.spent_usd == Decimal("0.020004175")


def test_a_gateway_pod_gone_before_the_next_listing_is_charged_to_its_stop() -> None:
    # Issue 22 fault 1 for the request gateway's pods (modalscale.io/gateway=vc): gateway-b, deleted at T0 + 20 s
    # (container finished) and gone before the evaluation at T0 + 60 s, ran 20 s of the interval. The listing
    # alone charged it nothing (the gateway is charged by the listed pods' own runs); listed running to the end,
    # 60 s. So watched - listing only = a third of listed - listing only (to the ledger's 1e-9 USD rounding).
    from modalscale.api.inferenceservice import parse_isvc
    from modalscale.operator.isvc.objects import gateway_labels

    isvc = make_isvc()

    def gateway(name: str, **kw: Any) -> dict[str, Any]:
        body = pod(name, **kw)
        body["metadata"]["labels"] = dict(gateway_labels(parse_isvc(isvc)))
        return body

    replicas = {"ml": [pod("vc-0", start=at(-7200)), pod("vc-1", start=at(-7200))]}
    a, b = gateway("vc-gateway-a", start=at(-7200)), gateway("vc-gateway-b", start=at(-7200), deleting=at(50),
                                                             finished=[at(20)])

    def spent(gateways: list[dict[str, Any]], gone: list[GonePod]) -> Decimal:
        plan = plan_policy(ledger_at_t0(), BudgetObserved([isvc], replicas, gateway_pods={"ml": gateways},
                                                          gone={"ml": gone}), CATALOG, [], at(60))
        assert plan.budget is not None
        return plan.budget.spent_usd

    listing_only, watched = spent([a], []), spent([a], [GonePod(b, at(21))])
    running = spent([a, gateway("vc-gateway-b", start=at(-7200))], [])
    assert running > listing_only  # the gateway is priced at all
    assert abs((watched - listing_only) * 3 - (running - listing_only)) <= Decimal("3e-9"), (
        listing_only, watched, running)
    # a gateway pod the watch saw deleted while the listing still showed it runs no more either
    assert spent([a, gateway("vc-gateway-b", start=at(-7200))], [GonePod(b, at(21))]) == watched


def test_records_of_another_service_or_namespace_charge_nothing_here() -> None:
    other = pod("other-0", start=at(-7200), deleting=at(50), finished=[at(20)], isvc="other")
    elsewhere = pod("vc-9", start=at(-7200), deleting=at(50), finished=[at(20)], ns="team-b")
    listed = [pod("vc-0", start=at(-7200)), pod("vc-1", start=at(-7200))]
    plan = plan_policy(ledger_at_t0(), BudgetObserved([make_isvc()], {"ml": listed},
                                                      gone={"ml": [GonePod(other, at(21))],
                                                            "team-b": [GonePod(elsewhere, at(21))]}),
                       CATALOG, [], at(60))
    assert plan.budget is not None and plan.budget.spent_usd == Decimal("0.020004175")  # 2 x 60 s


def test_gone_pod_runs_take_the_kubelets_times_and_never_a_stop_after_the_pod_was_seen_gone() -> None:
    start = at(-3600)
    runs = gone_pod_runs([
        GonePod(pod("a", start=start, deleting=at(30), finished=[at(5), at(8)]), at(40)),  # containers: 8
        GonePod(pod("b", start=start, deleting=at(30), finished=[at(5), None]), at(40)),  # one still ran: 30
        GonePod(pod("c", start=start, deleting=at(30)), at(12)),  # seen gone before its deadline: 12
        GonePod(pod("d", start=start), at(50)),  # deleted at once, no deadline (grace 0): seen gone 50
        GonePod(pod("e", start=None, deleting=at(30)), at(40)),  # start unknown
        GonePod(pod("f", deleting=at(30), node=None), at(40)),  # never bound: never ran
        GonePod(pod("a", start=start, deleting=at(30), finished=[at(5), at(9)]), at(41)),  # twice: earliest stop
    ])
    assert runs == (PodRun("a", start, at(8)), PodRun("b", start, at(30)), PodRun("c", start, at(12)),
                    PodRun("d", start, at(50)), PodRun("e", None, at(30)))


def test_the_store_keeps_bound_pods_for_the_retention_and_trims_them_to_what_the_ledger_reads() -> None:
    store = GonePods(retention_s=3600, max_pods=3)
    full = pod("vc-1", start=at(-7200), deleting=at(50), finished=[at(20)])
    assert store.record(full, at(21))
    assert not store.record(pod("vc-x", deleting=at(50), node=None), at(21))  # never bound
    kept = store.in_namespaces(["ml"], at(60))
    assert list(kept) == ["ml"] and [g.pod["metadata"]["name"] for g in kept["ml"]] == ["vc-1"]
    assert "managedFields" not in kept["ml"][0].pod["metadata"]
    assert gone_pod_runs(kept["ml"]) == gone_pod_runs([GonePod(full, at(21))])
    assert store.in_namespaces(["team-b"], at(60)) == {}
    assert store.in_namespaces(["ml"], at(21 + 3601)) == {}  # past the retention
    for i in range(5):
        store.record(pod(f"vc-{i}", start=at(0), finished=[at(i)]), at(100 + i))
    assert sorted(g.pod["metadata"]["name"] for g in store.in_namespaces(["ml"], at(200))["ml"]) == [
        "vc-2", "vc-3", "vc-4"]  # the oldest dropped first
    with pytest.raises(ValueError, match="timezone-aware"):
        store.record(full, dt.datetime(2026, 11, 30, 10))


def test_trim_pod_keeps_what_prices_a_spot_pod_when_nodes_cannot_be_read() -> None:
    from modalscale.api.capacity import SPOT_NODE_SELECTOR, SPOT_TIER

    body = pod("vc-1", start=at(0), deleting=at(50))
    body["spec"]["nodeSelector"] = dict(SPOT_NODE_SELECTOR)
    (run,) = gone_pod_runs([GonePod(trim_pod(body), at(60))])
    assert run.tier == SPOT_TIER


def test_a_pod_deleted_before_its_kubelet_wrote_a_start_time_is_charged_from_its_binding() -> None:
    # The recorded (trimmed) pod keeps what pod_start reads: bound at T0 + 10 s, deleted at T0 + 15 s before the
    # kubelet reported it: it ran at most [T0 + 10 s, T0 + 15 s), not from before the interval.
    body = pod("vc-1", deleting=at(15))
    body["metadata"]["creationTimestamp"] = text(at(9))
    body["status"]["conditions"] = [{"type": "Ready", "status": "False", "lastTransitionTime": text(at(9))},
                                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": text(at(10))}]
    (run,) = gone_pod_runs([GonePod(trim_pod(body), at(16))])
    assert (run.start, run.stop, run.bound) == (at(10), at(15), at(10))
    del body["status"]["conditions"]
    (run,) = gone_pod_runs([GonePod(trim_pod(body), at(16))])
    assert (run.start, run.stop) == (at(9), at(15))


def test_the_pod_watch_records_deletions_only_without_a_finalizer() -> None:
    import kopf

    from modalscale.operator.budget.handlers import register_budget
    from modalscale.operator.budget.runtime import BudgetRuntime
    from modalscale.operator.deps import Deps
    from modalscale.operator.settings import Settings

    registry = kopf.OperatorRegistry()
    register_budget(registry, Settings())
    (handler,) = [h for h in registry._watching.get_all_handlers() if h.selector.any_name == "pods"]
    # the replicas' and the request gateway's pods, nothing else
    assert handler.when is not None and handler.labels is None
    assert handler.when(labels={LABEL: "vc"}) and handler.when(labels={"modalscale.io/gateway": "vc"})
    assert not handler.when(labels={"app": "other"})
    # on.event: kopf puts no finalizer on pods (an on.delete handler would hold every pod deletion up).
    assert not any(h.selector.any_name == "pods" for h in registry._changing.get_all_handlers())
    runtime = BudgetRuntime(observer=None)  # type: ignore[arg-type]
    deps = Deps(settings=Settings(), observer=None, writer=None, metrics=None, clock=lambda: at(21),  # type: ignore
                catalog=None, autoscale=None, prices=None, budget=runtime)
    memo = kopf.Memo(deps=deps)
    body = pod("vc-1", start=at(-7200), deleting=at(50), finished=[at(20)])
    for kind in (None, "ADDED", "MODIFIED"):
        handler.fn(event={"type": kind, "object": body}, body=body, memo=memo, logger=None)
    assert len(runtime.gone_pods) == 0
    handler.fn(event={"type": "DELETED", "object": body}, body=body, memo=memo,
               logger=__import__("logging").getLogger("test"))
    (gone,) = runtime.gone_pods.in_namespaces(["ml"], at(60))["ml"]
    assert gone.seen_at == at(21) and gone_pod_runs([gone]) == (PodRun("vc-1", at(-7200), at(20)),)


def test_a_listed_pod_the_watch_saw_deleted_since_is_not_a_running_replica() -> None:
    from modalscale.api.budgetpolicy import parse_budget_spec
    from modalscale.operator.budget.plan import selected_services

    listed = [pod("vc-0", start=at(-7200)), pod("vc-1", start=at(-7200))]
    gone = {"ml": [GonePod(pod("vc-1", start=at(-7200), deleting=at(80), finished=[at(50)]), at(59))]}
    (svc,) = selected_services(parse_budget_spec(make_policy()["spec"]), "ml",
                               BudgetObserved([make_isvc()], {"ml": listed}, gone=gone), CATALOG)
    assert svc.replicas == 1 and svc.stopped == (PodRun("vc-1", at(-7200), at(50)),)
    # The ledger carries vc-0 as the one replica in force: the planner left vc-1 out already, and the ledger must
    # not leave it out a second time (the review of 094fb99: 0 in force, so vc-0 gone unseen next was charged
    # nothing).
    from modalscale.costmodel.ledger import Ledger, advance

    (entry,) = advance(Ledger(), [svc.observation()], at(60), "Daily").ledger.entries
    assert entry.replicas == 1


def test_a_listed_terminating_pod_whose_containers_all_finished_is_charged_to_the_finish_not_to_its_deadline() -> None:
    """Issue 21, scenario 1 (drain): an evicted replica's containers finish after its ``preStop`` drain, seconds
    before the kubelet removes the pod; an evaluation that lists it in between charged it to that evaluation (its
    ``deletionTimestamp``, the deadline, is still ahead), not to when it stopped. A terminating pod with one container
    still running stops at the deadline as before, and a running pod between restarts (no deletion) still runs."""
    start = at(-3600)
    runs = pod_runs([pod("a", start=start, deleting=at(90), finished=[at(5), at(8)]),
                     pod("b", start=start, deleting=at(90), finished=[at(5), None]),
                     pod("c", start=start, finished=[at(5)])])
    assert runs == (PodRun("a", start, at(8)), PodRun("b", start, at(90)), PodRun("c", start, None))


def test_the_pod_watch_records_replicas_gateway_and_image_encoder_pods_and_no_other() -> None:
    from modalscale.operator.budget.handlers import priced_pod

    assert priced_pod({"modalscale.io/inferenceservice": "vc"})
    assert priced_pod({"modalscale.io/gateway": "vc"})
    assert priced_pod({"modalscale.io/image-encoder": "vc", "modalscale.io/stage": "image-encoder"})
    assert not priced_pod({"app": "vc"})
