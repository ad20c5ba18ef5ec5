"""Money (recorder.core.money): the one exact form every billing command prints,
and the short form a console shows."""

from __future__ import annotations

import decimal
from decimal import Decimal

import pytest

from recorder.core import money


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Decimal(0), "0.000000000000"),
        (Decimal("0.000267"), "0.000267000000"),
        ("0.000000000001", "0.000000000001"),
        (Decimal("-1.5"), "-1.500000000000"),
        # beyond a float's 17 digits and the default context's 28
        (Decimal("999999999999999999.999999999999"), "999999999999999999.999999999999"),
        ("1E-3", "0.001000000000"),
    ],
)
def test_exact_prints_twelve_places(value: Decimal | str, text: str) -> None:
    assert money.exact(value) == text


def test_exact_refuses_to_round() -> None:
    # a thirteenth place that is not zero would be lost: refused, not rounded
    with pytest.raises(decimal.Inexact):
        money.exact(Decimal("0.0000000000001"))
    assert money.exact(Decimal("0.1000000000000")) == "0.100000000000"


def test_quantize_keeps_the_value() -> None:
    q = money.quantize("0.5")
    assert q == Decimal("0.5") and q.as_tuple().exponent == -money.PLACES


def test_sums_in_the_exact_context_are_not_rounded() -> None:
    big = Decimal("99999999999999999999.999999999999")  # 32 digits
    tiny = Decimal("0.000000000001")
    with decimal.localcontext(money.EXACT):
        total = big + big + tiny
    assert money.exact(total) == "199999999999999999999.999999999999"
    # the default context (28 digits) would have rounded it
    with decimal.localcontext(decimal.Context()):
        assert big + big + tiny != total


@pytest.mark.parametrize(
    ("value", "text"),
    [("0.000267000000", "0.000267"), ("0.0000675", "0.0000675"), (Decimal(2), "2.000000")],
)
def test_display(value: Decimal | str, text: str) -> None:
    assert money.display(value) == text
