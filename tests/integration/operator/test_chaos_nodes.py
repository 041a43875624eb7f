"""Issue 21, section 2: chaos scenarios on two real kubelet nodes, under request load through the gateway.

One control plane of this module's own with two real nodes (``real-node-0`` in the machine's network namespace,
``real-node-1`` in its own), taken from the session cluster, which gives its real node back afterwards (only one
cluster may hold the machine's real nodes; ``test_real_node.py`` does the same). A real ``modalscale operator``
process runs an InferenceService of the CPU runtime (2 replicas of 250m, 2 gateway pods of 100m: all four fit one
node's 750m share on a 2-core machine, so the pods of either node can move to the other) and a BudgetPolicy
evaluated every second that alerts a local Slack receiver.

Each scenario counts requests sent / answered / failed (:class:`Load`: 2 keep-alive connections through the
Service ``<name>``, i.e. kube-proxy -> a gateway pod -> a replica), compares the ledger with an independent meter
(:class:`Meter`: every pod's own run, from ``status.startTime`` to its containers' ``finishedAt`` or to when a
watch saw it deleted, x the catalog's price of its own CPU and memory requests) and counts the alerts per
threshold. The figures are printed (``-s``) and go to the chaos table of docs/benchmarks.md.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from modalscale.costmodel.catalog import ReplicaResources, load_catalog
from modalscale.costmodel.ledger import parse_time
from modalscale.devenv.cluster import LocalCluster
from modalscale.devenv.kube import install_crds, wait_for
from modalscale.devenv.receivers import ChatReceiver
from tests.integration.operator.gateway_load import Env, Load, images_imported, ready, start_operator
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

REPO = Path(__file__).resolve().parents[3]
NODES = ("real-node-0", "real-node-1")
REPLICA_CPU = "250m"
"""Each replica's CPU (request = limit): 2 replicas and the 2 gateway pods (100m) take 700m of one node's 750m."""
LEDGER_TOLERANCE_USD = Decimal("0.000001")
"""Ledger vs meter: both charge each pod from the kubelet's own start to its own stop at the same catalog price;
what may differ is rounding (1e-9 USD per pod and evaluation) and a stop the ledger took from the watch's
``seen_at`` instead of ``finishedAt`` (about a second: ~6e-6 USD/s in all here, so 1e-6 USD is a fraction of it)."""


class Meter:
    """The independent spend meter: a watch on the namespace's pods keeps each pod as last seen and when it was
    seen deleted; :meth:`usd` prices each pod's run at the catalog's on-demand price of its containers' requests.
    Use as a context manager (the watch runs in a thread)."""

    def __init__(self, api: Any, ns: str) -> None:
        self.core, self.ns = client.CoreV1Api(api), ns
        self.pods: dict[str, Any] = {}
        self.deleted_at: dict[str, dt.datetime] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._catalog = load_catalog()

    def _run(self) -> None:
        while not self._stop.is_set():
            w = watch.Watch()
            try:
                for ev in w.stream(self.core.list_namespaced_pod, self.ns, timeout_seconds=5):
                    pod = ev["object"]
                    with self._lock:
                        self.pods[pod.metadata.uid] = pod
                        if ev["type"] == "DELETED":
                            self.deleted_at.setdefault(pod.metadata.uid, dt.datetime.now(dt.UTC))
                    if self._stop.is_set():
                        break
            except Exception:  # a broken stream is listed again (the listing replays every pod)
                time.sleep(0.2)
            finally:
                w.stop()

    def __enter__(self) -> Meter:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def stop_of(self, uid: str) -> dt.datetime | None:
        """When pod ``uid`` stopped: its containers' latest ``finishedAt`` once all report one, else when the
        watch saw it deleted; None while it runs."""
        pod = self.pods[uid]
        finished = [s.state.terminated.finished_at for s in pod.status.container_statuses or []
                    if s.state and s.state.terminated and s.state.terminated.finished_at]
        if finished and len(finished) == len(pod.status.container_statuses):
            return max(finished)
        return self.deleted_at.get(uid)

    def price_usd_per_hour(self, pod: Any) -> Decimal:
        cpu = sum(Decimal(str(_cores(c.resources.requests.get("cpu", "0")))) for c in pod.spec.containers)
        mem = sum(_bytes(c.resources.requests.get("memory", "0")) for c in pod.spec.containers)
        return self._catalog.price_replica(ReplicaResources.from_quantities(cpu, mem), "OnDemand")

    def usd(self, at: dt.datetime) -> Decimal:
        """Spend of every pod seen, each from its start to its stop (or ``at`` when later or still running)."""
        total = Decimal(0)
        with self._lock:
            for uid, pod in self.pods.items():
                start = pod.status.start_time
                if start is None or not pod.spec.node_name:
                    continue
                stop = self.stop_of(uid)
                end = at if stop is None else min(stop, at)
                seconds = max(0.0, (end - start).total_seconds())
                total += self.price_usd_per_hour(pod) * Decimal(str(seconds)) / 3600
        return total

    def rate_usd_per_s(self) -> Decimal:
        """The pods running now, priced per second."""
        with self._lock:
            return sum((self.price_usd_per_hour(p) / 3600 for uid, p in self.pods.items()
                        if p.spec.node_name and p.status.start_time and self.stop_of(uid) is None), Decimal(0))


def _cores(quantity: str) -> float:
    from kubernetes.utils import parse_quantity

    return float(parse_quantity(quantity))


def _bytes(quantity: str) -> int:
    from kubernetes.utils import parse_quantity

    return int(parse_quantity(quantity))


@pytest.fixture(scope="module")
def two_nodes(real_node_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A control plane of its own with two real nodes (no KWOK nodes) and the CRDs; the session cluster's real
    node is stopped meanwhile and started again afterwards."""
    real_node_cluster.stop_real_node()
    two = LocalCluster(tmp_path_factory.mktemp("chaos-two"), log=lambda m: print(m, flush=True))
    try:
        try:
            started = time.monotonic()
            two.up(nodes=0, real_node=True, real_nodes=2)
            assert two.has_real_node and two.real_node_names == list(NODES)
            api = two.api_client()
            install_crds(api, REPO / "crds")
            api.close()
            print(f"\ntwo real nodes Ready, CRDs installed: {time.monotonic() - started:.1f} s")
            yield two
        finally:
            two.down()
    finally:
        real_node_cluster.up(nodes=2, real_node=True)


@pytest.fixture(scope="module")
def chaos(two_nodes: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """Both images imported into both nodes; a namespace and an operator process watching only it."""
    print(f"images built/found and imported into both nodes in {images_imported(two_nodes.workdir):.1f} s")
    api = two_nodes.api_client()
    ns = f"chaos-{uuid.uuid4().hex[:6]}"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": ns}})
    op = None
    try:
        op = start_operator(two_nodes.kubeconfig, ns, tmp_path_factory.mktemp("chaos-operator") / "operator.log")
        yield Env(api, ns, op)
    finally:
        if op is not None:
            op.stop()
        api.close()


def kubectl(cluster: LocalCluster, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess[str]:
    """The pinned kubectl against ``cluster`` (output captured, never raises on a non-zero exit)."""
    from modalscale.devenv.binaries import ensure_binaries

    exe = ensure_binaries(lambda _m: None).kubectl
    return subprocess.run([str(exe), f"--kubeconfig={cluster.kubeconfig}", *args], capture_output=True, text=True,
                          timeout=timeout_s, check=False)


class ReadyCounts:
    """Samples, every 0.2 s until stopped, the Ready and not terminating pods of ``selectors`` (a thread)."""

    def __init__(self, env: Env, **selectors: str) -> None:
        self.env, self.selectors = env, selectors
        self.samples: list[dict[str, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            pods = self.env.core.list_namespaced_pod(self.env.ns).items
            counts = {}
            for key, selector in self.selectors.items():
                k, v = selector.split("=", 1)
                counts[key] = sum(1 for p in pods if (p.metadata.labels or {}).get(k) == v
                                  and p.metadata.deletion_timestamp is None and ready(p))
            self.samples.append(counts)
            self._stop.wait(0.2)

    def __enter__(self) -> ReadyCounts:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def least(self, key: str) -> int:
        return min(s[key] for s in self.samples)


def _budget(env: Env, meter: Meter, slack: ChatReceiver, lead_s: float) -> list[int]:
    """A BudgetPolicy over the namespace, evaluated every second, alerting Slack at 50, 60 and 70 %, whose limit
    puts 50 % ``lead_s`` seconds ahead of the meter at the current rate; returns the percents."""
    percents = [50, 60, 70]
    make_secret(env.api, env.ns, "slack-hook", url=slack.url)
    now = dt.datetime.now(dt.UTC)
    limit = (meter.usd(now) + meter.rate_usd_per_s() * Decimal(lead_s)) / Decimal("0.5")
    env.custom.create_namespaced_custom_object("modalscale.io", "v1alpha1", env.ns, "budgetpolicies", make_policy(
        "budget", f"{limit:.6f}", [{"percent": p, "actions": ["Alert"]} for p in percents],
        [{"name": "team-slack", "type": "Slack", "secretRef": {"name": "slack-hook"}}]))
    return percents


def _ledger_vs_meter(env: Env, meter: Meter, after: dt.datetime) -> tuple[Decimal, Decimal, str]:
    """The ledger of the first evaluation after ``after`` (UTC) and the meter at its ``observedTime``."""

    def evaluated() -> dict[str, Any] | None:
        status = get_policy(env.api, env.ns, "budget").get("status") or {}
        observed = (status.get("ledger") or {}).get("observedTime")
        return status if observed and parse_time(observed, "observedTime") > after else None

    status = wait_for(evaluated, 60, "an evaluation after the chaos")
    observed = parse_time(status["ledger"]["observedTime"], "observedTime")
    return ledger_spent(status), meter.usd(observed), status["ledger"]["observedTime"]


def test_drain_of_the_node_holding_the_replicas_moves_them_under_load_and_fails_no_request(
        chaos: Env, two_nodes: LocalCluster) -> None:
    """Scenario 1: every pod of the service (2 replicas, 2 gateway pods) on real-node-0, 2 keep-alive connections
    sending requests through the Service, then ``kubectl drain real-node-0``. The operator's PodDisruptionBudgets
    let the eviction take one replica and one gateway pod at a time, so a Ready one of each is always left, and the
    preStop drain lets every request in flight on an evicted pod finish: every pod ends on real-node-1, no request
    fails or is refused, requests are answered throughout, the ledger equals the meter and each threshold alerts
    once."""
    env, test_started = chaos, time.monotonic()
    name = "drain"
    replicas, gateways = f"modalscale.io/inferenceservice={name}", f"modalscale.io/gateway={name}"
    source, target = NODES
    assert kubectl(two_nodes, "cordon", target).returncode == 0
    env.create(name, {"mode": "Fixed", "replicas": 2, "minReplicas": 1, "maxReplicas": 2}, cpu=REPLICA_CPU)
    with Meter(env.api, env.ns) as meter, ChatReceiver("Slack") as slack:
        try:
            print(f"\n2 replicas + 2 gateway pods Ready on {source} after {env.wait_serving(name, 2):.1f} s")
            assert {p.spec.node_name for p in env.pods(replicas) + env.pods(gateways)} == {source}
            assert kubectl(two_nodes, "uncordon", target).returncode == 0
            percents = _budget(env, meter, slack, lead_s=15)
            with Load(env.url(name)) as load:
                env.wait(lambda: len(load.answered) >= 10, 120, "10 answers before the drain", name)
                with ReadyCounts(env, replicas=replicas, gateways=gateways) as counts:
                    drained = time.monotonic()
                    out = kubectl(two_nodes, "drain", source, "--ignore-daemonsets", "--delete-emptydir-data",
                                  "--timeout=240s")
                    drain_s = time.monotonic() - drained
                    assert out.returncode == 0, out.stdout + out.stderr + env.describe(name)
                    moved_s = env.wait_serving(name, 2, timeout_s=240) + drain_s
                mark = time.monotonic()
                env.wait(lambda: load.answers_since(mark) >= 10, 120, "10 answers after the drain", name)
            ended = dt.datetime.now(dt.UTC)
            nodes = {p.metadata.name: p.spec.node_name for p in env.pods(replicas) + env.pods(gateways)}
            failed, refused = load.failed_since(drained), load.refused_since(drained)
            during = sum(1 for a in load.answered if drained <= a <= drained + drain_s)
            times = sorted(load.answered)
            gaps = [b - a for a, b in zip(times, times[1:], strict=False) if a >= drained]
            sent = len(load.answered) + len(load.failed) + len(load.refused)
            blocked = out.stdout.count("violate the pod's disruption budget") + \
                out.stderr.count("violate the pod's disruption budget")
            print(f"scenario 1: drain of {source} took {drain_s:.1f} s (evictions refused by a PodDisruptionBudget "
                  f"and retried: {blocked}); all 4 pods Ready on {target} {moved_s:.1f} s after it began; requests "
                  f"sent {sent} / answered {len(load.answered)} / failed {len(load.failed)} (refused "
                  f"{len(load.refused)}); since the drain began: answered {load.answers_since(drained)}, "
                  f"{during} during it, failed {len(failed)} {[f[1] for f in failed]}, refused {len(refused)}; "
                  f"longest wait between two answers {max(gaps, default=0.0):.2f} s; Ready replicas never below "
                  f"{counts.least('replicas')}, Ready gateway pods never below {counts.least('gateways')} "
                  f"({len(counts.samples)} samples)")
            print(out.stdout[-3000:], out.stderr[-2000:])
            assert set(nodes.values()) == {target}, nodes
            assert failed == [] and refused == [], (failed, refused)
            assert during > 0, "no request was answered while the node drained"
            assert counts.least("replicas") >= 1 and counts.least("gateways") >= 1, counts.samples

            alerted = wait_for(lambda: (s := get_policy(env.api, env.ns, "budget").get("status") or {})
                               and thresholds_alerted(s) == percents and not s.get("pendingAlerts") and s,
                               120, f"the {percents} % alerts delivered")
            assert alerted
            spent, metered, at = _ledger_vs_meter(env, meter, ended)
            alerts = {p: percents_in(titles(slack)).count(p) for p in percents}
            print(f"scenario 1: ledger {spent} USD vs meter {metered:.9f} USD at {at} "
                  f"({spent - metered:+.9f} USD); alerts per threshold {alerts}")
            assert abs(spent - metered) <= LEDGER_TOLERANCE_USD, (spent, metered)
            assert alerts == {p: 1 for p in percents}, titles(slack)
        finally:
            kubectl(two_nodes, "uncordon", source)
            kubectl(two_nodes, "uncordon", target)
            print(f"scenario 1 took {time.monotonic() - test_started:.1f} s")
