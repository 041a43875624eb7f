"""Benchmark (not a test): showback against the ledger over an hour on the real kubelet node (issue 22, section 2).

Two tenants send different mixes through the real gateway pods to real CPU-runtime Triton replicas for
``--duration-s`` (default 3600 s): ``acme`` image+text (small photos, each request a different one), ``globex`` text
only, each an open loop at its own rate. The InferenceService (Fixed mode) runs ``--replicas`` in phases of equal
length (default ``1,2,1``: the ledger's rate changes twice inside the window, so the check is not the trivial one of
a constant rate). A BudgetPolicy selects the service with a limit it never reaches (alerts only, no enforcement) and
evaluates every ``--interval-s``.

Measured: the ledger's spend of the service between two of its stored evaluations ``a`` (the first one at least
``--warmup-s`` after the loads started) and ``b`` (the first one at least ``--duration-s`` after ``a``),
``status.ledger.services[].spent``; and ``modalscale cost showback``'s figures over the same window read from
Prometheus (:class:`modalscale.operator.showback.PrometheusShowback`, the CLI's reader): each tenant's rows plus the
idle row. Printed: both sums, their ratio (issue 22's target: within +-1 %), each tenant's USD and USD per request by
modality, the idle share, the requests sent and answered per tenant, the replica phases as they happened, and the
machine's load. The window's length is whole seconds (Prometheus's ``[Ns]``); the ledger's part over the sub-second
rest is taken off at the rate ``a`` had in force (``costUSDPerHour``), an error below 1e-6 of the window's spend.

What is real: the local control plane with its real node, the operator subprocess (the budget loop writing the
ledger and exporting its rate), the gateway pods (the operator image) counting each tenant's requests and service
time, the CPU runtime replicas, Prometheus (the pinned build, 1 s scrapes, discovering the gateway pods like the
chart's PodMonitor). It needs the machine's one real node: run it alone (``flock /work/notes/realnode.lock``
where helpers share the machine).

Usage: .venv/bin/python benchmarks/showback_hour.py [--duration-s 3600] [--replicas 1,2,1] [--acme-rps 1.5]
       [--globex-rps 1.0] [--interval-s 10] [--warmup-s 120]
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import os
import sys
import tempfile
import threading
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

from kubernetes import client

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from modalscale.costmodel.catalog import PricingTier, ReplicaResources, price_replica  # noqa: E402
from modalscale.costmodel.ledger import parse_time  # noqa: E402
from modalscale.devenv.cluster import LocalCluster  # noqa: E402
from modalscale.devenv.images import build_images, import_into_cluster  # noqa: E402
from modalscale.devenv.kube import install_crds, wait_for  # noqa: E402
from modalscale.operator.showback import PrometheusShowback, build_showback  # noqa: E402
from tests.integration.operator.gateway_load import (  # noqa: E402
    EXAMPLE,
    GATEWAY_CPU,
    Env,
    distinct_images,
)
from tests.integration.operator.isvc_helpers import GROUP, PLURAL, VERSION  # noqa: E402
from tests.integration.operator.test_budget_tenant_real_node import (  # noqa: E402
    OpenLoop,
    operator_with_prometheus,
)

NAME, POLICY, LABEL = "showback", "showback-hour", {"bench": "showback-hour"}


def load() -> str:
    one, five, _ = os.getloadavg()
    return f"load {one:.1f}/{five:.1f} (1/5 min)"


def stored_ledger(env: Env) -> tuple[dt.datetime, Decimal, dict[str, Any]] | None:
    """(``status.ledger.observedTime``, the service's ``spent``, its entry) as stored now."""
    status = env.custom.get_namespaced_custom_object(GROUP, VERSION, env.ns, "budgetpolicies", POLICY).get(
        "status") or {}
    led = status.get("ledger") or {}
    entry = [e for e in led.get("services") or [] if e.get("name") == NAME]
    return (parse_time(led["observedTime"], "observedTime"), Decimal(entry[0]["spent"]), entry[0]) if entry else None


def ledger_at_or_after(env: Env, when: dt.datetime, timeout_s: float) -> tuple[dt.datetime, Decimal, dict[str, Any]]:
    return wait_for(lambda: (led := stored_ledger(env)) is not None and led[0] >= when and led, timeout_s,
                    f"a stored ledger evaluation at or after {when.isoformat()}", interval_s=1.0)


class PodMeter(threading.Thread):
    """The independent meter: every pod of the namespace as the API reports it, from a watch of its own (not the
    operator's, not its ledger code): each pod's run is ``status.startTime`` to its containers' last
    ``finishedAt`` (or, when it went without them, the moment the watch saw it deleted)."""

    def __init__(self, api: Any, ns: str) -> None:
        super().__init__(daemon=True)
        self.api, self.ns = api, ns
        self.pods: dict[str, dict[str, Any]] = {}
        self.stop = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        from kubernetes import watch

        while not self.stop.is_set():
            w = watch.Watch()
            try:
                for ev in w.stream(client.CoreV1Api(self.api).list_namespaced_pod, self.ns, timeout_seconds=30):
                    self._seen(ev["type"], ev["object"])
                    if self.stop.is_set():
                        break
            except Exception as exc:  # a broken watch is re-opened; a missed event shows in the figure
                print(f"  (meter watch re-opened: {type(exc).__name__})", flush=True)
            finally:
                w.stop()

    def _seen(self, kind: str, pod: Any) -> None:
        finished = [c.state.terminated.finished_at for c in pod.status.container_statuses or []
                    if c.state is not None and c.state.terminated is not None]
        done = (max(finished) if finished and len(finished) == len(pod.status.container_statuses or [])
                else None)
        with self._lock:
            rec = self.pods.setdefault(pod.metadata.name, {"labels": dict(pod.metadata.labels or {})})
            rec["start"] = pod.status.start_time or rec.get("start")
            if pod.spec.node_name is None:
                rec["start"] = None  # never bound: never ran
            if done is not None:
                rec["stop"] = min(done, rec.get("stop") or done)
            elif kind == "DELETED" and rec.get("stop") is None:
                rec["stop"] = dt.datetime.now(dt.UTC)

    def usd(self, label: str, name: str, usd_per_hour: Decimal, start: dt.datetime, end: dt.datetime) -> Decimal:
        """What the pods labelled ``label=name`` ran in ``[start, end)`` at ``usd_per_hour`` each."""
        seconds = 0.0
        with self._lock:
            for rec in self.pods.values():
                if rec["labels"].get(label) != name or rec.get("start") is None:
                    continue
                lo, hi = max(rec["start"], start), min(rec.get("stop") or end, end)
                seconds += max(0.0, (hi - lo).total_seconds())
        return usd_per_hour * Decimal(str(seconds)) / 3600


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration-s", type=int, default=3600, help="the compared window, s")
    ap.add_argument("--replicas", default="1,2,1", help="replicas of each phase (equal lengths), comma-separated")
    ap.add_argument("--acme-rps", type=float, default=1.5, help="acme's image+text requests per second")
    ap.add_argument("--globex-rps", type=float, default=1.0, help="globex's text requests per second")
    ap.add_argument("--interval-s", type=int, default=10, help="the policy's evaluationIntervalSeconds")
    ap.add_argument("--warmup-s", type=int, default=120, help="loads running before the window starts, s")
    args = ap.parse_args()
    phases = [int(x) for x in args.replicas.split(",")]
    if not phases or min(phases) < 1 or max(phases) > 2:
        ap.error("--replicas: 1 or 2 per phase (2 replicas of 500m and 2 gateway pods fill the real node)")
    print(f"showback vs ledger over {args.duration_s} s, replicas {phases}, acme image+text {args.acme_rps:g}/s, "
          f"globex text {args.globex_rps:g}/s, evaluation every {args.interval_s} s; {load()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-showback-") as tmp_name:
        tmp = Path(tmp_name)
        cluster = LocalCluster(tmp / "cluster")
        try:
            cluster.up(nodes=1, real_node=True)
            if not cluster.has_real_node:
                raise SystemExit(f"no real node: {cluster.real_node_status()['reason']}")
            api = cluster.api_client()
            install_crds(api, REPO / "crds")
            for b in build_images(log=lambda m: print(m, flush=True), repo=REPO):
                import_into_cluster(b, cluster.workdir, log=lambda m: print(m, flush=True))
            ns = f"showback-{uuid.uuid4().hex[:6]}"
            client.CoreV1Api(api).create_namespace({"metadata": {"name": ns}})
            prom, op = operator_with_prometheus(cluster, ns, tmp)
            try:
                op.wait_healthy()
                run(Env(api, ns, op), prom, args, phases)
            finally:
                op.stop()
                prom.stop()
        finally:
            cluster.down()


def run(env: Env, prom: Any, args: argparse.Namespace, phases: list[int]) -> None:
    env.create(NAME, {"mode": "Fixed", "replicas": phases[0], "minReplicas": 1, "maxReplicas": 2})
    env.custom.patch_namespaced_custom_object(GROUP, VERSION, env.ns, PLURAL, NAME, {"metadata": {"labels": LABEL}})
    meter = PodMeter(env.api, env.ns)
    meter.start()
    env.wait_serving(NAME, phases[0])
    url = env.url(NAME)
    acme = OpenLoop(url, "acme", args.acme_rps, images=distinct_images(200))
    globex = OpenLoop(url, "globex", args.globex_rps)
    env.custom.create_namespaced_custom_object(GROUP, VERSION, env.ns, "budgetpolicies", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "BudgetPolicy", "metadata": {"name": POLICY},
        "spec": {"selector": {"matchLabels": LABEL}, "period": "Monthly", "limit": {"amount": "1000"},
                 "thresholds": [{"percent": 100, "actions": ["Alert"]}],
                 "evaluationIntervalSeconds": args.interval_s}})
    changes: list[str] = []
    try:
        acme.start()
        globex.start()
        loads_at = dt.datetime.now(dt.UTC)
        a = ledger_at_or_after(env, loads_at + dt.timedelta(seconds=args.warmup_s), args.warmup_s + 180)
        print(f"window starts at the stored evaluation {a[0].isoformat()} (spent {a[1]} USD, "
              f"{a[2]['costUSDPerHour']} USD/h, {a[2]['replicas']} replicas); {load()}", flush=True)
        phase_s = args.duration_s / len(phases)
        for i, replicas in enumerate(phases[1:], start=1):
            at = a[0] + dt.timedelta(seconds=phase_s * i)
            wait_for(lambda at=at: dt.datetime.now(dt.UTC) >= at, phase_s + 60, "the next phase", interval_s=1.0)
            env.custom.patch_namespaced_custom_object(GROUP, VERSION, env.ns, PLURAL, NAME,
                                                      {"spec": {"scaling": {"replicas": replicas}}})
            ready_s = env.wait_serving(NAME, replicas)
            changes.append(f"{dt.datetime.now(dt.UTC).isoformat()} -> {replicas} replicas (Ready after "
                           f"{ready_s:.0f} s)")
            print(f"phase {i + 1}: {changes[-1]}; {load()}", flush=True)
        b = ledger_at_or_after(env, a[0] + dt.timedelta(seconds=args.duration_s), args.duration_s + 180)
        wait_for(lambda: time.time() > b[0].timestamp() + 3, 10, "Prometheus to scrape past the window")
    finally:
        acme.stop.set()
        globex.stop.set()
    whole_s = (b[0] - a[0]).total_seconds()
    window_s = int(whole_s)
    # the ledger over (a, b] less its part over the first (whole_s - window_s) s, at the rate a had in force
    ledger_usd = b[1] - a[1] - Decimal(a[2]["costUSDPerHour"]) * Decimal(str(whole_s - window_s)) / 3600
    shown = build_showback(*PrometheusShowback(prom.url).read(window_s, b[0]),
                           b[0] - dt.timedelta(seconds=window_s), b[0], env.ns)
    rows = [r for r in shown.rows if r.inferenceservice == NAME]
    showback_usd = sum((r.usd for r in rows), Decimal(0))
    print(f"\nwindow {window_s} s ({a[0].isoformat()} .. {b[0].isoformat()}), phases: "
          f"{a[2]['replicas']} replicas at the start; " + "; ".join(changes))
    for loop in (acme, globex):
        inside = loop.window(a[0].timestamp(), b[0].timestamp())
        outcomes = collections.Counter(r[2] for r in inside)
        print(f"  {loop.tenant}: {len(inside)} requests sent in the window, outcomes {dict(outcomes)}")
    for r in sorted(rows, key=lambda r: (r.kind, r.tenant or "", r.modality or "")):
        if r.kind != "idle" and not r.requests and not r.usd:
            continue  # a series the gateway creates at 0 (the default tenant) that never grew
        print(f"  {r.kind:8} {r.tenant or '-':8} {r.modality or '-':11} {r.usd:.9f} USD  per request "
              f"{r.usd_per_request if r.usd_per_request is not None else '-'}  replica_s {r.replica_s}  "
              f"requests {r.requests}  flags {list(r.flags)}")
    if shown.errors or shown.notes:
        print(f"  errors {shown.errors} notes {shown.notes}")
    # The independent meter over the same window: pod lifetimes x the catalog's prices (a replica at its
    # requests, a gateway pod at spec.gateway.resources), never the operator's ledger code.
    start = b[0] - dt.timedelta(seconds=window_s)
    replica_price = price_replica(ReplicaResources.from_quantities("500m", EXAMPLE["spec"]["resources"]["memory"]),
                                  PricingTier.ON_DEMAND)
    gateway_price = price_replica(ReplicaResources.from_quantities(GATEWAY_CPU, "256Mi"), PricingTier.ON_DEMAND)
    meter.stop.set()
    meter_usd = (meter.usd("modalscale.io/inferenceservice", NAME, replica_price, start, b[0])
                 + meter.usd("modalscale.io/gateway", NAME, gateway_price, start, b[0]))
    print(f"ledger {ledger_usd:.9f} USD vs the independent meter (pod lifetimes from a watch x the catalog's "
          f"{replica_price} USD/h per replica, {gateway_price} per gateway pod) {meter_usd:.9f} USD: "
          f"{(ledger_usd / meter_usd - 1) * 100:+.4f} % (issue 22's target: within +-0.1 %)")
    idle = sum((r.usd for r in rows if r.kind != "request"), Decimal(0))
    print(f"showback (tenants + idle) {showback_usd:.9f} USD (idle {idle:.9f}, {idle / showback_usd * 100:.1f} %) "
          f"vs the ledger {ledger_usd:.9f} USD: {(showback_usd / ledger_usd - 1) * 100:+.3f} % "
          f"(issue 22's target: within +-1 %); {load()}")


if __name__ == "__main__":
    main()
