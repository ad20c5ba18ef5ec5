"""The simulator: protocol fidelity through the official SDKs, every fault on the wire.

One simulator (on its own thread) serves the whole module; raw checks use
plain sockets so that nothing between the test and the wire hides a fault.
Every delay is a few tens of milliseconds.
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic
import openai
import orjson
import pytest

from recorder.cli.replay import replay_stream
from recorder.simulate import FaultError, SentRecord, Simulator, parse_faults, run_in_thread, wire
from recorder.simulate.faults import split_model
from tests.kit.tls import self_signed

CHAT = "/v1/chat/completions"
RESPONSES = "/v1/responses"
MESSAGES = "/v1/messages"
ENDPOINT = {CHAT: "chat.completions", RESPONSES: "responses", MESSAGES: "messages"}
CLAUDE = "claude-sim-1"
WEATHER_CHAT = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city"],
        },
    },
}
WEATHER_RESPONSES = {"type": "function", "name": "get_weather", **WEATHER_CHAT["function"]}  # type: ignore[dict-item]
WEATHER_MESSAGES = {
    "name": "get_weather",
    "input_schema": WEATHER_CHAT["function"]["parameters"],  # type: ignore[index]
}


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with run_in_thread() as s:
        yield s


def body_for(
    path: str, text: str = "Hello there", stream: bool = True, **extra: Any
) -> dict[str, Any]:
    """A minimal request body for ``path``."""
    if path == CHAT:
        body: dict[str, Any] = {"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}
    elif path == RESPONSES:
        body = {"model": "gpt-5", "input": text}
    else:
        body = {
            "model": CLAUDE,
            "max_tokens": 1024,
            "messages": [{"role": "user", "content": text}],
        }
    body["stream"] = stream
    body.update(extra)
    return body


# --- a raw HTTP/1.1 client ----------------------------------------------------


@dataclass
class Raw:
    """One response as the socket delivered it."""

    status: int = 0
    headers: dict[str, str] = field(default_factory=dict)
    wire_bytes: bytes = b""
    body: bytes = b""  # transfer-decoded, still content-coded
    chunks: list[int] = field(default_factory=list)
    framing_complete: bool = False
    end: str = ""  # complete | eof | reset
    pieces: list[tuple[float, int]] = field(default_factory=list)  # (seconds, wire offset)
    t_headers: float | None = None

    @property
    def decoded(self) -> bytes:
        """The body with its content coding undone."""
        return wire.decode(self.headers.get("content-encoding", "identity"), self.body)

    @property
    def text(self) -> str:
        return self.decoded.decode()

    @property
    def request_id(self) -> str:
        return self.headers["x-sim-request"]

    def time_of(self, needle: bytes) -> float:
        """When the wire first carried ``needle`` (identity coding only)."""
        offset = self.wire_bytes.index(needle) + len(needle)
        return next(t for t, end in self.pieces if end >= offset)


def _parse(buf: bytes, eof: bool) -> Raw | None:
    """Parse what arrived; None if the response is not complete yet (and not at EOF)."""
    head_end = buf.find(b"\r\n\r\n")
    if head_end < 0:
        return Raw(wire_bytes=buf) if eof else None
    lines = buf[:head_end].decode("latin-1").split("\r\n")
    raw = Raw(status=int(lines[0].split(" ")[1]), wire_bytes=buf)
    for line in lines[1:]:
        k, _, v = line.partition(":")
        raw.headers[k.strip().lower()] = v.strip()
    rest = buf[head_end + 4 :]
    if "content-length" in raw.headers:
        n = int(raw.headers["content-length"])
        raw.body = rest[:n]
        raw.framing_complete = len(rest) >= n
    elif raw.headers.get("transfer-encoding") == "chunked":
        pos = 0
        body = bytearray()
        while True:
            eol = rest.find(b"\r\n", pos)
            if eol < 0:
                break
            size = int(rest[pos:eol], 16)
            if size == 0:
                raw.framing_complete = rest[eol + 2 : eol + 4] == b"\r\n"
                break
            if len(rest) < eol + 2 + size + 2:
                break
            body += rest[eol + 2 : eol + 2 + size]
            raw.chunks.append(size)
            pos = eol + 2 + size + 2
        raw.body = bytes(body)
    else:
        raw.body = rest
        raw.framing_complete = eof
    if not raw.framing_complete and not eof:
        return None
    return raw


def fetch(
    sim: Simulator,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
    *,
    method: str = "POST",
    sock: socket.socket | None = None,
    close: bool = True,
    timeout: float = 5.0,
) -> Raw:
    """Send one request and read its response off the socket."""
    own = sock is None
    if sock is None:
        sock = socket.create_connection(("127.0.0.1", sim.port), timeout=timeout)
    payload = b"" if body is None else (body if isinstance(body, bytes) else orjson.dumps(body))
    hdrs = {"host": f"127.0.0.1:{sim.port}", "content-type": "application/json"}
    if close:
        hdrs["connection"] = "close"
    hdrs.update(headers or {})
    hdrs["content-length"] = str(len(payload))
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items())
    t0 = time.monotonic()
    sock.sendall(head.encode() + b"\r\n" + payload)
    buf = b""
    pieces: list[tuple[float, int]] = []
    end = "eof"
    t_headers = None
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                break
            buf += data
            pieces.append((time.monotonic() - t0, len(buf)))
            if t_headers is None and b"\r\n\r\n" in buf:
                t_headers = time.monotonic() - t0
            if not close and _parse(buf, eof=False) is not None:
                break
    except ConnectionResetError:
        end = "reset"
    finally:
        if own:
            sock.close()
    raw = _parse(buf, eof=True)
    assert raw is not None
    raw.pieces = pieces
    raw.t_headers = t_headers
    raw.end = end if end == "reset" else ("complete" if raw.framing_complete else "eof")
    return raw


def sse_events(text: str) -> list[tuple[str | None, str]]:
    """(event, data) pairs of an LF-framed SSE body; comments dropped."""
    out = []
    for block in text.split("\n\n"):
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
        if data:
            out.append((name, "\n".join(data)))
    return out


def last(sim: Simulator) -> SentRecord:
    """The latest request's ground truth, once its response has ended."""
    rec = sim.last()
    assert rec is not None
    return sim.wait_sent_blocking(rec.request_id)


def replayed(raw: Raw, path: str) -> dict[str, Any]:
    """The recorder core's record of this body (no timings: a replay)."""
    return replay_stream(io.BytesIO(raw.decoded), ENDPOINT[path]).to_dict()


# --- basics -----------------------------------------------------------------------


def test_health(sim: Simulator) -> None:
    raw = fetch(sim, "/_sim/health", method="GET")
    assert raw.status == 200
    doc = orjson.loads(raw.body)
    assert doc["status"] == "ok"
    assert {"identity", "gzip", "deflate"} <= set(doc["encodings"])


def test_unknown_path_and_method(sim: Simulator) -> None:
    assert fetch(sim, "/v1/embeddings", {}).status == 404
    assert fetch(sim, CHAT, method="GET").status == 405


def test_bad_json_is_a_provider_400(sim: Simulator) -> None:
    raw = fetch(sim, CHAT, b"{not json")
    assert raw.status == 400
    assert "error" in orjson.loads(raw.body)
    raw = fetch(sim, MESSAGES, {"model": CLAUDE})
    assert raw.status == 400
    assert orjson.loads(raw.body)["type"] == "error"


def test_unknown_fault_is_refused_with_the_list(sim: Simulator) -> None:
    raw = fetch(sim, CHAT, body_for(CHAT), {"x-sim-fault": "stal=1"})
    assert raw.status == 400
    message = orjson.loads(raw.body)["error"]["message"]
    assert "unknown fault 'stal'" in message
    assert "keepalive=N" in message


def test_ground_truth_over_http_and_x_sim_id(sim: Simulator) -> None:
    raw = fetch(sim, CHAT, body_for(CHAT), {"x-sim-id": "my-test-1"})
    assert raw.request_id == "my-test-1"
    assert raw.headers["x-request-id"] == "my-test-1"
    doc = orjson.loads(fetch(sim, "/_sim/sent/my-test-1", method="GET").body)
    assert doc["outcome"] == "completed"
    assert doc["events"] == len(sse_events(raw.text))
    assert sim.wait_sent_blocking("my-test-1").events == doc["events"]
    assert "my-test-1" in orjson.loads(fetch(sim, "/_sim/sent", method="GET").body)["ids"]


def test_keep_alive_serves_several_requests_on_one_connection(sim: Simulator) -> None:
    with socket.create_connection(("127.0.0.1", sim.port), timeout=5) as s:
        a = fetch(sim, CHAT, body_for(CHAT), sock=s, close=False)
        b = fetch(sim, MESSAGES, body_for(MESSAGES, stream=False), sock=s, close=False)
        c = fetch(sim, CHAT, body_for(CHAT), sock=s)
    assert a.headers["connection"] == "keep-alive" and a.end == "complete"
    assert b.status == 200 and orjson.loads(b.body)["type"] == "message"
    assert c.end == "complete" and c.decoded == a.decoded


def test_chunked_request_body_and_http_1_0(sim: Simulator) -> None:
    payload = orjson.dumps(body_for(CHAT))
    chunked = b"".join(wire.chunk(payload[i : i + 7]) for i in range(0, len(payload), 7))
    with socket.create_connection(("127.0.0.1", sim.port), timeout=5) as s:
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nconnection: close\r\n"
            b"transfer-encoding: chunked\r\n\r\n" + chunked + wire.LAST_CHUNK
        )
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200") and b"data: [DONE]" in data
    with socket.create_connection(("127.0.0.1", sim.port), timeout=5) as s:
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.0\r\ncontent-length: %d\r\n\r\n%s"
            % (len(payload), payload)
        )
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    assert b"transfer-encoding" not in head and b"connection: close" in head
    assert body.endswith(b"data: [DONE]\n\n")


def test_expect_100_continue(sim: Simulator) -> None:
    raw = fetch(sim, CHAT, body_for(CHAT, stream=False), {"expect": "100-continue"})
    assert raw.wire_bytes.startswith(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200")


# --- determinism and content ------------------------------------------------------


@pytest.mark.parametrize("path", [CHAT, RESPONSES, MESSAGES])
@pytest.mark.parametrize("stream", [True, False])
def test_same_request_same_bytes(sim: Simulator, path: str, stream: bool) -> None:
    body = body_for(path, "Tell me about Tokyo", stream=stream)
    a = fetch(sim, path, body)
    b = fetch(sim, path, body)
    assert a.status == 200
    assert a.body == b.body
    assert a.request_id != b.request_id
    other = fetch(sim, path, body_for(path, "Tell me about Paris", stream=stream))
    assert other.body != a.body


def test_same_bytes_when_compressed(sim: Simulator) -> None:
    body = body_for(MESSAGES)
    for coding in wire.available():
        a = fetch(sim, MESSAGES, body, {"x-sim-fault": f"compress={coding}"})
        b = fetch(sim, MESSAGES, body, {"x-sim-fault": f"compress={coding}"})
        assert a.body == b.body, coding


def test_streamed_and_json_answers_agree(sim: Simulator) -> None:
    body = body_for(CHAT, "What is binary search?", stream_options={"include_usage": True})
    stream = fetch(sim, CHAT, body)
    text = "".join(
        orjson.loads(d)["choices"][0]["delta"].get("content") or ""
        for _, d in sse_events(stream.text)
        if d != "[DONE]" and orjson.loads(d)["choices"]
    )
    doc = orjson.loads(fetch(sim, CHAT, {**body, "stream": False}).body)
    assert doc["choices"][0]["message"]["content"] == text
    assert doc["id"] == sim.wait_sent_blocking(stream.request_id).response_id


def test_japanese_prompt_gets_a_japanese_answer(sim: Simulator) -> None:
    raw = fetch(sim, MESSAGES, body_for(MESSAGES, "東京の天気を教えてください", stream=False))
    text = orjson.loads(raw.body)["content"][0]["text"]
    assert any("\u3040" <= ch <= "\u30ff" for ch in text)
    raw = fetch(
        sim, MESSAGES, body_for(MESSAGES, "Hello", stream=False), {"x-sim-fault": "lang=ja"}
    )
    assert any("\u3040" <= ch <= "\u30ff" for ch in orjson.loads(raw.body)["content"][0]["text"])


def test_model_suffix_faults_and_header_precedence(sim: Simulator) -> None:
    raw = fetch(sim, CHAT, {**body_for(CHAT), "model": "gpt-4o+deltas=2"})
    rec = sim.wait_sent_blocking(raw.request_id)
    assert rec.model == "gpt-4o" and rec.requested_model == "gpt-4o+deltas=2"
    assert rec.output_deltas == 2
    assert all(orjson.loads(d)["model"] == "gpt-4o" for _, d in sse_events(raw.text)[:-1])
    raw = fetch(
        sim, CHAT, {**body_for(CHAT), "model": "gpt-4o+deltas=2"}, {"x-sim-fault": "deltas=4"}
    )
    assert sim.wait_sent_blocking(raw.request_id).output_deltas == 4


# --- the official SDKs --------------------------------------------------------------


def _openai(sim: Simulator) -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.openai_base_url, api_key="test", max_retries=0, timeout=10)


def _aopenai(sim: Simulator) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=sim.openai_base_url, api_key="test", max_retries=0, timeout=10
    )


def _anthropic(sim: Simulator) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=sim.url, api_key="test", max_retries=0, timeout=10)


def _aanthropic(sim: Simulator) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=sim.url, api_key="test", max_retries=0, timeout=10)


def test_openai_chat_stream_with_usage(sim: Simulator) -> None:
    with _openai(sim).chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "user", "content": "Hello"}],
        stream=True,
        stream_options={"include_usage": True},
    ) as stream:
        chunks = list(stream)
        rid = stream.response.headers["x-sim-request"]
    rec = sim.wait_sent_blocking(rid)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[0].choices[0].delta.content == ""
    assert all(c.usage is None for c in chunks[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    deltas = [
        c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content
    ]
    assert "".join(deltas) == rec.text
    # the usage rule: one output token per non-empty output delta
    assert chunks[-1].usage.completion_tokens == len(deltas) == rec.output_deltas
    assert rec.usage == rec.planned_usage
    assert rec.usage is not None and rec.usage["input_tokens"] == chunks[-1].usage.prompt_tokens
    assert rec.events == len(chunks) + 1  # + [DONE]
    assert rec.finish_reason == "stop" and rec.outcome == "completed"


def test_openai_chat_stream_helper_with_tools(sim: Simulator) -> None:
    with _openai(sim).chat.completions.stream(
        model="gpt-4o",
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER_CHAT],  # type: ignore[list-item]
        stream_options={"include_usage": True},
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    call = final.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert final.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather"  # type: ignore[union-attr]
    args = orjson.loads(call.function.arguments)  # type: ignore[union-attr]
    assert args["city"] == "Paris"
    assert args["unit"] in ("celsius", "fahrenheit")
    rec = last(sim)
    assert rec.tool_calls == 1


def test_openai_chat_tool_result_turn_gets_text(sim: Simulator) -> None:
    client = _openai(sim)
    first = client.chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "user", "content": "Weather in Osaka?"}],
        tools=[WEATHER_CHAT],  # type: ignore[list-item]
    )
    call = first.choices[0].message.tool_calls[0]  # type: ignore[index]
    second = client.chat.completions.create(
        model="gpt-4o",
        messages=[
            {"role": "user", "content": "Weather in Osaka?"},
            first.choices[0].message.model_dump(exclude_none=True),  # type: ignore[list-item]
            {"role": "tool", "tool_call_id": call.id, "content": '{"temp": 21}'},
        ],
        tools=[WEATHER_CHAT],  # type: ignore[list-item]
    )
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content
    assert second.usage is not None and second.usage.prompt_tokens > first.usage.prompt_tokens  # type: ignore[union-attr]


def test_openai_chat_json_and_reasoning(sim: Simulator) -> None:
    resp = _openai(sim).chat.completions.with_raw_response.create(
        model="deepseek-reasoner",
        messages=[{"role": "user", "content": "Hello"}],
    )
    completion = resp.parse()
    rec = sim.wait_sent_blocking(resp.headers["x-sim-request"])
    message = completion.choices[0].message
    reasoning = (message.model_extra or {})["reasoning_content"]
    assert reasoning and message.content
    assert completion.usage is not None
    assert completion.usage.completion_tokens_details.reasoning_tokens > 0  # type: ignore[union-attr]
    assert rec.output_chars == len(reasoning) + len(message.content)
    assert rec.outcome == "completed" and not rec.streamed


def test_openai_responses_stream_helper_with_reasoning(sim: Simulator) -> None:
    with _openai(sim).responses.stream(
        model="gpt-5", input="Hello", reasoning={"effort": "low", "summary": "auto"}
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert "response.reasoning_summary_text.delta" in kinds
    assert kinds[-1] == "response.completed"
    rec = last(sim)
    assert final.output_text and final.output_text in rec.text
    assert final.usage is not None
    deltas = sum(k.endswith(".delta") for k in kinds)
    assert final.usage.output_tokens == deltas == rec.output_deltas
    assert final.usage.output_tokens_details.reasoning_tokens > 0
    assert rec.finish_reason == "completed"


def test_openai_responses_tools_and_json(sim: Simulator) -> None:
    client = _openai(sim)
    with client.responses.stream(
        model="gpt-5",
        input="What is the weather in London?",
        tools=[WEATHER_RESPONSES],  # type: ignore[list-item]
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    call = final.output[0]
    assert call.type == "function_call" and call.name == "get_weather"
    assert orjson.loads(call.arguments)["city"] == "London"
    resp = client.responses.create(model="gpt-5", input="Hello", instructions="Be brief.")
    assert resp.status == "completed" and resp.output_text
    assert resp.usage is not None and resp.usage.total_tokens == (
        resp.usage.input_tokens + resp.usage.output_tokens
    )


def test_anthropic_stream_helper_with_thinking_and_tools(sim: Simulator) -> None:
    with _anthropic(sim).messages.stream(
        model=CLAUDE,
        max_tokens=1024,
        messages=[{"role": "user", "content": "Weather in Tokyo?"}],
        tools=[WEATHER_MESSAGES],  # type: ignore[list-item]
        thinking={"type": "enabled", "budget_tokens": 1024},
    ) as stream:
        raw_types = [event.type for event in stream]
        final = stream.get_final_message()
        rid = stream.response.headers["request-id"]
    rec = sim.wait_sent_blocking(rid)
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use"]
    thinking, text, tool = final.content
    assert thinking.signature  # type: ignore[union-attr]
    assert tool.input == {"city": "Tokyo", "unit": tool.input["unit"]}  # type: ignore[union-attr]
    assert final.stop_reason == "tool_use" and rec.finish_reason == "tool_use"
    assert {"thinking", "text", "input_json", "message_stop"} <= set(raw_types)
    assert final.usage.output_tokens == rec.output_deltas
    assert final.usage.input_tokens == rec.planned_usage["input_tokens"]  # type: ignore[index]
    assert rec.output_chars == len(thinking.thinking) + len(text.text) + len(  # type: ignore[union-attr]
        orjson.dumps(tool.input)  # type: ignore[union-attr]
    )


def test_anthropic_json_with_cache_usage(sim: Simulator) -> None:
    msg = _anthropic(sim).messages.create(
        model=CLAUDE,
        max_tokens=1024,
        messages=[{"role": "user", "content": "Hello " * 200}],
        extra_headers={"x-sim-fault": "cache_read=100,cache_write=20"},
    )
    rec = last(sim)
    assert rec.planned_usage is not None
    assert msg.usage.cache_read_input_tokens == 100
    assert msg.usage.cache_creation_input_tokens == 20
    total = msg.usage.input_tokens + 100 + 20
    assert total == rec.planned_usage["input_tokens"]
    assert msg.stop_reason == "end_turn"


@pytest.mark.parametrize("path", [CHAT, RESPONSES, MESSAGES])
def test_async_sdks_stream_and_json(sim: Simulator, path: str) -> None:
    async def main() -> tuple[str, str]:
        if path == CHAT:
            client = _aopenai(sim)
            messages: Any = [{"role": "user", "content": "Hi"}]
            stream = await client.chat.completions.create(
                model="gpt-4o", messages=messages, stream=True
            )
            out = [c.choices[0].delta.content or "" async for c in stream if c.choices]
            whole = await client.chat.completions.create(model="gpt-4o", messages=messages)
            await client.close()
            return "".join(out), whole.choices[0].message.content or ""
        if path == RESPONSES:
            client = _aopenai(sim)
            async with client.responses.stream(model="gpt-5", input="Hi") as rstream:
                async for _ in rstream:
                    pass
                streamed = (await rstream.get_final_response()).output_text
            resp = await client.responses.create(model="gpt-5", input="Hi")
            await client.close()
            return streamed, resp.output_text
        aclient = _aanthropic(sim)
        async with aclient.messages.stream(
            model=CLAUDE, max_tokens=1024, messages=[{"role": "user", "content": "Hi"}]
        ) as mstream:
            out = [t async for t in mstream.text_stream]
        msg = await aclient.messages.create(
            model=CLAUDE, max_tokens=1024, messages=[{"role": "user", "content": "Hi"}]
        )
        await aclient.close()
        return "".join(out), msg.content[0].text  # type: ignore[union-attr]

    streamed, whole = asyncio.run(main())
    rec = last(sim)
    assert rec.outcome == "completed" and not rec.streamed
    assert streamed == whole == rec.text


def test_async_in_process_simulator() -> None:
    async def main() -> None:
        async with Simulator() as s:
            client = openai.AsyncOpenAI(base_url=s.openai_base_url, api_key="test", max_retries=0)
            resp = await client.chat.completions.create(
                model="gpt-4o", messages=[{"role": "user", "content": "Hi"}]
            )
            rec = await s.wait_sent("req_sim000001")
            assert resp.choices[0].message.content == rec.text
            await client.close()

    asyncio.run(main())


@pytest.mark.parametrize("coding", wire.available())
def test_sdks_decode_every_compression(sim: Simulator, coding: str) -> None:
    with _openai(sim).chat.completions.create(
        model="gpt-4o",
        messages=[{"role": "user", "content": "Hi"}],
        stream=True,
        extra_headers={"x-sim-fault": f"compress={coding},lang=ja"},
    ) as stream:
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert stream.response.headers.get("content-encoding", "identity") == coding
    rec = last(sim)
    assert text == rec.text and rec.content_encoding == coding


def test_sdks_parse_crlf_and_bytewise(sim: Simulator) -> None:
    with _anthropic(sim).messages.stream(
        model=CLAUDE,
        max_tokens=1024,
        messages=[{"role": "user", "content": "こんにちは"}],
        extra_headers={"x-sim-fault": "crlf,bytewise,deltas=6,bom"},
    ) as stream:
        text = "".join(stream.text_stream)
    rec = last(sim)
    assert text == rec.text and rec.outcome == "completed"


# --- faults on the wire -------------------------------------------------------------


def test_keepalive_during_stall(sim: Simulator) -> None:
    raw = fetch(sim, CHAT, body_for(CHAT), {"x-sim-fault": "deltas=3,keepalive=0.05,stall=0.18"})
    rec = sim.wait_sent_blocking(raw.request_id)
    assert raw.text.count(": hopbase-keepalive\n\n") == 3 == rec.keepalives
    events = sse_events(raw.text)
    first, second = (orjson.loads(d)["choices"][0]["delta"]["content"] for _, d in events[1:3])
    gap = raw.time_of(f'"content":"{second}"'.encode()) - raw.time_of(
        f'"content":"{first}"'.encode()
    )
    assert gap >= 0.17
    # the keepalives sit between the first and the second output delta
    text = raw.text
    assert text.index(first) < text.index(": hopbase") < text.index(f'"{second}"')


def test_keepalives_keep_their_rhythm_between_busy_events(sim: Simulator) -> None:
    raw = fetch(sim, CHAT, body_for(CHAT), {"x-sim-fault": "deltas=8,keepalive=0.07,delay=0.02"})
    rec = sim.wait_sent_blocking(raw.request_id)
    blocks = raw.text.split("\n\n")
    kinds = ["k" if b.startswith(":") else "e" for b in blocks if b]
    assert kinds.count("k") == 2 == rec.keepalives  # at 0.07 s and 0.14 s of 0.2 s
    assert "kk" not in "".join(kinds)
    assert "".join(kinds).index("k") == 4  # after the events of 0, 0.02, 0.04, 0.06 s


def test_stall_at_an_explicit_event_and_no_keepalive_without_waits(sim: Simulator) -> None:
    raw = fetch(sim, MESSAGES, body_for(MESSAGES), {"x-sim-fault": "keepalive=0.05,stall=0.12@0"})
    rec = sim.wait_sent_blocking(raw.request_id)
    assert rec.keepalives == 2
    assert raw.text.startswith(": hopbase-keepalive\n\n: hopbase-keepalive\n\nevent: message_start")
    assert raw.time_of(b"message_start") >= 0.11
    assert (
        fetch(sim, MESSAGES, body_for(MESSAGES), {"x-sim-fault": "keepalive=0.05"}).text.count(
            "hopbase"
        )
        == 0
    )


def test_delays(sim: Simulator) -> None:
    faults = "deltas=2,header_delay=0.1,body_delay=0.05,ttft=0.1,delay=0.02"
    raw = fetch(sim, CHAT, body_for(CHAT), {"x-sim-fault": faults})
    rec = sim.wait_sent_blocking(raw.request_id)
    assert raw.t_headers is not None and raw.t_headers >= 0.09
    assert rec.headers_ms is not None and rec.first_output_ms is not None
    assert rec.first_event_ms is not None and rec.first_event_ms - rec.headers_ms >= 45
    assert rec.first_output_ms - rec.first_event_ms >= 0.1 * 1000 + 15
    assert rec.duration_ms is not None and rec.duration_ms >= 100 + 50 + 100 + 4 * 20


def test_json_delays(sim: Simulator) -> None:
    faults = "header_delay=0.03,ttft=0.03,stall=0.04,body_delay=0.05"
    raw = fetch(sim, MESSAGES, body_for(MESSAGES, stream=False), {"x-sim-fault": faults})
    rec = sim.wait_sent_blocking(raw.request_id)
    assert raw.t_headers is not None and raw.t_headers >= 0.095
    assert rec.duration_ms is not None and rec.headers_ms is not None
    assert rec.duration_ms - rec.headers_ms >= 45
    assert orjson.loads(raw.body)["type"] == "message"


@pytest.mark.parametrize("path", [CHAT, RESPONSES, MESSAGES])
def test_rst_after_k_events(sim: Simulator, path: str) -> None:
    raw = fetch(sim, path, body_for(path), {"x-sim-fault": "rst=4"})
    rec = sim.wait_sent_blocking(raw.request_id)
    assert raw.end == "reset"
    assert len(sse_events(raw.text)) == 4 == rec.events
    assert rec.transport == "rst" and rec.outcome == "upstream_disconnect"
    assert rec.usage is None or path == MESSAGES  # message_start carries input usage
    assert rec.planned_events > 4


@pytest.mark.parametrize(
    ("fault", "failed"),
    [
        ("rst=4", "upstream_disconnect"),
        ("error=3", "error"),
        ("interrupt=3", "error"),
        ("status=529", "http_error"),
        ("drop", "upstream_disconnect"),
    ],
)
def test_fail_first_answers_the_retry_clean(sim: Simulator, fault: str, failed: str) -> None:
    """A flaky upstream: the failure for the first request of a body, a clean
    answer to the same body sent again (a client's retry), the ground truth
    numbering the attempts; another body starts its own count."""
    body = body_for(MESSAGES, text=f"flaky {fault}")
    headers = {"x-sim-fault": f"{fault},fail_first", "x-sim-id": f"flaky-{fault}-1"}
    raw = fetch(sim, MESSAGES, body, headers)
    first = last(sim) if fault == "drop" else sim.wait_sent_blocking(raw.request_id)
    assert (first.outcome, first.attempt) == (failed, 1)
    raw = fetch(sim, MESSAGES, body, {**headers, "x-sim-id": f"flaky-{fault}-2"})
    again = sim.wait_sent_blocking(raw.request_id)
    assert (again.outcome, again.attempt) == ("completed", 2)
    assert again.faults == first.faults  # the same request, asking the same
    other = body_for(MESSAGES, text=f"another {fault}")
    raw = fetch(sim, MESSAGES, other, {**headers, "x-sim-id": f"flaky-{fault}-3"})
    assert (last(sim).outcome, last(sim).attempt) == (failed, 1)


def test_fail_first_n_fails_n_times(sim: Simulator) -> None:
    body = body_for(CHAT, text="twice flaky")
    outcomes = []
    for n in range(4):
        raw = fetch(sim, CHAT, body, {"x-sim-fault": "rst=3,fail_first=2", "x-sim-id": f"f2-{n}"})
        outcomes.append(sim.wait_sent_blocking(raw.request_id).outcome)
    assert outcomes == ["upstream_disconnect", "upstream_disconnect", "completed", "completed"]


def test_fin_leaves_the_chunked_body_unfinished(sim: Simulator) -> None:
    raw = fetch(sim, CHAT, body_for(CHAT), {"x-sim-fault": "fin=3,midevent"})
    rec = sim.wait_sent_blocking(raw.request_id)
    assert raw.end == "eof" and not raw.framing_complete
    assert raw.text.count("\n\n") == 3 and not raw.text.endswith("\n\n")  # half an event
    assert rec.events == 3 and rec.outcome == "upstream_disconnect" and rec.transport == "fin"


def test_cut_after_the_last_event_is_still_completed(sim: Simulator) -> None:
    raw = fetch(sim, CHAT, body_for(CHAT), {"x-sim-fault": "fin=999"})
    rec = sim.wait_sent_blocking(raw.request_id)
    assert raw.text.endswith("data: [DONE]\n\n") and not raw.framing_complete
    assert rec.outcome == "completed" and rec.transport == "fin"


def test_eof_framing(sim: Simulator) -> None:
    raw = fetch(sim, RESPONSES, body_for(RESPONSES), {"x-sim-fault": "eof"})
    assert "content-length" not in raw.headers and "transfer-encoding" not in raw.headers
    assert raw.headers["connection"] == "close"
    assert sse_events(raw.text)[-1][0] == "response.completed"
    raw = fetch(sim, RESPONSES, body_for(RESPONSES), {"x-sim-fault": "eof,fin=5"})
    rec = sim.wait_sent_blocking(raw.request_id)
    assert raw.end == "complete"  # nothing on the wire says it was cut...
    assert len(sse_events(raw.text)) == 5
    assert rec.outcome == "truncated"  # ...but the terminal event is missing


def test_length_framing_for_a_stream_and_a_cut_body(sim: Simulator) -> None:
    raw = fetch(sim, MESSAGES, body_for(MESSAGES), {"x-sim-fault": "length,compress=gzip"})
    assert int(raw.headers["content-length"]) == len(raw.body) and raw.end == "complete"
    assert sse_events(raw.text)[-1][0] == "message_stop"
    raw = fetch(sim, MESSAGES, body_for(MESSAGES), {"x-sim-fault": "length,fin=3"})
    assert raw.end == "eof" and len(raw.wire_bytes.split(b"\r\n\r\n", 1)[1]) < int(
        raw.headers["content-length"]
    )


def test_cut_json_body(sim: Simulator) -> None:
    raw = fetch(sim, CHAT, body_for(CHAT, stream=False), {"x-sim-fault": "fin=0"})
    rec = sim.wait_sent_blocking(raw.request_id)
    assert raw.end == "eof"
    assert 0 < len(raw.body) < int(raw.headers["content-length"])
    assert rec.outcome == "upstream_disconnect" and rec.output_chars == 0


def test_drop(sim: Simulator) -> None:
    raw = fetch(sim, CHAT, body_for(CHAT), {"x-sim-fault": "drop"})
    assert raw.wire_bytes == b"" and raw.end == "eof"
    raw = fetch(sim, CHAT, body_for(CHAT), {"x-sim-fault": "drop=rst"})
    assert raw.wire_bytes == b"" and raw.end == "reset"
    rec = last(sim)
    assert rec.http_status is None and rec.outcome == "upstream_disconnect"


def test_chat_error_event(sim: Simulator) -> None:
    raw = fetch(sim, CHAT, body_for(CHAT), {"x-sim-fault": "error=3"})
    events = sse_events(raw.text)
    assert raw.status == 200 and raw.end == "complete"
    assert len(events) == 4
    assert orjson.loads(events[-1][1])["error"]["code"] == "server_error"
    rec = sim.wait_sent_blocking(raw.request_id)
    assert rec.outcome == "error" and rec.error_code == "server_error"
    raw = fetch(
        sim,
        CHAT,
        body_for(CHAT),
        {"x-sim-fault": "error=3,error_done,error_code=rate_limit_exceeded"},
    )
    assert sse_events(raw.text)[-1][1] == "[DONE]"
    assert sim.wait_sent_blocking(raw.request_id).error_type == "requests"
    with pytest.raises(openai.APIError, match="server had an error"):  # noqa: SIM117
        with _openai(sim).chat.completions.create(
            model="gpt-4o+error=2", messages=[{"role": "user", "content": "Hi"}], stream=True
        ) as stream:
            list(stream)


def test_responses_error_shapes(sim: Simulator) -> None:
    raw = fetch(sim, RESPONSES, body_for(RESPONSES), {"x-sim-fault": "error=4"})
    events = sse_events(raw.text)
    assert [e for e, _ in events[-2:]] == ["error", "response.failed"]
    seq = [orjson.loads(d)["sequence_number"] for _, d in events]
    assert seq == list(range(len(events)))
    failed = orjson.loads(events[-1][1])["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "server_error"
    assert failed["usage"] is None
    raw = fetch(
        sim,
        RESPONSES,
        body_for(RESPONSES),
        {"x-sim-fault": "error=4,error_shape=failed,error_code=invalid_prompt"},
    )
    names = [e for e, _ in sse_events(raw.text)]
    assert names[-1] == "response.failed" and "error" not in names and len(names) == 5
    rec = sim.wait_sent_blocking(raw.request_id)
    assert rec.outcome == "error" and rec.error_code == "invalid_prompt"


def test_anthropic_error_and_interrupt(sim: Simulator) -> None:
    raw = fetch(sim, MESSAGES, body_for(MESSAGES), {"x-sim-fault": "error=5"})
    name, data = sse_events(raw.text)[-1]
    assert name == "error" and orjson.loads(data)["error"]["type"] == "overloaded_error"
    raw = fetch(sim, MESSAGES, body_for(MESSAGES), {"x-sim-fault": "interrupt=6"})
    name, data = sse_events(raw.text)[-1]
    err = orjson.loads(data)["error"]
    assert name == "error" and err == {
        "type": "api_error",
        "message": "Response stream interrupted, please retry",
    }
    rec = sim.wait_sent_blocking(raw.request_id)
    assert rec.outcome == "error" and rec.events == 7 and rec.error_type == "api_error"
    with pytest.raises(anthropic.APIError, match="overloaded_error"):  # noqa: SIM117
        with _anthropic(sim).messages.stream(
            model=CLAUDE + "+error=5", max_tokens=100, messages=[{"role": "user", "content": "Hi"}]
        ) as stream:
            list(stream)


@pytest.mark.parametrize(
    ("path", "status", "check"),
    [
        (CHAT, 429, lambda d: d["error"]["code"] == "rate_limit_exceeded"),
        (RESPONSES, 500, lambda d: d["error"]["type"] == "server_error"),
        (MESSAGES, 529, lambda d: d["error"]["type"] == "overloaded_error"),
        (MESSAGES, 429, lambda d: d["error"]["type"] == "rate_limit_error"),
    ],
)
def test_http_error_status(sim: Simulator, path: str, status: int, check: Any) -> None:
    raw = fetch(sim, path, body_for(path), {"x-sim-fault": f"status={status},retry_after=2"})
    assert raw.status == status and raw.headers["retry-after"] == "2"
    assert raw.headers["content-type"] == "application/json"
    assert check(orjson.loads(raw.body))
    rec = sim.wait_sent_blocking(raw.request_id)
    assert rec.outcome == "http_error" and rec.http_status == status and rec.events == 0


def test_http_error_through_the_sdks(sim: Simulator) -> None:
    with pytest.raises(openai.RateLimitError):
        _openai(sim).chat.completions.create(
            model="gpt-4o+status=429", messages=[{"role": "user", "content": "Hi"}]
        )
    with pytest.raises(anthropic.InternalServerError) as info:
        _anthropic(sim).messages.create(
            model=CLAUDE + "+status=529",
            max_tokens=10,
            messages=[{"role": "user", "content": "Hi"}],
            stream=True,
        )
    assert info.value.status_code == 529


def test_chat_usage_modes(sim: Simulator) -> None:
    def usage_events(fault: str, include: bool) -> list[Any]:
        body = body_for(CHAT)
        if include:
            body["stream_options"] = {"include_usage": True}
        raw = fetch(sim, CHAT, body, {"x-sim-fault": fault} if fault else None)
        chunks = [orjson.loads(d) for _, d in sse_events(raw.text) if d != "[DONE]"]
        return [(c["choices"], c["usage"]) for c in chunks if "usage" in c]

    assert usage_events("", include=False) == []  # no usage keys at all
    plain = usage_events("", include=True)
    assert all(u is None for _, u in plain[:-1]) and plain[-1][0] == [] and plain[-1][1]
    forced = usage_events("usage=on", include=False)
    assert forced[-1][0] == [] and forced[-1][1]["completion_tokens"] > 0
    assert all(u is None for _, u in usage_events("usage=off", include=True))
    finish = usage_events("usage=finish", include=False)
    assert finish[-1][0][0]["finish_reason"] == "stop" and finish[-1][1] is not None


def test_usage_off_elsewhere(sim: Simulator) -> None:
    raw = fetch(sim, RESPONSES, body_for(RESPONSES), {"x-sim-fault": "usage=off"})
    assert orjson.loads(sse_events(raw.text)[-1][1])["response"]["usage"] is None
    assert sim.wait_sent_blocking(raw.request_id).usage is None
    raw = fetch(sim, MESSAGES, body_for(MESSAGES), {"x-sim-fault": "usage=off"})
    delta = next(orjson.loads(d) for e, d in sse_events(raw.text) if e == "message_delta")
    assert "usage" not in delta


def test_forced_tools_reasoning_and_hidden_tokens(sim: Simulator) -> None:
    raw = fetch(
        sim,
        CHAT,
        body_for(CHAT, stream_options={"include_usage": True}),
        {"x-sim-fault": "tools=2,reasoning,hidden=7"},
    )
    chunks = [orjson.loads(d) for _, d in sse_events(raw.text) if d != "[DONE]"]
    starts = [
        tc
        for c in chunks
        if c["choices"]
        for tc in c["choices"][0]["delta"].get("tool_calls", [])
        if "id" in tc
    ]
    assert [tc["index"] for tc in starts] == [0, 1]
    reasoning = [
        c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("reasoning_content")
    ]
    usage = chunks[-1]["usage"]
    rec = sim.wait_sent_blocking(raw.request_id)
    assert usage["completion_tokens_details"]["reasoning_tokens"] == len(reasoning) + 7
    assert usage["completion_tokens"] == rec.output_deltas + 7
    assert rec.tool_calls == 2 and rec.finish_reason == "tool_calls"
    raw = fetch(sim, CHAT, body_for(CHAT, tools=[WEATHER_CHAT]), {"x-sim-fault": "notools"})
    assert (
        "tool_calls" not in raw.text
        and sim.wait_sent_blocking(raw.request_id).finish_reason == "stop"
    )


@pytest.mark.parametrize(
    ("path", "limit", "finish"),
    [
        (CHAT, {"max_tokens": 5}, "length"),
        (RESPONSES, {"max_output_tokens": 5}, "max_output_tokens"),
        (MESSAGES, {"max_tokens": 5}, "max_tokens"),
    ],
)
def test_max_tokens_truncates(
    sim: Simulator, path: str, limit: dict[str, int], finish: str
) -> None:
    if path == CHAT:
        limit = {**limit, "stream_options": {"include_usage": True}}  # type: ignore[dict-item]
    raw = fetch(sim, path, body_for(path, **limit))
    rec = sim.wait_sent_blocking(raw.request_id)
    assert rec.finish_reason == finish and rec.output_deltas == 5
    assert rec.usage is not None and rec.usage["output_tokens"] == 5
    if path == RESPONSES:
        assert sse_events(raw.text)[-1][0] == "response.incomplete"
        assert rec.outcome == "incomplete"
    else:
        assert rec.outcome == "completed"


def test_dup_start(sim: Simulator) -> None:
    raw = fetch(sim, MESSAGES, body_for(MESSAGES), {"x-sim-fault": "dup_start"})
    assert [e for e, _ in sse_events(raw.text)][:2] == ["message_start", "message_start"]


def test_compression_round_trip_and_negotiation(sim: Simulator) -> None:
    plain = fetch(sim, RESPONSES, body_for(RESPONSES))
    for coding in wire.available():
        raw = fetch(sim, RESPONSES, body_for(RESPONSES), {"x-sim-fault": f"compress={coding}"})
        assert raw.headers.get("content-encoding", "identity") == coding
        assert raw.decoded == plain.body
        # each event is flushed: one chunk per event, however compressed
        assert len(raw.chunks) >= len(sse_events(plain.text))
    for accept, expected in [
        ("gzip", "gzip"),
        ("br;q=0.5, gzip;q=0.8", "gzip"),
        ("deflate", "deflate"),
        ("identity", "identity"),
        ("", "identity"),
    ]:
        raw = fetch(
            sim, CHAT, body_for(CHAT), {"x-sim-fault": "compress", "accept-encoding": accept}
        )
        assert raw.headers.get("content-encoding", "identity") == expected
    raw = fetch(sim, CHAT, body_for(CHAT), {"x-sim-fault": "compress"})  # no Accept-Encoding
    assert "content-encoding" not in raw.headers
    assert fetch(sim, CHAT, body_for(CHAT, stream=False), {"x-sim-fault": "compress=gzip"}).decoded


def test_line_ends_bom_bytewise(sim: Simulator) -> None:
    raw = fetch(sim, MESSAGES, body_for(MESSAGES), {"x-sim-fault": "crlf"})
    assert b"\r\n\r\n" in raw.body and b"\n\n" not in raw.body.replace(b"\r\n", b"")
    raw = fetch(sim, MESSAGES, body_for(MESSAGES), {"x-sim-fault": "cr"})
    assert b"\n" not in raw.body and b"\r\r" in raw.body
    raw = fetch(sim, MESSAGES, body_for(MESSAGES), {"x-sim-fault": "bom"})
    assert raw.body.startswith(b"\xef\xbb\xbfevent: message_start")
    raw = fetch(sim, CHAT, body_for(CHAT, "日本語で"), {"x-sim-fault": "bytewise,deltas=3"})
    assert raw.chunks and set(raw.chunks) == {1}
    assert (
        raw.decoded
        == fetch(sim, CHAT, body_for(CHAT, "日本語で"), {"x-sim-fault": "deltas=3"}).body
    )


def test_connection_close(sim: Simulator) -> None:
    with socket.create_connection(("127.0.0.1", sim.port), timeout=5) as s:
        raw = fetch(sim, CHAT, body_for(CHAT), {"x-sim-fault": "close"}, sock=s, close=False)
        assert raw.headers["connection"] == "close"
        s.settimeout(2)
        assert s.recv(10) == b""  # the server closed


def test_client_disconnect_is_recorded(sim: Simulator) -> None:
    body = orjson.dumps(body_for(CHAT))
    with socket.create_connection(("127.0.0.1", sim.port), timeout=5) as s:
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nx-sim-id: gone-1\r\n"
            b"x-sim-fault: stall=5\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
        )
        s.recv(4096)
    start = time.monotonic()
    rec = sim.wait_sent_blocking("gone-1", timeout=3)
    assert time.monotonic() - start < 1.0
    assert rec.outcome == "client_disconnect" and rec.transport == "client_gone"


def test_tls(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    pem = cert.read_bytes()
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context(cadata=pem.decode())
    with run_in_thread(tls=server_ctx) as s:
        assert s.url.startswith("https://")
        with socket.create_connection(("127.0.0.1", s.port), timeout=5) as plain:  # noqa: SIM117
            with client_ctx.wrap_socket(plain, server_hostname="localhost") as tls_sock:
                raw = fetch(s, CHAT, body_for(CHAT), sock=tls_sock)
        assert raw.status == 200 and sse_events(raw.text)[-1][1] == "[DONE]"
        with socket.create_connection(("127.0.0.1", s.port), timeout=5) as plain:  # noqa: SIM117
            with client_ctx.wrap_socket(plain, server_hostname="localhost") as tls_sock:
                raw = fetch(s, CHAT, body_for(CHAT), {"x-sim-fault": "rst=2"}, sock=tls_sock)
        assert raw.end == "reset" and len(sse_events(raw.text)) == 2


# --- the ground truth agrees with the recorder's own meter --------------------------


@pytest.mark.parametrize(
    ("path", "fault"),
    [
        (CHAT, "usage=on"),
        (CHAT, "tools=2,reasoning,usage=finish,crlf"),
        (CHAT, "keepalive=0.02,stall=0.05,error=6"),
        (RESPONSES, "reasoning,tools"),
        (RESPONSES, "error=5"),
        (RESPONSES, "compress=br,lang=ja"),
        (MESSAGES, "reasoning,tools,cache_read=3"),
        (MESSAGES, "interrupt=4,keepalive=0.02,stall=0.05,bom"),
        (MESSAGES, "rst=6"),
        (MESSAGES, "hidden=5,reasoning"),
    ],
)
def test_ground_truth_matches_the_recorder_core(sim: Simulator, path: str, fault: str) -> None:
    raw = fetch(sim, path, body_for(path), {"x-sim-fault": fault})
    rec = sim.wait_sent_blocking(raw.request_id)
    meter = replayed(raw, path)
    assert meter["events"] == rec.events
    assert meter["keepalives"] == rec.keepalives
    assert meter["output_chars"] == rec.output_chars
    assert meter["tool_calls"] == rec.tool_calls
    assert meter["finish_reason"] == rec.finish_reason
    expected = rec.outcome if rec.outcome != "upstream_disconnect" else "truncated"
    assert meter["outcome"] == expected  # a replay sees a body, not a transport
    if rec.usage is not None:
        for key in ("input_tokens", "output_tokens", "cache_read_tokens", "reasoning_tokens"):
            assert meter[key] == rec.usage[key], key


@pytest.mark.parametrize("path", [CHAT, RESPONSES, MESSAGES])
def test_json_ground_truth_matches_the_recorder_core(sim: Simulator, path: str) -> None:
    tools = {CHAT: [WEATHER_CHAT], RESPONSES: [WEATHER_RESPONSES], MESSAGES: [WEATHER_MESSAGES]}
    raw = fetch(
        sim,
        path,
        body_for(path, "Weather?", stream=False, tools=tools[path]),
        {"x-sim-fault": "reasoning"},
    )
    rec = sim.wait_sent_blocking(raw.request_id)
    from recorder.core.protocols import interpreter_for

    interp = interpreter_for(ENDPOINT[path])
    chars = interp.read_body(raw.body)
    assert chars == rec.output_chars
    assert interp.obs.tool_calls == rec.tool_calls == 1
    assert interp.obs.finish_reason == rec.finish_reason
    assert interp.obs.usage is not None and rec.usage is not None
    assert interp.obs.usage.output_tokens == rec.usage["output_tokens"]
    assert interp.obs.usage.input_tokens == rec.usage["input_tokens"]


# --- faults parser and the command line ---------------------------------------------


def test_parse_faults() -> None:
    f = parse_faults("keepalive=0.5, stall=2@3,rst=4,compress,crlf")
    assert (f.keepalive, f.stall, f.stall_at, f.cut, f.cut_after) == (0.5, 2.0, 3, "rst", 4)
    assert f.compress == "auto" and f.line_end == "crlf"
    assert f.describe() == "keepalive=0.5,stall=2@3,rst=4,compress,crlf"
    assert split_model("gpt-4o+keepalive=0.5+stall=2") == ("gpt-4o", "keepalive=0.5+stall=2")
    assert parse_faults("keepalive=0.5+stall=2", sep="+").stall == 2.0
    for bad in (
        "keepalive=0",
        "stall=-1",
        "status=200",
        "compress=lzma",
        "crlf=1",
        "deltas=0",
        "x",
    ):
        with pytest.raises(FaultError):
            parse_faults(bad)


def test_cli_runs_until_sigterm_and_sigint() -> None:
    code = (
        "import argparse, sys\n"
        "from recorder.cli import simulate\n"
        "p = argparse.ArgumentParser(prog='recorder'); sub = p.add_subparsers()\n"
        "simulate.add_parser(sub)\n"
        "a = p.parse_args(sys.argv[1:]); sys.exit(a.func(a))\n"
    )
    for sig in (signal.SIGTERM, signal.SIGINT):
        proc = subprocess.Popen(
            [sys.executable, "-c", code, "simulate", "--port", "0", "--quiet"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            assert proc.stdout is not None
            first = proc.stdout.readline()
            assert first.startswith("recorder simulate: listening on http://127.0.0.1:")
            port = int(first.rsplit(":", 1)[1])
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(b"GET /_sim/health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                assert s.recv(100).startswith(b"HTTP/1.1 200")
            proc.send_signal(sig)
            proc.wait(timeout=10)
            out = first + proc.stdout.read()
        finally:
            proc.kill()
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
        assert proc.returncode == 0
        assert "x-sim-fault" in out and out.endswith("recorder simulate: stopped\n")


def test_cli_rejects_a_bad_default_fault() -> None:
    import argparse

    from recorder.cli import simulate

    parser = argparse.ArgumentParser()
    simulate.add_parser(parser.add_subparsers())
    args = parser.parse_args(["simulate", "--fault", "nope"])
    assert args.func(args) == 2
