"""The operator's prices: the pricing catalog and, with ``MODALSCALE_OPENCOST_URL``, OpenCost's ``/assets`` answer.

Thin on purpose: this module only reads OpenCost over HTTP (httpx), at most once per refresh period, and keeps
the last observation; turning the answer into prices, and a service into a price with its source, is the pure
``modalscale.costmodel.opencost``. A failed read (connection refused, timeout, HTTP error, garbage) never raises:
it becomes an observation whose prices are None, and every service falls back to the catalog, saying why.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable

import httpx

from modalscale.costmodel.catalog import Catalog, PricingTier, ReplicaResources
from modalscale.costmodel.opencost import (
    ASSETS_PATH,
    ASSETS_WINDOW,
    OpenCostObservation,
    PricedReplica,
    observe_answer,
    resolve_replica_price,
)
from modalscale.redaction import redact_for_url

log = logging.getLogger(__name__)

READ_TIMEOUT_S = 5.0
"""Timeout of one ``/assets`` read, in seconds (connect and read)."""


class PriceBook:
    """Prices for the handlers: :meth:`price_replica` for an InferenceService, :meth:`catalog` for a budget.

    Thread-safe: the change handler, the timers and the budget daemons share one instance (``Deps.prices``).
    """

    def __init__(self, catalog: Catalog, opencost_url: str = "", refresh_s: float = 300.0,
                 clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
                 client: httpx.Client | None = None) -> None:
        """
        Args:
            catalog: Packaged catalog merged with ``MODALSCALE_PRICING_CATALOG``.
            opencost_url: OpenCost's API base URL (``MODALSCALE_OPENCOST_URL``, e.g.
                ``http://opencost.opencost:9003``); empty: the catalog only.
            refresh_s: Seconds between reads of ``/assets`` (``MODALSCALE_OPENCOST_REFRESH_SECONDS``).
            clock: Timezone-aware UTC now.
        """
        self.base_catalog = catalog
        self.url = opencost_url.rstrip("/")
        self.refresh_s = refresh_s
        self.clock = clock
        self._client = client
        self._lock = threading.Lock()
        self._observation: OpenCostObservation | None = None

    def observation(self) -> OpenCostObservation | None:
        """The current OpenCost observation (read again when older than ``refresh_s``); None without OpenCost."""
        if not self.url:
            return None
        with self._lock:
            now = self.clock()
            last = self._observation
            if last is None or (now - last.checked_at).total_seconds() >= self.refresh_s:
                new = self._observation = self._read(last, now)
                if last is None or last.usable != new.usable:
                    if new.prices is not None:
                        log.info("Switched prices to OpenCost: nodes=%d figures=%d", new.prices.nodes,
                                 len(new.prices.from_opencost))
                    else:
                        log.warning("Switched prices to the catalog: %s", new.problem)
            return self._observation

    def _read(self, previous: OpenCostObservation | None, now: dt.datetime) -> OpenCostObservation:
        try:
            if self._client is None:
                self._client = httpx.Client(timeout=READ_TIMEOUT_S)
            answer = self._client.get(self.url + ASSETS_PATH, params={"window": ASSETS_WINDOW})
        except httpx.HTTPError as exc:
            error = redact_for_url(f"{type(exc).__name__}: {exc}", self.url)
            return observe_answer(previous, self.base_catalog, now, error=error)
        return observe_answer(previous, self.base_catalog, now, status_code=answer.status_code, body=answer.content)

    def catalog(self) -> Catalog:
        """The catalog with OpenCost's figures laid over it (the plain catalog when OpenCost is off or failing)."""
        obs = self.observation()
        return obs.prices.catalog if obs is not None and obs.prices is not None else self.base_catalog

    def price_replica(self, resources: ReplicaResources, tier: PricingTier | str) -> PricedReplica:
        """USD per replica-hour with its source; see ``modalscale.costmodel.opencost.resolve_replica_price``.

        Raises:
            UnknownPrice: Neither OpenCost nor the catalog prices the GPU type at ``tier``.
        """
        return resolve_replica_price(resources, tier, self.base_catalog, self.observation())

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
