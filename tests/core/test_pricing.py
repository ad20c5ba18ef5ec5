"""Unit tests of recorder/core/pricing.py, price_files.py and the shipped price table."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from recorder.core.price_files import load_price_file, load_prices, shipped_prices
from recorder.core.pricing import (
    Cost,
    PriceEntry,
    PriceTable,
    PriceTableError,
    cost_of,
)
from recorder.core.record import StreamRecord
from recorder.core.record_cost import price_record

OWN: dict[str, Any] = {
    "format": "recorder-prices/1",
    "version": "t1",
    "unit": "1M",
    "providers": {"anthropic": {"server_tools": {"web_search": "0.01"}}},
    "models": {
        "claude-x": {
            "provider": "anthropic",
            "as_of": "2026-01-02",
            "source": "https://example.invalid/pricing",
            "input": "3",
            "output": "15",
            "cache_read": "0.30",
            "cache_write": "3.75",
            "cache_write_1h": "6",
            "aliases": ["claude-x-20260101"],
            "long_context": [
                {
                    "above_input_tokens": 200000,
                    "input": "6",
                    "output": "22.50",
                    "cache_read": "0.60",
                }
            ],
        },
        "gpt-y": {
            "provider": "openai",
            "as_of": "2026-01-03",
            "input": "2.50",
            "output": "10",
            "cache_read": "1.25",
            "reasoning": "12",
            "service_tiers": {"priority": {"input": "4.25", "output": "17"}},
        },
        "gpt-y-mini": {"input": "0.15", "output": "0.60"},
        "gpt-y-2024-05-13": {"as_of": "2026-01-03", "input": "5", "output": "15"},
    },
}


def table(doc: dict[str, Any] = OWN) -> PriceTable:
    return load_prices(json.dumps(doc).encode())


def entry(name: str, t: PriceTable | None = None) -> PriceEntry:
    found = (t or table()).resolve(name)
    assert found is not None
    return found


# -- our format ------------------------------------------------------------------------


def test_prices_are_exact_decimals_per_token() -> None:
    e = entry("claude-x")
    assert e.rates.input == Decimal("0.000003")
    assert e.rates.cache_write_1h == Decimal("0.000006")
    assert all(isinstance(v, Decimal) for v in (e.rates.input, e.rates.output, e.rates.cache_read))


def test_cost_of_every_part() -> None:
    e = entry("claude-x")
    cost = cost_of(
        e,
        "t1",
        input_tokens=1000 + 200 + 300,  # uncached + cache read + cache writes
        cache_read_tokens=200,
        cache_write_tokens=300,
        cache_write_1h_tokens=100,
        output_tokens=50,
        server_tool_requests={"web_search": 2},
    )
    expected = (
        1000 * Decimal("0.000003")
        + 200 * Decimal("0.0000003")
        + 200 * Decimal("0.00000375")  # five-minute writes (and writes of unknown lifetime)
        + 100 * Decimal("0.000006")  # one-hour writes
        + 50 * Decimal("0.000015")
        + 2 * Decimal("0.01")
    )
    assert cost == Cost(f"{expected:.12f}", "t1:claude-x@2026-01-02")
    assert re.fullmatch(r"\d+\.\d{12}", cost.usd)


def test_cost_rounds_half_even_at_twelve_digits() -> None:
    e = PriceEntry("m", load_prices(json.dumps(OWN).encode()).entries["gpt-y-mini"].rates)
    tiny = cost_of(e, "v", input_tokens=1, output_tokens=0)
    assert tiny.usd == "0.000000150000"
    assert tiny.price_version == "v:m@undated"


def test_long_context_prices_the_whole_request_above_the_threshold() -> None:
    e = entry("claude-x")
    at = cost_of(e, "t1", input_tokens=200_000, output_tokens=10)
    above = cost_of(e, "t1", input_tokens=200_001, output_tokens=10)
    assert not at.long_context and above.long_context
    assert Decimal(at.usd) == 200_000 * Decimal("0.000003") + 10 * Decimal("0.000015")
    assert Decimal(above.usd) == 200_001 * Decimal("0.000006") + 10 * Decimal("0.0000225")


def test_service_tier_rates_and_fallbacks() -> None:
    e = entry("gpt-y")
    priority = cost_of(
        e, "t1", input_tokens=100, cache_read_tokens=40, output_tokens=10, service_tier="priority"
    )
    assert priority.tier == "priority"
    # the tier has no cache_read rate: the standard one applies
    assert Decimal(priority.usd) == 60 * Decimal("0.00000425") + 40 * Decimal(
        "0.00000125"
    ) + 10 * Decimal("0.000017")
    standard = cost_of(e, "t1", input_tokens=100, output_tokens=10, service_tier="default")
    assert standard.tier is None
    assert Decimal(standard.usd) == 100 * Decimal("0.0000025") + 10 * Decimal("0.00001")


def test_reasoning_priced_apart_only_where_the_entry_says_so() -> None:
    cost = cost_of(entry("gpt-y"), "t1", input_tokens=0, output_tokens=100, reasoning_tokens=60)
    assert Decimal(cost.usd) == 40 * Decimal("0.00001") + 60 * Decimal("0.000012")
    plain = cost_of(entry("claude-x"), "t1", input_tokens=0, output_tokens=100, reasoning_tokens=60)
    assert Decimal(plain.usd) == 100 * Decimal("0.000015")


def test_cache_write_without_its_own_price_is_input() -> None:
    cost = cost_of(
        entry("gpt-y-mini"), "t1", input_tokens=100, cache_write_tokens=100, output_tokens=0
    )
    assert Decimal(cost.usd) == 100 * Decimal("0.00000015")


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("claude-x", "claude-x"),
        ("CLAUDE-X", "claude-x"),
        ("claude-x-20260101", "claude-x"),  # a declared alias
        ("claude-x-20991231", "claude-x"),  # any dated snapshot
        ("claude-x-latest", "claude-x"),
        ("anthropic/claude-x", "claude-x"),
        ("gpt-y-2024-08-06", "gpt-y"),
        ("gpt-y-2024-05-13", "gpt-y-2024-05-13"),  # a snapshot priced on its own
        ("gpt-y-mini-2024-07-18", "gpt-y-mini"),  # never gpt-y
    ],
)
def test_resolve(name: str, key: str) -> None:
    assert entry(name).key == key


@pytest.mark.parametrize("name", [None, "", "gpt-y-nano", "claude", "x-claude-x"])
def test_resolve_unknown(name: str | None) -> None:
    assert table().resolve(name) is None


def bad(**changes: Any) -> dict[str, Any]:
    doc = json.loads(json.dumps(OWN))
    for path, value in changes.items():
        target = doc
        *parents, last = path.split("__")
        for p in parents:
            target = target[p]
        target[last] = value
    return doc


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (bad(models__gpt_y_mini=None), None),
        (bad(unit="per-thousand"), "unit"),
        (bad(models={"m": {"input": "1"}}), "input and output prices are required"),
        (bad(models={"m": {"input": "-1", "output": "1"}}), "models.m.input"),
        (bad(models={"m": {"input": "cheap", "output": "1"}}), "models.m.input"),
        (bad(models={"m": {"input": True, "output": "1"}}), "models.m.input"),
        (
            bad(
                models={
                    "a": {"input": 1, "output": 1, "aliases": ["x"]},
                    "b": {"input": 1, "output": 1, "aliases": ["x"]},
                }
            ),
            "alias 'x'",
        ),
        (
            bad(
                models={
                    "a": {"input": 1, "output": 1, "aliases": ["b"]},
                    "b": {"input": 1, "output": 1},
                }
            ),
            "alias 'b'",
        ),
        (
            bad(models={"m": {"input": 1, "output": 1, "long_context": [{"input": 2}]}}),
            "above_input_tokens",
        ),
    ],
)
def test_bad_tables_name_what_is_wrong(doc: dict[str, Any], message: str | None) -> None:
    if message is None:  # a model key that is not an object
        doc["models"]["gpt-y-mini"] = "cheap"
        message = "models.gpt-y-mini"
    with pytest.raises(PriceTableError, match=re.escape(message)):
        load_prices(json.dumps(doc).encode())


@pytest.mark.parametrize("data", [b"", b"{", b"[]", b"not json"])
def test_not_a_table(data: bytes) -> None:
    with pytest.raises(PriceTableError):
        load_prices(data)


# -- LiteLLM's format --------------------------------------------------------------------

LITELLM = b"""{
  "sample_spec": {"input_cost_per_token": 0.0, "output_cost_per_token": 0.0, "mode": "chat"},
  "claude-sonnet-4-5": {
    "litellm_provider": "anthropic", "mode": "chat",
    "input_cost_per_token": 3e-06, "output_cost_per_token": 1.5e-05,
    "cache_read_input_token_cost": 3e-07, "cache_creation_input_token_cost": 3.75e-06,
    "cache_creation_input_token_cost_above_1hr": 6e-06,
    "input_cost_per_token_above_200k_tokens": 6e-06,
    "output_cost_per_token_above_200k_tokens": 2.25e-05,
    "search_context_cost_per_query": {"search_context_size_medium": 0.01},
    "source": "https://example.invalid/anthropic"
  },
  "gpt-4o": {
    "litellm_provider": "openai", "mode": "chat",
    "input_cost_per_token": 2.5e-06, "output_cost_per_token": 1e-05,
    "cache_read_input_token_cost": 1.25e-06,
    "input_cost_per_token_priority": 4.25e-06, "output_cost_per_token_priority": 1.7e-05,
    "input_cost_per_token_batches": 1.25e-06, "file_search_cost_per_1k_calls": 2.5
  },
  "azure/gpt-4o-mini": {
    "litellm_provider": "azure", "mode": "chat",
    "input_cost_per_token": 1.65e-07, "output_cost_per_token": 6.6e-07
  },
  "dall-e-3": {"litellm_provider": "openai", "mode": "image_generation",
               "output_cost_per_image": 0.04},
  "text-embedding-3-small": {"litellm_provider": "openai", "mode": "embedding",
                             "input_cost_per_token": 2e-08, "output_cost_per_token": 0.0}
}"""


def test_litellm_format_is_read_as_is() -> None:
    t = load_prices(LITELLM)
    assert t.source_format == "litellm"
    assert re.fullmatch(r"litellm-[0-9a-f]{12}", t.version)
    assert set(t.entries) == {"claude-sonnet-4-5", "gpt-4o", "azure/gpt-4o-mini"}
    sonnet = entry("claude-sonnet-4-5-20250929", t)
    assert sonnet.rates.input == Decimal("0.000003")  # 3e-06 read as written, not as a binary float
    assert sonnet.rates.cache_write_1h == Decimal("0.000006")
    assert sonnet.long_context[0].above_input_tokens == 200_000
    assert sonnet.long_context[0].rates.output == Decimal("0.0000225")
    assert sonnet.server_tools == {"web_search": Decimal("0.01")}
    assert sonnet.as_of is None and sonnet.source == "https://example.invalid/anthropic"
    gpt = entry("gpt-4o-2024-08-06", t)
    assert gpt.tiers["priority"].rates.output == Decimal("0.000017")
    assert gpt.tiers["batch"].rates.input == Decimal("0.00000125")
    assert gpt.server_tools == {"file_search": Decimal("0.0025")}
    assert entry("gpt-4o-mini", t).key == "azure/gpt-4o-mini"  # bare name of a prefixed entry
    cost = cost_of(gpt, t.version, input_tokens=1000, output_tokens=100)
    assert cost.usd == "0.003500000000"
    assert cost.price_version == f"{t.version}:gpt-4o@undated"


def test_litellm_version_can_be_named() -> None:
    assert load_prices(LITELLM, version="litellm-1.110.2").version == "litellm-1.110.2"


# -- records ------------------------------------------------------------------------------


def test_price_record_prefers_the_serving_snapshot() -> None:
    rec = StreamRecord(model="gpt-y", response_model="gpt-y-2024-05-13")
    rec.input_tokens, rec.output_tokens = 1000, 100
    cost = price_record(rec, table())
    assert cost is not None and cost.price_version == "t1:gpt-y-2024-05-13@2026-01-03"
    rec.response_model = "gpt-y-unknown-snapshot-x"
    cost = price_record(rec, table())
    assert cost is not None and cost.price_version.startswith("t1:gpt-y@")


def test_price_record_without_usage_or_price() -> None:
    assert price_record(StreamRecord(model="gpt-y"), table()) is None
    rec = StreamRecord(model="unknown")
    rec.output_tokens = 5
    assert price_record(rec, table()) is None


# -- the shipped table ----------------------------------------------------------------------

SHIPPED = Path(__file__).resolve().parents[2] / "recorder" / "data" / "prices.json"


def test_shipped_table_loads_and_every_entry_is_dated_and_sourced() -> None:
    t = shipped_prices()
    assert t.version == json.loads(SHIPPED.read_text())["version"]
    assert len(t.entries) > 40
    for e in t.entries.values():
        assert e.as_of and re.fullmatch(r"\d{4}-\d{2}-\d{2}", e.as_of), e.key
        assert e.source and e.source.startswith("https://"), e.key
        assert e.provider in ("openai", "anthropic", "aws.bedrock", "gcp.gemini"), e.key


def test_shipped_prices_are_strings_never_json_numbers() -> None:
    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{path}.{k}")
        elif isinstance(value, list):
            for n, v in enumerate(value):
                walk(v, f"{path}[{n}]")
        elif isinstance(value, float):
            pytest.fail(f"{path} is a float")

    walk(json.loads(SHIPPED.read_text()), "")


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("gpt-4o-2024-05-13", "gpt-4o-2024-05-13"),
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("gpt-4.1-2025-04-14", "gpt-4.1"),
        ("gpt-5-mini-2025-08-07", "gpt-5-mini"),
        ("o3-2025-04-16", "o3"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("claude-3-5-sonnet-20241022", "claude-3-5-sonnet"),
        ("claude-3-haiku-20240307", "claude-3-haiku"),
        ("claude-opus-4-1-20250805", "claude-opus-4-1"),
        ("claude-haiku-4-5-20251001", "claude-haiku-4-5"),
    ],
)
def test_shipped_table_resolves_widely_used_models(name: str, key: str) -> None:
    assert entry(name, shipped_prices()).key == key


def test_shipped_anthropic_cache_writes_follow_the_published_multipliers() -> None:
    for e in shipped_prices().entries.values():
        if e.provider != "anthropic" or e.rates.cache_write is None:
            continue
        if e.key == "claude-3-haiku":  # published rounded: $0.30 (not 0.3125), $0.03
            continue
        assert e.rates.cache_write == e.rates.input * Decimal("1.25"), e.key
        assert e.rates.cache_write_1h == e.rates.input * 2, e.key


def test_load_price_file(tmp_path: Path) -> None:
    assert load_price_file(None).version == shipped_prices().version
    path = tmp_path / "litellm.json"
    path.write_bytes(LITELLM)
    assert load_price_file(path).version.endswith("+" + load_prices(LITELLM).version)
    with pytest.raises(PriceTableError, match=r"missing\.json"):
        load_price_file(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"models": {"m": {"input": "1"}}}')
    with pytest.raises(PriceTableError, match=r"broken\.json: models\.m"):
        load_price_file(broken)


def test_a_prices_file_overlays_the_shipped_table(tmp_path: Path) -> None:
    path = tmp_path / "two.json"
    path.write_text(
        json.dumps(
            {
                "format": "recorder-prices/1",
                "version": "mine",
                "models": {
                    "gpt-5": {"input": "0.000001", "output": "0.000002", "as_of": "2026-12-01"},
                    "my-model": {"input": "0.000001", "output": "0.000002"},
                },
            }
        )
    )
    t = load_price_file(path)
    rec = StreamRecord(model="claude-sonnet-4-5")
    rec.input_tokens, rec.output_tokens = 1000, 100
    shipped = price_record(rec, shipped_prices())
    assert shipped is not None
    assert (
        price_record(rec, t) == shipped
    )  # not named in the file: the shipped price, version and all
    rec.model = "gpt-5"
    mine = price_record(rec, t)
    assert mine is not None and mine.price_version == "mine:gpt-5@2026-12-01"
    assert mine.usd == "0.001200000000"
    assert t.resolve("my-model") is not None
    assert t.version == f"{shipped_prices().version}+mine"


@pytest.mark.parametrize(
    ("model", "key"),
    [
        ("anthropic.claude-sonnet-4-5-20250929-v1:0", "bedrock/claude-sonnet-4-5"),
        ("global.anthropic.claude-sonnet-4-5-20250929-v1:0", "bedrock/claude-sonnet-4-5"),
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "bedrock/claude-sonnet-4-5-regional"),
        ("eu.anthropic.claude-haiku-4-5-20251001-v1:0", "bedrock/claude-haiku-4-5-regional"),
        (
            "arn:aws:bedrock:us-east-1:123456789012:inference-profile/"
            "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
            "bedrock/claude-sonnet-4-5-regional",
        ),
        ("amazon.nova-micro-v1:0", "bedrock/nova-micro"),
        ("us.amazon.nova-pro-v1:0", "bedrock/nova-pro"),
    ],
)
def test_bedrock_model_ids_resolve_to_bedrock_prices(model: str, key: str) -> None:
    entry = shipped_prices().resolve(model)
    assert entry is not None and entry.key == key
    assert entry.as_of and entry.source == "https://aws.amazon.com/bedrock/pricing/"


def test_a_bedrock_record_is_priced_by_its_model_id_not_the_answers_model() -> None:
    """InvokeModel's answer names Anthropic's model (``claude-sonnet-4-5-20250929``);
    the price is the regional profile's the request named."""
    rec = StreamRecord(
        provider="aws.bedrock",
        model="us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        response_model="claude-sonnet-4-5-20250929",
        input_tokens=1000,
        output_tokens=100,
    )
    cost = price_record(rec, shipped_prices())
    assert cost is not None and "bedrock/claude-sonnet-4-5-regional" in cost.price_version
    direct = price_record(
        StreamRecord(
            provider="anthropic", model="claude-sonnet-4-5", input_tokens=1000, output_tokens=100
        ),
        shipped_prices(),
    )
    assert direct is not None
    assert Decimal(cost.usd) == Decimal(direct.usd) * Decimal("1.1")
