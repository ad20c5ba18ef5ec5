"""The recorder behind a corporate proxy and before an HTTPS upstream with a private CA,
run both ways users run it: `mitmdump -s addons/recorder_addon.py` and `recorder proxy`
(mitmproxy's `--mode upstream:URL` and `--set ssl_verify_upstream_trusted_ca=CA`).

Real traffic from the official SDKs through the recorder to the simulator; the record
is read back from the SQLite store and compared with what the simulator sent, and the
bytes the client got with the simulator's. The HTTPS upstream is reached in reverse
mode (``reverse:https://127.0.0.1:PORT``, the plain way to put the recorder before one
provider), and through the upstream proxy with CONNECT (regular clients, TLS
intercepted with mitmproxy's CA, as with a real provider behind a corporate proxy).
"""

from __future__ import annotations

import contextlib
import signal
import ssl
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
import sqlalchemy as sa

from recorder.core.short_id import short_id
from recorder.simulate import SentRecord, Simulator, run_in_thread, server_context
from tests.kit.ports import free_port
from tests.kit.processes import start_mitmdump, start_proxy, wait_listening
from tests.kit.upstreams import PrivateTLS, UpstreamProxy

MESSAGES: Any = [{"role": "user", "content": "Tell me about harmony."}]
LAUNCHERS = ["mitmdump", "recorder-proxy"]


@pytest.fixture
def sim() -> Iterator[Simulator]:
    with run_in_thread(keep_bodies=True) as simulator:
        yield simulator


@pytest.fixture
def tls_sim(private_tls: PrivateTLS) -> Iterator[Simulator]:
    tls = server_context(private_tls.server_cert, private_tls.server_key)
    with run_in_thread(tls=tls, keep_bodies=True) as simulator:
        yield simulator


@dataclass
class Running:
    """A running recorder: its reverse-mode port, its extra listener, its console."""

    port: int
    extra_port: int | None
    confdir: Path
    db: Path
    output: str = ""
    returncode: int | None = None

    def rows(self) -> list[dict[str, Any]]:
        engine = sa.create_engine(f"sqlite:///{self.db}")
        try:
            with engine.connect() as conn:
                rows = conn.execute(sa.text("SELECT * FROM streams")).mappings().all()
        finally:
            engine.dispose()
        return [dict(r) for r in rows]


@contextlib.contextmanager
def recorder(
    launcher: str, tmp_path: Path, sim: Simulator, *, upstream: str | None = None, sets: list[str]
) -> Iterator[Running]:
    """The recorder in reverse mode before ``sim``, plus ``upstream:<upstream>`` on a port
    of its own when given, with mitmproxy options ``sets``; stopped (records flushed)
    on exit, its console then in ``output``."""
    extra_port = free_port() if upstream else None
    mode = f"upstream:{upstream}@{extra_port}" if upstream else None
    proc: subprocess.Popen[str]
    if launcher == "mitmdump":
        port, metrics_port = free_port(), free_port()
        running = Running(port, extra_port, tmp_path / "mitmproxy", tmp_path / "r.db")
        options = [
            f"recorder_db=sqlite:///{running.db}",
            f"recorder_spool_dir={tmp_path}",
            f"recorder_metrics=127.0.0.1:{metrics_port}",
            f"confdir={running.confdir}",
            *sets,
        ]
        also_modes = (mode,) if mode else ()
        proc = start_mitmdump(tmp_path, sim.url, port, *options, also_modes=also_modes)
        try:
            wait_listening(port)
            wait_listening(metrics_port)  # mitmdump loads the script after it listens
        except BaseException:
            proc.kill()
            print(proc.communicate()[0])
            raise
    else:
        extra = ["--mode", mode] if mode else []
        for option in sets:
            extra += ["--set", option]
        proc, port, _, _ = start_proxy(tmp_path, sim, *extra)
        running = Running(port, extra_port, tmp_path / ".mitmproxy", tmp_path / "recorder.db")
    try:
        if extra_port is not None:
            wait_listening(extra_port)
        yield running
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            running.output = proc.communicate(timeout=60)[0]
        except subprocess.TimeoutExpired:
            proc.kill()
            running.output = proc.communicate()[0]
        running.returncode = proc.returncode


def openai_stream(base_url: str, **client: Any) -> tuple[bytes, str]:
    """A streamed Chat Completion with the OpenAI SDK: the body bytes the client
    received and the simulator's request id."""
    oai = openai.OpenAI(base_url=base_url, api_key="sk-upstream-test", max_retries=0, **client)
    with oai.chat.completions.with_streaming_response.create(
        model="gpt-4o",
        messages=MESSAGES,
        stream=True,
        stream_options={"include_usage": True},
    ) as response:
        return b"".join(response.iter_bytes()), response.headers["x-sim-request"]


def assert_recorded(row: dict[str, Any], truth: SentRecord, upstream: str) -> None:
    """The record of a clean stream says what the simulator sent."""
    assert truth.outcome == "completed" and truth.usage is not None
    assert row["outcome"] == "completed", row
    assert row["request_id"] == truth.request_id
    assert row["upstream"] == upstream
    assert row["http_status"] == 200 and row["streamed"]
    assert row["input_tokens"] == truth.usage["input_tokens"]
    assert row["output_tokens"] == truth.usage["output_tokens"] == truth.output_tokens_sent
    assert row["output_source"] == "reported"
    assert row["output_chars"] == truth.output_chars
    assert row["events"] == truth.events
    assert row["ttft_ms"] is not None and row["ttft_ms"] > 0
    assert row["transport_error"] is None


@pytest.mark.slow
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_plain_http_through_an_upstream_proxy(
    launcher: str, tmp_path: Path, sim: Simulator, upstream_proxy: UpstreamProxy
) -> None:
    """`--mode upstream:http://…`: the client uses the recorder as its HTTP proxy, the
    recorder forwards through the corporate proxy (absolute-form), and records."""
    with recorder(launcher, tmp_path, sim, upstream=upstream_proxy.url, sets=[]) as rec:
        proxy = openai.DefaultHttpxClient(proxy=f"http://127.0.0.1:{rec.extra_port}")
        raw, rid = openai_stream(sim.openai_base_url, http_client=proxy)
    assert rec.returncode == 0, rec.output
    truth = sim.wait_sent_blocking(rid)
    assert truth.body is not None and raw == bytes(truth.body)
    traffic = upstream_proxy.traffic
    assert traffic.requests == [("POST", f"{sim.openai_base_url}/chat/completions")]
    assert traffic.connects == []
    assert traffic.bytes_down >= truth.body_bytes > 0
    [row] = rec.rows()
    assert_recorded(row, truth, f"127.0.0.1:{sim.port}")


@pytest.mark.slow
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_https_upstream_with_a_private_ca(
    launcher: str, tmp_path: Path, tls_sim: Simulator, private_tls: PrivateTLS
) -> None:
    """`--mode reverse:https://…` with `--set ssl_verify_upstream_trusted_ca=CA`:
    mitmproxy verifies the simulator's certificate against the private CA."""
    sets = [f"ssl_verify_upstream_trusted_ca={private_tls.ca_cert}"]
    with recorder(launcher, tmp_path, tls_sim, sets=sets) as rec:
        raw, rid = openai_stream(f"http://127.0.0.1:{rec.port}/v1")
    assert rec.returncode == 0, rec.output
    truth = tls_sim.wait_sent_blocking(rid)
    assert truth.body is not None and raw == bytes(truth.body)
    [row] = rec.rows()
    assert_recorded(row, truth, f"127.0.0.1:{tls_sim.port}")


@pytest.mark.slow
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_https_upstream_with_an_untrusted_ca_is_refused_and_said(
    launcher: str, tmp_path: Path, tls_sim: Simulator
) -> None:
    """Without the CA mitmproxy refuses the upstream: the client gets mitmproxy's 502,
    nothing reaches the simulator, and the record and the console say why."""
    with recorder(launcher, tmp_path, tls_sim, sets=[]) as rec:
        oai = openai.OpenAI(
            base_url=f"http://127.0.0.1:{rec.port}/v1", api_key="sk-upstream-test", max_retries=0
        )
        with pytest.raises(openai.APIStatusError) as refused:
            oai.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    assert rec.returncode == 0, rec.output
    assert refused.value.status_code == 502
    assert tls_sim.requests == 0
    [row] = rec.rows()
    assert row["outcome"] == "upstream_disconnect", row
    assert row["upstream"] == f"127.0.0.1:{tls_sim.port}"
    assert row["http_status"] is None and row["ttft_ms"] is None
    assert "certificate verify failed" in (row["transport_error"] or "").lower(), row
    # the console's line of the stream says it failed...
    line = next(x for x in rec.output.splitlines() if "upstream_disconnect" in x)
    assert line.endswith(" " + short_id(row["id"])), rec.output
    if launcher == "recorder-proxy":
        # ...and mitmproxy's log says why (`mitmdump -q`, as started here, silences it)
        assert "certificate verify failed" in rec.output.lower(), rec.output


@pytest.mark.slow
@pytest.mark.parametrize("launcher", LAUNCHERS)
def test_https_through_an_upstream_proxy_with_a_private_ca(
    launcher: str,
    tmp_path: Path,
    tls_sim: Simulator,
    private_tls: PrivateTLS,
    upstream_proxy: UpstreamProxy,
) -> None:
    """A provider behind a corporate proxy, as in production: the Anthropic SDK sends
    CONNECT to the recorder (which intercepts with mitmproxy's CA), the recorder opens
    its own CONNECT tunnel through the corporate proxy and verifies the upstream
    against the private CA."""
    sets = [f"ssl_verify_upstream_trusted_ca={private_tls.ca_cert}"]
    with recorder(launcher, tmp_path, tls_sim, upstream=upstream_proxy.url, sets=sets) as rec:
        trust = ssl.create_default_context(cafile=rec.confdir / "mitmproxy-ca-cert.pem")
        http_client = anthropic.DefaultHttpxClient(
            proxy=f"http://127.0.0.1:{rec.extra_port}", verify=trust
        )
        claude = anthropic.Anthropic(
            base_url=tls_sim.url, api_key="sk-ant-upstream", max_retries=0, http_client=http_client
        )
        with claude.messages.stream(
            model="claude-sonnet-4-5", max_tokens=1024, messages=MESSAGES
        ) as stream:
            text = "".join(stream.text_stream)
            rid = stream.response.headers["request-id"]
    assert rec.returncode == 0, rec.output
    truth = tls_sim.wait_sent_blocking(rid)
    assert text == truth.text and text
    traffic = upstream_proxy.traffic
    assert traffic.connects == [f"127.0.0.1:{tls_sim.port}"]
    assert traffic.requests == []
    assert traffic.bytes_down > truth.body_bytes > 0  # the body, inside TLS records
    [row] = rec.rows()
    assert_recorded(row, truth, f"127.0.0.1:{tls_sim.port}")
    assert row["endpoint"] == "messages"
