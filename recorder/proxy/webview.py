"""The recorder inside mitmweb: what it measured, on the flows themselves.

With mitmproxy's web interface (``mitmweb -s addons/recorder_addon.py`` or
``recorder proxy --web``) every metered flow carries the record's summary as
its comment (``LLM gpt-4o completed | TTFT 240 ms | 3.4 s | in 12 out ~30 tok |
$0.000123 | 1 stall | 5 keepalives``), written when the stream starts, brought
up to date once a second while it runs (time to first token, age, and a stall
while it lasts: ``STALLED now, silent 31 s``, marked at once), and completed at
its end. Streams that stalled, were interrupted or ended with an
error event after status 200 are marked, and their comment holds a word that
mitmweb's filter finds (``~comment STALLED``, ``~comment INTERRUPTED``,
``~comment ERROR-AFTER-200``; ``~marked`` lists them all).

A content view, "LLM stream", shows an SSE body of the three protocols one
event per line, with its time since the request and since the event before,
keepalives and stalls flagged, and the output reassembled below
(:mod:`recorder.core.transcript`). mitmproxy keeps no body of a streamed
response, so in the web interface only the addon keeps each tapped body with
the arrival time of every piece (capped like captured bodies, 8 MiB a body,
``capture_max_bytes``) and hands it to the flow when the stream ends. Headless
(``recorder proxy``, ``mitmdump``) nothing of this is kept.
"""

from __future__ import annotations

import logging
from decimal import Decimal
from typing import Any

from mitmproxy import contentviews, ctx, http
from mitmproxy.contentviews import Contentview, Metadata
from mitmproxy.hooks import UpdateHook

from recorder.core import money
from recorder.core.captured import CapturedBody
from recorder.core.endpoints import endpoint_for, websocket_endpoint_for
from recorder.core.printable import printable
from recorder.core.record import StreamRecord
from recorder.core.transcript import transcript
from recorder.proxy.addon import Recorder
from recorder.proxy.observers import Done, Observer
from recorder.proxy.open_streams import StreamView

log = logging.getLogger("recorder")

# flow.metadata keys: the view reads what the addon left there
TIMELINE = "recorder.timeline"  # [(seconds since the request, piece length), ...]
ENDPOINT = "recorder.endpoint"
STALL_AFTER = "recorder.stall_after"
WEBSOCKET = "recorder.websocket"  # a connection's responses so far: [count, cost]

MARK_STALLED = ":warning:"
MARK_BROKEN = ":red_circle:"
INTERRUPTED = ("upstream_disconnect", "client_disconnect", "truncated")


def summary(rec: StreamRecord) -> str:
    """The record in one line, with the words mitmweb's filter looks for."""
    parts = [f"LLM {printable(rec.model or rec.endpoint or '?')} {rec.outcome}"]
    if rec.outcome == "error" and rec.http_status in (200, 101):
        parts[0] += " ERROR-AFTER-200"
    elif rec.outcome in INTERRUPTED:
        parts[0] += " INTERRUPTED"
    if rec.stalls:
        parts[0] += " STALLED"
    if rec.ttft_ms is not None:
        parts.append(f"TTFT {rec.ttft_ms:,.0f} ms")
    if rec.duration_ms is not None:
        parts.append(f"{rec.duration_ms / 1000:,.1f} s")
    if rec.input_tokens is not None or rec.output_tokens is not None:
        parts.append(
            f"in {_tokens(rec.input_tokens, rec.input_source)}"
            f" out {_tokens(rec.output_tokens, rec.output_source)} tok"
        )
    if rec.cost_usd is not None:
        parts.append(f"${money.display(rec.cost_usd)}")
    if rec.stalls:
        parts.append(f"{rec.stalls} stall{'s' if rec.stalls > 1 else ''}")
    if rec.keepalives:
        parts.append(f"{rec.keepalives} keepalives")
    if rec.error_type or rec.error_message:
        said = f"{rec.error_type or 'error'}: {rec.error_message or ''}".strip(": ")
        parts.append(printable(said))
    return " | ".join(parts)


def _tokens(value: int | None, source: str) -> str:
    if value is None:
        return "?"
    return f"~{value}" if source == "estimated" else str(value)


def live_comment(view: StreamView, now: float, stall_after: float) -> tuple[str, bool]:
    """An open stream's comment from what its meter knows by now, and whether its
    output has been silent for ``stall_after`` or longer (a stall, now)."""
    first = view.first_output_at
    since = view.silent_since
    silence = now - (since if since is not None else view.t0)
    stalled = view.stalled_since(now) is not None
    head = f"LLM {printable(view.model or view.endpoint or '?')} streaming"
    if stalled:
        head += f" STALLED now, silent {silence:,.0f} s"
    parts = [head]
    if first is not None:
        parts.append(f"TTFT {(first - view.t0) * 1000:,.0f} ms")
    parts.append(f"{now - view.t0:,.0f} s so far")
    if view.keepalives:
        parts.append(f"{view.keepalives} keepalives")
    return " | ".join(parts), stalled


def mark_for(rec: StreamRecord) -> str:
    """The mark a flow gets ("" for none)."""
    if rec.outcome in INTERRUPTED or (rec.outcome == "error" and rec.http_status in (200, 101)):
        return MARK_BROKEN
    if rec.stalls:
        return MARK_STALLED
    return ""


class LLMStreamView(Contentview):
    """SSE bodies of the metered endpoints, an event per line with its times."""

    @property
    def name(self) -> str:
        return "LLM stream"

    def prettify(self, data: bytes, metadata: Metadata) -> str:
        flow = metadata.flow
        meta: dict[str, Any] = flow.metadata if flow is not None else {}
        endpoint = meta.get(ENDPOINT) or _endpoint_of(flow)
        if endpoint is None:
            raise ValueError("not a response of a metered endpoint")
        timeline = meta.get(TIMELINE)
        pieces: list[tuple[float, bytes]] = []
        note = ""
        if timeline:
            pos = 0
            for at, length in timeline:
                pieces.append((at, data[pos : pos + length]))
                pos += length
            if pos < len(data):
                pieces.append((timeline[-1][0], data[pos:]))
        else:
            pieces = [(0.0, data)]
            note = "(arrival times not kept for this flow: every event shown at 0)\n"
        text = transcript(pieces, endpoint, float(meta.get(STALL_AFTER) or 30.0)).render()
        return f"{endpoint}\n{note}{text}"

    def render_priority(self, data: bytes, metadata: Metadata) -> float:
        flow = metadata.flow
        metered = flow is not None and (ENDPOINT in flow.metadata or _endpoint_of(flow))
        if metered and "text/event-stream" in (metadata.content_type or ""):
            return 2.0  # above mitmproxy's own views for these bodies
        return -1.0


def _endpoint_of(flow: Any) -> str | None:
    request = getattr(flow, "request", None)
    if request is None:
        return None
    return endpoint_for(request.method, request.path)


_view = LLMStreamView()
_registered = False


def register_view() -> None:
    """Add the content view to mitmproxy (once per process)."""
    global _registered
    if not _registered:
        contentviews.add(_view)
        _registered = True


class WebView(Observer):
    """The addon beside the Recorder that writes its findings onto the flows.

    It switches itself on only under mitmproxy's web interface (a master with a
    web app), where it asks the Recorder to keep each tapped body with its
    arrival times; headless it does nothing.
    """

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.active = False
        recorder.add_observer(self)

    def load(self, loader: Any) -> None:
        register_view()

    def running(self) -> None:
        master = ctx.master
        self.active = type(master).__name__ == "WebMaster"
        if self.active:
            self.recorder.config.keep_for_ui = True  # then the flows reach flow_done
            columns = list(ctx.options.web_columns)
            if "comment" not in columns:  # the summary, in the flow list itself
                ctx.options.update(web_columns=[*columns, "comment"])
            # metered bodies, and unmetered streams, pass as they arrive: the web
            # interface still shows them whole once they have
            ctx.options.update(store_streamed_bodies=True)
            self.recorder.watch(self.walked)
            self.recorder.walk.want()

    def walked(self, views: list[StreamView], now: float) -> None:
        """The recorder's walk, once a second: the open streams' comments say what is
        known by now (time to first token, age, a stall while it lasts), so a
        stalled stream is marked and found in mitmweb before it ends."""
        try:
            after = self.recorder.config.stall_after
            changed = []
            for view in views:
                flow = view.flow
                if flow is None or flow.response is None or not view.streaming:
                    continue
                text, stalled = live_comment(view, now, after)
                if text != flow.comment:
                    flow.comment = text
                    if stalled:
                        flow.marked = MARK_STALLED
                    changed.append(flow)
            if changed:
                ctx.master.addons.trigger(UpdateHook(changed))
        except Exception:
            log.exception("recorder: web view (traffic is unaffected)")

    def responseheaders(self, flow: http.HTTPFlow) -> None:
        """A metered stream starts: say so on the flow at once."""
        if not self.active or flow.response is None:
            return
        try:
            if endpoint_for(flow.request.method, flow.request.path) is None:
                return
            flow.comment = f"LLM stream, HTTP {flow.response.status_code}: metering…"
        except Exception:
            log.exception("recorder: web view (traffic is unaffected)")

    def websocket_start(self, flow: http.HTTPFlow) -> None:
        """A WebSocket connection to a metered endpoint: its comment says so at once."""
        if not self.active:
            return
        try:
            endpoint = websocket_endpoint_for(flow.request.path)
            if endpoint is not None:
                flow.comment = f"LLM WebSocket {endpoint}: no response yet"
                ctx.master.addons.trigger(UpdateHook([flow]))
        except Exception:
            log.exception("recorder: web view (traffic is unaffected)")

    def stream_finished(self, done: Done) -> None:
        """The recorder's observer call: a flow kept for the UI is complete."""
        if done.flow is not None:
            if done.record.transport == "websocket":
                self.response_done(done.flow, done.record)
            else:
                self.flow_done(done.flow, done.record, done.body)

    def response_done(self, flow: http.HTTPFlow, rec: StreamRecord) -> None:
        """One response of a WebSocket connection is complete: the connection's comment
        counts its responses and their cost, and says the last one's summary."""
        if not self.active:
            return
        try:
            tally = flow.metadata.get(WEBSOCKET) or [0, "0"]
            count = int(tally[0]) + 1
            cost = str(tally[1])
            if rec.cost_usd:
                cost = money.exact(Decimal(cost) + Decimal(rec.cost_usd))
            flow.metadata[WEBSOCKET] = [count, cost]
            flow.comment = (
                f"LLM WebSocket {printable(rec.endpoint or '?')}: {count} response"
                f"{'s' if count > 1 else ''}, ${money.display(cost)} | last: {summary(rec)}"
            )
            mark = mark_for(rec)
            if mark and flow.marked != MARK_BROKEN:
                flow.marked = mark  # a connection with a broken response stays marked
            ctx.master.addons.trigger(UpdateHook([flow]))
        except Exception:
            log.exception("recorder: web view (traffic is unaffected)")

    def flow_done(self, flow: http.HTTPFlow, rec: StreamRecord, body: CapturedBody | None) -> None:
        """The record is complete: its summary, mark and body go onto the flow."""
        if not self.active:
            return
        try:
            flow.comment = summary(rec)
            mark = mark_for(rec)
            if mark or flow.marked in (MARK_STALLED, MARK_BROKEN):
                # the record decides: a long wait for the first token looked like a
                # stall while it lasted, but the meter counts none before output
                flow.marked = mark
            if rec.endpoint:
                flow.metadata[ENDPOINT] = rec.endpoint
            flow.metadata[STALL_AFTER] = self.recorder.config.stall_after
            if body is not None and body.chunks and flow.response is not None:
                # After the stream: the client has had every byte already; this is
                # the copy mitmweb shows (decoded, as the meter read it).
                flow.metadata[TIMELINE] = [
                    (t - body.t0, len(c)) for t, c in zip(body.times, body.chunks, strict=True)
                ]
                flow.response.content = b"".join(body.chunks)  # encoded as its headers say
                if body.truncated:
                    flow.comment += f" | body shown cut at {body.limit:,} bytes"
            ctx.master.addons.trigger(UpdateHook([flow]))
        except Exception:
            log.exception("recorder: web view (traffic is unaffected)")
