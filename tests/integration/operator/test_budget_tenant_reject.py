"""Per-tenant budgets at admission, end to end on a KWOK-only control plane (no real node, no lock needed).

What is real: the control plane and a KWOK H100 node (the InferenceService's pod is priced there), the
``modalscale operator`` subprocess, a real Prometheus scraping the operator's ``/metrics`` (the ledger's rates) and
the gateway's (per-tenant counters), the gateway itself (in this process, in front of a real tritonserver, with
its real watch on the InferenceService through the apiserver), and the clients. Two tenants send requests; a
tenant-scoped BudgetPolicy with a tiny limit for ``acme`` only: the operator writes the reject annotation, the
gateway refuses acme (429, Retry-After to the period's end) while globex is served throughout; with Prometheus down
the rejection is held (never lifted or added on missing data); a raised limit lifts it.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from modalscale.api.annotations import reject_annotation_key, tenants_annotation_key
from modalscale.costmodel.ledger import parse_time
from modalscale.devenv.kube import wait_for
from modalscale.gateway.isvc_watch import InferenceServiceWatch
from modalscale.gateway.settings import GatewaySettings
from tests.integration.gateway.conftest import MODEL, RunningGateway, endpoint, start_replica, text_request
from tests.integration.operator.test_budget import (
    GPU_TYPE,
    GROUP,
    REPO,
    VERSION,
    condition,
    custom,
    get_isvc,
    get_policy,
    make_policy,
    make_secret,
    start_isvc,
)

NS, SVC, POLICY = "default", "vc", "acme-daily"
INFER = f"/v2/models/{MODEL}/infer"
HEADER = "x-modalscale-tenant"
KEY = reject_annotation_key(NS, POLICY)


@pytest.fixture(scope="module")
def tenant_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A control plane of its own (its operator has Prometheus; the session's operator must not act here)."""
    from modalscale.devenv.cluster import running_cluster

    with running_cluster(tmp_path_factory.mktemp("tenant-cluster"), nodes=0, crd_dir=REPO / "crds") as c:
        c.ensure_gpu_nodes(1, gpus_per_node=64, gpu_type=GPU_TYPE, cpu="1024", memory="16Ti", prefix="kwok-h100-")
        yield c
        # The gateway's InferenceService watch (a daemon thread of this process) still holds its stream open, and
        # kube-apiserver's shutdown waits on it until down()'s SIGKILL 10 s later (the module's teardown: 10.4 s in
        # ci102, 10.3 s alone; its log stops 0.03 s after SIGTERM, never saying "apiserver is exiting", which other
        # modules' apiservers say ~1.1 s after it). This throwaway cluster's components get 3 s each.
        c.down(timeout_s=3.0)


class Tenant(threading.Thread):
    """One client sending infer requests back to back as ``tenant``; records (time, status, Retry-After)."""

    def __init__(self, url: str, tenant: str, text: str) -> None:
        super().__init__(daemon=True)
        self.url, self.tenant, self.text = url, tenant, text
        self.results: list[tuple[float, int, str | None]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.url, timeout=30) as client:
            while not self.stop.is_set():
                r = client.post(INFER, json=text_request(self.text), headers={HEADER: self.tenant})
                self.results.append((time.time(), r.status_code, r.headers.get("Retry-After")))
                if r.status_code == 429:
                    self.stop.wait(0.05)

    def first(self, status: int, after: float = 0.0) -> tuple[float, int, str | None] | None:
        return next((r for r in list(self.results) if r[1] == status and r[0] >= after), None)


def rejected_tenants(api: Any) -> list[dict[str, Any]]:
    return (get_policy(api, NS, POLICY).get("status") or {}).get("rejectedTenants") or []


def test_a_tenant_over_its_budget_is_refused_at_the_gateway_while_another_is_served(
        tenant_cluster: Any, tmp_path: Path) -> None:
    from modalscale.devenv.operator_process import OperatorProcess
    from modalscale.devenv.prometheus import PrometheusProcess, ScrapeTarget, gateway_target
    from modalscale.devenv.receivers import ChatReceiver
    from modalscale.runtime.server import free_port

    api = tenant_cluster.api_client()
    replica = start_replica(tmp_path / "replica")
    prom = PrometheusProcess(tmp_path / "prometheus", scrape_interval_s=1.0)
    op_metrics = free_port()
    settings = GatewaySettings(http_port=free_port(), grpc_port=0, metrics_port=free_port(), namespace=NS,
                               service=SVC, queue_timeout_s=10.0, drain_timeout_s=5.0)
    targets = [ScrapeTarget(f"127.0.0.1:{op_metrics}", job="modalscale-operator"),
               gateway_target(f"127.0.0.1:{settings.metrics_port}", NS, SVC)]
    op = gw = None
    acme = globex = None
    room = ChatReceiver("Slack")
    try:
        room.start()
        prom.start(targets)
        op = OperatorProcess(tenant_cluster.kubeconfig, tmp_path / "operator.log", {
            "MODALSCALE_PROMETHEUS_URL": prom.url, "MODALSCALE_METRICS_PORT": str(op_metrics),
            "MODALSCALE_STANDALONE": "true"})
        op.wait_healthy()
        start_isvc(api, NS, SVC, replicas=1)  # one 8 x H100 replica on KWOK: about 84 USD/h
        gw = RunningGateway(settings, [endpoint(replica)], False,
                            budget=InferenceServiceWatch(NS, SVC, tenant_cluster.api_client()))
        acme, globex = Tenant(gw.http, "acme", "sleep:0.2"), Tenant(gw.http, "globex", "sleep:0.05")
        acme.start()
        globex.start()
        # acme alone: its share of the replica's spend reaches 0.02 USD within seconds of Prometheus data.
        custom(api).create_namespaced_custom_object(GROUP, VERSION, NS, "budgetpolicies", make_policy(
            POLICY, "0.02", [{"percent": 50, "actions": ["Alert"]}, {"percent": 100, "actions": ["Alert", "Reject"]}],
            [], selector={"tenants": ["acme"]}))
        # A plain policy on the same service alerting to a chat room: the operator reads showback when it alerts
        # and the message names the tenants and modalities behind the spend (50 % of 1 USD: ~20 s at ~84 USD/h).
        make_secret(api, NS, "room-hook", url=room.url)
        custom(api).create_namespaced_custom_object(GROUP, VERSION, NS, "budgetpolicies", make_policy(
            "spend-watch", "1", [{"percent": 50, "actions": ["Alert"]}],
            [{"name": "room", "type": "Slack", "secretRef": {"name": "room-hook"}}]))

        items = wait_for(lambda: rejected_tenants(api), 180, "status.rejectedTenants of the tenant policy",
                         interval_s=0.2)
        decided = parse_time(items[0]["since"], "since").timestamp()  # the evaluation that decided it
        assert [(i["namespace"], i["name"], i["tenant"], i["thresholdPercent"]) for i in items] == [
            (NS, SVC, "acme", 100)]
        value = json.loads(wait_for(lambda: (get_isvc(api, NS, SVC)["metadata"].get("annotations") or {}).get(KEY),
                                    30, "the reject annotation on the InferenceService"))
        assert value["tenants"] == ["acme"] and value["policy"] == f"{NS}/{POLICY}"
        budgeted = (get_isvc(api, NS, SVC)["metadata"].get("annotations") or {})[tenants_annotation_key(NS, POLICY)]
        assert json.loads(budgeted) == ["acme"]  # the gateway never folds a budgeted tenant into "other"
        tomorrow = (dt.datetime.now(dt.UTC) + dt.timedelta(days=1)).replace(hour=0, minute=0, second=0,
                                                                           microsecond=0)
        assert value["until"] == tomorrow.strftime("%Y-%m-%dT%H:%M:%SZ")
        refused = wait_for(lambda: acme.first(429), 30, "a 429 for acme at the gateway", interval_s=0.05)
        refused_after_s = refused[0] - decided  # the client's send time of its first refused request
        assert refused_after_s < 5, refused_after_s  # the evaluation's reads and writes, then the watch event
        left_s = (tomorrow - dt.datetime.fromtimestamp(refused[0], dt.UTC)).total_seconds()
        assert refused[2] is not None and abs(int(refused[2]) - left_s) <= 5, (refused, left_s)
        status = get_policy(api, NS, POLICY)["status"]
        spent = float(status["tenantSpent"])
        assert spent >= 0.02 and status["state"] == "Exceeded", status

        # ---- Prometheus down: the tenants' spend is unknown; the rejection is held, nothing is lifted
        prom.stop()
        held = wait_for(lambda: (c := condition(get_policy(api, NS, POLICY), "Ready")) and
                        c["reason"] == "GovernanceBlind" and c, 60, "Ready=False/GovernanceBlind without Prometheus")
        assert "tenants acme" in held["message"], held
        assert KEY in (get_isvc(api, NS, SVC)["metadata"].get("annotations") or {})
        mark = time.time()
        time.sleep(2)
        assert acme.first(200, after=mark) is None  # still refused while the usage cannot be read

        # ---- Prometheus back, the limit raised above what acme spent: lifted, acme served again
        prom.start(targets)
        custom(api).patch_namespaced_custom_object(GROUP, VERSION, NS, "budgetpolicies", POLICY,
                                                   {"spec": {"limit": {"amount": "1000"}}})
        wait_for(lambda: KEY not in (get_isvc(api, NS, SVC)["metadata"].get("annotations") or {}), 90,
                 "the reject annotation deleted after the limit was raised", interval_s=0.2)
        lifted = time.time()
        wait_for(lambda: acme.first(200, after=lifted), 30, "acme served again", interval_s=0.05)
        assert rejected_tenants(api) == []

        # ---- the plain policy's alert named the tenants behind the spend, from showback
        assert room.wait_for(1, timeout_s=60, accepted_only=True)
        said = room.transcript()
        tenants_line = next((ln for ln in said.splitlines() if ln.startswith("Top tenants: ")), "")
        assert "spend-watch crossed 50 %" in said and "acme " in tenants_line and "globex " in tenants_line, said
        assert "; idle " in tenants_line and "Top modalities: text " in said, said

        # ---- globex was served throughout, never refused
        globex_codes = {code for _, code, _ in globex.results}
        assert globex_codes == {200}, globex_codes
        print(f"\nfigure: acme's first refused request sent {refused_after_s * 1000:.0f} ms after the start of the "
              f"evaluation that decided it (Prometheus reads, annotation write, watch event); "
              f"tenantSpent {spent:.4f} USD at the decision (limit 0.02); globex "
              f"{len(globex.results)} requests, all 200; 1 s evaluations, 1 s scrapes, KWOK-only cluster")
    finally:
        for t in (acme, globex):
            if t is not None:
                t.stop.set()
                t.join(10)
        if gw is not None:
            gw.stop()
        if op is not None:
            op.stop()
        prom.stop()
        replica.stop(drain=False)
        room.stop()
        api.close()
