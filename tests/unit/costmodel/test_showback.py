"""Showback allocation: spend split by replica-seconds used, idle apart, rows summing to the spend exactly."""

from __future__ import annotations

import random
from collections.abc import Sequence
from decimal import Decimal

import pytest

from modalscale.costmodel.showback import (
    COUNTER_RESET,
    IDLE,
    OVERSUBSCRIBED,
    REQUEST,
    ServiceWindow,
    ShowbackInputError,
    ShowbackRow,
    TenantUsage,
    aggregate,
    allocate,
)

Q = Decimal("0.000000001")


def window(spend: str, available_s: float | int | Decimal, name: str = "vc") -> ServiceWindow:
    return ServiceWindow("ml", name, Decimal(spend), available_s)


def by_key(rows: Sequence[ShowbackRow]) -> dict[tuple[str | None, str | None, str], ShowbackRow]:
    return {(r.tenant, r.modality, r.kind): r for r in rows}


def test_two_tenants_with_different_mixes_split_by_service_seconds_and_idle_is_its_own_row() -> None:
    # One replica for an hour at 3.60 USD/h: 3600 replica-seconds for 3.60 USD, i.e. 0.001 USD per replica-second.
    # acme sends few large image requests and many small text ones; globex a few image_text ones.
    usage = [TenantUsage("acme", "image", service_s=1200, requests=400, images=400, image_pixels=400 * 640 * 480),
             TenantUsage("acme", "text", service_s=300, requests=3000, text_tokens=90_000),
             TenantUsage("globex", "image_text", service_s=900.0, requests=100, images=100, text_tokens=2000)]
    result = allocate(window("3.600000000", 3600), usage)
    rows = by_key(result.rows)
    # By hand: used 2400 s of 3600; each row = 3.60 x seconds / 3600; idle = 3.60 x 1200 / 3600.
    assert [(r.tenant, r.modality, r.kind, r.usd) for r in result.rows] == [
        ("acme", "image", REQUEST, Decimal("1.2")), ("acme", "text", REQUEST, Decimal("0.3")),
        ("globex", "image_text", REQUEST, Decimal("0.9")), (None, None, IDLE, Decimal("1.2"))]
    assert sum(r.usd for r in result.rows) == Decimal("3.6")
    assert rows[("acme", "image", REQUEST)].usd_per_request == Decimal("0.003")
    assert rows[("acme", "text", REQUEST)].usd_per_request == Decimal("0.0001")
    assert rows[("globex", "image_text", REQUEST)].usd_per_request == Decimal("0.009")
    assert rows[(None, None, IDLE)].usd_per_request is None
    assert rows[(None, None, IDLE)].replica_s == 1200
    assert result.used_replica_s == 2400 and not result.oversubscribed and not result.partial


def test_the_quanta_left_by_flooring_go_to_the_largest_remainders_and_the_rows_sum_exactly() -> None:
    # 10 nano-dollars over three equal users of all capacity: 10/3 each -> 3, 3, 3 and one quantum left over,
    # which goes to the first row (equal remainders: ties to the first in order).
    usage = [TenantUsage(t, "text", service_s=1, requests=1) for t in ("a", "b", "c")]
    result = allocate(window("0.000000010", 3), usage)
    assert [r.usd for r in result.rows] == [4 * Q, 3 * Q, 3 * Q, Decimal(0)]


def test_rows_sum_to_the_spend_exactly_over_many_uneven_inputs() -> None:
    rng = random.Random(22)
    for _ in range(300):
        spend = Decimal(rng.randrange(0, 10**12)) * Q
        users = [TenantUsage(f"t{i}", rng.choice(["image", "text", "image_text"]),
                             service_s=rng.random() * 1000, requests=rng.randrange(0, 5000)) for i in range(7)]
        available = rng.choice([sum(float(u.service_s) for u in users) * rng.uniform(0.5, 3), 1e-3, 86_400])
        result = allocate(window(str(spend), available), users)
        assert sum(r.usd for r in result.rows) == spend
        assert all(r.usd >= 0 and r.usd % Q == 0 for r in result.rows)


def test_no_requests_make_the_whole_spend_idle() -> None:
    result = allocate(window("1.234567891", 7200), [])
    assert [(r.kind, r.usd, r.replica_s) for r in result.rows] == [(IDLE, Decimal("1.234567891"), Decimal(7200))]


def test_no_spend_and_no_capacity_give_zero_rows() -> None:
    result = allocate(window("0", 0), [TenantUsage("a", "image", 0, 0)])
    assert [r.usd for r in result.rows] == [0, 0]


def test_spend_with_no_replica_second_is_idle_and_requests_that_used_some_share_it() -> None:
    # At 0 replicas the ledger still charges the gateway's pods: no replica-second, 1 USD spent. No request: all idle;
    # requests that used replica time the counters saw (an edge of the window) share it as oversubscribed rows.
    idle = allocate(window("1", 0), [TenantUsage("a", "image", 0, 3)])
    assert [(r.kind, r.usd) for r in idle.rows] == [(REQUEST, Decimal(0)), (IDLE, Decimal(1))]
    assert any("no replica ran" in n for n in idle.notes)
    shared = allocate(window("1", 0), [TenantUsage("a", "image", 3, 3), TenantUsage("b", "text", 1, 1)])
    assert [(r.kind, r.usd) for r in shared.rows] == [(REQUEST, Decimal("0.75")), (REQUEST, Decimal("0.25")),
                                                      (IDLE, Decimal(0))]
    assert shared.oversubscribed


def test_spend_over_zero_replica_seconds_is_idle_or_the_requests_shares() -> None:
    # A service at 0 replicas still pays for its gateway pods (the ledger charges them with the service): 0.0084
    # USD over 0 replica-seconds. No request: all of it is idle (capacity no request used).
    result = allocate(window("0.008400000", 0), [])
    assert [(r.kind, r.usd, r.replica_s) for r in result.rows] == [(IDLE, Decimal("0.0084"), Decimal(0))]
    assert not result.oversubscribed
    # Requests served though no replica was counted (one started and stopped between two evaluations): the
    # requests used more than the 0 counted, so shares of the used seconds (3:1), idle 0, flagged.
    usage = [TenantUsage("a", "image", 15, 3), TenantUsage("b", "text", 5, 1)]
    result = allocate(window("0.008400000", 0), usage)
    assert [(r.tenant, r.kind, r.usd) for r in result.rows] == [
        ("a", REQUEST, Decimal("0.0063")), ("b", REQUEST, Decimal("0.0021")), (None, IDLE, Decimal(0))]
    assert result.oversubscribed and all(OVERSUBSCRIBED in r.flags for r in result.rows)


def test_concurrent_requests_using_more_than_the_replicas_ran_share_the_spend_and_leave_no_idle() -> None:
    # A replica batching requests: 150 s of request time inside 100 replica-seconds. Shares of the used seconds:
    # a = 1.50 x 100/150 = 1.00, b = 1.50 x 50/150 = 0.50; idle 0.
    usage = [TenantUsage("a", "image", 100, 10), TenantUsage("b", "image", 50, 5)]
    result = allocate(window("1.500000000", 100), usage)
    assert [(r.tenant, r.kind, r.usd) for r in result.rows] == [
        ("a", REQUEST, Decimal("1")), ("b", REQUEST, Decimal("0.5")), (None, IDLE, Decimal(0))]
    assert result.oversubscribed and all(OVERSUBSCRIBED in r.flags for r in result.rows)
    assert result.rows[-1].replica_s == 0
    assert any("overlap" in n for n in result.notes)


@pytest.mark.parametrize(("usage", "field"), [
    (TenantUsage("a", "image", float("nan"), 1), "ml/vc.usage[a/image].service_s"),
    (TenantUsage("a", "image", 1, float("inf")), "ml/vc.usage[a/image].requests"),
    (TenantUsage("a", "image", -0.5, 1), "ml/vc.usage[a/image].service_s"),
    (TenantUsage("a", "image", 1, 1, text_tokens=-3), "ml/vc.usage[a/image].text_tokens"),
    (TenantUsage("a", "image", Decimal("NaN"), 1), "ml/vc.usage[a/image].service_s"),
    (TenantUsage("a", "image", 1, 1, counter_resets=1), "ml/vc.usage[a/image].counter_resets"),
    (TenantUsage("", "image", 1, 1), "ml/vc.usage[/image]"),
], ids=["nan-seconds", "inf-requests", "negative-seconds", "negative-tokens", "decimal-nan", "reset", "no-tenant"])
def test_bad_usage_is_refused_naming_the_field(usage: TenantUsage, field: str) -> None:
    with pytest.raises(ShowbackInputError) as err:
        allocate(window("1", 100), [usage])
    assert err.value.field == field
    assert field in str(err.value)


@pytest.mark.parametrize(("w", "field"), [
    (ServiceWindow("ml", "vc", Decimal("1.0000000001"), 10), "ml/vc.spend_usd"),
    (ServiceWindow("ml", "vc", Decimal("-1"), 10), "ml/vc.spend_usd"),
    (ServiceWindow("ml", "vc", Decimal("1"), float("nan")), "ml/vc.available_replica_s"),
], ids=["finer-than-ledger", "negative-spend", "nan-capacity"])
def test_bad_ledger_figures_are_refused_naming_the_field(w: ServiceWindow, field: str) -> None:
    with pytest.raises(ShowbackInputError) as err:
        allocate(w, [])
    assert err.value.field == field


def test_a_pair_given_twice_is_refused() -> None:
    with pytest.raises(ShowbackInputError, match="given twice"):
        allocate(window("1", 10), [TenantUsage("a", "text", 1, 1), TenantUsage("a", "text", 2, 2)])


def test_a_counter_reset_is_priced_only_when_accepted_and_then_flagged_partial() -> None:
    usage = [TenantUsage("a", "text", 10, 10, counter_resets=1), TenantUsage("b", "text", 10, 10)]
    result = allocate(window("1", 40), usage, accept_counter_resets=True)
    assert result.partial
    assert [r.flags for r in result.rows] == [(COUNTER_RESET,), (), ()]
    assert [r.usd for r in result.rows] == [Decimal("0.25"), Decimal("0.25"), Decimal("0.5")]


def test_aggregate_by_tenant_sums_modalities_and_services_and_keeps_idle_apart() -> None:
    first = allocate(window("3.6", 3600), [TenantUsage("acme", "image", 1200, 400),
                                           TenantUsage("acme", "text", 300, 3000),
                                           TenantUsage("globex", "image", 900, 100)])
    second = allocate(window("1", 1000, name="ocr"), [TenantUsage("acme", "image", 500, 50)])
    rows = aggregate([*first.rows, *second.rows], ["tenant"])
    assert [(r.tenant, r.modality, r.namespace, r.kind, r.usd, r.requests) for r in rows] == [
        ("acme", None, None, REQUEST, Decimal("2.0"), Decimal(3450)),
        ("globex", None, None, REQUEST, Decimal("0.9"), Decimal(100)),
        (None, None, None, IDLE, Decimal("1.7"), Decimal(0))]
    assert sum(r.usd for r in rows) == Decimal("4.6")
    assert rows[0].usd_per_request == (Decimal("2.0") / 3450).quantize(Q)


def test_aggregate_refuses_an_unknown_dimension() -> None:
    with pytest.raises(ShowbackInputError, match="by"):
        aggregate([], ["tenant", "pod"])
