"""Showback: one service's spend over a window split over its tenants and modalities by the replica-seconds used.

Why a module: "what did this tenant's image requests cost last hour" needs the ledger's spend (what the replicas
cost) joined with the gateway's per-request records (who used how much of them). OpenCost prices inference per
model only (opencost/opencost#3845); this module is the pure join. The Prometheus reading is
``modalscale.operator.showback``; the CLI is ``modalscale cost showback``.

The rule (:func:`allocate`), for one InferenceService and one window ``[at - window_s, at)``:

* ``available_replica_s`` = the replica-seconds the ledger charged for (replicas x time, from its pod runs) and
  ``spend_usd`` what they cost.
* ``used_replica_s`` per (tenant, modality) = ``modalscale_gateway_service_seconds_total``'s increase: per answered
  request, the time from sending it to a replica to its last response byte.
* Each (tenant, modality) row costs ``spend_usd x used / available``; what no request used is its own ``idle``
  row, ``spend_usd x (available - sum used) / available``, and is NOT spread into per-request prices. This is
  Kubecost's convention: its Allocation API reports "the cost of the un-allocated assets as its own allocation"
  (``idle=true``, the ``__idle__`` line) and spreads it over the other allocations only when asked
  (``shareIdle``, default false); kubecost/docs ``apis/monitoring-apis/api-allocation.md``.
* **Concurrency** (``sum used > available``): a replica that batches requests (Triton dynamic batching, several
  model instances) serves them at once, so their wall times overlap and sum to more than the replica ran. The
  shares are then taken of the used seconds (``spend x used / sum used``), idle is 0, and the result carries
  ``oversubscribed=True``. Below that point overlap is invisible in the counters: with concurrency, idle is a
  lower bound and the request rows an upper bound.
* **Spend over zero replica-seconds** is real: the ledger charges a service's gateway pods (and a staged service's
  image-encoder pool) with it, and they run while it is scaled to zero. With no request it is all ``idle``
  (capacity no request used); requests served though no replica-second was counted (a replica that started and
  stopped between two evaluations) are the concurrency case above: shares of the used seconds, flagged.
* **Rounding**: every row is a multiple of the ledger's 1e-9 USD (``money.LEDGER_QUANTUM_USD``) and the rows sum
  to ``spend_usd`` exactly. Exact shares (rational arithmetic) are floored to the quantum, and the quanta left
  over go one each to the rows with the largest remainders (Hamilton's largest-remainder method), ties to the
  first row in (kind, tenant, modality) order with the idle row last. Per-request prices are
  ``row usd / requests`` rounded half-even to 1e-9 USD: a display figure, never summed.
* **Pods beside the replicas**: the ledger's spend also holds the pods it charges that are not replicas (the
  request gateway's, at zero replicas too, and a staged service's image encoder pool); their cost is split as the
  replicas' is. With no replica-second and no request in the window (a service scaled to zero whose gateway ran) the
  whole spend is the idle row, with a note.
* **Bad input is refused, never priced**: NaN, infinite or negative figures, a (tenant, modality) given twice,
  or a counter that reset inside the window raise :class:`ShowbackInputError`
  naming the field. A reset is accepted only when the caller says so (``accept_counter_resets=True``: Prometheus'
  ``increase()`` already adds the counts from before and after a restart, losing at most what the process counted
  after its last scrape); the row then carries the flag ``CounterReset`` and the result ``partial=True``.

The accounting metric names the gateway exports are constants here (:data:`SERVICE_SECONDS_METRIC` ...), so the
gateway and this reader share one spelling.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal
from fractions import Fraction

from modalscale.costmodel.money import LEDGER_QUANTUM_USD, MONEY_CONTEXT, display_usd

# --- Per-tenant accounting metrics the gateway exports (counters; labels tenant, modality) -------------------------
REQUESTS_METRIC = "modalscale_gateway_requests_total"
"""Requests by ``tenant``, ``modality`` and ``code`` (HTTP status or gRPC code name), refused ones included."""
SERVICE_SECONDS_METRIC = "modalscale_gateway_service_seconds_total"
"""Sum over answered requests of the time from sending to a replica to the last response byte, seconds."""
IMAGES_METRIC = "modalscale_gateway_request_images_total"
"""Images in requests."""
IMAGE_PIXELS_METRIC = "modalscale_gateway_request_image_pixels_total"
"""Pixels (width x height) of the images in requests."""
TEXT_TOKENS_METRIC = "modalscale_gateway_request_text_tokens_total"
"""Text tokens in requests."""
ACCOUNTING_METRICS: tuple[str, ...] = (REQUESTS_METRIC, SERVICE_SECONDS_METRIC, IMAGES_METRIC,
                                       IMAGE_PIXELS_METRIC, TEXT_TOKENS_METRIC)
TENANT_LABEL = "tenant"
MODALITY_LABEL = "modality"
CODE_LABEL = "code"
REFUSED_CODES: tuple[str, ...] = ("429", "503", "RESOURCE_EXHAUSTED")
"""``code`` values of requests the gateway refuses before any replica works on them: a tenant over its budget
(HTTP 429 / gRPC RESOURCE_EXHAUSTED), admission's queue full, queue timeout or no Ready replica (503 /
RESOURCE_EXHAUSTED), no replica reachable (503 / RESOURCE_EXHAUSTED); ``modalscale.gateway.server`` records them.
Such a request cost no replica time, so it is not a request that USD per request divides by. A replica's own 503
(Triton's queue full) is left out too: a refusal as well, its service time (if any) still counted in the USD."""
NO_MODALITY = "none"
"""``modality`` of a call that carried no inference request: a call other than infer (health, metadata,
repository: the gateway passes them on and counts them), an infer request the gateway itself refused as malformed
(400 / INVALID_ARGUMENT, before any replica) or a tenant's refusal recorded before the body was read. Such calls
are not requests that USD per request divides by, and make no showback rows."""
PRICED_REQUESTS_MATCHER = f'{MODALITY_LABEL}!="{NO_MODALITY}",{CODE_LABEL}!~"{"|".join(REFUSED_CODES)}"'
"""PromQL label matchers of the requests USD per request divides by: inference requests (modality not
:data:`NO_MODALITY`) that the gateway did not refuse (code not in :data:`REFUSED_CODES`); the CLI's query and the
chart's recording rule (``charts/modalscale/files/showback-rules.yaml``) use it verbatim."""
SERVICE_LABELS: tuple[str, str] = ("namespace", "inferenceservice")
"""Labels the scrape's relabelling gives every series of one InferenceService's pods."""

REQUEST = "request"
IDLE = "idle"
COUNTER_RESET = "CounterReset"
"""Row flag: a counter of this row reset inside the window (the figures are ``increase()``'s, a lower bound)."""
OVERSUBSCRIBED = "Oversubscribed"
"""Row flag: the service's requests used more replica-seconds than it ran (concurrency); shares of the used seconds."""

GROUP_DIMENSIONS: tuple[str, ...] = ("namespace", "inferenceservice", "tenant", "modality")
"""What ``--by`` may group by."""


class ShowbackInputError(ValueError):
    """A figure the allocation cannot use; ``field`` names it (e.g. ``usage[acme/image].service_s``)."""

    def __init__(self, field_path: str, message: str) -> None:
        super().__init__(f"{field_path}: {message}")
        self.field = field_path


@dataclass(frozen=True)
class TenantUsage:
    """What one tenant's requests of one modality used of one service over the window (counter increases).

    Attributes:
        tenant: The gateway's tenant label (folded: ``default`` when absent, ``other`` beyond the cap).
        modality: ``image``, ``text`` or ``image_text``.
        service_s: Replica-seconds used (increase of :data:`SERVICE_SECONDS_METRIC`), s.
        requests: Requests the replicas worked on (all codes but :data:`REFUSED_CODES`), a count (``increase()``
            may extrapolate to a fraction).
        images, image_pixels, text_tokens: Increases of the feature counters.
        counter_resets: Resets seen inside the window across this row's counters (``resets()``); 0 = none.
    """

    tenant: str
    modality: str
    service_s: Decimal | float | int
    requests: Decimal | float | int
    images: Decimal | float | int = 0
    image_pixels: Decimal | float | int = 0
    text_tokens: Decimal | float | int = 0
    counter_resets: int = 0


@dataclass(frozen=True)
class ServiceWindow:
    """One service's ledger figures over the window.

    Attributes:
        namespace, name: The InferenceService.
        spend_usd: What its replicas cost over the window, a multiple of 1e-9 USD (``quantize_ledger_usd``).
        available_replica_s: Replica-seconds the ledger charged for over the window, s.
    """

    namespace: str
    name: str
    spend_usd: Decimal
    available_replica_s: Decimal | float | int


@dataclass(frozen=True)
class ShowbackRow:
    """One line of showback: a (tenant, modality) of a service, its ``idle`` line, or a sum of such lines.

    Attributes:
        kind: :data:`REQUEST` or :data:`IDLE` (tenant and modality are None on idle rows).
        usd: Its part of the spend, USD, a multiple of 1e-9.
        replica_s: Replica-seconds used (request rows) or left unused (idle rows), s.
        requests: Request count (0 on idle rows).
        usd_per_request: ``usd / requests`` rounded to 1e-9 USD; None when there were no requests.
        flags: :data:`COUNTER_RESET`, :data:`OVERSUBSCRIBED`.
    """

    namespace: str | None
    inferenceservice: str | None
    tenant: str | None
    modality: str | None
    kind: str
    usd: Decimal
    replica_s: Decimal
    requests: Decimal = Decimal(0)
    images: Decimal = Decimal(0)
    image_pixels: Decimal = Decimal(0)
    text_tokens: Decimal = Decimal(0)
    flags: tuple[str, ...] = ()

    @property
    def usd_per_request(self) -> Decimal | None:
        """``usd / requests``, half-even to 1e-9 USD; None without requests."""
        if self.requests <= 0:
            return None
        return MONEY_CONTEXT.divide(self.usd, self.requests).quantize(LEDGER_QUANTUM_USD, rounding=ROUND_HALF_EVEN,
                                                                      context=MONEY_CONTEXT)


@dataclass(frozen=True)
class ServiceShowback:
    """The rows of one service (request rows, then its idle row); they sum to ``window.spend_usd`` exactly.

    Attributes:
        used_replica_s: Sum of the request rows' replica-seconds, s.
        oversubscribed: The requests used more replica-seconds than the ledger charged (see the module docstring).
        partial: A counter reset inside the window (rows flagged :data:`COUNTER_RESET`).
    """

    window: ServiceWindow
    rows: tuple[ShowbackRow, ...]
    used_replica_s: Decimal
    oversubscribed: bool = False
    partial: bool = False
    notes: tuple[str, ...] = field(default=())


def _figure(value: Decimal | float | int, field_path: str) -> Decimal:
    """A finite, non-negative figure as an exact Decimal (floats through ``repr``, their shortest exact form)."""
    if isinstance(value, bool) or not isinstance(value, (Decimal, float, int)):
        raise ShowbackInputError(field_path, f"expected a number, got {type(value).__name__} {value!r}")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ShowbackInputError(field_path, f"{value!r} is not a finite number (a NaN or infinite sample; "
                                                 "check the scrape)")
        d = Decimal(repr(value))
    else:
        d = Decimal(value)
    if not d.is_finite():
        raise ShowbackInputError(field_path, f"{value!r} is not a finite number")
    if d < 0:
        raise ShowbackInputError(field_path, f"{value!r} is negative; counters' increases and replica-seconds "
                                             "cannot be (a reset read as a decrease?)")
    return d


def _validate(window: ServiceWindow, usage: Sequence[TenantUsage], accept_counter_resets: bool
              ) -> tuple[Decimal, Decimal, list[tuple[TenantUsage, dict[str, Decimal]]]]:
    ref = f"{window.namespace}/{window.name}"
    if not isinstance(window.spend_usd, Decimal) or not window.spend_usd.is_finite():
        raise ShowbackInputError(f"{ref}.spend_usd", f"expected a finite Decimal, got {window.spend_usd!r}")
    if window.spend_usd < 0:
        raise ShowbackInputError(f"{ref}.spend_usd", f"{window.spend_usd} is negative")
    if window.spend_usd % LEDGER_QUANTUM_USD != 0:
        raise ShowbackInputError(f"{ref}.spend_usd", f"{window.spend_usd} is finer than the ledger's 1e-9 USD; "
                                                     "round it with money.quantize_ledger_usd first")
    available = _figure(window.available_replica_s, f"{ref}.available_replica_s")
    seen: set[tuple[str, str]] = set()
    checked = []
    for u in usage:
        path = f"{ref}.usage[{u.tenant}/{u.modality}]"
        if not u.tenant or not u.modality:
            raise ShowbackInputError(path, "tenant and modality must be non-empty (the gateway folds a missing "
                                           "tenant to 'default')")
        if (u.tenant, u.modality) in seen:
            raise ShowbackInputError(path, "given twice; sum the series of one (tenant, modality) first")
        seen.add((u.tenant, u.modality))
        if isinstance(u.counter_resets, bool) or not isinstance(u.counter_resets, int) or u.counter_resets < 0:
            raise ShowbackInputError(f"{path}.counter_resets", f"expected a count >= 0, got {u.counter_resets!r}")
        if u.counter_resets and not accept_counter_resets:
            raise ShowbackInputError(f"{path}.counter_resets", f"{u.counter_resets} counter reset(s) inside the "
                                     "window (a gateway restarted): the increase is a lower bound; pass "
                                     "accept_counter_resets=True to price it flagged CounterReset")
        figures = {name: _figure(getattr(u, name), f"{path}.{name}")
                   for name in ("service_s", "requests", "images", "image_pixels", "text_tokens")}
        checked.append((u, figures))
    return window.spend_usd, available, checked


def _largest_remainder(total_quanta: int, weights: Sequence[Fraction]) -> list[int]:
    """Integers proportional to ``weights`` (which sum to 1, or all 0) that sum to ``total_quanta``; ties to the
    earlier weight."""
    exact = [w * total_quanta for w in weights]
    floors = [math.floor(x) for x in exact]
    left = total_quanta - sum(floors)
    order = sorted(range(len(exact)), key=lambda i: (-(exact[i] - floors[i]), i))
    for i in order[:left]:
        floors[i] += 1
    return floors


def split_quantity(total: Decimal, weights: Sequence[Decimal]) -> list[Decimal]:
    """``total`` split in proportion to ``weights`` (an allocation's row ``replica_s``: the shares its ``usd`` was
    split in), by largest remainder at 1e-9 or ``total``'s own finer resolution, so the parts sum to ``total``
    exactly; all to the last weight (the idle row) when the weights are all 0, as :func:`allocate` does.

    Raises:
        ShowbackInputError: ``total`` NaN, infinite or negative.
    """
    total = _figure(total, "replica_hours")
    weight_sum = sum(weights, Decimal(0))
    if not weights:
        return []
    if weight_sum == 0:
        shares = [Fraction(0)] * (len(weights) - 1) + [Fraction(1)]
    else:
        shares = [Fraction(w) / Fraction(weight_sum) for w in weights]
    exponent = total.as_tuple().exponent
    quantum = Decimal(1).scaleb(min(exponent if isinstance(exponent, int) else 0, LEDGER_QUANTUM_USD.adjusted()))
    quanta = _largest_remainder(int(MONEY_CONTEXT.divide(total, quantum)), shares)
    return [MONEY_CONTEXT.multiply(q, quantum) for q in quanta]


def allocate(window: ServiceWindow, usage: Sequence[TenantUsage], *,
             accept_counter_resets: bool = False) -> ServiceShowback:
    """Split one service's spend over its (tenant, modality) rows by replica-seconds used, plus an idle row.

    Args:
        window: The ledger's spend (USD, 1e-9 resolution) and replica-seconds available over the window.
        usage: Per (tenant, modality) increases over the same window; each pair at most once. Empty: all idle.
        accept_counter_resets: Price rows whose counters reset inside the window, flagged (see the module
            docstring); False: refuse them.
    Returns:
        :class:`ServiceShowback`: request rows sorted by (tenant, modality), then the idle row (always present,
        possibly 0 USD); ``sum(row.usd) == window.spend_usd`` exactly.
    Raises:
        ShowbackInputError: NaN, infinite or negative figures, a pair given twice, spend finer than 1e-9 USD, or a
            counter reset when not accepted (the message names the field).
    """
    spend, available, checked = _validate(window, usage, accept_counter_resets)
    checked.sort(key=lambda c: (c[0].tenant, c[0].modality))
    used = sum((f["service_s"] for _, f in checked), Decimal(0))
    oversubscribed = used > available
    denominator = Fraction(max(used, available))
    idle_s = Decimal(0) if oversubscribed else available - used
    if denominator == 0:  # no replica ran and no request used one: what was spent (gateway pods) is idle
        weights = [Fraction(0)] * len(checked) + [Fraction(1)]
    else:
        weights = [Fraction(f["service_s"]) / denominator for _, f in checked] + [Fraction(idle_s) / denominator]
    quanta = _largest_remainder(int(spend / LEDGER_QUANTUM_USD), weights)
    rows = []
    for (u, f), q in zip(checked, quanta[:-1]):
        flags = tuple(name for name, on in ((COUNTER_RESET, u.counter_resets > 0), (OVERSUBSCRIBED, oversubscribed))
                      if on)
        rows.append(ShowbackRow(window.namespace, window.name, u.tenant, u.modality, REQUEST,
                                q * LEDGER_QUANTUM_USD, f["service_s"], f["requests"], f["images"],
                                f["image_pixels"], f["text_tokens"], flags))
    rows.append(ShowbackRow(window.namespace, window.name, None, None, IDLE, quanta[-1] * LEDGER_QUANTUM_USD, idle_s,
                            flags=(OVERSUBSCRIBED,) if oversubscribed else ()))
    partial = any(u.counter_resets for u, _ in checked)
    notes = []
    if oversubscribed:
        notes.append(f"{window.namespace}/{window.name}: requests used {used} replica-seconds of {available} run "
                     "(concurrent requests overlap); shares are of the used seconds and idle is 0")
    if denominator == 0 and spend > 0:
        notes.append(f"{window.namespace}/{window.name}: no replica ran in the window but {spend} USD was spent (the "
                     "pods the ledger charges beside the replicas: the request gateway's, an image encoder pool's): "
                     "all idle")
    if partial:
        notes.append(f"{window.namespace}/{window.name}: a gateway counter reset inside the window; rows flagged "
                     f"{COUNTER_RESET} are lower bounds")
    return ServiceShowback(window, tuple(rows), used, oversubscribed, partial, tuple(notes))


def aggregate(rows: Iterable[ShowbackRow], by: Sequence[str]) -> list[ShowbackRow]:
    """Sum rows that agree on the ``by`` dimensions (idle rows are summed apart from request rows).

    Args:
        rows: Rows of one or more services (:attr:`ServiceShowback.rows`).
        by: Dimensions to keep, from :data:`GROUP_DIMENSIONS`; the others are None in the result.
    Returns:
        Summed rows, sorted request rows first by their keys, then idle rows; USD and counts add exactly.
    Raises:
        ShowbackInputError: An unknown or repeated dimension (field ``by``).
    """
    unknown = [d for d in by if d not in GROUP_DIMENSIONS]
    if unknown or len(set(by)) != len(by):
        raise ShowbackInputError("by", f"{','.join(by)!r}: give distinct names from {', '.join(GROUP_DIMENSIONS)}")
    groups: dict[tuple[str, tuple[str | None, str | None, str | None, str | None]], list[ShowbackRow]] = {}
    for r in rows:
        key = (r.namespace if "namespace" in by else None,
               r.inferenceservice if "inferenceservice" in by else None,
               r.tenant if "tenant" in by else None, r.modality if "modality" in by else None)
        groups.setdefault((r.kind, key), []).append(r)
    out = []
    for (kind, key), members in sorted(groups.items(), key=lambda kv: (kv[0][0] == IDLE,
                                                                        tuple(k or "" for k in kv[0][1]))):
        flags = tuple(sorted({f for m in members for f in m.flags}))
        namespace, inferenceservice, tenant, modality = key
        out.append(ShowbackRow(namespace, inferenceservice, tenant, modality, kind=kind,
                               usd=sum((m.usd for m in members), Decimal(0)),
                               replica_s=sum((m.replica_s for m in members), Decimal(0)),
                               requests=sum((m.requests for m in members), Decimal(0)),
                               images=sum((m.images for m in members), Decimal(0)),
                               image_pixels=sum((m.image_pixels for m in members), Decimal(0)),
                               text_tokens=sum((m.text_tokens for m in members), Decimal(0)),
                               flags=flags))
    return out


TOP_DRIVERS = 3
"""How many tenants (and modalities) an alert or ``cost diff`` names; the rest are summed as :data:`OTHER`."""
OTHER = "other"
"""The summed rest of :func:`spend_drivers` (the gateway's own ``other`` tenant, past its cardinality cap, is
summed there too)."""


@dataclass(frozen=True)
class SpendDrivers:
    """Who and what spent over a showback window: the top tenants and modalities of the request rows.

    Attributes:
        tenants, modalities: ``(name, usd)`` by USD descending (ties by name), at most ``TOP_DRIVERS`` named and
            then one :data:`OTHER` with the rest (only when there is a rest).
        idle_usd: The idle rows' USD (capacity no request used).
        spend_usd: All rows' USD (requests + idle): the percentages' base.
        unknown: ``namespace/name`` of services in scope without showback figures (not in the sums).
    """

    tenants: tuple[tuple[str, Decimal], ...]
    modalities: tuple[tuple[str, Decimal], ...]
    idle_usd: Decimal
    spend_usd: Decimal
    unknown: tuple[str, ...] = ()

    def _share(self, usd: Decimal) -> str:
        pct = (usd * 100 / self.spend_usd) if self.spend_usd > 0 else Decimal(0)
        return f"{display_usd(usd)} USD ({pct.quantize(Decimal(1), context=MONEY_CONTEXT):f} %)"

    def facts(self) -> tuple[tuple[str, str], ...]:
        """``("Top tenants", "acme 1.20 USD (60 %), ..., other ...; idle 0.40 USD (20 %)")`` and ``("Top
        modalities", ...)``; percentages of :attr:`spend_usd`; a last clause names services without figures."""
        tenants = ", ".join(f"{n} {self._share(u)}" for n, u in self.tenants) or "none"
        modalities = ", ".join(f"{n} {self._share(u)}" for n, u in self.modalities) or "none"
        unknown = (f"; not known for {', '.join(self.unknown[:TOP_DRIVERS])}"
                   + (f" and {len(self.unknown) - TOP_DRIVERS} more" if len(self.unknown) > TOP_DRIVERS else "")
                   if self.unknown else "")
        return (("Top tenants", f"{tenants}; idle {self._share(self.idle_usd)}{unknown}"),
                ("Top modalities", f"{modalities}{unknown}"))


def _top(usd_by: dict[str, Decimal], top: int) -> tuple[tuple[str, Decimal], ...]:
    ranked = sorted(((n, u) for n, u in usd_by.items() if n != OTHER), key=lambda nu: (-nu[1], nu[0]))
    named = tuple(ranked[:top])
    rest = sum((u for _, u in ranked[top:]), usd_by.get(OTHER, Decimal(0)))
    return named + (((OTHER, rest),) if len(ranked) > top or OTHER in usd_by else ())


def spend_drivers(rows: Iterable[ShowbackRow], top: int = TOP_DRIVERS, unknown: Sequence[str] = ()
                  ) -> SpendDrivers | None:
    """The top ``top`` tenants and modalities behind the spend of ``rows`` (pure).

    Args:
        rows: Showback rows (:attr:`ServiceShowback.rows` of one or more services).
        top: How many to name; the rest summed as :data:`OTHER`.
        unknown: Services in scope that have no figures (named in :meth:`SpendDrivers.facts`).
    Returns:
        :class:`SpendDrivers`, or None when ``rows`` hold no request row: no tenant data, so nothing is said about
        tenants (never a guess).
    """
    rows = list(rows)
    requests = [r for r in rows if r.kind == REQUEST]
    if not requests:
        return None
    by_tenant: dict[str, Decimal] = {}
    by_modality: dict[str, Decimal] = {}
    for r in requests:
        by_tenant[str(r.tenant)] = by_tenant.get(str(r.tenant), Decimal(0)) + r.usd
        by_modality[str(r.modality)] = by_modality.get(str(r.modality), Decimal(0)) + r.usd
    idle = sum((r.usd for r in rows if r.kind == IDLE), Decimal(0))
    return SpendDrivers(_top(by_tenant, top), _top(by_modality, top), idle, sum((r.usd for r in rows), Decimal(0)),
                        tuple(unknown))


def drivers_of(services: Iterable[tuple[str, str]], windows: Mapping[tuple[str, str], ServiceWindow],
               usage: Mapping[tuple[str, str], Sequence[TenantUsage]], top: int = TOP_DRIVERS
               ) -> SpendDrivers | None:
    """:func:`spend_drivers` of the ``(namespace, name)`` services from showback's inputs (what
    ``modalscale.operator.showback.PrometheusShowback.read`` returns): each allocated (counter resets accepted, as
    the CLI does); a service without a window or whose figures are refused is ``unknown``. None: no request row."""
    rows: list[ShowbackRow] = []
    unknown: list[str] = []
    for key in sorted(set(services)):
        window = windows.get(key)
        if window is None:
            unknown.append(f"{key[0]}/{key[1]}")
            continue
        try:
            rows += allocate(window, usage.get(key, ()), accept_counter_resets=True).rows
        except ShowbackInputError:
            unknown.append(f"{key[0]}/{key[1]}")
    return spend_drivers(rows, top, unknown)


__all__ = [
    "ACCOUNTING_METRICS", "CODE_LABEL", "COUNTER_RESET", "GROUP_DIMENSIONS", "IDLE", "IMAGES_METRIC",
    "IMAGE_PIXELS_METRIC", "MODALITY_LABEL", "NO_MODALITY", "OVERSUBSCRIBED", "PRICED_REQUESTS_MATCHER",
    "REFUSED_CODES", "REQUEST",
    "REQUESTS_METRIC", "SERVICE_LABELS", "SERVICE_SECONDS_METRIC", "ServiceShowback", "ServiceWindow",
    "ShowbackInputError", "ShowbackRow", "SpendDrivers", "OTHER", "TENANT_LABEL", "TEXT_TOKENS_METRIC", "TOP_DRIVERS",
    "TenantUsage", "aggregate", "allocate", "drivers_of", "spend_drivers",
]
