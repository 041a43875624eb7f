"""The request gateway's pods are part of a service's spend (issue 19): each charged by its own start and stop at
its own price (CPU and memory requests at catalog prices), never counted as a replica."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

from modalscale.costmodel.budget.state import service_state
from modalscale.costmodel.catalog import PricingTier, ReplicaResources, load_catalog
from modalscale.costmodel.ledger import Ledger, PodRun, ServiceObservation, advance

D = Decimal
T0 = datetime(2026, 5, 1, 12, tzinfo=timezone.utc)
LONG_AGO = T0 - timedelta(hours=3)
REPLICAS = (PodRun("svc-a", LONG_AGO), PodRun("svc-b", LONG_AGO))
GATEWAY = (PodRun("svc-gateway-x", LONG_AGO), PodRun("svc-gateway-y", LONG_AGO))


def observe(gateway: tuple[PodRun, ...] = GATEWAY, gateway_price: str | None = "0.36") -> ServiceObservation:
    return ServiceObservation("default", "svc", 2, D("36"), pods=REPLICAS, gateway_pods=gateway,
                              gateway_usd_per_pod_hour=None if gateway_price is None else D(gateway_price))


def test_gateway_pods_are_charged_by_their_own_times_at_their_own_price_not_as_replicas() -> None:
    first = advance(Ledger(), [observe()], T0, "Daily")
    # 3 h since the pods started: replicas 2 x 36 x 3 = 216, gateway 2 x 0.36 x 3 = 2.16.
    assert first.spent_usd == D("218.16")
    # One gateway pod stops 20 s into the next minute, a new one starts at 30 s: 60 + 20 + 30 gateway pod-seconds
    # at 0.36 USD/h (0.0001 USD/s) = 0.011 USD; the replicas' 120 replica-seconds at 36 USD/h = 1.20 USD.
    t1 = T0 + timedelta(minutes=1)
    gateway = (GATEWAY[0], PodRun("svc-gateway-y", LONG_AGO, T0 + timedelta(seconds=20)),
               PodRun("svc-gateway-z", T0 + timedelta(seconds=30)))
    second = advance(first.ledger, [observe(gateway)], t1, "Daily")
    assert second.spent_usd - first.spent_usd == D("1.211")
    (seg,) = second.segments
    assert seg.replica_microseconds == 120_000_000  # the gateway pods are not replica-seconds
    (entry,) = second.ledger.entries
    assert (entry.replicas, entry.cost_usd_per_hour) == (2, D("72"))  # a replica's price stays its own
    assert observe(gateway).gateway_usd_per_hour == D("0.72")  # two running now


def test_an_unpriced_gateway_pod_is_reported_unpriced_and_no_gateway_is_free() -> None:
    first = advance(Ledger(), [observe(gateway_price=None)], T0, "Daily")
    assert first.spent_usd == D("216")  # the replicas' known part: a lower bound
    assert [(u.namespace, u.name) for u in first.unpriced] == [("default", "svc")]
    assert observe(gateway_price=None).gateway_usd_per_hour is None
    assert observe(gateway=(), gateway_price=None).gateway_usd_per_hour == 0  # no gateway pod: nothing unknown


def test_the_gateway_price_is_its_cpu_and_memory_requests_at_the_catalogs_on_demand_prices() -> None:
    catalog = load_catalog()
    pods = REPLICAS
    state = service_state("default", "svc", replicas=2, max_replicas=4,
                          resources=ReplicaResources.from_quantities("1", "2Gi", 1, "nvidia-l4"),
                          tier=PricingTier.SPOT, catalog=catalog, pods=pods, gateway_pods=GATEWAY,
                          gateway_resources=ReplicaResources.from_quantities("100m", "256Mi"))
    # 0.1 core x 0.031611 + 0.25 GiB x 0.004237 = 0.00422035 USD/h per gateway pod (on demand, also for a Spot
    # service: the gateway stays on on-demand nodes).
    per_pod = D("0.1") * D("0.031611") + D("0.25") * D("0.004237")
    assert state.observation().gateway_usd_per_pod_hour == per_pod
    assert per_pod == catalog.price_replica(ReplicaResources.from_quantities("100m", "256Mi"), PricingTier.ON_DEMAND)
    assert state.cost_usd_per_hour == 2 * state.usd_per_replica_hour + 2 * per_pod  # type: ignore[operator]


class _GatewayUnpriced:
    """The shipped catalog, except that it cannot price the gateway's resources (as a catalog without an
    on-demand CPU figure would)."""

    def __init__(self, gateway: ReplicaResources) -> None:
        self.catalog, self.gateway = load_catalog(), gateway

    def price_replica(self, resources: ReplicaResources, tier: PricingTier) -> Decimal:
        from modalscale.costmodel.catalog import UnknownPrice

        if resources == self.gateway:
            raise UnknownPrice("cpu/memory", tier, [], "no such figure in this test's catalog")
        return self.catalog.price_replica(resources, tier)

    def __getattr__(self, name: str) -> object:
        return getattr(self.catalog, name)


def test_a_gateway_that_cannot_be_priced_blinds_a_service_only_when_its_pods_ran() -> None:
    gw = ReplicaResources.from_quantities("100m", "256Mi")
    replica = ReplicaResources.from_quantities("1", "2Gi", 1, "nvidia-l4")
    common = {"replicas": 2, "max_replicas": 4, "resources": replica,
              "tier": PricingTier.ON_DEMAND, "catalog": _GatewayUnpriced(gw), "pods": REPLICAS,
              "gateway_resources": gw}
    without = service_state("default", "svc", gateway_pods=(), **common)  # type: ignore[arg-type]
    assert not without.unknown_reason and without.usd_per_replica_hour is not None
    with_pods = service_state("default", "svc", gateway_pods=GATEWAY, **common)  # type: ignore[arg-type]
    assert with_pods.unknown_reason is not None and "gateway pods" in with_pods.unknown_reason
