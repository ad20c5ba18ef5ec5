"""Unit tests of recorder/core/estimate.py, counts.py and model_families.py."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from recorder.core import StreamMeter, model_families
from recorder.core.counts import InputCounts, OutputCounts, count_request
from recorder.core.estimate import FRAMING_WHOLE_AT, Calibration, Estimator
from recorder.core.model_families import PROFILES, family_for, hides_reasoning, model_base
from recorder.core.protocols.base import Observations
from recorder.core.record import StreamRecord
from recorder.simulate import Simulator
from tests.kit.exchanges import MESSAGES, RESPONSES, exchange, request_bytes, sim

__all__ = ["sim"]  # the simulator that keeps what it sent (a fixture)


def by_width(text: str) -> tuple[int, int, int]:
    """(ascii, alphabetic, cjk) by code point, the slow obvious way."""
    a = n = w = 0
    for ch in text:
        if ord(ch) < 0x80:
            a += 1
        elif ord(ch) < 0x800:
            n += 1
        else:
            w += 1
    return a, n, w


def counts_of(obs: Observations) -> tuple[int, int, int]:
    return (
        obs.text_chars - obs.alphabetic_chars - obs.cjk_chars,
        obs.alphabetic_chars,
        obs.cjk_chars,
    )


# -- counting the output as it passes ---------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "Hello, world",
        "こんにちは、世界。今日は",
        "Привет, как дела? 😀 café",
        "x" * 50 + "é",
        "\U0002000b漢字",  # astral CJK
        "a\ud800b",  # a lone surrogate (never from JSON, but must not raise)
        "",
    ],
)
def test_writing_systems_are_counted_exactly(text: str) -> None:
    obs = Observations()
    assert obs.add_text(text) == len(text)
    assert counts_of(obs) == by_width(text)


@given(st.lists(st.text(max_size=40), max_size=20))
def test_writing_system_counts_add_up_over_deltas(pieces: list[str]) -> None:
    obs = Observations()
    for piece in pieces:
        obs.add_text(piece)
    assert counts_of(obs) == by_width("".join(pieces))
    assert obs.output_deltas == sum(1 for p in pieces if p)


def test_output_kinds_are_kept_apart_and_summaries_are_not_deltas() -> None:
    obs = Observations()
    obs.add_text("Hello")
    obs.add_reasoning("thinking…")
    obs.add_tool('{"a":1}')
    obs.add_summary("**Summary**")
    obs.add_text("")
    obs.add_text(None)
    obs.add_tool(42)
    assert (obs.text_chars, obs.reasoning_chars, obs.tool_chars, obs.summary_chars) == (
        14,
        9,
        7,
        11,
    )
    assert obs.output_deltas == 3
    counts = OutputCounts.from_observations(obs)
    assert (counts.latin, counts.alphabetic, counts.cjk) == (13, 0, 1)  # "…" is U+2026
    assert OutputCounts.from_breakdown(counts.to_breakdown()) == counts


def wire(endpoint: str, payloads: list[dict[str, Any]]) -> bytes:
    out = bytearray()
    for payload in payloads:
        data = json.dumps(payload, ensure_ascii=False).encode()
        if endpoint == "chat.completions":
            out += b"data: " + data + b"\n\n"
        else:
            out += b"event: " + payload["type"].encode() + b"\ndata: " + data + b"\n\n"
    return bytes(out)


def test_chat_stream_counts_text_reasoning_and_tool_arguments() -> None:
    chunk = {"id": "c", "model": "deepseek-reasoner", "service_tier": "default"}
    body = wire(
        "chat.completions",
        [
            {**chunk, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
            {**chunk, "choices": [{"index": 0, "delta": {"reasoning_content": "Hmm"}}]},
            {**chunk, "choices": [{"index": 0, "delta": {"content": "日本"}}]},
            {
                **chunk,
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "tool_calls": [
                                {
                                    "index": 0,
                                    "id": "t",
                                    "function": {"name": "f", "arguments": "{}"},
                                }
                            ]
                        },
                    }
                ],
            },
        ],
    )
    meter = StreamMeter("chat.completions")
    meter.feed(body)
    meter.finish()
    obs = meter.interpreter.obs
    assert (obs.text_chars, obs.reasoning_chars, obs.tool_chars, obs.cjk_chars) == (5, 3, 2, 2)
    assert obs.output_deltas == 3
    assert obs.service_tier == "default"
    assert obs.output_chars == obs.text_chars + obs.tool_chars + obs.summary_chars


def test_responses_stream_counts_summaries_apart_and_whole_arguments() -> None:
    body = wire(
        "responses",
        [
            {"type": "response.created", "response": {"id": "r", "service_tier": "auto"}},
            {"type": "response.reasoning_summary_text.delta", "delta": "**Plan**"},
            {"type": "response.output_item.added", "item": {"type": "local_shell_call"}},
            {
                "type": "response.output_item.done",
                "item": {"type": "local_shell_call", "action": {"command": ["ls"]}},
            },
            {"type": "response.output_item.added", "item": {"type": "web_search_call"}},
            {"type": "response.output_text.delta", "delta": "Done."},
            {
                "type": "response.completed",
                "response": {"id": "r", "service_tier": "default", "usage": None},
            },
        ],
    )
    meter = StreamMeter("responses")
    meter.feed(body)
    rec = meter.finish()
    obs = meter.interpreter.obs
    assert obs.summary_chars == 8 and obs.text_chars == 5
    assert obs.unstreamed_chars == len('{"command":["ls"]}')
    assert obs.output_deltas == 1
    assert obs.service_tier == "default"  # the final word, not the request's "auto"
    assert obs.server_tools == {"web_search": 1}
    assert rec.output_chars == 13  # unstreamed arguments are not output deltas


# -- names -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "base"),
    [
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("claude-3-5-sonnet-latest", "claude-3-5-sonnet"),
        ("openai/gpt-4.1", "gpt-4.1"),
        ("us.anthropic.claude-3-5-haiku-20241022-v1:0", "claude-3-5-haiku"),
        ("GPT-4o-mini", "gpt-4o-mini"),
        ("o3", "o3"),
    ],
)
def test_model_base(name: str, base: str) -> None:
    assert model_base(name) == base


@pytest.mark.parametrize(
    ("model", "endpoint", "family"),
    [
        ("gpt-4o-2024-08-06", "chat.completions", "openai-o200k"),
        ("gpt-4.1-nano", "responses", "openai-o200k"),
        ("gpt-5-mini", "responses", "openai-reasoning"),
        ("o4-mini", "chat.completions", "openai-reasoning"),
        ("gpt-4-turbo", "chat.completions", "openai-cl100k"),
        ("gpt-3.5-turbo", "chat.completions", "openai-cl100k"),
        ("claude-opus-4-1", "messages", "anthropic"),
        ("claude-opus-4-1-20250805", "messages", "anthropic"),
        ("claude-sonnet-4-5-20250929", "messages", "anthropic"),
        ("claude-opus-4-6", "messages", "anthropic"),
        ("claude-3-5-sonnet-20241022", "messages", "anthropic"),
        ("claude-3-haiku-20240307", "messages", "anthropic"),
        # the newer tokenizer: Claude Opus 4.7 and later
        ("claude-opus-4-7", "messages", "anthropic-new"),
        ("claude-opus-4-8", "messages", "anthropic-new"),
        ("claude-sonnet-5", "messages", "anthropic-new"),
        ("claude-haiku-5-1-20270101", "messages", "anthropic-new"),
        ("us.anthropic.claude-opus-4-7-v1:0", "chat.completions", "anthropic-new"),
        ("anthropic/claude-sonnet-5", "chat.completions", "anthropic-new"),
        ("deepseek-chat", "chat.completions", "default"),
        (None, "messages", "anthropic"),
        (None, "chat.completions", "default"),
    ],
)
def test_family_for(model: str | None, endpoint: str, family: str) -> None:
    assert family_for(model, endpoint) == family


def test_a_huge_model_name_is_read_but_not_remembered() -> None:
    """A request may name any string as its model: a name no real model has (over
    CACHED_NAME characters) is read like any other, and the lookups' caches, which
    live as long as the proxy, keep none of them."""
    kept = (model_families._remembered_base.cache_info(), _family_cache())
    for i in range(50):
        name = "claude-opus-4-7-" + "x" * 100_000 + str(i)
        assert model_base(name) == name
        assert family_for(name, "chat.completions") == "anthropic-new"
        assert family_for("gpt-4o-" + "y" * 100_000, "responses") == "openai-o200k"
    after = (model_families._remembered_base.cache_info(), _family_cache())
    assert [c.currsize for c in after] == [c.currsize for c in kept]
    name = uuid.uuid4().hex.ljust(model_families.CACHED_NAME, "x")  # the longest remembered
    assert family_for(name, "messages") == "anthropic"
    assert _family_cache().misses == after[1].misses + 1
    assert family_for(name, "messages") == "anthropic"
    assert _family_cache().hits == after[1].hits + 1


def _family_cache():  # type: ignore[no-untyped-def]
    return model_families._remembered_family.cache_info()


def test_hidden_reasoning_is_openai_reasoning_models_only() -> None:
    assert hides_reasoning("gpt-5-mini-2025-08-07", "responses")
    assert hides_reasoning("o3", "chat.completions")
    assert not hides_reasoning("gpt-4o", "chat.completions")
    assert not hides_reasoning("deepseek-reasoner", "chat.completions")
    assert not hides_reasoning("claude-sonnet-4-5", "messages")


# -- output estimates --------------------------------------------------------------


def test_per_token_deltas_are_the_count_on_openai_protocols() -> None:
    counts = OutputCounts(latin=608, deltas=177)
    est = Estimator().output("gpt-4o-2024-08-06", "chat.completions", counts)
    assert (est.tokens, est.method) == (177, "deltas")


def test_batched_deltas_fall_back_to_characters() -> None:
    counts = OutputCounts(latin=4000, deltas=20)  # 200 characters a delta: batched
    est = Estimator().output("gpt-4o", "chat.completions", counts)
    assert est.method == "chars/default"
    assert est.tokens == 1000


def test_anthropic_never_counts_deltas() -> None:
    counts = OutputCounts(latin=360, deltas=100)
    est = Estimator().output("claude-sonnet-4-5", "messages", counts)
    assert est.method == "chars/default"
    assert est.tokens == 100 + PROFILES["anthropic"].response_tokens


def test_japanese_costs_more_tokens_per_character_than_english() -> None:
    english = Estimator().output("claude-sonnet-4-5", "messages", OutputCounts(latin=3600))
    japanese = Estimator().output("claude-sonnet-4-5", "messages", OutputCounts(cjk=3600))
    assert japanese.tokens > 3 * english.tokens


def test_tool_calls_add_their_framing() -> None:
    bare = Estimator().output("claude-sonnet-4-5", "messages", OutputCounts(tool=300))
    call = Estimator().output("claude-sonnet-4-5", "messages", OutputCounts(tool=300, tool_calls=1))
    assert call.tokens - bare.tokens == PROFILES["anthropic"].call_tokens


def test_nothing_received_estimates_zero() -> None:
    est = Estimator().output("gpt-4o", "chat.completions", OutputCounts())
    assert est.tokens == 0


def test_reasoning_share_and_flags() -> None:
    est = Estimator().output(
        "deepseek-reasoner", "chat.completions", OutputCounts(latin=400, reasoning=300, deltas=100)
    )
    assert est.tokens == 100 and est.reasoning_tokens == 75
    hidden = Estimator().output("gpt-5-mini", "responses", OutputCounts(latin=40, deltas=10))
    assert hidden.method == "deltas+hidden-reasoning"
    assert hidden.reasoning_tokens is None  # unknown, not zero
    thinking = Estimator().output(
        "claude-opus-4-5", "messages", OutputCounts(latin=72, reasoning=36)
    )
    assert thinking.method.endswith("+summarised-thinking")
    full = Estimator().output("claude-3-7-sonnet", "messages", OutputCounts(latin=72, reasoning=36))
    assert full.method == "chars/default"


def test_unstreamed_arguments_are_counted_in_either_method() -> None:
    counts = OutputCounts(latin=40, deltas=10, unstreamed=30, tool_calls=1)
    est = Estimator().output("gpt-4o", "responses", counts)
    assert est.tokens == 10 + 10 + PROFILES["openai-o200k"].call_tokens


def cut_by_the_simulator(
    sim: Simulator, path: str, body: dict[str, Any], output_tokens: int
) -> tuple[int, OutputCounts, StreamRecord]:
    """The simulator's stream reset once it has sent ``output_tokens`` by its token
    rule (one per output delta): that truth, and the counts and record a meter
    makes of the bytes it wrote."""
    model = str(body["model"])
    for events in range(1, 40):
        wanted = {**body, "model": f"{model}+rst={events}"}
        n = len(sim.sent)
        exchange(sim.port, request_bytes(path, json.dumps(wanted).encode()))
        sent = sim.wait_sent_blocking(list(sim.sent)[n])
        if sent.output_tokens_sent < output_tokens:
            continue
        assert sent.output_tokens_sent == output_tokens and sent.body is not None
        endpoint = sent.endpoint
        meter = StreamMeter(endpoint, start=0.0)
        meter.headers(0.01, 200)
        meter.feed(bytes(sent.body), 0.1)
        record = meter.finish(0.2, ending="upstream_disconnect")
        return output_tokens, OutputCounts.from_observations(meter.interpreter.obs), record
    raise AssertionError(f"the simulator never sent {output_tokens} output tokens")


HARMONY = [{"role": "user", "content": "hi"}]


def test_a_short_cut_is_not_billed_at_several_times_what_was_streamed(sim: Simulator) -> None:
    """Against the simulator's truth, a Messages stream reset after 5 output tokens
    and a Responses stream cut after 2 deltas. A cut stream never produced its
    closing framing: its per-response allowance is scaled to what it produced
    (at most 1/5 of it below FRAMING_WHOLE_AT tokens), where the whole allowance
    billed these at 2.4 and 3 times what was streamed.

    The bounds: on Responses the deltas are the tokens and the allowance adds at
    most a fifth of them (2 * 1.2, rounded: 2). On Messages the count comes from
    characters: the simulator's deltas are whole words of plain prose (32
    characters for 5 tokens), which Claude's built-in ratio (3.6 characters a
    token, fitted on captures rich in code and markup) makes 8.9 tokens, and the
    allowance adds at most 15 % of that: twice the truth at most."""
    truth, counts, record = cut_by_the_simulator(
        sim,
        MESSAGES,
        {"model": "claude-sonnet-4-5", "max_tokens": 100, "stream": True, "messages": HARMONY},
        5,
    )
    assert record.interrupted
    cut = Estimator().output("claude-sonnet-4-5", "messages", counts, cut=True)
    assert truth <= cut.tokens <= 2 * truth, (cut, counts)
    whole = Estimator().output("claude-sonnet-4-5", "messages", counts)
    assert whole.tokens - cut.tokens >= 2  # the allowance was most of the excess

    truth, counts, record = cut_by_the_simulator(
        sim,
        RESPONSES,
        {"model": "gpt-5", "stream": True, "input": "Tell me about harmony in music."},
        2,
    )
    assert record.interrupted and counts.deltas == 2
    cut = Estimator().output("gpt-5", "responses", counts, cut=True)
    assert cut.method == "deltas+hidden-reasoning"
    assert truth <= cut.tokens <= truth * (1 + 4 / FRAMING_WHOLE_AT), cut


def test_a_complete_short_response_keeps_its_whole_allowance() -> None:
    """Complete responses of a handful of tokens carry the allowance whole (a
    captured Responses stream of 8 deltas reported 12 output tokens)."""
    counts = OutputCounts(latin=40, deltas=8)
    est = Estimator().output("gpt-5", "responses", counts)
    assert est.tokens == 8 + PROFILES["openai-reasoning"].response_tokens == 12


@given(
    st.integers(0, 400),
    st.integers(0, 400),
    st.integers(0, 200),
    st.integers(0, 3),
    st.sampled_from(
        [
            ("gpt-5", "responses"),
            ("claude-sonnet-4-5", "messages"),
            ("claude-opus-4-7", "messages"),
            ("gpt-4o", "chat.completions"),
        ]
    ),
)
def test_a_cut_streams_allowance_is_in_proportion_to_what_it_produced(
    latin: int, tool: int, deltas: int, calls: int, where: tuple[str, str]
) -> None:
    model, endpoint = where
    counts = OutputCounts(latin=latin, tool=tool, deltas=deltas, tool_calls=calls)
    est = Estimator()
    whole = est.output(model, endpoint, counts).tokens
    cut = est.output(model, endpoint, counts, cut=True).tokens
    profile = PROFILES[model_families.family_for(model, endpoint)]
    bare = est.output(model, endpoint, OutputCounts(latin=latin, tool=tool, deltas=deltas))
    produced = bare.tokens - (profile.response_tokens if latin else 0)
    allowance = cut - produced - calls * profile.call_tokens
    # never more than the whole allowance, never more than a fifth of the output
    assert cut <= whole
    assert allowance <= min(profile.response_tokens, produced / 5) + 1  # rounding
    if produced >= FRAMING_WHOLE_AT + 1:
        assert cut == whole


# -- request bodies ----------------------------------------------------------------


def test_count_request_chat() -> None:
    body = {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "日本語で"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                ],
            },
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "f", "arguments": '{"x":1}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        ],
        "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
        "stream": True,
    }
    counts = count_request(json.dumps(body, ensure_ascii=False).encode(), "chat.completions")
    assert counts is not None
    assert counts.messages == 4
    assert counts.images == 1
    assert counts.cjk == 4
    assert counts.latin == len("Be brief.") + len("f") + len("ok")
    assert counts.tools == 1
    tools_json = json.dumps(body["tools"], separators=(",", ":"))
    assert counts.tool == len('{"x":1}') + len(tools_json)


def test_count_request_responses_and_messages() -> None:
    responses = {
        "instructions": "Answer.",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Hi"}]},
            {"type": "reasoning", "encrypted_content": "gAAAA" * 100, "summary": []},
            {"type": "function_call", "call_id": "x", "name": "f", "arguments": "{}"},
            {"type": "input_file", "file_id": "file-1"},
        ],
    }
    counts = count_request(json.dumps(responses).encode(), "responses")
    assert counts is not None
    assert (counts.messages, counts.latin, counts.tool, counts.files) == (5, 10, 2, 1)
    messages = {
        "system": [{"type": "text", "text": "Sys", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": "Hello"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t", "name": "f", "input": {"a": 1}}],
            },
            {"role": "user", "content": [{"type": "image", "source": {"data": "AAAA"}}]},
        ],
    }
    counts = count_request(json.dumps(messages).encode(), "messages")
    assert counts is not None
    assert (counts.messages, counts.latin, counts.tool, counts.images) == (4, 9, 7, 1)


def test_count_request_keeps_only_counts() -> None:
    counts = count_request(
        b'{"messages": [{"role": "user", "content": "secret prompt"}]}', "chat.completions"
    )
    assert counts is not None
    assert all(isinstance(v, int) for v in counts.to_breakdown().values())
    assert "secret" not in repr(counts)


@pytest.mark.parametrize("body", [b"", b"not json", b"[1, 2]", b'"text"'])
def test_count_request_unreadable(body: bytes) -> None:
    assert count_request(body, "chat.completions") is None


def test_input_estimate_with_and_without_a_tokenizer() -> None:
    body = json.dumps({"messages": [{"role": "user", "content": "x" * 400}]}).encode()
    plain = count_request(body, "chat.completions")
    assert plain is not None
    est = Estimator().input("gpt-4o", "chat.completions", plain)
    assert est.method == "chars/default"
    profile = PROFILES["openai-o200k"]
    assert est.tokens == 100 + profile.message_tokens + profile.request_tokens
    exact = count_request(body, "chat.completions", counter=lambda s: len(s) // 2, encoding="fake")
    assert exact is not None and exact.text_tokens == 200
    est = Estimator().input("gpt-4o", "chat.completions", exact)
    assert est.method == "tokenizer/fake"
    assert est.tokens == 200 + profile.message_tokens + profile.request_tokens


def test_input_estimate_adds_images_tools_and_flags_files() -> None:
    counts = InputCounts(latin=360, messages=1, images=2, tools=1, files=1)
    est = Estimator().input("claude-sonnet-4-5", "messages", counts)
    p = PROFILES["anthropic"]
    assert est.tokens == round(
        100 + p.message_tokens + p.request_tokens + p.tools_prompt_tokens + 2 * p.image_tokens
    )
    assert est.method == "chars/default+files-uncounted"


# -- calibration ---------------------------------------------------------------------


def completed(model: str, chars: int, tokens: int, **extra: Any) -> StreamRecord:
    rec = StreamRecord(endpoint="messages", model=model, response_model=model, outcome="completed")
    rec.output_tokens = tokens
    rec.output_source = "reported"
    rec.output_breakdown = OutputCounts(latin=chars).to_breakdown()
    for key, value in extra.items():
        setattr(rec, key, value)
    return rec


def test_calibration_learns_a_models_ratio_after_enough_records() -> None:
    est = Estimator()
    base = PROFILES["anthropic"].response_tokens
    for _ in range(19):
        est.observe(completed("claude-x-1", 2000, round(1000 + base)))
    assert est.output("claude-x-1", "messages", OutputCounts(latin=2000)).method == "chars/default"
    est.observe(completed("claude-x-1", 2000, round(1000 + base)))
    learned = est.output("claude-x-1", "messages", OutputCounts(latin=2000))
    assert learned.method == "chars/calibrated"
    assert learned.tokens == round(1000 + base)
    # the family learned too: another Claude model falls back to it
    assert (
        est.output("claude-y-2", "messages", OutputCounts(latin=2000)).method == "chars/calibrated"
    )
    # an unrelated family did not
    assert (
        est.output("gpt-4o", "chat.completions", OutputCounts(latin=2000)).method == "chars/default"
    )


def test_calibration_is_a_median_and_skips_what_it_cannot_attribute() -> None:
    cal = Calibration(min_samples=3)
    est = Estimator(cal)
    for _ in range(3):
        est.observe(completed("claude-z", 3000, 1003))
    est.observe(completed("claude-z", 3000, 30003))  # one wild record
    assert cal.ratio("claude-z", "output", "latin") == pytest.approx(3.0)
    before = cal.samples("claude-z", "output", "latin")
    est.observe(completed("claude-z", 3000, 10))  # too small to learn from
    est.observe(completed("claude-z", 3000, 1003, output_source="estimated"))
    est.observe(completed("claude-z", 3000, 1003, reasoning_tokens=500))  # hidden reasoning
    # a usage of several parts (an advisor's output never streamed): no ratio in it
    parts = [{"kind": "advisor_message", "model": "claude-o", "output_tokens": 900}]
    est.observe(completed("claude-z", 3000, 1903, usage_parts=parts))
    assert cal.samples("claude-z", "output", "latin") == before


def test_calibration_round_trips() -> None:
    cal = Calibration(min_samples=1)
    cal.add("gpt-4o", "input", "latin", 400, 100)
    copy = Calibration.from_dict(json.loads(json.dumps(cal.to_dict())), min_samples=1)
    assert copy.ratio("gpt-4o", "input", "latin") == 4.0
    assert Calibration.from_dict({"bad": [1], "a|b": [1.0], "a|b|c": ["x"]}).ratios == {}


def test_input_calibration_from_records() -> None:
    est = Estimator(Calibration(min_samples=2))
    for _ in range(2):
        rec = StreamRecord(endpoint="chat.completions", model="gpt-4o", outcome="completed")
        rec.input_tokens = 507  # 500 text + 4 per message + 3 per request
        rec.input_source = "reported"
        rec.input_breakdown = InputCounts(latin=1000, messages=1).to_breakdown()
        est.observe(rec)
    got = est.input("gpt-4o", "chat.completions", InputCounts(latin=1000, messages=1))
    assert (got.tokens, got.method) == (507, "chars/calibrated")


@pytest.mark.parametrize(
    "extra",
    [
        {"previous_response_id": "resp_1"},
        {"conversation": "conv_1"},
        {"prompt": {"id": "pmpt_1", "version": "2"}},
    ],
)
def test_server_side_context_is_uncounted_input(extra: dict[str, object]) -> None:
    body = {"model": "gpt-5", "input": "and then?", **extra}
    counts = count_request(json.dumps(body).encode(), "responses")
    assert counts is not None and counts.files == 1  # a lower bound, never calibrated from
    plain = count_request(
        json.dumps({"model": "gpt-5", "input": "and then?"}).encode(), "responses"
    )
    assert plain is not None and plain.files == 0


def test_calibration_median_follows_its_window_exactly() -> None:
    """The median is kept from a sorted copy of the window: it must equal the
    median of the window's values after every record, as the window slides."""
    import random
    import statistics

    from recorder.core.estimate import Calibration

    rng = random.Random(7)
    cal = Calibration(min_samples=1, window=16)
    for i in range(400):
        # repeats, ties and clamped values (ratios outside 0.3..12) included
        chars = rng.choice([1, 2, 3, 4, 4, 7, 50, 1000])
        cal.add("gpt-4o", "output", "latin", chars, rng.choice([1, 2, 3, 4, 80]))
        if i % 3:  # read now and then only, so several adds happen between reads
            window = list(cal.ratios[("gpt-4o", "output", "latin")])
            assert cal.ratio("gpt-4o", "output", "latin") == statistics.median(window)
    restored = Calibration.from_dict(cal.to_dict(), min_samples=1, window=16)
    restored.add("gpt-4o", "output", "latin", 5, 1)
    window = list(restored.ratios[("gpt-4o", "output", "latin")])
    assert restored.ratio("gpt-4o", "output", "latin") == statistics.median(window)
