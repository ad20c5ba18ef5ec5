"""Money: exact amounts of USD as the store keeps them, and as people read them.

The store keeps twelve fractional digits (``NUMERIC(24, 12)``); every figure the
billing commands print or write (JSON, CSV, the record) is :func:`exact`: twelve
fractional digits, never through a float. Sums are taken in :data:`EXACT`, a
context wide enough that no sum is rounded and that raises rather than round.
A console does not need twelve places: :func:`display` is for people.
"""

from __future__ import annotations

import decimal
from decimal import Decimal

PLACES = 12
QUANTUM = Decimal(1).scaleb(-PLACES)
ZERO = Decimal(0)
# NUMERIC(24, 12) per stream: 80 digits hold the sum of far more streams than exist.
# Inexact is trapped, so an amount with more than twelve places is refused, not rounded.
EXACT = decimal.Context(prec=80, traps=[decimal.Inexact, decimal.InvalidOperation])


def quantize(value: Decimal | str) -> Decimal:
    """``value`` as a Decimal with exactly :data:`PLACES` fractional digits
    (decimal.Inexact if it has more than twelve that are not zeros)."""
    amount = value if isinstance(value, Decimal) else Decimal(value)
    return amount.quantize(QUANTUM, context=EXACT)


def exact(value: Decimal | str) -> str:
    """A sum of money as the billing commands print it: 12 fractional digits,
    never a float (``0.000267`` reads ``0.000267000000``)."""
    return f"{quantize(value):f}"


def display(value: Decimal | str) -> str:
    """A cost to the millionth of a dollar, with more places only where they are
    not zeros: ``0.000267000000`` reads ``0.000267``, ``0.0000675`` stays."""
    amount = Decimal(value).normalize()
    places = amount.as_tuple().exponent
    return format(amount, "f") if isinstance(places, int) and places < -6 else f"{amount:.6f}"
