"""A staged service's image-encoder pool (issue 24) is part of its spend: each pool pod charged by its own start and
stop at the pool's own price (``spec.stages.imageEncoder.resources`` at the service's tier, or at its node's tier),
never counted as a replica. Before this, the ledger listed only ``modalscale.io/inferenceservice`` pods, so a
staged service's encoder pods ran free."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from decimal import Decimal

from modalscale.costmodel.budget.state import service_state
from modalscale.costmodel.catalog import PricingTier, ReplicaResources, load_catalog
from modalscale.costmodel.ledger import Ledger, PodPool, PodRun, ServiceObservation, advance

D = Decimal
T0 = datetime(2026, 5, 1, 12, tzinfo=timezone.utc)
LONG_AGO = T0 - timedelta(hours=3)
REPLICAS = (PodRun("svc-a", LONG_AGO), PodRun("svc-b", LONG_AGO))
ENCODERS = (PodRun("svc-image-encoder-x", LONG_AGO), PodRun("svc-image-encoder-y", LONG_AGO, tier="Spot"))
POOL_PRICES = (("OnDemand", D("1.8")), ("Reserved", D("1.2")), ("Spot", D("0.6")))


def observe(encoders: tuple[PodRun, ...] = ENCODERS, price: str | None = "1.8") -> ServiceObservation:
    pool = PodPool("image-encoder", encoders, None if price is None else D(price), POOL_PRICES if price else ())
    return ServiceObservation("default", "svc", 2, D("36"), pods=REPLICAS, pools=(pool,))


def test_encoder_pool_pods_are_charged_by_their_own_times_at_their_tiers_price_not_as_replicas() -> None:
    first = advance(Ledger(), [observe()], T0, "Daily")
    # 3 h since every pod started: replicas 2 x 36 x 3 = 216; pool: one on demand 1.8 x 3 = 5.4, one on a Spot
    # node 0.6 x 3 = 1.8.
    assert first.spent_usd == D("223.2")
    # The Spot pod stops 20 s into the next minute and a new on-demand one starts at 30 s: 60 x 1.8 + 20 x 0.6 +
    # 30 x 1.8 USD-seconds per hour / 3600 = 0.048333333 USD (1e-9); the replicas' 120 replica-seconds at 36 USD/h
    # = 1.20 USD.
    encoders = (ENCODERS[0], PodRun("svc-image-encoder-y", LONG_AGO, T0 + timedelta(seconds=20), tier="Spot"),
                PodRun("svc-image-encoder-z", T0 + timedelta(seconds=30)))
    second = advance(first.ledger, [observe(encoders)], T0 + timedelta(minutes=1), "Daily")
    assert second.spent_usd - first.spent_usd == D("1.248333333")
    (seg,) = second.segments
    assert seg.replica_microseconds == 120_000_000  # pool pods are not replica-seconds
    (entry,) = second.ledger.entries
    assert (entry.replicas, entry.cost_usd_per_hour) == (2, D("72"))
    assert observe(encoders).side_usd_per_hour == D("3.6")  # two running now, both on demand


def test_an_unpriced_encoder_pod_is_reported_unpriced_and_no_pool_is_free() -> None:
    first = advance(Ledger(), [observe(price=None)], T0, "Daily")
    assert first.spent_usd == D("216")  # the replicas' known part: a lower bound
    assert [(u.namespace, u.name) for u in first.unpriced] == [("default", "svc")]
    assert observe(price=None).side_usd_per_hour is None
    assert observe(encoders=(), price=None).side_usd_per_hour == 0  # no pool pod: nothing unknown


def test_the_pool_is_priced_from_its_own_resources_at_the_services_tier() -> None:
    catalog = load_catalog()
    replica = ReplicaResources.from_quantities("1", "2Gi", 1, "nvidia-l4")
    pool = ReplicaResources.from_quantities("3", "4Gi", 1, "nvidia-l4")
    encoders = (PodRun("svc-image-encoder-x", LONG_AGO), PodRun("svc-image-encoder-y", LONG_AGO))
    state = service_state("default", "svc", replicas=2, max_replicas=4, resources=replica, tier=PricingTier.SPOT,
                          catalog=catalog, pods=REPLICAS, image_encoder_pods=encoders,
                          image_encoder_resources=pool)
    per_pod = catalog.price_replica(pool, PricingTier.SPOT)
    assert per_pod != state.usd_per_replica_hour  # its own resources, not a replica's
    assert state.cost_usd_per_hour == 2 * state.usd_per_replica_hour + 2 * per_pod  # type: ignore[operator]
    assert not state.unknown_reason
    unstaged = service_state("default", "svc", replicas=2, max_replicas=4, resources=replica, tier="Spot",
                             catalog=catalog, pods=REPLICAS)
    assert unstaged.pools == () and unstaged.cost_usd_per_hour == 2 * state.usd_per_replica_hour  # type: ignore
