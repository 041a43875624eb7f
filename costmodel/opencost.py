"""OpenCost as a price source: node and GPU hourly prices from OpenCost's ``/assets`` answer, the catalog as fallback.

Why a module: with ``MODALSCALE_OPENCOST_URL`` set, a service should be priced at what the cluster's own nodes cost
(OpenCost reads them from the cloud provider's billing or its custom pricing), and fall back to the pricing
catalog whenever that answer is missing, unreadable or incomplete -- never to $0, never to a crash. Everything
here is pure: the operator reads the HTTP answer (``modalscale.operator.opencost_source``) and hands the status
code and body in.

The endpoint (OpenCost API docs, https://www.opencost.io/docs/integrations/api, "Assets API"): "The Assets API
retrieves backing cost data broken down by individual assets in your cluster." ``GET /assets`` with the one
documented, required query parameter ``window`` ("Duration of time over which to query. Accepts: words like
``today`` ...; durations like ``30m``, ``12h``, ``7d``; RFC3339 date pairs ...; Unix timestamps ..."). The answer
(https://www.opencost.io/docs/integrations/api-examples, "/assets Example") is
``{"code": 200, "status": "success", "data": {<asset key>: <asset>}}``; an asset of ``"type": "Node"`` carries
``labels`` (Kubernetes label names sanitized, ``nvidia.com/gpu.product`` -> ``nvidia_com_gpu_product``),
``cpuCoreHours``, ``ramByteHours``, ``GPUHours``, ``gpuCount``, ``preemptible`` (0 or 1), ``discount`` (0..1),
``cpuCost``, ``ramCost``, ``gpuCost`` (USD over the window) and ``totalCost``. OpenCost computes
``totalCost = (cpuCost + ramCost) x (1 - discount) + gpuCost + adjustment`` (``Node.TotalCost`` in
github.com/opencost/opencost ``core/pkg/opencost/asset.go``) and writes NaN and Inf as ``null``
(``core/pkg/opencost/json.go``).

Hourly prices (per unit, over the nodes of one tier; spot = ``preemptible`` nodes):

* ``cpuCoreHour = sum(cpuCost x (1 - discount)) / sum(cpuCoreHours)`` USD per core-hour,
* ``memoryGiBHour = sum(ramCost x (1 - discount)) / sum(ramByteHours / 2**30)`` USD per GiB-hour,
* ``gpuHour[type] = sum(gpuCost) / sum(GPUHours)`` over the nodes whose GPU label names ``type`` (the same
  ``nvidia.com/gpu.product`` label the operator's node selector uses; GKE's accelerator label too),

i.e. what one unit-hour cost in this cluster over the window. The node-level ``adjustment`` (cloud bill
reconciliation) is not a unit price and is left out. **A zero, null or missing cost is unknown, never a price**:
OpenCost reports a node it cannot price at cost 0 (opencost/opencost#73, fixed for some providers by PR #3194), so
such a node's cost and its unit-hours both stay out of that figure's sums (averaging them in would price CPU at
half with one priced and one unpriced node, and under-count spend); the figure is the average over the nodes that
are priced, and when none is, it comes from the catalog. The nodes left out are named in the ``Priced``
condition's message. These figures replace the catalog's in an effective :class:`Catalog`, so the
InferenceService status and the BudgetPolicy ledger price with the same numbers.
"""

from __future__ import annotations

import datetime as dt
import enum
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from modalscale.api import conditions as C
from modalscale.api.quantities import GIB_BYTES
from modalscale.costmodel.catalog import MAX_USD_PER_UNIT_HOUR, Catalog, PricingTier, ReplicaResources
from modalscale.costmodel.money import MONEY_CONTEXT, display_usd, quantize_ledger_usd

ASSETS_PATH = "/assets"
"""OpenCost's Assets API path."""
ASSETS_WINDOW = "2h"
"""The ``window`` the operator asks for (a documented duration form). OpenCost reads ``<n>h`` as the current hour,
rounded forward, plus the ``n - 1`` before it, so ``1h`` holds only the minutes since the hour began (none at
``:00``, and rates rounded from six-decimal costs over a few minutes); ``2h`` always holds the last complete hour."""
GPU_LABEL_KEYS = ("nvidia_com_gpu_product", "nvidia.com/gpu.product", "cloud_google_com_gke_accelerator",
                  "cloud.google.com/gke-accelerator")
"""Node labels naming the GPU type, as OpenCost writes them (sanitized) and as Kubernetes does."""
_NODE_AMOUNTS = ("cpuCoreHours", "ramByteHours", "GPUHours")
_NODE_COSTS = ("cpuCost", "ramCost", "gpuCost")


class PriceSource(str, enum.Enum):
    """Which source priced a service: the reason of the InferenceService's ``Priced`` condition (values from
    :mod:`modalscale.api.conditions`)."""

    OPENCOST = C.PRICED_BY_OPENCOST
    """Every figure came from OpenCost's ``/assets`` answer."""
    CATALOG = C.PRICED_BY_CATALOG
    """No OpenCost is configured: the pricing catalog."""
    CATALOG_FALLBACK = C.CATALOG_FALLBACK
    """OpenCost is configured, but its answer was unusable or had no price for some figure: the catalog's."""


class OpenCostAnswerError(ValueError):
    """OpenCost's ``/assets`` answer cannot be used; the message names the node and field and what was wrong."""


@dataclass(frozen=True)
class NodeCost:
    """One ``Node`` asset of the answer, as numbers (USD and unit-hours over the window).

    Attributes:
        name: ``properties.name`` (or the asset key).
        tier: ``Spot`` when OpenCost marks the node ``preemptible``, else ``OnDemand``.
        gpu_type: The GPU label's value, or None.
        cpu_usd / ram_usd: CPU and RAM cost after the node's ``discount``; None when unknown (OpenCost wrote 0,
            null or nothing: it could not price the node).
        gpu_usd: GPU cost (OpenCost does not discount GPUs); None when unknown, as above.
    """

    name: str
    tier: PricingTier
    gpu_type: str | None
    cpu_usd: Decimal | None
    cpu_core_hours: Decimal
    ram_usd: Decimal | None
    ram_gib_hours: Decimal
    gpu_usd: Decimal | None
    gpu_hours: Decimal


def _cost(node: str, asset: Mapping[str, Any], key: str) -> Decimal | None:
    """A cost field; None (unknown) when OpenCost wrote 0, null or nothing: it had no price for the node."""
    if asset.get(key) is None:
        return None
    value = _number(node, asset, key)
    return value if value > 0 else None


def _number(node: str, asset: Mapping[str, Any], key: str, default: float | None = None) -> Decimal:
    if key not in asset and default is not None:
        return Decimal(str(default))
    if key not in asset:
        raise OpenCostAnswerError(f"node {node!r}: field {key!r} is missing")
    value = asset[key]
    if value is None:
        raise OpenCostAnswerError(f"node {node!r}: {key} is null (OpenCost writes NaN and Inf as null)")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise OpenCostAnswerError(f"node {node!r}: {key} is {value!r}, not a number")
    if math.isnan(value) or math.isinf(value):
        raise OpenCostAnswerError(f"node {node!r}: {key} is {value}, not a finite number")
    if value < 0:
        raise OpenCostAnswerError(f"node {node!r}: {key} is negative ({value}); a cost or an amount is >= 0")
    return Decimal(repr(float(value)))


def parse_assets_answer(status_code: int, body: bytes | str) -> list[NodeCost]:
    """The ``Node`` assets of one ``/assets`` answer.

    Args:
        status_code: HTTP status of the answer.
        body: Its body (JSON, see the module docstring for the shape).
    Returns:
        One :class:`NodeCost` per ``Node`` asset (other asset types -- disks, load balancers -- are skipped),
        sorted by name; empty when the window had no node. A cost that is 0, null or missing is None (unknown):
        OpenCost had no price for that node (module docstring).
    Raises:
        OpenCostAnswerError: Not HTTP 200, not JSON, not the documented envelope (``code`` 200, ``data`` an
            object), or a node with a missing or null amount (unit-hours), a NaN, infinite, negative or
            non-numeric cost or amount, a ``discount``/``preemptible`` outside [0, 1], or a cost over zero
            unit-hours. One malformed node refuses the whole answer: a partial answer could price a GPU type from
            the wrong nodes.
    """
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body
    if status_code != 200:
        raise OpenCostAnswerError(f"HTTP {status_code}: {text.strip()[:200]!r}")
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise OpenCostAnswerError(f"the answer is not JSON ({exc}): {text.strip()[:120]!r}") from None
    if not isinstance(doc, dict):
        raise OpenCostAnswerError(f"the answer is a JSON {type(doc).__name__}, not the {{code, status, data}} object")
    if doc.get("code") != 200 or doc.get("status", "success") != "success":
        raise OpenCostAnswerError(f"the answer says code={doc.get('code')!r} status={doc.get('status')!r}: "
                                  f"{str(doc.get('message', ''))[:200]!r}")
    data = doc.get("data")
    if not isinstance(data, dict):
        raise OpenCostAnswerError(f"'data' is {type(data).__name__}, not an object of assets by key")
    nodes = []
    for key, asset in data.items():
        if not isinstance(asset, dict):
            raise OpenCostAnswerError(f"asset {key!r} is {type(asset).__name__}, not an object")
        if asset.get("type") != "Node":
            continue
        raw_props = asset.get("properties")
        props: dict[str, Any] = raw_props if isinstance(raw_props, dict) else {}
        name = str(props.get("name") or key)
        costs = {k: _cost(name, asset, k) for k in _NODE_COSTS}
        nums = {k: _number(name, asset, k) for k in _NODE_AMOUNTS}
        discount = _number(name, asset, "discount", 0.0)
        preemptible = _number(name, asset, "preemptible", 0.0)
        for label, value in (("discount", discount), ("preemptible", preemptible)):
            if value > 1:
                raise OpenCostAnswerError(f"node {name!r}: {label} is {value}, outside [0, 1]")
        for cost, amount in (("cpuCost", "cpuCoreHours"), ("ramCost", "ramByteHours"), ("gpuCost", "GPUHours")):
            if costs[cost] is not None and nums[amount] == 0:
                raise OpenCostAnswerError(f"node {name!r}: {cost} is {costs[cost]} USD over 0 {amount}")
        raw_labels = asset.get("labels")
        labels: dict[str, Any] = raw_labels if isinstance(raw_labels, dict) else {}
        gpu_type = next((str(labels[k]) for k in GPU_LABEL_KEYS if labels.get(k)), None)
        ctx = MONEY_CONTEXT
        kept = ctx.subtract(Decimal(1), discount)

        def discounted(usd: Decimal | None) -> Decimal | None:
            after = ctx.multiply(usd, kept) if usd is not None else None
            return after if after else None  # a 100 % discount leaves no unit price either

        nodes.append(NodeCost(
            name=name, tier=PricingTier.SPOT if preemptible >= Decimal("0.5") else PricingTier.ON_DEMAND,
            gpu_type=gpu_type,
            cpu_usd=discounted(costs["cpuCost"]), cpu_core_hours=nums["cpuCoreHours"],
            ram_usd=discounted(costs["ramCost"]),
            ram_gib_hours=ctx.divide(nums["ramByteHours"], Decimal(GIB_BYTES)),
            gpu_usd=costs["gpuCost"], gpu_hours=nums["GPUHours"]))
    return sorted(nodes, key=lambda n: n.name)


def _tier_key(tier: PricingTier) -> str:
    return "onDemand" if tier is PricingTier.ON_DEMAND else "spot"


def figure_key(resource: str, tier: PricingTier, gpu_name: str | None = None) -> str:
    """Name of one catalog figure, e.g. ``cpuCoreHour.onDemand`` or ``gpuHour.nvidia-l4.spot``."""
    return f"{resource}.{gpu_name}.{_tier_key(tier)}" if gpu_name else f"{resource}.{_tier_key(tier)}"


@dataclass(frozen=True)
class OpenCostPrices:
    """The catalog with OpenCost's figures in place of its own, and which figures those are.

    Attributes:
        catalog: The effective catalog (every figure OpenCost priced replaced; GPU types only OpenCost knows
            added with their on-demand figure).
        from_opencost: :func:`figure_key` of each replaced figure, with its USD per unit-hour.
        nodes: Number of ``Node`` assets in the answer.
        unpriced: :func:`figure_key` -> names of the nodes with unit-hours of it but no cost (0, null or missing),
            left out of its average; only figures with such nodes appear.
    """

    catalog: Catalog
    from_opencost: Mapping[str, Decimal]
    nodes: int
    unpriced: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


def prices_from_nodes(nodes: Sequence[NodeCost], catalog: Catalog, as_of: dt.date) -> OpenCostPrices:
    """Per-unit hourly prices of ``nodes`` (formulas in the module docstring), laid over ``catalog``.

    Args:
        nodes: From :func:`parse_assets_answer`.
        catalog: The operator's catalog (packaged + override); figures OpenCost has no non-zero price for stay.
        as_of: Date written in each replaced figure's ``asOf``.
    Returns:
        :class:`OpenCostPrices`; rates quantized to 1e-9 USD. A node whose cost of a figure is unknown (None) is
        left out of that figure's cost and unit-hours alike, and named in ``unpriced``.
    """
    ctx = MONEY_CONTEXT
    Figure = tuple[str, str | None, PricingTier]  # (resource, GPU type name or None, tier)
    sums: dict[Figure, list[Decimal]] = {}
    unpriced: dict[Figure, list[str]] = {}

    def add(key: Figure, node: str, usd: Decimal | None, hours: Decimal) -> None:
        if hours <= 0:
            return
        if usd is None:  # unknown for this node, never a price of 0 (module docstring)
            unpriced.setdefault(key, []).append(node)
            return
        total = sums.setdefault(key, [Decimal(0), Decimal(0)])
        total[0], total[1] = ctx.add(total[0], usd), ctx.add(total[1], hours)

    gpu_names: dict[str, str] = {}
    for n in nodes:
        add(("cpuCoreHour", None, n.tier), n.name, n.cpu_usd, n.cpu_core_hours)
        add(("memoryGiBHour", None, n.tier), n.name, n.ram_usd, n.ram_gib_hours)
        if n.gpu_type:
            name = catalog.gpu_type_name(n.gpu_type) or gpu_names.setdefault(n.gpu_type.lower(), n.gpu_type)
            add(("gpuHour", name, n.tier), n.name, n.gpu_usd, n.gpu_hours)
    unit = {k: ctx.divide(usd, hours) for k, (usd, hours) in sums.items()}
    dear = sorted(f"{figure_key(resource, tier, gpu)} {rate:.6g}" for (resource, gpu, tier), rate in unit.items()
                  if rate > MAX_USD_PER_UNIT_HOUR)
    if dear:  # a slip in OpenCost's figures (a cost over a sliver of unit-hours): never a price to charge
        raise OpenCostAnswerError(f"per-unit price above {MAX_USD_PER_UNIT_HOUR} USD per unit-hour, the catalog's "
                                  f"bound: {', '.join(dear)}")
    rates = {k: quantize_ledger_usd(rate) for k, rate in unit.items()}
    rates = {k: v for k, v in rates.items() if v > 0}  # rounded to 0: no usable price, keep the catalog's.
    data = catalog.model_dump(by_alias=True, mode="python")
    source = f"OpenCost {ASSETS_PATH} window={ASSETS_WINDOW} ({len(nodes)} node(s)), per-unit average"
    used: dict[str, Decimal] = {}
    # On-demand first: a GPU type only OpenCost knows enters the catalog with its on-demand figure, and may then
    # take a spot one (a type seen only on spot nodes stays unknown: the catalog needs an on-demand figure).
    for (resource, gpu, tier), rate in sorted(rates.items(), key=lambda kv: (kv[0][2] is PricingTier.SPOT,
                                                                           kv[0][0], kv[0][1] or "")):
        figure = {"usdPerUnitHour": rate, "source": source, "asOf": as_of}
        if gpu is None:
            data[resource][_tier_key(tier)] = figure
        elif gpu in data["gpuHour"]:
            data["gpuHour"][gpu][_tier_key(tier)] = figure
        elif tier is PricingTier.ON_DEMAND:
            data["gpuHour"][gpu] = {"onDemand": figure}
        else:
            continue
        used[figure_key(resource, tier, gpu)] = rate
    left_out = {figure_key(resource, tier, gpu): tuple(sorted(names))
                for (resource, gpu, tier), names in unpriced.items()}
    return OpenCostPrices(Catalog.model_validate(data), used, len(nodes), left_out)


@dataclass(frozen=True)
class OpenCostObservation:
    """What the operator last learned from OpenCost.

    Attributes:
        prices: The usable answer's prices, or None when the last read failed.
        problem: Why the last read is not usable ('' when it is).
        since: When the current run of usable (or of unusable) reads began (timezone-aware UTC); it moves only
            when usability flips, so a steady state rewrites no condition.
        checked_at: When the last read was made.
    """

    prices: OpenCostPrices | None
    problem: str
    since: dt.datetime
    checked_at: dt.datetime

    @property
    def usable(self) -> bool:
        return self.prices is not None


def observe_answer(previous: OpenCostObservation | None, catalog: Catalog, now: dt.datetime, *,
                   status_code: int | None = None, body: bytes | str = b"", error: str = "") -> OpenCostObservation:
    """Turn one read of ``/assets`` into the next observation.

    Args:
        previous: The observation before this read (None at start-up).
        catalog: The operator's catalog, overlaid with OpenCost's figures.
        now: Time of the read, timezone-aware UTC.
        status_code / body: The HTTP answer; ``error``: the transport failure instead (connection refused,
            timeout), e.g. ``"ConnectError: [Errno 111] Connection refused"``.
    Returns:
        The new observation; ``since`` carried over from ``previous`` when usability did not flip.
    """
    prices: OpenCostPrices | None = None
    problem = ""
    if error or status_code is None:
        problem = f"OpenCost unreachable ({error or 'no answer'})"
    else:
        try:
            prices = prices_from_nodes(parse_assets_answer(status_code, body), catalog, now.date())
        except OpenCostAnswerError as exc:
            problem = f"OpenCost answer refused: {exc}"
    usable = prices is not None
    since = previous.since if previous is not None and previous.usable == usable else now
    return OpenCostObservation(prices, problem, since, now)


@dataclass(frozen=True)
class PricedReplica:
    """The price of one replica and where it came from (the ``Priced`` condition's reason and message)."""

    usd_per_hour: Decimal
    source: PriceSource
    message: str


def _stamp(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _figures_used(resources: ReplicaResources, tier: PricingTier, catalog: Catalog) -> list[str]:
    used = []
    if resources.cpu_cores > 0:
        used.append(figure_key("cpuCoreHour", tier))
    if resources.memory_bytes > 0:
        used.append(figure_key("memoryGiBHour", tier))
    if resources.gpu_count > 0 and resources.gpu_type:
        used.append(figure_key("gpuHour", tier, catalog.gpu_type_name(resources.gpu_type) or resources.gpu_type))
    return used


def resolve_replica_price(resources: ReplicaResources, tier: PricingTier | str, catalog: Catalog,
                          opencost: OpenCostObservation | None) -> PricedReplica:
    """Price one replica from OpenCost where it has the figures, from the catalog otherwise.

    Args:
        resources: One replica's CPU, memory and GPUs (see :class:`ReplicaResources`).
        tier: ``OnDemand`` or ``Spot``.
        catalog: The operator's catalog (packaged + override).
        opencost: The last OpenCost observation; None when no OpenCost is configured.
    Returns:
        USD per replica-hour (1e-9 USD resolution) with its :class:`PriceSource` and a message that names the
        source, since when, and for ``CatalogFallback`` why (unreachable, refused answer, or which figures
        OpenCost had no price for).
    Raises:
        UnknownPrice: Neither OpenCost nor the catalog has a price for the GPU type (or tier); never priced 0.
        ValueError: ``tier`` is not a known tier.
    """
    tier = PricingTier(tier)
    if opencost is None:
        usd = catalog.price_replica(resources, tier)
        return PricedReplica(usd, PriceSource.CATALOG,
                             f"Priced from the pricing catalog: {display_usd(usd)} USD "
                             f"per replica-hour")
    if opencost.prices is None:
        usd = catalog.price_replica(resources, tier)
        return PricedReplica(usd, PriceSource.CATALOG_FALLBACK,
                             f"{opencost.problem} (since {_stamp(opencost.since)}); priced from the pricing catalog: "
                             f"{display_usd(usd)} USD per replica-hour")
    effective = opencost.prices.catalog
    usd = effective.price_replica(resources, tier)
    used = _figures_used(resources, tier, effective)
    missing = [k for k in used if k not in opencost.prices.from_opencost]
    shown = f"{display_usd(usd)} USD per replica-hour"
    left_out = sorted({n for k in used if k in opencost.prices.from_opencost
                       for n in opencost.prices.unpriced.get(k, ())})
    unpriced = (f"; {len(left_out)} node(s) without an OpenCost price left out ({', '.join(left_out[:5])}"
                f"{', ...' if len(left_out) > 5 else ''})" if left_out else "")
    if not missing:
        # 4 significant digits: OpenCost writes costs with 6 decimals, so the rates' further digits move with the
        # window's length at each read; the message (and so the condition) stays the same while prices do.
        rates = ", ".join(f"{k} {float(opencost.prices.from_opencost[k]):.4g}" for k in used)
        return PricedReplica(usd, PriceSource.OPENCOST,
                             f"Priced from OpenCost {ASSETS_PATH} since {_stamp(opencost.since)}: {shown} "
                             f"({rates or 'no resources'} USD per unit-hour{unpriced})")
    return PricedReplica(usd, PriceSource.CATALOG_FALLBACK,
                         f"OpenCost {ASSETS_PATH} has no non-zero price for {', '.join(missing)} "
                         f"({opencost.prices.nodes} node(s) in window={ASSETS_WINDOW}, since "
                         f"{_stamp(opencost.since)}); those from the pricing catalog: {shown}")


__all__ = [
    "ASSETS_PATH", "ASSETS_WINDOW", "GPU_LABEL_KEYS", "NodeCost", "OpenCostAnswerError", "OpenCostObservation",
    "OpenCostPrices", "PriceSource", "PricedReplica", "figure_key", "observe_answer", "parse_assets_answer",
    "prices_from_nodes", "resolve_replica_price",
]
