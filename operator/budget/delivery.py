"""The delivery pump of budget alerts: each batch of due outbox entries runs as an asyncio task of its own.

Delivery is at least once and never blocks evaluation or deletion (``modalscale.operator.budget.handlers`` says
how results return to the outbox): :data:`DELIVERY_RETRY` bounds every round; a batch is cut at ``most entries
per receiver x max_total_s + DELIVERY_SLACK_S`` (:func:`batch_deadline_s`); batches of one policy run in order;
entries in a batch are in flight (kept in memory, never sent twice by this process).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from modalscale.api.conditions import TIMED_OUT
from modalscale.costmodel.outbox import Attempt, PendingAlert
from modalscale.notify.answers import DeliveryResult
from modalscale.notify.sender import RetryPolicy, Sender
from modalscale.operator.budget.observe import Receiver
from modalscale.operator.budget.runtime import BudgetRuntime

Log = logging.Logger | logging.LoggerAdapter[Any]

DELIVERY_RETRY = RetryPolicy(max_retries=5, base_delay_s=1.0, max_delay_s=15.0, timeout_s=10.0, max_total_s=45.0)
"""Per receiver and alert: 5 retries (429, 5xx, timeouts), 10 s per attempt, 45 s in all (house rule C7)."""
DELIVERY_SLACK_S = 5.0
"""Extra seconds the batch deadline allows beyond the sender's own bound."""


def batch_deadline_s(sends: Sequence[PendingAlert]) -> float:
    """Bound of one batch, in seconds: the most entries any one receiver gets x one round's bound, plus slack."""
    per_target: dict[str, int] = {}
    for e in sends:
        per_target[e.notification] = per_target.get(e.notification, 0) + 1
    return max(per_target.values(), default=0) * DELIVERY_RETRY.max_total_s + DELIVERY_SLACK_S


async def deliver_batch(sender: Sender, sends: Sequence[PendingAlert], receivers: Sequence[Receiver],
                        problems: Sequence[DeliveryResult], *, deadline_s: float, clock: Any,
                        previous: asyncio.Task[None] | None = None) -> list[Attempt]:
    """Send each outbox entry to its receiver (receivers in parallel, entries in order); never raises.

    Args:
        sends: Due outbox entries.
        receivers: Resolved targets of ``sends`` (by ``name``).
        problems: Targets that cannot be tried (Secret missing): each of their entries fails with that result.
        deadline_s: Bound on the whole batch, in seconds; an entry not finished by then fails as ``TimedOut``.
        clock: Timezone-aware UTC "now" (when each round started).
        previous: The policy's previous batch, waited for first (bounded by its own deadline).
    Returns:
        One :class:`Attempt` per entry of ``sends``.
    """
    if previous is not None and not previous.done():
        await asyncio.wait([previous])
    by_name = {r.name: r for r in receivers}
    problem = {p.receiver: p for p in problems}
    results: list[Attempt] = []
    groups: dict[str, list[PendingAlert]] = {}
    for e in sends:
        if e.notification in by_name:
            groups.setdefault(e.notification, []).append(e)
        else:
            p = problem.get(e.notification)
            results.append(Attempt(e.key, False, p.reason if p else "ReceiverUnknown",
                                   p.message if p else f"Notification {e.notification} could not be resolved",
                                   clock()))

    async def one(r: Receiver, entries: list[PendingAlert]) -> None:
        for e in entries:
            started = clock()
            res = await sender.deliver(r.type, r.url, r.secret, e.message, receiver=r.name)
            results.append(Attempt(e.key, res.delivered, res.reason, res.message, started))

    tasks = [asyncio.create_task(one(by_name[name], entries)) for name, entries in groups.items()]
    if tasks:
        _, pending = await asyncio.wait(tasks, timeout=deadline_s)
        for task in pending:
            task.cancel()
        finished = {a.key for a in results}
        for name, entries in groups.items():
            for e in entries:
                if e.key not in finished:
                    results.append(Attempt(e.key, False, TIMED_OUT,
                                           f"Delivery to {name} did not finish within {deadline_s:g} s", clock()))
    return results


def launch_batch(runtime: BudgetRuntime, uid: str, sends: Sequence[PendingAlert], receivers: Sequence[Receiver],
                 problems: Sequence[DeliveryResult], clock: Any, logger: Log) -> None:
    """Start delivering ``sends`` as an asyncio task of its own, after the policy's previous batch; its entries are
    in flight until it ends, then its rounds wait in ``runtime.delivered`` and the policy's daemon is woken."""
    if runtime.sender is None:
        runtime.sender = Sender(retry=DELIVERY_RETRY)
    deadline = batch_deadline_s(sends)
    previous = runtime.batches.get(uid)
    keys = {e.key for e in sends}
    runtime.in_flight.setdefault(uid, set()).update(keys)

    async def run() -> None:
        assert runtime.sender is not None
        results: list[Attempt] = []
        try:
            results = await deliver_batch(runtime.sender, sends, receivers, problems, deadline_s=deadline,
                                          clock=clock, previous=previous)
            for a in results:
                if not a.delivered:
                    logger.warning("Failed to deliver budget alert, will retry: receiver=%s reason=%s", a.key[0],
                                   a.reason)
        finally:
            # No await between these two: an evaluation sees an entry either in flight or with its result.
            runtime.delivered.setdefault(uid, []).extend(results)
            runtime.in_flight.get(uid, set()).difference_update(keys)
            runtime.waker(uid).set()

    task = asyncio.create_task(run(), name=f"budget-alerts-{uid}")
    runtime.batches[uid] = task
    task.add_done_callback(lambda t: runtime.batches.pop(uid, None) if runtime.batches.get(uid) is t else None)


async def stop_deliveries(runtime: BudgetRuntime, logger: Log) -> None:
    """At shutdown: cancel the batches in flight (their entries stay in status for the next operator, waited for
    at most 5 s) and close the sender."""
    pending = list(runtime.batches.values())
    for task in pending:
        task.cancel()
    if pending:
        logger.warning("Abandoned budget alert deliveries at shutdown: batches=%d", len(pending))
        await asyncio.wait(pending, timeout=5)
    if runtime.sender is not None:
        await runtime.sender.aclose()


__all__ = ["DELIVERY_RETRY", "DELIVERY_SLACK_S", "batch_deadline_s", "deliver_batch", "launch_batch",
           "stop_deliveries"]
