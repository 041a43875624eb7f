"""Notification payloads: each platform's documented shape, known-answer signatures, no URLs or secrets."""

from __future__ import annotations

import base64
import hashlib
import hmac
import html
import json
import urllib.parse
from datetime import datetime, timezone
from decimal import Decimal

import pytest

from modalscale.costmodel.budget import AlertKind, AlertState, BudgetAlert, PolicyRef, ServiceState, plan_budget
from modalscale.notify.payloads import (
    WECOM_MAX_MARKDOWN_BYTES,
    dingtalk_payload,
    feishu_payload,
    prepare_request,
    slack_payload,
    teams_payload,
    webhook_payload,
    wecom_payload,
)
from modalscale.notify.signing import dingtalk_sign, dingtalk_signed_url, feishu_sign, webhook_signature

UTC = timezone.utc
NOW = datetime(2026, 5, 1, 9, 30, tzinfo=UTC)
SECRET = "SECa1b2c3-not-a-real-secret"
URLS = {
    "Slack": "https://hooks.slack.com/services/T000/B000/XXXXSECRETPATH",
    "Teams": "https://prod-00.westus.logic.azure.com/workflows/abc/triggers/manual/paths/invoke?sig=SIGSECRET",
    "WeCom": "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=KEYSECRET",
    "DingTalk": "https://oapi.dingtalk.com/robot/send?access_token=TOKENSECRET",
    "Feishu": "https://open.feishu.cn/open-apis/bot/v2/hook/HOOKSECRET",
    "Webhook": "https://alerts.example.com/hook?token=TOKSECRET",
}


def make_alert(spent: str = "105", services: int = 2, dry_run: bool = False) -> BudgetAlert:
    from modalscale.api.budgetpolicy import parse_budget_spec

    spec = parse_budget_spec({
        "selector": {"matchLabels": {"team": "search"}}, "period": "Daily", "timeZone": "Europe/Berlin",
        "limit": {"amount": "100"}, "forecast": {"enabled": True},
        "thresholds": [{"percent": 100, "actions": ["Alert", "ScaleDown"]}], "enforcement": {"dryRun": dry_run}})
    svcs = [ServiceState("team-search", f"svc-{i:03d}", 3, 8, Decimal("1.25")) for i in range(services)]
    plan = plan_budget(spec, Decimal(spent), svcs, AlertState(), NOW, policy=PolicyRef("team-search", "search-daily"))
    return next(a for a in plan.alerts if a.kind is AlertKind.THRESHOLD_CROSSED)


# ------------------------------------------------------------------------------- known-answer signatures
def _dingtalk_reference(secret: str, timestamp_ms: int) -> str:
    """Written from the DingTalk document (Python sample), independently of the module under test."""
    string_to_sign = "{}\n{}".format(timestamp_ms, secret)
    code = hmac.new(secret.encode("utf-8"), string_to_sign.encode("utf-8"), digestmod=hashlib.sha256).digest()
    return urllib.parse.quote_plus(base64.b64encode(code))


def _feishu_reference(secret: str, timestamp_s: int) -> str:
    """Written from the Feishu document: the string "timestamp\\nsecret" is the HMAC key, the message empty."""
    key = ("%d\n%s" % (timestamp_s, secret)).encode("utf-8")
    return base64.b64encode(hmac.new(key, digestmod=hashlib.sha256).digest()).decode()


@pytest.mark.parametrize(("secret", "ts"), [("this is secret", 1577836800000), (SECRET, 1777627800000),
                                            ("SEC密钥", 1700000000123)])
def test_dingtalk_sign_matches_the_documented_algorithm(secret: str, ts: int) -> None:
    assert dingtalk_sign(secret, ts) == _dingtalk_reference(secret, ts)


def test_dingtalk_sign_matches_a_published_vector() -> None:
    # Test vector of the `dingding` Rust crate (docs.rs/crate/dingding, src/signature.rs).
    assert dingtalk_sign("secret", 1700000000000) == "OuzzJR5%2BxZ4%2FEYwqtNt6sMYZQMTa%2FHEGvc9miJe7XzY%3D"


@pytest.mark.parametrize(("secret", "ts"), [("this is secret", 1599360473), (SECRET, 1777627800)])
def test_feishu_sign_matches_the_documented_algorithm(secret: str, ts: int) -> None:
    assert feishu_sign(secret, ts) == _feishu_reference(secret, ts)
    # and it is not the DingTalk construction (key = secret), a common mix-up
    assert feishu_sign(secret, ts) != urllib.parse.unquote_plus(dingtalk_sign(secret, ts))


def test_dingtalk_signed_url_keeps_the_token_and_appends_timestamp_and_sign() -> None:
    url = dingtalk_signed_url(URLS["DingTalk"], SECRET, 1777627800000)
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    assert query["access_token"] == ["TOKENSECRET"]
    assert query["timestamp"] == ["1777627800000"]
    assert query["sign"] == [urllib.parse.unquote_plus(_dingtalk_reference(SECRET, 1777627800000))]


def test_webhook_signature_is_hmac_over_timestamp_dot_body() -> None:
    body = b'{"a":1}'
    expected = hmac.new(SECRET.encode(), b"1777627800." + body, hashlib.sha256).hexdigest()
    assert webhook_signature(SECRET, 1777627800, body) == "sha256=" + expected


# -------------------------------------------------------------------------------------------- shapes
def test_slack_has_block_kit_blocks_and_text_fallback() -> None:
    body = slack_payload(make_alert())
    assert body["text"].startswith("Budget team-search/search-daily crossed 100 %")
    assert [b["type"] for b in body["blocks"]] == ["header", "section", "section", "context"]
    assert body["blocks"][0]["text"]["type"] == "plain_text" and len(body["blocks"][0]["text"]["text"]) <= 150
    assert len(body["blocks"][1]["fields"]) <= 10


def test_teams_is_a_message_with_one_adaptive_card() -> None:
    body = teams_payload(make_alert())
    assert body["type"] == "message"
    (attachment,) = body["attachments"]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    card = attachment["content"]
    assert card["type"] == "AdaptiveCard" and card["version"] == "1.4"
    assert [b["type"] for b in card["body"]] == ["TextBlock", "FactSet"]


def test_wecom_markdown_fits_4096_bytes_even_with_many_actions() -> None:
    body = wecom_payload(make_alert(services=400))
    assert body["msgtype"] == "markdown"
    assert len(body["markdown"]["content"].encode("utf-8")) <= WECOM_MAX_MARKDOWN_BYTES
    assert "and 390 more" in body["markdown"]["content"]


def test_dingtalk_markdown_has_title_and_text() -> None:
    body = dingtalk_payload(make_alert())
    assert body["msgtype"] == "markdown"
    assert set(body["markdown"]) == {"title", "text"}


def test_feishu_interactive_card_signed_in_the_body() -> None:
    body = feishu_payload(make_alert(), SECRET, 1777627800)
    assert body["msg_type"] == "interactive"
    assert body["timestamp"] == "1777627800"
    assert body["sign"] == _feishu_reference(SECRET, 1777627800)
    assert body["card"]["header"]["template"] == "red"
    assert "timestamp" not in feishu_payload(make_alert())


def test_generic_webhook_is_alertmanager_v4() -> None:
    body = webhook_payload(make_alert())
    assert body["version"] == "4" and body["status"] == "firing"
    (alert,) = body["alerts"]
    assert alert["labels"]["alertname"] == "BudgetThresholdCrossed"
    assert alert["labels"]["severity"] == "critical"
    assert alert["startsAt"] == "2026-05-01T09:30:00Z" and alert["endsAt"] == "0001-01-01T00:00:00Z"
    assert set(alert) >= {"status", "labels", "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint"}
    assert body["commonLabels"] == alert["labels"]


def test_recovery_is_resolved_in_alertmanager_terms() -> None:
    alert = make_alert()
    from dataclasses import replace

    resolved = webhook_payload(replace(alert, kind=AlertKind.RECOVERED))
    assert resolved["status"] == "resolved" and resolved["alerts"][0]["endsAt"] == "2026-05-01T09:30:00Z"


# ----------------------------------------------------------------------------------- content rules
@pytest.mark.parametrize("kind", list(URLS))
def test_every_message_states_policy_scope_spend_forecast_and_action(kind: str) -> None:
    request = prepare_request(kind, URLS[kind], SECRET, make_alert(), NOW)
    text = request.body.decode("utf-8")
    for fragment in ("team-search/search-daily", "labels team=search", "105.00 USD of 100.00 USD",
                     "Forecast", "ScaleDown team-search/svc-000 to 1"):
        assert fragment in text, (kind, fragment)


@pytest.mark.parametrize("kind", list(URLS))
def test_payloads_contain_no_urls_or_secrets(kind: str) -> None:
    request = prepare_request(kind, URLS[kind], SECRET, make_alert(), NOW)
    text = request.body.decode("utf-8") + json.dumps(request.headers)
    assert "http://" not in text and "https://" not in text
    for secret_part in (SECRET, "SECRETPATH", "SIGSECRET", "KEYSECRET", "TOKENSECRET", "HOOKSECRET", "TOKSECRET"):
        assert secret_part not in text
    assert "SECRET" not in repr(request)  # the URL is not in the repr either


def test_prepare_request_signs_dingtalk_url_and_webhook_header() -> None:
    ding = prepare_request("DingTalk", URLS["DingTalk"], SECRET, make_alert(), NOW)
    assert f"timestamp={int(NOW.timestamp()) * 1000}" in ding.url
    hook = prepare_request("Webhook", URLS["Webhook"], SECRET, make_alert(), NOW)
    ts = int(hook.headers["X-Modalscale-Timestamp"])
    assert hook.headers["X-Modalscale-Signature"] == webhook_signature(SECRET, ts, hook.body)
    unsigned = prepare_request("DingTalk", URLS["DingTalk"], None, make_alert(), NOW)
    assert unsigned.url == URLS["DingTalk"]


@pytest.mark.parametrize("facts", [(), (("Spent", "105.00 USD"),)], ids=["no-facts", "no-action"])
@pytest.mark.parametrize("kind", list(URLS))
def test_a_stored_message_without_an_action_fact_or_any_fact_still_builds_every_payload(
        kind: str, facts: tuple[tuple[str, str], ...]) -> None:
    """Found by an adversarial probe (6 Dec 2026): a message read back from ``status.pendingAlerts`` without an
    ``Action`` fact made Slack's builder raise ``StopIteration``; Slack also refuses a section with no fields."""
    from dataclasses import replace

    from modalscale.costmodel.outbox import AlertMessage

    message = replace(AlertMessage.from_alert(make_alert()), fact_pairs=facts)
    request = prepare_request(kind, URLS[kind], SECRET, message, NOW)
    assert message.title.split(" ")[0] in request.body.decode()
    if kind == "Slack":
        blocks = json.loads(request.body)["blocks"]
        assert all(b.get("fields", [None]) for b in blocks) and "*Action*" not in request.body.decode()


@pytest.mark.parametrize("severity", ["urgent", "", None, 3])
def test_a_stored_alert_whose_severity_no_builder_maps_is_an_unreadable_status_naming_the_field(
        severity: object) -> None:
    """Teams, WeCom and Feishu map each severity to a colour: ``KeyError: 'urgent'`` came out of the builders for
    a status that read without a problem. The reader refuses it and names the field."""
    from modalscale.costmodel.budget.status import BudgetStatus, budget_status_json, read_budget_status
    from modalscale.costmodel.outbox import AlertMessage, PendingAlert

    pending = PendingAlert("team-slack", AlertMessage.from_alert(make_alert()), NOW, 0)
    (item,) = budget_status_json(BudgetStatus(outbox=(pending,)))["pendingAlerts"]
    ref = PolicyRef("team-search", "search-daily")
    assert read_budget_status({"status": {"pendingAlerts": [item]}}, ref).outbox == (pending,)  # as written: read
    item = {**item, "severity": severity}
    status = read_budget_status({"status": {"pendingAlerts": [item]}}, PolicyRef("team-search", "search-daily"))
    assert status.outbox is None
    assert status.problem is not None and "status.pendingAlerts[0].severity" in status.problem


# ------------------------------------------------------------------- text a client chose (tenant names)
# The gateway names a tenant after a request header, cleaned to printable ASCII only (gateway.tenants.clean), so
# "<!channel>" or "<https://evil.example|...>" is a tenant name any client can send, and the top tenants of the
# spend are a fact of ThresholdCrossed, ForecastExceeded and SpendAnomaly alerts (showback.SpendDrivers.facts).
HOSTILE_TENANT = "<!channel> & <https://evil.example|pay here>"


def driven_alert(tenant: str = HOSTILE_TENANT) -> BudgetAlert:
    from dataclasses import replace

    from modalscale.costmodel.showback import SpendDrivers

    drivers = SpendDrivers(((tenant, Decimal("60")), ("acme", Decimal("40"))), (("text", Decimal("100")),),
                           Decimal(0), Decimal("100"))
    return replace(make_alert(), drivers=drivers)


def test_slack_escapes_the_control_characters_of_mrkdwn_in_what_it_shows() -> None:
    """Slack's formatting reference (https://api.slack.com/reference/surfaces/formatting#escaping): ``&``, ``<``
    and ``>`` are control characters of mrkdwn and must be sent as ``&amp;``, ``&lt;``, ``&gt;``. Unescaped, a
    tenant named ``<!channel>`` notified the whole channel and ``<https://...|pay here>`` became a link in the
    budget alert; the ``&`` is read as the start of an entity."""
    body = slack_payload(driven_alert())
    shown = [body["text"], *(f["text"] for b in body["blocks"] for f in b.get("fields", ())),
             *(b["text"]["text"] for b in body["blocks"] if b["type"] == "section" and "text" in b)]
    tenants = next(t for t in shown if t.startswith("*Top tenants*"))
    assert "&lt;!channel&gt; &amp; &lt;https://evil.example|pay here&gt; 60.00 USD (60 %)" in tenants
    assert "&lt;!channel&gt;" in body["text"]
    for text in shown:
        assert "<" not in text and ">" not in text, text
        assert "&" not in text.replace("&amp;", "").replace("&lt;", "").replace("&gt;", ""), text
    assert all(len(f["text"]) <= 2000 for b in body["blocks"] for f in b.get("fields", ()))


def test_feishu_lark_md_shows_a_tag_in_a_fact_as_text_never_a_mention_of_everyone() -> None:
    """Feishu's card markdown (``lark_md``) reads ``<at id=all></at>`` as @everyone (Feishu custom bot FAQ, "at
    所有人": ``<at id=all></at>`` in a card's lark_md; also ``<at email=...>``, ``<font color=...>``), and shows a
    ``<`` or ``>`` written as ``&#60;``/``&#62;`` (card Markdown component, special characters). Unescaped, a tenant
    named ``<at id=all></at>`` (17 printable ASCII characters a client can send) rang every member of the group."""
    body = feishu_payload(driven_alert("<at id=all></at>"), SECRET, 1777627800)
    (element,) = body["card"]["elements"]
    content = element["text"]["content"]
    assert element["text"]["tag"] == "lark_md"
    assert "<" not in content and ">" not in content
    assert "**Top tenants:** &#60;at id=all&#62;&#60;/at&#62; 60.00 USD (60 %)" in content
    assert "**Policy:** team-search/search-daily" in content  # the labels' own markdown kept


# Tenant names a client can send (printable ASCII, at most 64 characters: gateway.tenants.clean), each written in
# one platform's markdown: a mention, a tag that restyles, a link, an image, emphasis, code.
MARKDOWN_TENANTS = ("<@zhangsan> <@all>", '<font color="warning">PAID</font>', "[pay here](https://evil.example)",
                    "![x](https://evil.example/p.png)", "**x** *y* _z_ ~~w~~ `c`", "<at>Jane Doe</at>")


def tenants_alert(names: tuple[str, ...] = MARKDOWN_TENANTS) -> BudgetAlert:
    from dataclasses import replace

    from modalscale.costmodel.showback import SpendDrivers

    assert all(len(n) <= 64 and n.isprintable() and n.isascii() for n in names)  # as the gateway keeps them
    drivers = SpendDrivers(tuple((n, Decimal(10 + i)) for i, n in enumerate(names)), (("text", Decimal("100")),),
                           Decimal(0), Decimal("100"))
    return replace(make_alert(), drivers=drivers)


def tenants_shown(text: str) -> str:
    """The part of a rendered message that shows the top tenants (between their label and the idle share)."""
    start = text.index(" ", text.index("Top tenants") + len("Top tenants")) + 1  # past the label and its markup
    return text[start:text.index("; idle", start)]


@pytest.mark.parametrize(
    ("kind", "build", "syntax"),
    [("WeCom", lambda a: wecom_payload(a)["markdown"]["content"], "<>[]*`"),
     ("DingTalk", lambda a: dingtalk_payload(a)["markdown"]["text"], "<>[]*`"),
     ("Teams", lambda a: "\n".join(f"{f['title']}: {f['value']}" for b in teams_payload(a)["attachments"][0]
                                   ["content"]["body"] if b["type"] == "FactSet" for f in b["facts"]), "<>[]*")],
    ids=["wecom", "dingtalk", "teams"],
)
def test_a_tenant_name_cannot_mention_link_or_restyle_in_the_platforms_markdown(kind, build, syntax) -> None:
    """WeCom's group robot markdown (developer.work.weixin.qq.com/document/path/91770 and 99110) reads ``<@userid>``
    as a mention, ``<font color=...>`` as colour, ``[x](url)`` as a link, ``**``, `` ` ``; DingTalk's (open.dingtalk
    .com/document/robots/custom-robot-access, message types) links, images ``![](url)``, ``**``/``*``; Teams'
    Adaptive Card FactSet values (learn.microsoft.com/microsoftteams/platform/task-modules-and-cards/cards/
    cards-format) links ``[x](url)``, ``**``, ``_``. None documents an escape. A tenant name (any client's header
    value, among the alert's Top tenants) was copied into that markdown as is: a group member was mentioned and
    ``[pay here](https://evil.example)`` became a link in the budget alert. Each metacharacter now reaches the
    receiver as its fullwidth look-alike (U+FF1C for ``<``, ...), so no construct of the syntax can form."""
    shown = tenants_shown(build(tenants_alert()))
    assert not set(shown) & set(syntax), shown
    assert "＜@zhangsan＞" in shown and "［pay here］(https://evil.example)" in shown
    assert shown.startswith("＜@zhangsan＞ ＜@all＞ 10.00 USD (10 %), ＜font")
    plain = build(make_alert())  # an alert without tenant names keeps its own markdown
    assert "**Policy:**" in plain or "Policy: team-search/search-daily" in plain


def test_teams_a_tenant_name_at_the_start_of_a_fact_cannot_start_a_list() -> None:
    """Adaptive Card markdown lists (``- item``, ``1. item``) start at the start of a line, and the first tenant's
    name starts the Top tenants value."""
    for name, marker in (("- pay now", "-"), ("1. pay now", "1."), ("+ pay now", "+")):
        facts = {f["title"]: f["value"] for f in teams_payload(tenants_alert((name, "acme")))["attachments"][0]
                 ["content"]["body"][1]["facts"]}
        value = facts["Top tenants"]
        assert not value.startswith(marker + " "), value
        assert "pay now" in value


def test_feishu_lark_md_shows_a_link_or_emphasis_in_a_fact_as_text() -> None:
    """Feishu's card markdown reads ``[x](url)`` as a link, ``*``/``**``/``__`` as emphasis, ``~~`` as strike and
    ``:KEY:`` as an emoji, and documents an HTML escape for each special character (``&#91;``, ``&#42;``, ...;
    open.feishu.cn/document/common-capabilities/message-card/message-cards-content/using-markdown-tags). b66512a
    escaped ``<`` and ``>`` only: ``[pay here](https://evil.example)`` in a tenant name was a link in the card."""
    body = feishu_payload(tenants_alert(), SECRET, 1777627800)
    content = body["card"]["elements"][0]["text"]["content"]
    shown = tenants_shown(content)
    assert not set(shown) & set("<>[]*_~`"), shown
    assert "&#91;pay here&#93;" in shown
    assert "[pay here](https://evil.example)" in html.unescape(shown)  # shown as written
    assert "**Policy:** team-search/search-daily" in content
