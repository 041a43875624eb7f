"""The one small HTTP sender for budget alerts: best effort, bounded, never raises, never logs a URL or secret.

Why a module: this is the only part of ``modalscale.notify`` that does I/O (httpx). The operator calls
:meth:`Sender.deliver` per receiver and records the :class:`~modalscale.notify.answers.DeliveryResult` in the
outbox; the request comes from :func:`modalscale.notify.payloads.prepare_request` and is re-signed on every
attempt (DingTalk and Feishu reject timestamps older than one hour); each answer is classified by
:func:`modalscale.notify.answers.classify`; the client-side limits are :mod:`modalscale.notify.limits`'.

Retries (house rule C7, crate-operator style): 429, 5xx, timeouts and connection errors are retried at most
``RetryPolicy.max_retries`` (5) times with exponential backoff ``base x 2**n`` and +/-20 % jitter; a 429's
``Retry-After`` is honoured as the lower bound of the wait. A platform's rate-limit code inside an HTTP 200
(:func:`~modalscale.notify.limits.rate_limit_wait_s`) is a 429 too: retried in the round, waiting at least one
window of that platform's documented limit (a wait longer than the round's budget ends the round, and the outbox
retries later). The whole delivery, waits included, is bounded by ``RetryPolicy.max_total_s``. Anything else
(4xx, any other error code inside a 200) is final. A message that would exceed a platform's client-side limit
waits for a slot within that budget, or ends as ``ClientRateLimited`` without reaching the platform.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

import httpx

from modalscale.api.budgetpolicy import NotifierType
from modalscale.api.conditions import (
    CLIENT_RATE_LIMITED,
    CONNECTION_FAILED,
    INTERNAL_ERROR,
    INVALID_URL,
    TIMED_OUT,
)
from modalscale.notify.answers import DeliveryResult, Outcome, classify, retry_after_s, sensitive_parts
from modalscale.notify.limits import PLATFORM_RATE_LIMITS, RateLimit, SlidingWindow
from modalscale.notify.payloads import Alert, prepare_request
from modalscale.redaction import redact

log = logging.getLogger("modalscale.notify")


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
        self._window = SlidingWindow()
        self._window_lock = asyncio.Lock()

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
        base = min(r.max_delay_s, r.base_delay_s * 2.0 ** (retry_number - 1))
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
        attempts, outcome = 0, None
        try:
            urllib.parse.urlsplit(url)  # ValueError: "https://[::1/x" (an unclosed IPv6 host), before any use of it
        except ValueError:
            sensitive = [p for p in (url, secret) if p]
            outcome = Outcome(False, INVALID_URL, "The webhook URL is not usable: it does not parse as a URL (check "
                                                  "the Secret's url)", False)
        else:
            sensitive = sensitive_parts(url, secret)
            try:
                outcome, attempts = await self._deliver(kind_, url, secret, alert, sensitive, started)
            except Exception as exc:  # the contract is "never raise"; the error is reported, not hidden
                outcome = Outcome(False, INTERNAL_ERROR,
                                  f"Delivery failed unexpectedly: {type(exc).__name__}: {exc}", False)
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
                       sensitive: Sequence[str], started: float) -> tuple[Outcome, int]:
        r = self._retry
        deadline = started + r.max_total_s
        key = hashlib.sha256(f"{kind.value} {url}".encode()).hexdigest()
        limits = self._limits.get(kind, ())
        attempts = 0
        while True:
            # client-side rate limit: wait for a slot if one frees within the budget (lock not held while waiting)
            while True:
                async with self._window_lock:
                    wait = self._window.wait_s(key, limits, self._monotonic())
                    if wait <= 0:
                        self._window.record(key, self._monotonic())
                        break
                if self._monotonic() + wait > deadline:
                    return Outcome(False, CLIENT_RATE_LIMITED,
                                   f"{kind.value} client-side rate limit reached; no slot within {r.max_total_s:g} s",
                                   False), attempts
                await self._sleep(wait)
            attempts += 1
            remaining = deadline - self._monotonic()
            if remaining <= 0:
                return Outcome(False, TIMED_OUT, f"Gave up after {r.max_total_s:g} s", False), attempts
            request = prepare_request(kind, url, secret, alert, self._clock())
            timeout = httpx.Timeout(min(r.timeout_s, remaining))
            try:
                response = await self._client.post(request.url, content=request.body, headers=request.headers,
                                                    timeout=timeout)
                body = response.text
                outcome = classify(kind, response.status_code, body,
                                   retry_after_s(response.headers.get("Retry-After"), self._clock()))
            except httpx.TimeoutException:
                waited_s = min(r.timeout_s, remaining)
                outcome = Outcome(False, TIMED_OUT, f"{kind.value} did not answer within {waited_s:.3g} s", True)
            except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
                return Outcome(False, INVALID_URL, f"The webhook URL is not usable: {type(exc).__name__}",
                               False), attempts
            except httpx.TransportError as exc:
                outcome = Outcome(False, CONNECTION_FAILED, f"Connection to {kind.value} failed: {type(exc).__name__}: "
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


__all__ = ["RetryPolicy", "Sender", "deliver", "utc_now"]
