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
import contextlib
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
from recorder.core.endpoints import endpoint_for
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
from recorder.proxy.observers import Done, Observer
from recorder.proxy.open_streams import StreamView
from recorder.proxy.scheduling import Sliced

if TYPE_CHECKING:
    from mitmproxy import http

    from recorder.proxy.addon import Recorder

FINISHED_KEPT = 100
WINDOW_S = 60  # the header figures of `recorder top`: the last minute
SNAPSHOT_SLICE = 50  # open streams read per event-loop callback for GET /streams

__all__ = ["ID_CHARS", "SNAPSHOT_SLICE", "Live", "Printer", "stream_line", "summary"]

LabelKey = tuple[str, str]  # (endpoint, provider)
TickCallback = Callable[[dict[LabelKey, int], dict[LabelKey, float]], None]


# -- the live state ---------------------------------------------------------------


@dataclass(slots=True)
class _Stall:
    """A stall in progress: since when its stream's output is silent."""

    since: float  # last output (or request start), on the recorder's clock
    t0: float
    keepalives: int  # the stream's keepalives when the silence began (as last seen)
    endpoint: str | None
    model: str | None


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
        self._stalls: dict[str, _Stall] = {}
        # per open stream: (last output, keepalives) as the previous tick saw them
        self._seen: dict[str, tuple[float | None, int]] = {}
        self.finished: collections.deque[dict[str, Any]] = collections.deque(maxlen=FINISHED_KEPT)
        # the last minute by second: second -> [streams, tokens, cost]
        self._window: dict[int, list[float]] = {}
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
            line = lambda: orjson.dumps(obj, default=str).decode()  # noqa: E731
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
            text = f"{self._clock_text()} unmetered {req.method} {req.pretty_host}{path} {what}"
            self._emit("unmetered", _paint(text, "dim", self._use_colour()), fields)
        except Exception:
            self.recorder.internal_error("live unmetered line")

    # -- records --------------------------------------------------------------

    def stream_finished(self, done: Done) -> None:
        """The recorder's observer call: the completed record."""
        self.finished_record(done.record)

    def finished_record(self, rec: StreamRecord) -> None:
        """A record was completed: its line, its stall's end, the finished list."""
        s = summary(rec)
        self.finished.append(s)
        self._count(s)
        self._seen.pop(rec.id or "", None)
        stall = self._stalls.pop(rec.id or "", None)
        if stall is not None and rec.duration_ms is not None:
            self._stall_ended_with(rec, stall)
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

    def _stall_ended_with(self, rec: StreamRecord, stall: _Stall) -> None:
        """The end of a stall still open when its stream ended: the record's own stall
        gap says whether output came back first (between two ticks) and how long."""
        assert rec.duration_ms is not None
        start_ms = (stall.since - stall.t0) * 1000.0
        length = stall.t0 + rec.duration_ms / 1000.0 - stall.since
        how = f"stream ended ({rec.outcome})"
        for gap in rec.gaps:
            if gap.kind == "stall" and abs(gap.start_ms - start_ms) < 1.0:
                length = gap.length_ms / 1000.0
                # a whole stream's stall gaps end at an output; an interrupted one's
                # last gap may end at the cut instead
                ended_at_cut = gap.start_ms + gap.length_ms >= rec.duration_ms - 1.0
                if not (rec.interrupted and ended_at_cut):
                    how = "output resumed"
                break
        self._stall_over(rec.id, stall, length, how)

    def _count(self, s: dict[str, Any]) -> None:
        second = int(self._wall())
        bucket = self._window.get(second)
        if bucket is None:
            bucket = self._window[second] = [0.0, 0.0, 0.0]
            for old in [k for k in self._window if k <= second - WINDOW_S]:
                del self._window[old]
        bucket[0] += 1
        bucket[1] += (s["input_tokens"] or 0) + (s["output_tokens"] or 0)
        with contextlib.suppress(TypeError, ValueError):
            bucket[2] += float(s["cost_usd"] or 0)

    # -- the walk -------------------------------------------------------------

    @staticmethod
    def _silence_since(view: StreamView) -> float | None:
        """Since when the stream's output is silent; None if it cannot stall (an HTTP
        error, a JSON body: the meter counts no stall there either)."""
        status = view.http_status
        if not view.streamed or (status is not None and not 200 <= status < 300):
            return None
        last = view.last_output_at
        return view.t0 if last is None else last

    def walked(self, views: list[StreamView], now: float) -> None:
        """The recorder's walk over the open streams (once a second, what waited
        metered): stalls that began or ended, and the gauges."""
        after = self.stall_after
        stalled: dict[LabelKey, int] = {}
        oldest: dict[LabelKey, float] = {}
        seen: dict[str, tuple[float | None, int]] = {}
        for view in views:
            since = self._silence_since(view)
            rid = view.id
            if since is None or rid is None:
                continue
            last = view.last_output_at
            before = self._seen.get(rid)
            # the keepalive count when this silence began, as near as a walk can see it
            kas = view.keepalives if before is None or before[0] != last else before[1]
            seen[rid] = (last, kas)
            label = (view.endpoint or "unknown", view.provider or "unknown")
            silence = now - since
            if silence > oldest.get(label, 0.0):
                oldest[label] = silence
            stall = self._stalls.get(rid)
            if stall is not None and stall.since != since:  # output came back
                del self._stalls[rid]
                self._stall_over(rid, stall, since - stall.since, "output resumed")
                stall = None
            if silence >= after:
                stalled[label] = stalled.get(label, 0) + 1
                if stall is None:
                    stall = _Stall(since, view.t0, kas, view.endpoint, view.model)
                    self._stalls[rid] = stall
                    self._stall_began(rid, stall, silence, view.keepalives - kas)
        self._seen = seen
        if self.on_tick is not None:
            self.on_tick(stalled, oldest)

    def tick(self) -> None:
        """One walk's worth now (tests, tools): what waits is metered, then seen."""
        self.walked(self.recorder.streams.views(catch_up=True), self._clock())

    def _stall_began(self, rid: str, stall: _Stall, silence: float, kas: int) -> None:
        text = (
            f"{self._clock_text()} stall: {short_id(rid)}… {stall.endpoint} {stall.model or '-'}"
            f" silent {silence:.0f} s, {kas} keepalive{'s' if kas != 1 else ''} meanwhile"
        )
        fields = {
            "id": rid,
            "endpoint": stall.endpoint,
            "model": stall.model,
            "silent_s": round(silence, 3),
            "keepalives": kas,
        }
        self._emit("stall", _paint(text, "yellow", self._use_colour()), fields)

    def _stall_over(self, rid: str | None, stall: _Stall, length: float, how: str) -> None:
        text = (
            f"{self._clock_text()} stall over: {short_id(rid)}… {stall.endpoint}"
            f" {stall.model or '-'} {how} after {length:.0f} s silent"
        )
        fields = {
            "id": rid,
            "endpoint": stall.endpoint,
            "model": stall.model,
            "stall_s": round(length, 3),
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
        after = self.stall_after
        second = int(self._wall())
        window = [b for k, b in self._window.items() if second - WINDOW_S < k <= second]
        streams = sum(b[0] for b in window)
        tokens = sum(b[1] for b in window)
        cost = sum(b[2] for b in window)
        return {
            "stall_after_s": after,
            "open": rows,
            "finished": list(reversed(self.finished)),
            "last_minute": {
                "streams": int(streams),
                "tokens": int(tokens),
                "cost_usd": round(cost, 6),
                "streams_per_s": round(streams / WINDOW_S, 3),
                "tokens_per_s": round(tokens / WINDOW_S, 3),
                "usd_per_hour": round(cost * 3600 / WINDOW_S, 6),
            },
        }

    def _open_row(self, view: StreamView, now: float, after: float) -> dict[str, Any]:
        since = self._silence_since(view)
        obs = view.observations
        first = view.first_output_at
        tokens: int | None = None
        estimated = False
        usage = obs.usage
        if usage is not None and usage.output_tokens is not None:
            tokens = usage.output_tokens
        elif obs.output_chars:
            counts = OutputCounts.from_observations(obs)
            tokens = self.recorder.estimator.output(view.model, view.endpoint, counts).tokens
            estimated = True
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
            "stalled": silence is not None and silence >= after,
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
