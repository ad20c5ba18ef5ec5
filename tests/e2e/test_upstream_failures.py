"""Failures that are nobody's stream, recorded as what they are, through the real
proxy: an upstream whose TLS fails is the upstream's failure, with mitmproxy's
reason; a request sent to a regular-mode proxy itself (a base URL) had no upstream,
and the console says once that base URLs need reverse mode."""

from __future__ import annotations

import http.client
import logging
import socket
import threading
import time
from collections.abc import Iterator

import orjson
import pytest

from tests.kit.ports import free_port
from tests.kit.proxy_thread import RunningProxy, running_proxy

BODY = orjson.dumps({"model": "gpt-4o", "stream": True, "messages": []})


@pytest.fixture(scope="module")
def plain_upstream() -> Iterator[int]:
    """A server that speaks plain HTTP/1.1 (a 400 to whatever comes, then closes)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")

    threading.Thread(target=serve, daemon=True).start()
    yield srv.getsockname()[1]
    srv.close()


def _post(port: int) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", "/v1/chat/completions", BODY, {"content-type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _one(proxy: RunningProxy) -> object:
    deadline = time.monotonic() + 10  # bounded wait for the record, not a measure
    while not proxy.sink.records and time.monotonic() < deadline:
        time.sleep(0.05)
    (rec,) = proxy.sink.records
    return rec


def test_an_upstream_whose_tls_fails_is_its_failure_with_the_reason(
    plain_upstream: int, tmp_path: object
) -> None:
    port = free_port()
    with running_proxy([f"reverse:https://127.0.0.1:{plain_upstream}@{port}"], str(tmp_path)) as p:
        status, _ = _post(port)
        rec = _one(p)
    assert status == 502
    assert rec.outcome == "upstream_disconnect" and rec.model == "gpt-4o"  # type: ignore[attr-defined]
    assert "does not speak TLS" in (rec.transport_error or "")  # type: ignore[attr-defined]


def test_a_base_url_on_a_regular_proxy_is_recorded_as_no_upstream(
    tmp_path: object, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    caplog.set_level(logging.WARNING, logger="recorder")
    with running_proxy([f"regular@{port}"], str(tmp_path)) as p:
        for _ in range(2):
            status, body = _post(port)
            assert status == 502 and b"destination unknown" in body
        deadline = time.monotonic() + 10
        while len(p.sink.records) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        records = list(p.sink.records)
    assert len(records) == 2
    for rec in records:
        assert rec.outcome == "http_error" and rec.http_status == 502
        assert rec.error_type == "no_upstream" and rec.upstream is None
        assert "reverse mode" in (rec.error_message or "") and not rec.interrupted
        assert rec.model == "gpt-4o"
    said = [r.getMessage() for r in caplog.records if "base URL" in r.getMessage()]
    assert len(said) == 1 and "--mode reverse:" in said[0]  # once per process
