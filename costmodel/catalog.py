"""Pricing catalog: what one replica of a service costs per hour, from list prices with their sources.

Why a module: the ledger and the budget need one price per replica-hour, and a budget that silently prices
an unknown GPU at 0 would never enforce. The catalog is validated when loaded (bad config crashes the pod),
can be overridden from a YAML string or file (Helm values / ConfigMap), and refuses to price what it does not
know (:class:`UnknownPrice`).

Formula (the OpenCost allocation model, https://github.com/opencost/opencost/blob/develop/spec/opencost-specv01.md):
``usd_per_hour = cpu_cores x cpuCoreHour + memory_bytes / 2**30 x memoryGiBHour + gpu_count x gpuHour[gpu_type]``
at the replica's tier (OnDemand or Spot). The figures and their sources are in ``catalog.yaml``.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from modalscale.api.quantities import GIB_BYTES, parse_cpu_cores, parse_memory_bytes
from modalscale.costmodel.money import MONEY_CONTEXT, quantize_ledger_usd

DEFAULT_CATALOG_PATH = Path(__file__).with_name("catalog.yaml")
"""The packaged default catalog."""


class PricingTier(str, enum.Enum):
    """Tier of a replica (``spec.pricing.tier`` of an InferenceService)."""

    ON_DEMAND = "OnDemand"
    SPOT = "Spot"


class CatalogError(ValueError):
    """The catalog (default or override) is invalid; the message names the field. Raised at load time."""


class UnknownPrice(LookupError):
    """The catalog has no price for a resource; never priced as 0.

    Attributes:
        gpu_type: The GPU type as written in the service spec ("" when the missing figure is not a GPU's).
        tier: The tier that was asked for.
    """

    def __init__(self, gpu_type: str, tier: PricingTier, known: list[str], detail: str = "",
                 catalog_name: str | None = None, *, figures: tuple[str, ...] = ()) -> None:
        self.gpu_type = gpu_type
        self.tier = tier
        if figures:  # a CPU or memory figure: no GPU type is at fault, and none would fix it
            names = " and ".join(figures)
            super().__init__(f"The pricing catalog has no {tier.value} price for {names}. Fix: add {names} "
                             f"(usdPerUnitHour, source, asOf) to the catalog override (Helm value / ConfigMap).")
            return
        what = f"no {tier.value} price for GPU type {gpu_type!r}" + (f" ({detail})" if detail else "")
        super().__init__(
            f"The pricing catalog has {what}. Known GPU types: {', '.join(known)}. Fix: set "
            f"resources.gpu.type to a known type or alias, or add "
            f"gpuHour.{catalog_name or gpu_type or '<type>'}.{_tier_key(tier)} "
            f"(usdPerUnitHour, source, asOf) to the catalog override (Helm value / ConfigMap)."
        )


def _tier_key(tier: PricingTier) -> str:
    return "onDemand" if tier is PricingTier.ON_DEMAND else "spot"


MAX_USD_PER_UNIT_HOUR = Decimal(10_000)
"""Most a catalog figure may be, USD per unit-hour: about 100x the dearest published GPU-hour (an 8-GPU H100 node
is about 100 USD an hour on demand in 2026). A larger one is a slip (cents for dollars, an extra exponent): it was
accepted, and ``1e25`` then failed the ledger's arithmetic with an unnamed ``decimal.InvalidOperation``."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class PriceFigure(_Model):
    """One published figure: USD per unit-hour with where it came from."""

    usd_per_unit_hour: Decimal = Field(alias="usdPerUnitHour", ge=0, le=MAX_USD_PER_UNIT_HOUR)
    """USD per unit (core, GiB or GPU) per hour; a decimal string in YAML, at most :data:`MAX_USD_PER_UNIT_HOUR`."""
    source: str = Field(min_length=3)
    """Who published the figure and where (no figure without a source)."""
    as_of: date = Field(alias="asOf")
    """Date the source states the figure (or the retrieval date when the source is undated)."""
    note: str = ""
    """Derivations and caveats."""

    @field_validator("usd_per_unit_hour", mode="before")
    @classmethod
    def _no_float(cls, value: object) -> object:
        if isinstance(value, float):
            raise ValueError("write prices as strings (\"0.35\"); floats cannot hold money exactly")
        return value


class TieredPrice(_Model):
    """Prices of one resource by tier; ``spot`` may be absent (then Spot raises UnknownPrice)."""

    on_demand: PriceFigure = Field(alias="onDemand")
    spot: PriceFigure | None = None

    def figure(self, tier: PricingTier) -> PriceFigure | None:
        """The figure for ``tier`` or None."""
        return self.on_demand if tier is PricingTier.ON_DEMAND else self.spot


class GpuPrice(TieredPrice):
    """Per-GPU prices with the other names the same GPU goes by (node labels, GKE accelerator names)."""

    aliases: tuple[str, ...] = ()
    """E.g. the ``nvidia.com/gpu.product`` label value ``NVIDIA-A100-SXM4-40GB``; matched case-insensitively."""


class Catalog(_Model):
    """The validated pricing catalog (see ``catalog.yaml`` for the shape)."""

    currency: Literal["USD"]
    cpu_core_hour: TieredPrice = Field(alias="cpuCoreHour")
    memory_gib_hour: TieredPrice = Field(alias="memoryGiBHour")
    gpu_hour: dict[str, GpuPrice] = Field(alias="gpuHour", default_factory=dict)

    @model_validator(mode="after")
    def _names_unique(self) -> "Catalog":
        seen: dict[str, str] = {}
        for name, price in self.gpu_hour.items():
            for label in (name, *price.aliases):
                key = label.lower()
                if key in seen and seen[key] != name:
                    raise ValueError(f"gpuHour: {label!r} names both {seen[key]!r} and {name!r}")
                seen[key] = name
        return self

    @functools.cached_property
    def _gpu_index(self) -> dict[str, str]:
        return {label.lower(): name for name, p in self.gpu_hour.items() for label in (name, *p.aliases)}

    def gpu_type_name(self, gpu_type: str) -> str | None:
        """Canonical catalog name for a GPU type or alias (case-insensitive), or None when unknown."""
        return self._gpu_index.get(gpu_type.strip().lower())

    def price_replica(self, resources: "ReplicaResources", tier: PricingTier | str) -> Decimal:
        """USD per hour for one replica with ``resources`` at ``tier``.

        Args:
            resources: CPU cores, memory bytes, GPU count and type of one replica (the greater of request
                and usage, see :meth:`ReplicaResources.at_least`).
            tier: ``PricingTier`` or its CRD value ``"OnDemand"``/``"Spot"``.
        Returns:
            USD per replica-hour, quantized to 1e-9 USD (``money.LEDGER_QUANTUM_USD``).
        Raises:
            UnknownPrice: The GPU type (or its Spot price) is not in the catalog; CPU/memory Spot likewise.
            ValueError: ``tier`` is not a known tier.
        """
        tier = PricingTier(tier)
        known = sorted(self.gpu_hour)
        cpu = self.cpu_core_hour.figure(tier)
        mem = self.memory_gib_hour.figure(tier)
        if cpu is None or mem is None:
            raise UnknownPrice("", tier, known, figures=tuple(
                f"{name}.{_tier_key(tier)}" for name, f in (("cpuCoreHour", cpu), ("memoryGiBHour", mem)) if f is None))
        ctx = MONEY_CONTEXT
        total = ctx.add(
            ctx.multiply(resources.cpu_cores, cpu.usd_per_unit_hour),
            ctx.divide(ctx.multiply(Decimal(resources.memory_bytes), mem.usd_per_unit_hour), Decimal(GIB_BYTES)),
        )
        if resources.gpu_count > 0:
            if not resources.gpu_type:
                raise UnknownPrice("", tier, known, "gpu count > 0 but no GPU type given")
            name = self.gpu_type_name(resources.gpu_type)
            if name is None:
                raise UnknownPrice(resources.gpu_type, tier, known)
            figure = self.gpu_hour[name].figure(tier)
            if figure is None:
                raise UnknownPrice(resources.gpu_type, tier, known, f"{name} has no {tier.value} figure", name)
            total = ctx.add(total, ctx.multiply(Decimal(resources.gpu_count), figure.usd_per_unit_hour))
        return quantize_ledger_usd(total)


@dataclass(frozen=True)
class ReplicaResources:
    """Resources of one replica, as plain typed values.

    Attributes:
        cpu_cores: CPU cores (``Decimal("3.5")`` for ``3500m``); >= 0.
        memory_bytes: Memory in bytes; >= 0.
        gpu_count: GPUs per replica; >= 0.
        gpu_type: Catalog name or alias of the GPU type; required when ``gpu_count > 0``.
    """

    cpu_cores: Decimal
    memory_bytes: int
    gpu_count: int = 0
    gpu_type: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.cpu_cores, Decimal):
            raise TypeError(f"cpu_cores must be a Decimal, got {type(self.cpu_cores).__name__}")
        if self.cpu_cores < 0 or self.memory_bytes < 0 or self.gpu_count < 0:
            raise ValueError(f"resources must be non-negative: {self}")

    @classmethod
    def from_quantities(cls, cpu: str | int | Decimal = "0", memory: str | int | Decimal = 0,
                        gpu_count: int = 0, gpu_type: str | None = None) -> "ReplicaResources":
        """Build from Kubernetes quantities: ``from_quantities("3500m", "8Gi", 1, "nvidia-l4")``.

        Raises:
            InvalidQuantity: A quantity is malformed (the message names ``resources.cpu``/``resources.memory``).
        """
        return cls(parse_cpu_cores(cpu), parse_memory_bytes(memory), int(gpu_count), gpu_type)

    def at_least(self, usage: "ReplicaResources | None") -> "ReplicaResources":
        """The greater of this request and the observed ``usage`` per dimension (usage None = not known).

        GPU count and type stay those of the request (a GPU is allocated whole whether used or not).
        """
        if usage is None:
            return self
        return ReplicaResources(max(self.cpu_cores, usage.cpu_cores), max(self.memory_bytes, usage.memory_bytes),
                                self.gpu_count, self.gpu_type)


def _deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = dict(base)
    for key, value in override.items():
        # A price figure is replaced whole, so a stale source or note never survives an override.
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping) and "usdPerUnitHour" not in value:
            merged[key] = _deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _error_text(exc: ValidationError, origin: str) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        parts.append(f"{loc}: {err['msg']}")
    return f"Invalid pricing catalog ({origin}): " + "; ".join(parts)


def load_catalog(override: str | Path | Mapping[str, Any] | None = None, *,
                 base: Path = DEFAULT_CATALOG_PATH) -> Catalog:
    """Load the default catalog, deep-merged with an optional override, and validate it.

    Args:
        override: A YAML string, a path to a YAML file, or an already parsed mapping, with the shape of
            ``catalog.yaml``; any subset (e.g. one new GPU type) is merged onto the defaults, each price
            figure (``usdPerUnitHour``/``source``/``asOf``/``note``) being replaced whole.
        base: The default catalog file.
    Returns:
        The validated, immutable :class:`Catalog`.
    Raises:
        CatalogError: An override file that cannot be read, YAML that does not parse, or a field that does not
            validate (the message names it).
    """
    try:
        data = yaml.safe_load(base.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise CatalogError(f"Invalid pricing catalog ({base.name}): {exc}") from None
    origin = base.name
    if override is not None:
        if isinstance(override, Path):
            origin = str(override)
            try:
                text: Any = override.read_text(encoding="utf-8")
            except FileNotFoundError:
                raise CatalogError(f"{override}: no such file; give a pricing catalog override YAML (the shape of "
                                   "catalog.yaml)") from None
            except IsADirectoryError:
                raise CatalogError(f"{override} is a directory; give a pricing catalog override YAML file") from None
            except (OSError, UnicodeDecodeError) as exc:
                raise CatalogError(f"{override}: cannot be read as UTF-8 text ({exc}); give a pricing catalog "
                                   "override YAML") from None
        else:
            text = override
            origin = "override"
        if isinstance(text, str):
            try:
                text = yaml.safe_load(text) or {}
            except yaml.YAMLError as exc:
                raise CatalogError(f"Invalid pricing catalog ({origin}): {exc}") from None
        if not isinstance(text, Mapping):
            raise CatalogError(f"Invalid pricing catalog ({origin}): the top level must be a mapping")
        data = _deep_merge(data, text)
    try:
        return Catalog.model_validate(data)
    except ValidationError as exc:
        raise CatalogError(_error_text(exc, origin)) from None


@functools.cache
def default_catalog() -> Catalog:
    """The packaged catalog, parsed once (immutable)."""
    return load_catalog()


def price_replica(resources: ReplicaResources, tier: PricingTier | str, catalog: Catalog | None = None) -> Decimal:
    """USD per hour for one replica; shorthand for ``catalog.price_replica`` (default catalog when None).

    Raises:
        UnknownPrice: See :meth:`Catalog.price_replica`.
    """
    return (catalog or default_catalog()).price_replica(resources, tier)
