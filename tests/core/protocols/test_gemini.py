"""Gemini's and Vertex AI's generateContent: real captures, both stream transports,
every split, and the outcomes a user is billed by.

Expected figures come from this file's own reading of the payloads (the standard
library's json), never from the interpreter under test.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from recorder.core.billing import complete_usage
from recorder.core.meter import StreamMeter
from recorder.core.record import StreamRecord
from tests.kit import cassettes

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "gemini"
ENDPOINT = "generate_content"


# -- the captures, as the wire carries them --------------------------------------


def _cassette_body(path: Path) -> bytes:
    doc = YAML(typ="safe").load(path.read_text())
    body: str = doc["interactions"][0]["response"]["body"]["string"]
    return body.encode()


def _payloads(path: Path) -> list[bytes]:
    """Each response of a capture, as the bytes of its JSON."""
    if path.suffix == ".jsonl":
        return [line for line in path.read_bytes().splitlines() if line.strip()]
    body = _cassette_body(path) if path.suffix == ".yaml" else path.read_bytes()
    events = body.replace(b"\r\n", b"\n").split(b"\n\n")
    return [e.removeprefix(b"data: ") for e in events if e.strip()]


def _sse(payloads: list[bytes]) -> bytes:
    return b"".join(b"data: " + p + b"\r\n\r\n" for p in payloads)


def _array(payloads: list[bytes]) -> bytes:
    return b"[" + b",\r\n".join(payloads) + b"]"


CAPTURES = sorted(p for p in FIXTURES.iterdir() if p.suffix in (".yaml", ".jsonl", ".wire"))


def _wire_body(path: Path) -> bytes:
    """The capture's body as recorded (an SSE body), or framed as SSE."""
    if path.suffix == ".yaml":
        return _cassette_body(path)
    if path.suffix == ".wire":
        return path.read_bytes()
    return _sse(_payloads(path))


# -- the independent reading ---------------------------------------------------


def _expected(payloads: list[bytes]) -> dict[str, Any]:
    docs = [json.loads(p) for p in payloads]
    usage = [d["usageMetadata"] for d in docs if "usageMetadata" in d][-1]
    finished = any(c.get("finishReason") for d in docs for c in d.get("candidates", [])) or any(
        d.get("promptFeedback", {}).get("blockReason") for d in docs
    )
    text = thought = tools = 0
    calls = 0
    for d in docs:
        for c in d.get("candidates", []):
            for part in c.get("content", {}).get("parts", []):
                if "text" in part:
                    if part.get("thought"):
                        thought += len(part["text"])
                    else:
                        text += len(part["text"])
                if "functionCall" in part:
                    call = part["functionCall"]
                    # with streamed arguments (Vertex AI) only a call's first part names it
                    calls += 1 if "name" in call else 0
                    args = call.get("args")
                    tools += len(json.dumps(args, separators=(",", ":"))) if args else 0
                    tools += sum(_partial_chars(p) for p in call.get("partialArgs", []))
                if "executableCode" in part:
                    tools += len(part["executableCode"]["code"])
    reasons = [
        c["finishReason"] for d in docs for c in d.get("candidates", []) if "finishReason" in c
    ]
    block = [d["promptFeedback"]["blockReason"] for d in docs if "promptFeedback" in d]
    return {
        "input_tokens": usage["promptTokenCount"] + usage.get("toolUsePromptTokenCount", 0),
        "output_tokens": (
            usage.get("candidatesTokenCount", 0) + usage.get("thoughtsTokenCount", 0)
            if finished
            else None
        ),
        "reasoning_tokens": usage.get("thoughtsTokenCount", 0) if finished else None,
        "cache_read_tokens": usage.get("cachedContentTokenCount", 0),
        "output_chars": text + thought + tools,
        "tool_calls": calls,
        "finish_reason": (reasons or block or [None])[0],
        "response_model": next(
            (d["modelVersion"] for d in reversed(docs) if "modelVersion" in d), None
        ),
        "response_id": next((d["responseId"] for d in docs if "responseId" in d), None),
        "outcome": "completed" if finished else "truncated",
        "events": len(docs),
    }


def _partial_chars(partial: dict[str, Any]) -> int:
    """A streamed argument's value: a string's characters, another value as JSON."""
    if "stringValue" in partial:
        return len(partial["stringValue"])
    values = [v for k, v in partial.items() if k.endswith("Value")]
    return sum(len(json.dumps(v)) for v in values)


def _meter(body: bytes, splits: list[int], *, array: bool = False) -> StreamRecord:
    m = StreamMeter(ENDPOINT, start=0.0)
    if array:
        assert m.frames_json_array()
    m.headers(0.1, 200)
    last = 0
    for n, cut in enumerate([*splits, len(body)]):
        m.feed(body[last:cut], 0.2 + n * 0.01)
        last = cut
    return m.finish(5.0)


def _splits(body: bytes, how: str, seed: int = 0) -> list[int]:
    if how == "whole":
        return []
    if how == "bytes":
        return list(range(1, len(body)))
    rng = random.Random(seed)
    return sorted(rng.sample(range(1, len(body)), min(len(body) - 1, 12)))


FIELDS = (
    "input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cache_read_tokens",
    "output_chars",
    "tool_calls",
    "finish_reason",
    "response_model",
    "response_id",
    "outcome",
    "events",
)


@pytest.mark.parametrize("how", ["whole", "bytes", "random"])
@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: p.name)
def test_real_captures_agree_with_an_independent_reading(path: Path, how: str) -> None:
    payloads = _payloads(path)
    want = _expected(payloads)
    for array in (False, True):
        body = _array(payloads) if array else _wire_body(path)
        rec = _meter(body, _splits(body, how), array=array)
        got = {name: getattr(rec, name) for name in FIELDS}
        assert got == want, (path.name, "json-array" if array else "sse")
        assert rec.transport == ("json-array" if array else "sse")
        assert rec.parse_issues == 0
        assert rec.partial_event_at_end is False


def test_whole_body_of_generate_content_is_one_answer() -> None:
    """``:generateContent`` answers with one JSON object: not streamed, completed."""
    payload = _payloads(FIXTURES / "pydantic-ai-test_google_model_stream.yaml")[0]
    m = StreamMeter(ENDPOINT)
    m.headers(None, 200)
    m.read_body(payload)
    rec = m.finish()
    want = _expected([payload])
    assert (rec.streamed, rec.transport, rec.outcome) == (False, "json", "completed")
    assert (rec.input_tokens, rec.output_tokens) == (want["input_tokens"], want["output_tokens"])


# -- whole answers (``:generateContent``) and Vertex AI's JSON array ---------------

WHOLE = sorted((FIXTURES / "whole").glob("*.yaml"))


def _whole_expected(doc: dict[str, Any]) -> dict[str, Any]:
    """A whole answer's figures: its usage is final, so a count Google leaves out
    (proto3 JSON omits zeros) is 0, the prompt's too."""
    usage = doc["usageMetadata"]
    cands = doc.get("candidates", [])
    reasons = [c["finishReason"] for c in cands if "finishReason" in c]
    block = doc.get("promptFeedback", {}).get("blockReason")
    text = sum(len(p.get("text", "")) for c in cands for p in c.get("content", {}).get("parts", []))
    return {
        "input_tokens": usage.get("promptTokenCount", 0) + usage.get("toolUsePromptTokenCount", 0),
        "output_tokens": usage.get("candidatesTokenCount", 0) + usage.get("thoughtsTokenCount", 0),
        "reasoning_tokens": usage.get("thoughtsTokenCount", 0),
        "cache_read_tokens": usage.get("cachedContentTokenCount", 0),
        "output_chars": text,
        "finish_reason": (reasons or [block])[0],
        "response_model": doc.get("modelVersion"),
        "response_id": doc.get("responseId"),
        "outcome": "completed",
        "service_tier": (usage.get("trafficType") or usage.get("serviceTier") or "").lower()
        or None,
    }


@pytest.mark.parametrize("path", WHOLE, ids=lambda p: p.name)
def test_real_whole_answers_agree_with_an_independent_reading(path: Path) -> None:
    body = cassettes.vcr_body(path)
    want = _whole_expected(json.loads(body))
    m = StreamMeter(ENDPOINT)
    m.headers(None, 200)
    m.read_body(body)
    rec = m.finish()
    complete_usage(rec, m.interpreter.obs, None, None, None, learn=False)
    got = {name: getattr(rec, name) for name in want}
    assert got == want
    assert (rec.streamed, rec.transport, rec.input_source) == (False, "json", "reported")


ARRAYS = sorted((FIXTURES / "array").glob("*.json"))


@pytest.mark.parametrize("how", ["whole", "bytes", "random"])
@pytest.mark.parametrize("path", ARRAYS, ids=lambda p: p.name)
def test_real_json_arrays_as_recorded(path: Path, how: str) -> None:
    """Vertex AI's stream without ``alt=sse``, pretty-printed as Google writes it:
    the early chunks' usage names only the traffic type."""
    body = path.read_bytes()
    payloads = [json.dumps(d).encode() for d in json.loads(body)]
    want = _expected(payloads)
    rec = _meter(body, _splits(body, how), array=True)
    assert {name: getattr(rec, name) for name in FIELDS} == want
    assert (rec.transport, rec.parse_issues, rec.partial_event_at_end) == ("json-array", 0, False)


# -- outcomes --------------------------------------------------------------------

CHUNK = {
    "candidates": [{"content": {"parts": [{"text": "Hello there"}], "role": "model"}, "index": 0}],
    "usageMetadata": {"promptTokenCount": 1200, "totalTokenCount": 1200},
    "modelVersion": "gemini-2.5-flash",
    "responseId": "r-1",
}
ERROR = (
    b'{\n  "error": {\n    "code": 503,\n'
    b'    "message": "The model is overloaded. Please try again later.",\n'
    b'    "status": "UNAVAILABLE"\n  }\n}\n'
)


@pytest.mark.parametrize("how", ["whole", "bytes", "random"])
@pytest.mark.parametrize("array", [False, True])
def test_bare_error_after_status_200_is_an_error(array: bool, how: str) -> None:
    first = json.dumps(CHUNK).encode()
    if array:
        body = b"[" + first + b",\r\n" + ERROR + b"]"
    else:
        body = b"data: " + first + b"\r\n\r\n" + ERROR
    rec = _meter(body, _splits(body, how), array=array)
    assert rec.outcome == "error"
    assert (rec.error_type, rec.error_code) == ("UNAVAILABLE", "503")
    assert rec.error_message is not None and "overloaded" in rec.error_message
    assert rec.input_tokens == 1200  # what the first chunk reported
    assert rec.output_tokens is None  # never reported: estimated when billed


def test_an_error_cannot_undo_a_finished_answer() -> None:
    done = dict(CHUNK, candidates=[{**CHUNK["candidates"][0], "finishReason": "STOP"}])
    body = b"data: " + json.dumps(done).encode() + b"\r\n\r\n" + ERROR
    rec = _meter(body, [])
    assert (rec.outcome, rec.finish_reason) == ("completed", "STOP")


@pytest.mark.parametrize("ending", ["upstream_disconnect", "client_disconnect"])
def test_cut_stream_bills_the_streamed_output_as_estimated(ending: str) -> None:
    thought = dict(
        CHUNK,
        candidates=[{"content": {"parts": [{"text": "Let me think " * 20, "thought": True}]}}],
    )
    body = _sse([json.dumps(thought).encode(), json.dumps(CHUNK).encode()])
    m = StreamMeter(ENDPOINT, start=0.0)
    m.headers(0.1, 200)
    m.feed(body[: body.rindex(b"Hello")], 0.3)  # cut inside the second chunk
    rec = m.finish(1.0, ending=ending)
    assert rec.outcome == ending
    assert rec.input_tokens == 1200
    assert rec.output_tokens is None
    complete_usage(rec, m.interpreter.obs, None, None, None, learn=False)
    assert rec.output_source == "estimated"
    assert rec.input_source == "reported"
    # the thought text counts: more than the visible text alone would give
    assert rec.output_tokens is not None and rec.output_tokens > len("Hello there")


def test_ttft_is_the_first_chunk_with_output() -> None:
    empty = {"usageMetadata": {"promptTokenCount": 3}, "modelVersion": "m"}
    body = [
        b"data: " + json.dumps(empty).encode() + b"\r\n\r\n",
        _sse([json.dumps(CHUNK).encode()]),
    ]
    m = StreamMeter(ENDPOINT, start=0.0)
    m.headers(0.1, 200)
    m.feed(body[0], 0.5)
    m.feed(body[1], 2.0)
    rec = m.finish(3.0)
    assert rec.first_event_ms == 500.0
    assert rec.ttft_ms == 2000.0


def test_vertex_traffic_type_is_the_service_tier_and_finish_reasons_stay_as_sent() -> None:
    chunk = {
        "candidates": [
            {"content": {"parts": [{"text": "x"}]}, "finishReason": "MALFORMED_FUNCTION_CALL"}
        ],
        "usageMetadata": {
            "promptTokenCount": 10,
            "candidatesTokenCount": 2,
            "trafficType": "ON_DEMAND",
        },
    }
    m = StreamMeter(ENDPOINT)
    m.feed(_sse([json.dumps(chunk).encode()]))
    rec = m.finish()
    complete_usage(rec, m.interpreter.obs, None, None, None, learn=False)
    assert rec.finish_reason == "MALFORMED_FUNCTION_CALL"
    assert rec.service_tier == "on_demand"
    assert (rec.output_tokens, rec.reasoning_tokens, rec.cache_read_tokens) == (2, 0, 0)


# -- the JSON array framer -------------------------------------------------------


def test_array_framer_keeps_strings_with_brackets_and_escapes_whole() -> None:
    tricky = {"candidates": [{"content": {"parts": [{"text": 'a "]}," \\ [{ \\"'}]}}]}
    payload = json.dumps(tricky).encode()
    body = _array([payload, payload])
    for how in ("whole", "bytes", "random"):
        rec = _meter(body, _splits(body, how, seed=3), array=True)
        assert rec.events == 2
        assert rec.output_chars == 2 * len(tricky["candidates"][0]["content"]["parts"][0]["text"])
        assert rec.parse_issues == 0


def test_array_framer_bounds_an_element() -> None:
    big = json.dumps({"candidates": [{"content": {"parts": [{"text": "x" * 5000}]}}]}).encode()
    small = json.dumps(CHUNK).encode()
    m = StreamMeter(ENDPOINT, max_event_bytes=1024)
    assert m.frames_json_array()
    body = _array([big, small])
    for i in range(0, len(body), 100):
        m.feed(body[i : i + 100])
        assert m.framer.pending_bytes <= 1024 + 100
    rec = m.finish()
    assert rec.oversized_events == 1
    assert rec.output_chars == len("Hello there")  # the element after it is read


def test_array_cut_inside_an_element_is_unterminated() -> None:
    body = _array([json.dumps(CHUNK).encode(), json.dumps(CHUNK).encode()])
    rec = _meter(body[: len(body) - 20], [], array=True)
    assert rec.partial_event_at_end is True
    assert rec.events == 1


def test_other_endpoints_do_not_frame_arrays() -> None:
    assert StreamMeter("chat.completions").frames_json_array() is False


# -- the byte-template fast path says what a full parse says -----------------------


def _long_stream(n: int) -> list[bytes]:
    """A stream in the shape of the real captures: a thought, then text chunks with
    running counts, then the finish chunk."""
    chunks = []
    for i in range(n):
        part: dict[str, Any] = {"text": f'piece {i} ü 東京 "q" \\ '}
        if i < 3:
            part["thought"] = True
        usage = {"promptTokenCount": 18, "totalTokenCount": 40 + i, "thoughtsTokenCount": 3}
        if i >= 3:
            usage["candidatesTokenCount"] = i
        cand: dict[str, Any] = {"content": {"parts": [part], "role": "model"}, "index": 0}
        if i == n - 1:
            cand["finishReason"] = "STOP"
        doc = {"candidates": [cand], "usageMetadata": usage, "modelVersion": "gemini-2.5-flash"}
        chunks.append(json.dumps(doc, ensure_ascii=False).encode())
    return chunks


@pytest.mark.parametrize("array", [False, True])
@pytest.mark.parametrize("cut", [False, True])
def test_fast_and_full_paths_agree(monkeypatch: pytest.MonkeyPatch, array: bool, cut: bool) -> None:
    from recorder.core.protocols import gemini

    chunks = _long_stream(60)
    body = _array(chunks) if array else _sse(chunks)
    if cut:
        body = body[: len(body) * 2 // 3]
    records = []
    for fast in (True, False):
        monkeypatch.setattr(gemini, "FAST_PATH", fast)
        for how in ("whole", "random"):
            m = StreamMeter(ENDPOINT, start=0.0)
            if array:
                m.frames_json_array()
            m.headers(0.1, 200)
            pieces = [
                body[a:b]
                for a, b in zip(
                    [0, *_splits(body, how)], [*_splits(body, how), len(body)], strict=True
                )
            ]
            m.feed_many(pieces, [0.2 + i / 100 for i in range(len(pieces))])
            rec = m.finish(9.0)
            if fast and how == "whole":
                assert m.interpreter.template is not None  # the fast path did run
            records.append(rec.to_dict())
    # the same chunking, fast and full: the same record, field for field
    assert records[0] == records[2] and records[1] == records[3]
    if not cut:
        want = _expected(chunks)
        assert records[0]["output_tokens"] == want["output_tokens"]
        assert records[0]["output_chars"] == want["output_chars"]


def test_an_array_one_element_a_piece_is_read_whole_and_alike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each element after the first, as Google writes it (``,`` CRLF and the
    element), is read whole by the template; the record is the full parse's."""
    from recorder.core.protocols import gemini

    chunks = _long_stream(40)
    pieces = [b"[" + chunks[0], *(b",\r\n" + c for c in chunks[1:]), b"]"]
    records = []
    for fast in (True, False):
        monkeypatch.setattr(gemini, "FAST_PATH", fast)
        m = StreamMeter(ENDPOINT, start=0.0)
        assert m.frames_json_array()
        m.headers(0.1, 200)
        m.feed_many(pieces, [0.2 + i / 100 for i in range(len(pieces))])
        records.append(m.finish(9.0).to_dict())
    assert records[0] == records[1]
    want = _expected(chunks)
    assert (records[0]["events"], records[0]["output_chars"]) == (40, want["output_chars"])
    assert records[0]["outcome"] == "completed"
