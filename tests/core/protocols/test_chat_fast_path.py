"""The Chat Completions fast path must say exactly what a full parse says."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recorder.core import StreamMeter
from recorder.core.protocols import chat
from tests.kit.framing import load_body

FIXTURES = Path(__file__).parents[2] / "fixtures"
CHAT_FILES = sorted((FIXTURES / "openai-chat").glob("*.sse")) + sorted(
    (FIXTURES / "payload-only" / "openai-chat").glob("*")
)


def record(body: bytes, fast: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    monkeypatch.setattr(chat, "FAST_PATH", fast)
    meter = StreamMeter("chat.completions", start=0.0, stall_after=0.5)
    for i, piece in enumerate(body.split(b"\n\n")):
        meter.feed(piece + b"\n\n", float(i) * 0.1)
    rec = meter.finish(1000.0).to_dict(with_gaps=True)
    obs = meter.interpreter.obs
    rec["_obs"] = {name: getattr(obs, name) for name in type(obs).__slots__ if name != "usage"}
    return rec


def both_agree(body: bytes, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    slow = record(body, False, monkeypatch)
    fast = record(body, True, monkeypatch)
    assert fast == slow
    return fast


@pytest.mark.parametrize("path", CHAT_FILES, ids=lambda p: p.name)
def test_fixtures_agree(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    body = load_body(path)
    both_agree(body, monkeypatch)


def chunk(content: object, *, extra: str = "", key: str = "content", finish: str = "null") -> bytes:
    delta = json.dumps({key: content}, ensure_ascii=False)
    return (
        b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
        b'"choices":[{"index":0,"delta":' + delta.encode() + b',"logprobs":null,'
        b'"finish_reason":' + finish.encode() + b"}]" + extra.encode() + b"}\n\n"
    )


def test_the_template_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    body = chunk("Hello") + chunk(" wor") + chunk("ld") + b"data: [DONE]\n\n"
    calls: list[bytes] = []
    original = chat.ChatCompletionsInterpreter.parse

    def counting(self: chat.ChatCompletionsInterpreter, data: bytes) -> object:
        calls.append(data)
        return original(self, data)

    monkeypatch.setattr(chat.ChatCompletionsInterpreter, "parse", counting)
    rec = both_agree(body, monkeypatch)
    assert rec["output_chars"] == len("Hello world")
    calls.clear()
    record(body, True, monkeypatch)
    assert len(calls) == 1  # only the first delta was parsed in full


TRICKY = [
    'quote " inside',
    "back\\slash",
    'escaped \\" quote',
    "newline\nand\ttab",
    "日本語のテキスト",
    "emoji 🎵 and \u2028 separator",
    '"},{"index":1,"delta":{"content":"x',
    '","finish_reason":"stop"}]}',
    "",
]


@pytest.mark.parametrize("text", TRICKY)
def test_tricky_texts_agree(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    body = chunk("first") + chunk(text) + chunk("last") + b"data: [DONE]\n\n"
    rec = both_agree(body, monkeypatch)
    assert rec["output_chars"] == len("first") + len(text) + len("last")


def test_shape_changes_miss_the_template(monkeypatch: pytest.MonkeyPatch) -> None:
    body = (
        chunk("a")
        + chunk("b", finish='"stop"')
        + chunk("c", extra=',"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}')
        + chunk("d", key="refusal")
        + chunk("e", key="reasoning_content")
        + chunk("f", extra=',"obfuscation":"Zq3"')
        + chunk("g", extra=',"obfuscation":"with \\"quote"')
        + chunk("h", extra=',"error":{"message":"boom"}')
        + b"data: [DONE]\n\n"
    )
    rec = both_agree(body, monkeypatch)
    assert rec["outcome"] == "error" and rec["input_tokens"] == 3


def test_obfuscation_padding_is_set_aside(monkeypatch: pytest.MonkeyPatch) -> None:
    body = b"".join(chunk(w, extra=f',"obfuscation":"{"x" * n}"') for n, w in enumerate("abcdef"))
    rec = both_agree(body + b"data: [DONE]\n\n", monkeypatch)
    assert rec["output_chars"] == 6


@settings(max_examples=300, deadline=None)
@given(
    texts=st.lists(st.text(max_size=12), min_size=1, max_size=12),
    extras=st.lists(
        st.sampled_from(["", ',"obfuscation":"pad"', ',"usage":null', ',"service_tier":"x"']),
        min_size=1,
        max_size=12,
    ),
    keys=st.lists(st.sampled_from(["content", "reasoning_content", "refusal"]), min_size=1),
    seed=st.integers(0, 1000),
)
def test_random_streams_agree(
    texts: list[str], extras: list[str], keys: list[str], seed: int
) -> None:
    rng = random.Random(seed)
    body = (
        b"".join(chunk(t, extra=rng.choice(extras), key=rng.choice(keys)) for t in texts)
        + b"data: [DONE]\n\n"
    )
    with pytest.MonkeyPatch.context() as mp:
        both_agree(body, mp)
