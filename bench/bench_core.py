"""Core benchmark: events per second of the framer and the full meter, against the
official openai SDK's SSE decoder and httpx-sse's decoder, on the same bytes.

Run: ``.venv/bin/python bench/bench_core.py`` (``--quick`` for a smoke run).

What is timed (each contender consumes every event of the body):

- ``openai SDK decoder`` (the anchor): ``openai._streaming.SSEDecoder().iter_bytes``.
- ``httpx-sse decoder``: what ``EventSource.iter_sse`` does on a response, minus
  the network: httpx's incremental UTF-8 ``TextDecoder``, then httpx-sse's
  ``SSELineDecoder`` and ``SSEDecoder``.
- ``recorder framer``: ``SSEFramer().feed(piece)`` for every piece, then ``feed(b"")``.
- ``recorder meter``: ``StreamMeter(endpoint, start=0.0)`` fed ``(piece, now)``
  pairs with ``feed_many`` in the proxy's batches (up to 32 pieces or 64 KiB, as
  ``recorder.proxy.addon`` meters them), then ``finish(now)``: framing, one JSON
  parse per event, interpretation, timing. A context row feeds the same pairs one
  at a time with ``feed`` (what a capture's replay does); another meters as the
  proxy does with the template reader in Python instead of C (what an install
  without a C compiler runs, and the code before the reader moved to C).
- context rows, to read the meter's figure: the SDK decoder plus ``json.loads``
  (what the openai client itself does per event, ``sse.json()``), ``orjson.loads``
  alone on every event's data, and the endpoint's interpreter alone on events
  framed beforehand (its JSON parse included).

Bodies are built from the real captures in ``tests/fixtures`` (their exact JSON
shapes, ids, models, usage), with the output-delta run repeated to tens of
thousands of events using the captures' own delta texts plus some Japanese text
(multibyte UTF-8 that the network may split). Two chunkings per body: seeded random
network pieces of 256 B to 16 KiB, and one event per piece (what mitmproxy hands an
HTTP/1 chunked stream's callable).

Amazon Bedrock (AWS's binary event stream, issue 31): a ConverseStream body built
from the real capture's shapes (``tests/fixtures/bedrock``: its texts and Bedrock's
``p`` padding of random length) and an InvokeModelWithResponseStream body (the
Messages body's events, each base64 in a ``chunk``, the last with its invocation
metrics), against botocore's own ``EventStreamBuffer`` (the anchor: prelude,
CRCs, headers, payload, what boto3's ``EventStream`` runs before its JSON parser),
with the recorder's event-stream framer and its meter (framing, the JSON, the
base64, the interpreter, timing); a context row adds botocore's ``json.loads``
(and the base64 for InvokeModel). ``--eventstream-only`` / ``--sse-only`` /
``--gemini-only`` run one part.
Gemini (``generate_content``) has its own table: its anchor is the official
``google-genai`` SDK's own stream parsing, the SDK's ``HttpResponse.segments()`` over
an ``httpx.Response`` streaming the same pieces (its SSE line reading and one
``json.loads`` per chunk), and, as a context row, that plus the
``GenerateContentResponse`` the SDK builds of each chunk (what a caller of
``generate_content_stream`` gets). The recorder's meter reads the same chunks as SSE
(``alt=sse``) and as the JSON array Google streams without ``alt=sse`` (which the SDK
never asks for; the ratio is against the SDK on the SSE form of the same chunks).

Every repetition runs all contenders in a rotating order, so machine noise hits
them alike; the figure kept is the median of the repetitions. Each is timed in
this thread's CPU time (``--wall``: wall-clock), so other jobs on the machine
count only by what they do to caches, not by the time they hold the CPU. Ratios are taken
against the SDK decoder on the same body and chunking in the same run. The exit
status is non-zero only if something crashes; a missed target is reported, not
failed.
"""

from __future__ import annotations

import argparse
import codecs
import gc
import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import openai  # noqa: E402
import orjson  # noqa: E402
from openai._streaming import SSEDecoder as OpenAISSEDecoder  # noqa: E402

try:
    import httpx
    from httpx._decoders import TextDecoder
    from httpx_sse import __version__ as httpx_sse_version
    from httpx_sse._decoders import SSEDecoder as HxSSEDecoder
    from httpx_sse._decoders import SSELineDecoder as HxSSELineDecoder

    HTTPX_NOTE = f"httpx-sse {httpx_sse_version} (httpx {httpx.__version__})"
except ImportError:  # httpx_sse/__init__ imports httpx, which httpx-sse does not require
    import importlib.util
    from importlib.metadata import version

    def _load_decoders():  # type: ignore[no-untyped-def]
        # httpx_sse's _models.py and _decoders.py themselves import no httpx
        spec = importlib.util.find_spec("httpx_sse")
        assert spec is not None and spec.submodule_search_locations, "httpx-sse is missing"
        folder = Path(next(iter(spec.submodule_search_locations)))
        models: dict[str, object] = {}
        exec(compile((folder / "_models.py").read_text(), "_models.py", "exec"), models)
        source = (folder / "_decoders.py").read_text()
        source = source.replace("from ._models import ServerSentEvent", "")
        decoders: dict[str, object] = {"ServerSentEvent": models["ServerSentEvent"]}
        exec(compile(source, "_decoders.py", "exec"), decoders)
        return decoders["SSEDecoder"], decoders["SSELineDecoder"]

    class TextDecoder:  # type: ignore[no-redef]  # httpx._decoders.TextDecoder, verbatim
        def __init__(self, encoding: str = "utf-8") -> None:
            self.decoder = codecs.getincrementaldecoder(encoding)(errors="replace")

        def decode(self, data: bytes) -> str:
            return self.decoder.decode(data)

        def flush(self) -> str:
            return self.decoder.decode(b"", True)

    HxSSEDecoder, HxSSELineDecoder = _load_decoders()
    HTTPX_NOTE = f"httpx-sse {version('httpx-sse')} (its decoders only: httpx is not installed)"

from botocore import __version__ as botocore_version  # noqa: E402
from botocore.eventstream import EventStreamBuffer  # noqa: E402

from recorder.core.eventstream import EventStreamFramer, encode_message  # noqa: E402
from recorder.core.framing import Event  # noqa: E402
from recorder.core.meter import StreamMeter  # noqa: E402
from recorder.core.protocols import interpreter_for, template  # noqa: E402
from recorder.core.sse import SSEFramer  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"

# Targets from the issue, as ratios of events/s in the same run.
TARGET_FRAMER_VS_SDK = 3.0
TARGET_FRAMER_VS_HTTPX_SSE = 1.0
TARGET_METER_VS_SDK = 3.0
# Amazon Bedrock (issue 31): the event-stream framer and the meter against
# botocore's own EventStreamBuffer reading the same bytes
TARGET_ES_FRAMER_VS_BOTOCORE = 3.0
TARGET_ES_METER_VS_BOTOCORE = 3.0
# The proxy's batches (recorder.proxy.addon.BATCH_PIECES, BATCH_BYTES): the bench
# does not import the proxy, whose layer the core's bench has no business with.
BATCH_PIECES = 128
BATCH_BYTES = 64 * 1024

# Japanese output tokens, as a model streams them (a few characters per delta).
JAPANESE = [
    "こんにちは",
    "、",
    "今日は",
    "良い",
    "天気",
    "ですね",
    "。",
    "東京",
    "の",
    "気温",
    "は",
    "18",
    "度",
    "です",
    "明日",
    "も",
    "晴れ",
    "る",
    "でしょう",
    "ストリーミング",
    "応答",
    "を",
    "計測",
    "します",
]


# -- bodies ---------------------------------------------------------------------


def _dumps(obj: object) -> str:
    """Compact JSON with raw UTF-8, as the providers put it on the wire."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _read_sse(path: Path) -> list[tuple[str | None, str]]:
    """(event name, data) per event of a captured wire body (single data line each)."""
    out: list[tuple[str | None, str]] = []
    for block in path.read_text(encoding="utf-8").replace("\r\n", "\n").split("\n\n"):
        name = None
        data = None
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data = line[5:].removeprefix(" ")
        if data is not None:
            out.append((name, data))
    return out


def _token_stream(rng: random.Random, texts: list[str], japanese_every: int = 5):
    """Endless output deltas: the captures' own texts, every few a Japanese one."""
    i = 0
    while True:
        i += 1
        if i % japanese_every == 0:
            yield rng.choice(JAPANESE)
        else:
            yield rng.choice(texts)


def build_chat(n_deltas: int, seed: int) -> tuple[str, list[bytes]]:
    """Chat Completions: role chunk, content deltas, finish chunk, usage chunk, [DONE]."""
    rng = random.Random(seed)
    texts: list[str] = []
    for name in ("d61558011839", "e2aad469b71d", "7e5ea4d12e7c", "a491adda08c3"):
        for _, data in _read_sse(FIXTURES / "openai-chat" / f"{name}.sse"):
            if data == "[DONE]":
                continue
            for choice in json.loads(data).get("choices", []):
                content = choice.get("delta", {}).get("content")
                if content:
                    texts.append(content)
    base = [d for _, d in _read_sse(FIXTURES / "openai-chat" / "d61558011839.sse")]
    role, first_delta, finish, usage_chunk, done = (
        base[0],
        json.loads(base[1]),
        base[-3],
        json.loads(base[-2]),
        base[-1],
    )
    assert done == "[DONE]" and usage_chunk["usage"], "fixture shape changed"
    events = [role]
    tokens = _token_stream(rng, texts)
    for _ in range(n_deltas):
        first_delta["choices"][0]["delta"]["content"] = next(tokens)
        events.append(_dumps(first_delta))
    events.append(finish)
    usage = usage_chunk["usage"]
    usage["completion_tokens"] = n_deltas
    usage["total_tokens"] = usage["prompt_tokens"] + n_deltas
    events.append(_dumps(usage_chunk))
    events.append(done)
    return "chat.completions", [f"data: {d}\n\n".encode() for d in events]


def build_messages(n_deltas: int, seed: int) -> tuple[str, list[bytes]]:
    """Anthropic Messages: message_start, block start, ping, text deltas, stop events."""
    rng = random.Random(seed)
    texts: list[str] = []
    for path in sorted((FIXTURES / "anthropic-messages").glob("*.sse")):
        for _, data in _read_sse(path):
            obj = json.loads(data)
            if obj.get("type") == "content_block_delta":
                text = obj["delta"].get("text")
                if text:
                    texts.append(text)
    base = _read_sse(FIXTURES / "anthropic-messages" / "basic_response.sse")
    first = next(i for i, (name, _) in enumerate(base) if name == "content_block_delta")
    last = max(i for i, (name, _) in enumerate(base) if name == "content_block_delta")
    head, delta_tpl, tail = base[:first], json.loads(base[first][1]), base[last + 1 :]
    events = list(head)
    tokens = _token_stream(rng, texts)
    for _ in range(n_deltas):
        delta_tpl["delta"]["text"] = next(tokens)
        events.append(("content_block_delta", _dumps(delta_tpl)))
    for name, data in tail:
        obj = json.loads(data)
        if obj.get("type") == "message_delta":
            obj["usage"]["output_tokens"] = n_deltas
            data = _dumps(obj)
        events.append((name, data))
    return "messages", [f"event: {name}\ndata: {data}\n\n".encode() for name, data in events]


def build_responses(n_deltas: int, seed: int) -> tuple[str, list[bytes]]:
    """OpenAI Responses: created, in_progress, reasoning item, message item with text
    deltas, the *.done events restating the text, completed (with usage)."""
    rng = random.Random(seed)
    path = (
        FIXTURES / "payload-only" / "openai-responses" / "github-copilot-id-rotation.1.chunks.txt"
    )
    objs = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    texts: list[str] = []
    for other in sorted(path.parent.glob("*.chunks.txt")):
        for line in other.read_text(encoding="utf-8").splitlines():
            if '"response.output_text.delta"' in line:
                delta = json.loads(line).get("delta")
                if delta:
                    texts.append(delta)
    kinds = [o["type"] for o in objs]
    first = kinds.index("response.output_text.delta")
    last = len(kinds) - 1 - kinds[::-1].index("response.output_text.delta")
    old_text = "".join(o["delta"] for o in objs[first : last + 1])
    tokens = _token_stream(rng, texts)
    deltas: list[dict] = []
    for _ in range(n_deltas):
        obj = dict(objs[first])
        obj["delta"] = next(tokens)
        obj["obfuscation"] = "".join(rng.choices("abcdefghijklmnopqrstuvwxyzABCDEFGHIJ", k=10))
        deltas.append(obj)
    new_text = "".join(o["delta"] for o in deltas)

    def restate(value: object) -> object:  # the *.done / completed events repeat the text
        if isinstance(value, dict):
            return {k: restate(v) for k, v in value.items()}
        if isinstance(value, list):
            return [restate(v) for v in value]
        return new_text if value == old_text else value

    events = objs[:first] + deltas + [restate(o) for o in objs[last + 1 :]]
    usage = events[-1].get("response", {}).get("usage")
    if isinstance(usage, dict) and "output_tokens" in usage:
        usage["total_tokens"] = usage.get("input_tokens", 0) + n_deltas
        usage["output_tokens"] = n_deltas
    for seq, obj in enumerate(events):
        if "sequence_number" in obj:
            obj["sequence_number"] = seq
    return "responses", [f"event: {o['type']}\ndata: {_dumps(o)}\n\n".encode() for o in events]


def random_pieces(body: bytes, seed: int, lo: int = 256, hi: int = 16384) -> list[bytes]:
    """Network-sized pieces, cut anywhere (inside lines and UTF-8 sequences too)."""
    rng = random.Random(seed)
    pieces = []
    pos = 0
    while pos < len(body):
        size = rng.randint(lo, hi)
        pieces.append(body[pos : pos + size])
        pos += size
    return pieces


# -- contenders: each returns the number of events it produced -----------------


class Scenario:
    """One body in one chunking, with what the contenders need prepared untimed."""

    def __init__(self, endpoint: str, pieces: list[bytes]) -> None:
        self.endpoint = endpoint
        self.pieces = pieces
        # Arrival times a few ms apart, like a real stream: the meter's timing runs.
        self.times = [0.001 + i * 0.002 for i in range(len(pieces))]
        # where the proxy would meter a batch: after BATCH_PIECES pieces or BATCH_BYTES
        self.batches: list[tuple[int, int]] = []
        start = size = 0
        for i, piece in enumerate(pieces):
            size += len(piece)
            if i + 1 - start >= BATCH_PIECES or size >= BATCH_BYTES:
                self.batches.append((start, i + 1))
                start, size = i + 1, 0
        if start < len(pieces):
            self.batches.append((start, len(pieces)))
        framer = SSEFramer()
        self.events = [e for p in [*pieces, b""] for e in framer.feed(p) if type(e) is Event]
        self.datas = [e.data for e in self.events]


def run_sdk(sc: Scenario) -> int:
    n = 0
    for _ in OpenAISSEDecoder().iter_bytes(iter(sc.pieces)):
        n += 1
    return n


def run_sdk_json(sc: Scenario) -> int:
    n = 0
    loads = json.loads
    for sse in OpenAISSEDecoder().iter_bytes(iter(sc.pieces)):
        if sse.data != "[DONE]":
            loads(sse.data)  # what ServerSentEvent.json() does
        n += 1
    return n


def run_httpx_sse(sc: Scenario) -> int:
    # EventSource.iter_sse over response.iter_text(), without the network.
    n = 0
    text_decoder = TextDecoder("utf-8")
    lines = HxSSELineDecoder()
    decoder = HxSSEDecoder()
    for piece in sc.pieces:
        text = text_decoder.decode(piece)
        if not text:
            continue
        for line in lines.decode(text):
            if decoder.decode(line.rstrip("\n")) is not None:
                n += 1
    tail = text_decoder.flush()
    rest = lines.decode(tail) if tail else []
    for line in rest + lines.flush():
        if decoder.decode(line.rstrip("\n")) is not None:
            n += 1
    return n


def run_framer(sc: Scenario) -> int:
    n = 0
    feed = SSEFramer().feed
    for piece in sc.pieces:
        for _ in feed(piece):
            n += 1
    for _ in feed(b""):
        n += 1
    return n


def run_meter(sc: Scenario) -> int:
    meter = StreamMeter(sc.endpoint, start=0.0)
    meter.headers(0.0005, 200)
    feed_many = meter.feed_many
    pieces, times = sc.pieces, sc.times
    for start, end in sc.batches:
        feed_many(pieces[start:end], times[start:end])
    record = meter.finish(sc.times[-1] + 0.001)
    if record.outcome != "completed" or record.parse_issues:
        raise AssertionError(f"meter misread the {sc.endpoint} body: {record.outcome}")
    return record.events or 0


def run_meter_feed(sc: Scenario) -> int:
    meter = StreamMeter(sc.endpoint, start=0.0)
    meter.headers(0.0005, 200)
    feed = meter.feed
    for piece, now in zip(sc.pieces, sc.times, strict=True):
        feed(piece, now)
    record = meter.finish(sc.times[-1] + 0.001)
    if record.outcome != "completed" or record.parse_issues:
        raise AssertionError(f"meter misread the {sc.endpoint} body: {record.outcome}")
    return record.events or 0


def run_meter_python_reader(sc: Scenario) -> int:
    # the same as run_meter with the template reader in Python: what an install
    # without a C compiler runs, and the code before the reader moved to C
    saved = template.native
    template.native = None
    try:
        return run_meter(sc)
    finally:
        template.native = saved


def run_parse_only(sc: Scenario) -> int:
    loads = orjson.loads
    for data in sc.datas:
        if data != b"[DONE]":
            loads(data)
    return len(sc.datas)


def run_interpreter_only(sc: Scenario) -> int:
    handle = interpreter_for(sc.endpoint).handle
    for event in sc.events:
        handle(event)
    return len(sc.events)


SDK = "openai SDK decoder"
FRAMER = "recorder framer"
METER = "recorder meter (framer+interpreter+meter)"
HTTPX_SSE = "httpx-sse decoder"
CONTENDERS: list[tuple[str, Callable[[Scenario], int]]] = [
    (SDK, run_sdk),
    (HTTPX_SSE, run_httpx_sse),
    (FRAMER, run_framer),
    (METER, run_meter),
    ("  context: meter fed piece by piece (feed)", run_meter_feed),
    ("  context: meter, template reader in Python", run_meter_python_reader),
    ("  context: SDK decoder + json.loads", run_sdk_json),
    ("  context: orjson.loads alone, per event", run_parse_only),
    ("  context: interpreter alone (incl. parse)", run_interpreter_only),
]


# -- Gemini ------------------------------------------------------------------------


def build_gemini(n_deltas: int, seed: int) -> list[bytes]:
    """generateContent chunks (their JSON), in the shape of the real capture
    ``pydantic-ai-test_google_stream_usage_is_live_mid_stream.yaml``: each chunk a
    text part, a cumulative usageMetadata, modelVersion and responseId; the last one
    with its finishReason."""
    rng = random.Random(seed)
    texts = ["The", " capital", " of", " France", " is", " **Paris**", ".", "\n\n", " It"]
    texts += JAPANESE
    chunks = []
    for n in range(n_deltas):
        part = rng.choice(texts)
        cand: dict[str, object] = {"content": {"parts": [{"text": part}], "role": "model"}}
        cand["index"] = 0
        if n == n_deltas - 1:
            cand["finishReason"] = "STOP"
        usage = {
            "promptTokenCount": 18,
            "candidatesTokenCount": n + 1,
            "totalTokenCount": 53 + n + 1,
            "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 18}],
            "thoughtsTokenCount": 35,
            "serviceTier": "standard",
        }
        doc = {
            "candidates": [cand],
            "usageMetadata": usage,
            "modelVersion": "gemini-2.5-flash",
            "responseId": "ru1garvBEoOiqtsP2fznmQw",
        }
        chunks.append(json.dumps(doc, ensure_ascii=False).encode())
    return chunks


def _genai_segments(pieces: list[bytes]) -> Iterator[Any]:
    import httpx as hx
    from google.genai._api_client import HttpResponse

    response = hx.Response(200, content=iter(pieces))
    return HttpResponse({}, response_stream=response).segments()


def run_genai(pieces: list[bytes]) -> int:
    n = 0
    for _ in _genai_segments(pieces):
        n += 1
    return n


def run_genai_typed(pieces: list[bytes]) -> int:
    from google.genai import types

    n = 0
    for doc in _genai_segments(pieces):
        types.GenerateContentResponse._from_response(response=doc, kwargs={})
        n += 1
    return n


def run_gemini_meter(pieces: list[bytes], array: bool) -> int:
    meter = StreamMeter("generate_content", start=0.0)
    if array:
        meter.frames_json_array()
    meter.headers(0.0005, 200)
    times = [0.001 + i * 0.002 for i in range(len(pieces))]
    for start in range(0, len(pieces), BATCH_PIECES):
        meter.feed_many(pieces[start : start + BATCH_PIECES], times[start : start + BATCH_PIECES])
    record = meter.finish(times[-1] + 0.001)
    if record.outcome != "completed" or record.parse_issues:
        raise AssertionError(f"meter misread the Gemini body: {record.outcome}")
    return record.events or 0


GENAI = "google-genai SDK: segments (lines + json)"
TYPED = "  context: + GenerateContentResponse"


def gemini_section(n_deltas: int, repeats: int, note: Callable[[str, float, str], None]) -> None:
    """The Gemini table: the meter on both transports against the SDK's parsing."""
    try:
        import google.genai as genai
    except ImportError:
        print("generate_content: google-genai is not installed (the dev extra): skipped\n")
        return
    chunks = build_gemini(n_deltas, seed=1)
    sse_events = [b"data: " + c + b"\r\n\r\n" for c in chunks]
    sse = b"".join(sse_events)
    array = b"[" + b",\r\n".join(chunks) + b"]"
    cases = [
        (
            "sse, random pieces 256 B-16 KiB",
            random_pieces(sse, seed=2),
            random_pieces(sse, 2),
            False,
        ),
        ("sse, one event per piece", sse_events, sse_events, False),
        ("json-array, random pieces", random_pieces(array, seed=2), random_pieces(sse, 2), True),
        (
            "json-array, one element per piece",
            [b"[" + chunks[0], *(b",\r\n" + c for c in chunks[1:]), b"]"],
            sse_events,
            True,
        ),
    ]
    print(f"generate_content (google-genai {genai.__version__}): {len(chunks):,} chunks")
    header = f"  {'contender':<44}{'events/s':>12}{'µs/event':>10}{'vs SDK':>9}"
    for label, mine, theirs, is_array in cases:
        contenders: list[tuple[str, Callable[[], int]]] = [
            (GENAI, lambda t=theirs: run_genai(t)),
            (TYPED, lambda t=theirs: run_genai_typed(t)),
            (METER, lambda m=mine, a=is_array: run_gemini_meter(m, a)),
        ]
        counts = {name: fn() for name, fn in contenders}
        if len(set(counts.values())) != 1:
            raise AssertionError(f"contenders disagree on the chunk count: {counts}")
        samples: dict[str, list[float]] = {name: [] for name, _ in contenders}
        for r in range(repeats):
            k = r % len(contenders)
            for name, fn in contenders[k:] + contenders[:k]:
                gc.collect()
                t0 = CLOCK()
                fn()
                samples[name].append(CLOCK() - t0)
        secs = {name: statistics.median(v) for name, v in samples.items()}
        events = counts[GENAI]
        print(f"  {label}")
        print(header)
        for name, _ in contenders:
            print(
                f"  {name:<44}{events / secs[name]:>12,.0f}"
                f"{secs[name] / events * 1e6:>10.2f}{secs[GENAI] / secs[name]:>8.2f}x"
            )
        where = f"generate_content, {label}"
        note("gemini meter vs google-genai", secs[GENAI] / secs[METER], where)
        note("gemini meter vs google-genai typed", secs[TYPED] / secs[METER], where)
    print()


# -- measuring -------------------------------------------------------------------


# The clock of every sample: this thread's CPU time by default, so that time
# spent by other processes while this one waits for a CPU is not counted (the
# machine may be shared); ``--wall`` times with perf_counter instead.
CLOCK: Callable[[], float] = time.thread_time


def measure(sc: Scenario, repeats: int) -> tuple[int, dict[str, float]]:
    """Median seconds per contender; contenders interleaved, order rotated per round."""
    counts = {name: fn(sc) for name, fn in CONTENDERS}  # warm-up, and a check
    events = counts[SDK]
    if any(c != events for c in counts.values()):
        raise AssertionError(f"contenders disagree on the event count: {counts}")
    samples: dict[str, list[float]] = {name: [] for name, _ in CONTENDERS}
    for r in range(repeats):
        k = r % len(CONTENDERS)
        for name, fn in CONTENDERS[k:] + CONTENDERS[:k]:
            gc.collect()
            t0 = CLOCK()
            fn(sc)
            samples[name].append(CLOCK() - t0)
    return events, {name: statistics.median(s) for name, s in samples.items()}


def machine() -> str:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()} "
        f"({platform.python_implementation()}), {platform.system()} {platform.release()}\n"
        f"openai {openai.__version__}, {HTTPX_NOTE}, orjson {orjson.__version__}"
    )


# -- Amazon Bedrock: AWS's binary event stream, against botocore ---------------------

BEDROCK_CAPTURE = ROOT / "tests" / "fixtures" / "bedrock" / "converse_stream_nova_micro.bin"
_HEADERS = {":content-type": "application/json", ":message-type": "event"}


def _es(name: str, obj: object) -> bytes:
    return encode_message({":event-type": name, **_HEADERS}, _dumps(obj).encode())


def _capture_texts() -> list[str]:
    buf = EventStreamBuffer()
    buf.add_data(BEDROCK_CAPTURE.read_bytes())
    texts = []
    for msg in buf:
        if msg.headers[":event-type"] == "contentBlockDelta":
            texts.append(json.loads(msg.payload)["delta"]["text"])
    return texts


_PAD = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def build_converse(n_deltas: int, seed: int) -> tuple[str, list[bytes]]:
    """ConverseStream as the real capture writes it (``p`` padding of random length)."""
    rng = random.Random(seed)
    tokens = _token_stream(rng, _capture_texts())
    pad = lambda: _PAD[: rng.randint(1, 60)]  # noqa: E731
    blocks = [_es("messageStart", {"p": pad(), "role": "assistant"})]
    for _ in range(n_deltas):
        delta = {"contentBlockIndex": 0, "delta": {"text": next(tokens)}, "p": pad()}
        blocks.append(_es("contentBlockDelta", delta))
    blocks.append(_es("contentBlockStop", {"contentBlockIndex": 0, "p": pad()}))
    blocks.append(_es("messageStop", {"p": pad(), "stopReason": "end_turn"}))
    usage = {"inputTokens": 13, "outputTokens": n_deltas, "totalTokens": 13 + n_deltas}
    blocks.append(_es("metadata", {"metrics": {"latencyMs": 391}, "p": pad(), "usage": usage}))
    return "converse", blocks


def build_invoke(n_deltas: int, seed: int) -> tuple[str, list[bytes]]:
    """InvokeModelWithResponseStream for a Claude model: Messages events in base64 chunks."""
    import base64

    _, messages = build_messages(n_deltas, seed)
    framer = SSEFramer()
    events = [e for b in [*messages, b""] for e in framer.feed(b) if type(e) is Event]
    blocks = []
    for i, event in enumerate(events):
        data = event.data
        if i == len(events) - 1:  # message_stop carries the invocation metrics
            obj = orjson.loads(data)
            obj["amazon-bedrock-invocationMetrics"] = {
                "inputTokenCount": 10,
                "outputTokenCount": n_deltas,
                "invocationLatency": 900,
                "firstByteLatency": 300,
            }
            data = orjson.dumps(obj)
        blocks.append(_es("chunk", {"bytes": base64.b64encode(data).decode(), "p": "abcd"}))
    return "invoke_model", blocks


def run_botocore(sc: Scenario) -> int:
    # botocore's own reader: what EventStream.__iter__ runs on the response's
    # chunks before its JSON parser (prelude, CRCs, headers, payload)
    n = 0
    buf = EventStreamBuffer()
    for piece in sc.pieces:
        buf.add_data(piece)
        for _ in buf:
            n += 1
    return n


def run_botocore_json(sc: Scenario) -> int:
    import base64

    n = 0
    buf = EventStreamBuffer()
    loads = json.loads
    for piece in sc.pieces:
        buf.add_data(piece)
        for msg in buf:
            obj = loads(msg.payload)
            if "bytes" in obj:  # InvokeModel: the model's JSON inside
                loads(base64.b64decode(obj["bytes"]))
            n += 1
    return n


def run_es_framer(sc: Scenario) -> int:
    n = 0
    feed = EventStreamFramer().feed
    for piece in sc.pieces:
        for _ in feed(piece):
            n += 1
    return n


BOTOCORE = "botocore EventStreamBuffer"
ES_FRAMER = "recorder event-stream framer"
ES_CONTENDERS: list[tuple[str, Callable[[Scenario], int]]] = [
    (BOTOCORE, run_botocore),
    (ES_FRAMER, run_es_framer),
    (METER, run_meter),
    ("  context: meter fed piece by piece (feed)", run_meter_feed),
    ("  context: botocore buffer + json.loads", run_botocore_json),
]


def measure_eventstream(sc: Scenario, repeats: int) -> tuple[int, dict[str, float]]:
    counts = {name: fn(sc) for name, fn in ES_CONTENDERS}
    events = counts[BOTOCORE]
    if any(c != events for c in counts.values()):
        raise AssertionError(f"contenders disagree on the event count: {counts}")
    samples: dict[str, list[float]] = {name: [] for name, _ in ES_CONTENDERS}
    for r in range(repeats):
        k = r % len(ES_CONTENDERS)
        for name, fn in ES_CONTENDERS[k:] + ES_CONTENDERS[:k]:
            gc.collect()
            t0 = CLOCK()
            fn(sc)
            samples[name].append(CLOCK() - t0)
    return events, {name: statistics.median(s) for name, s in samples.items()}


def bench_eventstream(n_deltas: int, repeats: int) -> dict[str, tuple[float, str]]:
    """The Bedrock bodies against botocore; the worst ratios."""
    worst: dict[str, tuple[float, str]] = {}
    header = f"  {'contender':<44}{'events/s':>12}{'µs/event':>10}{'vs boto':>9}"
    for build in (build_converse, build_invoke):
        endpoint, blocks = build(n_deltas, seed=1)
        body = b"".join(blocks)
        for label, pieces in (
            ("random pieces 256 B-16 KiB", random_pieces(body, seed=2)),
            ("one message per piece", blocks),
        ):
            sc = Scenario(endpoint, pieces)
            events, secs = measure_eventstream(sc, repeats)
            print(
                f"{endpoint} (AWS event stream): {events:,} events, {len(body) / 1e6:.1f} MB "
                f"in {len(pieces):,} pieces ({label})"
            )
            print(header)
            base = secs[BOTOCORE]
            for name, _ in ES_CONTENDERS:
                print(
                    f"  {name:<44}{events / secs[name]:>12,.0f}"
                    f"{secs[name] / events * 1e6:>10.2f}{base / secs[name]:>8.2f}x"
                )
            where = f"{endpoint}, {label}"
            for key, name in (
                ("event-stream framer vs botocore", ES_FRAMER),
                ("event-stream meter vs botocore", METER),
            ):
                ratio = base / secs[name]
                if key not in worst or ratio < worst[key][0]:
                    worst[key] = (ratio, where)
            print()
    return worst


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small bodies, 3 rounds")
    parser.add_argument("--repeats", type=int, help="rounds per measurement (default 7)")
    parser.add_argument(
        "--wall", action="store_true", help="time wall-clock (perf_counter), not CPU time"
    )
    parser.add_argument(
        "--eventstream-only", action="store_true", help="only the Bedrock event-stream bodies"
    )
    parser.add_argument(
        "--sse-only", action="store_true", help="skip the Bedrock event-stream bodies"
    )
    parser.add_argument(
        "--gemini-only", action="store_true", help="only the Gemini (generate_content) table"
    )
    args = parser.parse_args(argv)
    global CLOCK
    CLOCK = time.perf_counter if args.wall else time.thread_time
    n_deltas = 4_000 if args.quick else 30_000
    repeats = args.repeats or (3 if args.quick else 7)

    print(machine())
    clock = "wall-clock time" if args.wall else "this thread's CPU time"
    print(f"median of {repeats} interleaved rounds, {clock}; ratios against the {SDK}, same run\n")

    worst: dict[str, tuple[float, str]] = {}

    def note(key: str, ratio: float, where: str) -> None:
        if key not in worst or ratio < worst[key][0]:
            worst[key] = (ratio, where)

    header = f"  {'contender':<44}{'events/s':>12}{'µs/event':>10}{'vs SDK':>9}"
    skip_sse = args.eventstream_only or args.gemini_only
    for build in () if skip_sse else (build_chat, build_messages, build_responses):
        endpoint, blocks = build(n_deltas, seed=1)
        body = b"".join(blocks)
        chunkings = [
            ("random pieces 256 B-16 KiB", random_pieces(body, seed=2)),
            ("one event per piece", blocks),
        ]
        for label, pieces in chunkings:
            events, secs = measure(Scenario(endpoint, pieces), repeats)
            print(
                f"{endpoint}: {events:,} events, {len(body) / 1e6:.1f} MB "
                f"in {len(pieces):,} pieces ({label})"
            )
            print(header)
            base = secs[SDK]
            for name, _ in CONTENDERS:
                print(
                    f"  {name:<44}{events / secs[name]:>12,.0f}"
                    f"{secs[name] / events * 1e6:>10.2f}{base / secs[name]:>8.2f}x"
                )
            where = f"{endpoint}, {label}"
            note("framer vs SDK decoder", base / secs[FRAMER], where)
            note("framer vs httpx-sse", secs[HTTPX_SSE] / secs[FRAMER], where)
            note("meter vs SDK decoder", base / secs[METER], where)
            print()

    if not args.sse_only and not args.gemini_only:
        print(f"botocore {botocore_version}")
        worst.update(bench_eventstream(n_deltas, repeats))
    if not args.eventstream_only:
        gemini_section(n_deltas, repeats, note)

    targets = {
        "gemini meter vs google-genai": TARGET_METER_VS_SDK,
        "gemini meter vs google-genai typed": TARGET_METER_VS_SDK,
        "framer vs SDK decoder": TARGET_FRAMER_VS_SDK,
        "framer vs httpx-sse": TARGET_FRAMER_VS_HTTPX_SSE,
        "meter vs SDK decoder": TARGET_METER_VS_SDK,
    }
    if not args.sse_only and not args.gemini_only:
        targets["event-stream framer vs botocore"] = TARGET_ES_FRAMER_VS_BOTOCORE
        targets["event-stream meter vs botocore"] = TARGET_ES_METER_VS_BOTOCORE
    print("targets (worst case over bodies and chunkings):")
    for label, want in targets.items():
        if label not in worst:
            continue
        got, where = worst[label]
        verdict = "met" if got >= want else f"MISSED by {(1 - got / want) * 100:.0f}%"
        print(f"  {label:<31} {got:5.2f}x  (target >= {want:.1f}x)  {verdict:<15} worst: {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
