"""Admission: at most ``max_inflight`` requests at the replicas, a bounded FIFO queue behind them (asyncio, no I/O).

One queue serves both reasons to wait: every slot is taken, or no replica is Ready (a service at zero). A waiter is
released, oldest first, when a slot frees and a Ready replica exists. Beyond the queue a request is refused at
once; a waiter past the timeout is refused then: the gateway answers 503 with ``Retry-After`` (gRPC
``RESOURCE_EXHAUSTED``), never a hang (Knative's activator and the KEDA HTTP add-on's interceptor do the same with
their breaker / pending-request queue).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable


class Rejected(Exception):
    """The request was not admitted.

    Attributes:
        reason: ``QueueFull``, ``QueueTimeout``, ``NoReadyReplica`` (timed out at zero) or ``ShuttingDown``.
        retry_after_s: What the ``Retry-After`` header says, seconds.
    """

    def __init__(self, reason: str, retry_after_s: int, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after_s = retry_after_s


class Admission:
    """The in-flight limit and its queue.

    Args:
        max_inflight: Requests admitted at once (>= 1).
        queue_size: Requests that may wait (>= 0; 0 = refuse when full or at zero).
        queue_timeout_s: Longest wait, seconds.
        is_ready: True when a routable replica exists (:meth:`Balancer.has_ready`).
        on_change: Called after ``inflight`` or ``waiting`` changed (the gateway's gauges).
    Raises:
        ValueError: ``max_inflight`` < 1 or ``queue_size`` < 0.
    """

    def __init__(self, max_inflight: int, queue_size: int, queue_timeout_s: float,
                 is_ready: Callable[[], bool], on_change: Callable[[], None] = lambda: None) -> None:
        if max_inflight < 1 or queue_size < 0:
            raise ValueError(f"max_inflight={max_inflight} must be >= 1 and queue_size={queue_size} >= 0")
        self.max_inflight = max_inflight
        self.queue_size = queue_size
        self.queue_timeout_s = queue_timeout_s
        self._is_ready = is_ready
        self._on_change = on_change
        self.inflight = 0
        """Requests admitted and not yet finished."""
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._closed = False

    @property
    def waiting(self) -> int:
        """Requests in the queue."""
        return sum(1 for f in self._waiters if not f.done())

    def close(self) -> None:
        """Refuse new requests (``ShuttingDown``); queued ones still get their turn while a replica is Ready, and
        are refused (``ShuttingDown``) when none is, rather than left waiting on a stopping gateway."""
        self._closed = True
        self.wake()

    def refuse_waiting(self) -> None:
        """Refuse every request still in the queue (``ShuttingDown``): the gateway's drain is about to end, and a
        queued request never reached a replica, so a ``503`` with ``Retry-After`` (another gateway pod takes the
        retry) beats the unanswered connection that the listener's shutdown would leave it."""
        changed = bool(self._waiters)
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_exception(Rejected("ShuttingDown", 1, "the gateway is shutting down and its drain ends before "
                                           "a slot frees; retry (another gateway replica answers)"))
        if changed:
            self._on_change()

    async def enter(self) -> None:
        """Wait for a slot (and a Ready replica); call :meth:`exit` exactly once after a normal return.

        Raises:
            Rejected: Shutting down, queue full, or the wait passed ``queue_timeout_s``.
        """
        if self._closed:
            raise Rejected("ShuttingDown", 1, "the gateway is shutting down; retry (another gateway replica answers)")
        if not self._waiters and self.inflight < self.max_inflight and self._is_ready():
            self.inflight += 1
            self._on_change()
            return
        if self.waiting >= self.queue_size:
            raise Rejected("QueueFull", 1, f"{self.inflight} requests in flight and {self.waiting} queued (the "
                           "gateway's limits); retry after the Retry-After seconds")
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        self._on_change()
        try:
            await asyncio.wait_for(asyncio.shield(fut), self.queue_timeout_s)
        except TimeoutError:
            if fut.done() and not fut.cancelled():
                return  # admitted in the same tick as the timeout: keep the slot
            fut.cancel()
            self._forget(fut)
            if not self._is_ready():
                raise Rejected("NoReadyReplica", 5, f"no Ready replica within {self.queue_timeout_s:g} s (the "
                               "service is starting from zero or cannot start); retry later") from None
            raise Rejected("QueueTimeout", 1, f"waited {self.queue_timeout_s:g} s for a free slot; retry") from None
        except asyncio.CancelledError:  # the client went away
            if fut.done() and not fut.cancelled():
                self.exit()
            else:
                fut.cancel()
                self._forget(fut)
            raise

    def exit(self) -> None:
        """One admitted request finished: free its slot and admit the next waiter."""
        self.inflight -= 1
        self.wake()
        self._on_change()

    def wake(self) -> None:
        """Admit waiters, oldest first, while a slot is free and a replica is Ready (call after endpoint changes)."""
        changed = False
        while self._waiters and self.inflight < self.max_inflight and self._is_ready():
            fut = self._waiters.popleft()
            changed = True
            if not fut.done():
                self.inflight += 1
                fut.set_result(None)
        if self._closed and not self._is_ready():
            while self._waiters:
                fut = self._waiters.popleft()
                changed = True
                if not fut.done():
                    fut.set_exception(Rejected("ShuttingDown", 1, "the gateway is shutting down and no replica is "
                                               "Ready; retry (another gateway replica answers)"))
        if changed:
            self._on_change()

    def _forget(self, fut: asyncio.Future[None]) -> None:
        try:
            self._waiters.remove(fut)
        except ValueError:
            pass
        self._on_change()
