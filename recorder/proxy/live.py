"""Watching the proxy live: a console line per stream, stalls while they last,
and the open and recent streams for ``GET /streams`` (`recorder top`).

A mitmproxy addon beside :class:`~recorder.proxy.addon.Recorder`, fed by it:

- the open streams are read through the recorder's read-only view of them
  (``recorder.proxy.open_streams``); nothing here runs per event;
- the recorder's once-a-second walk (``recorder.proxy.walk``) meters what waits
  in every open stream, then shows them to the live view, which reads each
  one's last output time: a stream whose output has been silent for
  ``stall_after`` seconds (the meter's own stall threshold, ``--stall-after``)
  is reported now, and again when output resumes or the stream ends; the same
  walk sets the stall gauges. Pieces waiting for their batch are metered first,
  so a silence is never an artefact of batching (each piece keeps its own
  arrival time: no figure of the record changes);
- a finished record (the recorder's observers, called when the record is
  completed, off the stream's path) prints its line and joins the last
  ``FINISHED_KEPT``;
- ``GET /streams`` (served on the metrics server's thread) asks the event loop
  for a snapshot and waits for it: the open streams' state is only read on the
  loop, and only when someone asks.

In the proxy, lines are written by a thread of their own (``Printer``): a console
that stops reading (a terminal paused with Ctrl-S, a pipe nobody drains) holds that
thread, never the event loop; past 10,000 waiting lines, more are dropped.

The console gets plain text, coloured on a terminal with mitmproxy's own styling
(as mitmdump colours its flow lines; Rich is kept for `recorder top`), or one JSON
object per line (``log_format="json"``). Lines never hold prompt or completion
text, nor a query string (where some gateways carry keys).
"""

from __future__ import annotations

import collections
import concurrent.futures
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TextIO

import orjson
from mitmproxy.utils import vt_codes

from recorder.core.counts import OutputCounts
from recorder.core.endpoints import endpoint_for, websocket_endpoint_for
from recorder.core.printable import json_text, printable
from recorder.core.record import StreamRecord
from recorder.proxy.live_lines import (
    ID_CHARS,
    Line,
    Printer,
    _paint,
    _write,
    key_last4,
    short_id,
    stream_line,
    summary,
)
from recorder.proxy.live_window import LastMinute
from recorder.proxy.observers import Done, Observer
from recorder.proxy.open_streams import StreamView
from recorder.proxy.scheduling import Sliced

if TYPE_CHECKING:
    from mitmproxy import http

    from recorder.proxy.addon import Recorder

FINISHED_KEPT = 100
SNAPSHOT_SLICE = 50  # open streams read per event-loop callback for GET /streams

__all__ = ["ID_CHARS", "SNAPSHOT_SLICE", "Live", "Printer", "stream_line", "summary"]

LabelKey = tuple[str, str]  # (endpoint, provider)
TickCallback = Callable[[dict[LabelKey, int], dict[LabelKey, float]], None]


# -- the live state ---------------------------------------------------------------


@dataclass(slots=True)
class _Watched:
    """What the console has been told of one open stream's stalls."""

    told: int = 0  # of the meter's stalls over, how many were said to be over
    since: float | None = None  # the stall under way that was said to begin (its start)
    kas: int = 0  # the keepalives when the silence under way began (as near as seen)
    last: float | None = None  # the silence's start at the walk before
    endpoint: str | None = None
    model: str | None = None


class Live(Observer):
    """The live view: a mitmproxy addon, and an observer of the recorder it watches
    (construct it with that recorder; it adds itself)."""

    def __init__(
        self,
        recorder: Recorder,
        *,
        out: TextIO | None = None,
        log_format: str = "text",
        quiet: bool = False,
        verbose: bool = False,
        colour: bool | None = None,
        on_tick: TickCallback | None = None,
        clock: Callable[[], float] | None = None,
        wall: Callable[[], float] = time.time,
        background: bool = False,
        flush_on_done: bool = True,
    ) -> None:
        if log_format not in ("text", "json"):
            raise ValueError(f"log format must be text or json, not {log_format!r}")
        self.recorder = recorder
        self.out = out if out is not None else sys.stdout
        # with background, lines are written by a thread of their own (the proxy's
        # console may stop reading; the event loop must not wait for it)
        self._printer = Printer(self.out) if background else None
        # mitmdump exits right after `done`: the console gets its last lines there.
        # `recorder proxy` flushes after the loop instead, once the clients are let
        # go (a console that stopped reading must not hold them at shutdown).
        self.flush_on_done = flush_on_done
        self.log_format = log_format
        self.quiet = quiet
        self.verbose = verbose
        self.colour = colour
        self.on_tick = on_tick
        self._clock = clock or recorder.clock
        self._wall = wall
        # per open stream: what the console has been told of its stalls
        self._watched: dict[str, _Watched] = {}
        self.finished: collections.deque[dict[str, Any]] = collections.deque(maxlen=FINISHED_KEPT)
        # the last minute's streams, tokens and spend (the header of `recorder top`)
        self.last_minute = LastMinute(wall, self._output_tokens)
        # while the proxy runs: how another thread asks the loop for a snapshot
        self._post: Callable[[Callable[[], None]], None] | None = None
        self._loop_thread: int | None = None
        recorder.add_observer(self)
        recorder.watch(self.walked)

    @property
    def stall_after(self) -> float:
        """The stall threshold: the meter's own (``--stall-after``)."""
        return self.recorder.config.stall_after

    # -- output ---------------------------------------------------------------

    def _use_colour(self) -> bool:
        if self.colour is None:  # decided once, as mitmdump does for its own output
            try:
                self.colour = bool(vt_codes.ensure_supported(self.out))
            except (OSError, ValueError, AttributeError):
                self.colour = False
        return self.colour

    def _clock_text(self) -> str:
        return datetime.fromtimestamp(self._wall()).strftime("%H:%M:%S")

    def _emit(self, kind: str, text: Line, fields: dict[str, Any]) -> None:
        """One console line; ``text`` may be a callable that makes it, and a JSON line
        is made the same way: formatting happens on the console's thread."""
        if self.quiet:
            return
        line: Line
        if self.log_format == "json":
            obj = {"type": kind, "time": self._wall(), **fields}
            # (orjson leaves C1 and bidi controls raw: a terminal must never get them)
            line = lambda: json_text(orjson.dumps(obj, default=str).decode())  # noqa: E731
        else:
            line = text
        if self._printer is not None:
            self._printer.put(line)
        else:
            _write(self.out, [line if isinstance(line, str) else line()])

    def notice(self, text: str, fields: dict[str, Any]) -> None:
        """A line that is not about one stream (a call the recorder did not meter)."""
        self._emit(
            "not_metered", _paint(f"{self._clock_text()} {text}", "dim", self._use_colour()), fields
        )

    def flush(self, timeout: float = 2.0) -> None:
        """Wait (``timeout`` at most) until the lines handed to the console are written."""
        if self._printer is not None:
            self._printer.flush(timeout)

    # -- mitmproxy hooks ------------------------------------------------------

    def running(self) -> None:
        """The proxy runs: ``GET /streams`` may ask the loop for snapshots now."""
        self._post = self.recorder.scheduler.poster()
        self._loop_thread = threading.get_ident()

    def done(self) -> None:
        """Shutdown: no more snapshots; let the console catch up (2 s at most)."""
        self._post = None
        if self.flush_on_done:
            self.flush()

    def response(self, flow: http.HTTPFlow) -> None:
        """With ``verbose``: a short line for a flow the recorder does not meter."""
        if self.verbose:
            self._unmetered(flow)

    def error(self, flow: http.HTTPFlow) -> None:
        """With ``verbose``: a short line for a broken flow the recorder does not meter."""
        if self.verbose:
            self._unmetered(flow)

    def _unmetered(self, flow: http.HTTPFlow) -> None:
        try:
            req = flow.request
            if endpoint_for(req.method, req.path) is not None:
                return
            if flow.websocket is not None and websocket_endpoint_for(req.path) is not None:
                return  # metered: its responses are records (recorder.proxy.websocket)
            path = req.path.split("?", 1)[0]  # a query string may carry a key
            status = flow.response.status_code if flow.response is not None else None
            err = flow.error.msg if flow.error is not None else None
            fields = {
                "method": req.method,
                "host": req.pretty_host,
                "path": path,
                "http_status": status,
                "error": err,
            }
            what = str(status) if status is not None else f"error: {err}"
            where = printable(f"{req.pretty_host}{path}")
            text = (
                f"{self._clock_text()} unmetered {printable(req.method)} {where} {printable(what)}"
            )
            self._emit("unmetered", _paint(text, "dim", self._use_colour()), fields)
        except Exception:
            self.recorder.internal_error("live unmetered line")

    # -- records --------------------------------------------------------------

    def stream_finished(self, done: Done) -> None:
        """The recorder's observer call: the completed record."""
        self.finished_record(done.record, done.meter.last_output_ms)

    def finished_record(self, rec: StreamRecord, last_output_ms: float | None = None) -> None:
        """A record was completed: its line, its stalls not said yet, the finished list."""
        s = summary(rec)
        self.finished.append(s)
        self.last_minute.finished(rec.id, s)
        watched = self._watched.pop(rec.id or "", None)
        if rec.stalls and rec.duration_ms is not None:
            self._stalls_ended_with(rec, watched or _Watched(), last_output_ms)
        if self.quiet:
            return
        # made on the console's thread: the loop only notes the time and the colour
        at, colour = self._wall(), self._use_colour()
        self._emit(
            "stream",
            lambda: stream_line(
                s, colour=colour, clock=datetime.fromtimestamp(at).strftime("%H:%M:%S")
            ),
            s,
        )

    def _stalls_ended_with(
        self, rec: StreamRecord, watched: _Watched, last_output_ms: float | None
    ) -> None:
        """The stalls of a stream that ended that were not said to be over (between
        two walks, or running into its end): the record's own, as it counts them."""
        assert rec.duration_ms is not None
        gaps = [g for g in rec.gaps if g.kind == "stall"][watched.told :]
        watched.endpoint, watched.model = rec.endpoint, rec.model
        for gap in gaps:
            # a stall ends at an output, or runs from the last output (or the request
            # start) into the stream's end
            tail = gap.start_ms == (last_output_ms or 0.0) and (
                gap.start_ms + gap.length_ms >= rec.duration_ms - 0.001
            )
            how = f"stream ended ({rec.outcome})" if tail else "output resumed"
            self._stall_over(rec.id, watched, gap.start_ms, gap.length_ms, how)

    def _output_tokens(self, view: StreamView) -> tuple[int | None, bool]:
        """The stream's output tokens so far: as reported, else estimated (and which)."""
        obs = view.observations
        usage = obs.usage
        if usage is not None and usage.output_tokens is not None:
            return usage.output_tokens, False
        if not obs.output_chars:
            return None, False
        counts = OutputCounts.from_observations(obs)
        return self.recorder.estimator.output(view.model, view.endpoint, counts).tokens, True

    # -- the walk -------------------------------------------------------------

    @staticmethod
    def _may_stall(view: StreamView) -> bool:
        """Whether the stream has an output stream to stall (not an HTTP error, not a
        JSON answer: the meter counts no stall there either)."""
        status = view.http_status
        return view.streamed and (status is None or 200 <= status < 300 or status == 101)

    def walked(self, views: list[StreamView], now: float) -> None:
        """The recorder's walk over the open streams (once a second, what waited
        metered): the stalls the meter says began or ended, and the gauges."""
        stalled: dict[LabelKey, int] = {}
        oldest: dict[LabelKey, float] = {}
        watched_now: dict[str, _Watched] = {}
        for view in views:
            rid = view.id
            if rid is None or not self._may_stall(view):
                continue
            watched = self._watched.get(rid) or _Watched(endpoint=view.endpoint)
            watched.model = view.model
            watched_now[rid] = watched
            label = (view.endpoint or "unknown", view.provider or "unknown")
            silent = view.silent_since
            if silent is not None and now - silent > oldest.get(label, 0.0):
                oldest[label] = now - silent
            # the keepalive count when this silence began, as near as a walk can see it
            if watched.last != silent:
                watched.last, watched.kas = silent, view.keepalives
            gaps = view.stall_gaps
            for gap in gaps[watched.told :]:  # stalls over since the last walk
                self._stall_over(rid, watched, gap.start_ms, gap.length_ms, "output resumed")
            since = view.stalled_since(now)
            if since is not None:
                stalled[label] = stalled.get(label, 0) + 1
                if watched.since != since:
                    watched.since = since
                    self._stall_began(
                        rid, watched, now - since, view.keepalives - watched.kas, since - view.t0
                    )
        self._watched = watched_now
        self.last_minute.streamed(views)
        if self.on_tick is not None:
            self.on_tick(stalled, oldest)

    def tick(self) -> None:
        """One walk's worth now (tests, tools): what waits is metered, then seen."""
        self.walked(self.recorder.streams.views(catch_up=True), self._clock())

    def _stall_began(
        self, rid: str, watched: _Watched, silence: float, kas: int, start: float
    ) -> None:
        model, endpoint = printable(watched.model or "-"), printable(watched.endpoint or "-")
        text = (
            f"{self._clock_text()} stall: {short_id(rid)} {endpoint} {model}"
            f" silent {_seconds(silence)}, {kas} keepalive{'s' if kas != 1 else ''} meanwhile"
        )
        fields = {
            "id": rid,
            "endpoint": watched.endpoint,
            "model": watched.model,
            "start_s": round(start, 6),
            "silent_s": round(silence, 3),
            "keepalives": kas,
        }
        self._emit("stall", _paint(text, "yellow", self._use_colour()), fields)

    def _stall_over(
        self, rid: str | None, watched: _Watched, start_ms: float, length_ms: float, how: str
    ) -> None:
        """A stall the meter counted is over: said once, with the meter's figures."""
        watched.told += 1
        watched.since = None
        model, endpoint = printable(watched.model or "-"), printable(watched.endpoint or "-")
        text = (
            f"{self._clock_text()} stall over: {short_id(rid)} {endpoint} {model}"
            f" {how} after {_seconds(length_ms / 1000.0)} silent"
        )
        fields = {
            "id": rid,
            "endpoint": watched.endpoint,
            "model": watched.model,
            "start_s": round(start_ms / 1000.0, 6),
            "stall_s": round(length_ms / 1000.0, 6),
            "how": how,
        }
        self._emit("stall_over", _paint(text, "yellow", self._use_colour()), fields)

    # -- GET /streams -----------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """The open streams' live state and the recently finished ones (on the loop)."""
        now = self._clock()
        after = self.stall_after
        views = self.recorder.streams.views(catch_up=True)
        rows = [self._open_row(view, now, after) for view in views]
        return self._document(rows)

    def _document(self, rows: list[dict[str, Any]]) -> dict[str, Any]:
        rows.sort(key=lambda r: -(r["silence_s"] or 0.0))
        return {
            "stall_after_s": self.stall_after,
            "open": rows,
            "finished": list(reversed(self.finished)),
            "last_minute": self.last_minute.figures(),
        }

    def _open_row(self, view: StreamView, now: float, after: float) -> dict[str, Any]:
        may = self._may_stall(view)
        since = view.silent_since if may else None
        obs = view.observations
        first = view.first_output_at
        tokens, estimated = self._output_tokens(view)
        silence = None if since is None else now - since
        return {
            "id": view.id,
            "endpoint": view.endpoint,
            "provider": view.provider,
            "model": view.model,
            "key_last4": key_last4(view.api_key_id),
            "http_status": view.http_status,
            "age_s": round(now - view.t0, 3),
            "ttft_s": None if first is None else round(first - view.t0, 3),
            "events": view.events,
            "keepalives": view.keepalives,
            "output_chars": obs.output_chars,
            "output_tokens": tokens,
            "output_tokens_estimated": estimated,
            "silence_s": None if silence is None else round(silence, 3),
            "stalled": may and view.stalled_since(now) is not None,
            "transport": view.transport,
        }

    def snapshot_json(self, timeout: float = 2.0) -> bytes:
        """:meth:`snapshot` as JSON, from any thread: taken on the event loop, a
        slice of streams per loop callback (the loop serves its connections between
        two slices)."""
        post = self._post
        if post is None:
            # the proxy does not run (before `running`, after `done`): the open
            # streams' meters belong to the loop, so only the finished ones are told
            return orjson.dumps(self._document([]), default=str)
        if threading.get_ident() == self._loop_thread:  # asked on the loop itself
            return orjson.dumps(self.snapshot(), default=str)
        done: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
        rows: list[dict[str, Any]] = []

        def take_slice(views: list[StreamView]) -> None:
            try:
                now, after = self._clock(), self.stall_after
                rows.extend(self._open_row(view.catch_up(), now, after) for view in views)
            except Exception as e:
                if not done.done():
                    done.set_exception(e)

        def finish() -> None:
            if not done.done():
                done.set_result(self._document(rows))

        def start() -> None:
            try:
                # (a WebSocket connection's held messages: the walk's, in slices, a
                # second at most; a response whose request is held is not seen yet)
                views = self.recorder.streams.views()
                if not views:
                    finish()
                    return
                sliced = Sliced(self.recorder.scheduler, 0, SNAPSHOT_SLICE, take_slice, finish)
                for view in views:
                    sliced.add(view)
            except Exception as e:
                done.set_exception(e)

        post(start)
        return orjson.dumps(done.result(timeout), default=str)


def _seconds(value: float) -> str:
    """A length of time as the console says it: tenths under ten seconds."""
    return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"
