"""OpenCost as a price source, on real HTTP and the real control plane.

OpenCost itself is not run (see ``modalscale.devenv.opencost_server`` for why): a local server answers
``/assets`` with the documented response shape and validates ``window`` as OpenCost does. The operator runs as a
subprocess on a private KWOK-only control plane (no other operator may price the same services).
"""

from __future__ import annotations

import datetime as dt
import urllib.error
import urllib.request
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from modalscale.costmodel.catalog import ReplicaResources, load_catalog
from modalscale.costmodel.opencost import ASSETS_WINDOW, PriceSource, parse_assets_answer
from modalscale.devenv.cluster import LocalCluster, running_cluster
from modalscale.devenv.kube import wait_for
from modalscale.devenv.opencost_server import OpenCostServer, PricedNode, Scripted
from modalscale.devenv.operator_process import OperatorProcess
from modalscale.operator.opencost_source import PriceBook
from tests.integration.operator.isvc_helpers import condition, create, get, make_isvc

REPO = Path(__file__).resolve().parents[3]
NOW = dt.datetime(2026, 12, 1, 15, 30, tzinfo=dt.UTC)
GIB = 2**30
L4_NODE = PricedNode("gpu-0", cpu_cores=8, ram_bytes=32 * GIB, gpu_count=4, cpu_usd_per_core_hour=0.05,
                     ram_usd_per_gib_hour=0.005, gpu_usd_per_gpu_hour=0.7,
                     labels=(("nvidia.com/gpu.product", "nvidia-l4"),))


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_the_local_server_answers_the_documented_shape_and_checks_window_as_opencost_does() -> None:
    with OpenCostServer([L4_NODE], now=lambda: NOW) as server:
        status, body = _get(f"{server.url}/assets")
        assert (status, body) == (400, b"Invalid 'window' parameter: illegal window: \n")
        status, body = _get(f"{server.url}/assets?window=1y")
        assert (status, body) == (400, b"Invalid 'window' parameter: illegal window: 1y\n")
        for window in ("today", "lastweek", "7d offset 1d", "2026-12-01T10:00:00Z,2026-12-01T11:00:00Z",
                       "1764583200,1764586800"):
            assert _get(f"{server.url}/assets?window={urllib.request.quote(window)}")[0] == 200, window
        status, body = _get(f"{server.url}/assets?window=1h")
        assert status == 200
        # "1h" is the current hour, rounded forward (15:00-16:00); the node ran 15:00-15:30 in it: 0.5 h.
        (node,) = parse_assets_answer(status, body)
        assert (node.name, node.gpu_type) == ("gpu-0", "nvidia-l4")
        assert (node.cpu_core_hours, node.gpu_hours, node.ram_gib_hours) == (Decimal("4.0"), Decimal("2.0"),
                                                                            Decimal("16"))
        assert (node.cpu_usd, node.ram_usd, node.gpu_usd) == (Decimal("0.2"), Decimal("0.08"), Decimal("1.4"))
        assert server.requests[-1] == {"path": "/assets", "window": "1h"}


def test_the_price_book_rereads_opencost_and_falls_back_while_it_is_down() -> None:
    clock = [NOW]
    catalog = load_catalog()
    replica = ReplicaResources.from_quantities("1", "2Gi", 1, "nvidia-l4")
    with OpenCostServer([L4_NODE], now=lambda: clock[0]) as server:
        book = PriceBook(catalog, server.url, refresh_s=60, clock=lambda: clock[0])
        try:
            first = book.price_replica(replica, "OnDemand")
            assert (first.source, first.usd_per_hour) == (PriceSource.OPENCOST, Decimal("0.76"))
            assert book.catalog().gpu_hour["nvidia-l4"].on_demand.usd_per_unit_hour == Decimal("0.7")
            server.stop()
            clock[0] += dt.timedelta(seconds=30)  # within refresh_s: the last answer still holds
            assert book.price_replica(replica, "OnDemand").source is PriceSource.OPENCOST
            clock[0] += dt.timedelta(seconds=30)
            down = book.price_replica(replica, "OnDemand")
            assert down.source is PriceSource.CATALOG_FALLBACK and "OpenCost unreachable (ConnectError" in down.message
            assert down.usd_per_hour == catalog.price_replica(replica, "OnDemand")
            assert book.catalog() == catalog
            server.start()
            server.script(Scripted(200, '{"code": 200, "status": "success", "data": {"n": {"type": "Node", '
                                        '"properties": {"name": "n"}, "cpuCost": NaN}}}'))
            clock[0] += dt.timedelta(seconds=60)
            garbage = book.price_replica(replica, "OnDemand")
            assert garbage.source is PriceSource.CATALOG_FALLBACK
            assert "OpenCost answer refused: node 'n': cpuCost is nan" in garbage.message
            clock[0] += dt.timedelta(seconds=60)
            back = book.price_replica(replica, "OnDemand")  # 15:33: costs (6 decimals) over 0.55 h
            assert (back.source, back.usd_per_hour.quantize(Decimal("0.000001"))) == (PriceSource.OPENCOST,
                                                                                     Decimal("0.76"))
            assert [r["window"] for r in server.requests] == [ASSETS_WINDOW] * 3
        finally:
            book.close()


BUDGET = {"apiVersion": "modalscale.io/v1alpha1", "kind": "BudgetPolicy", "metadata": {"name": "daily"},
          "spec": {"period": "Daily", "limit": {"amount": "1000", "currency": "USD"}, "evaluationIntervalSeconds": 1,
                   "forecast": {"enabled": False}, "thresholds": [{"percent": 100, "actions": ["Alert"]}]}}


@pytest.fixture(scope="module")
def oc_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path_factory.mktemp("opencost-cluster"), nodes=2, crd_dir=REPO / "crds") as c:
        yield c


def _cluster_nodes(api: Any) -> list[PricedNode]:
    """The cluster's nodes as OpenCost would price them: L4 0.70 USD/GPU-h, 0.05 USD/core-h, 0.005 USD/GiB-h, as if
    they had run the whole window (created seconds ago, their costs over a few seconds, rounded to six decimals,
    would move the rates in the fourth digit from one read to the next)."""
    from modalscale.api.quantities import parse_cpu_cores, parse_memory_bytes

    out = []
    for n in client.CoreV1Api(api).list_node().items:
        cap = n.status.capacity or {}
        labels = tuple(sorted((n.metadata.labels or {}).items()))
        out.append(PricedNode(n.metadata.name, cpu_cores=float(parse_cpu_cores(cap.get("cpu", "0"))),
                              ram_bytes=float(parse_memory_bytes(cap.get("memory", "0"))),
                              gpu_count=float(cap.get("nvidia.com/gpu", "0")), cpu_usd_per_core_hour=0.05,
                              ram_usd_per_gib_hour=0.005, gpu_usd_per_gpu_hour=0.7, labels=labels,
                              preemptible=dict(labels).get("karpenter.sh/capacity-type") == "spot"))
    return out


def test_a_service_is_priced_from_opencost_then_from_the_catalog_when_opencost_stops(
        oc_cluster: LocalCluster, tmp_path: Path) -> None:
    api = oc_cluster.api_client()
    ns = "opencost"
    client.CoreV1Api(api).create_namespace({"metadata": {"name": ns}})
    nodes = _cluster_nodes(api)
    assert any(n.gpu_count > 0 for n in nodes), [n.name for n in nodes]
    with OpenCostServer(nodes) as server:
        op = OperatorProcess(oc_cluster.kubeconfig, tmp_path / "operator.log", {
            "MODALSCALE_OPENCOST_URL": server.url, "MODALSCALE_OPENCOST_REFRESH_SECONDS": "1",
            "MODALSCALE_STANDALONE": "true"})
        try:
            op.wait_healthy()
            create(api, ns, make_isvc("vc"))  # 1 core, 2 GiB, 1 L4 per replica; Fixed, 2 replicas
            client.CustomObjectsApi(api).create_namespaced_custom_object("modalscale.io", "v1alpha1", ns,
                                                                         "budgetpolicies", BUDGET)

            def burn_rate() -> str | None:
                status = client.CustomObjectsApi(api).get_namespaced_custom_object(
                    "modalscale.io", "v1alpha1", ns, "budgetpolicies", "daily").get("status") or {}
                return status.get("burnRatePerHour")

            def priced(reason: str) -> dict[str, Any] | None:
                c = condition(get(api, ns, "vc"), "Priced")
                return c if c and c["status"] == "True" and c["reason"] == reason else None

            def wait(check: Any, timeout_s: float, what: str) -> Any:
                try:
                    return wait_for(check, timeout_s, what)
                except TimeoutError as exc:
                    raise AssertionError(f"{exc}\nstatus: {get(api, ns, 'vc').get('status')}\n"
                                         f"operator log:\n{op.log()[-4000:]}") from None

            by_opencost = wait(lambda: priced("OpenCost"), 120, "Priced=True (OpenCost)")
            # 1 x 0.05 + 2 x 0.005 + 1 x 0.70 = 0.76 USD per replica-hour; 2 running replicas.
            assert "0.76 USD per replica-hour" in by_opencost["message"], by_opencost
            wait(lambda: get(api, ns, "vc")["status"].get("costUSDPerHour") == "1.5200", 120,
                     "costUSDPerHour 1.5200 from OpenCost")
            assert server.requests and all(r == {"path": "/assets", "window": ASSETS_WINDOW} for r in server.requests)
            wait(lambda: burn_rate() == "1.52", 120, "the budget's burn rate at OpenCost's price (1.52 USD/h)")
            # Steady state: more reads of /assets (the window grows, costs change) rewrite nothing in Priced.
            seen = len(server.requests)
            wait(lambda: len(server.requests) >= seen + 3, 60, "three more reads of /assets")
            assert condition(get(api, ns, "vc"), "Priced") == by_opencost

            server.stop()
            fallback = wait(lambda: priced("CatalogFallback"), 120, "Priced=True (CatalogFallback)")
            assert "OpenCost unreachable" in fallback["message"], fallback
            catalog_usd = load_catalog().price_replica(ReplicaResources.from_quantities("1", "2Gi", 1, "nvidia-l4"),
                                                       "OnDemand")
            want = format((2 * catalog_usd).quantize(Decimal("0.0001")), "f")
            wait(lambda: get(api, ns, "vc")["status"].get("costUSDPerHour") == want, 60,
                     f"costUSDPerHour {want} from the catalog")
            want_burn = format((2 * catalog_usd).quantize(Decimal("0.01")), "f")
            wait(lambda: burn_rate() == want_burn, 60, f"the budget's burn rate at the catalog's price ({want_burn})")
            events = wait_for(lambda: [e for e in client.CoreV1Api(api).list_namespaced_event(ns).items
                                       if e.reason == "CatalogFallback"], 60, "a CatalogFallback Event")
            assert events[0].type == "Warning"
            assert "Traceback" not in op.log()
        finally:
            op.stop()
            api.close()


def test_without_opencost_the_priced_condition_names_the_catalog(api: Any, operator: OperatorProcess,
                                                                   namespace: str) -> None:
    create(api, namespace, make_isvc("cat"))
    c = wait_for(lambda: condition(get(api, namespace, "cat"), "Priced"), 60, "the Priced condition")
    usd = load_catalog().price_replica(ReplicaResources.from_quantities("1", "2Gi", 1, "nvidia-l4"), "OnDemand")
    assert (c["status"], c["reason"]) == ("True", "Catalog")
    assert c["message"] == f"Priced from the pricing catalog: {usd.quantize(Decimal('0.01'))} USD per replica-hour"


def test_a_gpu_type_no_source_prices_is_refused_with_priced_false(api: Any, operator: OperatorProcess,
                                                                   namespace: str) -> None:
    create(api, namespace, make_isvc("exotic", resources={"cpu": "1", "memory": "2Gi",
                                                          "gpu": {"count": 1, "type": "acme-tpu9000"}}))
    c = wait_for(lambda: condition(get(api, namespace, "exotic"), "Priced"), 60, "the Priced condition")
    assert (c["status"], c["reason"]) == ("False", "UnknownGPUPrice")
    assert "acme-tpu9000" in c["message"]
    assert "costUSDPerHour" not in get(api, namespace, "exotic")["status"]
