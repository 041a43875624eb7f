"""Cost records in FOCUS form (FinOps Open Cost and Usage Specification 1.x) and a CSV writer.

Why a module: ``modalscale cost export`` hands spend to FinOps tools that read FOCUS. The rows are built here,
purely, from the ledger's :class:`~modalscale.costmodel.ledger.CostSegment` intervals (or, when only the status
is at hand, from the per-service period-to-date ledger entries).

Column set: the FOCUS 1.0 columns (https://focus.finops.org/focus-specification/v1-0/, column definitions in
https://github.com/FinOps-Open-Cost-and-Usage-Spec/FOCUS_Spec/tree/main/specification/columns). Values used:

* ``ChargeCategory`` ``Usage``, ``ChargeFrequency`` ``Usage-Based``, ``ChargeClass`` null (no corrections).
* ``PricingCategory`` ``Standard`` for OnDemand, ``Dynamic`` for Spot ("a variable rate determined by the
  service provider ... like interruptible resources").
* ``ServiceCategory`` ``AI and Machine Learning``; ``ResourceType`` ``InferenceService``; ``SubAccountId`` is
  the namespace.
* Costs are catalog list prices with no discounts, so ``BilledCost = EffectiveCost = ListCost =
  ContractedCost`` and ``ListUnitPrice = ContractedUnitPrice`` (USD per replica-hour).
* ``ConsumedQuantity = PricingQuantity`` in ``Replica-Hours`` (UnitFormat ``<plural-units>-<time>``); null for
  period-to-date rows built from status, where replica-hours are not recorded.
* Commitment-discount, region and SKU columns are null (not applicable to an in-cluster estimate).

**Tenant and modality tags** (:func:`split_by_tenant`): a service's record may be split into one record per
(tenant, modality) of the gateway's requests plus one ``idle`` record, by showback's allocation
(:func:`modalscale.costmodel.showback.allocate`: replica-seconds used; idle capacity is its own record, never
spread). Each carries ``modalscale.io/allocation`` (``request`` or ``idle``) and, on request records,
``modalscale.io/tenant`` and ``modalscale.io/modality`` in ``Tags``; the split records sum to the service's
record exactly (1e-9 USD), so a FOCUS consumer that sums ``BilledCost`` gets the same total. Their
``ConsumedQuantity``/``PricingQuantity`` split in the same shares (the replica-seconds each row was charged for) and
sum to the service record's exactly; ``ListUnitPrice``/``ContractedUnitPrice`` stay the service's, as FOCUS defines
them per unit ("the unit price for a single Pricing Unit"), so unit price x PricingQuantity = cost on every split
record too. FOCUS 1.0 ConsumedQuantity is "the volume ... used" and PricingQuantity "the volume ... used or
purchased, based on the Pricing Unit": a tenant's record carries its own volume, not the service's.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from typing import IO

from modalscale.costmodel.catalog import PricingTier
from modalscale.costmodel.ledger import CostSegment, Ledger, format_time
from modalscale.costmodel.money import MONEY_CONTEXT, format_usd, quantize_ledger_usd
from modalscale.costmodel.showback import ServiceWindow, TenantUsage, allocate, split_quantity

FOCUS_VERSION = "1.0"
FOCUS_COLUMNS: tuple[str, ...] = (
    "AvailabilityZone", "BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency",
    "BillingPeriodEnd", "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription",
    "ChargeFrequency", "ChargePeriodEnd", "ChargePeriodStart", "CommitmentDiscountCategory",
    "CommitmentDiscountId", "CommitmentDiscountName", "CommitmentDiscountStatus", "CommitmentDiscountType",
    "ConsumedQuantity", "ConsumedUnit", "ContractedCost", "ContractedUnitPrice", "EffectiveCost",
    "InvoiceIssuerName", "ListCost", "ListUnitPrice", "PricingCategory", "PricingQuantity", "PricingUnit",
    "ProviderName", "PublisherName", "RegionId", "RegionName", "ResourceId", "ResourceName", "ResourceType",
    "ServiceCategory", "ServiceName", "SkuId", "SkuPriceId", "SubAccountId", "SubAccountName", "Tags",
)
"""The FOCUS 1.0 column IDs, in the order written."""

CONSUMED_UNIT = "Replica-Hours"
PROVIDER = "modalscale"
SERVICE_NAME = "modalscale InferenceService"
SERVICE_CATEGORY = "AI and Machine Learning"


@dataclass(frozen=True)
class CostRecord:
    """Spend of one service over ``[start, end)`` (one FOCUS row).

    Attributes:
        cost_usd: Spend in USD (Decimal).
        replica_hours: Replicas x hours; None when not known.
        usd_per_replica_hour: List price of one replica-hour; None when not known.
        tier: Pricing tier of the service.
        tags: Extra tags (e.g. the InferenceService labels), written as the FOCUS ``Tags`` JSON object.
    """

    namespace: str
    name: str
    start: datetime
    end: datetime
    cost_usd: Decimal
    replica_hours: Decimal | None = None
    usd_per_replica_hour: Decimal | None = None
    tier: PricingTier = PricingTier.ON_DEMAND
    tags: Mapping[str, str] = field(default_factory=dict)


def cost_records_from_segments(segments: Iterable[CostSegment],
                               tiers: Mapping[tuple[str, str], PricingTier] | None = None,
                               counted_only: bool = False) -> list[CostRecord]:
    """One record per ledger segment (interval x service), unit price = rate / replicas.

    Args:
        segments: From :attr:`LedgerAdvance.segments`.
        tiers: (namespace, name) -> tier; OnDemand when missing.
        counted_only: Keep only segments counted in the current period.
    """
    records = []
    for seg in segments:
        if counted_only and not seg.counted:
            continue
        unit = None
        if seg.replicas and seg.cost_usd_per_hour is not None:
            unit = quantize_ledger_usd(MONEY_CONTEXT.divide(seg.cost_usd_per_hour, Decimal(seg.replicas)))
        records.append(CostRecord(seg.namespace, seg.name, seg.start, seg.end, seg.cost_usd, seg.replica_hours,
                                  unit, (tiers or {}).get((seg.namespace, seg.name), PricingTier.ON_DEMAND)))
    return records


def cost_records_from_ledger(ledger: Ledger,
                             tiers: Mapping[tuple[str, str], PricingTier] | None = None) -> list[CostRecord]:
    """Period-to-date records from a ledger read back from status (``[periodStart, observedTime)``).

    Replica-hours are not in the status, so ``ConsumedQuantity`` is null in these rows.

    Raises:
        ValueError: The ledger has no ``period_start``/``observed_time`` yet.
    """
    if ledger.period_start is None or ledger.observed_time is None:
        raise ValueError("the ledger has not been evaluated yet (no periodStart/observedTime)")
    return [CostRecord(e.namespace, e.name, ledger.period_start, ledger.observed_time, e.spent_usd, None, None,
                       (tiers or {}).get(e.key, PricingTier.ON_DEMAND)) for e in ledger.entries]


TENANT_TAG = "modalscale.io/tenant"
MODALITY_TAG = "modalscale.io/modality"
ALLOCATION_TAG = "modalscale.io/allocation"
"""``request`` (a tenant's requests of one modality) or ``idle`` (capacity no request used)."""
SHOWBACK_FLAGS_TAG = "modalscale.io/showback-flags"
"""Showback's row flags (``CounterReset``, ``Oversubscribed``), ``;``-separated, when any."""


def split_by_tenant(record: CostRecord, usage: Sequence[TenantUsage],
                    available_replica_s: Decimal | float | int) -> list[CostRecord]:
    """``record`` split over the (tenant, modality) rows of showback's allocation, plus its idle record.

    Args:
        record: One service's spend over ``[start, end)``.
        usage: The gateway's per (tenant, modality) counter increases over the same window.
        available_replica_s: Replica-seconds the service ran over the window, s.
    Returns:
        Records with the same service, window, tier and tags plus the tenant, modality and allocation tags (module
        docstring); their ``cost_usd`` sum to ``record.cost_usd`` (to 1e-9 USD) exactly, and their
        ``replica_hours`` (when the record has them) to ``record.replica_hours`` exactly, in the same shares.
    Raises:
        modalscale.costmodel.showback.ShowbackInputError: Figures the allocation refuses (NaN, infinite,
            negative), naming the field.
    """
    window = ServiceWindow(record.namespace, record.name, quantize_ledger_usd(record.cost_usd), available_replica_s)
    out = []
    rows = allocate(window, usage, accept_counter_resets=True).rows
    hours: Sequence[Decimal | None] = [None] * len(rows)
    if record.replica_hours is not None:
        hours = split_quantity(record.replica_hours, [row.replica_s for row in rows])
    for row, row_hours in zip(rows, hours):
        tags = {**dict(record.tags), ALLOCATION_TAG: row.kind}
        if row.tenant is not None and row.modality is not None:
            tags.update({TENANT_TAG: row.tenant, MODALITY_TAG: row.modality})
        if row.flags:
            tags[SHOWBACK_FLAGS_TAG] = ";".join(row.flags)
        out.append(replace(record, cost_usd=row.usd, replica_hours=row_hours, tags=tags))
    return out


def _dec(value: Decimal | None) -> str:
    return "" if value is None else format_usd(value)


def focus_rows(records: Iterable[CostRecord], *, billing_period: tuple[datetime, datetime] | None = None,
               billing_account_id: str = "modalscale", billing_account_name: str = "modalscale cluster",
               currency: str = "USD") -> list[dict[str, str]]:
    """FOCUS 1.0 rows (column ID -> string; null = empty string) for ``records``.

    Args:
        records: Cost records; ``cost_usd`` is written unrounded (1e-9 USD resolution).
        billing_period: ``[start, end)`` of the billing period (e.g. the budget period); defaults to each
            row's charge period.
        billing_account_id, billing_account_name: Who the spend is attributed to (e.g. the cluster name).
        currency: ISO 4217; the catalog is USD.
    Returns:
        One dict per record with exactly :data:`FOCUS_COLUMNS` as keys.
    """
    rows = []
    for r in records:
        b_start, b_end = billing_period or (r.start, r.end)
        cost = _dec(r.cost_usd)
        tags = {"modalscale.io/namespace": r.namespace, "modalscale.io/inferenceservice": r.name,
                "modalscale.io/pricing-tier": r.tier.value, **dict(r.tags)}
        description = f"{r.tier.value} replicas of InferenceService {r.namespace}/{r.name}"
        if r.usd_per_replica_hour is not None:
            description += f" at {format_usd(r.usd_per_replica_hour)} {currency} per replica-hour"
        row = dict.fromkeys(FOCUS_COLUMNS, "")
        row.update({
            "BilledCost": cost, "EffectiveCost": cost, "ListCost": cost, "ContractedCost": cost,
            "BillingAccountId": billing_account_id, "BillingAccountName": billing_account_name,
            "BillingCurrency": currency,
            "BillingPeriodStart": format_time(b_start), "BillingPeriodEnd": format_time(b_end),
            "ChargePeriodStart": format_time(r.start), "ChargePeriodEnd": format_time(r.end),
            "ChargeCategory": "Usage", "ChargeFrequency": "Usage-Based", "ChargeDescription": description,
            "ConsumedQuantity": _dec(r.replica_hours),
            "ConsumedUnit": CONSUMED_UNIT if r.replica_hours is not None else "",
            "PricingQuantity": _dec(r.replica_hours),
            "PricingUnit": CONSUMED_UNIT if r.replica_hours is not None else "",
            "ListUnitPrice": _dec(r.usd_per_replica_hour), "ContractedUnitPrice": _dec(r.usd_per_replica_hour),
            "PricingCategory": "Dynamic" if r.tier is PricingTier.SPOT else "Standard",
            "InvoiceIssuerName": PROVIDER, "ProviderName": PROVIDER, "PublisherName": PROVIDER,
            "ResourceId": f"inferenceservices.modalscale.io/{r.namespace}/{r.name}", "ResourceName": r.name,
            "ResourceType": "InferenceService", "ServiceCategory": SERVICE_CATEGORY, "ServiceName": SERVICE_NAME,
            "SubAccountId": r.namespace, "SubAccountName": r.namespace,
            "Tags": json.dumps(tags, sort_keys=True, separators=(",", ":")),
        })
        rows.append(row)
    return rows


def write_focus_csv(rows: Iterable[Mapping[str, str]], out: IO[str]) -> int:
    """Write FOCUS rows as CSV (header = :data:`FOCUS_COLUMNS`, RFC 4180 quoting); returns the row count."""
    writer = csv.DictWriter(out, fieldnames=list(FOCUS_COLUMNS), extrasaction="raise", lineterminator="\r\n")
    writer.writeheader()
    count = 0
    for row in rows:
        writer.writerow(row)
        count += 1
    return count
