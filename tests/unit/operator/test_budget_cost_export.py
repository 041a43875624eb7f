"""``modalscale cost export``: FOCUS rows from BudgetPolicy ledgers, one per service, summing to the ledgers."""

from __future__ import annotations

import csv
import datetime as dt
import io
import json
from decimal import Decimal
from typing import Any

from modalscale.cli import main
from modalscale.costmodel.catalog import PricingTier
from modalscale.costmodel.focus import FOCUS_COLUMNS, write_focus_csv
from modalscale.costmodel.showback import TenantUsage
from modalscale.operator.cost_cli import export_rows


def policy(name: str, period_start: str, period_end: str, observed: str, services: list[tuple[str, str, str]],
           ns: str = "ml") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": ns},
            "status": {"periodStart": period_start, "periodEnd": period_end,
                       "ledger": {"observedTime": observed,
                                  "services": [{"namespace": n, "name": s, "spent": spent}
                                               for n, s, spent in services]}}}


DAILY = policy("daily", "2026-11-30T00:00:00Z", "2026-12-01T00:00:00Z", "2026-11-30T12:00:00Z",
               [("ml", "a", "1.500000000"), ("ml", "b", "0.250000000")])
MONTHLY = policy("monthly", "2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z", "2026-11-30T12:00:00Z",
                 [("ml", "a", "40.123456789")])
FRESH = {"metadata": {"name": "fresh", "namespace": "ml"}, "status": {}}
DAILY_START, DAILY_OBSERVED = dt.datetime(2026, 11, 30, tzinfo=dt.UTC), dt.datetime(2026, 11, 30, 12, tzinfo=dt.UTC)


def test_each_service_is_exported_once_from_the_longest_ledger_window() -> None:
    result = export_rows([DAILY, MONTHLY, FRESH], {("ml", "b"): PricingTier.SPOT})
    assert [(r["ResourceName"], r["BilledCost"]) for r in result.rows] == [("a", "40.123456789"),
                                                                           ("b", "0.250000000")]
    a, b = result.rows
    assert (a["ChargePeriodStart"], a["ChargePeriodEnd"]) == ("2026-11-01T00:00:00Z", "2026-11-30T12:00:00Z")
    assert (a["BillingPeriodStart"], a["BillingPeriodEnd"]) == ("2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z")
    assert json.loads(a["Tags"])["modalscale.io/budgetpolicy"] == "ml/monthly"
    assert json.loads(b["Tags"])["modalscale.io/budgetpolicy"] == "ml/daily"
    assert (a["PricingCategory"], b["PricingCategory"]) == ("Standard", "Dynamic")
    assert result.skipped == ["ml/fresh: not evaluated yet (no status: is an operator running and watching its "
                              "namespace?)"] and result.policies == 2
    # 40.123456789 + 0.25 = 40.373456789: the export adds up to the ledgers it kept, nothing counted twice.
    assert sum(Decimal(r["BilledCost"]) for r in result.rows) == Decimal("40.373456789")


def test_an_invalid_policy_is_reported_as_refused_with_its_field_not_as_not_evaluated_yet() -> None:
    # User report item 15: a policy the operator refused (Ready=False/InvalidSpec, no ledger) read "not evaluated
    # yet (no ledger)".
    invalid = {"metadata": {"name": "typo", "namespace": "ml"},
               "status": {"observedGeneration": 2, "conditions": [
                   {"type": "Ready", "status": "False", "reason": "InvalidSpec",
                    "message": "spec.thresholds[0].actions: List should have at least 1 item after validation"}]}}
    (why,) = export_rows([invalid]).skipped
    assert why.startswith("ml/typo: not evaluated: Ready=False/InvalidSpec: spec.thresholds[0].actions")
    assert "not evaluated yet" not in why
    evaluating = {"metadata": {"name": "soon", "namespace": "ml"},
                  "status": {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "Evaluating"}]}}
    assert export_rows([evaluating]).skipped == ["ml/soon: not evaluated yet (no ledger)"]


def test_a_corrupt_ledger_is_skipped_with_the_field_named() -> None:
    bad = policy("bad", "2026-11-30T00:00:00Z", "2026-12-01T00:00:00Z", "yesterday", [("ml", "a", "1")])
    result = export_rows([bad])
    assert result.rows == [] and "status.ledger.observedTime" in result.skipped[0]


def test_every_unreadable_status_field_is_named_not_reported_as_not_evaluated() -> None:
    """A readable ledger beside a status field that does not parse (periodStart, periodEnd) is skipped naming that
    field; it read "not evaluated yet (no ledger)" for periodEnd."""
    for field, bad in (("periodEnd", policy("bad", "2026-11-30T00:00:00Z", "tomorrow", "2026-11-30T12:00:00Z",
                                            [("ml", "a", "1")])),
                       ("periodStart", policy("bad", "last monday", "2026-12-01T00:00:00Z",
                                              "2026-11-30T12:00:00Z", [("ml", "a", "1")]))):
        (why,) = export_rows([bad]).skipped
        assert f"status.{field}" in why and "not evaluated" not in why, (field, why)


def test_rows_write_as_focus_csv_with_every_column() -> None:
    buf = io.StringIO()
    assert write_focus_csv(export_rows([DAILY]).rows, buf) == 2
    header = next(csv.reader(io.StringIO(buf.getvalue())))
    assert tuple(header) == FOCUS_COLUMNS


def test_cli_registers_cost_export() -> None:
    import contextlib

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(["cost", "export", "--help"])
        except SystemExit as exc:
            assert exc.code == 0
    assert "--namespace" in out.getvalue() and "--output" in out.getvalue()


# ------------------------------------------------------------------------------------------------ --by-tenant
def test_by_tenant_splits_each_row_over_tenants_modalities_and_idle_and_the_split_sums_to_the_ledger() -> None:
    windows: list[tuple[dt.datetime, dt.datetime]] = []

    def usage(start: dt.datetime, end: dt.datetime) -> dict[tuple[str, str], tuple[Decimal, list[TenantUsage]]]:
        windows.append((start, end))
        # a ran 43200 replica-s; acme's images used 10800 (25 %), globex's text 21600 (50 %), 25 % idle.
        return {("ml", "a"): (Decimal(43200), [TenantUsage("acme", "image", 10800, 100),
                                               TenantUsage("globex", "text", 21600, 900)])}

    result = export_rows([DAILY], usage=usage)
    rows = [(json.loads(r["Tags"]).get("modalscale.io/tenant"), json.loads(r["Tags"]).get("modalscale.io/modality"),
             json.loads(r["Tags"])["modalscale.io/allocation"] if r["ResourceName"] == "a" else None,
             r["ResourceName"], r["BilledCost"]) for r in result.rows]
    # 1.5 USD: acme 0.375, globex 0.75, idle 0.375; b has no usage: one row, noted.
    assert rows == [("acme", "image", "request", "a", "0.375000000"), ("globex", "text", "request", "a", "0.750000000"),
                    (None, None, "idle", "a", "0.375000000"), (None, None, None, "b", "0.250000000")]
    assert sum(Decimal(r["BilledCost"]) for r in result.rows) == Decimal("1.75")
    assert windows == [(DAILY_START, DAILY_OBSERVED)]  # one read per distinct window
    assert all(json.loads(r["Tags"])["modalscale.io/budgetpolicy"] == "ml/daily" for r in result.rows)
    assert result.notes == ["ml/b: not split by tenant: no gateway usage or ledger replica-seconds in Prometheus "
                            "over its window"]


def test_by_tenant_keeps_a_row_whose_usage_is_refused_and_says_why() -> None:
    result = export_rows([DAILY], usage=lambda s, e: {("ml", "a"): (Decimal(100), [
        TenantUsage("acme", "image", float("nan"), 1)])})
    assert [r["BilledCost"] for r in result.rows] == ["1.500000000", "0.250000000"]
    assert result.notes[0].startswith("ml/a: not split by tenant: ml/a.usage[acme/image].service_s")


