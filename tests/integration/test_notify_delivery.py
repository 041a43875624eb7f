"""Sender -> local platform receivers over real HTTP on 127.0.0.1 (no mocks): delivery, signatures, retries.

The receivers (``modalscale.devenv.receivers``) verify each platform's payload shape, URL token, signature and
timestamp freshness and answer like the platform does; the sender must classify those answers correctly.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import urllib.parse
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import httpx
import pytest

from modalscale.api.budgetpolicy import parse_budget_spec
from modalscale.costmodel.budget import AlertKind, AlertState, BudgetAlert, PolicyRef, ServiceState, plan_budget
from modalscale.costmodel.showback import ServiceWindow, TenantUsage, drivers_of
from modalscale.devenv.receivers import KINDS, ChatReceiver, Reply
from modalscale.notify.answers import sensitive_parts
from modalscale.notify.limits import RateLimit
from modalscale.notify.sender import RetryPolicy, Sender
from modalscale.redaction import redact
from tests.factories import pending_json, plan_json, read_budget

SIGNING = {"DingTalk", "Feishu", "Webhook"}
SECRET = "SEC-integration-signing-secret"
FAST = RetryPolicy(max_retries=5, base_delay_s=0.05, max_delay_s=0.2, timeout_s=2.0, max_total_s=8.0)


def make_alert() -> BudgetAlert:
    spec = parse_budget_spec({
        "selector": {"namespaces": ["ml-prod"]}, "period": "Daily", "timeZone": "Europe/Berlin",
        "limit": {"amount": "50"}, "forecast": {"enabled": True},
        "thresholds": [{"percent": 80, "actions": ["Alert", "CapReplicas"], "capReplicas": 2}]})
    services = [ServiceState("ml-prod", "captioner", 4, 8, Decimal("0.704574739"))]
    plan = plan_budget(spec, Decimal("41.5"), services, AlertState(), datetime.now(timezone.utc),
                       policy=PolicyRef("ml-prod", "platform-daily"))
    return next(a for a in plan.alerts if a.kind is AlertKind.THRESHOLD_CROSSED)


def send(receiver: ChatReceiver, *, secret: str | None = None, retry: RetryPolicy = FAST, clock=None,
         url: str | None = None, sender: Sender | None = None):
    async def go():
        if sender is not None:
            return await sender.deliver(receiver.kind, url or receiver.url, secret, make_alert(), receiver="room")
        kwargs = {"clock": clock} if clock else {}
        async with Sender(retry=retry, **kwargs) as s:
            return await s.deliver(receiver.kind, url or receiver.url, secret, make_alert(), receiver="room")

    return asyncio.run(go())


@pytest.mark.parametrize("kind", KINDS)
def test_each_platform_receives_a_verified_message(kind: str) -> None:
    secret = SECRET if kind in SIGNING else None
    with ChatReceiver(kind, secret) as rx:
        result = send(rx, secret=secret)
        assert result.delivered, result
        assert (result.reason, result.attempts) == ("Delivered", 1)
        assert len(rx.accepted) == 1 and rx.received[0].errors == []
        room = rx.transcript()
        assert "ml-prod/platform-daily" in room and "41.50 USD of 50.00 USD" in room
        assert "CapReplicas ml-prod/captioner to 2" in room
        assert "Top tenants" not in room  # no showback figures read: nothing said about tenants


@pytest.mark.parametrize("kind", KINDS)
def test_each_platform_shows_the_top_tenants_and_modalities_behind_the_spend(kind: str) -> None:
    usage = [TenantUsage(t, m, s, 10) for t, m, s in (("acme", "image", 1600), ("globex", "text", 900),
                                                       ("initech", "image", 400), ("umbrella", "text", 200))]
    drivers = drivers_of([("ml-prod", "captioner")],
                         {("ml-prod", "captioner"): ServiceWindow("ml-prod", "captioner", Decimal("36"), 3600)},
                         {("ml-prod", "captioner"): usage})
    alert = replace(make_alert(), drivers=drivers)
    secret = SECRET if kind in SIGNING else None
    with ChatReceiver(kind, secret) as rx:
        async def go():
            async with Sender(retry=FAST) as s:
                return await s.deliver(rx.kind, rx.url, secret, alert, receiver="room")

        result = asyncio.run(go())
        assert result.delivered and rx.received[0].errors == [], (result, rx.received[0].errors)
        room = rx.transcript()
    assert "acme 16.00 USD (44 %), globex 9.00 USD (25 %), initech 4.00 USD (11 %), other 2.00 USD (6 %)" in room
    assert "idle 5.00 USD (14 %)" in room and "image 20.00 USD (56 %), text 11.00 USD (31 %)" in room
    assert "umbrella" not in room  # bounded: past the top 3, summed as other


@pytest.mark.parametrize(("kind", "code"), [("DingTalk", 310000), ("Feishu", 19021), ("Webhook", None)])
def test_a_bad_signature_is_rejected_by_the_receiver_and_reported_as_failure(kind: str, code) -> None:
    with ChatReceiver(kind, SECRET) as rx:
        result = send(rx, secret="SEC-wrong-secret")
        assert not result.delivered and result.reason == "RejectedByPlatform"
        assert result.attempts == 1  # a rejection is final, not retried
        assert result.platform_code == code
        assert rx.accepted == [] and rx.received[0].errors == ["sign:mismatch"]


@pytest.mark.parametrize("kind", ["DingTalk", "Feishu"])
def test_a_timestamp_older_than_one_hour_is_rejected(kind: str) -> None:
    two_hours_ago = lambda: datetime.now(timezone.utc) - timedelta(hours=2)  # noqa: E731
    with ChatReceiver(kind, SECRET) as rx:
        result = send(rx, secret=SECRET, clock=two_hours_ago)
        assert not result.delivered
        assert rx.received[0].errors == ["sign:timestamp-stale"]


def test_429_then_200_is_delivered_exactly_once_after_retry_after() -> None:
    with ChatReceiver("Slack") as rx:
        rx.script(Reply(status=429, body="rate_limited", headers={"Retry-After": "1"}))
        result = send(rx)
        assert result.delivered and result.attempts == 2
        assert len(rx.accepted) == 1 and len(rx.received) == 2
        first, second = rx.received
        assert second.received_at - first.received_at >= 1.0  # Retry-After honoured (a lower bound, not a speed)


def test_5xx_is_retried_with_backoff_until_accepted() -> None:
    with ChatReceiver("Teams") as rx:
        rx.script(Reply(status=503, body="busy"), Reply(status=502, body="bad gateway"))
        result = send(rx)
        assert result.delivered and result.attempts == 3 and len(rx.accepted) == 1


def test_retries_stop_after_five() -> None:
    with ChatReceiver("Webhook") as rx:
        rx.script(*[Reply(status=500, body="down")] * 10)
        result = send(rx)
        assert not result.delivered and result.reason == "ServerError"
        assert result.attempts == 6 and len(rx.received) == 6  # 1 + 5 retries


@pytest.mark.parametrize(
    ("kind", "reply", "reason", "code"),
    [("WeCom", Reply(status=200, body={"errcode": 93000, "errmsg": "invalid webhook url"}), "RejectedByPlatform",
      93000),
     ("Feishu", Reply(status=200, body={"code": 19021, "msg": "sign match fail or timestamp is not within one hour "
                                                  "from current time"}), "RejectedByPlatform", 19021),
     ("Feishu", Reply(status=200, body={"code": 9499, "msg": "Bad Request", "data": {}}), "RejectedByPlatform",
      9499),
     ("Slack", Reply(status=400, body="invalid_payload"), "RejectedByPlatform", "invalid_payload")],
    ids=["wecom-errcode", "feishu-code", "feishu-9499-bad-request", "slack-invalid-payload"],
)
def test_an_error_inside_an_http_200_or_a_4xx_is_a_final_failure(kind, reply, reason, code) -> None:
    with ChatReceiver(kind) as rx:
        rx.script(reply)
        result = send(rx)
        assert (result.delivered, result.reason, result.platform_code, result.attempts) == (False, reason, code, 1)
        assert result.status_code == reply.status


@pytest.mark.parametrize(
    ("kind", "reply", "wait_s"),
    [("Feishu", Reply(status=200, body={"code": 11232, "msg": "frequency limited psm[lark.oapi.app_platform_runtime]"
                                                            "appID[1]"}), 1.0),
     ("Feishu", Reply(status=200, body={"code": 9499, "msg": "too many request", "data": {}}), 1.0),
     ("WeCom", Reply(status=200, body={"errcode": 45009, "errmsg": "api freq out of limit"}), 3.0)],
    ids=["feishu-11232", "feishu-9499", "wecom-45009"],
)
def test_a_rate_limit_code_inside_an_http_200_is_retried_in_the_round_like_a_429(kind, reply, wait_s) -> None:
    # Issue 12: Feishu's rate-limit answer (a code inside HTTP 200) ended the round like a hard failure, and the
    # outbox retried 30 s, then 60 s later. Like a 429 it is retried within the round, after at least one window
    # of the platform's documented limit (Feishu 5/s; WeCom 20/min: one message per 3 s).
    secret = SECRET if kind in SIGNING else None
    with ChatReceiver(kind, secret) as rx:
        rx.script(reply)
        result = send(rx, secret=secret, retry=RetryPolicy(max_retries=5, base_delay_s=0.05, max_delay_s=0.2,
                                                           timeout_s=2.0, max_total_s=10.0))
        assert (result.delivered, result.reason, result.attempts) == (True, "Delivered", 2), result
        assert len(rx.received) == 2 and len(rx.accepted) == 1
        first, second = rx.received
        assert second.received_at - first.received_at >= wait_s  # a lower bound the sender honours, not a speed


def test_dingtalks_ten_minute_throttle_ends_the_round_for_the_outbox_to_retry() -> None:
    # DingTalk throttles a robot for 10 minutes after 20 messages in a minute: no retry fits in a round.
    with ChatReceiver("DingTalk", SECRET) as rx:
        rx.script(Reply(status=200, body={"errcode": 130101, "errmsg": "send too fast, exceed 20 times per minute"}))
        result = send(rx, secret=SECRET)
        assert (result.delivered, result.reason, result.platform_code, result.attempts) == (False, "RateLimited",
                                                                                              130101, 1)
        assert "retry budget" in result.message and len(rx.received) == 1


def test_a_wrong_url_token_is_reported_from_the_platforms_own_answer() -> None:
    with ChatReceiver("WeCom") as rx:
        result = send(rx, url=rx.url.replace("key=", "key=0"))
        assert not result.delivered and result.platform_code == 93000
        assert rx.received[0].errors == ["token:invalid"]


def test_a_hanging_receiver_is_bounded_by_the_timeout() -> None:
    policy = RetryPolicy(max_retries=2, base_delay_s=0.05, timeout_s=0.3, max_total_s=3.0)
    with ChatReceiver("Feishu") as rx:
        rx.script(*[Reply(delay_s=30)] * 5)
        result = send(rx, retry=policy)
        assert not result.delivered and result.reason == "TimedOut"
        assert result.attempts == 3
        assert result.elapsed_s < 30  # returned long before the receiver would have answered
        assert rx.wait_for_arrivals(3, timeout_s=5)  # the attempts did reach the receiver


def test_connection_refused_is_retried_then_reported_without_the_url(caplog: pytest.LogCaptureFixture) -> None:
    with ChatReceiver("DingTalk", SECRET) as rx:
        url = rx.url
    caplog.set_level(logging.INFO, logger="modalscale.notify")
    policy = RetryPolicy(max_retries=2, base_delay_s=0.01, timeout_s=1.0, max_total_s=3.0)
    result = send(rx, url=url, secret=SECRET, retry=policy)
    assert not result.delivered and result.reason == "ConnectionFailed" and result.attempts == 3
    token = url.split("access_token=")[1]
    text = result.message + " ".join(r.getMessage() for r in caplog.records)
    assert token not in text and SECRET not in text and "127.0.0.1" not in text


USERINFO_PASSWORD = "hunter2-pässword"


def _with_userinfo(url: str, host: str = "LOCALHOST") -> str:
    """``url`` with user info (password percent-encoded, as a Secret would hold it) and an upper-case host."""
    scheme, rest = url.split("://", 1)
    port_and_path = rest.split(":", 1)[1]
    return f"{scheme}://alice:{urllib.parse.quote(USERINFO_PASSWORD, safe='')}@{host}:{port_and_path}"


def _leaks(text: str) -> list[str]:
    basic = base64.b64encode(f"alice:{USERINFO_PASSWORD}".encode()).decode()
    return [f for f in (USERINFO_PASSWORD, urllib.parse.quote(USERINFO_PASSWORD, safe=""),
                        str(httpx.URL(_with_userinfo("http://h:1/"))).split("@")[0].split(":")[-1], basic)
            if f in text]


def test_a_closed_port_with_user_info_in_the_url_reports_no_password(caplog: pytest.LogCaptureFixture) -> None:
    with ChatReceiver("Webhook", SECRET) as rx:
        url = _with_userinfo(rx.url)  # the port is closed once the receiver stopped
    caplog.set_level(logging.DEBUG)
    policy = RetryPolicy(max_retries=1, base_delay_s=0.01, timeout_s=1.0, max_total_s=3.0)
    result = send(rx, url=url, secret=SECRET, retry=policy)
    assert not result.delivered and result.reason == "ConnectionFailed"

    async def raw_error() -> str:  # httpx's own text for this URL: the exception and the URL it tried
        async with httpx.AsyncClient(trust_env=False) as client:
            try:
                await client.post(url, content=b"{}")
            except httpx.TransportError as exc:
                return f"{type(exc).__name__}: {exc} (POST {exc.request.url})"
        raise AssertionError("the closed port answered")

    raw = asyncio.run(raw_error())
    assert _leaks(raw)  # httpx shows the password (percent-encoded, host lower-cased): the text is not vacuous
    assert _leaks(redact(raw, sensitive_parts(url, SECRET))) == []
    shown = result.message + " ".join(r.getMessage() for r in caplog.records if r.name.startswith("modalscale"))
    assert _leaks(shown) == [] and SECRET not in shown


def test_a_receiver_error_naming_the_normalised_url_and_basic_credentials_reports_no_password() -> None:
    with ChatReceiver("Webhook", SECRET) as rx:
        url = _with_userinfo(rx.url)
        seen = str(httpx.URL(url))  # as httpx normalises it: host lower-cased, the password re-encoded
        basic = base64.b64encode(f"alice:{USERINFO_PASSWORD}".encode()).decode()
        rx.script(Reply(status=400, body=f"refused POST {seen} (Authorization: Basic {basic})"))
        result = send(rx, url=url, secret=SECRET)
        assert not result.delivered and result.reason == "RejectedByPlatform"
        assert rx.received[0].headers.get("Authorization") == f"Basic {basic}"  # httpx did send the user info
        assert _leaks(result.message) == [] and "<redacted>" in result.message


def test_client_side_rate_limit_queues_or_refuses_without_reaching_the_platform() -> None:
    async def go(rx: ChatReceiver):
        limits = {"DingTalk": (RateLimit(2, 60.0),)}
        from modalscale.api.budgetpolicy import NotifierType

        async with Sender(retry=RetryPolicy(max_total_s=1.0),
                          rate_limits={NotifierType(k): v for k, v in limits.items()}) as sender:
            return [await sender.deliver("DingTalk", rx.url, SECRET, make_alert(), receiver="oncall") for _ in range(3)]

    with ChatReceiver("DingTalk", SECRET) as rx:
        results = asyncio.run(go(rx))
        assert [r.reason for r in results] == ["Delivered", "Delivered", "ClientRateLimited"]
        assert len(rx.received) == 2
    refused = results[2]
    assert (refused.delivered, refused.attempts, refused.receiver) == (False, 0, "oncall")
    assert "client-side rate limit" in refused.message


@pytest.mark.parametrize("kind", KINDS)
def test_an_outage_outlasts_the_senders_retries_and_the_stored_message_arrives_after_recovery(kind: str) -> None:
    from modalscale.costmodel.outbox import AlertMessage

    secret = SECRET if kind in SIGNING else None
    alert = make_alert()
    stored = AlertMessage.from_alert(alert)  # what the operator's outbox re-sends after a failed round

    async def go(rx: ChatReceiver):
        async with Sender(retry=FAST) as s:
            failed = await s.deliver(kind, rx.url, secret, alert, receiver="room")
            rx.recover()
            return failed, await s.deliver(kind, rx.url, secret, stored, receiver="room")

    with ChatReceiver(kind, secret) as rx:
        rx.outage()
        failed, retried = asyncio.run(go(rx))
        assert (failed.delivered, failed.reason, failed.attempts) == (False, "ServerError", 6)  # 1 + 5 retries
        assert "gave up after 6 attempts" in failed.message and rx.url not in failed.message
        assert [r.status for r in rx.received][:6] == [503] * 6
        assert retried.delivered and retried.attempts == 1
        (msg,) = rx.accepted
        assert "ml-prod/platform-daily" in msg.room_text() and alert.title.split(":")[0] in msg.room_text()


@pytest.mark.parametrize(("spends", "kinds"), [
    ((("41", 10), ("51", 20)), ["ThresholdCrossed", "ThresholdCrossed", "Recovered"]),
    ((("41", 10),), ["ThresholdCrossed", "Recovered"]),
], ids=["exceeded-day", "warning-day"])
def test_the_recovery_closes_the_incident_its_alerts_opened_at_an_alertmanager_style_receiver(
        spends: tuple[tuple[str, float], ...], kinds: list[str]) -> None:
    """Issue 22 s1 fault 3: the receiver holds an incident per groupKey, an alert per fingerprint (as Grafana
    OnCall and PagerDuty's Alertmanager integration do); every message goes through the outbox's status form. A
    day that only alerted 80 % (Warning, never Exceeded nor enforced) sent no recovery at all, so its incident
    stayed open for good."""
    from modalscale.costmodel.outbox import AlertMessage, PendingAlert

    policy = PolicyRef("ml-prod", "platform-daily")
    spec = parse_budget_spec({"period": "Daily", "limit": {"amount": "50"}, "forecast": {"enabled": False},
                              "thresholds": [{"percent": 80}, {"percent": 100, "actions": ["Alert", "ScaleDown"]}]})
    services = [ServiceState("ml-prod", "captioner", 4, 8, Decimal("0.704574739"))]

    def stored(alert: BudgetAlert) -> AlertMessage:
        item = pending_json(PendingAlert("oncall", AlertMessage.from_alert(alert), alert.created_at))
        return (read_budget({"pendingAlerts": [item]}, policy).outbox or ())[0].message

    state, messages = AlertState(), []
    day = datetime(2026, 5, 1, tzinfo=timezone.utc)
    for spent, hours in (*spends, ("0", 24.1)):
        plan = plan_budget(spec, Decimal(spent), services, state, day + timedelta(hours=hours), policy=policy)
        messages += [stored(a) for a in plan.alerts]
        state = read_budget(plan_json(plan)).alert_state
    assert [m.kind.value for m in messages] == kinds

    async def go(rx: ChatReceiver) -> list[bool]:
        async with Sender(retry=FAST) as s:
            return [(await s.deliver("Webhook", rx.url, SECRET, m, receiver="oncall")).delivered for m in messages]

    with ChatReceiver("Webhook", SECRET) as rx:
        assert asyncio.run(go(rx)) == [True] * len(kinds)
        assert [r.errors for r in rx.received] == [[]] * len(kinds)
        assert rx.unmatched_resolves == [] and rx.open_incidents() == {}
        assert rx.received[-1].payload["status"] == "resolved"
