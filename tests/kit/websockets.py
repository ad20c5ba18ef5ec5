"""WebSocket traffic for the addon's hooks, with mitmproxy's test flows: a
connection to an endpoint, messages each way at the fake clock's times, its
close; and the OpenAI messages the tests send (Responses and Realtime), built
from real captured Responses events (tests/fixtures/payload-only) or written
after the documented Realtime events (tests/fixtures/PROVENANCE.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from mitmproxy import http, websocket
from mitmproxy.test import tflow
from wsproto.frame_protocol import Opcode

from recorder.proxy.addon import Recorder
from tests.kit.flows import Clock

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RESPONSES_PAYLOADS = FIXTURES / "payload-only" / "openai-responses"


def ws_flow(
    path: str = "/v1/responses",
    headers: list[tuple[bytes, bytes]] | None = None,
    peer: tuple[str, int] = ("127.0.0.1", 50000),
) -> http.HTTPFlow:
    """A WebSocket flow upgraded at ``path`` on api.openai.com, with no message yet."""
    flow = tflow.twebsocketflow(messages=False)
    req = flow.request
    req.host, req.port, req.scheme = "api.openai.com", 443, "https"
    req.path = path
    for name, value in (
        headers if headers is not None else [(b"authorization", b"Bearer sk-test-key-1234")]
    ):
        req.headers[name.decode()] = value.decode()
    assert flow.response is not None
    flow.response.headers["x-request-id"] = "req_ws_1"
    flow.client_conn.peername = peer
    assert flow.websocket is not None
    flow.websocket.messages = []
    flow.websocket.close_code = None
    flow.websocket.close_reason = None
    flow.websocket.closed_by_client = None
    return flow


def message(data: bytes | dict[str, Any], *, client: bool) -> websocket.WebSocketMessage:
    content = data if isinstance(data, bytes) else orjson.dumps(data)
    return websocket.WebSocketMessage(Opcode.TEXT, client, content)


def send(
    addon: Recorder,
    flow: http.HTTPFlow,
    data: bytes | dict[str, Any],
    clock: Clock,
    *,
    client: bool = False,
    step: float = 0.01,
) -> None:
    """One message through the hook, as mitmproxy delivers it, ``step`` s later."""
    assert flow.websocket is not None
    clock.now += step
    msg = message(data, client=client)
    flow.websocket.messages.append(msg)
    before = msg.content
    addon.websocket_message(flow)
    assert msg.content == before and not msg.dropped  # never changed, never dropped


def metered(addon: Recorder) -> None:
    """What the walk does first, now: the messages the connections hold metered
    (each at the time it came)."""
    addon.streams.meter_held()


def close(addon: Recorder, flow: http.HTTPFlow, *, by_client: bool, code: int = 1000) -> None:
    """The connection ends (1006: dropped, no close frame)."""
    assert flow.websocket is not None
    flow.websocket.closed_by_client = by_client
    flow.websocket.close_code = code
    flow.websocket.close_reason = ""
    addon.websocket_end(flow)


def responses_events(name: str = "openai-web-search-tool.1.chunks.txt") -> list[bytes]:
    """A real captured Responses stream's events, one message each."""
    path = RESPONSES_PAYLOADS / name
    return [line for line in path.read_bytes().splitlines() if line.strip()]


def responses_captures() -> Iterator[Path]:
    yield from sorted(RESPONSES_PAYLOADS.glob("*.chunks.txt"))


def create(model: str = "gpt-5", **more: Any) -> dict[str, Any]:
    """A Responses ``response.create``."""
    return {"type": "response.create", "model": model, "input": "Say hello", **more}


def responses_turn(
    rid: str,
    text: list[str],
    *,
    usage: dict[str, Any] | None = None,
    terminal: str = "response.completed",
    stream_id: str | None = None,
) -> list[dict[str, Any]]:
    """The server's events of one Responses response (the SSE form's, as OpenAI's
    WebSocket mode sends them): created, the text deltas, the terminal event."""
    lane = {"stream_id": stream_id} if stream_id else {}
    base = {"id": rid, "object": "response", "model": "gpt-5-2025-08-07", "status": "in_progress"}
    final_usage = usage or {
        "input_tokens": 12,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": len(text),
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 12 + len(text),
    }
    status = {"response.completed": "completed", "response.incomplete": "incomplete"}.get(
        terminal, "failed"
    )
    events: list[dict[str, Any]] = [
        {"type": "response.created", "sequence_number": 0, "response": base, **lane}
    ]
    for n, piece in enumerate(text, 1):
        events.append(
            {
                "type": "response.output_text.delta",
                "sequence_number": n,
                "item_id": "msg_1",
                "output_index": 0,
                "content_index": 0,
                "delta": piece,
                **lane,
            }
        )
    events.append(
        {
            "type": terminal,
            "sequence_number": len(text) + 1,
            "response": {**base, "status": status, "usage": final_usage},
            **lane,
        }
    )
    return events


REALTIME_USAGE = {
    "total_tokens": 253,
    "input_tokens": 132,
    "output_tokens": 121,
    "input_token_details": {
        "text_tokens": 119,
        "audio_tokens": 13,
        "image_tokens": 0,
        "cached_tokens": 64,
        "cached_tokens_details": {"text_tokens": 64, "audio_tokens": 0, "image_tokens": 0},
    },
    "output_token_details": {"text_tokens": 30, "audio_tokens": 91},
}


def realtime_session(model: str = "gpt-realtime-2025-08-28") -> dict[str, Any]:
    return {
        "type": "session.created",
        "event_id": "event_s1",
        "session": {
            "type": "realtime",
            "object": "realtime.session",
            "id": "sess_1",
            "model": model,
            "output_modalities": ["audio"],
            "audio": {"output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "alloy"}},
        },
    }


def realtime_turn(
    rid: str,
    transcript: list[str],
    *,
    audio_chunks: int = 2,
    audio_bytes: int = 4800,
    status: str = "completed",
    usage: dict[str, Any] | None = REALTIME_USAGE,
    reason: str | None = None,
) -> list[dict[str, Any]]:
    """The server's events of one Realtime response: created, audio and its transcript
    interleaved, done with the documented usage."""
    import base64

    audio = base64.b64encode(b"\x01" * audio_bytes).decode()
    where = {"response_id": rid, "item_id": f"item_{rid}", "output_index": 0, "content_index": 0}
    events: list[dict[str, Any]] = [
        {
            "type": "response.created",
            "event_id": f"event_{rid}_0",
            "response": {"id": rid, "object": "realtime.response", "status": "in_progress"},
        }
    ]
    for n, piece in enumerate(transcript):
        if n < audio_chunks:
            events.append(
                {
                    "type": "response.output_audio.delta",
                    "event_id": f"e{rid}a{n}",
                    **where,
                    "delta": audio,
                }
            )
        events.append(
            {
                "type": "response.output_audio_transcript.delta",
                "event_id": f"e{rid}t{n}",
                **where,
                "delta": piece,
            }
        )
    details: dict[str, Any] = {"type": status}
    if reason:
        details["reason"] = reason
    done: dict[str, Any] = {
        "id": rid,
        "object": "realtime.response",
        "status": status,
        "status_details": details,
    }
    if usage is not None:
        done["usage"] = usage
    events.append({"type": "response.done", "event_id": f"event_{rid}_done", "response": done})
    return events
