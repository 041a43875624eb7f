"""Each chat platform's rate limits, and the client-side sliding window that keeps a sender inside them (pure).

Why a module: platforms throttle hard (DingTalk for ten minutes), so the sender queues rather than gets
throttled, and a platform's "rate limited" code inside an HTTP 200 is retried like a 429 after that platform's
documented window. Both tables live here with their sources; :mod:`modalscale.notify.answers` reads
:data:`RATE_LIMIT_WAIT_S` and :class:`modalscale.notify.sender.Sender` keeps one :class:`SlidingWindow`.

Client-side rate limits (sliding windows per webhook):
WeCom 20 messages/minute ("每个机器人发送的消息不能超过20条/分钟", WeCom group robot document,
https://developer.work.weixin.qq.com/document/path/91770); DingTalk 20/minute ("每个机器人每分钟最多发送20条", beyond
that throttled for 10 minutes, https://open.dingtalk.com/document/robots/custom-robot-access); Feishu custom bot
100/minute and 5/second (Feishu custom bot document, "100 次/分钟，5 次/秒",
https://open.feishu.cn/document/client-docs/bot-v3/add-custom-bot, which also names 11232 its rate-limit error and
9499 its "Bad Request"); Slack 1/second (Slack rate-limits page,
https://api.slack.com/docs/rate-limits, incoming webhooks); none for Teams and generic webhooks.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from modalscale.api.budgetpolicy import NotifierType


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
    NotifierType.FEISHU: {11232: 1.0},        # "frequency limited" (custom bot guide: "11232 限流错误"); 5/second
}
"""Error codes inside an HTTP 200 that mean "rate limited", with the least wait before the next attempt in
seconds (the platform's documented window, sources in the module docstring): retried like a 429 whose
``Retry-After`` is that wait; the exponential backoff still doubles past it."""

RATE_LIMIT_IF_SAID: Mapping[NotifierType, Mapping[int, tuple[tuple[str, ...], float]]] = {
    NotifierType.FEISHU: {9499: (("too many request", "frequency limit"), 1.0)},
}
"""Codes that mean "rate limited" only when their message says so (lower case, any of the words), with the wait.
Feishu's 9499 is its "Bad Request" (the custom bot guide: a body not in a message type's format or over 20 KB
is answered ``{"code": 9499, "msg": "Bad Request"}``), final: sent again, the same body is refused again. Its
gateway also answers 9499 "too many request" when over the limit (kubesphere/notification-manager#126 retries
it), which is a rate limit."""


def rate_limit_wait_s(kind: NotifierType, code: object, message: str) -> float | None:
    """The least wait in seconds when ``code`` (with ``message``) inside an HTTP 200 means "rate limited" on
    ``kind`` (:data:`RATE_LIMIT_WAIT_S`, :data:`RATE_LIMIT_IF_SAID`); None when it does not (a final error)."""
    if not isinstance(code, int) or isinstance(code, bool):
        return None
    wait_s = RATE_LIMIT_WAIT_S.get(kind, {}).get(code)
    if wait_s is not None:
        return wait_s
    words, said_wait_s = RATE_LIMIT_IF_SAID.get(kind, {}).get(code, ((), 0.0))
    return said_wait_s if any(w in message.lower() for w in words) else None


class SlidingWindow:
    """Per-key sliding-window log of send times (monotonic seconds); the caller serialises access."""

    def __init__(self) -> None:
        self._sent: dict[str, deque[float]] = {}

    def wait_s(self, key: str, limits: Sequence[RateLimit], now: float) -> float:
        """Seconds until one more message to ``key`` fits every limit (0: now); forgets sends older than the
        longest window."""
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
        """Note one send to ``key`` at ``now`` (monotonic seconds)."""
        self._sent.setdefault(key, deque()).append(now)


__all__ = ["PLATFORM_RATE_LIMITS", "RATE_LIMIT_IF_SAID", "RATE_LIMIT_WAIT_S", "RateLimit", "SlidingWindow",
           "rate_limit_wait_s"]
