"""The one Kubernetes resource-quantity grammar of modalscale ("3500m", "8Gi", "500u", 4 -> exact values).

Why a module: the InferenceService spec parser, the planner's drift check (desired ``requests``/``limits`` against
the apiserver's canonical form) and the pricing catalog all read quantities. Three hand-written readers drifted
apart (one returned "unknown" for ``500u`` or ``1Pi``, so the Deployment was patched on every pass); this is the
only one. Values are exact ``Decimal`` so float rounding never reaches money.

Grammar (from the Kubernetes ``resource.Quantity`` documentation,
https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/):
``<signedNumber><suffix>`` where the suffix is a binary SI suffix (``Ki Mi Gi Ti Pi Ei``), a decimal SI
suffix (``n u m "" k M G T P E``) or a decimal exponent (``e3``, ``E-2``). Negative quantities are refused here
(no modalscale field takes one).
"""

from __future__ import annotations

import decimal
import math
import re
from decimal import Decimal, InvalidOperation

from modalscale.api.errors import InvalidSpec

_CONTEXT = decimal.Context(prec=34, traps=[InvalidOperation, decimal.DivisionByZero])
"""34 significant digits: every quantity a CRD field admits (at most 16 characters) is exact."""
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
}
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")

GIB_BYTES = 2**30
"""Bytes in one GiB (the catalog prices memory per GiB-hour)."""


class InvalidQuantity(InvalidSpec):
    """A value is not a Kubernetes quantity; ``field`` is the path given by the caller (e.g. ``spec.resources.cpu``).

    ``str(error)`` is ``"<field>: <message>"``.
    """


def parse_quantity(value: str | int | Decimal, field: str = "quantity") -> Decimal:
    """Parse a Kubernetes quantity into an exact Decimal in base units.

    Args:
        value: ``"3500m"``, ``"8Gi"``, ``"500u"``, ``"1.5"``, ``"2e3"``, an ``int`` or a ``Decimal``. Floats and
            booleans are refused (a YAML float is not a quantity the apiserver would keep exactly).
        field: Field path for the error.
    Returns:
        The value in base units (cores for CPU, bytes for memory); finite and never negative.
    Raises:
        InvalidQuantity: Malformed, negative, not finite, or not a str/int/Decimal.
    """
    if isinstance(value, bool | float):
        raise InvalidQuantity(field, f"{value!r} is not a Kubernetes quantity (write \"3500m\", \"8Gi\" or an integer)")
    if isinstance(value, Decimal):
        number = value
    elif isinstance(value, int):
        number = Decimal(value)
    elif isinstance(value, str):
        match = _QUANTITY.fullmatch(value)
        if match is None:
            raise InvalidQuantity(field, f"{value!r} is not a Kubernetes quantity (e.g. \"3500m\", \"4\", \"8Gi\")")
        base = Decimal(match["num"])
        suffix = match["suffix"] or ""
        if suffix in _BINARY:
            factor = Decimal(_BINARY[suffix])
        elif suffix in _DECIMAL:
            factor = _DECIMAL[suffix]
        else:  # decimal exponent
            exponent = int(suffix[1:])
            if abs(exponent) > 1000:
                raise InvalidQuantity(field, f"{value!r}: exponent out of range")
            factor = Decimal(1).scaleb(exponent, _CONTEXT)
        number = _CONTEXT.multiply(base, factor)
    else:
        raise InvalidQuantity(field, f"expected a quantity string or integer, got {type(value).__name__}")
    if not number.is_finite() or number < 0:
        raise InvalidQuantity(field, f"{value!r} must be a non-negative quantity")
    return number


def parse_cpu_cores(value: str | int | Decimal, field: str = "resources.cpu") -> Decimal:
    """CPU quantity -> cores as an exact Decimal (``"3500m"`` -> ``Decimal("3.5")``).

    Raises:
        InvalidQuantity: See :func:`parse_quantity`.
    """
    return parse_quantity(value, field)


def parse_memory_bytes(value: str | int | Decimal, field: str = "resources.memory") -> int:
    """Memory quantity -> bytes as an ``int``, rounded up as Kubernetes does (``"8Gi"`` -> 8589934592).

    Raises:
        InvalidQuantity: See :func:`parse_quantity`.
    """
    return int(math.ceil(parse_quantity(value, field)))


def same_quantity(a: object, b: object) -> bool:
    """True when ``a`` and ``b`` are both quantities of the same value (``"2"`` and ``"2000m"``; ``"1Ei"`` and
    ``"1024Pi"``); False when either is not a quantity."""
    if not isinstance(a, str | int | Decimal) or not isinstance(b, str | int | Decimal):
        return False
    try:
        return parse_quantity(a) == parse_quantity(b)
    except InvalidQuantity:
        return False
