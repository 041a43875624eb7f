"""The chaos tests' independent spend meter (issue 21): each pod's own run x a price, from the pods' own records,
never from the operator's ledger it is compared with."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any


def pod_lifetime_usd(pods: list[Any], at: dt.datetime, usd_per_hour: Decimal) -> Decimal:
    """Each pod's run from ``status.startTime`` to ``at`` (s) x ``usd_per_hour`` / 3600, summed (USD).

    Args:
        pods: ``V1Pod`` objects (a pod not started yet counts 0 s).
        at: The end of every run (the ledger's ``observedTime``), timezone-aware.
        usd_per_hour: One pod's price, USD per hour.
    """
    return sum((usd_per_hour * Decimal(str(max(0.0, (at - p.status.start_time).total_seconds()))) / 3600
                for p in pods if p.status.start_time is not None), Decimal(0))
