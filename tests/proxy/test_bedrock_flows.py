"""The addon on Bedrock traffic: the AWS event stream told by its declared type and
passed through byte for byte at any split, the model read from the path, the
access key id fingerprinted, the signature and session token never kept but
masked where echoed, the console line with the provider's own timing."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from botocore.eventstream import EventStreamBuffer
from mitmproxy import http
from mitmproxy.test import taddons, tutils

from recorder.core.keys import fingerprint
from recorder.core.price_files import shipped_prices
from recorder.proxy.live import Live
from tests.kit.flows import SECRET, make, make_flow, pieces_of, start, stream_through

CAPTURE = Path(__file__).parents[1] / "fixtures" / "bedrock" / "converse_stream_nova_micro.bin"
KEY_ID = "AKIAIOSFODNN7EXAMPLE"
SIGNATURE = "fe5f80f77d5fa3beca038a248ff027d0445342fe2855ddc963176630326f1024"
TOKEN = "FwoGZXIvYXdzEXAMPLEsessiontoken0123456789"
SIGV4 = (
    f"AWS4-HMAC-SHA256 Credential={KEY_ID}/20261206/us-east-1/bedrock/aws4_request,"
    f" SignedHeaders=content-type;host;x-amz-date, Signature={SIGNATURE}"
).encode()
PATH = "/model/us.amazon.nova-micro-v1%3A0/converse-stream"
BODY = {
    "messages": [{"role": "user", "content": [{"text": "What is the capital of France?"}]}],
    "inferenceConfig": {"maxTokens": 512},
}


def eventstream_response(status: int = 200, ctype: bytes = b"application/vnd.amazon.eventstream"):  # type: ignore[no-untyped-def]
    headers = [(b"content-type", ctype), (b"x-amzn-requestid", b"5e1e0c3d-bedrock")]
    return tutils.tresp(status_code=status, headers=http.Headers(headers), content=None)


def bedrock_flow() -> http.HTTPFlow:
    return make_flow(
        PATH, BODY, [(b"authorization", SIGV4), (b"x-amz-security-token", TOKEN.encode())]
    )


@pytest.mark.parametrize("size", [1, 7, 100, 100_000])
async def test_a_converse_stream_is_metered_and_passed_on_unchanged(size: int) -> None:
    body = CAPTURE.read_bytes()
    buf = EventStreamBuffer()
    buf.add_data(body)
    messages = list(buf)
    meta = json.loads(messages[-1].payload)
    addon, sink, clock = make(prices=shipped_prices())
    out = io.StringIO()
    live = Live(addon, out=out, wall=lambda: 1_790_000_000.0)
    with taddons.context(addon, live):
        flow = bedrock_flow()
        await start(addon, flow, clock)
        flow.response = eventstream_response()
        addon.responseheaders(flow)
        got = stream_through(flow, pieces_of(body, size), clock)
        addon.response(flow)
    assert got == body
    (rec,) = sink.records
    assert (rec.endpoint, rec.provider, rec.transport) == ("converse", "aws.bedrock", "eventstream")
    assert rec.model == "us.amazon.nova-micro-v1:0"
    assert rec.request_id == "5e1e0c3d-bedrock"
    assert rec.max_output_tokens == 512
    assert rec.outcome == "completed" and rec.streamed
    assert rec.events == len(messages)
    assert (rec.input_tokens, rec.output_tokens) == (
        meta["usage"]["inputTokens"],
        meta["usage"]["outputTokens"],
    )
    assert rec.provider_latency_ms == meta["metrics"]["latencyMs"]
    assert rec.api_key_id == fingerprint(KEY_ID, SECRET)
    assert rec.cost_usd is not None and "bedrock/nova-micro" in (rec.price_version or "")
    line = next(x for x in out.getvalue().splitlines() if "converse" in x)
    assert "(provider 391ms)" in line or "(provider 391 ms)" in line


async def test_an_error_body_echoing_the_credentials_is_masked() -> None:
    addon, sink, clock = make()
    with taddons.context(addon):
        flow = bedrock_flow()
        await start(addon, flow, clock)
        echo = json.dumps(
            {"message": f"The request signature {SIGNATURE} with token {TOKEN} is invalid."}
        ).encode()
        flow.response = tutils.tresp(
            status_code=403,
            headers=http.Headers([(b"content-type", b"application/json")]),
            content=echo,
        )
        addon.responseheaders(flow)
        stream_through(flow, [echo], clock)
        addon.response(flow)
    (rec,) = sink.records
    assert rec.outcome == "http_error" and rec.transport == "json"
    dumped = json.dumps(rec.to_dict(), default=str)
    assert SIGNATURE not in dumped and TOKEN not in dumped
    assert rec.error_message is not None and "invalid" in rec.error_message


async def test_a_captured_bedrock_stream_is_kept_and_re_meters_to_its_record() -> None:
    """--capture-bodies keeps an AWS event stream as it keeps SSE: the stored body
    replays (``remeter``) to the record the proxy wrote."""
    from recorder.core.captured import CapturedBody, CapturedRecord, remeter

    body = CAPTURE.read_bytes()
    addon, sink, clock = make(capture_bodies=True)
    with taddons.context(addon):
        flow = bedrock_flow()
        await start(addon, flow, clock)
        flow.response = eventstream_response()
        addon.responseheaders(flow)
        stream_through(flow, pieces_of(body, 97), clock)
        addon.response(flow)
    (rec,) = sink.records
    assert isinstance(rec, CapturedRecord) and isinstance(rec.body, CapturedBody)
    packed = rec.body.pack()
    assert packed.body() == body
    again = remeter(packed, rec)
    assert (again.events, again.output_tokens, again.outcome) == (
        rec.events,
        rec.output_tokens,
        rec.outcome,
    )
