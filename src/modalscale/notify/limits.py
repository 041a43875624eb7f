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
https://open.feishu.cn/document/client-docs/bot-v3/add-custom-bot); Slack 1/second (Slack rate-limits page,
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
    NotifierType.FEISHU: {9499: 1.0, 11232: 1.0},  # "too many request" / frequency limit; 5/second, 100/minute
}
"""Error codes inside an HTTP 200 that mean "rate limited", with the least wait before the next attempt in
seconds (the platform's documented window, sources in the module docstring): retried like a 429 whose
``Retry-After`` is that wait; the exponential backoff still doubles past it."""


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


__all__ = ["PLATFORM_RATE_LIMITS", "RATE_LIMIT_WAIT_S", "RateLimit", "SlidingWindow"]
