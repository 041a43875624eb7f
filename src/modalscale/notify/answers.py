"""What a chat platform's answer means: delivered, retry, or final failure (pure), and the redacted result.

Why a module: chat platforms answer in six different ways (Slack's plain ``ok``, Teams Workflows' ``202``,
WeCom/DingTalk's ``errcode`` and Feishu's ``code`` inside an HTTP 200) and rate-limit hard. :func:`classify`
turns one HTTP answer into an :class:`Outcome`; the sender (:mod:`modalscale.notify.sender`) retries the
retryable ones and returns a :class:`DeliveryResult`, which the operator records in the outbox (its
``AlertDelivered`` condition is the operator's: ``modalscale.operator.budget.plan``).

Retryable: 429, 5xx (and, in the sender, timeouts and connection errors); a platform's rate-limit code inside an
HTTP 200 (:func:`modalscale.notify.limits.rate_limit_wait_s`) is a 429 too, whose ``Retry-After`` is that
platform's documented window. Anything else (4xx, any other error code inside a 200) is final.

Success and error shapes handled (documentation read 2026-11-30):

* Slack incoming webhooks: 200 with body ``ok``; errors are plain-text codes with 400/403/404/410/500, e.g.
  ``invalid_payload``, ``channel_is_archived``
  (https://api.slack.com/changelog/2016-05-17-changes-to-errors-for-incoming-webhooks).
* Teams Workflows ("When a Teams webhook request is received"): ``202 Accepted`` (200 also accepted)
  (https://learn.microsoft.com/en-us/microsoftteams/platform/webhooks-and-connectors/how-to/connectors-using).
* WeCom / DingTalk: HTTP 200 with ``{"errcode": 0, "errmsg": "ok"}``; a non-zero ``errcode`` is an error
  (https://developer.work.weixin.qq.com/document/path/91770, https://open.dingtalk.com/document/robots/custom-robot-access).
* Feishu/Lark: HTTP 200 with ``{"code": 0, "msg": "success"}`` (older answers ``{"StatusCode": 0}``); a
  non-zero ``code``/``StatusCode`` is an error, e.g. 19021 for a bad signature or stale timestamp, 9499 "Bad
  Request" for a body it cannot read (final), 11232 for its rate limit
  (https://open.feishu.cn/document/client-docs/bot-v3/add-custom-bot).
* Generic webhook: any 2xx.

Nothing a result carries contains the webhook URL or the signing secret: messages pass through
:func:`modalscale.redaction.redact`.
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any

from modalscale.api.budgetpolicy import NotifierType
from modalscale.api.conditions import (
    DELIVERED,
    RATE_LIMITED,
    REJECTED_BY_PLATFORM,
    SERVER_ERROR,
)
from modalscale.notify.limits import rate_limit_wait_s
from modalscale.redaction import userinfo_parts


@dataclass(frozen=True)
class DeliveryResult:
    """Outcome of one delivery to one receiver, for the outbox. Never contains the URL or secret.

    Attributes:
        delivered: True when the platform accepted the message.
        reason: CamelCase: ``Delivered``, ``RejectedByPlatform``, ``RateLimited``, ``ClientRateLimited``,
            ``ServerError``, ``TimedOut``, ``ConnectionFailed``, ``InvalidURL``, ``InternalError`` (or the
            operator's ``SecretNotFound``, ... for a receiver that could not be tried).
        message: Human explanation (redacted), past tense.
        attempts: HTTP attempts made.
        status_code: Last HTTP status, None when no answer.
        platform_code: Slack error string, ``errcode`` or ``code`` when the platform gave one.
        elapsed_s: Wall time of the whole delivery, waits included.
    """

    kind: NotifierType
    receiver: str
    delivered: bool
    reason: str
    message: str
    attempts: int
    status_code: int | None = None
    platform_code: str | int | None = None
    elapsed_s: float = 0.0


def sensitive_parts(url: str, secret: str | None) -> list[str]:
    """The strings of a receiver that must never be shown: the URL, the secret, the user info in every form
    (:func:`modalscale.redaction.userinfo_parts`), query values of 4+ characters and path segments of 8+
    characters (tokens), longest first (so :func:`~modalscale.redaction.redact` replaces a whole before its parts)."""
    parts = [url]
    if secret:
        parts.append(secret)
    split = urllib.parse.urlsplit(url)
    parts += userinfo_parts(url)
    for _, value in urllib.parse.parse_qsl(split.query, keep_blank_values=False):
        if len(value) >= 4:
            parts += [value, urllib.parse.quote(value, safe="")]
    parts += [seg for seg in split.path.split("/") if len(seg) >= 8]
    return sorted(set(parts), key=len, reverse=True)


@dataclass
class Outcome:
    """What one attempt's answer means (:func:`classify`); the sender appends to ``message`` when it gives up.

    Attributes:
        retryable: True for 429, 5xx, a platform rate-limit code, timeouts and connection errors.
        retry_after_s: Least wait before the next attempt (``Retry-After``, or the platform's window), seconds.
    """

    delivered: bool
    reason: str
    message: str
    retryable: bool
    status_code: int | None = None
    platform_code: str | int | None = None
    retry_after_s: float | None = None


def retry_after_s(value: str | None, now: datetime) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date relative to ``now``, never
    negative); None when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, (when - now).total_seconds())


def _json_code(text: str, keys: Sequence[str]) -> tuple[Any, str] | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    for key in keys:
        if key in data:
            msg = data.get("errmsg") or data.get("msg") or data.get("StatusMessage") or ""
            return data[key], str(msg)
    return None


def classify(kind: NotifierType, status: int, body: str, retry_after: float | None) -> Outcome:
    """Decide from a platform's HTTP answer whether the message was delivered and whether to retry.

    Pure; see the module docstring for each platform's shapes.

    Args:
        kind: The platform.
        status: HTTP status code.
        body: Response body as text.
        retry_after: The answer's ``Retry-After`` in seconds (:func:`retry_after_s`), None when absent.
    Returns:
        :class:`Outcome` (not yet redacted).
    """
    snippet = body.strip()[:200]
    if status == 429:
        return Outcome(False, RATE_LIMITED, f"{kind.value} answered 429 Too Many Requests", True, status,
                       retry_after_s=retry_after)
    if status >= 500:
        return Outcome(False, SERVER_ERROR, f"{kind.value} answered HTTP {status}: {snippet}", True, status,
                       snippet or None)
    if kind is NotifierType.SLACK:
        if status == 200 and snippet == "ok":
            return Outcome(True, DELIVERED, "Slack accepted the message", False, status)
        return Outcome(False, REJECTED_BY_PLATFORM, f"Slack rejected the message (HTTP {status}: {snippet})",
                       False, status, snippet or None)
    if kind is NotifierType.TEAMS:
        if status in (200, 202):
            return Outcome(True, DELIVERED, f"Teams Workflows accepted the message (HTTP {status})", False, status)
        return Outcome(False, REJECTED_BY_PLATFORM, f"Teams rejected the message (HTTP {status}: {snippet})",
                       False, status)
    if kind in (NotifierType.WECOM, NotifierType.DINGTALK, NotifierType.FEISHU):
        keys = ("code", "StatusCode") if kind is NotifierType.FEISHU else ("errcode",)
        parsed = _json_code(body, keys)
        if parsed is None:
            return Outcome(False, REJECTED_BY_PLATFORM,
                           f"{kind.value} answered HTTP {status} without a result code: {snippet}", False, status)
        code, msg = parsed
        if status == 200 and code == 0:
            return Outcome(True, DELIVERED, f"{kind.value} accepted the message", False, status, 0)
        wait_s = rate_limit_wait_s(kind, code, msg)
        if wait_s is not None:
            return Outcome(False, RATE_LIMITED, f"{kind.value} rate-limited the message (HTTP {status}, code "
                           f"{code}: {msg[:160]})", True, status, code,
                           retry_after_s=max(wait_s, retry_after or 0.0))
        return Outcome(False, REJECTED_BY_PLATFORM, f"{kind.value} rejected the message (HTTP {status}, code {code}: "
                       f"{msg[:160]})", False, status, code)
    if 200 <= status < 300:
        return Outcome(True, DELIVERED, f"Webhook accepted the message (HTTP {status})", False, status)
    return Outcome(False, REJECTED_BY_PLATFORM, f"Webhook rejected the message (HTTP {status}: {snippet})",
                   False, status)


__all__ = ["DeliveryResult", "Outcome", "classify", "retry_after_s", "sensitive_parts"]
