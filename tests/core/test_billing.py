"""Unit tests of recorder/core/billing.py: sources, estimates and cost on finished records."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from recorder.core import StreamMeter, StreamRecord
from recorder.core.billing import apply_prices, complete_usage, input_tokenizer
from recorder.core.counts import InputCounts, OutputCounts, count_request
from recorder.core.estimate import FRAMING_WHOLE_AT, Calibration, Estimator
from recorder.core.model_families import PROFILES
from recorder.core.price_files import load_prices
from recorder.core.pricing import PriceTable
from recorder.core.record import FIELDS
from tests.kit.usage import ANTHROPIC_CACHE_USAGE

PRICES: PriceTable = load_prices(
    json.dumps(
        {
            "format": "recorder-prices/1",
            "version": "test",
            "unit": "1M",
            "providers": {
                "anthropic": {"server_tools": {"web_search": "0.01"}},
                "openai": {"server_tools": {"web_search": "0.01"}},
            },
            "models": {
                "claude-sonnet-4-5": {
                    "provider": "anthropic",
                    "as_of": "2026-11-30",
                    "input": "3",
                    "output": "15",
                    "cache_read": "0.3",
                    "cache_write": "3.75",
                    "cache_write_1h": "6",
                },
                "gpt-4o": {
                    "provider": "openai",
                    "as_of": "2026-11-30",
                    "input": "2.5",
                    "output": "10",
                    "cache_read": "1.25",
                    "service_tiers": {"priority": {"input": "4.25", "output": "17"}},
                },
                "gpt-4o-2024-05-13": {
                    "provider": "openai",
                    "as_of": "2026-11-30",
                    "input": "5",
                    "output": "15",
                },
                "gpt-5-mini": {
                    "provider": "openai",
                    "as_of": "2026-11-30",
                    "input": "0.25",
                    "output": "2",
                },
            },
        }
    ).encode()
)
M = Decimal(1_000_000)


def sse(events: list[dict[str, Any]], *, named: bool) -> bytes:
    out = bytearray()
    for payload in events:
        data = json.dumps(payload, ensure_ascii=False).encode()
        if named:
            out += b"event: " + payload["type"].encode() + b"\n"
        out += b"data: " + data + b"\n\n"
    return bytes(out)


def run(
    endpoint: str,
    body: bytes,
    *,
    ending: str = "eof",
    model: str | None = None,
    request: dict[str, Any] | None = None,
    status: int = 200,
    estimator: Estimator | None = None,
) -> StreamRecord:
    meter = StreamMeter(endpoint, record=StreamRecord(model=model))
    meter.headers(None, status)
    meter.feed(body)
    rec = meter.finish(ending=ending)
    counts = None
    if request is not None:
        counts = count_request(json.dumps(request).encode(), endpoint)
    complete_usage(rec, meter.interpreter.obs, counts, PRICES, estimator)
    return rec


ANTHROPIC_START = {
    "type": "message_start",
    "message": {
        "id": "msg_1",
        "model": "claude-sonnet-4-5-20250929",
        "usage": ANTHROPIC_CACHE_USAGE,
    },
}


def text_delta(text: str) -> dict[str, Any]:
    return {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": text},
    }


def test_cut_anthropic_stream_keeps_exact_input_and_estimates_output() -> None:
    body = sse([ANTHROPIC_START, text_delta("x" * 360)], named=True)
    rec = run("messages", body, ending="upstream_disconnect", model="claude-sonnet-4-5")
    assert rec.outcome == "upstream_disconnect"
    assert (rec.input_tokens, rec.cache_read_tokens, rec.cache_write_tokens) == (1600, 1000, 500)
    assert (rec.cache_write_5m_tokens, rec.cache_write_1h_tokens) == (300, 200)
    assert rec.input_source == "reported"
    assert rec.output_source == "estimated"
    assert rec.usage_source == "mixed"
    expected_output = round(100 + PROFILES["anthropic"].response_tokens)
    assert rec.output_tokens == expected_output  # not the provisional 1
    assert rec.estimate_method == "e3;output:chars/default"
    assert rec.service_tier == "standard"
    cost = (
        100 * Decimal(3) + 1000 * Decimal("0.3") + 300 * Decimal("3.75") + 200 * Decimal(6)
    ) / M + expected_output * Decimal(15) / M
    assert rec.cost_usd == f"{cost:.12f}"
    assert rec.price_version == "test:claude-sonnet-4-5@2026-11-30"


def test_provisional_output_is_a_floor_never_the_figure() -> None:
    start = json.loads(json.dumps(ANTHROPIC_START))
    start["message"]["usage"]["output_tokens"] = 7
    rec = run("messages", sse([start], named=True), ending="client_disconnect")
    assert rec.output_tokens == 7 and rec.output_source == "estimated"


def test_reported_usage_is_left_as_it_is() -> None:
    body = sse(
        [
            ANTHROPIC_START,
            text_delta("Hello"),
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": 42, "server_tool_use": {"web_search_requests": 3}},
            },
            {"type": "message_stop"},
        ],
        named=True,
    )
    rec = run("messages", body)
    assert (rec.input_source, rec.output_source, rec.usage_source) == ("reported",) * 3
    assert rec.output_tokens == 42 and rec.estimate_method is None
    assert rec.server_tool_requests == {"web_search": 3}
    cost = (100 * 3 + 1000 * Decimal("0.3") + 300 * Decimal("3.75") + 200 * 6 + 42 * 15) / M
    assert rec.cost_usd == f"{cost + 3 * Decimal('0.01'):.12f}"


def chat_chunk(delta: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "id": "c",
        "model": "gpt-4o-2024-08-06",
        "choices": [{"index": 0, "delta": delta}],
        **extra,
    }


def test_chat_without_include_usage_is_estimated_and_billed() -> None:
    body = (
        sse(
            [chat_chunk({"role": "assistant", "content": ""})]
            + [chat_chunk({"content": t}) for t in ("Hello", ",", " world", "!")],
            named=False,
        )
        + b"data: [DONE]\n\n"
    )
    request = {
        "model": "gpt-4o",
        "stream": True,
        "messages": [{"role": "user", "content": "x" * 400}],
    }
    rec = run("chat.completions", body, model="gpt-4o", request=request)
    assert rec.outcome == "completed"
    assert (rec.input_source, rec.output_source, rec.usage_source) == ("estimated",) * 3
    assert rec.output_tokens == 4  # one token per delta
    p = PROFILES["openai-o200k"]
    assert rec.input_tokens == round(100 + p.message_tokens + p.request_tokens)
    assert rec.estimate_method == "e3;input:chars/default;output:deltas"
    assert rec.input_breakdown is not None and rec.input_breakdown["latin"] == 400
    assert rec.cost_usd == f"{(rec.input_tokens * Decimal('2.5') + 4 * 10) / M:.12f}"
    assert rec.price_version == "test:gpt-4o@2026-11-30"


def test_chat_service_tier_prices_the_record() -> None:
    usage = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    body = (
        sse(
            [
                chat_chunk({"content": "Hi"}, service_tier="priority"),
                {"id": "c", "choices": [], "usage": usage},
            ],
            named=False,
        )
        + b"data: [DONE]\n\n"
    )
    rec = run("chat.completions", body, model="gpt-4o")
    assert rec.service_tier == "priority"
    assert rec.cost_usd == f"{(10 * Decimal('4.25') + 2 * 17) / M:.12f}"


def test_the_serving_snapshot_is_priced() -> None:
    usage = {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12}
    chunk = chat_chunk({"content": "Hi"})
    chunk["model"] = "gpt-4o-2024-05-13"
    body = sse([chunk, {"id": "c", "choices": [], "usage": usage}], named=False)
    rec = run("chat.completions", body, model="gpt-4o")
    assert rec.price_version == "test:gpt-4o-2024-05-13@2026-11-30"


def test_responses_web_search_and_hidden_reasoning() -> None:
    body = sse(
        [
            {"type": "response.created", "response": {"id": "r", "model": "gpt-5-mini"}},
            {"type": "response.output_item.added", "item": {"type": "web_search_call"}},
            {"type": "response.reasoning_summary_text.delta", "delta": "Searching…"},
            *({"type": "response.output_text.delta", "delta": w} for w in ("The", " answer", ".")),
        ],
        named=True,
    )
    rec = run("responses", body, ending="client_disconnect", model="gpt-5-mini")
    assert rec.server_tool_requests == {"web_search": 1}
    profile = PROFILES["openai-reasoning"]
    # three deltas, the message's framing (a cut stream's: in proportion to what it
    # streamed, whole from FRAMING_WHOLE_AT tokens on), and the search call's (whole:
    # a call that started has streamed its name)
    framing = profile.response_tokens * 3 / FRAMING_WHOLE_AT
    assert rec.output_tokens == round(3 + framing + profile.call_tokens)
    assert rec.estimate_method == "e3;output:deltas+hidden-reasoning"
    assert rec.input_source == "none" and rec.usage_source == "mixed"
    assert rec.output_breakdown is not None and rec.output_breakdown["summary"] == len("Searching…")
    cost = rec.output_tokens * Decimal(2) / M + Decimal("0.01")
    assert rec.cost_usd == f"{cost:.12f}"


def test_http_error_is_not_billed() -> None:
    rec = run("chat.completions", b"", status=429, model="gpt-4o", request={"messages": []})
    assert rec.outcome == "http_error"
    assert (rec.input_source, rec.output_source, rec.usage_source) == ("none",) * 3
    assert rec.input_tokens is None and rec.output_tokens is None
    assert rec.cost_usd is None and rec.price_version is None and rec.estimate_method is None


def test_a_request_that_got_no_response_is_not_billed() -> None:
    # connection refused, TLS failure, closed before headers: maybe never reached the provider
    meter = StreamMeter("chat.completions", record=StreamRecord(model="gpt-4o"))
    rec = meter.finish(ending="upstream_disconnect", transport_error="server closed connection")
    counts = count_request(
        json.dumps({"messages": [{"role": "user", "content": "x" * 400}]}).encode(),
        "chat.completions",
    )
    complete_usage(rec, meter.interpreter.obs, counts, PRICES, None)
    assert rec.outcome == "upstream_disconnect" and rec.http_status is None
    assert (rec.input_source, rec.output_source, rec.usage_source) == ("none",) * 3
    assert rec.input_tokens is None and rec.cost_usd is None


def test_a_cut_after_headers_is_still_billed() -> None:
    rec = run(
        "chat.completions",
        b"",
        ending="upstream_disconnect",
        model="gpt-4o",
        request={"messages": [{"role": "user", "content": "x" * 400}]},
    )
    assert rec.http_status == 200 and rec.input_source == "estimated"
    assert rec.cost_usd is not None


def test_unpriced_model_has_sources_but_no_cost() -> None:
    chunk = chat_chunk({"content": "Hi"})
    chunk["model"] = "mystery-model-2026-01-01"
    rec = run("chat.completions", sse([chunk], named=False), model="mystery-model")
    assert rec.output_source == "estimated"
    assert rec.cost_usd is None and rec.price_version is None


def test_no_prices_leaves_cost_unset_and_no_obs_uses_the_record() -> None:
    rec = StreamRecord(endpoint="chat.completions", model="gpt-4o", outcome="truncated")
    rec.output_chars = 400
    complete_usage(rec, None, None, None, None)
    assert rec.output_tokens == 100 and rec.output_source == "estimated"
    assert rec.cost_usd is None
    apply_prices(rec, PRICES)
    assert rec.cost_usd == f"{100 * Decimal(10) / M:.12f}"


def test_completed_records_teach_the_estimator() -> None:
    estimator = Estimator(Calibration(min_samples=1))
    body = sse(
        [
            ANTHROPIC_START,
            text_delta("y" * 1000),
            {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 503}},
            {"type": "message_stop"},
        ],
        named=True,
    )
    run("messages", body, estimator=estimator)
    assert estimator.calibration.ratio("claude-sonnet-4-5", "output", "latin") == 2.0
    cut = run(
        "messages", sse([ANTHROPIC_START, text_delta("z" * 100)], named=True), estimator=estimator
    )
    assert cut.estimate_method == "e3;output:chars/calibrated"
    assert cut.output_tokens == 50 + PROFILES["anthropic"].response_tokens


def test_new_fields_are_printed_and_serialisable() -> None:
    for name in (
        "service_tier",
        "cache_write_5m_tokens",
        "cache_write_1h_tokens",
        "server_tool_requests",
        "output_breakdown",
        "input_breakdown",
    ):
        assert name in FIELDS
    rec = run("messages", sse([ANTHROPIC_START, text_delta("ok")], named=True))
    assert json.loads(json.dumps(rec.to_dict()))["output_breakdown"]["latin"] == 2


FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "openai-chat" / "d61558011839.sse"


def test_real_capture_estimate_matches_its_reported_usage() -> None:
    meter = StreamMeter("chat.completions")
    meter.feed(FIXTURE.read_bytes())
    reported = meter.finish()
    assert reported.output_tokens == 177
    reported.output_tokens = None
    reported.output_source = "none"
    complete_usage(reported, meter.interpreter.obs, None, PRICES, None)
    assert reported.output_tokens == 177
    assert reported.estimate_method == "e3;output:deltas"


@pytest.mark.parametrize("endpoint", ["chat.completions", "responses", "messages"])
def test_empty_stream_estimates_zero_output(endpoint: str) -> None:
    rec = run(endpoint, b"", ending="client_disconnect", request={"messages": [], "input": []})
    assert rec.output_tokens == 0 and rec.output_source == "estimated"
    assert isinstance(rec.input_breakdown, dict)
    assert InputCounts.from_breakdown(rec.input_breakdown).messages == 0


# -- hidden reasoning, from the time the model spent before visible output -----

RESPONSE_CREATED = {"type": "response.created", "response": {"id": "r", "model": "gpt-5-mini"}}


def timed_responses(
    estimator: Estimator, *, thinking_s: float, reasoning_tokens: int | None
) -> StreamRecord:
    """A Responses stream of gpt-5-mini: created at t=0.5 s, its first text
    ``thinking_s`` later; completed with usage when ``reasoning_tokens`` is given,
    else cut after the text."""
    meter = StreamMeter("responses", record=StreamRecord(model="gpt-5-mini"), start=0.0)
    meter.headers(0.4, 200)
    meter.feed(sse([RESPONSE_CREATED], named=True), 0.5)
    text = [{"type": "response.output_text.delta", "delta": w} for w in ("The", " answer", ".")]
    meter.feed(sse(text, named=True), 0.5 + thinking_s)
    ending = "client_disconnect"
    if reasoning_tokens is not None:
        usage = {
            "input_tokens": 10,
            "output_tokens": reasoning_tokens + 3,
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        }
        done = {"type": "response.completed", "response": {"id": "r", "usage": usage}}
        meter.feed(sse([done], named=True), 0.6 + thinking_s)
        ending = "eof"
    rec = meter.finish(0.7 + thinking_s, ending=ending)
    complete_usage(rec, meter.interpreter.obs, None, PRICES, estimator)
    return rec


def test_hidden_reasoning_of_a_cut_stream_is_estimated_from_thinking_time() -> None:
    estimator = Estimator(Calibration(min_samples=3))
    # completed streams of the model: 200 reasoning tokens per second of thinking
    for seconds in (2.0, 4.0, 8.0):
        done = timed_responses(estimator, thinking_s=seconds, reasoning_tokens=int(200 * seconds))
        assert done.output_source == "reported"
    cut = timed_responses(estimator, thinking_s=5.0, reasoning_tokens=None)
    profile = PROFILES["openai-reasoning"]
    assert cut.output_source == "estimated"
    assert cut.estimate_method == "e3;output:deltas+reasoning-from-time"
    assert cut.reasoning_tokens == 1000
    assert cut.output_tokens == 3 + profile.response_tokens + 1000


def test_without_a_learned_rate_hidden_reasoning_stays_a_lower_bound() -> None:
    estimator = Estimator(Calibration(min_samples=3))
    # two completed streams are not enough to learn from; a replay has no timings
    for seconds in (2.0, 4.0):
        timed_responses(estimator, thinking_s=seconds, reasoning_tokens=int(200 * seconds))
    cut = timed_responses(estimator, thinking_s=5.0, reasoning_tokens=None)
    assert cut.estimate_method == "e3;output:deltas+hidden-reasoning"
    assert cut.reasoning_tokens is None
    timed_responses(estimator, thinking_s=8.0, reasoning_tokens=1600)
    replay = run(
        "responses",
        sse([RESPONSE_CREATED], named=True),
        ending="truncated",
        model="gpt-5-mini",
        estimator=estimator,
    )
    assert replay.estimate_method == "e3;output:chars/default+hidden-reasoning"


def test_a_newer_claude_counts_its_own_tokens() -> None:
    # the same text: Claude Opus 4.7's tokenizer makes about 1.3 times the tokens
    start = {
        **ANTHROPIC_START,
        "message": {**ANTHROPIC_START["message"], "model": "claude-opus-4-7"},
    }
    old = run("messages", sse([ANTHROPIC_START, text_delta("word " * 200)], named=True))
    new = run("messages", sse([start, text_delta("word " * 200)], named=True))
    assert old.output_tokens is not None and new.output_tokens is not None
    assert new.output_tokens >= 1.3 * old.output_tokens
    # and they are calibrated apart
    estimator = Estimator(Calibration(min_samples=1))
    done = [
        text_delta("y" * 1000),
        {"type": "message_delta", "delta": {}, "usage": {"output_tokens": 403}},
        {"type": "message_stop"},
    ]
    run("messages", sse([start, *done], named=True), estimator=estimator)
    assert estimator.calibration.ratio("anthropic-new", "output", "latin") == 2.5
    assert estimator.calibration.samples("anthropic", "output", "latin") == 0


def test_the_counts_at_hand_give_what_the_breakdowns_give() -> None:
    """``complete_usage`` estimates and learns from the request's and the stream's
    counts as made, not as read back from the record's breakdowns: the same tokens
    and the same lessons, and the input's tokenizer is named (a breakdown keeps its
    count, not its name)."""
    body = sse([chat_chunk({"content": t}) for t in ("Hello", ",", " world")], named=False)
    request = json.dumps({"messages": [{"role": "user", "content": "調和 " * 300}]}).encode()
    counts = count_request(
        request, "chat.completions", counter=lambda s: len(s) // 2, encoding="o200k_base"
    )
    assert counts is not None
    live, again = Estimator(Calibration(min_samples=1)), Estimator(Calibration(min_samples=1))
    meter = StreamMeter("chat.completions", record=StreamRecord(model="gpt-4o"))
    meter.headers(None, 200)
    meter.feed(body)
    rec = meter.finish(ending="eof")
    complete_usage(rec, meter.interpreter.obs, counts, PRICES, live)
    assert rec.estimate_method == "e3;input:tokenizer/o200k_base;output:deltas"
    # the stored row estimated again: the same figures from its breakdowns
    stored = StreamRecord(**{name: getattr(rec, name) for name in FIELDS})
    stored.input_tokens = stored.output_tokens = stored.reasoning_tokens = None
    complete_usage(stored, None, None, PRICES, None)
    assert (stored.input_tokens, stored.output_tokens) == (rec.input_tokens, rec.output_tokens)
    assert stored.estimate_method == "e3;input:tokenizer/unknown;output:deltas"
    # a record with reported usage teaches the same from its counts as from its breakdowns
    for taught in (rec, stored):
        taught.input_tokens, taught.output_tokens = 700, 40
        taught.input_source = taught.output_source = "reported"
    live.observe(rec, output=OutputCounts.from_observations(meter.interpreter.obs), request=counts)
    again.observe(stored)
    assert live.calibration.to_dict() == again.calibration.to_dict() != {}


@pytest.mark.parametrize(
    ("method", "name"),
    [
        ("e3;input:tokenizer/o200k_base;output:deltas", "o200k_base"),
        ("e3;input:tokenizer/cl100k_base+files-uncounted", "cl100k_base"),
        ("e3;input:tokenizer/unknown;output:deltas", None),
        ("e3;input:chars/default;output:tokenizer/o200k_base", None),
        ("e3;output:deltas", None),
        (None, None),
    ],
)
def test_the_input_tokenizer_is_read_back_from_the_method(
    method: str | None, name: str | None
) -> None:
    """A breakdown keeps a tokenizer's count, not its name; re-metering a stored
    body names the tokenizer that the stored method named for the input."""
    assert input_tokenizer(method) == name
