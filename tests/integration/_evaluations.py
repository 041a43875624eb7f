"""Stand-in for BudgetPolicy evaluations in the showback tests that run no operator: what ``evaluate_policy``
exports (``BurnGauges.export``) at a fixed rate, on the operator's registry, for Prometheus to scrape."""

from __future__ import annotations

import datetime as dt
import math
import threading
import time
from decimal import Decimal

from modalscale.costmodel.anomaly import BurnSample
from modalscale.operator.budget.history import BurnGauges

Policy = tuple[str, str]
Service = tuple[str, str]


class Evaluations:
    """Every ``every_s`` s, at whole seconds (the ledger's ``observedTime`` is floored to the second), each policy's
    burn samples and the ledger's running total of each service: ``usd_per_hour x seconds since start / 3600``
    (what the ledger counts for replicas that run the whole time), stamped with that second.

    Args:
        gauges: The operator's gauges (on the registry Prometheus scrapes).
        policies: ``(policy namespace, name) -> {(namespace, service): (replicas, USD/h)}``.
    """

    def __init__(self, gauges: BurnGauges, policies: dict[Policy, dict[Service, tuple[int, float]]],
                 every_s: float = 1.0) -> None:
        self.gauges, self.policies, self.every_s = gauges, policies, every_s
        self.t0 = math.floor(time.time())
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="evaluations")

    def evaluate(self) -> None:
        at_s = math.floor(time.time())
        at = dt.datetime.fromtimestamp(at_s, dt.UTC)
        for (pns, policy), services in self.policies.items():
            samples = {k: BurnSample(at, usd, replicas, usd / replicas) for k, (replicas, usd) in services.items()}
            spent = {k: Decimal(repr(usd * (at_s - self.t0) / 3600)) for k, (_, usd) in services.items()}
            self.gauges.export(pns, policy, samples, spent, at, dt.datetime.fromtimestamp(self.t0, dt.UTC))

    def start(self) -> Evaluations:
        self.evaluate()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.evaluate()
