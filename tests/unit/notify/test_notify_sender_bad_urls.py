"""``Sender.deliver`` never raises, whatever the Secret's URL holds (found by an adversarial probe, 6 Dec 2026:
``https://[::1/x`` raised ``ValueError: Invalid IPv6 URL`` out of it for Slack and DingTalk)."""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone
from decimal import Decimal

import pytest

from modalscale.api.budgetpolicy import parse_budget_spec
from modalscale.costmodel.budget import AlertKind, AlertState, PolicyRef, ServiceState, plan_budget
from modalscale.notify.sender import RetryPolicy, Sender

KINDS = ["Slack", "Teams", "WeCom", "DingTalk", "Feishu", "Webhook"]


def alert():
    spec = parse_budget_spec({"selector": {"namespaces": ["ml"]}, "period": "Daily", "limit": {"amount": "50"},
                              "thresholds": [{"percent": 80, "actions": ["Alert"]}]})
    plan = plan_budget(spec, Decimal("41"), [ServiceState("ml", "svc", 1, 1, Decimal("1"))], AlertState(),
                       datetime.now(timezone.utc), policy=PolicyRef("ml", "p"))
    return next(a for a in plan.alerts if a.kind is AlertKind.THRESHOLD_CROSSED)


@pytest.mark.parametrize("url", ["https://[::1/hook-token-abcdefgh", "https://[not-an-ip]/x", "ftp://host/x",
                                 "not a url", ""])
@pytest.mark.parametrize("kind", KINDS)
def test_an_unusable_webhook_url_is_a_failed_delivery_never_an_exception(kind: str, url: str) -> None:
    async def go():
        async with Sender(retry=RetryPolicy(max_retries=0, timeout_s=1.0, max_total_s=2.0)) as s:
            return await s.deliver(kind, url, "SEC-signing-secret", alert(), receiver="room")

    result = asyncio.run(go())
    assert not result.delivered and result.reason == "InvalidURL", result
    assert result.message.startswith("The webhook URL is not usable")
    assert "hook-token-abcdefgh" not in result.message and "SEC-signing-secret" not in result.message
