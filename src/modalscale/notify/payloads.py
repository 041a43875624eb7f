"""Chat and webhook payloads for budget alerts, one builder per platform, and the signed request (pure: no I/O,
no clock).

Why a module: six platforms want six shapes and three of them sign requests. Building and signing here, as pure
functions of a :class:`~modalscale.costmodel.budget.BudgetAlert` (or the
:class:`~modalscale.costmodel.outbox.AlertMessage` it was rendered to and stored as) and an explicit timestamp,
makes every payload testable byte for byte; the one HTTP sender (:mod:`modalscale.notify.sender`) only posts what
:func:`prepare_request` returns. Signatures are :mod:`modalscale.notify.signing`'s.

Every message states the policy, the scope, spent/limit, the forecast and the action taken (the alert's
``title`` and ``facts()``, platform-neutral text decided with the alert). Messages never contain URLs or
secrets: the alert carries none, and the signing secret only ever enters an HMAC.

Documented shapes (checked 2026-11-30):

* Slack incoming webhook, Block Kit ``blocks`` plus ``text`` fallback:
  https://api.slack.com/messaging/webhooks and https://api.slack.com/reference/block-kit/blocks
* Microsoft Teams Workflows ("When a Teams webhook request is received"): a ``message`` with one Adaptive Card
  attachment (``contentType: application/vnd.microsoft.card.adaptive``); Workflows accept Adaptive Cards only:
  https://learn.microsoft.com/en-us/microsoftteams/platform/webhooks-and-connectors/how-to/connectors-using
* WeCom group robot, ``msgtype: markdown`` (content at most 4096 bytes):
  https://developer.work.weixin.qq.com/document/path/91770
* DingTalk custom robot, ``msgtype: markdown`` (title + text), signed in the URL:
  https://open.dingtalk.com/document/robots/custom-robot-access
* Feishu/Lark custom bot, ``msg_type: interactive`` card, signed in the body:
  https://open.feishu.cn/document/client-docs/bot-v3/add-custom-bot
* Generic webhook: the Alertmanager webhook payload, ``version: "4"``:
  https://prometheus.io/docs/alerting/latest/configuration/#webhook_config; signed in two headers with a
  signing secret.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from modalscale.api.budgetpolicy import NotifierType, Period
from modalscale.costmodel.budget import OPEN_ENDED_KINDS, AlertKind, BudgetAlert
from modalscale.costmodel.ledger import format_time
from modalscale.costmodel.outbox import AlertMessage
from modalscale.notify.signing import (
    WEBHOOK_SIGNATURE_HEADER,
    WEBHOOK_TIMESTAMP_HEADER,
    dingtalk_signed_url,
    feishu_sign,
    webhook_signature,
)

Alert = BudgetAlert | AlertMessage
"""What a payload is built from: an alert as decided, or as rendered and stored in the outbox (same surface)."""

WECOM_MAX_MARKDOWN_BYTES = 4096
"""WeCom markdown ``content`` limit in UTF-8 bytes (WeCom group robot documentation)."""
SLACK_MAX_HEADER_CHARS = 150
"""Slack ``header`` block plain_text limit."""


# ------------------------------------------------------------------------------------------------ payloads
_LARK_MD_ESCAPES = {ord(c): f"&#{ord(c)};" for c in "&<>[]*_~`:"}


def lark_md_escape(text: str) -> str:
    """``text`` shown as written in Feishu's card markdown (``lark_md``): each character its syntax reads as an
    HTML escape ``&#N;``, as Feishu's card Markdown document says to show a special character (its table lists
    ``&#60;`` ``&#62;`` ``&#91;`` ``&#93;`` ``&#42;`` ``&#95;`` ``&#96;`` ``&#58;``; ``&#38;`` and ``&#126;`` by its
    rule "other escapes follow the HTML standard", https://open.feishu.cn/document/common-capabilities/
    message-card/message-cards-content/using-markdown-tags). So no tag in a fact is read as one
    (``<at id=all></at>``: @everyone; ``<font>``, ``<a href>``), nor a link ``[x](url)``, emphasis ``*``/``**``/
    ``__``, strike ``~~``, an emoji ``:KEY:``, or an escape the text happens to contain (``&``); a tenant name
    is any client's printable ASCII."""
    return text.translate(_LARK_MD_ESCAPES)


def _markdown_lines(alert: Alert, bold: str = "**") -> list[str]:
    return [f"{bold}{lark_md_escape(label)}:{bold} {lark_md_escape(value)}" for label, value in alert.facts()]


_LOOKALIKES = {"<": "\uff1c", ">": "\uff1e", "[": "\uff3b", "]": "\uff3d", "*": "\uff0a", "_": "\uff3f",
               "`": "\uff40"}
"""Fullwidth look-alikes (Unicode's Halfwidth and Fullwidth Forms block) of markdown's ASCII metacharacters."""

WECOM_MARKDOWN_CHARS = "<>[]*`"
"""What WeCom's group-robot markdown reads (https://developer.work.weixin.qq.com/document/path/91770, the same
list in /99110): ``<@userid>`` mentions a member, ``<font color="info|comment|warning">`` colours, ``[x](url)``
links, ``**`` bolds, `` ` `` starts code (``#`` and ``>`` only at a line's start, where a fact never starts)."""
DINGTALK_MARKDOWN_CHARS = "<>[]*`"
"""What DingTalk's custom-robot markdown reads (https://open.dingtalk.com/document/robots/custom-robot-access,
message types): ``[x](url)`` links, ``![](url)`` images, ``**``/``*`` emphasis; ``<font>`` tags are not
documented but reported to render, and `` ` `` is taken as code by common markdown. A mention needs the
member in the body's ``at.atMobiles``/``atUserIds`` (or ``at.isAtAll``), which this payload never sets, so an
``@138...`` in a fact is text."""
TEAMS_MARKDOWN_CHARS = "<>[]*"
"""What Teams reads in an Adaptive Card's ``Fact.title``/``Fact.value`` (https://learn.microsoft.com/en-us/
microsoftteams/platform/task-modules-and-cards/cards/cards-format): ``**``, ``_``, ``[x](url)``, lists at a
line's start (:func:`teams_text`); no HTML. A mention needs ``<at>name</at>`` and a ``msteams.entities`` entry,
which this card never has; ``<``/``>`` are replaced all the same. ``_`` is left as sent: it only italicises, and a
tenant such as ``team_a`` must read as the string its clients send (``team＿a`` could not be searched for)."""

_LIST_START = re.compile(r"^(\s*)(?:([-+])|(\d+)([.)]))(?=\s)", re.MULTILINE)


def markdown_lookalikes(text: str, chars: str) -> str:
    """``text`` with each of ``chars`` (a subset of ``<>[]*_` ``) replaced by its fullwidth look-alike (U+FF1C
    ``＜`` for ``<``, U+FF3B ``［`` for ``[``, ...), so no markdown construct that needs them can form.

    For the platforms that document no escape for their markdown (WeCom, DingTalk, Teams: none of their
    documents names a backslash or entity escape; an assumption that one works would be untested): a tenant name is
    any client's printable ASCII, shown among an alert's Top tenants, and copied as is it mentioned members
    (WeCom ``<@userid>``), linked (``[pay here](https://...)``) or restyled. The look-alikes keep the name
    readable; a reader sees ``［`` where the client sent ``[``.
    """
    return text.translate({ord(c): _LOOKALIKES[c] for c in chars})


def teams_text(text: str) -> str:
    """``text`` shown as written in a Teams Adaptive Card fact: :data:`TEAMS_MARKDOWN_CHARS` as look-alikes and
    a list marker at a line's start (``- ``, ``+ ``, ``1. ``, ``1) ``, where the first tenant's name starts the
    Top tenants value) as a look-alike (U+2010 ``‐``, U+FF0B ``＋``, U+FF0E ``．``, U+FF09 ``）``)."""
    def unlist(m: re.Match[str]) -> str:
        if m.group(2):
            return m.group(1) + {"-": "\u2010", "+": "\uff0b"}[m.group(2)]
        return m.group(1) + m.group(3) + {".": "\uff0e", ")": "\uff09"}[m.group(4)]

    return _LIST_START.sub(unlist, markdown_lookalikes(text, TEAMS_MARKDOWN_CHARS))


def slack_escape(text: str) -> str:
    """``text`` shown as written in Slack mrkdwn: its control characters ``&``, ``<`` and ``>`` as ``&amp;``,
    ``&lt;`` and ``&gt;`` (https://api.slack.com/reference/surfaces/formatting#escaping), so a tenant named
    ``<!channel>`` (a name any client can send) neither notifies the channel nor becomes a link."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _slack_cut(text: str, limit: int) -> str:
    """Escaped mrkdwn cut to ``limit`` characters, never inside an entity."""
    if len(text) <= limit:
        return text
    cut = text[:limit]
    amp = cut.rfind("&")
    return cut[:amp] if amp >= 0 and ";" not in cut[amp:] else cut


def slack_payload(alert: Alert) -> dict[str, Any]:
    """Slack incoming-webhook body: Block Kit ``blocks`` and a ``text`` fallback for notifications; every mrkdwn
    text escaped (:func:`slack_escape`), the ``plain_text`` header as is."""
    facts = alert.facts()
    header = (alert.title if len(alert.title) <= SLACK_MAX_HEADER_CHARS
              else alert.title[:SLACK_MAX_HEADER_CHARS - 1] + "…")
    fields = [{"type": "mrkdwn", "text": _slack_cut(f"*{slack_escape(label)}*\n{slack_escape(value)}", 2000)}
              for label, value in facts if label != "Action"]
    action = next((value for label, value in facts if label == "Action"), None)  # every alert decided has one
    return {
        "text": slack_escape(alert.text()),
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": header, "emoji": False}},
            *([{"type": "section", "fields": fields[:10]}] if fields else []),  # Slack refuses an empty one
            *([{"type": "section", "text": {"type": "mrkdwn",
                                            "text": _slack_cut(f"*Action*\n{slack_escape(action)}", 3000)}}]
              if action is not None else []),
            {"type": "context", "elements": [{"type": "mrkdwn", "text":
                                              f"modalscale · {alert.kind.value} · {format_time(alert.created_at)}"}]},
        ],
    }


def teams_payload(alert: Alert) -> dict[str, Any]:
    """Teams Workflows webhook body: a ``message`` with one Adaptive Card (1.4) attachment; each fact shown as
    written (:func:`teams_text`)."""
    color = {"critical": "Attention", "warning": "Warning", "info": "Good"}[alert.severity]
    card = {
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": [
            {"type": "TextBlock", "text": alert.title, "weight": "Bolder", "size": "Medium", "wrap": True,
             "color": color},
            {"type": "FactSet", "facts": [{"title": teams_text(label), "value": teams_text(value)}
                                          for label, value in alert.facts()]},
        ],
        "msteams": {"width": "Full"},
    }
    return {"type": "message",
            "attachments": [{"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None,
                             "content": card}]}


def _fit_bytes(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[:limit - 3].decode("utf-8", errors="ignore") + "..."


def wecom_payload(alert: Alert) -> dict[str, Any]:
    """WeCom group-robot body: ``msgtype: markdown`` (content cut to 4096 bytes); the title and facts with
    :data:`WECOM_MARKDOWN_CHARS` as look-alikes (:func:`markdown_lookalikes`)."""
    color = {"critical": "warning", "warning": "warning", "info": "info"}[alert.severity]

    def shown(text: str) -> str:
        return markdown_lookalikes(text, WECOM_MARKDOWN_CHARS)

    content = f"### <font color=\"{color}\">{shown(alert.title)}</font>\n" + "\n".join(
        f"> **{shown(label)}:** {shown(value)}" for label, value in alert.facts())
    return {"msgtype": "markdown", "markdown": {"content": _fit_bytes(content, WECOM_MAX_MARKDOWN_BYTES)}}


def dingtalk_payload(alert: Alert) -> dict[str, Any]:
    """DingTalk custom-robot body: ``msgtype: markdown`` with ``title`` (notification preview, plain text) and
    ``text``, its title and facts with :data:`DINGTALK_MARKDOWN_CHARS` as look-alikes (:func:`markdown_lookalikes`);
    no ``at``: the message mentions no one."""

    def shown(text: str) -> str:
        return markdown_lookalikes(text, DINGTALK_MARKDOWN_CHARS)

    text = f"#### {shown(alert.title)}\n\n" + "\n\n".join(
        f"- **{shown(label)}:** {shown(value)}" for label, value in alert.facts())
    return {"msgtype": "markdown", "markdown": {"title": alert.title[:64], "text": text}}


def feishu_payload(alert: Alert, secret: str | None = None, timestamp_s: int | None = None) -> dict[str, Any]:
    """Feishu/Lark custom-bot body: ``msg_type: interactive`` card; signed when ``secret`` is given.

    Raises:
        ValueError: ``secret`` given without ``timestamp_s``.
    """
    template = {"critical": "red", "warning": "orange", "info": "green"}[alert.severity]
    body: dict[str, Any] = {
        "msg_type": "interactive",
        "card": {
            "config": {"wide_screen_mode": True},
            "header": {"title": {"tag": "plain_text", "content": alert.title}, "template": template},
            "elements": [{"tag": "div", "text": {"tag": "lark_md", "content": "\n".join(_markdown_lines(alert))}}],
        },
    }
    if secret:
        if timestamp_s is None:
            raise ValueError("feishu_payload: timestamp_s is required with a signing secret")
        body = {"timestamp": str(timestamp_s), "sign": feishu_sign(secret, timestamp_s), **body}
    return body


_ZERO_TIME = "0001-01-01T00:00:00Z"


def _alert_labels(kind: AlertKind, alert: Alert, threshold_percent: int | None,
                  period: Period | None = None) -> dict[str, str]:
    """The labels of one alert: its identity, the same in its firing and in its resolve.

    ``severity`` follows the threshold (``critical`` from 100 %), not the spend at sending time, and ``period``
    is the one the alert fired under (``period``, else ``alert``'s), not the spec's at sending time, so that a
    resolve computes the very labels its firing had. :data:`OPEN_ENDED_KINDS` have no ``period`` label: they are
    not bound to a period, and a ``spec.period`` edited while one fires must not change its identity.
    """
    labels = {
        "alertname": f"Budget{kind.value}",
        "namespace": alert.policy.namespace,
        "budgetpolicy": alert.policy.name,
    }
    if kind not in OPEN_ENDED_KINDS:
        labels["period"] = (period or alert.period).value
    if threshold_percent is not None:
        labels["threshold_percent"] = str(threshold_percent)
        labels["severity"] = ("critical" if kind is AlertKind.THRESHOLD_CROSSED and threshold_percent >= 100
                              else "warning")
    else:
        labels["severity"] = "info" if kind is AlertKind.RECOVERED else "warning"
    return labels


def _fingerprint(labels: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(labels, sort_keys=True).encode()).hexdigest()[:16]


def webhook_group(alert: Alert) -> tuple[dict[str, str], str]:
    """(``groupLabels``, ``groupKey``) of a policy's alerts: one group, i.e. one incident, per BudgetPolicy.

    Alertmanager's ``groupKey`` is ``<route matchers>:<group labels>``; with the root route's empty matchers
    this is ``{}:{budgetpolicy="<name>", namespace="<namespace>"}``. Every alert of the policy (firing or
    resolved, any kind) carries it, so the recovery resolves the incident its alerts opened.
    """
    group_labels = {"budgetpolicy": alert.policy.name, "namespace": alert.policy.namespace}
    key = "{}:{" + ", ".join(f'{k}="{v}"' for k, v in sorted(group_labels.items())) + "}"
    return group_labels, key


def webhook_payload(alert: Alert, receiver: str = "modalscale") -> dict[str, Any]:
    """Alertmanager-compatible webhook body (``version: "4"``), no URLs.

    Firing: one alert per threshold in the message (a threshold is one alert, as one Alertmanager rule instance
    is; ``GovernanceBlind`` and ``SpendAnomaly`` one alert per policy), ``endsAt`` the zero time. Recovered
    (``status: resolved``): the alerts of ``alert.resolves``, each with
    the labels, fingerprint and ``startsAt`` it fired with and ``endsAt`` = the recovery's time; the same
    ``groupKey`` as the firing (:func:`webhook_group`). A recovery that names none (an outbox item stored before
    ``resolves`` existed) sends one resolved ``BudgetRecovered`` alert under that ``groupKey``.
    """
    annotations = {"summary": alert.title, "description": "\n".join(f"{k}: {v}" for k, v in alert.facts())}
    created = format_time(alert.created_at)
    items: list[dict[str, Any]] = []
    if alert.resolved and alert.resolves:
        for firing in alert.resolves:
            labels = _alert_labels(firing.kind, alert, firing.threshold_percent, firing.period)
            items.append({"status": "resolved", "labels": labels, "annotations": annotations,
                          "startsAt": format_time(firing.starts_at), "endsAt": created, "generatorURL": "",
                          "fingerprint": _fingerprint(labels)})
    else:
        status = "resolved" if alert.resolved else "firing"
        for percent in alert.thresholds_percent or (None,):
            labels = _alert_labels(alert.kind, alert, percent)
            items.append({"status": status, "labels": labels, "annotations": annotations, "startsAt": created,
                          "endsAt": created if alert.resolved else _ZERO_TIME, "generatorURL": "",
                          "fingerprint": _fingerprint(labels)})
    common = {k: v for k, v in items[0]["labels"].items() if all(i["labels"].get(k) == v for i in items)}
    group_labels, group_key = webhook_group(alert)
    return {
        "version": "4",
        "groupKey": group_key,
        "truncatedAlerts": 0,
        "status": "resolved" if alert.resolved else "firing",
        "receiver": receiver,
        "groupLabels": group_labels,
        "commonLabels": common,
        "commonAnnotations": annotations,
        "externalURL": "",
        "alerts": items,
    }


# ------------------------------------------------------------------------------------------ request build
@dataclass(frozen=True)
class PreparedRequest:
    """A POST ready to send: the (possibly signed) URL, the exact body bytes and headers.

    ``url`` may contain tokens and signatures: never log it (the sender redacts it).
    """

    url: str = field(repr=False)
    body: bytes
    headers: dict[str, str]


def encode_json(payload: dict[str, Any]) -> bytes:
    """The exact JSON bytes sent (compact, UTF-8, no ASCII escaping), so signatures cover what is sent."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def build_payload(kind: NotifierType | str, alert: Alert, secret: str | None = None,
                  now: datetime | None = None) -> dict[str, Any]:
    """The JSON body for ``kind`` (Feishu signed in the body when ``secret`` and ``now`` are given)."""
    kind = NotifierType(kind)
    if kind is NotifierType.SLACK:
        return slack_payload(alert)
    if kind is NotifierType.TEAMS:
        return teams_payload(alert)
    if kind is NotifierType.WECOM:
        return wecom_payload(alert)
    if kind is NotifierType.DINGTALK:
        return dingtalk_payload(alert)
    if kind is NotifierType.FEISHU:
        ts = int(now.timestamp()) if (secret and now is not None) else None
        return feishu_payload(alert, secret, ts)
    return webhook_payload(alert)


def prepare_request(kind: NotifierType | str, url: str, secret: str | None, alert: Alert,
                    now: datetime) -> PreparedRequest:
    """Build the signed POST for one receiver.

    Args:
        kind: Platform (``spec.notifications[].type``).
        url: Webhook URL from the Secret (``urlKey``).
        secret: Signing secret from the Secret (``signingSecretKey``) or None. DingTalk and Feishu sign with it
            when given (robots configured with keywords or IP allow-lists need none); Webhook adds an HMAC header.
        alert: What to say.
        now: Timezone-aware instant used for the signature timestamps.
    Returns:
        :class:`PreparedRequest`.
    Raises:
        ValueError: Naive ``now`` or unknown ``kind``.
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    kind = NotifierType(kind)
    payload = build_payload(kind, alert, secret, now)
    body = encode_json(payload)
    headers = {"Content-Type": "application/json; charset=utf-8"}
    if kind is NotifierType.DINGTALK and secret:
        url = dingtalk_signed_url(url, secret, int(now.timestamp()) * 1000 + now.microsecond // 1000)
    if kind is NotifierType.WEBHOOK and secret:
        ts = int(now.timestamp())
        headers[WEBHOOK_TIMESTAMP_HEADER] = str(ts)
        headers[WEBHOOK_SIGNATURE_HEADER] = webhook_signature(secret, ts, body)
    return PreparedRequest(url, body, headers)


__all__ = [
    "Alert", "DINGTALK_MARKDOWN_CHARS", "PreparedRequest", "SLACK_MAX_HEADER_CHARS", "TEAMS_MARKDOWN_CHARS",
    "WECOM_MARKDOWN_CHARS", "WECOM_MAX_MARKDOWN_BYTES", "build_payload", "dingtalk_payload", "encode_json",
    "feishu_payload", "lark_md_escape", "markdown_lookalikes", "prepare_request", "slack_escape", "slack_payload",
    "teams_payload", "teams_text", "webhook_group", "webhook_payload", "wecom_payload",
]
