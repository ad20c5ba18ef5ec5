"""End to end: boto3's bedrock-runtime client through a real mitmproxy with the
recorder, in reverse mode (``endpoint_url``, dummy credentials), against the
simulator speaking Bedrock's binary event stream. Each record is held to what the
simulator really sent, and to what boto3 itself read."""

from __future__ import annotations

import base64
import json

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import EventStreamError

from recorder.core.keys import fingerprint
from recorder.core.record import StreamRecord
from recorder.simulate import SentRecord, Simulator
from tests.kit.proxy_thread import RunningProxy

ACCESS_KEY = "AKIAEXAMPLEBEDROCK42"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
SESSION_TOKEN = "IQoJb3JpZ2luX2VjEXAMPLESESSIONTOKENvalue0123456789"
MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
MESSAGES = [{"role": "user", "content": [{"text": "Say something about harmony."}]}]


def client(proxy: RunningProxy, fault: str | None = None):  # type: ignore[no-untyped-def]
    c = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=proxy.url(),
        aws_access_key_id=ACCESS_KEY,
        aws_secret_access_key=SECRET_KEY,
        aws_session_token=SESSION_TOKEN,
        config=Config(retries={"max_attempts": 1}, read_timeout=20, connect_timeout=5),
    )
    if fault is not None:

        def add_fault(request, **_):  # type: ignore[no-untyped-def]
            request.headers["x-sim-fault"] = fault

        c.meta.events.register("before-sign.bedrock-runtime.*", add_fault)
    return c


def one_record(proxy: RunningProxy, sim: Simulator) -> tuple[StreamRecord, SentRecord]:
    (rec,) = proxy.sink.wait_for(1)
    assert rec.request_id is not None, rec
    return rec, sim.wait_sent_blocking(rec.request_id)


def assert_usage(rec: StreamRecord, sent: SentRecord) -> None:
    assert sent.usage is not None
    for name in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
        assert getattr(rec, name) == sent.usage[name], name


def test_converse_stream_is_one_exact_record(records: RunningProxy, sim: Simulator) -> None:
    response = client(records).converse_stream(modelId=MODEL, messages=MESSAGES)
    text, usage, latency = "", None, None
    for event in response["stream"]:
        if "contentBlockDelta" in event:
            text += event["contentBlockDelta"]["delta"].get("text", "")
        if "metadata" in event:
            usage = event["metadata"]["usage"]
            latency = event["metadata"]["metrics"]["latencyMs"]
    rec, sent = one_record(records, sim)
    assert (rec.endpoint, rec.provider, rec.transport) == ("converse", "aws.bedrock", "eventstream")
    assert rec.model == MODEL
    assert rec.outcome == "completed" and rec.streamed
    assert rec.output_chars == len(text) == sent.output_chars
    assert rec.events == sent.events
    assert usage is not None
    assert rec.output_tokens == usage["outputTokens"]
    assert rec.input_tokens == (
        usage["inputTokens"] + usage["cacheReadInputTokens"] + usage["cacheWriteInputTokens"]
    )
    assert_usage(rec, sent)
    assert rec.finish_reason == sent.finish_reason
    assert rec.provider_latency_ms == latency
    assert rec.ttft_ms is not None and rec.duration_ms is not None
    assert rec.parse_issues == 0


def test_the_access_key_id_is_the_key_and_no_secret_is_kept(
    records: RunningProxy, sim: Simulator
) -> None:
    for _ in client(records).converse_stream(modelId=MODEL, messages=MESSAGES)["stream"]:
        pass
    rec, _ = one_record(records, sim)
    secret = records.recorder.config.key_secret
    assert rec.api_key_id == fingerprint(ACCESS_KEY, secret)
    dumped = json.dumps(rec.to_dict(), default=str)
    for leak in (SECRET_KEY, SESSION_TOKEN, "Signature="):
        assert leak not in dumped


def test_invoke_model_stream_reads_the_messages_inside(
    records: RunningProxy, sim: Simulator
) -> None:
    body = {
        "anthropic_version": "bedrock-2023-05-31",
        "max_tokens": 300,
        "messages": [{"role": "user", "content": "Say something about harmony."}],
    }
    response = client(records).invoke_model_with_response_stream(
        modelId=MODEL, body=json.dumps(body)
    )
    chunks = [json.loads(e["chunk"]["bytes"]) for e in response["body"] if "chunk" in e]
    rec, sent = one_record(records, sim)
    assert (rec.endpoint, rec.transport, rec.outcome) == (
        "invoke_model",
        "eventstream",
        "completed",
    )
    assert rec.max_output_tokens == 300
    metrics = chunks[-1]["amazon-bedrock-invocationMetrics"]
    assert rec.output_tokens == metrics["outputTokenCount"]
    assert rec.input_tokens == (
        metrics["inputTokenCount"]
        + metrics["cacheReadInputTokenCount"]
        + metrics["cacheWriteInputTokenCount"]
    )
    assert_usage(rec, sent)
    text = "".join(c["delta"].get("text", "") for c in chunks if c["type"] == "content_block_delta")
    assert rec.output_chars >= len(text) and rec.output_chars == sent.output_chars
    assert rec.provider_latency_ms == metrics["invocationLatency"]
    assert rec.provider_first_byte_ms == metrics["firstByteLatency"]


def test_converse_not_streamed(records: RunningProxy, sim: Simulator) -> None:
    answer = client(records).converse(modelId=MODEL, messages=MESSAGES)
    rec, sent = one_record(records, sim)
    assert (rec.endpoint, rec.transport, rec.streamed) == ("converse", "json", False)
    assert rec.outcome == "completed"
    assert rec.output_tokens == answer["usage"]["outputTokens"]
    assert_usage(rec, sent)
    assert rec.provider_latency_ms == answer["metrics"]["latencyMs"]


@pytest.mark.parametrize(
    ("code", "etype"),
    [("throttling", "throttlingException"), (None, "modelStreamErrorException")],
)
def test_an_exception_after_200_is_an_error_of_its_type(
    records: RunningProxy, sim: Simulator, code: str | None, etype: str
) -> None:
    fault = "error=3" + (f",error_code={code}" if code else "")
    with pytest.raises(EventStreamError):
        for _ in client(records, fault).converse_stream(modelId=MODEL, messages=MESSAGES)["stream"]:
            pass
    rec, sent = one_record(records, sim)
    assert rec.http_status == 200
    assert (rec.outcome, rec.error_type) == ("error", etype)
    assert sent.error_type == etype


def test_a_cut_stream_is_a_disconnect_with_estimated_output(
    records: RunningProxy, sim: Simulator
) -> None:
    with pytest.raises(Exception):  # noqa: B017 - botocore's own words for the cut
        for _ in client(records, "rst=6").converse_stream(modelId=MODEL, messages=MESSAGES)[
            "stream"
        ]:
            pass
    rec, sent = one_record(records, sim)
    assert rec.outcome == "upstream_disconnect"
    assert rec.output_chars == sent.output_chars > 0
    assert rec.output_source == "estimated" and rec.output_tokens


def test_base64_chunks_are_what_botocore_hands_out(records: RunningProxy, sim: Simulator) -> None:
    """The simulator's frames are botocore's to read: a chunk's bytes decode to JSON."""
    body = json.dumps(
        {
            "anthropic_version": "bedrock-2023-05-31",
            "max_tokens": 50,
            "messages": [{"role": "user", "content": "hi"}],
        }
    )
    events = list(
        client(records).invoke_model_with_response_stream(modelId=MODEL, body=body)["body"]
    )
    assert events and all("chunk" in e for e in events)
    assert base64.b64encode(events[0]["chunk"]["bytes"])
    one_record(records, sim)


def test_invoke_model_not_streamed_reads_bedrocks_metric_headers(
    records: RunningProxy, sim: Simulator
) -> None:
    body = json.dumps(
        {
            "anthropic_version": "bedrock-2023-05-31",
            "max_tokens": 100,
            "messages": [{"role": "user", "content": "Say something about harmony."}],
        }
    )
    response = client(records).invoke_model(modelId=MODEL, body=body)
    answer = json.loads(response["body"].read())
    headers = response["ResponseMetadata"]["HTTPHeaders"]
    rec, sent = one_record(records, sim)
    assert (rec.endpoint, rec.transport, rec.outcome) == ("invoke_model", "json", "completed")
    assert rec.output_tokens == answer["usage"]["output_tokens"]
    assert_usage(rec, sent)
    assert rec.provider_latency_ms == float(headers["x-amzn-bedrock-invocation-latency"])
