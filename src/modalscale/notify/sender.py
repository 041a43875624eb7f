"""The one small HTTP sender for budget alerts: best effort, bounded, never raises, never logs a URL or secret.

Why a module: chat platforms answer in six different ways (Slack's plain ``ok``, Teams Workflows' ``202``,
WeCom/DingTalk's ``errcode`` and Feishu's ``code`` inside an HTTP 200) and rate-limit hard. The operator calls
:meth:`Sender.deliver` per receiver and writes the :class:`DeliveryResult` into the ``AlertDelivered``
condition; the payload itself comes from :func:`modalscale.costmodel.notify_payloads.prepare_request` and is
re-signed on every attempt (DingTalk and Feishu reject timestamps older than one hour).

Retries (house rule C7, crate-operator style): 429, 5xx, timeouts and connection errors are retried at most
``RetryPolicy.max_retries`` (5) times with exponential backoff ``base x 2**n`` and +/-20 % jitter; a 429's
``Retry-After`` is honoured as the lower bound of the wait. A platform's rate-limit code inside an HTTP 200
(:data:`RATE_LIMIT_WAIT_S`) is a 429 too: retried in the round, waiting at least one window of that platform's
documented limit (a wait longer than the round's budget ends the round, and the outbox retries later). The whole
delivery, waits included, is bounded by ``RetryPolicy.max_total_s``. Anything else (4xx, any other error code
inside a 200) is final.

Success and error shapes handled (documentation read 2026-11-30):

* Slack incoming webhooks: 200 with body ``ok``; errors are plain-text codes with 400/403/404/410/500, e.g.
  ``invalid_payload``, ``channel_is_archived``
  (https://api.slack.com/changelog/2016-05-17-changes-to-errors-for-incoming-webhooks).
* Teams Workflows ("When a Teams webhook request is received"): ``202 Accepted`` (200 also accepted)
  (https://learn.microsoft.com/en-us/microsoftteams/platform/webhooks-and-connectors/how-to/connectors-using).
* WeCom / DingTalk: HTTP 200 with ``{"errcode": 0, "errmsg": "ok"}``; a non-zero ``errcode`` is an error
  (https://developer.work.weixin.qq.com/document/path/91770, https://open.dingtalk.com/document/robots/custom-robot-access).
* Feishu/Lark: HTTP 200 with ``{"code": 0, "msg": "success"}`` (older answers ``{"StatusCode": 0}``); a
  non-zero ``code``/``StatusCode`` is an error, e.g. 19021 for a bad signature or stale timestamp
  (https://open.feishu.cn/document/client-docs/bot-v3/add-custom-bot).
* Generic webhook: any 2xx.

Client-side rate limits (sliding windows per webhook, so we queue rather than get throttled):
WeCom 20 messages/minute ("每个机器人发送的消息不能超过20条/分钟", WeCom group robot document); DingTalk
20/minute ("每个机器人每分钟最多发送20条", beyond that throttled for 10 minutes); Feishu custom bot 100/minute
and 5/second (Feishu custom bot document, "100 次/分钟，5 次/秒"); Slack 1/second (Slack rate-limits page,
https://api.slack.com/docs/rate-limits, incoming webhooks); none for Teams and generic webhooks.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import time
import urllib.parse
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from modalscale.costmodel.budget import NotifierType
from modalscale.costmodel.notify_payloads import Alert, prepare_request

log = logging.getLogger("modalscale.notify")

REDACTED = "<redacted>"


def utc_now() -> datetime:
    """The default clock (timezone-aware UTC)."""
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try one delivery. Defaults follow house rule C7."""

    max_retries: int = 5
    """Retries after the first attempt (429, 5xx, timeouts, connection errors only)."""
    base_delay_s: float = 1.0
    """First backoff in seconds; doubles each retry."""
    max_delay_s: float = 30.0
    """Cap of one backoff, in seconds."""
    jitter_ratio: float = 0.2
    """Backoff is multiplied by uniform(1 - r, 1 + r)."""
    timeout_s: float = 10.0
    """Per-attempt HTTP timeout (connect, read, write, pool), in seconds."""
    max_total_s: float = 60.0
    """Bound on the whole delivery including waits, in seconds."""


@dataclass(frozen=True)
class RateLimit:
    """At most ``max_messages`` per ``window_s`` seconds per webhook."""

    max_messages: int
    window_s: float


PLATFORM_RATE_LIMITS: Mapping[NotifierType, tuple[RateLimit, ...]] = {
    NotifierType.SLACK: (RateLimit(1, 1.0),),
    NotifierType.TEAMS: (),
    NotifierType.WECOM: (RateLimit(20, 60.0),),
    NotifierType.DINGTALK: (RateLimit(20, 60.0),),
    NotifierType.FEISHU: (RateLimit(100, 60.0), RateLimit(5, 1.0)),
    NotifierType.WEBHOOK: (),
}
"""Client-side limits per platform (sources in the module docstring)."""

RATE_LIMIT_WAIT_S: Mapping[NotifierType, Mapping[int, float]] = {
    NotifierType.WECOM: {45009: 3.0},         # "api freq out of limit"; 20 messages/minute: one per 3 s
    NotifierType.DINGTALK: {130101: 600.0},   # "send too fast, exceed 20 times per minute": throttled 10 minutes
    NotifierType.FEISHU: {9499: 1.0, 11232: 1.0},  # "too many request" / frequency limit; 5/second, 100/minute
}
"""Error codes inside an HTTP 200 that mean "rate limited", with the least wait before the next attempt in
seconds (the platform's documented window, sources in the module docstring): retried like a 429 whose
``Retry-After`` is that wait; the exponential backoff still doubles past it."""


@dataclass(frozen=True)
class DeliveryResult:
    """Outcome of one delivery, for the ``AlertDelivered`` condition. Never contains the URL or secret.

    Attributes:
        delivered: True when the platform accepted the message.
        reason: CamelCase: ``Delivered``, ``RejectedByPlatform``, ``RateLimited``, ``ClientRateLimited``,
            ``ServerError``, ``TimedOut``, ``ConnectionFailed``, ``InvalidURL``, ``InternalError``.
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

    def condition(self) -> dict[str, str]:
        """The ``AlertDelivered`` condition fields for this single receiver (``lastTransitionTime`` is the
        operator's, via its conditions upsert)."""
        return {"type": "AlertDelivered", "status": "True" if self.delivered else "False",
                "reason": self.reason, "message": self.message}


def alert_delivered_condition(results: Sequence[DeliveryResult]) -> dict[str, str]:
    """Summarise several receivers into one ``AlertDelivered`` condition (True only if all delivered)."""
    if not results:
        return {"type": "AlertDelivered", "status": "Unknown", "reason": "NoAlertSent",
                "message": "No alert has been sent"}
    failed = [r for r in results if not r.delivered]
    if not failed:
        return {"type": "AlertDelivered", "status": "True", "reason": "Delivered",
                "message": f"Delivered to {', '.join(r.receiver or r.kind.value for r in results)}"}
    return {"type": "AlertDelivered", "status": "False", "reason": failed[0].reason,
            "message": "; ".join(f"{r.receiver or r.kind.value}: {r.message}" for r in failed)}


def _sensitive_parts(url: str, secret: str | None) -> list[str]:
    parts = [url]
    if secret:
        parts.append(secret)
    split = urllib.parse.urlsplit(url)
    for _, value in urllib.parse.parse_qsl(split.query, keep_blank_values=False):
        if len(value) >= 4:
            parts.append(value)
    parts += [seg for seg in split.path.split("/") if len(seg) >= 8]
    return sorted(set(parts), key=len, reverse=True)


def redact(text: str, sensitive: Sequence[str]) -> str:
    """Replace every sensitive string (URLs, tokens, secrets) in ``text`` by ``<redacted>``."""
    for part in sensitive:
        if part:
            text = text.replace(part, REDACTED)
    return text


class _SlidingWindow:
    """Per-key sliding-window log of send times (monotonic seconds)."""

    def __init__(self) -> None:
        self._sent: dict[str, deque[float]] = {}
        self.lock = asyncio.Lock()

    def wait_s(self, key: str, limits: Sequence[RateLimit], now: float) -> float:
        log_ = self._sent.setdefault(key, deque())
        horizon = max((lim.window_s for lim in limits), default=0.0)
        while log_ and log_[0] <= now - horizon:
            log_.popleft()
        wait = 0.0
        for lim in limits:
            recent = [t for t in log_ if t > now - lim.window_s]
            if len(recent) >= lim.max_messages:
                wait = max(wait, recent[-lim.max_messages] + lim.window_s - now)
        return wait

    def record(self, key: str, now: float) -> None:
        self._sent.setdefault(key, deque()).append(now)


@dataclass
class _Outcome:
    delivered: bool
    reason: str
    message: str
    retryable: bool
    status_code: int | None = None
    platform_code: str | int | None = None
    retry_after_s: float | None = None


def _retry_after_s(value: str | None, now: datetime) -> float | None:
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


def classify(kind: NotifierType, status: int, body: str, retry_after: float | None) -> _Outcome:
    """Decide from a platform's HTTP answer whether the message was delivered and whether to retry.

    Pure; see the module docstring for each platform's shapes.
    """
    snippet = body.strip()[:200]
    if status == 429:
        return _Outcome(False, "RateLimited", f"{kind.value} answered 429 Too Many Requests", True, status,
                        retry_after_s=retry_after)
    if status >= 500:
        return _Outcome(False, "ServerError", f"{kind.value} answered HTTP {status}: {snippet}", True, status,
                        snippet or None)
    if kind is NotifierType.SLACK:
        if status == 200 and snippet == "ok":
            return _Outcome(True, "Delivered", "Slack accepted the message", False, status)
        return _Outcome(False, "RejectedByPlatform", f"Slack rejected the message (HTTP {status}: {snippet})",
                        False, status, snippet or None)
    if kind is NotifierType.TEAMS:
        if status in (200, 202):
            return _Outcome(True, "Delivered", f"Teams Workflows accepted the message (HTTP {status})", False, status)
        return _Outcome(False, "RejectedByPlatform", f"Teams rejected the message (HTTP {status}: {snippet})",
                        False, status)
    if kind in (NotifierType.WECOM, NotifierType.DINGTALK, NotifierType.FEISHU):
        keys = ("code", "StatusCode") if kind is NotifierType.FEISHU else ("errcode",)
        parsed = _json_code(body, keys)
        if parsed is None:
            return _Outcome(False, "RejectedByPlatform",
                            f"{kind.value} answered HTTP {status} without a result code: {snippet}", False, status)
        code, msg = parsed
        if status == 200 and code == 0:
            return _Outcome(True, "Delivered", f"{kind.value} accepted the message", False, status, 0)
        wait_s = RATE_LIMIT_WAIT_S.get(kind, {}).get(code) if isinstance(code, int) else None
        if wait_s is not None:
            return _Outcome(False, "RateLimited", f"{kind.value} rate-limited the message (HTTP {status}, code "
                            f"{code}: {msg[:160]})", True, status, code,
                            retry_after_s=max(wait_s, retry_after or 0.0))
        return _Outcome(False, "RejectedByPlatform", f"{kind.value} rejected the message (HTTP {status}, code {code}: "
                        f"{msg[:160]})", False, status, code)
    if 200 <= status < 300:
        return _Outcome(True, "Delivered", f"Webhook accepted the message (HTTP {status})", False, status)
    return _Outcome(False, "RejectedByPlatform", f"Webhook rejected the message (HTTP {status}: {snippet})",
                    False, status)


class Sender:
    """Posts alerts; holds the HTTP client and the client-side rate limiter (keep one in ``memo.deps``).

    Args:
        clock: Timezone-aware "now" for signature timestamps.
        client: An ``httpx.AsyncClient`` to reuse; one is created (and closed by :meth:`aclose`) otherwise.
        retry: :class:`RetryPolicy`.
        rate_limits: Per-platform client-side limits (:data:`PLATFORM_RATE_LIMITS`).
        sleep, monotonic, rng: Injected for tests (defaults ``asyncio.sleep``, ``time.monotonic``, ``random``).
    """

    def __init__(self, *, clock: Callable[[], datetime] = utc_now, client: httpx.AsyncClient | None = None,
                 retry: RetryPolicy = RetryPolicy(),
                 rate_limits: Mapping[NotifierType, tuple[RateLimit, ...]] = PLATFORM_RATE_LIMITS,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 monotonic: Callable[[], float] = time.monotonic, rng: random.Random | None = None) -> None:
        self._clock = clock
        self._own_client = client is None
        self._client = client or httpx.AsyncClient(follow_redirects=False, trust_env=False)
        self._retry = retry
        self._limits = rate_limits
        self._sleep = sleep
        self._monotonic = monotonic
        self._rng = rng or random.Random()
        self._window = _SlidingWindow()

    async def __aenter__(self) -> "Sender":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP client if this sender created it."""
        if self._own_client:
            await self._client.aclose()

    def _backoff_s(self, retry_number: int) -> float:
        r = self._retry
        base = min(r.max_delay_s, r.base_delay_s * (2 ** (retry_number - 1)))
        return base * self._rng.uniform(1 - r.jitter_ratio, 1 + r.jitter_ratio)

    async def deliver(self, kind: NotifierType | str, url: str, secret: str | None, alert: Alert, *,
                      receiver: str = "") -> DeliveryResult:
        """Send ``alert`` to one webhook; never raises.

        Args:
            kind: ``spec.notifications[].type``.
            url: The webhook URL from the Secret (never logged or returned).
            secret: The signing secret or None (never logged or returned).
            alert: What to say (a ``BudgetAlert`` or the ``AlertMessage`` stored in the outbox).
            receiver: ``spec.notifications[].name``, for messages.
        Returns:
            :class:`DeliveryResult`.
        """
        started = self._monotonic()
        kind_ = NotifierType(kind)
        sensitive = _sensitive_parts(url, secret)
        attempts, outcome = 0, None
        try:
            outcome, attempts = await self._deliver(kind_, url, secret, alert, sensitive, started)
        except Exception as exc:  # noqa: BLE001 - the contract is "never raise"; the error is reported, not hidden
            outcome = _Outcome(False, "InternalError", f"Delivery failed unexpectedly: {type(exc).__name__}: {exc}",
                               False)
        result = DeliveryResult(kind_, receiver, outcome.delivered, outcome.reason, redact(outcome.message, sensitive),
                                attempts, outcome.status_code,
                                redact(outcome.platform_code, sensitive) if isinstance(outcome.platform_code, str)
                                else outcome.platform_code, round(self._monotonic() - started, 3))
        if result.delivered:
            log.info("Delivered budget alert kind=%s receiver=%s attempts=%d", kind_.value, receiver, attempts)
        else:
            log.warning("Failed to deliver budget alert kind=%s receiver=%s reason=%s attempts=%d message=%s",
                        kind_.value, receiver, result.reason, attempts, result.message)
        return result

    async def _deliver(self, kind: NotifierType, url: str, secret: str | None, alert: Alert,
                       sensitive: Sequence[str], started: float) -> tuple[_Outcome, int]:
        r = self._retry
        deadline = started + r.max_total_s
        key = hashlib.sha256(f"{kind.value} {url}".encode()).hexdigest()
        limits = self._limits.get(kind, ())
        attempts = 0
        while True:
            # client-side rate limit: wait for a slot if one frees within the budget (lock not held while waiting)
            while True:
                async with self._window.lock:
                    wait = self._window.wait_s(key, limits, self._monotonic())
                    if wait <= 0:
                        self._window.record(key, self._monotonic())
                        break
                if self._monotonic() + wait > deadline:
                    return _Outcome(False, "ClientRateLimited",
                                    f"{kind.value} client-side rate limit reached; no slot within {r.max_total_s:g} s",
                                    False), attempts
                await self._sleep(wait)
            attempts += 1
            remaining = deadline - self._monotonic()
            if remaining <= 0:
                return _Outcome(False, "TimedOut", f"Gave up after {r.max_total_s:g} s", False), attempts
            request = prepare_request(kind, url, secret, alert, self._clock())
            timeout = httpx.Timeout(min(r.timeout_s, remaining))
            try:
                response = await self._client.post(request.url, content=request.body, headers=request.headers,
                                                    timeout=timeout)
                body = response.text
                outcome = classify(kind, response.status_code, body,
                                   _retry_after_s(response.headers.get("Retry-After"), self._clock()))
            except httpx.TimeoutException:
                outcome = _Outcome(False, "TimedOut", f"{kind.value} did not answer within {min(r.timeout_s, remaining):.3g} s",
                                   True)
            except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
                return _Outcome(False, "InvalidURL", f"The webhook URL is not usable: {type(exc).__name__}",
                                False), attempts
            except httpx.TransportError as exc:
                outcome = _Outcome(False, "ConnectionFailed", f"Connection to {kind.value} failed: {type(exc).__name__}: "
                                   f"{redact(str(exc), sensitive)}", True)
            if outcome.delivered or not outcome.retryable:
                return outcome, attempts
            if attempts > r.max_retries:
                outcome.message += f" (gave up after {attempts} attempts)"
                return outcome, attempts
            delay = self._backoff_s(attempts)
            if outcome.retry_after_s is not None:
                delay = max(delay, outcome.retry_after_s)
            if self._monotonic() + delay > deadline:
                outcome.message += f" (retry budget of {r.max_total_s:g} s exhausted after {attempts} attempts)"
                return outcome, attempts
            log.info("Retrying budget alert kind=%s reason=%s attempt=%d delay_s=%.2f", kind.value, outcome.reason,
                     attempts, delay)
            await self._sleep(delay)


async def deliver(kind: NotifierType | str, url: str, secret: str | None, message: Alert,
                  clock: Callable[[], datetime] = utc_now, *, receiver: str = "",
                  retry: RetryPolicy = RetryPolicy()) -> DeliveryResult:
    """One-shot delivery with a fresh :class:`Sender` (its rate limiter is not shared; keep a Sender instead
    when sending repeatedly). Never raises."""
    async with Sender(clock=clock, retry=retry) as sender:
        return await sender.deliver(kind, url, secret, message, receiver=receiver)


__all__ = ["DeliveryResult", "PLATFORM_RATE_LIMITS", "RATE_LIMIT_WAIT_S", "RateLimit", "RetryPolicy", "Sender",
           "alert_delivered_condition", "classify", "deliver", "redact", "utc_now"]
