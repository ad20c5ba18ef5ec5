"""End to end in regular (forward proxy) mode, as users run it without a base URL:
a plain-HTTP upstream through HTTP_PROXY, and an HTTPS upstream intercepted with
mitmproxy's CA, which the client trusts through SSL_CERT_FILE."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from recorder.simulate import Simulator, run_in_thread
from tests.e2e.conftest import free_port
from tests.e2e.harness import RunningProxy, running_proxy

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
def upstream_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A self-signed certificate for localhost/127.0.0.1 and its key."""
    folder = tmp_path_factory.mktemp("upstream-tls")
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    (folder / "cert.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return folder / "cert.pem"


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
