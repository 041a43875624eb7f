"""Parse Kubernetes resource quantities ("3500m", "8Gi", 4) into exact typed values for pricing.

Why a module: the pricing catalog takes plain typed values (CPU cores as Decimal, memory in bytes), while
InferenceService specs and pod metrics carry Kubernetes quantity strings. Parsing them here, exactly and
with an error that names the value, keeps float rounding out of money.

Grammar (from the Kubernetes ``resource.Quantity`` documentation,
https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/):
``<signedNumber><suffix>`` where the suffix is a binary SI suffix (``Ki Mi Gi Ti Pi Ei``), a decimal SI
suffix (``n u m "" k M G T P E``) or a decimal exponent (``e3``, ``E-2``).
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

from modalscale.costmodel.money import MONEY_CONTEXT

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1),
    "k": Decimal("1e3"), "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"),
    "P": Decimal("1e15"), "E": Decimal("1e18"),
}
_QUANTITY = re.compile(r"^(?P<num>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$")

GIB_BYTES = 2**30
"""Bytes in one GiB (the catalog prices memory per GiB-hour)."""


class InvalidQuantity(ValueError):
    """A value is not a Kubernetes quantity (the message names the value and, when given, the field)."""


def parse_quantity(value: str | int | Decimal, field: str = "quantity") -> Decimal:
    """Parse a Kubernetes quantity into an exact Decimal in base units.

    Args:
        value: ``"3500m"``, ``"8Gi"``, ``"1.5"``, ``"2e3"``, an ``int`` or a ``Decimal``. Floats are refused.
        field: Field path for the error message.
    Returns:
        The value in base units (cores for CPU, bytes for memory); never negative.
    Raises:
        InvalidQuantity: Malformed, negative, or a float.
    """
    if isinstance(value, bool) or isinstance(value, float):
        raise InvalidQuantity(f"{field}: {value!r} is not a Kubernetes quantity (write \"3500m\", \"8Gi\" or an integer)")
    if isinstance(value, Decimal):
        number = value
    elif isinstance(value, int):
        number = Decimal(value)
    elif isinstance(value, str):
        match = _QUANTITY.match(value.strip())
        if match is None:
            raise InvalidQuantity(f"{field}: {value!r} is not a Kubernetes quantity (e.g. \"3500m\", \"4\", \"8Gi\")")
        try:
            base = Decimal(match["num"])
        except InvalidOperation:  # pragma: no cover - the regex only admits decimal digits
            raise InvalidQuantity(f"{field}: {value!r} is not a Kubernetes quantity") from None
        suffix = match["suffix"] or ""
        if suffix in _BINARY:
            number = MONEY_CONTEXT.multiply(base, Decimal(_BINARY[suffix]))
        elif suffix in _DECIMAL:
            number = MONEY_CONTEXT.multiply(base, _DECIMAL[suffix])
        else:  # decimal exponent
            number = MONEY_CONTEXT.multiply(base, Decimal(1).scaleb(int(suffix[1:])))
    else:
        raise InvalidQuantity(f"{field}: expected a quantity string or integer, got {type(value).__name__}")
    if not number.is_finite() or number < 0:
        raise InvalidQuantity(f"{field}: {value!r} must be a non-negative quantity")
    return number


def parse_cpu_cores(value: str | int | Decimal, field: str = "resources.cpu") -> Decimal:
    """CPU quantity -> cores as an exact Decimal (``"3500m"`` -> ``Decimal("3.5")``).

    Raises:
        InvalidQuantity: See :func:`parse_quantity`.
    """
    return parse_quantity(value, field)


def parse_memory_bytes(value: str | int | Decimal, field: str = "resources.memory") -> int:
    """Memory quantity -> bytes as an ``int``, rounded up like Kubernetes does (``"8Gi"`` -> 8589934592).

    Raises:
        InvalidQuantity: See :func:`parse_quantity`.
    """
    return int(math.ceil(parse_quantity(value, field)))
