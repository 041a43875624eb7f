"""Kubernetes resource quantities for pricing: a re-export of :mod:`modalscale.api.quantities`, the one grammar.

Kept so ``modalscale.costmodel.quantities`` imports keep working; new code imports ``modalscale.api.quantities``.
"""

from __future__ import annotations

from modalscale.api.quantities import (
    GIB_BYTES,
    InvalidQuantity,
    parse_cpu_cores,
    parse_memory_bytes,
    parse_quantity,
)

__all__ = ["GIB_BYTES", "InvalidQuantity", "parse_cpu_cores", "parse_memory_bytes", "parse_quantity"]
