"""The ground truth of one request: what the simulator really sent.

A :class:`SentRecord` is filled as the response is written (:func:`account`
folds in every step fully written) and settled when it ends
(:func:`outcome_of`), so end-to-end tests compare the recorder's record with it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, fields
from typing import Any

from recorder.simulate.script import Step

_PRIVATE = frozenset({"done", "t0", "body"})


@dataclass(slots=True)
class SentRecord:
    """What the simulator did for one request: the ground truth.

    Counts cover only what was fully written to the socket: an event cut in
    half (``midevent``) is not counted. ``outcome`` is the outcome a correct
    recorder should find (docs/record.md, "Outcomes"); ``transport`` says how the
    connection ended. ``usage`` is the last usage the wire carried, normalised
    (``None``: none was sent); ``planned_usage`` what the whole response would
    have reported. ``output_tokens_sent`` applies the token rule (one per
    non-empty output delta) to what was sent; ``hidden`` reasoning tokens come
    on top.
    """

    request_id: str
    endpoint: str
    method: str
    path: str
    requested_model: str | None = None
    model: str | None = None
    faults: str = ""
    streamed: bool = False
    http_status: int | None = None
    response_id: str | None = None
    content_encoding: str | None = None
    framing: str | None = None
    outcome: str = "pending"
    transport: str = "pending"
    terminal: str | None = None
    finish_reason: str | None = None
    planned_finish_reason: str | None = None
    error_type: str | None = None
    error_code: str | None = None
    error_message: str | None = None
    events: int = 0
    planned_events: int = 0
    keepalives: int = 0
    output_deltas: int = 0
    output_chars: int = 0
    output_tokens_sent: int = 0
    hidden: int = 0
    tool_calls: int = 0
    text: str = ""
    usage: dict[str, int | None] | None = None
    planned_usage: dict[str, int | None] | None = None
    body_bytes: int = 0
    headers_ms: float | None = None
    first_event_ms: float | None = None
    first_output_ms: float | None = None
    duration_ms: float | None = None
    finished: bool = False
    t0: float = 0.0
    # the request's W3C trace context header as it arrived (a proxy must not touch it)
    traceparent: str | None = None
    # which request of this body this was (1, 2, ...): a client's retry sends the
    # same body again (the fault fail_first answers the later ones clean)
    attempt: int = 1
    # with Simulator(keep_bodies=True): the body bytes written, as on the wire but
    # without the chunked framing (compressed if compressed); not in to_dict
    body: bytearray | None = field(default=None, repr=False)
    done: threading.Event = field(default_factory=threading.Event, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape (``GET /_sim/sent/<id>``)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _PRIVATE}

    def elapsed_ms(self) -> float:
        """Milliseconds since the request arrived (``t0``)."""
        return round((time.monotonic() - self.t0) * 1000.0, 3)


def outcome_of(rec: SentRecord) -> str:
    """The outcome a correct recorder should find for the response as it ended."""
    if rec.http_status is not None and rec.http_status >= 400:
        return "http_error"
    if rec.terminal is not None:
        return rec.terminal
    if rec.transport == "client_gone":
        return "client_disconnect"
    if rec.transport == "fin" and rec.framing == "eof":
        return "truncated"
    if rec.transport in ("rst", "fin", "drop", "drop_rst", "server_stopped", "ws_close"):
        return "upstream_disconnect"
    return "truncated"


def account(rec: SentRecord, step: Step) -> None:
    """Fold one step fully written into the record."""
    if step.kind == "keepalive":
        rec.keepalives += 1
        return
    ev = step.event
    if ev is None:
        return
    if step.kind == "event":
        rec.events += 1
        if rec.first_event_ms is None:
            rec.first_event_ms = rec.elapsed_ms()
    if ev.output:
        rec.output_chars += len(ev.output)
        rec.text += ev.output
    if ev.tokens:
        if step.kind == "event":
            rec.output_deltas += 1
        rec.output_tokens_sent += ev.tokens
        if rec.first_output_ms is None:
            rec.first_output_ms = rec.elapsed_ms()
    rec.tool_calls += ev.tool_calls
    if ev.finish_reason and rec.finish_reason is None:
        rec.finish_reason = ev.finish_reason
    if ev.usage is not None:
        rec.usage = ev.usage.to_dict()
    if ev.error is not None and rec.error_type is None:
        rec.error_type, rec.error_code, rec.error_message = ev.error
    if ev.terminal is not None and rec.terminal is None:
        rec.terminal = ev.terminal
