"""The top tenants and modalities behind a spend (alerts, ``cost diff``): bounded, the rest summed as ``other``,
nothing said without tenant data."""

from __future__ import annotations

from decimal import Decimal

from modalscale.costmodel.showback import (
    OTHER,
    ServiceWindow,
    TenantUsage,
    allocate,
    drivers_of,
    spend_drivers,
)


def test_three_tenants_are_named_and_the_rest_summed_as_other_with_idle_apart() -> None:
    # 10 USD over 1000 replica-seconds: 0.01 USD per replica-second; 100 s idle.
    usage = [TenantUsage("acme", "image", 400, 10), TenantUsage("acme", "text", 100, 50),
             TenantUsage("globex", "image", 200, 5), TenantUsage("initech", "text", 100, 9),
             TenantUsage("umbrella", "text", 50, 1), TenantUsage("other", "image_text", 50, 3)]
    rows = allocate(ServiceWindow("ml", "vc", Decimal("10"), 1000), usage).rows
    drivers = spend_drivers(rows)
    assert drivers is not None
    assert drivers.tenants == (("acme", Decimal("5")), ("globex", Decimal("2")), ("initech", Decimal("1")),
                               (OTHER, Decimal("1")))  # umbrella 0.5 + the gateway's own "other" 0.5
    assert drivers.modalities == (("image", Decimal("6")), ("text", Decimal("2.5")), ("image_text", Decimal("0.5")))
    assert (drivers.idle_usd, drivers.spend_usd) == (Decimal("1"), Decimal("10"))
    assert sum(u for _, u in drivers.tenants) + drivers.idle_usd == drivers.spend_usd
    facts = dict(drivers.facts())
    assert facts["Top tenants"] == ("acme 5.00 USD (50 %), globex 2.00 USD (20 %), initech 1.00 USD (10 %), "
                                    "other 1.00 USD (10 %); idle 1.00 USD (10 %)")
    assert facts["Top modalities"] == "image 6.00 USD (60 %), text 2.50 USD (25 %), image_text 0.50 USD (5 %)"


def test_no_request_rows_means_no_tenant_data_and_nothing_is_said() -> None:
    rows = allocate(ServiceWindow("ml", "vc", Decimal("3"), 100), []).rows  # only the idle row
    assert spend_drivers(rows) is None
    assert spend_drivers([]) is None
    assert drivers_of([("ml", "vc")], {}, {}) is None  # no figures read for the service at all


def test_drivers_of_sums_the_selected_services_only_and_names_those_without_figures() -> None:
    windows = {("ml", "a"): ServiceWindow("ml", "a", Decimal("2"), 100),
               ("ml", "b"): ServiceWindow("ml", "b", Decimal("4"), 100),
               ("ml", "bad"): ServiceWindow("ml", "bad", Decimal("1"), 100)}
    usage = {("ml", "a"): [TenantUsage("acme", "image", 100, 1)],
             ("ml", "b"): [TenantUsage("globex", "text", 50, 1)],
             ("ml", "bad"): [TenantUsage("acme", "text", float("nan"), 1)]}
    drivers = drivers_of([("ml", "a"), ("ml", "bad"), ("ml", "gone")], windows, usage)
    assert drivers is not None
    assert drivers.tenants == (("acme", Decimal("2")),) and drivers.spend_usd == Decimal("2")  # b not selected
    assert drivers.unknown == ("ml/bad", "ml/gone")
    assert all(v.endswith("; not known for ml/bad, ml/gone") for _, v in drivers.facts())
