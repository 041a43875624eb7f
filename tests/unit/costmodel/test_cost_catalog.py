"""Pricing catalog and quantity parsing: prices computed by hand from the catalog figures."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from modalscale.api.quantities import InvalidQuantity, parse_cpu_cores, parse_memory_bytes
from modalscale.costmodel.catalog import (
    CatalogError,
    PricingTier,
    ReplicaResources,
    UnknownPrice,
    default_catalog,
    load_catalog,
    price_replica,
)

GIB = 2**30
REQUIRED_GPUS = ("nvidia-t4", "nvidia-l4", "nvidia-a10g", "nvidia-a100-40gb", "nvidia-a100-80gb", "nvidia-h100-80gb")


@pytest.mark.parametrize(
    ("cpu", "memory", "gpus", "gpu_type", "tier", "expected"),
    [
        # 2 x 0.031611 + 8 x 0.004237 = 0.063222 + 0.033896
        ("2", "8Gi", 0, None, "OnDemand", "0.097118"),
        # 3.5 x 0.031611 + 8 x 0.004237 + 0.560040239 = 0.1106385 + 0.033896 + 0.560040239
        ("3500m", "8Gi", 1, "nvidia-l4", "OnDemand", "0.704574739"),
        # spot: 4 x 0.006655 + 16 x 0.000892 + 2 x 0.096 = 0.02662 + 0.014272 + 0.192
        ("4", "16Gi", 2, "nvidia-t4", "Spot", "0.232892"),
        # 8 x H100 alone: 8 x 9.796550569
        ("0", "0", 8, "nvidia-h100-80gb", "OnDemand", "78.372404552"),
        # half a GiB: 0.5 x 0.004237 = 0.0021185
        ("0", "512Mi", 0, None, "OnDemand", "0.0021185"),
    ],
    ids=["cpu-mem", "l4-on-demand", "2xt4-spot", "8xh100", "half-gib"],
)
def test_price_replica_matches_hand_computation(cpu, memory, gpus, gpu_type, tier, expected) -> None:
    resources = ReplicaResources.from_quantities(cpu, memory, gpus, gpu_type)
    assert price_replica(resources, tier) == Decimal(expected)


def test_zero_resources_cost_zero() -> None:
    assert price_replica(ReplicaResources(Decimal(0), 0), PricingTier.ON_DEMAND) == 0
    assert price_replica(ReplicaResources(Decimal(0), 0), PricingTier.SPOT) == 0


def test_price_is_additive_in_resources() -> None:
    cat = default_catalog()
    a = ReplicaResources.from_quantities("1", "4Gi")
    b = ReplicaResources.from_quantities("3", "12Gi", 1, "nvidia-a100-40gb")
    both = ReplicaResources(a.cpu_cores + b.cpu_cores, a.memory_bytes + b.memory_bytes, 1, "nvidia-a100-40gb")
    assert cat.price_replica(both, "OnDemand") == cat.price_replica(a, "OnDemand") + cat.price_replica(b, "OnDemand")


@pytest.mark.parametrize("alias", ["Tesla-T4", "NVIDIA-T4", "nvidia-tesla-t4", "NVIDIA-t4"])
def test_gpu_aliases_and_case_price_like_the_catalog_name(alias: str) -> None:
    canonical = ReplicaResources(Decimal(0), 0, 1, "nvidia-t4")
    assert price_replica(ReplicaResources(Decimal(0), 0, 1, alias), "OnDemand") == price_replica(canonical, "OnDemand")


def test_unknown_gpu_type_raises_and_says_how_to_fix() -> None:
    with pytest.raises(UnknownPrice) as info:
        price_replica(ReplicaResources.from_quantities("1", "1Gi", 1, "nvidia-b200"), "OnDemand")
    text = str(info.value)
    assert "'nvidia-b200'" in text
    assert "gpuHour.nvidia-b200.onDemand" in text
    assert "override" in text
    assert info.value.gpu_type == "nvidia-b200"


def test_missing_spot_figure_raises_instead_of_pricing_zero() -> None:
    with pytest.raises(UnknownPrice, match="nvidia-a10g has no Spot figure"):
        price_replica(ReplicaResources.from_quantities("1", "1Gi", 1, "NVIDIA-A10G"), "Spot")


@pytest.mark.parametrize("resource", ["cpuCoreHour", "memoryGiBHour"])
def test_a_missing_cpu_or_memory_spot_figure_names_that_figure_not_a_gpu_type(resource: str) -> None:
    """An override that removes a CPU or memory Spot figure (``spot: null``) priced every Spot replica unknown, as
    it should, but the message (the GovernanceBlind alert's and the condition's) called it the GPU type
    ``'cpu/memory'`` and said to change ``resources.gpu.type`` or add ``gpuHour.cpu/memory.spot``: the wrong field and
    a fix that fixes nothing, for a CPU-only service too."""
    catalog = load_catalog({resource: {"spot": None}})
    with pytest.raises(UnknownPrice) as info:
        catalog.price_replica(ReplicaResources.from_quantities("1", "1Gi"), "Spot")
    text = str(info.value)
    assert f"{resource}.spot" in text, text
    assert "gpuHour" not in text and "resources.gpu.type" not in text and "GPU type" not in text, text


def test_gpu_count_without_type_raises() -> None:
    with pytest.raises(UnknownPrice, match="no GPU type"):
        price_replica(ReplicaResources(Decimal(1), GIB, 1, None), "OnDemand")


def test_catalog_has_the_required_gpus_each_with_source_and_date() -> None:
    cat = default_catalog()
    assert set(REQUIRED_GPUS) <= set(cat.gpu_hour)
    figures = [cat.cpu_core_hour.on_demand, cat.memory_gib_hour.on_demand]
    for price in (cat.cpu_core_hour, cat.memory_gib_hour, *cat.gpu_hour.values()):
        figures += [f for f in (price.on_demand, price.spot) if f is not None]
    for figure in figures:
        assert figure.source.strip() and figure.as_of.year >= 2024
        assert figure.usd_per_unit_hour > 0


def test_opencost_cpu_and_memory_defaults() -> None:
    cat = default_catalog()
    assert cat.cpu_core_hour.on_demand.usd_per_unit_hour == Decimal("0.031611")
    assert cat.memory_gib_hour.on_demand.usd_per_unit_hour == Decimal("0.004237")


def test_spot_is_never_dearer_than_on_demand() -> None:
    cat = default_catalog()
    for price in (cat.cpu_core_hour, cat.memory_gib_hour, *cat.gpu_hour.values()):
        if price.spot is not None:
            assert price.spot.usd_per_unit_hour < price.on_demand.usd_per_unit_hour


def test_a10g_figure_is_the_documented_derivation_from_g5_xlarge() -> None:
    cat = default_catalog()
    cpu = cat.cpu_core_hour.on_demand.usd_per_unit_hour
    mem = cat.memory_gib_hour.on_demand.usd_per_unit_hour
    assert cat.gpu_hour["nvidia-a10g"].on_demand.usd_per_unit_hour == Decimal("1.006") - 4 * cpu - 16 * mem


def test_override_yaml_string_adds_a_gpu_and_keeps_defaults() -> None:
    cat = load_catalog("""
gpuHour:
  nvidia-b200:
    aliases: [NVIDIA-B200]
    onDemand: {usdPerUnitHour: "10.5", source: "our contract", asOf: 2026-11-01}
""")
    assert price_replica(ReplicaResources(Decimal(0), 0, 2, "NVIDIA-B200"), "OnDemand", cat) == Decimal("21.0")
    assert "nvidia-l4" in cat.gpu_hour


def test_override_file_replaces_a_figure(tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text('cpuCoreHour: {onDemand: {usdPerUnitHour: "0.05", source: "on-prem TCO", asOf: 2026-01-01}}\n')
    cat = load_catalog(path)
    assert price_replica(ReplicaResources(Decimal(2), 0), "OnDemand", cat) == Decimal("0.1")
    assert cat.cpu_core_hour.on_demand.source == "on-prem TCO"
    assert cat.cpu_core_hour.spot == default_catalog().cpu_core_hour.spot  # keys not overridden are kept


def test_overriding_a_figure_replaces_it_whole_so_no_stale_note_survives() -> None:
    cat = load_catalog('gpuHour: {nvidia-l4: {onDemand: {usdPerUnitHour: "0.5", source: "quote", asOf: 2026-10-01}}}')
    assert cat.gpu_hour["nvidia-l4"].on_demand.note == ""
    assert cat.gpu_hour["nvidia-l4"].aliases == default_catalog().gpu_hour["nvidia-l4"].aliases


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ('gpuHour: {x: {onDemand: {usdPerUnitHour: 0.5, source: "abc", asOf: 2026-01-01}}}',
         "gpuHour.x.onDemand.usdPerUnitHour"),
        ('gpuHour: {x: {onDemand: {usdPerUnitHour: "0.5", asOf: 2026-01-01}}}', "gpuHour.x.onDemand.source"),
        ('gpuHour: {x: {onDemand: {usdPerUnitHour: "-1", source: "abc", asOf: 2026-01-01}}}',
         "gpuHour.x.onDemand.usdPerUnitHour"),
        ('gpuHour: {x: {aliases: [Tesla-T4], onDemand: {usdPerUnitHour: "1", source: "abc", asOf: 2026-01-01}}}',
         "names both"),
        ("currency: EUR", "currency"),
        ("gpuHour: [", "Invalid pricing catalog"),
    ],
    ids=["float-price", "no-source", "negative", "alias-clash", "currency", "bad-yaml"],
)
def test_invalid_override_fails_loudly_naming_the_field(override: str, fragment: str) -> None:
    with pytest.raises(CatalogError) as info:
        load_catalog(override)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("value", "cores"),
    [("3500m", "3.5"), ("4", "4"), (4, "4"), ("1.5", "1.5"), ("250m", "0.25"), ("2e3", "2000"), ("0.1", "0.1")],
)
def test_parse_cpu_cores(value, cores) -> None:
    assert parse_cpu_cores(value) == Decimal(cores)


@pytest.mark.parametrize(
    ("value", "n_bytes"),
    [("8Gi", 8 * GIB), ("512Mi", 512 * 2**20), ("1Ki", 1024), ("500M", 500_000_000), (1000, 1000),
     ("1.5Gi", 3 * GIB // 2), ("1k", 1000), ("100m", 1)],
)
def test_parse_memory_bytes(value, n_bytes) -> None:
    assert parse_memory_bytes(value) == n_bytes


@pytest.mark.parametrize("value", ["abc", "-1", "1Gb", "", 1.5, "1.2.3"])
def test_invalid_quantities_are_rejected_with_the_value_named(value) -> None:
    with pytest.raises(InvalidQuantity) as info:
        parse_cpu_cores(value)
    assert "resources.cpu" in str(info.value)


def test_price_uses_the_greater_of_request_and_usage() -> None:
    request = ReplicaResources.from_quantities("2", "8Gi", 1, "nvidia-l4")
    usage = ReplicaResources.from_quantities("3", "4Gi")
    effective = request.at_least(usage)
    assert (effective.cpu_cores, effective.memory_bytes, effective.gpu_count) == (Decimal(3), 8 * GIB, 1)
    assert request.at_least(None) == request
