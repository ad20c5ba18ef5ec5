"""The template reader in C must read every byte string as the Python reader does.

The Python reader (``Template.python_reader``) is the reference, itself checked
against the full parse (test_template.py, which runs with both readers). Here
both readers get the same templates, learned from generated events of the
three shapes the interpreters learn (no ignored hole, an integer before the
text, strings after it), and the same candidate bytes: the events with other
texts (escapes, surrogate pairs, multibyte and broken UTF-8, quotes, control
characters) and other values in the ignored holes, then with bytes flipped,
dropped or added anywhere. The return value and every ``Observations`` slot
must agree, for each kind of output; ``run`` on a piece of several such events
(LF or CRLF) and ``run_objects`` on elements of a JSON array must stop at the
same place with the same counts.
"""

from __future__ import annotations

import random
import shutil

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recorder.core.json_array import JSONArrayFramer
from recorder.core.protocols import template
from recorder.core.protocols.observations import Observations, OutputKind
from recorder.core.protocols.template import HoleKind, Template, learn
from recorder.core.sse import SSEFramer

native = template.native
needs_c = pytest.mark.skipif(native is None, reason="the C reader is not built")

KINDS = tuple(OutputKind)
TEXT = OutputKind.TEXT
STRING, INT = HoleKind.STRING, HoleKind.INT
TEXT_PARTS = [
    b"a", b"Hi", b" ", b'"', b"\\", b"\\n", b'\\"', b"\\\\", b"\\/", b"\\b\\f\\r\\t",
    b"\\u00e9", b"\\u65E5", b"\\u0000", b"\\u001f", b"\\u007f", b"\\u0800", b"\\uFFFF",
    b"\\ud83c\\udfb5", b"\\uDBFF\\uDFFF", b"\\ud800", b"\\udc00", b"\\ud800\\u0041",
    b"\\ud83c\\", b"\\ud83c\\u", b"\\u12", b"\\u12g4", b"\\q", b"\\x41", b"\t", b"\x01",
    b"\x1f", b"\x7f", b"\xc3\xa9", b"\xc3", b"\xe6\x97\xa5", b"\xe6\x97", b"\xed\xa0\x80",
    b"\xed\x9f\xbf", b"\xf0\x9f\x8e\xb5", b"\xf0\x8f\xbf\xbf", b"\xf4\x8f\xbf\xbf",
    b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\xc1\xbf", b"\xe0\x9f\xbf", b"\xe2\x80\xa8",
    b"\xc2\xa0", b"\xef\xbf\xbe", b"\xf5\x80\x80\x80", b"\xff", b"\x80", b"\n", b"\r",
]  # fmt: skip
HOLE_PARTS = [b"", b"0", b"7", b"01", b"123456789012345678", b"1234567890123456789", b"-1",
              b"Zq3", b"a b", b"~", b"\\", b'"', b"\t", b"\xc3\xa9", b",", b"}"]  # fmt: skip

texts = st.one_of(
    st.lists(st.sampled_from(TEXT_PARTS), max_size=8).map(b"".join),
    st.binary(max_size=10),
)
holes = st.one_of(st.sampled_from(HOLE_PARTS), st.binary(max_size=4))


def chat(text: bytes) -> bytes:
    return (
        b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
        b'"choices":[{"index":0,"delta":{"content":"' + text + b'"},"finish_reason":null}]}'
    )


def responses(text: bytes, seq: bytes, obf: bytes) -> bytes:
    return (
        b'{"type":"response.output_text.delta","sequence_number":' + seq + b',"item_id":"m",'
        b'"delta":"' + text + b'","logprobs":[],"obfuscation":"' + obf + b'"}'
    )


def two_after(text: bytes, seq: bytes, obf: bytes) -> bytes:
    """Both ignored holes after the text, then an integer before it too."""
    return (
        b'{"type":"x","n":' + seq + b',"delta":"' + text + b'","obfuscation":"' + obf + b'",'
        b'"sequence_number":' + seq[::-1] + b"}"
    )


def three_after(text: bytes, seq: bytes, obf: bytes) -> bytes:
    """Three ignored holes after the text: read by ``Template.match``, not unrolled."""
    return (
        b'{"type":"x","delta":"' + text + b'","obfuscation":"' + obf + b'",'
        b'"sequence_number":' + seq + b',"n":' + seq[::-1] + b"}"
    )


def learned() -> list[tuple[str, Template, object]]:
    """(name, template, a function making an event of its shape) for each shape."""
    made: list[tuple[str, Template, object]] = []
    data = chat(b"Hello")
    t = learn(data, orjson.loads(data), ("choices", 0, "delta", "content"))
    assert t is not None and not t.left and not t.right
    made.append(("chat", t, lambda text, seq, obf: chat(text)))
    ignored = (("obfuscation", STRING), ("sequence_number", INT))
    data = responses(b"Hello", b"12", b"pq")
    t = learn(data, orjson.loads(data), ("delta",), ignored)
    assert t is not None and len(t.left) == 1 and len(t.right) == 1
    made.append(("responses", t, responses))
    data = two_after(b"Hello", b"12", b"pq")
    t = learn(data, orjson.loads(data), ("delta",), (*ignored, ("n", INT)))
    assert t is not None and len(t.left) == 1 and len(t.right) == 2
    made.append(("two after", t, two_after))
    data = three_after(b"Hello", b"12", b"pq")
    t = learn(data, orjson.loads(data), ("delta",), (*ignored, ("n", INT)))
    assert t is not None and not t.left and len(t.right) == 3
    made.append(("three after", t, three_after))
    return made


SHAPES = learned()
FRAMER = SSEFramer()
FRAMED = [
    (name, framed, make)
    for name, t, make in SHAPES
    for event_name in ("message", "delta")
    if (framed := FRAMER.whole_event(t, event_name)) is not None
]


def slots(obs: Observations) -> dict[str, object]:
    return {name: getattr(obs, name) for name in Observations.__slots__}


def mutate(rng: random.Random, data: bytes) -> bytes:
    at = rng.randrange(len(data) + 1)
    what = rng.random()
    if what < 0.4 and at < len(data):
        return data[:at] + bytes([rng.choice(b'"\\\t\n\x01019 ,}:\xc3\xffxu')]) + data[at + 1 :]
    if what < 0.7 and at < len(data):
        return data[:at] + data[at + 1 :]
    return data[:at] + rng.choice([b"0", b" ", b'"', b"\\", b"\\n", b"\n\n", b"\xe6"]) + data[at:]


def agree(tmpl: Template, data: bytes) -> int:
    """Both readers on ``data``, for each kind: the same answer, the same counts."""
    answers = set()
    for kind in KINDS:
        c_obs, py_obs = Observations(), Observations()
        c_read = tmpl.reader(c_obs, kind)
        assert type(c_read) is native.Reader  # type: ignore[union-attr]
        py_read = tmpl.python_reader(py_obs, kind)
        n = py_read(data)
        assert c_read(data) == n, (kind, data)
        assert slots(c_obs) == slots(py_obs), (kind, data)
        answers.add(n)
    assert len(answers) == 1
    return answers.pop()


@needs_c
@settings(max_examples=1500, deadline=None)
@given(shape=st.integers(0, len(SHAPES) - 1), text=texts, seq=holes, obf=holes)
def test_an_event_reads_alike(shape: int, text: bytes, seq: bytes, obf: bytes) -> None:
    _, tmpl, make = SHAPES[shape]
    agree(tmpl, make(text, seq, obf))  # type: ignore[operator]


@needs_c
@settings(max_examples=600, deadline=None)
@given(
    shape=st.integers(0, len(SHAPES) - 1),
    text=texts,
    seed=st.integers(0, 2**32),
)
def test_a_damaged_event_reads_alike(shape: int, text: bytes, seed: int) -> None:
    _, tmpl, make = SHAPES[shape]
    rng = random.Random(seed)
    data = make(text, b"42", b"Zq")  # type: ignore[operator]
    for _ in range(3):
        data = mutate(rng, data)
        agree(tmpl, data)


@needs_c
def test_the_readers_read_what_they_should() -> None:
    """Not only agreement: the usual events are read, with the counts expected."""
    _, tmpl, make = SHAPES[1]
    assert agree(tmpl, make(b"caf\xc3\xa9 \\u65e5\\ud83c\\udfb5", b"7", b"ab")) == 7  # type: ignore[operator]
    obs = Observations()
    read = tmpl.reader(obs, TEXT)
    assert read(make(b"caf\xc3\xa9 \\u65e5\\ud83c\\udfb5", b"7", b"ab")) == 7  # type: ignore[operator]
    assert (obs.text_chars, obs.output_deltas, obs.output_chars) == (7, 1, 7)
    assert (obs.alphabetic_chars, obs.cjk_chars) == (1, 2)  # é; 日 and the emoji
    for refused in (b"\\ud800", b'a"b', b"\x01", b"\xc3", b"\\q"):
        assert read(make(refused, b"7", b"ab")) == -1  # type: ignore[operator]
    assert read(make(b"x", b"07", b"ab")) == -1  # type: ignore[operator]
    assert read(make(b"x", b"7", b"a\\b")) == -1  # type: ignore[operator]
    assert read(bytearray(make(b"xy", b"7", b"ab"))) == 2  # type: ignore[operator]
    assert read(memoryview(make(b"xyz", b"7", b"ab"))) == 3  # type: ignore[operator]
    assert (obs.text_chars, obs.output_deltas) == (12, 3)


@needs_c
@settings(max_examples=500, deadline=None)
@given(
    shape=st.integers(0, len(FRAMED) - 1),
    events=st.lists(st.tuples(texts, holes, st.booleans()), min_size=1, max_size=8),
    seed=st.integers(0, 2**32),
    limit=st.sampled_from([0, 40, 150, 190, 10_000]),
    start=st.integers(0, 30),
)
def test_a_run_of_events_reads_alike(
    shape: int, events: list[tuple[bytes, bytes, bool]], seed: int, limit: int, start: int
) -> None:
    _, tmpl, make = FRAMED[shape]
    lead = tmpl.head[: tmpl.head.index(b"{")]
    rng = random.Random(seed)
    piece = b""
    for text, seq, damaged in events:
        data = lead + make(text, seq if rng.random() < 0.3 else b"5", b"Zq") + b"\n\n"  # type: ignore[operator]
        piece += mutate(rng, data) if damaged else data
    if rng.random() < 0.5:
        piece += piece[: rng.randrange(len(piece))]  # a piece that ends inside an event
    start = min(start, len(piece))
    for kind in KINDS:
        c_obs, py_obs = Observations(), Observations()
        c_read = tmpl.reader(c_obs, kind)
        py_read = tmpl.python_reader(py_obs, kind)
        assert FRAMER.runner(c_read) == c_read.run  # type: ignore[attr-defined]
        expected = FRAMER.runner(py_read)(piece, start, limit)
        assert FRAMER.runner(c_read)(piece, start, limit) == expected
        assert slots(c_obs) == slots(py_obs)
        pos, read, outputs = expected
        assert start <= pos <= len(piece) and outputs <= read


CRLF_FRAMER = SSEFramer()
CRLF_FRAMER.feed(b": a CR\r\n\r\n")  # (its line ends are CRLF now)
ARRAY_FRAMER = JSONArrayFramer()
WRAPPED = [
    (framer, make, framed, lead, trail)
    for _, t, make in SHAPES
    for framer, lead, trail in (
        (CRLF_FRAMER, b"data: ", b"\r\n\r\n"),
        (ARRAY_FRAMER, b",\r\n", b""),
    )
    if (framed := framer.whole_event(t, "message")) is not None
]


@needs_c
@settings(max_examples=500, deadline=None)
@given(
    shape=st.integers(0, len(WRAPPED) - 1),
    events=st.lists(st.tuples(texts, holes, st.booleans()), min_size=1, max_size=8),
    seed=st.integers(0, 2**32),
    limit=st.sampled_from([0, 40, 150, 190, 10_000]),
    start=st.integers(0, 30),
)
def test_a_run_of_crlf_events_or_array_elements_reads_alike(
    shape: int, events: list[tuple[bytes, bytes, bool]], seed: int, limit: int, start: int
) -> None:
    """``run`` with CRLF blank lines (SSEFramer.runner for Google's line ends) and
    ``run_objects`` (JSONArrayFramer.runner) stop where the Python runs stop."""
    framer, make, tmpl, lead, trail = WRAPPED[shape]
    rng = random.Random(seed)
    piece = b""
    for text, seq, damaged in events:
        if framer is ARRAY_FRAMER:  # any separator between elements
            lead = rng.choice([b",\r\n", b"\r\n,\r\n", b"\n,\n", b",", b"", b" ,\t"])
        data = lead + make(text, seq if rng.random() < 0.3 else b"5", b"Zq") + trail  # type: ignore[operator]
        piece += mutate(rng, data) if damaged else data
    if rng.random() < 0.5:
        piece += piece[: rng.randrange(len(piece))]  # a piece that ends inside an event
    start = min(start, len(piece))
    for kind in KINDS:
        c_obs, py_obs = Observations(), Observations()
        expected = framer.runner(tmpl.python_reader(py_obs, kind))(piece, start, limit)
        assert framer.runner(tmpl.reader(c_obs, kind))(piece, start, limit) == expected
        assert slots(c_obs) == slots(py_obs)


@needs_c
def test_a_reader_refuses_bad_arguments() -> None:
    _, tmpl, _ = SHAPES[0]
    obs = Observations()
    read = tmpl.reader(obs, TEXT)
    with pytest.raises(TypeError):
        read("a str")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        read()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        read.run(b"", 0)  # type: ignore[attr-defined]
    with pytest.raises(ValueError):
        read.run(b"", -1, 10)  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        read.run(b"", 0, 10, b"")  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        read.run_objects(b"", 0)  # type: ignore[attr-defined]
    with pytest.raises(ValueError):
        read.run_objects(b"", 0, -1)  # type: ignore[attr-defined]
    with pytest.raises(ValueError):
        read.run_objects(b"", 0, 1, len(tmpl.head) + 1)  # type: ignore[attr-defined]
    with pytest.raises(ValueError):
        native.Reader(obs, 7, b"", (), (), b"")  # type: ignore[union-attr]
    with pytest.raises(ValueError):
        native.Reader(obs, TEXT, b"", ((0, b"x"),), (), b"")  # type: ignore[union-attr]
    with pytest.raises(TypeError):
        native.Reader(obs, TEXT, b"", [(INT, b"x")], (), b"")  # type: ignore[union-attr, arg-type]
    with pytest.raises(AttributeError):  # counts go to an object that has the slots
        native.Reader(object(), TEXT, b"", (), (), b"")(b"x")  # type: ignore[union-attr]
    assert obs.output_chars == 0


@pytest.mark.skipif(
    not (shutil.which("cc") or shutil.which("gcc")), reason="no C compiler: the Python reader"
)
def test_the_c_reader_is_built() -> None:
    """Where there is a C compiler, installing the package builds the reader
    (scripts/test does): a build that failed would leave only the Python
    reader, which is slower, and no other test would say so."""
    assert template.native is not None, "_reader.c did not build: see .venv/install.log"
