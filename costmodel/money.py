"""Money arithmetic rules for the cost model: one place that says how USD amounts are parsed, rounded and written.

Why a module: every persisted or alerted amount is a :class:`decimal.Decimal`, and the rounding rule must be
the same in the ledger, the budget plan, the status and the alert text, or sums stop adding up.

The fixed quantization rule:

* **Ledger amounts** (spend per service, rates in USD per hour) are quantized to ``LEDGER_QUANTUM_USD`` =
  1e-9 USD (a nano-dollar) with ``ROUND_HALF_EVEN`` (banker's rounding) after every interval that is added.
  One rounding per interval per service bounds the drift at 0.5e-9 USD per evaluation: a month of 60 s
  evaluations (44 640 intervals) drifts by at most 2.3e-5 USD per service.
* **Displayed amounts** (status ``spent``/``forecast``/``remaining``, conditions, chat messages, the kubectl
  plugin, cost reports) are written by :func:`display_usd`: quantized to ``DISPLAY_QUANTUM_USD`` = 0.01 USD with
  ``ROUND_HALF_EVEN``, except a non-zero amount under a cent, shown with its first
  ``SUB_CENT_SIGNIFICANT_DIGITS`` significant digits, rounded toward zero (0.004 reads ``0.004``, never ``0.00``;
  0.00999 reads ``0.0099``, never a cent it has not reached), as Kubecost shows costs under a cent
  (kubecost/kubecost#1607). They are never fed back into the ledger, nor compared with anything.
* **Displayed parts of a displayed total** (the showback table's rows and total): :func:`display_usd_parts` shows
  the total as :func:`display_usd` does and each part at the total's resolution (cents, or the total's sub-cent
  digits), rounded by largest remainder (Hamilton's method, as showback's allocation splits the ledger quanta) so
  the parts shown add up to the total shown; rounding each part alone showed three thirds of a dollar as 0.33
  under a total of 1.00.
* Arithmetic runs in a local decimal context with 34 significant digits (IEEE 754 decimal128), so a
  12-digit dollar amount with 9 fractional digits is exact before rounding.
"""

from __future__ import annotations

import decimal
import re
from collections.abc import Sequence
from decimal import ROUND_DOWN, ROUND_HALF_EVEN, Decimal, InvalidOperation

LEDGER_QUANTUM_USD = Decimal("0.000000001")
"""Resolution of ledger amounts and rates, in USD (1e-9)."""

DISPLAY_QUANTUM_USD = Decimal("0.01")
"""Resolution of amounts shown to people (status columns, alerts), in USD."""

MONEY_CONTEXT = decimal.Context(prec=34, rounding=ROUND_HALF_EVEN, traps=[InvalidOperation, decimal.DivisionByZero])
"""Decimal context for all cost arithmetic (34 significant digits, banker's rounding)."""

SUB_CENT_SIGNIFICANT_DIGITS = 2
"""Significant digits :func:`display_usd` shows of a non-zero amount under a cent."""

SECONDS_PER_HOUR = Decimal(3600)


def quantize_ledger_usd(amount: Decimal) -> Decimal:
    """Round a USD amount or rate to the ledger resolution (1e-9 USD, half-even)."""
    return amount.quantize(LEDGER_QUANTUM_USD, rounding=ROUND_HALF_EVEN, context=MONEY_CONTEXT)


def quantize_display_usd(amount: Decimal) -> Decimal:
    """Round a USD amount to cents (half-even) for status columns and messages."""
    return amount.quantize(DISPLAY_QUANTUM_USD, rounding=ROUND_HALF_EVEN, context=MONEY_CONTEXT)


def display_usd(amount: Decimal) -> str:
    """An amount as people read it (status, conditions, alerts, reports): cents, or the significant digits of a
    non-zero amount under a cent (module docstring); matches :data:`STATUS_AMOUNT_PATTERN`.

    Examples: ``12.345`` -> ``'12.34'``, ``0`` -> ``'0.00'``, ``0.004`` -> ``'0.004'``, ``0.000123456`` ->
    ``'0.00012'``, ``-0.004`` -> ``'-0.004'``.
    """
    if amount and abs(amount) < DISPLAY_QUANTUM_USD:
        exponent = amount.adjusted() - SUB_CENT_SIGNIFICANT_DIGITS + 1
        shown = amount.quantize(Decimal(1).scaleb(exponent), rounding=ROUND_DOWN, context=MONEY_CONTEXT)
        return format_usd(shown.normalize(MONEY_CONTEXT))
    return format_usd(quantize_display_usd(amount))


def display_usd_parts(parts: Sequence[Decimal]) -> tuple[list[str], str]:
    """Non-negative parts of a total and the total as people read them, the parts adding up to the total shown.

    The total is :func:`display_usd` of the exact sum; each part is at the same resolution (0.01, or the total's
    last sub-cent digit), floored, with the units left over going one each to the parts with the largest remainders
    (ties to the earlier part): ``[1/3, 1/3, 1/3]`` -> ``(['0.34', '0.33', '0.33'], '1.00')``.

    Raises:
        ValueError: A negative part (a showback row cannot be).
    """
    if any(p < 0 for p in parts):
        raise ValueError(f"display_usd_parts: negative part {min(parts)}; parts of a total are >= 0")
    total = sum(parts, Decimal(0))
    shown_total = display_usd(total)
    target = Decimal(shown_total)
    exponent = target.as_tuple().exponent
    quantum = Decimal(1).scaleb(exponent if isinstance(exponent, int) else 0)
    exact = [MONEY_CONTEXT.divide(p, quantum) for p in parts]
    floors = [int(x.to_integral_value(rounding=ROUND_DOWN)) for x in exact]
    left = int(MONEY_CONTEXT.divide(target, quantum)) - sum(floors)
    for i in sorted(range(len(parts)), key=lambda i: (floors[i] - exact[i], i))[:max(left, 0)]:
        floors[i] += 1
    return [format_usd(MONEY_CONTEXT.multiply(q, quantum)) for q in floors], shown_total


def format_usd(amount: Decimal) -> str:
    """Write an amount as a plain decimal string (no exponent), e.g. ``Decimal('1E+2')`` -> ``'100'``.

    The CRD status pattern is ``^-?[0-9]+(\\.[0-9]+)?$``; this never emits an exponent or a trailing dot.
    """
    text = format(amount, "f")
    if text in ("-0", "-0.0") or (text.startswith("-") and Decimal(text) == 0):
        text = text[1:]
    return text


STATUS_AMOUNT_PATTERN = r"^-?[0-9]+(\.[0-9]+)?$"
"""The CRD's pattern of the amounts in a BudgetPolicy's status (``spent``, ``forecast``, ``remaining``,
``burnRatePerHour``): what :func:`format_usd` writes."""
MAX_AMOUNT_CHARS = 32
"""The CRD's ``maxLength`` of every amount in status."""
MAX_INTEGER_DIGITS = 25
"""Most digits before the point that :func:`parse_usd` reads: rounding such an amount to :data:`LEDGER_QUANTUM_USD`
needs 25 + 9 = 34 digits, the precision of :data:`MONEY_CONTEXT`, so no later quantization can trap."""
_AMOUNT_RE = re.compile(STATUS_AMOUNT_PATTERN)


def parse_usd(value: object, field: str) -> Decimal:
    """Parse a decimal amount read back from status (or an int), as strictly as the CRD writes it.

    Args:
        value: ``"19.99"``, ``"-3.5"``, ``"250"`` (:data:`STATUS_AMOUNT_PATTERN`, at most :data:`MAX_AMOUNT_CHARS`
            characters), an ``int`` or a finite ``Decimal``; floats are refused (they cannot hold money exactly),
            and so are exponents, signs other than a leading ``-``, spaces, separators, non-ASCII digits, NaN and
            Infinity.
        field: The field path used in the error message, e.g. ``"status.ledger.services[2].spent"``.
    Returns:
        The exact :class:`~decimal.Decimal`, with at most :data:`MAX_INTEGER_DIGITS` digits before the point.
    Raises:
        ValueError: Anything else (the message names ``field``). ``spec.limit.amount`` has its own, stricter
            grammar (``modalscale.api.budgetpolicy.parse_limit_amount``).
    """
    if isinstance(value, bool) or isinstance(value, float):
        raise ValueError(f"{field}: expected a decimal string such as \"19.99\", got {type(value).__name__} {value!r}")
    if isinstance(value, Decimal):
        result = value
    elif isinstance(value, int):
        result = Decimal(value)
    elif isinstance(value, str):
        if len(value) > MAX_AMOUNT_CHARS or _AMOUNT_RE.fullmatch(value) is None:
            raise ValueError(f"{field}: {value[:40]!r} is not a plain decimal string such as \"19.99\" (digits, "
                             f"optionally a leading '-' and a point with digits; at most {MAX_AMOUNT_CHARS} "
                             f"characters)")
        result = Decimal(value)
    else:
        raise ValueError(f"{field}: expected a decimal string, got {type(value).__name__}")
    if not result.is_finite():
        raise ValueError(f"{field}: {value!r} is not a finite decimal number")
    if result and result.adjusted() >= MAX_INTEGER_DIGITS:
        raise ValueError(f"{field}: {str(value)[:40]!r} has more than {MAX_INTEGER_DIGITS} digits before the point")
    return result
