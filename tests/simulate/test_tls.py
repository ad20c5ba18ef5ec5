"""`recorder simulate --tls-cert/--tls-key`: HTTPS with a certificate the caller gives,
HTTP/1.1 by ALPN, trusted only by a client that trusts its CA."""

from __future__ import annotations

import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from recorder.simulate import run_in_thread, server_context
from tests.kit.upstreams import PrivateTLS, make_private_tls

RECORDER = str(Path(sys.executable).parent / "recorder")


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> PrivateTLS:
    return make_private_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture
def cli_sim(tls_files: PrivateTLS) -> Iterator[str]:
    """`recorder simulate` serving HTTPS; yields its URL from its first line."""
    proc = subprocess.Popen(
        [
            RECORDER,
            "simulate",
            "--port",
            "0",
            "--quiet",
            "--tls-cert",
            str(tls_files.server_cert),
            "--tls-key",
            str(tls_files.server_key),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("recorder simulate: listening on https://127.0.0.1:"), first
        yield first.rsplit(" ", 1)[1].strip()
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert proc.returncode == 0


def test_the_cli_serves_https_to_a_client_that_trusts_the_ca(
    cli_sim: str, tls_files: PrivateTLS
) -> None:
    trust = ssl.create_default_context(cafile=tls_files.ca_cert)
    client = openai.OpenAI(
        base_url=f"{cli_sim}/v1",
        api_key="sk-tls",
        max_retries=0,
        http_client=openai.DefaultHttpxClient(verify=trust),
    )
    chunks = list(
        client.chat.completions.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "Hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].usage.completion_tokens == len(
        [c for c in chunks if c.choices and c.choices[0].delta.content]
    )
    assert text


def test_a_client_that_does_not_trust_the_ca_is_refused(cli_sim: str) -> None:
    client = openai.OpenAI(base_url=f"{cli_sim}/v1", api_key="sk-tls", max_retries=0)
    with pytest.raises(openai.APIConnectionError) as refused:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "Hi"}])
    assert "CERTIFICATE_VERIFY_FAILED" in repr(refused.value.__cause__)


def test_alpn_says_http1_to_a_client_that_offers_h2(tls_files: PrivateTLS) -> None:
    tls = server_context(tls_files.server_cert, tls_files.server_key)
    client_ctx = ssl.create_default_context(cafile=tls_files.ca_cert)
    client_ctx.set_alpn_protocols(["h2", "http/1.1"])
    with run_in_thread(tls=tls) as sim:
        assert sim.url == f"https://127.0.0.1:{sim.port}"
        with (
            socket.create_connection(("127.0.0.1", sim.port), timeout=5) as plain,
            client_ctx.wrap_socket(plain, server_hostname="127.0.0.1") as conn,
        ):
            assert conn.selected_alpn_protocol() == "http/1.1"
            assert conn.version() in ("TLSv1.2", "TLSv1.3")
            conn.sendall(b"GET /_sim/health HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            assert conn.recv(100).startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tls-cert", "missing.pem"], "--tls-cert/--tls-key"),
        (["--tls-key", "key.pem"], "--tls-key needs --tls-cert"),
    ],
)
def test_bad_tls_options_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    done = subprocess.run(
        [RECORDER, "simulate", "--port", "0", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 2 and message in done.stderr, done
    assert "Traceback" not in done.stderr


def test_a_file_that_is_not_a_certificate_exits_2(tmp_path: Path) -> None:
    (tmp_path / "junk.pem").write_text("not a certificate\n")
    done = subprocess.run(
        [RECORDER, "simulate", "--port", "0", "--tls-cert", str(tmp_path / "junk.pem")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "--tls-cert/--tls-key" in done.stderr, done
