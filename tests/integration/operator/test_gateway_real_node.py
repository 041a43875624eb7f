"""The request gateway on the real kubelet node, end to end (issue 19): the operator (a real ``modalscale operator``
process) puts ``modalscale gateway`` pods (the operator image, imported into the node's containerd) in front of
real CPU-runtime Triton replicas; every request below goes from this process through the ClusterIP Service
``<name>`` (kube-proxy) to a gateway pod and from there to a replica.

Each replica's own request counter (Triton's ``nv_inference_request_success`` on the pod's :8002) is what the
balance and "never cost a replica" checks read. Real Triton pods are few (the node has 2 cores): 2 replicas of
500m and gateway pods of 100m. Durations and per-replica counts are printed (``-s``)."""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client

from modalscale.costmodel.ledger import parse_time
from modalscale.devenv.receivers import ChatReceiver
from tests.integration.operator.gateway_load import (
    MAX_BODY_BYTES,
    MODEL,
    Env,
    Load,
    distinct_images,
    images_imported,
    ready,
    start_operator,
)
from tests.integration.operator.isvc_helpers import GROUP, PLURAL, VERSION, get
from tests.integration.operator.meter import pod_usd_per_hour, pods_usd
from tests.integration.operator.test_budget import (
    get_policy,
    ledger_spent,
    make_policy,
    make_secret,
    percents_in,
    thresholds_alerted,
    titles,
)

pytestmark = pytest.mark.timeout(900)
LEDGER_TOLERANCE_USD = Decimal("0.000001")
"""Ledger vs meter: both charge each pod from the kubelet's own start at the same catalog price; rounding only
(1e-9 USD per pod and evaluation)."""


@pytest.fixture(scope="module")
def env(real_node_cluster: Any, api: Any, crds_installed: list[str],
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """Both images built from this tree (cached when unchanged) and imported into the real node; a namespace and
    an operator process watching only it (its gateway pods get the default image, the operator image)."""
    print(f"images built/found and imported in {images_imported(real_node_cluster.workdir):.1f} s")
    ns = f"gwreal-{uuid.uuid4().hex[:6]}"
    core = client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": ns}})
    op = None
    try:
        op = start_operator(real_node_cluster.kubeconfig, ns, tmp_path_factory.mktemp("gw-operator") / "operator.log")
        env = Env(api, ns, op)
        yield env
        op = env.op  # a test may have killed it and started another (e)
    finally:
        if op is not None:
            op.stop()
        core.delete_namespace(ns)


def _send(url: str, n: int, connections: int, images: list[bytes]) -> tuple[int, list[str]]:
    """``connections`` threads, each with one keep-alive connection (one ``MultimodalClient``), ``n`` requests
    each, request ``i`` of connection ``k`` carrying ``images[(k * n + i) % len(images)]``; returns (answered,
    errors)."""
    from modalscale.runtime.client import MultimodalClient

    answered, errors, lock = [0], [], threading.Lock()

    def worker(k: int) -> None:
        with MultimodalClient(url, model_name=MODEL, timeout_s=300) as c:
            for i in range(n):
                try:
                    image = images[(k * n + i) % len(images)]
                    assert c.infer(images=[image], text="coffee in a cup").modality == "image_text"
                    with lock:
                        answered[0] += 1
                except Exception as exc:  # every failure fails the caller's assertion
                    errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    return answered[0], errors


def test_two_keep_alive_connections_through_the_gateway_are_balanced_and_bad_input_never_reaches_a_replica(
        env: Env) -> None:
    """(a) 2 replicas behind the gateway; 2 keep-alive connections through Service <name> (the issue measured
    120/0/0 through kube-proxy alone): each replica's own success counter gets a balanced share. (b) The bad-input
    table through the gateway: 400 naming the field, and no replica's counters move."""
    from tests.unit.gateway.test_gateway_features import JPEG, _binary, _wrong_datatype

    test_started = time.monotonic()
    name = "gw"
    env.create(name, {"mode": "Fixed", "replicas": 2, "minReplicas": 1, "maxReplicas": 2},
               maxBodyBytes=MAX_BODY_BYTES)
    try:
        print(f"\n2 replicas + 2 gateway pods Ready, Service on the gateway after {env.wait_serving(name, 2):.1f} s")
        url = env.url(name)
        per_connection = 30
        images = distinct_images(2 * per_connection)
        before = env.counters(name)
        assert len(before) == 2, before
        started = time.monotonic()
        answered, errors = _send(url, per_connection, 2, images)
        took_s = time.monotonic() - started
        after = env.counters(name)
        served = {pod: after[pod][0] - before[pod][0] for pod in before}
        print(f"(a) 2 keep-alive connections x {per_connection} requests through the gateway in {took_s:.1f} s: "
              f"answered {answered}, errors {len(errors)}; per replica {served}")
        assert errors == [] and answered == 2 * per_connection, errors[:5]
        assert sum(served.values()) == answered, (served, answered)
        # 60 distinct images placed by consistent hashing: a replica's count is about Binomial(60, its ring share);
        # below 15 is a 0.004 % draw at an even ring and 0.12 % at a 43 / 57 one. kube-proxy alone gives 60 / 0 here.
        assert min(served.values()) >= 0.25 * answered, f"unbalanced: {served}"

        # (b) the bad-input table: (body, headers, field named in the 400)
        table: dict[str, tuple[bytes, dict[str, str], str]] = {
            "oversized body": (*_binary([JPEG] * (MAX_BODY_BYTES // len(JPEG) + 2)), "body"),
            "truncated JPEG header": (*_binary([JPEG[:600]]), "inputs[IMAGES].data[0]"),
            "wrong datatype": (*_wrong_datatype(), "inputs[IMAGES].datatype"),
        }
        before = env.counters(name)
        with httpx.Client(base_url=f"http://{url}", timeout=60) as http:
            for case, (body, headers, field) in table.items():
                r = http.post(f"/v2/models/{MODEL}/infer", content=body,
                              headers={"Content-Type": "application/octet-stream", **headers})
                print(f"(b) {case} ({len(body)} bytes): {r.status_code} {r.text[:200]}")
                assert r.status_code == 400, (case, r.status_code, r.text)
                assert field in r.json()["error"], (case, r.text)
        after = env.counters(name)
        assert after == before, f"a bad request reached a replica: before {before}, after {after}"
    finally:
        env.remove(name)
        print(f"test (a)+(b) took {time.monotonic() - test_started:.1f} s")


def test_requests_sent_at_zero_replicas_are_all_answered_once_the_activated_replica_is_ready(env: Env) -> None:
    """(c) minReplicas 0: at creation the service is scaled to zero (only the gateway runs). Requests sent then
    are held by the gateway, which asks the operator for a replica; all are answered once it is Ready, and the
    added latency over the pod's own time to Ready is printed."""
    from modalscale.runtime.client import MultimodalClient
    from modalscale.runtime.workload import photo_at

    test_started = time.monotonic()
    name = "cold"
    env.create(name, {"mode": "Predictive", "minReplicas": 0, "maxReplicas": 1, "scaleToZeroAfterSeconds": 60,
                      "decisionIntervalSeconds": 300}, queue={"timeoutSeconds": 300})
    try:
        print(f"\nscaled to zero with 2 Ready gateway pods after {env.wait_serving(name, 0):.1f} s")
        assert env.apps.read_namespaced_deployment(name, env.ns).spec.replicas == 0
        url = env.url(name)
        image = photo_at("coffee", 160, 120)
        results: list[tuple[float, str | None]] = []

        def one() -> None:
            try:
                with MultimodalClient(url, model_name=MODEL, timeout_s=300) as c:
                    c.infer(images=[image], text="a cold start")
                results.append((time.monotonic(), None))
            except Exception as exc:  # recorded, fails the assertion below
                results.append((time.monotonic(), f"{type(exc).__name__}: {exc}"))

        sent = time.monotonic()
        threads = [threading.Thread(target=one) for _ in range(3)]
        for t in threads:
            t.start()
        created: list[float] = []
        ready_at: list[float] = []

        def replica_ready() -> bool:
            pods = env.pods(f"modalscale.io/inferenceservice={name}")
            if pods and not created:
                created.append(time.monotonic())
            if any(ready(p) for p in pods):
                ready_at.append(time.monotonic())
                return True
            return False

        try:
            env.wait(replica_ready, 420, "the activated replica Ready", name)
        except AssertionError as exc:  # what the clients got and what the gateway asked (CI of stop 38)
            annotations = get(env.api, env.ns, name)["metadata"].get("annotations")
            raise AssertionError(f"{exc}\nclients so far: {results}\nannotations: {annotations}") from None
        for t in threads:
            t.join(timeout=400)
        failed = [e for _, e in results if e]
        last_answer = max(t for t, _ in results)
        print(f"(c) 3 requests sent at zero: answered {len(results) - len(failed)}, failed {len(failed)}; "
              f"replica pod created {created[0] - sent:.1f} s after the first request, Ready after "
              f"{ready_at[0] - sent:.1f} s (its own time to Ready {ready_at[0] - created[0]:.1f} s); last answer "
              f"{last_answer - sent:.1f} s after sending, {last_answer - ready_at[0]:.1f} s after the pod was "
              f"seen Ready (0.5 s polls)")
        assert len(results) == 3 and failed == [], failed
        status = get(env.api, env.ns, name)["status"]
        assert [(h["from"], h["to"], h["reason"]) for h in status["scalingHistory"]][-1] == (0, 1, "Activated")
    finally:
        env.remove(name)
        print(f"test (c) took {time.monotonic() - test_started:.1f} s")


def _gateway_metric(pod: Any, name: str) -> float:
    """Sum of the samples of ``name`` on a gateway pod's metrics port (9090)."""
    from modalscale.runtime.client import scrape_metrics

    m = scrape_metrics(f"http://{pod.status.pod_ip}:9090/metrics")
    return sum(v for k, v in m.items() if k == name or k.startswith(name + "{"))


def _gateway_requests(pod: Any) -> float:
    return _gateway_metric(pod, "modalscale_gateway_requests_total")


def _container_pids(container_id: str) -> list[int]:
    """PIDs on this machine of the container ``container_id`` (the real node's containers are host processes)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if container_id in (entry / "cgroup").read_text():
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def test_a_killed_gateway_pod_and_a_1_3_1_cycle_under_load(env: Env) -> None:
    """(d) Under a steady load of 2 keep-alive connections through Service <name>: one gateway pod's processes
    are SIGKILLed (the other carries on; the failures are at most the connections that were on the killed one),
    then the replicas go 1 -> 3 -> 1 with no failed request. Replicas of 400m so 3 of them and the 2 gateway pods
    fit the node's 1500m."""
    import os
    import signal

    test_started = time.monotonic()
    name = "gwha"
    env.create(name, {"mode": "Fixed", "replicas": 1, "minReplicas": 1, "maxReplicas": 3}, cpu="400m")
    gateways = f"modalscale.io/gateway={name}"
    replicas = f"modalscale.io/inferenceservice={name}"

    def scale(n: int) -> None:
        env.custom.patch_namespaced_custom_object(GROUP, VERSION, env.ns, PLURAL, name,
                                                  {"spec": {"scaling": {"replicas": n}}})

    try:
        print(f"\n1 replica + 2 gateway pods Ready after {env.wait_serving(name, 1):.1f} s")
        with Load(env.url(name)) as load:
            env.wait(lambda: len(load.answered) >= 10, 120, "10 answers before the kill", name)
            # The victim is the gateway pod the connections go through (kube-proxy placed them): the one whose
            # request counter moves most over 2 s.
            first = {p.metadata.name: _gateway_requests(p) for p in env.ready_pods(gateways)}
            time.sleep(2)
            moved = {p.metadata.name: (_gateway_requests(p) - first.get(p.metadata.name, 0.0), p)
                     for p in env.ready_pods(gateways)}
            victim = max(moved.values(), key=lambda m: m[0])[1]
            inflight = _gateway_metric(victim, "modalscale_gateway_inflight_requests")
            cid = victim.status.container_statuses[0].container_id.split("://", 1)[1]
            restarts = victim.status.container_statuses[0].restart_count
            pids = _container_pids(cid)
            assert pids, f"no process of gateway container {cid}"
            killed = time.monotonic()
            for pid in pids:
                os.kill(pid, signal.SIGKILL)

            def victim_back() -> bool:
                p = env.core.read_namespaced_pod(victim.metadata.name, env.ns)
                return ready(p) and p.status.container_statuses[0].restart_count > restarts

            back_s = env.wait(victim_back, 120, "the killed gateway container restarted and Ready", name)
            env.wait(lambda: load.answers_since(time.monotonic() - 3) > 0, 60, "answers after the restart", name)
            kill_failed = load.failed_since(killed)
            refused = [t - killed for t in load.refused_since(killed)]
            print(f"(d) requests per gateway pod over 2 s: { {n: m[0] for n, m in moved.items()} }; gateway "
                  f"{victim.metadata.name} ({inflight:.0f} in flight just before) SIGKILLed: back Ready after "
                  f"{back_s:.1f} s; answered "
                  f"{load.answers_since(killed)} since, failed {len(kill_failed)}: {[f[1] for f in kill_failed]}; "
                  f"connections refused (retried) {len(refused)}, the last {max(refused, default=0.0):.2f} s after "
                  f"the kill")
            # The 2 connections: both on the victim when the other gateway pod counted none, else one each.
            on_victim = 2 if all(m[0] == 0 for n, m in moved.items() if n != victim.metadata.name) else 1
            assert len(kill_failed) <= on_victim, (on_victim, kill_failed)

            cycle = time.monotonic()
            scale(3)
            up_s = env.wait(lambda: len(env.ready_pods(replicas)) == 3, 300, "3 Ready replicas", name)
            mark, before = time.monotonic(), env.counters(name)
            env.wait(lambda: load.answers_since(mark) >= 20, 180, "20 answers with 3 replicas", name)
            after = env.counters(name)
            counts = {pod: after[pod][0] - before.get(pod, (0.0, 0.0))[0] for pod in after}
            scale(1)
            down_s = env.wait(lambda: len(env.core.list_namespaced_pod(env.ns, label_selector=replicas).items) == 1,
                              300, "1 replica left, the other two drained and gone", name)
            mark = time.monotonic()
            env.wait(lambda: load.answers_since(mark) >= 5, 60, "5 answers after the scale-down", name)
        cycle_failed, cycle_refused = load.failed_since(cycle), load.refused_since(cycle)
        print(f"(d) 1 -> 3 in {up_s:.1f} s, 3 -> 1 in {down_s:.1f} s: answered {load.answers_since(cycle)}, failed "
              f"{len(cycle_failed)} {[f[1] for f in cycle_failed]}, refused {len(cycle_refused)}; per replica at 3: "
              f"{counts}")
        assert cycle_failed == [] and cycle_refused == [], (cycle_failed, cycle_refused)
    finally:
        env.remove(name)
        print(f"test (d) took {time.monotonic() - test_started:.1f} s")


def _thresholds(env: Env, lead_s: float, second_s: float) -> tuple[str, int, int]:
    """A daily limit and two alert thresholds for the namespace's pods now running: the first crossed ``lead_s`` s
    from now, the second about ``second_s`` s from now (the pods' spend grows by their price each second; the
    percents are whole, so the second comes a few seconds later at most). Returns (limit USD, first %, second %)."""
    now = dt.datetime.now(dt.UTC)
    pods = env.pods("")
    rate_usd_per_s = sum((pod_usd_per_hour(p) / 3600 for p in pods), Decimal(0))
    spent = pods_usd(pods, now)
    first = 20
    at_lead, at_second = spent + rate_usd_per_s * Decimal(lead_s), spent + rate_usd_per_s * Decimal(second_s)
    limit = at_lead * 100 / first
    second = math.ceil(first * at_second / at_lead)
    assert first < second <= 100, (first, second)
    return f"{limit:.6f}", first, second


def test_the_apiserver_restarted_under_load_fails_no_request_and_deletes_nothing(env: Env,
                                                                                real_node_cluster: Any,
                                                                                tmp_path: Path) -> None:
    """(e) Issue 21, chaos scenarios 3 and 7 under load, with a budget: two operator replicas under kopf peering
    (as the chart's two replicas run: the newer one acts, the older stands by), 2 keep-alive connections through
    Service <name> (gateway pods -> a real replica) while the acting operator is SIGKILLed (mid-evaluation: its
    policy evaluates every second) and the standby takes over once the dead peer's record expires (within the
    30 s peering lifetime), then the kube-apiserver is SIGKILLed and kept down 15 s and started again, and a
    BudgetPolicy over the namespace alerts a local Slack receiver. The data path needs neither the operator nor
    the apiserver (kube-proxy's rules, the gateway's endpoint cache, the kubelet's pods stay): no request fails or
    is refused, no pod is deleted or restarted, and the standby applies a spec change made after both. The
    threshold alerted before the kill is not alerted again, the one crossed after the restart once, and the ledger
    of an evaluation after the restart equals an independent meter of the pods' own runs x the catalog's price
    (the takeover's gap and the outage charged too)."""
    name = "gwapi"
    env.create(name, {"mode": "Fixed", "replicas": 1, "minReplicas": 1, "maxReplicas": 2}, cpu="400m")
    everything = f"app.kubernetes.io/instance={name}"
    replicas = f"modalscale.io/inferenceservice={name}"

    def pods_now() -> dict[str, int]:
        return {p.metadata.uid: sum(c.restart_count for c in p.status.container_statuses or [])
                for p in env.core.list_namespaced_pod(env.ns).items}

    def policy_status() -> dict[str, Any]:
        return dict(get_policy(env.api, env.ns, "budget").get("status") or {})

    # The module's standalone operator makes way for two peered replicas; the older one stays the module's operator
    # once the newer one is killed (the fixture stops env.op).
    peering = {"MODALSCALE_STANDALONE": "false", "MODALSCALE_PEERING_NAME": f"peers-{env.ns}"}
    env.op.stop()
    standby = env.op = start_operator(real_node_cluster.kubeconfig, env.ns, tmp_path / "operator-a.log", **peering)
    leader = start_operator(real_node_cluster.kubeconfig, env.ns, tmp_path / "operator-b.log", **peering)
    with ChatReceiver("Slack") as slack:
        try:
            env.wait(lambda: leader.peering_active() and not standby.peering_active(), 60,
                     "the newer operator acting, the older one standing by", name)
            print(f"\n1 replica + 2 gateway pods Ready after {env.wait_serving(name, 1):.1f} s")
            before = pods_now()
            assert len(before) == 3, env.describe(name)
            # The first threshold 8 s ahead (alerted before the kills), the second ~85 s ahead (after the restart:
            # the standby's takeover up to 30 s, then the apiserver's 15 s down and its start).
            limit, first, second = _thresholds(env, lead_s=8, second_s=85)
            make_secret(env.api, env.ns, "slack-hook", url=slack.url)
            env.custom.create_namespaced_custom_object(GROUP, VERSION, env.ns, "budgetpolicies", make_policy(
                "budget", limit, [{"percent": p, "actions": ["Alert"]} for p in (first, second)],
                [{"name": "team-slack", "type": "Slack", "secretRef": {"name": "slack-hook"}}]))
            with Load(env.url(name)) as load:
                env.wait(lambda: len(load.answered) >= 10, 120, "10 answers before the restart", name)
                env.wait(lambda: thresholds_alerted(s := policy_status()) == [first] and not s.get("pendingAlerts"),
                         60, f"the {first} % alert delivered and recorded before the kill", name)
                assert not standby.peering_active(), "the standby acted before the kill"
                op_killed = time.monotonic()
                leader.kill(signal.SIGKILL)
                env.wait(standby.peering_active, 60, "the standby's takeover", name)
                op_back_s = time.monotonic() - op_killed
                env.wait(lambda: load.answers_since(op_killed) >= 10, 120, "10 answers after the operator's kill",
                         name)
                killed = time.monotonic()
                back_s = real_node_cluster.restart_apiserver(down_s=15)
                restarted = dt.datetime.now(dt.UTC)
                mark = time.monotonic()
                env.wait(lambda: load.answers_since(mark) >= 10, 120, "10 answers after the restart", name)
            during = [t for t in load.answered if killed <= t <= killed + back_s]
            failed, refused = load.failed_since(op_killed), load.refused_since(op_killed)
            print(f"(e) acting operator SIGKILLed, the standby acting {op_back_s:.1f} s later: answered "
                  f"{load.answers_since(op_killed) - load.answers_since(killed)} until the apiserver's kill; "
                  f"apiserver down {back_s:.1f} s (killed, then ready again): answered {len(during)} meanwhile, "
                  f"{load.answers_since(op_killed)} since the operator's kill; failed {len(failed)} "
                  f"{[f[1] for f in failed]}, refused {len(refused)}")
            assert failed == [] and refused == [], (failed, refused)
            # kopf's peering: the dead peer's record expires 30 s after its last keepalive (every 20-25 s), so the
            # standby resumes 5-30 s after the kill, plus its own wake-up and this 0.5 s poll of its log (24.0 s at
            # the first run); 5 s of slack for a loaded machine.
            assert op_back_s <= 30 + 5, op_back_s
            assert len(during) > 0, "no request was answered while the apiserver was down"
            assert pods_now() == before, (before, pods_now())

            # The evaluations resume: the second threshold alerted once, the first never again; the ledger of that
            # evaluation (after the restart) = the pods' own runs x price, the outage included.
            env.wait(lambda: thresholds_alerted(s := policy_status()) == [first, second]
                     and not s.get("pendingAlerts"), 120, f"the {second} % alert delivered after the restart", name)
            status = policy_status()
            observed = parse_time(status["ledger"]["observedTime"], "observedTime")
            assert observed > restarted, (observed, restarted)
            spent, metered = ledger_spent(status), pods_usd(env.pods(""), observed)
            alerts = percents_in(titles(slack))
            print(f"(e) budget: limit {limit} USD, alerts {alerts} ({first} % before the kill, {second} % after the "
                  f"restart); ledger {spent} USD vs meter {metered:.9f} USD at {status['ledger']['observedTime']} "
                  f"({spent - metered:+.9f} USD)")
            assert alerts == [first, second], titles(slack)
            assert abs(spent - metered) <= LEDGER_TOLERANCE_USD, (spent, metered)

            env.custom.patch_namespaced_custom_object(GROUP, VERSION, env.ns, PLURAL, name,
                                                      {"spec": {"scaling": {"replicas": 2}}})
            env.wait(lambda: len(env.ready_pods(replicas)) == 2, 300, "a second Ready replica after the restart",
                     name)
            assert {p.metadata.uid for p in env.pods(everything)} >= set(before)
            assert percents_in(titles(slack)) == [first, second], titles(slack)
        finally:
            leader.stop()
            with contextlib.suppress(client.exceptions.ApiException):
                env.custom.delete_namespaced_custom_object(GROUP, VERSION, env.ns, "budgetpolicies", "budget")
            env.remove(name)
