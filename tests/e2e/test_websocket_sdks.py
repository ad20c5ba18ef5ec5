"""OpenAI over a WebSocket end to end: the official SDK's WebSocket clients
(``client.responses.connect``, ``client.realtime.connect``) and a plain
``websockets`` client, through the recorder (reverse and regular mode), against
the simulator's WebSocket upstream; every response one record, checked against
what the simulator sent."""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
import websockets

from recorder.core.record import StreamRecord
from recorder.simulate import SentRecord, Simulator, run_in_thread
from tests.kit.ports import free_port
from tests.kit.proxy_thread import RunningProxy, running_proxy
from tests.kit.tls import upstream_ca as upstream_ca

TERMINAL = ("response.completed", "response.failed", "response.incomplete")


def _sent(sim: Simulator, rec: StreamRecord) -> SentRecord:
    """The simulator's ground truth of the response a record is of."""
    for sent in list(sim.sent.values()):
        if sent.response_id == rec.response_id:
            return sim.wait_sent_blocking(sent.request_id)
    raise AssertionError(f"the simulator sent no {rec.response_id}")


def _usage(sent: SentRecord) -> tuple[Any, Any]:
    assert sent.usage is not None
    return sent.usage["input_tokens"], sent.usage["output_tokens"]


@pytest.fixture
def clean(records: RunningProxy) -> RunningProxy:
    return records


def _ws_url(proxy: RunningProxy, path: str) -> str:
    return proxy.url().replace("http://", "ws://") + path


def test_the_sdk_responses_websocket_each_response_one_record(
    clean: RunningProxy, sim: Simulator
) -> None:
    async def talk() -> list[str]:
        client = openai.AsyncOpenAI(
            base_url=clean.url() + "/v1", api_key="sk-ws-responses", max_retries=0
        )
        texts = []
        async with client.responses.connect() as conn:
            for n in range(3):
                await conn.response.create(model="gpt-5+deltas=4", input=f"Say hello {n}")
                text = ""
                async for event in conn:
                    if event.type == "response.output_text.delta":
                        text += event.delta
                    if event.type in TERMINAL:
                        break
                texts.append(text)
        return texts

    texts = asyncio.run(talk())
    recs = clean.sink.wait_for(3)
    assert [r.endpoint for r in recs] == ["responses"] * 3
    assert len({r.connection_id for r in recs}) == 1 and len({r.id for r in recs}) == 3
    for rec, text in zip(recs, texts, strict=True):
        sent = _sent(sim, rec)
        assert rec.transport == "websocket" and rec.http_status == 101
        assert rec.outcome == "completed" == sent.outcome
        assert rec.output_chars == len(text) == sent.output_chars
        assert (rec.input_tokens, rec.output_tokens) == _usage(sent)
        assert rec.events == sent.events and rec.usage_source == "reported"
        assert rec.model == "gpt-5+deltas=4" and rec.cost_usd is not None
        assert rec.ttft_ms is not None and rec.ttft_ms <= (rec.duration_ms or 0)


def test_the_sdk_realtime_client_each_response_one_record(
    clean: RunningProxy, sim: Simulator
) -> None:
    async def talk() -> int:
        client = openai.AsyncOpenAI(
            base_url=clean.url() + "/v1", api_key="sk-ws-realtime", max_retries=0
        )
        done = 0
        async with client.realtime.connect(model="gpt-realtime") as conn:
            await conn.session.update(session={"type": "realtime", "instructions": "Be brief."})
            for n in range(2):
                await conn.conversation.item.create(
                    item={
                        "type": "message",
                        "role": "user",
                        "content": [{"type": "input_text", "text": f"Hi {n}"}],
                    }
                )
                await conn.response.create()
                async for event in conn:
                    if event.type == "response.done":
                        done += 1
                        break
        return done

    assert asyncio.run(talk()) == 2
    recs = clean.sink.wait_for(2)
    for rec in recs:
        sent = _sent(sim, rec)
        assert rec.endpoint == "realtime" and rec.transport == "websocket"
        assert rec.model == "gpt-realtime" and rec.response_model == "gpt-realtime"
        assert rec.outcome == "completed" == sent.outcome
        assert (rec.input_tokens, rec.output_tokens) == _usage(sent)
        # the simulator's rule: two audio tokens per transcript delta
        pieces = sent.output_deltas // 2  # an audio delta and its transcript per piece
        assert rec.output_audio_tokens == 2 * pieces
        assert rec.output_audio_ms == pytest.approx(100.0 * pieces)
        assert rec.output_chars == sent.output_chars and rec.cost_usd is not None
    assert clean.recorder.health.websocket_connections >= 1


def test_a_plain_websockets_client_with_pings_compression_and_a_stall(
    clean: RunningProxy, sim: Simulator
) -> None:
    """Client pings every 0.2 s and server pings every 0.3 s are keepalives; the
    messages come compressed (permessage-deflate) and are read as mitmproxy decodes
    them; a 1.5 s silence is a stall (the proxy's threshold is 1 s)."""

    async def talk() -> None:
        url = _ws_url(clean, "/v1/responses")
        async with websockets.connect(
            url,
            additional_headers={
                "authorization": "Bearer sk-plain-ws",
                "x-sim-fault": "keepalive=0.3,deflate",
            },
            ping_interval=0.2,
        ) as ws:
            await ws.send(
                json.dumps(
                    {"type": "response.create", "model": "gpt-5+deltas=3+stall=1.5", "input": "hi"}
                )
            )
            async for raw in ws:
                if json.loads(raw)["type"] in TERMINAL:
                    break

    asyncio.run(talk())
    (rec,) = clean.sink.wait_for(1)
    sent = _sent(sim, rec)
    assert rec.outcome == "completed" == sent.outcome
    assert (rec.input_tokens, rec.output_tokens) == _usage(sent)
    assert rec.stalls == 1 and (rec.stall_ms or 0) >= 1400
    # the server's pings (sent.keepalives) and at least a few of the client's, with their pongs
    assert sent.keepalives >= 4
    assert (rec.keepalives or 0) >= 2 * sent.keepalives


@pytest.mark.parametrize(
    ("fault", "outcome"),
    [
        ("ws_close=4", "upstream_disconnect"),
        ("rst=4", "upstream_disconnect"),
        ("fin=4", "upstream_disconnect"),
    ],
)
def test_a_connection_cut_mid_response_keeps_the_responses_before(
    clean: RunningProxy, sim: Simulator, fault: str, outcome: str
) -> None:
    async def talk() -> None:
        async with websockets.connect(
            _ws_url(clean, "/v1/responses"), additional_headers={"authorization": "Bearer sk-cut"}
        ) as ws:
            await ws.send(
                json.dumps({"type": "response.create", "model": "gpt-5+deltas=3", "input": "a"})
            )
            async for raw in ws:
                if json.loads(raw)["type"] in TERMINAL:
                    break
            await ws.send(
                json.dumps(
                    {"type": "response.create", "model": f"gpt-5+deltas=8+{fault}", "input": "b"}
                )
            )
            try:
                async for _ in ws:
                    pass
            except websockets.ConnectionClosed:
                pass

    asyncio.run(talk())
    first, cut = clean.sink.wait_for(2)
    assert first.outcome == "completed" and first.usage_source == "reported"
    sent = _sent(sim, cut)
    assert cut.outcome == outcome == sent.outcome
    assert cut.output_chars == sent.output_chars and cut.output_source == "estimated"
    assert cut.transport_error is not None and cut.cost_usd is not None


def test_a_client_that_closes_mid_response(clean: RunningProxy, sim: Simulator) -> None:
    async def talk() -> None:
        async with websockets.connect(
            _ws_url(clean, "/v1/realtime?model=gpt-realtime"),
            additional_headers={
                "authorization": "Bearer sk-leave",
                "x-sim-fault": "delay=0.05,deltas=20",  # still streaming when it leaves
            },
        ) as ws:
            await ws.recv()  # session.created
            await ws.send(json.dumps({"type": "response.create"}))
            seen = 0
            async for raw in ws:
                if json.loads(raw)["type"] == "response.output_audio_transcript.delta":
                    seen += 1
                    if seen == 2:
                        break  # and the connection closes (1000, from the client)

    asyncio.run(talk())
    (rec,) = clean.sink.wait_for(1)
    assert rec.endpoint == "realtime" and rec.outcome == "client_disconnect"
    assert rec.output_source == "estimated" and (rec.output_audio_tokens or 0) >= 4
    assert rec.output_chars >= 2


@pytest.fixture(scope="module")
def regular(confdir: Path, upstream_ca: Path) -> Iterator[RunningProxy]:
    with running_proxy(
        [f"regular@{free_port()}"],
        str(confdir),
        extra_options={"ssl_verify_upstream_trusted_ca": str(upstream_ca)},
    ) as running:
        yield running


@pytest.fixture(scope="module")
def tls_sim(upstream_ca: Path) -> Iterator[Simulator]:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(upstream_ca, upstream_ca.parent / "key.pem")
    with run_in_thread(tls=ctx) as simulator:
        yield simulator


def test_regular_mode_wss_through_https_proxy(
    monkeypatch: pytest.MonkeyPatch, regular: RunningProxy, tls_sim: Simulator
) -> None:
    """The SDKs' WebSocket clients through HTTPS_PROXY, TLS intercepted with
    mitmproxy's CA (SSL_CERT_FILE), as users run the recorder without a base URL."""
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", regular.url())
    monkeypatch.setenv("SSL_CERT_FILE", str(Path(regular.confdir) / "mitmproxy-ca-cert.pem"))
    with regular.sink._cond:
        regular.sink.records.clear()

    async def talk() -> None:
        base = f"https://localhost:{tls_sim.port}/v1"
        client = openai.AsyncOpenAI(base_url=base, api_key="sk-regular-ws", max_retries=0)
        async with client.responses.connect() as conn:
            await conn.response.create(model="gpt-5+deltas=3", input="hello")
            async for event in conn:
                if event.type in TERMINAL:
                    break
        async with client.realtime.connect(model="gpt-realtime") as rt:
            await rt.response.create()
            async for event in rt:
                if event.type == "response.done":
                    break

    asyncio.run(talk())
    responses, realtime = regular.sink.wait_for(2)
    assert (responses.endpoint, realtime.endpoint) == ("responses", "realtime")
    for rec in (responses, realtime):
        sent = _sent(tls_sim, rec)
        assert rec.transport == "websocket" and rec.outcome == "completed" == sent.outcome
        assert rec.upstream == f"localhost:{tls_sim.port}"
        assert (rec.input_tokens, rec.output_tokens) == _usage(sent)
