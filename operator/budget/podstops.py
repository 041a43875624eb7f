"""Pods of InferenceServices seen deleted by the operator's pod watch, kept until every ledger has charged them.

Why a module: the budget ledger charges each pod from its start to its stop (``modalscale.costmodel.ledger``),
but an evaluation lists pods only every ``spec.evaluationIntervalSeconds``: a pod scaled away and gone before
the next listing was charged up to that evaluation, not to when it stopped (issue 22: over a simulated month
75 % of pod stops were never listed and the ledger ran 5 % ahead of true spend). The pod watch
(``budget.handlers``, ``kopf.on.event`` on pods carrying ``modalscale.io/inferenceservice``) records each
``DELETED`` event here with the pod as last seen (its ``deletionTimestamp`` and containers' ``finishedAt``: the
kubelet's own times); every evaluation passes the records of the namespaces it reads to the planner
(``BudgetObserved.gone``), which charges each to when it stopped (``budget.plan.gone_pod_runs``).

Durability and restarts: the ledger's watermark (``status.ledger.observedTime``) is durable, the records are
not. A record whose stop lies before the watermark charges nothing (the ledger integrates only
``[observedTime, now)``), so records are simply kept for :data:`GONE_POD_RETENTION_S` (longer than the longest
evaluation interval, 3600 s, and a run of failed evaluations) and passed to every evaluation: re-running an
evaluation, or several policies selecting the same service, never charges a pod twice. What a restart loses is
the records of pods deleted between the last evaluation before it and the new watch's start: those are charged
as before, up to the first evaluation that no longer lists them (an upper bound on their run, never a double
charge). No state is written to the cluster.

Thread safety: records are added from the event loop and read from the evaluation thread; a lock guards them.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from modalscale.operator.budget.plan import GonePod

GONE_POD_RETENTION_S = 3 * 3600
"""Seconds a deleted pod's record is kept after it was seen gone: 3 x the longest evaluation interval (3600 s),
so a policy whose evaluations fail for up to two hours still charges it exactly."""
MAX_GONE_PODS = 50_000
"""Most records kept (the oldest are dropped first; a dropped pod is charged as before: an upper bound)."""


def trim_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What the ledger needs of a deleted pod (``gone_pod_runs``, ``pod_tier``), without the rest of its object.

    Keeps ``metadata`` name, namespace, uid, labels, creationTimestamp and deletionTimestamp; ``spec`` nodeName,
    nodeSelector, affinity and tolerations (a pod asked onto a Spot node is priced at Spot when nodes cannot be
    read); ``status`` phase, startTime, the ``PodScheduled`` condition (a start from before the kubelet reported
    one: ``pod_start``) and each container's ``state``.
    """
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    return {
        "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "labels", "creationTimestamp",
                                          "deletionTimestamp") if k in meta},
        "spec": {k: spec[k] for k in ("nodeName", "nodeSelector", "affinity", "tolerations") if k in spec},
        "status": {**{k: status[k] for k in ("phase", "startTime") if k in status},
                   "conditions": [c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"],
                   "containerStatuses": [{"state": c.get("state") or {}}
                                         for c in status.get("containerStatuses") or []]},
    }


class GonePods:
    """Deleted pods by (namespace, name), each with when the watch saw it go.

    Args:
        retention_s: Seconds a record is kept after ``seen_at`` (:data:`GONE_POD_RETENTION_S`).
        max_pods: Most records kept (:data:`MAX_GONE_PODS`).
    """

    def __init__(self, retention_s: float = GONE_POD_RETENTION_S, max_pods: int = MAX_GONE_PODS) -> None:
        if retention_s <= 0 or max_pods <= 0:
            raise ValueError("retention_s and max_pods must be positive")
        self.retention_s, self.max_pods = retention_s, max_pods
        self._lock = threading.Lock()
        self._pods: dict[tuple[str, str], GonePod] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._pods)

    def record(self, pod: Mapping[str, Any], seen_at: dt.datetime) -> bool:
        """Keep ``pod`` (a ``DELETED`` event's object) as gone at ``seen_at`` (timezone-aware).

        Returns:
            True when recorded; False for a pod without a name or namespace, or never bound to a node (it ran
            nothing).
        Raises:
            ValueError: Naive ``seen_at``.
        """
        if seen_at.tzinfo is None:
            raise ValueError(f"seen_at must be timezone-aware (UTC), got naive {seen_at.isoformat()}")
        meta = pod.get("metadata") or {}
        ns, name = meta.get("namespace"), meta.get("name")
        if not ns or not name or not (pod.get("spec") or {}).get("nodeName"):
            return False
        with self._lock:
            self._pods[(str(ns), str(name))] = GonePod(trim_pod(pod), seen_at.astimezone(dt.timezone.utc))
            self._prune(seen_at)
        return True

    def in_namespaces(self, namespaces: Iterable[str], now: dt.datetime) -> dict[str, list[GonePod]]:
        """The records of ``namespaces`` kept at ``now`` (older ones are dropped first), per namespace."""
        wanted = set(namespaces)
        with self._lock:
            self._prune(now)
            out: dict[str, list[GonePod]] = {}
            for (ns, _), g in self._pods.items():
                if ns in wanted:
                    out.setdefault(ns, []).append(g)
        return out

    def _prune(self, now: dt.datetime) -> None:
        cutoff = now - dt.timedelta(seconds=self.retention_s)
        for key in [k for k, g in self._pods.items() if g.seen_at < cutoff]:
            del self._pods[key]
        if len(self._pods) > self.max_pods:
            for key, _ in sorted(self._pods.items(), key=lambda kv: kv[1].seen_at)[:len(self._pods) - self.max_pods]:
                del self._pods[key]


__all__ = ["GONE_POD_RETENTION_S", "GonePods", "MAX_GONE_PODS", "trim_pod"]
