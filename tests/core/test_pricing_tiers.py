"""Service tiers: every tier the provider reports (or the request asked for) is
priced at its own rate, or left unpriced with the reason; never at the standard
rate without a word (recorder/core/pricing.py, recorder/core/billing.py)."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest

from recorder.core import StreamMeter, StreamRecord
from recorder.core.billing import complete_usage
from recorder.core.price_files import load_prices
from recorder.core.pricing import PriceTable, Unpriced, cost_of
from recorder.core.request import read_request
from tests.kit.prices import LITELLM
from tests.kit.usage import ANTHROPIC_CACHE_USAGE

M = Decimal(1_000_000)


def own(models: dict[str, Any]) -> PriceTable:
    return load_prices(
        json.dumps({"format": "recorder-prices/1", "version": "t", "unit": "1M", "models": models})
    )


ASTRA = {
    "provider": "openai",
    "as_of": "2026-12-01",
    "input": "10",
    "output": "50",
    "cache_read": "1",
    "service_tiers": {
        "priority": {"input": "20", "output": "100", "cache_read": "2"},
        "fast": {"same_as": "priority"},
    },
}
OPUS = {
    "provider": "anthropic",
    "as_of": "2026-12-01",
    "input": "4",
    "output": "20",
    "cache_read": "0.4",
    "cache_write": "5",
    "cache_write_1h": "8",
}


def sse(events: list[dict[str, Any]], *, named: bool = True) -> bytes:
    out = bytearray()
    for payload in events:
        if named:
            out += b"event: " + payload["type"].encode() + b"\n"
        out += b"data: " + json.dumps(payload).encode() + b"\n\n"
    return bytes(out)


def run(
    endpoint: str, body: bytes, request: dict[str, Any], prices: PriceTable, **kw: Any
) -> StreamRecord:
    """Meter ``body`` for a request as the proxy does: the request's facts on the
    record first, then the stream, then billing."""
    facts = read_request(json.dumps(request).encode())
    rec = StreamRecord(model=facts.model, requested_tier=facts.service_tier)
    meter = StreamMeter(endpoint, record=rec)
    meter.headers(None, 200)
    meter.feed(body)
    out = meter.finish(**kw)
    complete_usage(out, meter.interpreter.obs, None, prices, None)
    return out


def responses_body(tier: str | None, *, completed: bool = True) -> bytes:
    created: dict[str, Any] = {"id": "resp_1", "model": "gpt-6-astra", "service_tier": "auto"}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": created},
        {"type": "response.output_text.delta", "delta": "Hello"},
    ]
    if completed:
        done: dict[str, Any] = {
            "id": "resp_1",
            "model": "gpt-6-astra",
            "status": "completed",
            "usage": {
                "input_tokens": 1000,
                "input_tokens_details": {"cached_tokens": 200},
                "output_tokens": 100,
            },
        }
        if tier is not None:
            done["service_tier"] = tier
        events.append({"type": "response.completed", "response": done})
    return sse(events)


REQUEST = {"model": "gpt-6-astra", "stream": True, "input": "hi"}


def test_a_tier_without_a_rate_is_unpriced_with_the_reason_never_standard() -> None:
    rec = run("responses", responses_body("ultrafast"), REQUEST, own({"gpt-6-astra": ASTRA}))
    assert rec.service_tier == "ultrafast"
    assert rec.input_tokens == 1000 and rec.usage_source == "reported"
    assert rec.cost_usd is None and rec.price_version is None
    assert rec.unpriced_reason == "no 'ultrafast' service-tier rate for gpt-6-astra"


def test_a_tier_with_a_rate_is_priced_at_it() -> None:
    table = own(
        {
            "gpt-6-astra": {
                **ASTRA,
                "service_tiers": {
                    **ASTRA["service_tiers"],
                    "ultrafast": {"input": "60", "output": "300", "cache_read": "6"},
                },
            }
        }
    )
    rec = run("responses", responses_body("ultrafast"), REQUEST, table)
    assert rec.unpriced_reason is None
    assert rec.cost_usd == f"{(800 * 60 + 200 * 6 + 100 * 300) / M:.12f}"


def test_openai_fast_is_priced_as_priority() -> None:
    # GPT-6 responses say "fast", earlier models "priority": one tier, one price
    table = own({"gpt-6-astra": ASTRA})
    fast = run("responses", responses_body("fast"), REQUEST, table)
    priority = run("responses", responses_body("priority"), REQUEST, table)
    assert fast.service_tier == "fast" and priority.service_tier == "priority"
    assert fast.cost_usd == priority.cost_usd == f"{(800 * 20 + 200 * 2 + 100 * 100) / M:.12f}"


def test_default_and_standard_are_the_standard_rates() -> None:
    rec = run("responses", responses_body("default"), REQUEST, own({"gpt-6-astra": ASTRA}))
    assert rec.cost_usd == f"{(800 * 10 + 200 * 1 + 100 * 50) / M:.12f}"
    assert rec.unpriced_reason is None


def test_a_cut_stream_takes_the_tier_the_request_asked_for() -> None:
    # response.created echoes "auto" until the final event, which never came
    body = responses_body(None, completed=False)
    rec = run(
        "responses",
        body,
        {**REQUEST, "service_tier": "ultrafast"},
        own({"gpt-6-astra": ASTRA}),
        ending="upstream_disconnect",
    )
    assert rec.requested_tier == "ultrafast" and rec.service_tier == "ultrafast"
    assert rec.output_source == "estimated"
    assert rec.cost_usd is None and rec.unpriced_reason is not None
    assert "ultrafast" in rec.unpriced_reason


def test_the_reported_tier_wins_over_the_requested_one() -> None:
    # asked for fast, served (and billed) at default: the response says so
    rec = run(
        "responses",
        responses_body("default"),
        {**REQUEST, "service_tier": "fast"},
        own({"gpt-6-astra": ASTRA}),
    )
    assert rec.requested_tier == "fast" and rec.service_tier == "default"
    assert rec.cost_usd == f"{(800 * 10 + 200 * 1 + 100 * 50) / M:.12f}"


def messages_body(usage_extra: dict[str, Any]) -> bytes:
    usage = {**ANTHROPIC_CACHE_USAGE, **usage_extra}
    return sse(
        [
            {
                "type": "message_start",
                "message": {"id": "msg_1", "model": "claude-opus-5-5", "usage": usage},
            },
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Hi"},
            },
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 40, **usage_extra},
            },
            {"type": "message_stop"},
        ]
    )


FAST_REQUEST = {"model": "claude-opus-5-5", "speed": "fast", "max_tokens": 100, "messages": []}
STANDARD_COST = (100 * Decimal(4) + 1000 * Decimal("0.4") + 300 * 5 + 200 * 8 + 40 * 20) / M


def test_anthropic_fast_mode_without_a_rate_is_unpriced() -> None:
    rec = run(
        "messages", messages_body({"speed": "fast"}), FAST_REQUEST, own({"claude-opus-5-5": OPUS})
    )
    assert rec.requested_tier == "fast" and rec.service_tier == "fast"
    assert rec.cost_usd is None
    assert rec.unpriced_reason == "no 'fast' service-tier rate for claude-opus-5-5"


def test_anthropic_fast_mode_multiplies_every_rate() -> None:
    # priced at a multiple of the standard rates; caching multipliers apply on top
    table = own({"claude-opus-5-5": {**OPUS, "service_tiers": {"fast": {"multiplier": "2"}}}})
    rec = run("messages", messages_body({"speed": "fast"}), FAST_REQUEST, table)
    assert rec.cost_usd == f"{STANDARD_COST * 2:.12f}"
    standard = run("messages", messages_body({"speed": "standard"}), FAST_REQUEST, table)
    assert standard.service_tier == "standard"  # asked for fast, served at standard speed
    assert standard.cost_usd == f"{STANDARD_COST:.12f}"


def test_anthropic_response_silent_on_speed_takes_the_request() -> None:
    table = own({"claude-opus-5-5": {**OPUS, "service_tiers": {"fast": {"multiplier": "2"}}}})
    rec = run("messages", messages_body({}), FAST_REQUEST, table)
    assert rec.service_tier == "fast"
    assert rec.cost_usd == f"{STANDARD_COST * 2:.12f}"
    plain = run("messages", messages_body({}), {**FAST_REQUEST, "speed": "standard"}, table)
    assert plain.service_tier == "standard" and plain.cost_usd == f"{STANDARD_COST:.12f}"


def test_a_tier_without_long_context_rates_is_not_priced_above_the_threshold() -> None:
    table = own(
        {
            "gpt-x": {
                "input": "2",
                "output": "8",
                "long_context": [{"above_input_tokens": 272000, "input": "4", "output": "12"}],
                "service_tiers": {"priority": {"input": "4", "output": "16"}},
            }
        }
    )
    entry = table.resolve("gpt-x")
    assert entry is not None
    short = cost_of(entry, "t", input_tokens=1000, output_tokens=10, service_tier="priority")
    assert short.usd == f"{(1000 * 4 + 10 * 16) / M:.12f}"
    with pytest.raises(Unpriced, match="long-context 'priority'"):
        cost_of(entry, "t", input_tokens=300_000, output_tokens=10, service_tier="priority")


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"fast": {"same_as": "nowhere"}}, "same_as: no such tier"),
        ({"fast": {"multiplier": "2", "input": "3"}}, "only one of them"),
        ({"fast": {"multiplier": "-1"}}, "is not a price"),
        ({"a": {"same_as": "b"}, "b": {"same_as": "c"}, "c": {"input": "1"}}, "no such tier"),
    ],
)
def test_bad_tiers_name_what_is_wrong(doc: dict[str, Any], message: str) -> None:
    from recorder.core.pricing import PriceTableError

    with pytest.raises(PriceTableError, match=message):
        own({"m": {"input": "1", "output": "2", "service_tiers": doc}})


# -- LiteLLM ---------------------------------------------------------------------------


def test_litellm_reads_every_tier_and_cache_write_field() -> None:
    t = load_prices(LITELLM)
    astra = t.resolve("gpt-6-astra")
    assert astra is not None
    ultra = astra.tiers["ultrafast"]
    assert ultra.rates.input == Decimal("0.00006") and ultra.rates.output == Decimal("0.0003")
    assert ultra.rates.cache_read == Decimal("0.000006")
    assert ultra.rates.cache_write == Decimal("0.000075")
    assert ultra.long_context[0].above_input_tokens == 272_000
    assert ultra.long_context[0].rates.input == Decimal("0.00012")
    assert astra.tiers["flex"].long_context[0].rates.input == Decimal("0.00001")
    assert astra.tiers["fast"].same_as == "priority"  # OpenAI's Fast mode is its priority
    cost = cost_of(astra, t.version, input_tokens=1000, output_tokens=10, service_tier="ultrafast")
    assert Decimal(cost.usd) == 1000 * Decimal("0.00006") + 10 * Decimal("0.0003")
    assert cost.tier == "ultrafast"
    fast = cost_of(astra, t.version, input_tokens=1000, output_tokens=10, service_tier="fast")
    assert Decimal(fast.usd) == 1000 * Decimal("0.00002") + 10 * Decimal("0.0001")

    opus = t.resolve("claude-opus-5-5")
    assert opus is not None
    assert opus.rates.cache_write_1h == Decimal("0.000008")
    assert opus.rates.cache_write_hours == ((12, Decimal("0.000012")),)
    assert opus.tiers["batch"].rates.input == Decimal("0.000002")
    assert opus.tiers["fast"].multiplier == Decimal("2.0")
    fast = cost_of(opus, t.version, input_tokens=100, output_tokens=10, service_tier="fast")
    assert Decimal(fast.usd) == 2 * (100 * Decimal("0.000004") + 10 * Decimal("0.00002"))
    # what it does not read, it says
    assert t.unread == {"input_cost_per_audio_token": 1}


# -- the shipped table --------------------------------------------------------------------


def test_shipped_tiers() -> None:
    from recorder.core.price_files import shipped_prices

    t = shipped_prices()
    for entry in t.entries.values():
        if entry.provider == "openai" and "priority" in entry.tiers:
            fast = cost_of(entry, "t", input_tokens=1000, output_tokens=10, service_tier="fast")
            prio = cost_of(entry, "t", input_tokens=1000, output_tokens=10, service_tier="priority")
            assert fast.usd == prio.usd, entry.key
    astra = t.resolve("gpt-6-astra")
    assert astra is not None
    ultra = cost_of(astra, "t", input_tokens=1000, output_tokens=10, service_tier="ultrafast")
    std = cost_of(astra, "t", input_tokens=1000, output_tokens=10)
    assert Decimal(ultra.usd) == 6 * Decimal(std.usd)
    sol = t.resolve("gpt-6.1-sol")
    assert sol is not None and "ultrafast" not in sol.tiers
    with pytest.raises(Unpriced):
        cost_of(sol, "t", input_tokens=1000, output_tokens=10, service_tier="ultrafast")
    opus = t.resolve("claude-opus-5-5")
    assert opus is not None and opus.tiers["fast"].multiplier == 2


def test_fast_mode_on_top_of_another_tier() -> None:
    table = own(
        {
            "claude-opus-5-5": {
                **OPUS,
                "service_tiers": {
                    "fast": {"multiplier": "2"},
                    "priority": {"input": "6", "output": "30"},
                },
            }
        }
    )
    rec = run(
        "messages",
        messages_body({"speed": "fast", "service_tier": "priority"}),
        FAST_REQUEST,
        table,
    )
    assert rec.service_tier == "priority+fast"
    cost = (100 * 6 + 1000 * Decimal("0.4") + 300 * 5 + 200 * 8 + 40 * 30) * 2 / M
    assert rec.cost_usd == f"{cost:.12f}"
    unpriced = run(
        "messages", messages_body({"speed": "fast", "service_tier": "batch"}), FAST_REQUEST, table
    )
    assert unpriced.cost_usd is None
    assert unpriced.unpriced_reason == "no 'batch' service-tier rate for claude-opus-5-5"
