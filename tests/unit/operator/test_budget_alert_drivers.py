"""A budget alert names the top tenants and modalities behind the spend (showback's allocation of what was read
over the period), and says nothing about tenants when nothing could be read (pure, no cluster)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

from modalscale.costmodel.budget import AlertKind
from modalscale.costmodel.showback import ServiceWindow, TenantUsage
from modalscale.operator.budget.plan import TenantUsageRead, wants_drivers
from tests.unit.operator.test_budget_plan import make_isvc, make_policy, persisted
from tests.unit.operator.test_budget_tenant_reject import T0, evaluate, tenant_policy

NOTIFY = [{"name": "room", "type": "Slack", "secretRef": {"name": "slack"}}]


def usage(error: str | None = None) -> TenantUsageRead:
    """vc spent 2 USD over 3600 replica-s: five tenants, two modalities, 400 s idle; ocr (not selected) too."""
    if error:
        return TenantUsageRead(error=error)
    rows = [TenantUsage("acme", "image", 1600, 10), TenantUsage("globex", "text", 900, 10),
            TenantUsage("initech", "image", 400, 4), TenantUsage("umbrella", "text", 200, 2),
            TenantUsage("hooli", "text", 100, 1)]
    return TenantUsageRead({("ml", "vc"): ServiceWindow("ml", "vc", Decimal("2"), 3600),
                            ("ml", "ocr"): ServiceWindow("ml", "ocr", Decimal("50"), 3600)},
                           {("ml", "vc"): rows, ("ml", "ocr"): [TenantUsage("zeta", "image", 3600, 9)]})


def crossing(read: TenantUsageRead | None, tenants: bool = False) -> Any:
    spec: dict[str, Any] = {"selector": {"matchLabels": {"app": "vc"}}, "notifications": NOTIFY}
    policy = tenant_policy(**spec | {"selector": {"matchLabels": {"app": "vc"}, "tenants": ["acme"]},
                                     "limit": {"amount": "0.5", "currency": "USD"}}) if tenants else make_policy(
        **spec, limit={"amount": "0.01", "currency": "USD"}, thresholds=[{"percent": 50, "actions": ["Alert"]}])
    isvcs = (make_isvc("vc", labels={"app": "vc"}), make_isvc("ocr"))
    if tenants:
        return evaluate(policy, read, *isvcs)
    # The ledger starts at T0; an hour later the plain policy's 0.01 USD limit is crossed.
    started = persisted(policy, evaluate(policy, None, *isvcs).status_patch)
    return evaluate(started, read, *isvcs, now=T0 + dt.timedelta(hours=1))


def facts(plan: Any) -> dict[str, str]:
    (alert,) = [a for a in plan.alerts if a.kind is AlertKind.THRESHOLD_CROSSED]
    return dict(alert.facts())


def test_a_threshold_alert_names_the_top_three_tenants_the_rest_as_other_and_the_modalities() -> None:
    for tenants in (False, True):  # a plain policy (the handler reads for its alert) and a tenant-scoped one
        plan = crossing(usage(), tenants)
        shown = facts(plan)
        assert shown["Top tenants"] == ("acme 0.89 USD (44 %), globex 0.50 USD (25 %), initech 0.22 USD (11 %), "
                                        "other 0.17 USD (8 %); idle 0.22 USD (11 %)"), shown
        assert shown["Top modalities"] == "image 1.11 USD (56 %), text 0.67 USD (33 %)"
        assert "zeta" not in str(shown)  # ocr is not selected
        # The same text is what the outbox stores and every platform renders.
        (entry,) = plan.status_patch["pendingAlerts"]
        assert {"label": "Top tenants", "value": shown["Top tenants"]} in entry["facts"]


def test_nothing_is_said_about_tenants_when_nothing_could_be_read() -> None:
    for read in (None, usage(error="Prometheus at http://prom did not answer")):
        shown = facts(crossing(read))
        assert "Top tenants" not in shown and "Top modalities" not in shown
        assert "acme" not in str(shown) and "other" not in str(shown)


def test_only_spend_alerts_want_the_figures() -> None:
    plan = crossing(None)
    assert wants_drivers(plan.alerts)
    assert not wants_drivers([])
