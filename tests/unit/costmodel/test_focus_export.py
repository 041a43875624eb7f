"""FOCUS export: header is the FOCUS 1.0 column set, money sums equal the ledger, quantities by hand."""

from __future__ import annotations

import csv
import io
from datetime import datetime, timezone
from decimal import Decimal

from modalscale.costmodel.catalog import PricingTier
from modalscale.costmodel.focus import (
    FOCUS_COLUMNS,
    CostRecord,
    cost_records_from_ledger,
    cost_records_from_segments,
    focus_rows,
    split_by_tenant,
    write_focus_csv,
)
from modalscale.costmodel.ledger import Ledger, ServiceObservation, advance
from modalscale.costmodel.showback import TenantUsage
from tests.factories import ledger_json, read_ledger

UTC = timezone.utc
D = Decimal


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def _ledger_run():
    a = [ServiceObservation("ml", "ranker", 2, D("1.5")), ServiceObservation("ml", "captioner", 1, D("0.704574739"))]
    first = advance(Ledger(), a, utc(2026, 5, 1, 22), "Daily")
    second = advance(first.ledger, a, utc(2026, 5, 2, 1, 30), "Daily")  # crosses midnight
    return second


def test_header_is_the_focus_1_0_column_set_with_the_named_columns() -> None:
    out = io.StringIO()
    write_focus_csv([], out)
    header = out.getvalue().strip().split(",")
    assert header == list(FOCUS_COLUMNS) and len(header) == len(set(header))
    for column in ("BilledCost", "EffectiveCost", "ListCost", "ChargePeriodStart", "ChargePeriodEnd",
                   "BillingCurrency", "ResourceId", "ResourceName", "ServiceName", "ChargeCategory",
                   "ConsumedQuantity", "ConsumedUnit", "PricingCategory", "ServiceCategory"):
        assert column in header


def test_rows_sum_to_the_ledger_and_quantities_are_replica_hours() -> None:
    result = _ledger_run()
    records = cost_records_from_segments(result.segments, {("ml", "captioner"): PricingTier.SPOT})
    rows = focus_rows(records)
    out = io.StringIO()
    assert write_focus_csv(rows, out) == 4  # 2 services x (before, after midnight)
    parsed = list(csv.DictReader(io.StringIO(out.getvalue())))
    total = sum(D(r["BilledCost"]) for r in parsed)
    # ranker 2 x 1.5 x 3.5 h = 10.5; captioner 0.704574739 x 3.5 h = 2.4660115865 -> per segment rounding:
    # 2 h = 1.409149478 and 1.5 h = 1.0568621085 -> 1.056862108 (half-even)
    assert total == D("10.5") + D("1.409149478") + D("1.056862108")
    counted = sum(D(r["BilledCost"]) for r, rec in zip(parsed, records) if rec.start >= utc(2026, 5, 2))
    assert counted == result.spent_usd
    ranker = [r for r in parsed if r["ResourceName"] == "ranker"]
    assert [D(r["ConsumedQuantity"]) for r in ranker] == [D(4), D(3)]  # 2 replicas x 2 h, 2 x 1.5 h
    assert {r["ConsumedUnit"] for r in ranker} == {"Replica-Hours"}
    assert {r["ListUnitPrice"] for r in ranker} == {"1.500000000"}
    for r in parsed:
        assert r["BilledCost"] == r["EffectiveCost"] == r["ListCost"] == r["ContractedCost"]
        assert (r["ChargeCategory"], r["ChargeFrequency"], r["BillingCurrency"]) == ("Usage", "Usage-Based", "USD")
        assert r["ResourceId"] == f"inferenceservices.modalscale.io/ml/{r['ResourceName']}"
    assert {r["ResourceName"]: r["PricingCategory"] for r in parsed} == {"ranker": "Standard", "captioner": "Dynamic"}


def test_rows_from_status_alone_are_period_to_date_without_quantities() -> None:
    result = _ledger_run()
    status_ledger = read_ledger(ledger_json(result.ledger), "2026-05-02T00:00:00Z")
    rows = focus_rows(cost_records_from_ledger(status_ledger))
    assert sum(D(r["BilledCost"]) for r in rows) == result.spent_usd
    assert {(r["ChargePeriodStart"], r["ChargePeriodEnd"]) for r in rows} == {("2026-05-02T00:00:00Z",
                                                                               "2026-05-02T01:30:00Z")}
    assert {r["ConsumedQuantity"] for r in rows} == {""}


def test_split_rows_share_the_quantities_as_they_share_the_cost() -> None:
    """A segment's 4 replica-hours at 1.5 USD split over two tenants (1 h and 2 h used of 4 h) and idle: the
    quantities split as the cost does (1, 2, 1 h) and sum to the parent's 4, not 3 x 4 = 12; the unit price
    stays the parent's, so ListUnitPrice x PricingQuantity = ListCost on every row."""
    parent = CostRecord("ml", "ranker", utc(2026, 5, 1), utc(2026, 5, 1, 2), D(6), D(4), D("1.5"))
    usage = [TenantUsage("acme", "image", 3600, 10), TenantUsage("beta", "text", 7200, 20)]
    rows = focus_rows(split_by_tenant(parent, usage, 4 * 3600))
    assert [D(r["BilledCost"]) for r in rows] == [D("1.5"), D(3), D("1.5")]
    for column in ("ConsumedQuantity", "PricingQuantity"):
        assert [D(r[column]) for r in rows] == [D(1), D(2), D(1)], column
    assert all(D(r["ListUnitPrice"]) * D(r["PricingQuantity"]) == D(r["ListCost"]) for r in rows)
    assert {r["ConsumedUnit"] for r in rows} == {"Replica-Hours"}


def test_split_quantities_sum_to_the_parent_exactly_with_uneven_shares() -> None:
    """Thirds of 1 replica-hour (34 digits): the rows sum to the parent exactly (largest remainder), and a parent
    without quantities keeps them null on every split row."""
    hours = D(1) / D(3)
    parent = CostRecord("ml", "ranker", utc(2026, 5, 1), utc(2026, 5, 1, 1), D("0.000000007"), hours, D(3))
    usage = [TenantUsage("a", "image", 1, 1), TenantUsage("b", "image", 1, 1)]
    split = split_by_tenant(parent, usage, 3)
    assert sum(r.replica_hours or 0 for r in split) == hours
    assert sum(r.cost_usd for r in split) == parent.cost_usd
    bare = split_by_tenant(CostRecord("ml", "ranker", utc(2026, 5, 1), utc(2026, 5, 1, 1), D(1)), usage, 3)
    assert {r["ConsumedQuantity"] for r in focus_rows(bare)} == {""}
