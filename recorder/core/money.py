"""Money as people read it (the store keeps twelve places; a console does not need them)."""

from __future__ import annotations

from decimal import Decimal


def display(value: Decimal | str) -> str:
    """A cost to the millionth of a dollar, with more places only where they are
    not zeros: ``0.000267000000`` reads ``0.000267``, ``0.0000675`` stays."""
    exact = Decimal(value).normalize()
    places = exact.as_tuple().exponent
    return format(exact, "f") if isinstance(places, int) and places < -6 else f"{exact:.6f}"
