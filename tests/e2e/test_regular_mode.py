"""End to end in regular (forward proxy) mode, as users run it without a base URL:
a plain-HTTP upstream through HTTP_PROXY, and an HTTPS upstream intercepted with
mitmproxy's CA, which the client trusts through SSL_CERT_FILE."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest

from recorder.simulate import Simulator, run_in_thread
from tests.kit.ports import free_port
from tests.kit.proxy_thread import RunningProxy, running_proxy
from tests.kit.tls import upstream_ca as upstream_ca

MESSAGES = [{"role": "user", "content": "Say something about harmony."}]


@pytest.fixture(scope="module")
def regular_proxy(confdir: Path, upstream_ca: Path) -> Iterator[RunningProxy]:
    with running_proxy(
        [f"regular@{free_port()}"],
        str(confdir),
        # mitmproxy verifies the upstream against the test CA, as it would a real one
        extra_options={"ssl_verify_upstream_trusted_ca": str(upstream_ca)},
    ) as running:
        yield running


@pytest.fixture(scope="module")
def tls_sim(upstream_ca: Path) -> Iterator[Simulator]:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(upstream_ca, upstream_ca.parent / "key.pem")
    with run_in_thread(tls=ctx) as simulator:
        yield simulator


@pytest.fixture
def proxied_env(monkeypatch: pytest.MonkeyPatch, regular_proxy: RunningProxy) -> RunningProxy:
    url = regular_proxy.url()
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", url)
    monkeypatch.setenv("HTTPS_PROXY", url)
    monkeypatch.setenv("SSL_CERT_FILE", str(Path(regular_proxy.confdir) / "mitmproxy-ca-cert.pem"))
    with regular_proxy.sink._cond:
        regular_proxy.sink.records.clear()
    return regular_proxy


def test_plain_http_upstream_through_http_proxy(proxied_env: RunningProxy, sim: Simulator) -> None:
    client = openai.OpenAI(base_url=sim.openai_base_url, api_key="sk-regular", max_retries=0)
    stream = client.chat.completions.create(
        model="gpt-4o", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    (rec,) = proxied_env.sink.wait_for(1)
    sent = sim.wait_sent_blocking(rec.request_id or "")
    assert text == sent.text
    assert rec.outcome == "completed" == sent.outcome
    assert rec.upstream == f"127.0.0.1:{sim.port}"
    assert (rec.input_tokens, rec.output_tokens) == (
        sent.usage and sent.usage["input_tokens"],
        sent.usage and sent.usage["output_tokens"],
    )


def test_https_upstream_intercepted_with_the_mitmproxy_ca(
    proxied_env: RunningProxy, tls_sim: Simulator
) -> None:
    base = f"https://localhost:{tls_sim.port}"
    client = anthropic.Anthropic(base_url=base, api_key="sk-ant-regular", max_retries=0)
    with client.messages.stream(
        model="claude-sonnet-4-5", max_tokens=400, messages=MESSAGES
    ) as stream:
        text = "".join(stream.text_stream)
    (rec,) = proxied_env.sink.wait_for(1)
    sent = tls_sim.wait_sent_blocking(rec.request_id or "")
    assert text == sent.text
    assert rec.outcome == "completed" == sent.outcome
    assert rec.endpoint == "messages" and rec.upstream == f"localhost:{tls_sim.port}"
    assert rec.events == sent.events and rec.output_chars == sent.output_chars
    assert sent.usage is not None and rec.output_tokens == sent.usage["output_tokens"]


def test_https_openai_responses_intercepted(proxied_env: RunningProxy, tls_sim: Simulator) -> None:
    client = openai.OpenAI(
        base_url=f"https://localhost:{tls_sim.port}/v1", api_key="sk-regular", max_retries=0
    )
    with client.responses.stream(model="gpt-5", input="hello") as stream:
        final = stream.get_final_response()
    (rec,) = proxied_env.sink.wait_for(1)
    sent = tls_sim.wait_sent_blocking(rec.request_id or "")
    assert final.output_text == sent.text
    assert rec.outcome == "completed" and rec.response_id == sent.response_id


def test_boto3_bedrock_through_https_proxy_and_aws_ca_bundle(
    proxied_env: RunningProxy, tls_sim: Simulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """boto3's bedrock-runtime client in regular mode: it reads HTTPS_PROXY, and
    trusts mitmproxy's CA through AWS_CA_BUNDLE (the SDK's own variable)."""
    import boto3
    from botocore.config import Config

    monkeypatch.setenv("AWS_CA_BUNDLE", str(Path(proxied_env.confdir) / "mitmproxy-ca-cert.pem"))
    client = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=f"https://localhost:{tls_sim.port}",
        aws_access_key_id="AKIAREGULARMODE00042",
        aws_secret_access_key="regular-mode-secret-key-example",
        config=Config(retries={"max_attempts": 1}),
    )
    response = client.converse_stream(
        modelId="us.anthropic.claude-sonnet-4-5-20250929-v1:0",
        messages=[{"role": "user", "content": [{"text": "Say something about harmony."}]}],
    )
    usage = None
    for event in response["stream"]:
        if "metadata" in event:
            usage = event["metadata"]["usage"]
    (rec,) = proxied_env.sink.wait_for(1)
    sent = tls_sim.wait_sent_blocking(rec.request_id or "")
    assert (rec.endpoint, rec.transport, rec.outcome) == ("converse", "eventstream", "completed")
    assert rec.upstream == f"localhost:{tls_sim.port}"
    assert usage is not None and rec.output_tokens == usage["outputTokens"]
    assert rec.output_chars == sent.output_chars and rec.events == sent.events


def test_google_genai_intercepted_with_the_mitmproxy_ca(
    proxied_env: RunningProxy, tls_sim: Simulator
) -> None:
    """The google-genai SDK in regular mode (HTTPS_PROXY and the CA through
    SSL_CERT_FILE), streamed and not: each call one generate_content record."""
    from google import genai
    from google.genai import types

    base = f"https://localhost:{tls_sim.port}"
    client = genai.Client(
        api_key="AIza-regular-0001", http_options=types.HttpOptions(base_url=base)
    )
    stream = client.models.generate_content_stream(model="gemini-2.5-flash", contents="Hi")
    text = "".join(chunk.text or "" for chunk in stream)
    answer = client.models.generate_content(model="gemini-2.5-flash", contents="Hi")
    records = proxied_env.sink.wait_for(2)
    for rec, streamed in zip(records, (True, False), strict=True):
        sent = tls_sim.wait_sent_blocking(rec.request_id or "")
        assert (rec.endpoint, rec.provider, rec.streamed) == (
            "generate_content",
            "gcp.gemini",
            streamed,
        )
        assert rec.outcome == "completed" == sent.outcome
        assert sent.usage is not None
        assert (rec.input_tokens, rec.output_tokens) == (
            sent.usage["input_tokens"],
            sent.usage["output_tokens"],
        )
        assert (text if streamed else answer.text) == sent.text
