"""End to end: the official SDKs through a real mitmproxy with the recorder, in
reverse mode, against the simulator. Each record is checked against the
simulator's ground truth (what it really sent)."""

from __future__ import annotations

import asyncio
import hashlib
import http.client

import anthropic
import openai
import pytest

from recorder.core.keys import fingerprint
from recorder.core.record import StreamRecord
from recorder.simulate import SentRecord, Simulator
from tests.kit.proxy_thread import STALL_AFTER, RunningProxy

KEY = "sk-e2e-test-key-0042"
# Timing tolerance: the proxy's clock starts when the request reaches it, the
# simulator's when it has read the request, on one loaded 2-core machine.
TOL_MS = 150.0

MESSAGES = [{"role": "user", "content": "Say something about harmony."}]


def oai(proxy: RunningProxy) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url() + "/v1", api_key=KEY, max_retries=0, timeout=20)


def aoai(proxy: RunningProxy) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=proxy.url() + "/v1", api_key=KEY, max_retries=0, timeout=20)


def ant(proxy: RunningProxy) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=proxy.url(), api_key=KEY, max_retries=0, timeout=20)


def aant(proxy: RunningProxy) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=proxy.url(), api_key=KEY, max_retries=0, timeout=20)


def one_record(proxy: RunningProxy, sim: Simulator) -> tuple[StreamRecord, SentRecord]:
    (rec,) = proxy.sink.wait_for(1)
    assert rec.request_id is not None, rec
    sent = sim.wait_sent_blocking(rec.request_id)
    return rec, sent


def streamed_chat(
    proxy: RunningProxy, sim: Simulator, model: str, *, include_usage: bool = True
) -> tuple[StreamRecord, SentRecord]:
    """A streamed chat completion through the proxy with the OpenAI SDK, read to the
    end; its record, checked against what the simulator sent, and what it sent."""
    stream = oai(proxy).chat.completions.create(
        model=model,
        messages=MESSAGES,
        stream=True,
        stream_options={"include_usage": True} if include_usage else openai.omit,
    )
    for _ in stream:
        pass
    rec, sent = one_record(proxy, sim)
    assert_matches(rec, sent)
    return rec, sent


def chat_until_cut(proxy: RunningProxy, model: str) -> None:
    """A streamed chat completion read until it ends or is cut (the SDK sees the cut
    too: its error is expected here, the record says what happened)."""
    try:
        for _ in oai(proxy).chat.completions.create(model=model, messages=MESSAGES, stream=True):
            pass
    except (openai.APIError, openai.APIConnectionError):
        pass


def assert_matches(rec: StreamRecord, sent: SentRecord) -> None:
    """The record agrees with what the simulator sent, exactly where it can."""
    assert rec.endpoint == sent.endpoint
    assert rec.outcome == sent.outcome, (rec.outcome, sent.outcome, rec.transport_error)
    assert rec.streamed == sent.streamed
    assert rec.http_status == sent.http_status
    assert rec.response_id == sent.response_id
    assert rec.finish_reason == sent.finish_reason
    assert rec.output_chars == sent.output_chars
    assert rec.tool_calls == sent.tool_calls
    if sent.streamed:
        assert rec.events == sent.events
        assert rec.keepalives == sent.keepalives
    usage = sent.usage
    if usage is None:
        assert rec.output_source == "none" or rec.output_source == "estimated"
    else:
        assert rec.input_tokens == usage["input_tokens"]
        assert rec.output_tokens == usage["output_tokens"]
        assert rec.cache_read_tokens == usage.get("cache_read_tokens")
        assert rec.reasoning_tokens == usage.get("reasoning_tokens")
    assert rec.api_key_id == fingerprint(KEY, b"e2e-secret")
    if sent.first_output_ms is not None and rec.ttft_ms is not None:
        assert abs(rec.ttft_ms - sent.first_output_ms) <= TOL_MS, (
            rec.ttft_ms,
            sent.first_output_ms,
        )
    assert rec.parse_issues == 0 and rec.recorder_error is None


# -- the three protocols, streamed and not, sync and async ---------------------------


def test_openai_chat_stream_sync(records: RunningProxy, sim: Simulator) -> None:
    stream = oai(records).chat.completions.create(
        model="gpt-4o", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    rec, sent = one_record(records, sim)
    assert text == sent.text
    assert_matches(rec, sent)
    assert rec.outcome == "completed" and rec.include_usage is True
    assert rec.model == "gpt-4o" and rec.ttft_ms is not None


def test_openai_chat_without_include_usage(records: RunningProxy, sim: Simulator) -> None:
    stream = oai(records).chat.completions.create(
        model="gpt-4o-mini", messages=MESSAGES, stream=True
    )
    for _ in stream:
        pass
    rec, sent = one_record(records, sim)
    assert sent.usage is None
    assert_matches(rec, sent)
    assert rec.include_usage is False
    # not reported, billed all the same: estimated, and priced
    assert rec.input_source == rec.output_source == rec.usage_source == "estimated"
    assert rec.estimate_method is not None and rec.cost_usd is not None
    assert sent.planned_usage is not None
    assert rec.output_tokens == sent.planned_usage["output_tokens"]  # one token per delta


def test_openai_chat_json(records: RunningProxy, sim: Simulator) -> None:
    done = oai(records).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    rec, sent = one_record(records, sim)
    assert done.choices[0].message.content == sent.text
    assert_matches(rec, sent)
    assert rec.streamed is False and rec.usage_source == "reported"


def test_openai_chat_tools_and_reasoning(records: RunningProxy, sim: Simulator) -> None:
    rec, _ = streamed_chat(records, sim, "deepseek-reasoner+tools=2+reasoning")
    assert rec.tool_calls == 2 and rec.finish_reason == "tool_calls"


async def test_openai_chat_stream_async(records: RunningProxy, sim: Simulator) -> None:
    client = aoai(records)
    stream = await client.chat.completions.create(
        model="gpt-4o", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    async for _ in stream:
        pass
    await client.close()
    rec, sent = await asyncio.to_thread(one_record, records, sim)
    assert_matches(rec, sent)


def test_openai_responses_stream_sync(records: RunningProxy, sim: Simulator) -> None:
    with oai(records).responses.stream(model="gpt-5", input="Tell me about harmony.") as stream:
        final = stream.get_final_response()
    rec, sent = one_record(records, sim)
    assert final.output_text == sent.text
    assert_matches(rec, sent)
    assert rec.outcome == "completed" and rec.usage_source == "reported"


async def test_openai_responses_async_json(records: RunningProxy, sim: Simulator) -> None:
    client = aoai(records)
    resp = await client.responses.create(model="gpt-5", input="Tell me about harmony.")
    await client.close()
    rec, sent = await asyncio.to_thread(one_record, records, sim)
    assert resp.output_text == sent.text
    assert_matches(rec, sent)
    assert rec.streamed is False


def test_anthropic_stream_sync(records: RunningProxy, sim: Simulator) -> None:
    with ant(records).messages.stream(
        model="claude-sonnet-4-5+cache_read=20", max_tokens=400, messages=MESSAGES
    ) as stream:
        text = "".join(stream.text_stream)
    rec, sent = one_record(records, sim)
    assert text == sent.text
    assert_matches(rec, sent)
    assert rec.cache_read_tokens and rec.finish_reason == "end_turn"


async def test_anthropic_stream_async_with_thinking(records: RunningProxy, sim: Simulator) -> None:
    client = aant(records)
    async with client.messages.stream(
        model="claude-sonnet-4-5",
        max_tokens=2000,
        thinking={"type": "enabled", "budget_tokens": 1024},
        messages=MESSAGES,
    ) as stream:
        await stream.get_final_message()
    await client.close()
    rec, sent = await asyncio.to_thread(one_record, records, sim)
    assert_matches(rec, sent)
    assert rec.reasoning_tokens is not None and rec.reasoning_tokens > 0


def test_anthropic_json(records: RunningProxy, sim: Simulator) -> None:
    msg = ant(records).messages.create(model="claude-haiku-4-5", max_tokens=400, messages=MESSAGES)
    rec, sent = one_record(records, sim)
    assert msg.content[0].text == sent.text  # type: ignore[union-attr]
    assert_matches(rec, sent)


# -- rhythm: keepalives, stalls, time to first token -------------------------------


def test_keepalives_during_a_stall(records: RunningProxy, sim: Simulator) -> None:
    # a 1.5 s output silence with a keepalive every 0.2 s: one stall, keepalives counted
    rec, sent = streamed_chat(records, sim, "gpt-4o+keepalive=0.2+stall=1.5+ttft=0.3")
    assert sent.keepalives >= 7 and rec.keepalives == sent.keepalives
    assert rec.stalls == 1
    assert rec.stall_ms is not None and abs(rec.stall_ms - 1500.0) <= TOL_MS
    assert rec.max_keepalive_gap_ms is not None and abs(rec.max_keepalive_gap_ms - 200.0) <= TOL_MS
    assert rec.ttft_ms is not None and rec.ttft_ms >= 300.0
    assert [g.kind for g in rec.gaps].count("stall") == 1


def test_short_gaps_are_not_stalls(records: RunningProxy, sim: Simulator) -> None:
    rec, _ = streamed_chat(records, sim, "gpt-4o+delay=0.02", include_usage=False)
    assert rec.stalls == 0
    assert rec.max_output_gap_ms is not None and rec.max_output_gap_ms < STALL_AFTER * 1000


# -- endings -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fault", "outcome"),
    [
        ("rst=4", "upstream_disconnect"),
        ("fin=4", "upstream_disconnect"),
        ("rst=4+midevent", "upstream_disconnect"),
        ("eof+fin=4", "truncated"),
        ("eof", "completed"),
    ],
)
def test_upstream_cuts(records: RunningProxy, sim: Simulator, fault: str, outcome: str) -> None:
    chat_until_cut(records, f"gpt-4o+{fault}")
    rec, sent = one_record(records, sim)
    assert sent.outcome == outcome
    assert rec.outcome == outcome, rec.transport_error
    assert rec.events == sent.events
    assert rec.output_chars == sent.output_chars
    assert rec.interrupted is (outcome != "completed")


def test_stall_running_into_a_cut_counts(records: RunningProxy, sim: Simulator) -> None:
    chat_until_cut(records, "gpt-4o+stall=1.5@5+rst=5")
    rec, sent = one_record(records, sim)
    assert rec.outcome == "upstream_disconnect" == sent.outcome
    assert rec.stalls == 1


def test_client_disconnect_mid_stream(records: RunningProxy, sim: Simulator) -> None:
    stream = oai(records).chat.completions.create(
        model="gpt-4o+delay=0.05", messages=MESSAGES, stream=True
    )
    for n, _ in enumerate(stream):
        if n == 3:
            break
    stream.close()
    rec, sent = one_record(records, sim)
    assert rec.outcome == "client_disconnect" and rec.interrupted
    assert rec.transport_error is not None
    assert sent.transport == "client_gone"
    assert 0 < (rec.events or 0) < sent.planned_events


@pytest.mark.parametrize(
    ("path", "model"),
    [
        ("chat", "gpt-4o+error=5"),
        ("chat", "gpt-4o+error=5+error_done"),
        ("responses", "gpt-5+error=5"),
        ("responses", "gpt-5+error=5+error_shape=error"),
        ("messages", "claude-sonnet-4-5+error=5"),
        ("messages", "claude-sonnet-4-5+interrupt=6"),
    ],
)
def test_error_events_after_status_200(
    records: RunningProxy, sim: Simulator, path: str, model: str
) -> None:
    try:
        if path == "chat":
            chat_until_cut(records, model)
        elif path == "responses":
            for _ in oai(records).responses.create(model=model, input="hi", stream=True):
                pass
        else:
            for _ in ant(records).messages.create(
                model=model, max_tokens=400, messages=MESSAGES, stream=True
            ):
                pass
    except (openai.APIError, anthropic.APIError):
        pass
    rec, sent = one_record(records, sim)
    assert rec.outcome == "error" == sent.outcome
    assert rec.http_status == 200
    assert rec.error_message == sent.error_message
    assert rec.error_type == sent.error_type
    if "interrupt" in model:
        assert rec.error_message == "Response stream interrupted, please retry"


@pytest.mark.parametrize("status", [429, 500, 529])
def test_http_errors(records: RunningProxy, sim: Simulator, status: int) -> None:
    with pytest.raises(anthropic.APIStatusError):
        ant(records).messages.create(
            model=f"claude-sonnet-4-5+status={status}", max_tokens=10, messages=MESSAGES
        )
    rec, sent = one_record(records, sim)
    assert rec.outcome == "http_error" == sent.outcome
    assert rec.http_status == status
    assert rec.error_type == sent.error_type and rec.error_message == sent.error_message


# -- bytes: exactly what the upstream sent, compressed or not ------------------------


def raw_post(
    port: int, path: str, body: bytes, headers: dict[str, str]
) -> tuple[bytes, dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    conn.request("POST", path, body=body, headers=headers)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return data, {k.lower(): v for k, v in resp.getheaders()}


@pytest.mark.parametrize(
    "fault",
    [
        "",
        "compress=gzip",
        "compress=br",
        "compress=zstd",
        "compress=deflate",
        "crlf+bytewise",
        "bom",
    ],
)
def test_client_gets_the_upstream_bytes(records: RunningProxy, sim: Simulator, fault: str) -> None:
    body = (
        b'{"model": "gpt-4o' + (b"+" + fault.encode() if fault else b"") + b'", "stream": true,'
        b' "stream_options": {"include_usage": true},'
        b' "messages": [{"role": "user", "content": "' + "調和について".encode() + b'"}]}'
    )
    headers = {"content-type": "application/json", "x-sim-id": f"bytes-{fault or 'plain'}"}
    direct, _ = raw_post(sim.port, "/v1/chat/completions", body, headers)
    via, resp_headers = raw_post(records.port(), "/v1/chat/completions", body, headers)
    assert hashlib.sha256(via).hexdigest() == hashlib.sha256(direct).hexdigest()
    recs = records.sink.wait_for(1)
    rec = recs[0]
    sent = sim.wait_sent_blocking(rec.request_id or "")
    assert rec.outcome == "completed"
    assert rec.output_chars == sent.output_chars and rec.events == sent.events
    if fault.startswith("compress"):
        assert resp_headers.get("content-encoding") == fault.split("=")[1]
        assert records.recorder.health.decode_errors == 0


def test_sdk_default_accept_encoding_is_stripped_on_tapped_paths(
    records: RunningProxy, sim: Simulator
) -> None:
    # the simulator compresses when asked to ("compress": per Accept-Encoding);
    # the recorder removed the SDK's Accept-Encoding, so the stream came back plain
    stream = oai(records).chat.completions.create(
        model="gpt-4o+compress", messages=MESSAGES, stream=True
    )
    for _ in stream:
        pass
    rec, sent = one_record(records, sim)
    assert sent.content_encoding in (None, "identity")
    assert_matches(rec, sent)


def test_state_is_released(records: RunningProxy, sim: Simulator) -> None:
    client = oai(records)
    for i in range(20):
        model = "gpt-4o" if i % 2 else "gpt-4o+rst=3"
        try:
            for _ in client.chat.completions.create(model=model, messages=MESSAGES, stream=True):
                pass
        except (openai.APIError, openai.APIConnectionError):
            pass
    records.sink.wait_for(20)
    assert records.recorder.open_flows == 0
    assert records.recorder.health.in_flight == 0
    assert records.recorder.health.internal_errors == 0
