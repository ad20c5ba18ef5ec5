"""HTTP/2 between the client and the proxy (regular mode, TLS intercepted with
mitmproxy's CA); the simulator speaks HTTP/1.1 behind it, over TLS verified
against a test CA, as in test_regular_mode.py.

mitmproxy mirrors the upstream's ALPN: with its default ``connection_strategy``
(eager) it has connected upstream before the client's TLS handshake, and a
client of an HTTP/1.1-only upstream (the simulator) is offered HTTP/1.1 only.
Real APIs speak HTTP/2, so their clients may get it; here ``lazy`` stands in for
that (the client's handshake comes first, and the protocol is chosen from its offer).
Then mitmproxy takes the client's order of preference, and httpx (under both
SDKs) offers ``http/1.1`` first even with ``http2=True``; the client below puts
``h2`` first, as browsers, curl and Go do.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

import h2.connection
import h2.errors
import h2.events
import httpx
import orjson
import pytest

from recorder.core.record import StreamRecord
from recorder.simulate import SentRecord, Simulator, run_in_thread
from tests.kit.exchanges import CHAT, MESSAGES, REQUESTS, RESPONSES
from tests.kit.ports import free_port
from tests.kit.proxy_thread import RunningProxy, running_proxy
from tests.kit.tls import upstream_ca as upstream_ca

K = 6


@pytest.fixture(scope="module")
def tls_sim(upstream_ca: Path) -> Iterator[Simulator]:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(upstream_ca, upstream_ca.parent / "key.pem")
    with run_in_thread(tls=ctx, keep_bodies=True) as simulator:
        yield simulator


def _proxy(confdir: Path, upstream_ca: Path, **options: str) -> Iterator[RunningProxy]:
    with running_proxy(
        [f"regular@{free_port()}"],
        str(confdir),
        stall_after=1.0,
        extra_options={"ssl_verify_upstream_trusted_ca": str(upstream_ca), **options},
    ) as running:
        yield running


@pytest.fixture(scope="module")
def h2_proxy(confdir: Path, upstream_ca: Path) -> Iterator[RunningProxy]:
    yield from _proxy(confdir, upstream_ca, connection_strategy="lazy")


class _PreferH2(ssl.SSLContext):
    """httpcore sets ``["http/1.1", "h2"]`` on the context: offer h2 first instead."""

    def set_alpn_protocols(self, alpn_protocols: Iterable[str]) -> None:
        super().set_alpn_protocols(sorted(alpn_protocols, key=lambda p: p != "h2"))


def _client(proxy: RunningProxy, *, prefer_h2: bool) -> httpx.Client:
    with proxy.sink._cond:
        proxy.sink.records.clear()
    cafile = str(Path(proxy.confdir) / "mitmproxy-ca-cert.pem")
    if prefer_h2:
        trust: ssl.SSLContext = _PreferH2(ssl.PROTOCOL_TLS_CLIENT)
        trust.load_verify_locations(cafile)
    else:
        trust = ssl.create_default_context(cafile=cafile)
    return httpx.Client(http2=True, proxy=proxy.url(), verify=trust, timeout=10, trust_env=False)


@pytest.fixture
def client(h2_proxy: RunningProxy) -> Iterator[httpx.Client]:
    with _client(h2_proxy, prefer_h2=True) as c:
        yield c


def one_record(proxy: RunningProxy) -> StreamRecord:
    (rec,) = proxy.sink.wait_for(1)
    deadline = time.monotonic() + 5
    while proxy.recorder.open_flows and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    assert len(proxy.sink.records) == 1
    assert proxy.recorder.open_flows == 0 and proxy.recorder.health.in_flight == 0
    assert proxy.recorder.health.internal_errors == 0
    return rec


def body_of(sent: SentRecord) -> bytes:
    assert sent.body is not None
    return bytes(sent.body)


@pytest.mark.parametrize("path", [CHAT, RESPONSES, MESSAGES])
def test_stream_over_http2(
    client: httpx.Client, h2_proxy: RunningProxy, tls_sim: Simulator, path: str
) -> None:
    sid = f"h2-{path.rsplit('/', 1)[1]}"
    url = f"https://localhost:{tls_sim.port}{path}"
    with client.stream("POST", url, json=REQUESTS[path], headers={"x-sim-id": sid}) as resp:
        assert resp.http_version == "HTTP/2"
        assert resp.status_code == 200
        got = b"".join(resp.iter_raw())
        assert resp.headers["x-sim-request"] == sid
    sent = tls_sim.wait_sent_blocking(sid)
    assert got == body_of(sent)
    rec = one_record(h2_proxy)
    assert rec.request_id == sid and rec.upstream == f"localhost:{tls_sim.port}"
    assert rec.outcome == "completed" == sent.outcome and not rec.interrupted
    assert rec.streamed is True and rec.events == sent.events
    assert rec.output_chars == sent.output_chars and rec.response_id == sent.response_id
    assert rec.finish_reason == sent.finish_reason
    assert sent.usage is not None
    assert rec.input_tokens == sent.usage["input_tokens"]
    assert rec.output_tokens == sent.usage["output_tokens"]
    assert rec.usage_source == "reported"
    assert rec.parse_issues == 0 and rec.partial_event_at_end is False


def h2_cancel_after(
    proxy: RunningProxy, port: int, path: str, headers: dict[str, str], events: int
) -> bytes:
    """A raw HTTP/2 client (h2) through a CONNECT tunnel: read ``events`` SSE events,
    then RST_STREAM (CANCEL) and keep the connection open a moment; the body read."""
    sock = socket.create_connection(("127.0.0.1", proxy.port()), timeout=10)
    sock.sendall(f"CONNECT localhost:{port} HTTP/1.1\r\nhost: localhost:{port}\r\n\r\n".encode())
    assert sock.recv(4096).startswith(b"HTTP/1.1 200")
    trust = ssl.create_default_context(cafile=str(Path(proxy.confdir) / "mitmproxy-ca-cert.pem"))
    trust.set_alpn_protocols(["h2"])
    tls = trust.wrap_socket(sock, server_hostname="localhost")
    assert tls.selected_alpn_protocol() == "h2"
    conn = h2.connection.H2Connection()
    conn.initiate_connection()
    body = orjson.dumps(REQUESTS[path])
    sid = conn.get_next_available_stream_id()
    request = [(":method", "POST"), (":scheme", "https"), (":authority", f"localhost:{port}")]
    request += [(":path", path), ("content-type", "application/json")]
    request += [("content-length", str(len(body))), *headers.items()]
    conn.send_headers(sid, request)
    conn.send_data(sid, body, end_stream=True)
    tls.sendall(conn.data_to_send())
    got = b""
    while got.count(b"\n\n") < events:
        data = tls.recv(65536)
        assert data, "the proxy closed the connection"
        for ev in conn.receive_data(data):
            if isinstance(ev, h2.events.DataReceived):
                got += ev.data
                conn.acknowledge_received_data(ev.flow_controlled_length, sid)
            assert not isinstance(ev, h2.events.StreamEnded | h2.events.StreamReset), (ev, got)
        tls.sendall(conn.data_to_send())
    conn.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
    tls.sendall(conn.data_to_send())
    time.sleep(0.3)  # the connection stays: only the stream is cancelled
    conn.close_connection()
    tls.sendall(conn.data_to_send())
    tls.close()
    return got


@pytest.mark.parametrize("path", [CHAT, MESSAGES])
def test_client_cancels_http2_stream(h2_proxy: RunningProxy, tls_sim: Simulator, path: str) -> None:
    # the upstream pauses after K events; the client cancels the stream there
    with h2_proxy.sink._cond:
        h2_proxy.sink.records.clear()
    sid = f"h2-cancel-{path.rsplit('/', 1)[1]}"
    headers = {"x-sim-id": sid, "x-sim-fault": f"stall=3@{K}"}
    started = time.monotonic()
    got = h2_cancel_after(h2_proxy, tls_sim.port, path, headers, K)
    sent = tls_sim.wait_sent_blocking(sid)
    assert time.monotonic() - started < 3.0  # the proxy dropped the upstream at once
    assert sent.transport == "client_gone" and sent.events == K
    assert got == body_of(sent)
    rec = one_record(h2_proxy)
    assert rec.transport_error == "stream reset by client (CANCEL)"
    assert rec.events == K and rec.output_chars == sent.output_chars
    assert rec.partial_event_at_end is False
    assert rec.outcome == "client_disconnect" == sent.outcome


def test_httpx_prefers_http1_through_mitmproxy(h2_proxy: RunningProxy, tls_sim: Simulator) -> None:
    with _client(h2_proxy, prefer_h2=False) as c:  # offers http/1.1, then h2
        url = f"https://localhost:{tls_sim.port}{CHAT}"
        with c.stream("POST", url, json=REQUESTS[CHAT], headers={"x-sim-id": "h1-lazy"}) as r:
            assert r.http_version == "HTTP/1.1"
            got = b"".join(r.iter_raw())
    assert got == body_of(tls_sim.wait_sent_blocking("h1-lazy"))
    assert one_record(h2_proxy).outcome == "completed"


# last: mitmproxy keeps its options in a process-wide `ctx` (tlsconfig reads
# connection_strategy there), so the master created last decides for all
def test_default_strategy_mirrors_an_http1_upstream(
    confdir: Path,
    upstream_ca: Path,
    tls_sim: Simulator,
) -> None:
    for proxy in _proxy(confdir, upstream_ca):
        with _client(proxy, prefer_h2=False) as c:
            url = f"https://localhost:{tls_sim.port}{CHAT}"
            with c.stream("POST", url, json=REQUESTS[CHAT], headers={"x-sim-id": "h1"}) as r:
                assert r.http_version == "HTTP/1.1"
                got = b"".join(r.iter_raw())
        assert got == body_of(tls_sim.wait_sent_blocking("h1"))
        assert one_record(proxy).outcome == "completed"
