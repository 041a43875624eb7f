"""Per-process state of the BudgetPolicy handlers (``Deps.budget``): wakers, delivery rounds, burn history.

Built once at start-up with the rest of the operator's dependencies (``modalscale.operator.deps.build_deps``),
so the handlers have one container (``memo.deps``).
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from dataclasses import dataclass, field

from modalscale.costmodel.anomaly import BurnSample
from modalscale.costmodel.outbox import Attempt, OutboxKey
from modalscale.notify.sender import Sender
from modalscale.operator.budget.history import BurnGauges, PrometheusHistory
from modalscale.operator.budget.observe import BudgetObserver
from modalscale.operator.budget.podstops import GonePods
from modalscale.operator.budget.spend_anomalies import HistoryRead
from modalscale.operator.showback import PrometheusShowback


def process_holder() -> str:
    """This operator process, as the alert outbox names who is sending (host, pid and start time: a restarted
    process in the same pod is another holder)."""
    return f"{socket.gethostname()[:200]}/{os.getpid()}/{int(time.time())}"


@dataclass
class BudgetRuntime:
    """Per-process state of the BudgetPolicy handlers, kept in ``Deps.budget`` (built at start-up by
    ``modalscale.operator.deps.build_deps``)."""

    observer: BudgetObserver
    sender: Sender | None = None
    """Created inside the event loop on first use (it owns an ``httpx.AsyncClient``)."""
    wake: dict[str, asyncio.Event] = field(default_factory=dict)
    """Policy uid -> event that ends the daemon's sleep early (spec change, delivery finished)."""
    delivered: dict[str, list[Attempt]] = field(default_factory=dict)
    """Policy uid -> finished delivery rounds not yet written to the outbox in status."""
    in_flight: dict[str, set[OutboxKey]] = field(default_factory=dict)
    """Policy uid -> outbox entries being sent now (excluded from what is due)."""
    batches: dict[str, asyncio.Task[None]] = field(default_factory=dict)
    """Policy uid -> its latest delivery batch (the next one waits for it, so rooms see alerts in order)."""
    burn_history: dict[str, dict[tuple[str, str], list[BurnSample]]] = field(default_factory=dict)
    """Policy uid -> (namespace, name) -> burn-rate samples of earlier evaluations (the anomaly baseline; in
    memory, bounded by ``trim_history``; read back from ``history_source`` after a restart)."""
    history_source: PrometheusHistory | None = None
    """Where the history is read back from at a policy's first evaluation (None: memory only)."""
    history_read: dict[str, HistoryRead] = field(default_factory=dict)
    """Policy uid -> how reading its history back went (retried until ``ok``, at most every
    ``AnomalyConfig.history_retry_s``)."""
    history_retry_at: dict[str, float] = field(default_factory=dict)
    """Policy uid -> ``time.monotonic()`` before which a failed read is not tried again."""
    gauges: BurnGauges | None = None
    """The burn-rate gauges every evaluation exports (what ``history_source`` reads back)."""
    tenant_usage_source: PrometheusShowback | None = None
    """Where a tenant-scoped policy reads the gateway's per-tenant usage and the ledger's rates (showback's
    inputs) over its period so far (None: no Prometheus; the tenants' spend is then unknown and held)."""
    gone_pods: GonePods = field(default_factory=GonePods)
    """Pods of InferenceServices the pod watch saw deleted (``budget_pod_deleted``): every evaluation charges
    each to when it stopped (``modalscale.operator.budget.podstops``)."""

    holder: str = field(default_factory=process_holder)
    """This process, marked on the alert outbox's entries it sends (``modalscale.costmodel.outbox.mark_sending``)."""

    def waker(self, uid: str) -> asyncio.Event:
        return self.wake.setdefault(uid, asyncio.Event())


__all__ = ["BudgetRuntime", "process_holder"]
