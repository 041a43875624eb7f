"""The operator's own Prometheus metrics (one registry per process, passed around in ``Deps``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Histogram


@dataclass
class OperatorMetrics:
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        self.reconciles = Counter("modalscale_reconciles_total", "Reconciles by kind and result",
                                  ["kind", "result"], registry=self.registry)
        self.reconcile_seconds = Histogram("modalscale_reconcile_duration_seconds", "Reconcile duration",
                                           ["kind"], registry=self.registry,
                                           buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
        self.api_writes = Counter("modalscale_api_writes_total",
                                  "Kubernetes API write attempts by object kind, verb and outcome (written: accepted; "
                                  "refused: the API server answered an error status; failed: no answer)",
                                  ["kind", "verb", "outcome"], registry=self.registry)
        self.decisions = Counter("modalscale_scaling_decisions_total",
                                 "Replica changes written, by InferenceService mode and reason",
                                 ["mode", "reason"], registry=self.registry)
