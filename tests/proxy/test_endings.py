"""Whose side broke, from mitmproxy's words and the flow's state (addon._ending's
rules through the hooks): an upstream whose TLS fails is the upstream's failure
whenever it came, even before the request had arrived whole."""

from __future__ import annotations

import pytest
from mitmproxy.test import taddons, tflow

from tests.kit.flows import make, make_flow, timers_of


@pytest.mark.parametrize(
    "msg",
    [
        "The remote server does not speak TLS.",
        "Certificate verify failed: unable to get local issuer certificate",
        "Server TLS handshake failed. connection closed",
    ],
)
def test_an_upstream_tls_failure_is_the_upstreams_with_its_reason(msg: str) -> None:
    addon, sink, _clock = make()
    with taddons.context(addon):
        flow = make_flow()
        addon.requestheaders(flow)
        addon.request(flow)
        flow.request.timestamp_end = None  # (eager: it failed before the body was read)
        flow.error = tflow.terr(msg)
        addon.error(flow)
        timers_of(addon).run_due()
    (rec,) = sink.records
    assert rec.outcome == "upstream_disconnect" and rec.transport_error == msg
    assert rec.model == "gpt-4o"


def test_a_request_that_never_arrived_whole_is_still_the_clients() -> None:
    addon, sink, _clock = make()
    with taddons.context(addon):
        flow = make_flow()
        addon.requestheaders(flow)
        flow.request.timestamp_end = None
        flow.error = tflow.terr("peer closed connection without sending complete message body")
        addon.error(flow)
    (rec,) = sink.records
    assert rec.outcome == "client_disconnect"
