"""Gemini's and Vertex AI's prices in the shipped table: prompts over 200k tokens
priced whole at the higher rate, cached content at its own rate, thinking as output,
Flex, Batch and Priority by their multipliers, and what cannot be priced unpriced
with its reason. Expected costs are worked out here from the table's rates."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest

import recorder
from recorder.core.price_files import shipped_prices
from recorder.core.pricing import Unpriced
from recorder.core.record import StreamRecord
from recorder.core.record_cost import cost_or_reason

TABLE = json.loads((Path(recorder.__file__).parent / "data" / "prices.json").read_text())
PRO = TABLE["models"]["gemini-2.5-pro"]


def _record(
    inp: int, out: int, cached: int = 0, tier: str | None = None, **kw: object
) -> StreamRecord:
    rec = StreamRecord(
        endpoint="generate_content",
        provider="gcp.gemini",
        model="gemini-2.5-pro",
        input_tokens=inp,
        output_tokens=out,
        cache_read_tokens=cached,
        reasoning_tokens=out // 2,
        service_tier=tier,
    )
    for name, value in kw.items():
        setattr(rec, name, value)
    return rec


def _want(rates: dict[str, str], inp: int, out: int, cached: int, times: str = "1") -> Decimal:
    d = Decimal
    cost = (
        (inp - cached) * d(rates["input"])
        + cached * d(rates["cache_read"])
        + out * d(rates["output"])
    )
    return (cost * d(times)).quantize(Decimal("0.000000000001"))


@pytest.mark.parametrize(
    ("inp", "rates"),
    [(200_000, PRO), (200_001, {**PRO, **PRO["long_context"][0]})],
)
def test_long_prompts_are_priced_whole_at_the_higher_rate(inp: int, rates: dict[str, str]) -> None:
    cost = cost_or_reason(_record(inp, 1_000, 50_000), shipped_prices())
    assert cost is not None
    assert Decimal(cost.usd) == _want(rates, inp, 1_000, 50_000)


@pytest.mark.parametrize(
    ("tier", "times"),
    [
        ("flex", "0.5"),
        ("batch", "0.5"),
        ("priority", "1.8"),
        ("on_demand", "1"),
        ("standard", "1"),
        ("on_demand_priority", "1.8"),
    ],
)
def test_tiers(tier: str, times: str) -> None:
    cost = cost_or_reason(_record(10_000, 2_000, 1_000, tier), shipped_prices())
    assert cost is not None
    assert Decimal(cost.usd) == _want(PRO, 10_000, 2_000, 1_000, times)


def test_what_the_table_cannot_price_says_why() -> None:
    with pytest.raises(Unpriced, match="provisioned_throughput"):
        cost_or_reason(_record(10, 2, 0, "provisioned_throughput"), shipped_prices())
    with pytest.raises(Unpriced, match="gemini-9-ultra"):
        cost_or_reason(_record(10, 2, model="gemini-9-ultra"), shipped_prices())


def test_every_gemini_entry_is_dated_with_its_source() -> None:
    gemini = {k: v for k, v in TABLE["models"].items() if k.startswith("gemini")}
    assert {
        "gemini-2.5-pro",
        "gemini-2.5-flash",
        "gemini-2.5-flash-lite",
        "gemini-3-pro-preview",
    } <= set(gemini)
    for entry in gemini.values():
        assert entry["as_of"] and entry["source"].startswith("https://") and entry["via"]
