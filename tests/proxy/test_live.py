"""The live view (recorder.proxy.live): console lines, stalls while they last,
the /streams snapshot; driven through the addon's hooks with a fake clock."""

from __future__ import annotations

import asyncio
import io
import threading
import time
from collections.abc import Callable
from typing import Any

import orjson
from mitmproxy import http
from mitmproxy.test import taddons, tflow, tutils

from recorder.core.record import FIELDS
from recorder.core.short_id import short_id
from recorder.proxy.addon import BATCH_PIECES, Recorder
from recorder.proxy.live import SNAPSHOT_SLICE, Live, Printer
from recorder.proxy.live_lines import duration
from recorder.proxy.scheduling import LoopScheduler, Scheduler
from recorder.proxy.state import FlowState
from recorder.store.sinks import MemorySink
from tests.kit.flows import (
    CHAT_SSE,
    Clock,
    make,
    make_flow,
    pieces_of,
    sse_response,
    start,
    stream_through,
)
from tests.kit.hostile import HOSTILE_MODEL, assert_inert

KEY = b"Bearer sk-test-abcdef1234wxyz"
ROLE = (
    b'data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-4o",'
    b'"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
)


def delta(text: str) -> bytes:
    chunk = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "model": "gpt-4o",
        "choices": [{"index": 0, "delta": {"content": text}}],
    }
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


class Ticks:
    """The gauges' values as each tick hands them over."""

    def __init__(self) -> None:
        self.stalled: dict[tuple[str, str], int] = {}
        self.oldest: dict[tuple[str, str], float] = {}

    def __call__(self, stalled: dict[tuple[str, str], int], oldest: dict[Any, float]) -> None:
        self.stalled, self.oldest = stalled, oldest


def wired(
    out: io.StringIO | None = None, scheduler: Scheduler | None = None, **kw: Any
) -> tuple[Recorder, MemorySink, Clock, Live, io.StringIO, Ticks]:
    addon, sink, clock = make(scheduler, stall_after=30.0)
    out = out if out is not None else io.StringIO()
    ticks = Ticks()
    live = Live(addon, out=out, on_tick=ticks, wall=lambda: 1_790_000_000.0, **kw)
    return addon, sink, clock, live, out, ticks


def state_of(addon: Recorder, flow: http.HTTPFlow) -> FlowState:
    state = addon.streams.get(flow.id)
    assert state is not None
    return state


def lines(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


async def open_stream(addon: Recorder, clock: Clock) -> http.HTTPFlow:
    flow = make_flow(headers=[(b"authorization", KEY)])
    await start(addon, flow, clock)
    flow.response = sse_response()
    addon.responseheaders(flow)
    return flow


def feed(flow: http.HTTPFlow, clock: Clock, piece: bytes, after: float = 0.01) -> None:
    assert flow.response is not None and callable(flow.response.stream)
    clock.now += after
    assert flow.response.stream(piece) == piece


# -- §1: a line per stream ---------------------------------------------------------


async def test_a_finished_stream_prints_one_line_with_its_figures() -> None:
    addon, sink, clock, live, out, _ = wired()
    with taddons.context(addon, live):
        flow = await open_stream(addon, clock)
        stream_through(flow, pieces_of(CHAT_SSE, 97), clock)
        addon.response(flow)
    (rec,) = sink.records
    (line,) = lines(out)
    assert rec.id is not None and line.endswith(" " + short_id(rec.id))  # as `show` takes it
    words = line.split()
    assert words[1:5] == ["chat.completions", "gpt-4o", "200", "completed"]
    assert f"in {rec.input_tokens}" in line and f"out {rec.output_tokens}" in line
    assert "~" not in line  # reported usage is not marked
    assert rec.ttft_ms is not None and rec.ttft_ms < 1000  # the test's clock: milliseconds
    assert f"ttft {rec.ttft_ms:.0f}ms" in line
    assert "stalls 0" in line and "ka 0" in line
    assert "\x1b[" not in line  # not a terminal: no colour
    assert "sk-test" not in out.getvalue() and "wxyz" not in line


async def test_a_stream_of_a_few_milliseconds_shows_them() -> None:
    """Issue 33 §4: a stream under 5 ms printed ``ttft 0.00s dur 0.00s``."""
    addon, sink, clock, live, out, _ = wired()
    with taddons.context(addon, live):
        flow = make_flow(headers=[(b"authorization", KEY)])
        await start(addon, flow, clock)
        clock.now -= 0.25  # an upstream that answers at once (start lets 0.25 s pass)
        flow.response = sse_response()
        addon.responseheaders(flow)
        stream_through(flow, pieces_of(CHAT_SSE, 4096), clock, step=0.0004)
        addon.response(flow)
    (rec,) = sink.records
    assert rec.ttft_ms is not None and rec.duration_ms is not None and rec.duration_ms < 5
    (line,) = lines(out)
    assert f" ttft {rec.ttft_ms:.1f}ms dur {rec.duration_ms:.1f}ms " in line


def test_durations_show_milliseconds_under_a_second_then_seconds() -> None:
    shown = [duration(ms) for ms in (None, 0.04, 3.24, 9.96, 28.4, 999.4, 999.6, 1520, 80_200)]
    assert shown == ["-", "0.0ms", "3.2ms", "10ms", "28ms", "999ms", "1.00s", "1.52s", "80.2s"]
    assert [duration(ms) for ms in (9_996, 99_960, 123_456)] == ["10.0s", "100s", "123s"]


async def test_estimated_figures_are_marked_and_a_terminal_gets_colour() -> None:
    addon, sink, clock, live, out, _ = wired(out=Tty())
    with taddons.context(addon, live):
        flow = await open_stream(addon, clock)
        feed(flow, clock, ROLE)
        feed(flow, clock, delta("Hello there, how are you today?"))
        clock.now += 0.5
        flow.error = flow.error or tflow.terr("client disconnected")
        addon.error(flow)
    (rec,) = sink.records
    assert rec.output_source == "estimated"
    (line,) = lines(out)
    assert f"out ~{rec.output_tokens}" in line
    assert "\x1b[31mclient_disconnect" in line or "\x1b[33mclient_disconnect" in line


async def test_json_log_format_is_one_object_per_line_with_the_records_figures() -> None:
    addon, sink, clock, live, out, _ = wired(log_format="json")
    with taddons.context(addon, live):
        for _ in range(2):
            flow = await open_stream(addon, clock)
            stream_through(flow, pieces_of(CHAT_SSE, 97), clock)
            addon.response(flow)
    objs = [orjson.loads(line) for line in lines(out)]
    assert [o["type"] for o in objs] == ["stream", "stream"]
    for obj, rec in zip(objs, sink.records, strict=True):
        for name in ("id", "outcome", "ttft_ms", "output_tokens", "cost_usd", "http_status"):
            assert obj[name] == getattr(rec, name)
        assert obj["key_last4"] == "wxyz"


async def test_a_hostile_model_name_is_escaped_on_the_line_and_exact_in_json() -> None:
    """Issue 34 §4: the model the client named prints escaped, on a terminal (with
    colour) or not, and as the exact value in a JSON line."""
    for out, log_format in ((io.StringIO(), "text"), (Tty(), "text"), (io.StringIO(), "json")):
        addon, sink, clock, live, out, _ = wired(out=out, log_format=log_format)
        with taddons.context(addon, live):
            body = {"model": HOSTILE_MODEL, "stream": True, "messages": []}
            flow = make_flow(body=body, headers=[(b"authorization", KEY)])
            await start(addon, flow, clock)
            flow.response = sse_response()
            addon.responseheaders(flow)
            stream_through(flow, pieces_of(CHAT_SSE, 97), clock)
            addon.response(flow)
        (rec,) = sink.records
        assert rec.model == HOSTILE_MODEL  # recorded as sent
        if log_format == "json":
            (line,) = lines(out)
            assert "\x1b" not in line and "\x07" not in line and "\r" not in line
            assert orjson.loads(line)["model"] == HOSTILE_MODEL
        else:
            assert_inert(out.getvalue())
            assert len(lines(out)) == 1


async def test_quiet_prints_nothing() -> None:
    addon, sink, clock, live, out, _ = wired(quiet=True)
    with taddons.context(addon, live):
        flow = await open_stream(addon, clock)
        stream_through(flow, pieces_of(CHAT_SSE, 97), clock)
        addon.response(flow)
    assert len(sink.records) == 1 and out.getvalue() == ""


def unmetered_flow() -> http.HTTPFlow:
    req = tutils.treq(method=b"GET", host="example.org", path=b"/models?key=sk-secret-xyz")
    flow = tflow.tflow(req=req)
    flow.response = tutils.tresp(status_code=200)
    return flow


async def test_unmetered_flows_get_a_short_line_only_when_verbose() -> None:
    for verbose in (False, True):
        addon, _, _, live, out, _ = wired(verbose=verbose)
        with taddons.context(addon, live):
            flow = unmetered_flow()
            addon.requestheaders(flow)
            addon.response(flow)
            live.response(flow)
        if not verbose:
            assert out.getvalue() == ""
        else:
            (line,) = lines(out)
            assert "unmetered GET example.org/models 200" in line
            assert "secret" not in line  # the query string is never shown


# -- §2: stalls while they happen ----------------------------------------------------


async def test_a_stall_is_reported_when_it_starts_and_when_output_resumes() -> None:
    addon, sink, clock, live, out, ticks = wired()
    with taddons.context(addon, live):
        flow = await open_stream(addon, clock)
        feed(flow, clock, ROLE)
        feed(flow, clock, delta("Hi"))
        state_of(addon, flow).catch_up()  # as a full batch would
        live.tick()
        for _ in range(3):  # keepalives fill the silence; they are not output
            feed(flow, clock, b": keepalive\n\n", after=9.0)
        live.tick()
        assert lines(out) == [] and ticks.stalled == {}
        assert ticks.oldest[("chat.completions", "openai")] == 27.0
        clock.now += 3.5
        live.tick()
        (began,) = lines(out)
        rid = state_of(addon, flow).record.id
        assert rid is not None
        assert f"stall: {short_id(rid)} chat.completions gpt-4o silent 30 s" in began
        assert "3 keepalives meanwhile" in began
        assert ticks.stalled == {("chat.completions", "openai"): 1}
        live.tick()  # still stalled: no second line
        assert len(lines(out)) == 1
        clock.now += 9.49
        feed(flow, clock, delta(" again"))  # 40 s after "Hi"
        state_of(addon, flow).catch_up()
        live.tick()
        assert ticks.stalled == {}
        over = lines(out)[1]
        assert f"stall over: {short_id(rid)} " in over
        assert "output resumed after 40 s silent" in over
        feed(flow, clock, b"data: [DONE]\n\n")
        flow.response.stream(b"")  # type: ignore[union-attr,operator]
        addon.response(flow)
    (rec,) = sink.records
    assert rec.stalls == 1 and "stalls 1" in lines(out)[2]


async def test_a_stall_that_runs_into_the_end_says_so_with_its_length() -> None:
    addon, sink, clock, live, out, _ = wired(log_format="json")
    with taddons.context(addon, live):
        flow = await open_stream(addon, clock)
        feed(flow, clock, ROLE)
        feed(flow, clock, delta("Hi"))
        clock.now += 31
        live.tick()
        clock.now += 14
        flow.error = tflow.terr("peer closed connection")
        addon.error(flow)
    began, over, line = (orjson.loads(x) for x in lines(out))
    (rec,) = sink.records
    assert (began["type"], over["type"], line["type"]) == ("stall", "stall_over", "stream")
    assert began["id"] == over["id"] == rec.id
    assert over["how"] == "stream ended (upstream_disconnect)"
    (gap,) = [g for g in rec.gaps if g.kind == "stall"]
    assert over["stall_s"] == gap.length_ms / 1000.0


async def test_output_resuming_just_before_the_end_is_told_from_a_cut() -> None:
    # between two ticks the output comes back and the stream completes at once
    addon, _, clock, live, out, _ = wired()
    with taddons.context(addon, live):
        flow = await open_stream(addon, clock)
        feed(flow, clock, ROLE)
        feed(flow, clock, delta("Hi"))
        clock.now += 31
        live.tick()
        feed(flow, clock, delta(" there"), after=4)
        feed(flow, clock, b"data: [DONE]\n\n", after=0)
        flow.response.stream(b"")  # type: ignore[union-attr,operator]
        addon.response(flow)
    over = lines(out)[1]
    assert "stall over:" in over and "output resumed after 35 s silent" in over


async def test_a_batch_waiting_to_be_metered_is_not_taken_for_silence() -> None:
    # The first output arrives at 29 s, in a batch the tap has not metered yet; at
    # 31 s the stream has been silent for 2 s, not 31.
    addon, _, clock, live, out, ticks = wired()
    with taddons.context(addon, live):
        flow = await open_stream(addon, clock)
        feed(flow, clock, ROLE, after=28.75)
        feed(flow, clock, delta("late"))
        tap = state_of(addon, flow).tap
        assert tap is not None and len(tap.pieces) == 2 < BATCH_PIECES
        clock.now += 2
        live.tick()
        assert lines(out) == [] and ticks.stalled == {}
        assert 1.9 < ticks.oldest[("chat.completions", "openai")] < 2.1


async def test_live_watching_changes_no_figure_of_the_record() -> None:
    records = []
    for watched in (False, True):
        addon, sink, clock, live, _, _ = wired()
        with taddons.context(addon, live):
            flow = await open_stream(addon, clock)
            feed(flow, clock, ROLE)
            feed(flow, clock, delta("Hi"))
            for _ in range(40):
                feed(flow, clock, b": ka\n\n", after=1.0)
                if watched:
                    live.tick()
            feed(flow, clock, delta(" there"))
            feed(flow, clock, CHAT_SSE[CHAT_SSE.rindex(b"data: {") :])
            flow.response.stream(b"")  # type: ignore[union-attr,operator]
            addon.response(flow)
        (rec,) = sink.records
        records.append({k: v for k, v in rec.to_dict(with_gaps=True).items() if k in FIELDS})
    for rec in records:
        rec.pop("id"), rec.pop("started_at"), rec.pop("api_key_id")
    assert records[0] == records[1]
    assert records[1]["stalls"] == 1


async def test_error_responses_and_json_bodies_never_stall() -> None:
    addon, _, clock, live, out, ticks = wired()
    with taddons.context(addon, live):
        flow = make_flow()
        await start(addon, flow, clock)
        flow.response = sse_response(status=500)
        addon.responseheaders(flow)
        clock.now += 100
        live.tick()
    assert ticks.stalled == {} and lines(out) == []


# -- §3: the /streams snapshot -------------------------------------------------------


async def test_snapshot_shows_open_streams_by_silence_and_the_finished_ones() -> None:
    addon, sink, clock, live, _, _ = wired()
    with taddons.context(addon, live):
        live.running()  # the proxy's event loop
        done = await open_stream(addon, clock)
        stream_through(done, pieces_of(CHAT_SSE, 97), clock)
        addon.response(done)
        quiet = await open_stream(addon, clock)
        feed(quiet, clock, ROLE)
        feed(quiet, clock, delta("Hello"))
        clock.now += 40
        busy = await open_stream(addon, clock)
        feed(busy, clock, ROLE)
        feed(busy, clock, delta("Hey"))
        snap = orjson.loads(live.snapshot_json())
    first, second = snap["open"]
    assert first["id"] == state_of(addon, quiet).record.id and first["stalled"] is True
    assert second["id"] == state_of(addon, busy).record.id and second["stalled"] is False
    assert first["silence_s"] > 40 > second["silence_s"]
    assert first["key_last4"] == "wxyz" and first["output_chars"] == 5
    assert first["output_tokens"] >= 1 and first["output_tokens_estimated"] is True
    assert first["events"] == 2 and first["http_status"] == 200
    assert first["ttft_s"] is not None and first["age_s"] > first["silence_s"]
    (fin,) = snap["finished"]
    (rec,) = sink.records
    assert fin["id"] == rec.id and fin["outcome"] == "completed"
    assert fin["output_tokens"] == rec.output_tokens and fin["cost_usd"] == rec.cost_usd
    assert snap["last_minute"]["streams"] == 1


async def test_the_finished_list_keeps_the_last_hundred_newest_first() -> None:
    addon, sink, clock, live, _, _ = wired(quiet=True)
    with taddons.context(addon, live):
        for _ in range(105):
            flow = await open_stream(addon, clock)
            stream_through(flow, pieces_of(CHAT_SSE, 4096), clock)
            addon.response(flow)
    finished = live.snapshot()["finished"]
    assert [f["id"] for f in finished] == [r.id for r in reversed(sink.records[-100:])]


async def test_streams_asked_from_another_thread_are_read_on_the_loop_in_slices() -> None:
    # GET /streams is served on the metrics server's thread; with more open streams
    # than one slice, every one of them is still in the document, once
    addon, _, clock, live, _, _ = wired(scheduler=LoopScheduler())
    with taddons.context(addon, live):
        live.running()  # the proxy's event loop
        flows = [await open_stream(addon, clock) for _ in range(SNAPSHOT_SLICE * 2 + 7)]
        for flow in flows:
            feed(flow, clock, ROLE)
        doc = orjson.loads(await asyncio.to_thread(live.snapshot_json))
        live.done()
    ids = [row["id"] for row in doc["open"]]
    assert sorted(ids) == sorted(s.record.id for s in addon.streams)
    assert len(ids) == len(flows)


class StuckConsole(io.StringIO):
    """A terminal paused with Ctrl-S: writing blocks until it is let go."""

    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()
        self.writers: list[str] = []

    def write(self, text: str) -> int:
        self.writers.append(threading.current_thread().name)
        self.go.wait(5)  # bounded, so that a regression fails instead of hanging
        return super().write(text)


async def test_a_console_that_does_not_read_never_holds_the_proxy() -> None:
    console = StuckConsole()
    addon, sink, clock, live, _, _ = wired(out=console, background=True)
    with taddons.context(addon, live):
        for _ in range(3):  # each completes its record and prints, on this thread
            flow = await open_stream(addon, clock)
            stream_through(flow, pieces_of(CHAT_SSE, 97), clock)
            addon.response(flow)
        assert len(sink.records) == 3 and console.getvalue() == ""
        console.go.set()
        live.flush()
    assert set(console.writers) == {"recorder-console"}  # never the event loop's thread
    assert [line.split()[-1] for line in lines(console)] == [short_id(r.id) for r in sink.records]


def test_printer_writes_every_line_in_order_across_idle_and_busy_spells() -> None:
    out = io.StringIO()
    printer = Printer(out, limit=100_000)
    sent = []
    for spell in range(4):
        for i in range(300 if spell % 2 else 3):  # bursts and lone lines
            line = f"line {spell}-{i}"
            printer.put(line)
            sent.append(line)
        printer.flush(10.0)
        assert out.getvalue().splitlines() == sent  # all written before flush returns
        time.sleep(0.2)  # the thread goes idle: the next line must wake it
    assert printer.dropped == 0


def test_printer_makes_handed_over_lines_on_its_own_thread_in_order() -> None:
    out = io.StringIO()
    printer = Printer(out, limit=1_000)
    made_on: list[str] = []

    def make(i: int) -> Callable[[], str]:
        def line() -> str:
            made_on.append(threading.current_thread().name)
            if i == 2:
                raise ValueError("a line that cannot be made")
            return f"made {i}"

        return line

    for i in range(5):
        printer.put(make(i))
        printer.put(f"plain {i}")
    printer.flush(10.0)
    want = [x for i in range(5) for x in (f"made {i}", f"plain {i}") if x != "made 2"]
    assert out.getvalue().splitlines() == want  # in order; the failed one left out
    assert printer.failed == 1 and printer.dropped == 0
    assert set(made_on) == {"recorder-console"}  # never the caller's thread


def test_printer_counts_what_it_cannot_hold() -> None:
    class Stuck(io.StringIO):
        def __init__(self) -> None:
            super().__init__()
            self.release = threading.Event()

        def write(self, s: str) -> int:
            self.release.wait(10)
            return super().write(s)

    out = Stuck()
    printer = Printer(out, limit=5)
    printer.put("first")  # taken by the thread, which then blocks on the console
    deadline = time.monotonic() + 5
    while printer._lines and time.monotonic() < deadline:
        time.sleep(0.01)
    for i in range(8):
        printer.put(f"more {i}")
    assert printer.dropped == 3
    out.release.set()
    printer.flush(10.0)
    assert out.getvalue().splitlines() == ["first", *(f"more {i}" for i in range(5))]


async def test_tokens_per_second_count_a_stream_while_it_streams_and_once_in_all() -> None:
    """`recorder top`'s tokens/s: a long stream's output counts in the last minute as
    it streams (it read 0.0 until the stream ended), and its whole record once."""
    from tests.kit.flows import timers_of

    addon, sink, clock, live, _, _ = wired(quiet=True)
    timers = timers_of(addon)
    with taddons.context(addon, live):
        flow = await open_stream(addon, clock)
        feed(flow, clock, ROLE)
        for i in range(30):
            feed(flow, clock, delta(f"word{i} "), after=0.0)
            timers.advance(0.1)  # the walk comes once a second
        mid = live.snapshot()["last_minute"]
        assert mid["tokens"] > 0 and mid["tokens_per_s"] > 0 and mid["streams"] == 0
        feed(flow, clock, CHAT_SSE[CHAT_SSE.rindex(b"data: {") :])
        flow.response.stream(b"")  # type: ignore[union-attr,operator]
        addon.response(flow)
        timers.advance(2.0)
    (rec,) = sink.records
    end = live.snapshot()["last_minute"]
    assert end["streams"] == 1
    assert end["tokens"] == (rec.input_tokens or 0) + (rec.output_tokens or 0)
