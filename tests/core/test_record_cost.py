"""Which entry prices which part of a record: on Amazon Bedrock, an iteration
that names another Claude model (an advisor's) is billed at Bedrock's rate for
that model in the request's inference profile, not at Anthropic's first-party
price. The expected costs are worked out here from the rates, by hand."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from recorder.core.price_files import shipped_prices
from recorder.core.record import StreamRecord
from recorder.core.record_cost import cost_or_reason, part_entry, price_parts


def part(model: str | None, input_tokens: int, output_tokens: int) -> dict[str, Any]:
    return {
        "kind": "message" if model is None else "advisor_message",
        "model": model,
        "input_tokens": input_tokens,
        "cache_read_tokens": 0,
        "cache_write_tokens": 0,
        "output_tokens": output_tokens,
    }


def bedrock_record(model: str, advisor: str) -> StreamRecord:
    return StreamRecord(
        provider="aws.bedrock",
        model=model,
        response_model="claude-sonnet-4-6",
        input_tokens=3000,
        output_tokens=150,
        usage_parts=[part(None, 2000, 50), part(advisor, 1000, 100)],
    )


@pytest.mark.parametrize(
    ("model", "advisor_key", "scale"),
    [
        ("us.anthropic.claude-sonnet-4-6", "bedrock/claude-opus-4-6-regional", Decimal("1.1")),
        ("eu.anthropic.claude-sonnet-4-6", "bedrock/claude-opus-4-6-regional", Decimal("1.1")),
        ("global.anthropic.claude-sonnet-4-6", "bedrock/claude-opus-4-6", Decimal(1)),
        ("anthropic.claude-sonnet-4-6", "bedrock/claude-opus-4-6", Decimal(1)),
        (
            "arn:aws:bedrock:us-east-1:123456789012:inference-profile/"
            "us.anthropic.claude-sonnet-4-6",
            "bedrock/claude-opus-4-6-regional",
            Decimal("1.1"),
        ),
    ],
)
def test_an_advisor_part_on_bedrock_is_priced_at_bedrocks_rate_in_the_requests_profile(
    model: str, advisor_key: str, scale: Decimal
) -> None:
    table = shipped_prices()
    rec = bedrock_record(model, "claude-opus-4-6")
    parts, cost, reason = price_parts(rec, table)
    assert reason is None and cost is not None
    assert advisor_key in str(parts[1]["price_version"])
    # Anthropic's list prices (Sonnet 4.6 3/15, Opus 4.6 5/25 per million), a
    # geographic profile 10 % above them
    sonnet = (2000 * Decimal("0.000003") + 50 * Decimal("0.000015")) * scale
    opus = (1000 * Decimal("0.000005") + 100 * Decimal("0.000025")) * scale
    assert Decimal(parts[0]["cost_usd"]) == sonnet
    assert Decimal(parts[1]["cost_usd"]) == opus
    assert Decimal(cost.usd) == sonnet + opus
    assert cost == cost_or_reason(rec, table)


def test_the_same_parts_first_party_are_priced_at_anthropics_own_entries() -> None:
    table = shipped_prices()
    rec = StreamRecord(
        provider="anthropic",
        model="claude-sonnet-4-6",
        input_tokens=3000,
        output_tokens=150,
        usage_parts=[part(None, 2000, 50), part("claude-opus-4-6", 1000, 100)],
    )
    parts, cost, _ = price_parts(rec, table)
    assert cost is not None
    assert ":claude-opus-4-6@" in str(parts[1]["price_version"])
    assert ":claude-sonnet-4-6@" in str(parts[0]["price_version"])


def test_a_part_whose_model_has_no_bedrock_id_falls_back_to_its_name() -> None:
    """As a Bedrock record's own model does (docs/billing.md): the table has no
    Bedrock id for Opus 4.7, so its first-party entry prices it."""
    table = shipped_prices()
    rec = bedrock_record("us.anthropic.claude-sonnet-4-6", "claude-opus-4-7")
    entry = part_entry(rec, table, "claude-opus-4-7")
    assert entry is not None and entry.key == "claude-opus-4-7"


def test_a_part_of_another_model_never_takes_the_requests_own_bedrock_entry() -> None:
    """The profile's prefix must not make the executor's entry match the advisor."""
    table = shipped_prices()
    rec = bedrock_record("us.anthropic.claude-sonnet-4-6", "claude-sonnet-4-5")
    entry = part_entry(rec, table, "claude-sonnet-4-5")
    assert entry is not None and entry.key == "bedrock/claude-sonnet-4-5-regional"
    unknown = part_entry(rec, table, "claude-nonesuch-9")
    assert unknown is None
