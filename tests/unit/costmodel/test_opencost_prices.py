"""OpenCost as a price source (pure): the /assets answer -> unit prices -> a replica's price, its source and why.

Expected prices are computed by hand in each test from the node figures written in it.
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pytest

from modalscale.costmodel.catalog import PricingTier, ReplicaResources, UnknownPrice, load_catalog
from modalscale.costmodel.opencost import (
    OpenCostAnswerError,
    PriceSource,
    observe_answer,
    parse_assets_answer,
    resolve_replica_price,
)

NOW = dt.datetime(2026, 12, 1, 15, 30, tzinfo=dt.UTC)
CATALOG = load_catalog()
GIB = 2**30
L4_REPLICA = ReplicaResources.from_quantities("1", "2Gi", 1, "nvidia-l4")
CPU_REPLICA = ReplicaResources.from_quantities("2", "4Gi")


def node(name: str, *, cpu_h: float = 8.0, cpu_usd: float = 0.4, ram_gib_h: float = 32.0, ram_usd: float = 0.16,
         gpu_h: float = 0.0, gpu_usd: float = 0.0, gpu_label: str | None = None, preemptible: float = 0.0,
         discount: float = 0.0, **override: Any) -> dict[str, Any]:
    """A Node asset as OpenCost's /assets writes it (the fields this feature reads, plus a few it ignores)."""
    labels = {"kubernetes_io_hostname": name}
    if gpu_label:
        labels["nvidia_com_gpu_product"] = gpu_label
    asset = {"type": "Node", "properties": {"category": "Compute", "cluster": "c1", "name": name},
             "labels": labels, "minutes": 60.0, "cpuCores": cpu_h, "ramBytes": ram_gib_h * GIB,
             "cpuCoreHours": cpu_h, "ramByteHours": ram_gib_h * GIB, "GPUHours": gpu_h,
             "preemptible": preemptible, "discount": discount, "cpuCost": cpu_usd, "gpuCost": gpu_usd,
             "gpuCount": gpu_h, "ramCost": ram_usd, "adjustment": 0.0, "totalCost": 0.0}
    asset.update(override)
    return asset


def answer(*nodes: dict[str, Any], **envelope: Any) -> str:
    data = {f"custom/c1/Node/{n['properties']['name']}": n for n in nodes}
    data["custom/c1/Disk/pvc-1"] = {"type": "Disk", "properties": {"name": "pvc-1"}, "bytes": 1.0, "totalCost": 2.0}
    return json.dumps({"code": 200, "status": "success", "data": data, **envelope})


def observed(body: str | bytes, status: int = 200, previous: Any = None, now: dt.datetime = NOW) -> Any:
    return observe_answer(previous, CATALOG, now, status_code=status, body=body)


def catalog_usd(res: ReplicaResources, tier: str = "OnDemand") -> Decimal:
    return CATALOG.price_replica(res, tier)


L4_NODE = node("gpu-1", gpu_h=4.0, gpu_usd=2.8, gpu_label="nvidia-l4")  # 0.05/core-h, 0.005/GiB-h, 0.70/GPU-h


def test_without_opencost_the_catalog_prices_and_says_so() -> None:
    priced = resolve_replica_price(L4_REPLICA, "OnDemand", CATALOG, None)
    assert priced.source is PriceSource.CATALOG
    assert priced.usd_per_hour == catalog_usd(L4_REPLICA)
    assert "pricing catalog" in priced.message


def test_a_gpu_replica_is_priced_from_the_nodes_unit_hour_prices() -> None:
    priced = resolve_replica_price(L4_REPLICA, "OnDemand", CATALOG, observed(answer(L4_NODE)))
    # 1 core x 0.4/8 + 2 GiB x 0.16/32 + 1 GPU x 2.8/4 = 0.05 + 0.01 + 0.70
    assert priced.usd_per_hour == Decimal("0.76")
    assert priced.source is PriceSource.OPENCOST
    assert "Priced from OpenCost /assets since 2026-12-01T15:30:00Z: 0.76 USD per replica-hour" in priced.message
    assert "gpuHour.nvidia-l4.onDemand 0.7" in priced.message


def test_prices_are_cost_weighted_over_the_nodes_of_a_gpu_type() -> None:
    cheap = node("gpu-1", gpu_h=3.0, gpu_usd=1.5, gpu_label="nvidia-l4")
    dear = node("gpu-2", gpu_h=1.0, gpu_usd=1.5, gpu_label="nvidia-l4", cpu_h=2.0, cpu_usd=0.3)
    priced = resolve_replica_price(L4_REPLICA, "OnDemand", CATALOG, observed(answer(cheap, dear)))
    # GPU (1.5 + 1.5) / (3 + 1) = 0.75; CPU (0.4 + 0.3) / (8 + 2) = 0.07; RAM (0.16 + 0.16) / 64 = 0.005
    assert priced.usd_per_hour == Decimal("0.75") + Decimal("0.07") + 2 * Decimal("0.005")


def test_the_discount_applies_to_cpu_and_ram_not_to_gpus() -> None:
    discounted = node("gpu-1", gpu_h=4.0, gpu_usd=2.8, gpu_label="nvidia-l4", discount=0.5)
    priced = resolve_replica_price(L4_REPLICA, "OnDemand", CATALOG, observed(answer(discounted)))
    assert priced.usd_per_hour == Decimal("0.025") + Decimal("0.005") + Decimal("0.70")  # OpenCost's TotalCost rule


def test_the_gpu_label_may_name_a_catalog_alias() -> None:
    aliased = node("gpu-1", gpu_h=4.0, gpu_usd=2.8, gpu_label="NVIDIA-L4")
    priced = resolve_replica_price(L4_REPLICA, "OnDemand", CATALOG, observed(answer(aliased)))
    assert (priced.source, priced.usd_per_hour) == (PriceSource.OPENCOST, Decimal("0.76"))


def test_a_gpu_type_only_opencost_knows_is_priced_from_opencost() -> None:
    b300 = node("gpu-1", gpu_h=2.0, gpu_usd=20.0, gpu_label="nvidia-b300")
    res = ReplicaResources.from_quantities("1", "2Gi", 1, "nvidia-b300")
    with pytest.raises(UnknownPrice):
        resolve_replica_price(res, "OnDemand", CATALOG, None)
    priced = resolve_replica_price(res, "OnDemand", CATALOG, observed(answer(b300)))
    assert (priced.source, priced.usd_per_hour) == (PriceSource.OPENCOST, Decimal("10.06"))


def test_a_gpu_type_neither_source_knows_is_refused_not_priced_zero() -> None:
    res = ReplicaResources.from_quantities("1", "2Gi", 1, "nvidia-b300")
    with pytest.raises(UnknownPrice, match="nvidia-b300"):
        resolve_replica_price(res, "OnDemand", CATALOG, observed(answer(L4_NODE)))


def test_a_gpu_type_missing_from_opencost_takes_the_catalog_figure_and_says_which() -> None:
    cpu_only = node("cpu-1")
    priced = resolve_replica_price(L4_REPLICA, "OnDemand", CATALOG, observed(answer(cpu_only)))
    l4 = CATALOG.gpu_hour["nvidia-l4"].on_demand.usd_per_unit_hour
    assert priced.usd_per_hour == Decimal("0.05") + Decimal("0.01") + l4
    assert priced.source is PriceSource.CATALOG_FALLBACK
    assert "no non-zero price for gpuHour.nvidia-l4.onDemand" in priced.message
    assert "cpuCoreHour" not in priced.message  # CPU and memory did come from OpenCost


def test_a_zero_price_from_opencost_is_never_used() -> None:
    free_gpu = node("gpu-1", gpu_h=4.0, gpu_usd=0.0, gpu_label="nvidia-l4", cpu_usd=0.0, ram_usd=0.0)
    priced = resolve_replica_price(L4_REPLICA, "OnDemand", CATALOG, observed(answer(free_gpu)))
    assert priced.usd_per_hour == catalog_usd(L4_REPLICA) > 0
    assert priced.source is PriceSource.CATALOG_FALLBACK
    for figure in ("cpuCoreHour.onDemand", "memoryGiBHour.onDemand", "gpuHour.nvidia-l4.onDemand"):
        assert figure in priced.message


def test_spot_replicas_are_priced_from_preemptible_nodes_only() -> None:
    spot = node("spot-1", gpu_h=4.0, gpu_usd=1.0, gpu_label="nvidia-l4", cpu_usd=0.08, ram_usd=0.032,
                preemptible=1.0)
    obs = observed(answer(L4_NODE, spot))
    priced = resolve_replica_price(L4_REPLICA, PricingTier.SPOT, CATALOG, obs)
    assert (priced.source, priced.usd_per_hour) == (PriceSource.OPENCOST, Decimal("0.01") + Decimal("0.002")
                                                    + Decimal("0.25"))
    on_demand_only = resolve_replica_price(L4_REPLICA, PricingTier.SPOT, CATALOG, observed(answer(L4_NODE)))
    assert on_demand_only.source is PriceSource.CATALOG_FALLBACK
    assert on_demand_only.usd_per_hour == catalog_usd(L4_REPLICA, "Spot")


def test_a_cpu_only_replica_uses_the_cpu_and_memory_prices() -> None:
    priced = resolve_replica_price(CPU_REPLICA, "OnDemand", CATALOG, observed(answer(L4_NODE)))
    assert (priced.source, priced.usd_per_hour) == (PriceSource.OPENCOST, Decimal("0.12"))  # 2 x 0.05 + 4 x 0.005


def test_an_unreachable_opencost_falls_back_to_the_catalog_saying_why() -> None:
    obs = observe_answer(None, CATALOG, NOW, error="ConnectError: [Errno 111] Connection refused")
    priced = resolve_replica_price(L4_REPLICA, "OnDemand", CATALOG, obs)
    assert priced.usd_per_hour == catalog_usd(L4_REPLICA)
    assert priced.source is PriceSource.CATALOG_FALLBACK
    assert priced.message.startswith("OpenCost unreachable (ConnectError: [Errno 111] Connection refused) "
                                      "(since 2026-12-01T15:30:00Z)")


BAD_ANSWERS = [
    ("http-500", 500, "Error getting assets: prometheus down", "HTTP 500"),
    ("not-json", 200, "<html>gateway</html>", "not JSON"),
    ("json-list", 200, "[1, 2]", "JSON list"),
    ("code-500", 200, json.dumps({"code": 500, "status": "error", "message": "boom", "data": None}), "code=500"),
    ("data-list", 200, json.dumps({"code": 200, "status": "success", "data": [{}]}), "'data' is list"),
    ("asset-not-object", 200, json.dumps({"code": 200, "data": {"k": 3}}), "asset 'k' is int"),
    ("null-hours", 200, answer(node("n1", cpuCoreHours=None)), "node 'n1': cpuCoreHours is null"),
    ("nan-cost", 200, answer(node("n1", gpu_label="nvidia-l4", gpuCost=float("nan"), GPUHours=1.0)),
     "node 'n1': gpuCost is nan"),
    ("inf-hours", 200, answer(node("n1", cpuCoreHours=float("inf"))), "cpuCoreHours is inf"),
    ("negative-cost", 200, answer(node("n1", ramCost=-0.5)), "node 'n1': ramCost is negative (-0.5)"),
    ("string-cost", 200, answer(node("n1", cpuCost="0.4")), "node 'n1': cpuCost is '0.4', not a number"),
    ("bool-cost", 200, answer(node("n1", cpuCost=True)), "cpuCost is True, not a number"),
    ("missing-field", 200, answer({k: v for k, v in node("n1").items() if k != "GPUHours"}),
     "field 'GPUHours' is missing"),
    ("discount-above-1", 200, answer(node("n1", discount=1.5)), "discount is 1.5, outside [0, 1]"),
    ("cost-over-zero-hours", 200, answer(node("n1", gpuCost=3.0, GPUHours=0.0)), "gpuCost is 3.0 USD over 0 GPUHours"),
]


@pytest.mark.parametrize(("status", "body", "why"), [b[1:] for b in BAD_ANSWERS], ids=[b[0] for b in BAD_ANSWERS])
def test_an_unusable_answer_is_refused_with_the_field_and_the_catalog_prices(status: int, body: str, why: str) -> None:
    with pytest.raises(OpenCostAnswerError, match=None) as err:
        parse_assets_answer(status, body)
    assert why in str(err.value)
    obs = observed(body, status)
    assert obs.prices is None and why in obs.problem
    priced = resolve_replica_price(L4_REPLICA, "OnDemand", CATALOG, obs)
    assert (priced.source, priced.usd_per_hour) == (PriceSource.CATALOG_FALLBACK, catalog_usd(L4_REPLICA))
    assert why in priced.message and "OpenCost answer refused" in priced.message


def test_one_bad_node_refuses_the_whole_answer() -> None:
    with pytest.raises(OpenCostAnswerError, match="node 'bad'"):
        parse_assets_answer(200, answer(L4_NODE, node("bad", cpuCost=-1.0)))


def test_disks_and_other_assets_are_skipped() -> None:
    nodes = parse_assets_answer(200, answer(L4_NODE))
    assert [n.name for n in nodes] == ["gpu-1"]
    assert parse_assets_answer(200, answer()) == []


def test_an_answer_without_nodes_prices_nothing_from_opencost() -> None:
    priced = resolve_replica_price(L4_REPLICA, "OnDemand", CATALOG, observed(answer()))
    assert priced.source is PriceSource.CATALOG_FALLBACK and "(0 node(s)" in priced.message
    assert priced.usd_per_hour == catalog_usd(L4_REPLICA)


def test_since_moves_only_when_usability_flips() -> None:
    t1, t2, t3, t4 = (NOW + dt.timedelta(minutes=m) for m in (0, 5, 10, 15))
    good1 = observed(answer(L4_NODE), now=t1)
    good2 = observed(answer(L4_NODE), previous=good1, now=t2)
    bad1 = observe_answer(good2, CATALOG, t3, error="ReadTimeout: timed out")
    bad2 = observed("garbage", previous=bad1, now=t4)
    assert (good1.since, good2.since, bad1.since, bad2.since) == (t1, t1, t3, t3)
    assert (good2.checked_at, bad2.checked_at) == (t2, t4)
    again = observed(answer(L4_NODE), previous=bad2, now=t4)
    assert again.since == t4
    # The steady state says the same thing each time: no condition rewrite per read.
    assert (resolve_replica_price(L4_REPLICA, "OnDemand", CATALOG, good1).message
            == resolve_replica_price(L4_REPLICA, "OnDemand", CATALOG, good2).message)


def test_the_effective_catalog_keeps_every_catalog_figure_opencost_did_not_replace() -> None:
    obs = observed(answer(L4_NODE))
    assert obs.prices is not None
    effective = obs.prices.catalog
    assert set(obs.prices.from_opencost) == {"cpuCoreHour.onDemand", "memoryGiBHour.onDemand",
                                             "gpuHour.nvidia-l4.onDemand"}
    assert effective.gpu_hour["nvidia-l4"].on_demand.usd_per_unit_hour == Decimal("0.7")
    assert effective.gpu_hour["nvidia-l4"].on_demand.source.startswith("OpenCost /assets")
    assert effective.gpu_hour["nvidia-l4"].spot == CATALOG.gpu_hour["nvidia-l4"].spot
    assert effective.gpu_hour["nvidia-t4"] == CATALOG.gpu_hour["nvidia-t4"]
    assert effective.cpu_core_hour.spot == CATALOG.cpu_core_hour.spot


def test_a_gpu_type_with_dots_in_its_label_is_priced() -> None:
    dotted = node("gpu-1", gpu_h=2.0, gpu_usd=3.0, gpu_label="acme.gpu.v2", preemptible=0.0)
    spot = node("spot-1", gpu_h=2.0, gpu_usd=1.0, gpu_label="acme.gpu.v2", preemptible=1.0)
    obs = observed(answer(dotted, spot))
    res = ReplicaResources.from_quantities("0", "0", 2, "acme.gpu.v2")
    on_demand = resolve_replica_price(res, "OnDemand", CATALOG, obs)
    assert (on_demand.source, on_demand.usd_per_hour) == (PriceSource.OPENCOST, Decimal("3.0"))  # 2 x 3.0/2
    assert "gpuHour.acme.gpu.v2.onDemand 1.5" in on_demand.message
    spot_priced = resolve_replica_price(res, "Spot", CATALOG, obs)
    assert (spot_priced.source, spot_priced.usd_per_hour) == (PriceSource.OPENCOST, Decimal("1.0"))  # 2 x 1.0/2


def test_a_gpu_type_only_spot_nodes_have_stays_unknown_without_an_on_demand_price() -> None:
    spot = node("spot-1", gpu_h=2.0, gpu_usd=1.0, gpu_label="acme-gpu", preemptible=1.0)
    obs = observed(answer(spot))
    res = ReplicaResources.from_quantities("1", "1Gi", 1, "acme-gpu")
    with pytest.raises(UnknownPrice, match="acme-gpu"):
        resolve_replica_price(res, "Spot", CATALOG, obs)


# Issue 22 section 1 fault 2: OpenCost reports a node it cannot price at cost 0 (opencost/opencost#73, PR #3194).
# A zero or missing cost is "unknown" for that node, never a price: it must not pull the per-unit average down.
UNPRICED_NODES = [
    ("zero-cost", dict(cpuCost=0.0, ramCost=0.0, gpuCost=0.0)),
    ("null-cost", dict(cpuCost=None, ramCost=None, gpuCost=None)),
    ("missing-cost", dict(cpuCost=..., ramCost=..., gpuCost=...)),
]


def _unpriced_l4(**costs: Any) -> dict[str, Any]:
    """An L4 node with the same hours as L4_NODE whose costs are set as given (``...`` = field left out)."""
    asset = node("gpu-0", gpu_h=4.0, gpu_label="nvidia-l4")
    for key, value in costs.items():
        if value is ...:
            del asset[key]
        else:
            asset[key] = value
    return asset


@pytest.mark.parametrize("costs", [c for _, c in UNPRICED_NODES], ids=[i for i, _ in UNPRICED_NODES])
def test_a_node_opencost_cannot_price_is_left_out_of_the_per_unit_average(costs: dict[str, Any]) -> None:
    # One priced L4 node (0.05/core-h, 0.005/GiB-h, 0.70/GPU-h) and one OpenCost cannot price, same hours.
    obs = observed(answer(L4_NODE, _unpriced_l4(**costs)))
    assert obs.prices is not None, obs.problem
    rates = obs.prices.from_opencost
    # Averaged with the zero node these came out at half: 0.025, 0.0025, 0.35.
    assert rates["cpuCoreHour.onDemand"] == Decimal("0.05")
    assert rates["memoryGiBHour.onDemand"] == Decimal("0.005")
    assert rates["gpuHour.nvidia-l4.onDemand"] == Decimal("0.7")
    priced = resolve_replica_price(L4_REPLICA, "OnDemand", CATALOG, obs)
    assert (priced.source, priced.usd_per_hour) == (PriceSource.OPENCOST, Decimal("0.76"))
    assert "1 node(s) without an OpenCost price left out (gpu-0)" in priced.message


def test_an_l4_priced_on_one_node_and_zero_on_another_is_not_halved() -> None:
    # The figures: one L4 node at 0.80 USD/GPU-h and one at cost 0 came out at 0.40.
    priced_node = node("gpu-1", gpu_h=2.0, gpu_usd=1.6, gpu_label="nvidia-l4")
    zero_node = node("gpu-2", gpu_h=2.0, gpu_usd=0.0, gpu_label="nvidia-l4", cpu_usd=0.0, ram_usd=0.0)
    obs = observed(answer(priced_node, zero_node))
    assert obs.prices is not None
    assert obs.prices.from_opencost["gpuHour.nvidia-l4.onDemand"] == Decimal("0.8")
    assert obs.prices.from_opencost["cpuCoreHour.onDemand"] == Decimal("0.05")  # 0.4 / 8, not 0.4 / 16


def test_when_no_node_of_a_figure_is_priced_the_catalog_prices_it() -> None:
    obs = observed(answer(node("cpu-1"), _unpriced_l4(gpuCost=None)))
    priced = resolve_replica_price(L4_REPLICA, "OnDemand", CATALOG, obs)
    l4 = CATALOG.gpu_hour["nvidia-l4"].on_demand.usd_per_unit_hour
    assert priced.source is PriceSource.CATALOG_FALLBACK
    assert priced.usd_per_hour == Decimal("0.05") + Decimal("0.01") + l4
    assert "gpuHour.nvidia-l4.onDemand" in priced.message


@pytest.mark.parametrize(("gpu_h", "gpu_usd"), [(1e-300, 0.7), (1e-6, 1e30), (1.0, 10_000.01)])
def test_a_unit_price_above_the_catalogs_bound_refuses_the_answer_and_the_catalog_prices(gpu_h: float,
                                                                                          gpu_usd: float) -> None:
    """A cost over a sliver of unit-hours made a price of 1e+300 USD per GPU-hour, which failed the ledger's
    arithmetic with an unnamed ``decimal.InvalidOperation`` (or the catalog's bound with a pydantic error, past the
    refusal this function reports). Above the catalog's bound the answer is refused and the figure named."""
    obs = observed(answer(node("gpu-1", gpu_h=gpu_h, gpu_usd=gpu_usd, gpu_label="nvidia-l4")))
    assert obs.prices is None and "gpuHour.nvidia-l4.onDemand" in obs.problem and "10000 USD" in obs.problem
    priced = resolve_replica_price(L4_REPLICA, "OnDemand", CATALOG, obs)
    assert priced.usd_per_hour == catalog_usd(L4_REPLICA) and priced.source is PriceSource.CATALOG_FALLBACK


def test_a_catalog_figure_above_the_bound_is_refused_naming_it() -> None:
    from modalscale.costmodel.catalog import CatalogError

    for value in ("1e25", "10000.01", "1E+400"):
        with pytest.raises(CatalogError, match=r"cpuCoreHour\.onDemand\.usdPerUnitHour: .*less than or equal to 10000"):
            load_catalog({"cpuCoreHour": {"onDemand": {"usdPerUnitHour": value, "source": "a slip",
                                                       "asOf": "2026-12-01"}}})
