"""The byte-template fast paths must say exactly what a full parse says.

Every interpreter has a FAST_PATH switch; with it off, every event is parsed in
full. Both must give the same record and the same Observations, for the real
captures and for mutations made to hit a template's edges: texts with escapes,
control characters, quotes, bad UTF-8; ignored fields (``obfuscation``,
``sequence_number``) with values a template must refuse; bytes flipped,
dropped or added anywhere in an event that otherwise matches.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recorder.core import StreamMeter
from recorder.core.protocols import chat, messages, responses
from recorder.core.protocols.base import Interpreter
from recorder.core.protocols.observations import Observations, OutputKind
from recorder.core.protocols.template import HoleKind, Template, learn, string_at
from tests.kit.framing import endpoint_for, fixture_files, load_body

# every test twice: the template reader in C, then in Python (tests/core/conftest.py)
pytestmark = pytest.mark.usefixtures("both_readers")
MODULES = {"chat.completions": chat, "messages": messages, "responses": responses}
Parse = Callable[[Interpreter, bytes], object]
FILES = fixture_files()


@contextmanager
def fast_path(on: bool) -> Iterator[None]:
    saved = {name: module.FAST_PATH for name, module in MODULES.items()}
    try:
        for module in MODULES.values():
            module.FAST_PATH = on
        yield
    finally:
        for name, module in MODULES.items():
            module.FAST_PATH = saved[name]


def blocks(body: bytes) -> list[bytes]:
    """One event a piece, as mitmproxy hands an HTTP/1 chunked stream over."""
    parts = body.split(b"\n\n")
    return [p + b"\n\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def meter(endpoint: str, pieces: list[bytes], fast: bool) -> dict[str, object]:
    with fast_path(fast):
        m = StreamMeter(endpoint, start=0.0, stall_after=0.5)
        for i, piece in enumerate(pieces):
            m.feed(piece, 0.001 + i * 0.1)
        rec = m.finish(10_000.0).to_dict(with_gaps=True)
    obs = m.interpreter.obs
    rec["_obs"] = {name: getattr(obs, name) for name in type(obs).__slots__ if name != "usage"}
    rec["_usage"] = repr(obs.usage)
    rec["_intervals"] = list(m.output_intervals)
    return rec


def both_agree(endpoint: str, pieces: list[bytes]) -> dict[str, object]:
    fast = meter(endpoint, pieces, True)
    assert fast == meter(endpoint, pieces, False)
    return fast


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(p.parents[1]).as_posix())
def test_fixtures_agree(path: Path) -> None:
    body = load_body(path)
    endpoint = endpoint_for(path)
    both_agree(endpoint, blocks(body))
    both_agree(endpoint, [body])


TEXTS = [
    b"plain",
    b"",
    b"a\\nb",
    b'say \\"hi\\"',
    b"back\\\\slash",
    b"\\u00e9t\\u00e9",
    b"\\ud83c\\udfb5",
    b"\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e",
    b"caf\xc3\xa9",
    b"\xf0\x9f\x8e\xb5 emoji",
    b"\xe2\x80\xa8 separator",
    b"\xc2\xa0nbsp",
    b"del \x7f",
    # not one valid string: the full parse reports each of them
    b"raw\ttab",
    b"\x01",
    b'a"b',
    b"trailing\\",
    b"\\q",
    b"\\ud800",
    b"\xe6\x97",
    b"\xed\xa0\x80",
    b"\xc0\xaf",
    b"\xff",
    b'"},{"x":"',
]
OBFUSCATIONS = [b"", b"Zq3", b"a b", b"a\\", b"a\\\\", b"\\u0041", b"\t", b"\xc3\xa9", b'x","y":"z']
SEQUENCES = [b"0", b"7", b"1234", b"01", b"-1", b"1.0", b"1e3", b"12345678901234567890", b'"5"']


def chat_chunk(text: bytes, *, key: str = "content", extra: bytes = b"") -> bytes:
    return (
        b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
        b'"choices":[{"index":0,"delta":{"' + key.encode() + b'":"' + text + b'"},'
        b'"logprobs":null,"finish_reason":null}]' + extra + b"}\n\n"
    )


def messages_delta(text: bytes, *, dtype: str = "text_delta", key: str = "text") -> bytes:
    return (
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
        b'"delta":{"type":"' + dtype.encode() + b'","' + key.encode() + b'":"' + text + b'"}}\n\n'
    )


def responses_delta(
    text: bytes, seq: bytes = b"5", obf: bytes = b"Abc", *, typ: str = "output_text"
) -> bytes:
    name = f"response.{typ}.delta".encode()
    return (
        b"event: " + name + b'\ndata: {"type":"' + name + b'","sequence_number":' + seq + b","
        b'"item_id":"msg_1","output_index":0,"content_index":0,"delta":"' + text + b'",'
        b'"logprobs":[],"obfuscation":"' + obf + b'"}\n\n'
    )


def responses_delta_sorted(text: bytes, seq: bytes = b"5", obf: bytes = b"Abc") -> bytes:
    """The same with the keys in another order: both ignored fields after the text."""
    return (
        b'event: response.output_text.delta\ndata: {"content_index":0,"delta":"' + text + b'",'
        b'"item_id":"msg_1","logprobs":[],"output_index":0,"sequence_number":' + seq + b","
        b'"type":"response.output_text.delta","obfuscation":"' + obf + b'"}\n\n'
    )


def responses_delta_late(text: bytes, seq: bytes = b"5", obf: bytes = b"Abc") -> bytes:
    """And with both ignored fields before the text (the template's general reader)."""
    return (
        b'event: response.output_text.delta\ndata: {"obfuscation":"' + obf + b'",'
        b'"sequence_number":' + seq + b',"type":"response.output_text.delta",'
        b'"delta":"' + text + b'"}\n\n'
    )


LAYOUTS = [responses_delta, responses_delta_sorted, responses_delta_late]


@pytest.mark.parametrize("text", TEXTS, ids=repr)
def test_chat_texts(text: bytes) -> None:
    for key in ("content", "reasoning_content", "refusal"):
        body = [chat_chunk(b"first", key=key), chat_chunk(text, key=key), chat_chunk(b"last")]
        both_agree("chat.completions", [*body, b"data: [DONE]\n\n"])
        obf = [
            chat_chunk(b"a", extra=b',"obfuscation":"x1"'),
            chat_chunk(text, extra=b',"obfuscation":"x2"'),
        ]
        both_agree("chat.completions", [*obf, b"data: [DONE]\n\n"])


@pytest.mark.parametrize("text", TEXTS, ids=repr)
def test_messages_texts(text: bytes) -> None:
    for dtype, key in (
        ("text_delta", "text"),
        ("thinking_delta", "thinking"),
        ("input_json_delta", "partial_json"),
        ("compaction_delta", "content"),
    ):
        body = [
            messages_delta(b"first", dtype=dtype, key=key),
            messages_delta(text, dtype=dtype, key=key),
        ]
        both_agree("messages", body)


@pytest.mark.parametrize("text", TEXTS, ids=repr)
def test_responses_texts(text: bytes) -> None:
    for typ in (
        "output_text",
        "reasoning_text",
        "reasoning_summary_text",
        "function_call_arguments",
    ):
        body = [responses_delta(b"first", b"1", typ=typ), responses_delta(text, b"2", typ=typ)]
        both_agree("responses", body)
    for build in LAYOUTS[1:]:
        both_agree("responses", [build(b"first", b"1"), build(text, b"2")])


@pytest.mark.parametrize("seq", SEQUENCES, ids=repr)
@pytest.mark.parametrize("obf", OBFUSCATIONS, ids=repr)
def test_responses_ignored_fields(seq: bytes, obf: bytes) -> None:
    for build in LAYOUTS:
        body = [
            build(b"first", b"1", b"Q"),
            build(b"second", seq, obf),
            build(b"third", b"3", b"R"),
        ]
        both_agree("responses", body)


@pytest.mark.parametrize("obf", OBFUSCATIONS, ids=repr)
def test_chat_obfuscation(obf: bytes) -> None:
    body = [
        chat_chunk(b"a", extra=b',"obfuscation":"pad"'),
        chat_chunk(b"b", extra=b',"obfuscation":"' + obf + b'"'),
        chat_chunk(b"c"),  # without the padding: another shape
        chat_chunk(b"d", extra=b',"obfuscation":"' + obf + b'"'),
    ]
    both_agree("chat.completions", [*body, b"data: [DONE]\n\n"])


def test_chat_text_reaching_into_the_tail() -> None:
    """An event as long as head and tail overlapping: no text to count, a bad event."""
    first = chat_chunk(b"x")
    data = first[len(b"data: ") : -2]
    head, tail = data[: data.index(b'"x"') + 1], data[data.index(b'"x"') + 2 :]
    overlapped = b"data: " + head + tail[1:] + b"\n\n"
    rec = both_agree("chat.completions", [first, overlapped, b"data: [DONE]\n\n"])
    assert rec["parse_issues"] == 1


def test_the_templates_are_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """After the first delta of a shape, the others are not parsed in full."""
    cases = {
        "chat.completions": [chat_chunk(t) for t in (b"a", b"b\\n", b"\xc3\xa9")],
        "messages": [messages_delta(t) for t in (b"a", b"b\\n", b"\xc3\xa9")],
        "responses": [
            responses_delta(t, s, o)
            for t, s, o in ((b"a", b"1", b"x"), (b"b\\n", b"22", b""), (b"\xc3\xa9", b"0", b"y z"))
        ],
    }
    parsed: list[bytes] = []
    for endpoint, body in cases.items():
        cls = type(StreamMeter(endpoint).interpreter)
        original = cls.parse

        def counting(self: Interpreter, data: bytes, original: Parse = original) -> object:
            parsed.append(data)
            return original(self, data)

        monkeypatch.setattr(cls, "parse", counting)
        rec = both_agree(endpoint, body)
        assert rec["output_chars"] == 4
        parsed.clear()
        meter(endpoint, body, True)
        assert len(parsed) == 1, endpoint


def test_learn_refuses_a_hole_that_is_not_its_value() -> None:
    """A key written with an escape is not found by its plain name: the plain one
    found elsewhere, even with an equal value, is not taken for it."""
    obj = {
        "type": "content_block_delta",
        "text": "Hi",
        "delta": {"type": "text_delta", "text": "Hi"},
    }
    data = (
        b'{"type":"content_block_delta","text":"Hi",'
        b'"delta":{"type":"text_delta","t\\u0065xt":"Hi"}}'
    )
    assert orjson.loads(data) == obj
    assert learn(data, obj, ("delta", "text")) is None
    # a key written twice: the last one wins in the parse, the template refuses both
    data = b'{"delta":{"type":"text_delta","text":"A","text":"Hi"}}'
    assert learn(data, orjson.loads(data), ("delta", "text")) is None


def test_learn_and_read() -> None:
    data = b'{"type":"x.delta","sequence_number":12,"delta":"Hi","obfuscation":"pq"}'
    obj = orjson.loads(data)
    ignored = (("obfuscation", HoleKind.STRING), ("sequence_number", HoleKind.INT))
    template = learn(data, obj, ("delta",), ignored)
    assert template is not None
    obs = Observations()
    read = template.reader(obs, OutputKind.TEXT)
    assert read(b'{"type":"x.delta","sequence_number":7,"delta":"Hello","obfuscation":""}') == 5
    assert read(b'{"type":"x.delta","sequence_number":07,"delta":"Hello","obfuscation":""}') == -1
    assert read(b'{"type":"y.delta","sequence_number":7,"delta":"Hello","obfuscation":""}') == -1
    assert obs.text_chars == obs.output_chars == 5 and obs.output_deltas == 1


def _template() -> Template:
    template = learn(b'{"k":"x"}', {"k": "x"}, ("k",))
    assert template is not None
    return template


TEMPLATE = _template()
STRING_PARTS = [
    b"a", b" ", b'"', b"\\", b"\\n", b"\\u00e9", b"\\ud83c\\udfb5", b"\\ud800", b"\\q", b"\t",
    b"\x01", b"\x7f", b"\xc3\xa9", b"\xc3", b"\xe6\x97\xa5", b"\xed\xa0\x80", b"\xf0\x9f\x8e\xb5",
    b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\xe2\x80\xa8", b"\xc2\xa0", b"\xef\xbf\xbe", b"\xff",
    b"\x80", b"/", b"\\/", b"\\\\",
]  # fmt: skip


@settings(max_examples=2000, deadline=None)
@given(
    raw=st.one_of(
        st.lists(st.sampled_from(STRING_PARTS), max_size=6).map(b"".join),
        st.binary(max_size=8),
    )
)
def test_a_string_reads_as_orjson_reads_it(raw: bytes) -> None:
    data = b'{"k":"' + raw + b'"}'
    try:
        expected = orjson.loads(data)["k"]
    except orjson.JSONDecodeError:
        expected = None
    assert string_at(data, 6, 6 + len(raw)) == expected
    for kind in OutputKind:
        fast, slow = Observations(), Observations()
        n = TEMPLATE.reader(fast, kind)(data)
        if expected is None:
            assert n == -1
        else:
            assert n == slow.add(kind, expected)
            slow.output_chars += n
        assert {s: getattr(fast, s) for s in Observations.__slots__} == {
            s: getattr(slow, s) for s in Observations.__slots__
        }


def mutate(rng: random.Random, block: bytes) -> bytes:
    """The event with a byte changed, dropped or added somewhere in its data."""
    start = block.find(b"data: ") + 6
    end = len(block) - 2
    if end <= start:
        return block
    at = rng.randrange(start, end)
    what = rng.random()
    if what < 0.4:
        new = rng.choice(b'"\\\t\x01019 ,}:\xc3\xffx')
        return block[:at] + bytes([new]) + block[at + 1 :]
    if what < 0.7:
        return block[:at] + block[at + 1 :]
    return (
        block[:at]
        + rng.choice([b"0", b"9", b" ", b'"', b"\\", b"\\n", b"\xe6\x97\xa5"])
        + block[at:]
    )


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(p.parents[1]).as_posix())
def test_mutated_fixtures_agree(path: Path) -> None:
    rng = random.Random(path.name)
    endpoint = endpoint_for(path)
    base = blocks(load_body(path))
    for _ in range(3):
        body: list[bytes] = []
        for block in base:
            body.append(block)
            if rng.random() < 0.3:  # more like it, some of them damaged
                body += [mutate(rng, block) if rng.random() < 0.5 else block for _ in range(3)]
        both_agree(endpoint, body)
        both_agree(endpoint, [b"".join(body)])


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(st.text(max_size=12), min_size=1, max_size=10),
    seqs=st.lists(st.integers(0, 10**20), min_size=1, max_size=10),
    obfs=st.lists(st.text(max_size=6), min_size=1, max_size=10),
    sort=st.booleans(),
)
def test_random_responses_streams_agree(
    texts: list[str], seqs: list[int], obfs: list[str], sort: bool
) -> None:
    body = []
    for i, text in enumerate(texts):
        obj = {
            "type": "response.output_text.delta",
            "sequence_number": seqs[i % len(seqs)],
            "item_id": "msg_1",
            "output_index": 0,
            "content_index": 0,
            "delta": text,
            "logprobs": [],
            "obfuscation": obfs[i % len(obfs)],
        }
        data = json.dumps(obj, ensure_ascii=i % 2 == 0, separators=(",", ":"), sort_keys=sort)
        body.append(b"event: response.output_text.delta\ndata: " + data.encode() + b"\n\n")
    both_agree("responses", body)
