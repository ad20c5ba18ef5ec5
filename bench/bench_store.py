"""Store benchmark: records per second through ``SqlSink`` on SQLite and PostgreSQL,
and what ``submit`` costs the event loop.

Run: ``.venv/bin/python bench/bench_store.py`` (``--quick`` for a smoke run,
``--write-docs`` to put the figures into docs/storage.md, ``--pg URL`` for the
PostgreSQL server, default ``postgresql+psycopg://postgres@127.0.0.1:5432/test``,
where a scratch database is created and dropped).

What is measured:

- ``sustained``: N records submitted as fast as one thread can, through a queue
  large enough that none overflows; the clock stops when ``close()`` returns,
  i.e. when every record is committed. Records per second, end to end: building
  rows, batched ``INSERT ... ON CONFLICT DO NOTHING`` of streams and their gaps,
  commits. Each record is realistic: every field set, 5 gaps, raw usage JSON.
- ``default queue``: the same with the default settings (a 10,000-record
  queue): the producer outruns the database, the overflow goes to the spool and
  is replayed. What a burst costs end to end, and that nothing is lost.
- ``submit``: microseconds per ``submit()`` on the caller's thread (the event
  loop's), against a bare ``queue.Queue.put_nowait`` measured in the same run,
  for the three paths: the queue (the normal case), the spool when the queue is
  full, and ``spool_first`` (every record appended to the spool first).
- ``loop lag``: an asyncio loop submits 2,000 records/s for a few seconds while
  a ticker measures how late its 1 ms sleeps wake up (p50, p99, max), with the
  database available, with the database locked (the writer stuck waiting on
  it), and with no sink at all (the anchor). The event loop never waits on
  the database if the locked figures match the anchor's.
- ``paced``: records ending at random (5 and 40 a second) through the sink as
  ``recorder proxy`` runs it (journal mode): the CPU per record of the SQL writer's
  and the journal's threads (their thread CPU clocks), against a bare thread handed
  each record by an ``Event`` on the same schedule (what a thread woken per record
  costs on this machine: on a virtual machine, tens of microseconds).

Every figure is the median of the repetitions. The exit status is non-zero
only if something crashes or a record is lost; a missed target is reported.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import queue
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import sqlalchemy  # noqa: E402
from sqlalchemy import create_engine, text  # noqa: E402
from sqlalchemy.engine import make_url  # noqa: E402

from recorder.core.record import Gap, StreamRecord  # noqa: E402
from recorder.proxy.ids import new_record_id  # noqa: E402
from recorder.store.engine import make_engine  # noqa: E402
from recorder.store.migrate import upgrade  # noqa: E402
from recorder.store.writer import SqlSink  # noqa: E402

TARGET_SQLITE = 5000.0
DOCS = ROOT / "docs" / "storage.md"
BEGIN, END = "<!-- bench_store:begin -->", "<!-- bench_store:end -->"


# records per second ending at random in the paced measurement: an SSE load's
# (bench_overhead's default) and a WebSocket load of short responses
PACED_RATES = (5.0, 40.0)
# the writer's default flush interval: what an idle writer polled at before it slept
IDLE_TICK = 0.2


def make_record(i: int) -> StreamRecord:
    """A realistic record: every field set, five gaps, raw usage."""
    return StreamRecord(
        id=new_record_id(),
        started_at=f"2026-02-01T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}.123Z",
        endpoint=("chat.completions", "responses", "messages")[i % 3],
        provider="openai" if i % 3 < 2 else "anthropic",
        upstream="api.openai.com:443",
        model=("gpt-4o-mini", "gpt-4.1", "claude-sonnet-4-5")[i % 3],
        response_model="gpt-4o-mini-2024-07-18",
        request_id=f"req_{i:012d}",
        response_id=f"chatcmpl-{i:020d}",
        project="proj_abc",
        streamed=True,
        http_status=200,
        outcome="completed" if i % 10 else "upstream_disconnect",
        interrupted=not i % 10,
        finish_reason="stop",
        ttfb_ms=210.5,
        first_event_ms=230.25,
        ttft_ms=512.75,
        duration_ms=8123.5 + i % 1000,
        events=412,
        keepalives=3,
        max_keepalive_gap_ms=15000.0,
        max_silence_ms=2100.0,
        max_output_gap_ms=2100.0,
        stalls=0,
        stall_ms=0.0,
        output_chars=1834,
        tool_calls=1,
        input_tokens=1523,
        cache_read_tokens=1024,
        cache_write_tokens=0,
        output_tokens=402,
        reasoning_tokens=64,
        input_source="reported",
        output_source="reported",
        usage_source="reported",
        cost_usd="0.000452100000",
        price_version="openai-2026-01",
        api_key_id="…3456:0a1b2c3d4e5f",
        organization="org-abc",
        include_usage=True,
        max_output_tokens=4096,
        raw_usage={
            "prompt_tokens": 1523,
            "completion_tokens": 402,
            "prompt_tokens_details": {"cached_tokens": 1024},
            "completion_tokens_details": {"reasoning_tokens": 64},
        },
        gaps=[
            Gap("keepalive", 1000.0, 15000.0),
            Gap("keepalive", 16000.0, 14000.0),
            Gap("keepalive", 30000.0, 12000.0),
            Gap("silence", 512.0, 2100.0),
            Gap("stall", 40000.0, 31000.0),
        ],
    )


def records(n: int) -> list[StreamRecord]:
    return [make_record(i) for i in range(n)]


# -- databases -----------------------------------------------------------------


class Databases:
    """A fresh, migrated database per measurement."""

    def __init__(self, work: Path, pg_admin: str | None) -> None:
        self.work = work
        self.pg_admin = pg_admin
        self._admin = create_engine(pg_admin, isolation_level="AUTOCOMMIT") if pg_admin else None
        self._made: list[str] = []
        self._n = 0

    def fresh(self, kind: str) -> str:
        self._n += 1
        if kind == "sqlite":
            url = f"sqlite:///{self.work / f'bench{self._n}.db'}"
        else:
            assert self._admin is not None and self.pg_admin is not None
            name = f"recorder_bench_{uuid.uuid4().hex[:8]}_{self._n}"
            with self._admin.connect() as conn:
                conn.execute(text(f"CREATE DATABASE {name}"))
            self._made.append(name)
            url = make_url(self.pg_admin).set(database=name).render_as_string(False)
        upgrade(url)
        return url

    def close(self) -> None:
        if self._admin is None:
            return
        with self._admin.connect() as conn:
            for name in self._made:
                conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        self._admin.dispose()


def count(url: str) -> int:
    eng = make_engine(url)
    try:
        with eng.connect() as conn:
            return int(conn.execute(text("SELECT count(*) FROM streams")).scalar_one())
    finally:
        eng.dispose()


# -- measurements -----------------------------------------------------------------


def sustained(url: str, spool: Path, recs: list[StreamRecord], queue_size: int) -> dict[str, Any]:
    """End-to-end records/s: submit all, close, everything committed."""
    sink = SqlSink(url, spool, queue_size=queue_size)
    sink.flush(5)  # migrations checked, connection open: not part of the figure
    t0 = time.perf_counter()
    for r in recs:
        sink.submit(r)
    t_submit = time.perf_counter() - t0
    if queue_size < len(recs):  # overflow went to the spool: wait for its replay
        while sink.stats()["spool_files"] or count(url) < len(recs):
            time.sleep(0.01)
    # everything queued committed before close, whose drain is bounded (5 s): a
    # database slower than that would have close spool the rest (not lost, but not
    # what this measures)
    sink.flush(300)
    sink.close()
    elapsed = time.perf_counter() - t0
    stats = sink.stats()
    stored = count(url)
    if stored != len(recs) or stats["dropped"]:
        raise SystemExit(f"LOST RECORDS: {stored} stored of {len(recs)}; {stats}")
    return {
        "rate": len(recs) / elapsed,
        "elapsed": elapsed,
        "submit_us": t_submit / len(recs) * 1e6,
        "spooled": stats["spooled"],
    }


def paced_schedule(rate: float, seconds: float, seed: int) -> list[float]:
    """Offsets (seconds) of records that end at random, ``rate`` a second on average
    (exponential gaps: streams end independently); the same for a seed."""
    rng = random.Random(seed)
    at, out = 0.0, []
    while True:
        at += rng.expovariate(rate)
        if at >= seconds:
            return out
        out.append(at)


def thread_cpu(thread: threading.Thread) -> float:
    """CPU seconds ``thread`` has used (any thread of this process)."""
    assert thread.ident is not None
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


def idle(url: str, spool: Path, seconds: float, tick: float) -> dict[str, float]:
    """CPU per second of the sink's threads with no records at all, against a bare
    thread that wakes every ``tick`` seconds to find nothing (a writer polling at
    its flush interval), in the same run."""
    sink = SqlSink(url, spool, journal=True, flush_interval=tick)
    sink.flush(5)
    time.sleep(0.5)  # settled: schema checked, first scan done
    threads = {t.name: t for t in threading.enumerate()}
    writer, journal = threads["recorder-sql-writer"], threads["recorder-journal"]
    w0, j0 = thread_cpu(writer), thread_cpu(journal)
    time.sleep(seconds)
    w1, j1 = thread_cpu(writer), thread_cpu(journal)
    sink.close()
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(tick):
            pass

    ticker = threading.Thread(target=poll)
    ticker.start()
    time.sleep(0.1)
    t0 = thread_cpu(ticker)
    time.sleep(seconds)
    t1 = thread_cpu(ticker)
    stop.set()
    ticker.join()
    return {
        "writer": (w1 - w0) / seconds * 1e6,
        "journal": (j1 - j0) / seconds * 1e6,
        "bare poll": (t1 - t0) / seconds * 1e6,
    }


def paced(
    url: str, spool: Path, recs: list[StreamRecord], schedule: list[float]
) -> dict[str, float]:
    """CPU per record of the threads behind ``submit`` at a paced rate, as ``recorder
    proxy`` runs the sink (journal mode, default flush): the SQL writer and the
    journal. Anchor: a bare thread handed each record by an ``Event`` (the least a
    thread woken per record costs on this machine), on the same schedule."""

    def run(submit: Callable[[StreamRecord], None]) -> None:
        t0 = time.monotonic()
        for at, rec in zip(schedule, recs, strict=False):
            pause = t0 + at - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            submit(rec)

    sink = SqlSink(url, spool, journal=True)
    sink.flush(5)
    threads = {t.name: t for t in threading.enumerate()}
    writer, journal = threads["recorder-sql-writer"], threads["recorder-journal"]
    w0, j0 = thread_cpu(writer), thread_cpu(journal)
    if len(recs) < len(schedule):
        raise SystemExit(f"{len(schedule)} records scheduled, {len(recs)} made")
    run(sink.submit)
    sink.flush(5)
    w1, j1 = thread_cpu(writer), thread_cpu(journal)
    sink.close()
    if count(url) != len(schedule) or sink.stats()["dropped"]:
        raise SystemExit(f"LOST RECORDS: {count(url)} stored of {len(schedule)}")

    wake, stop = threading.Event(), False
    taken: list[StreamRecord] = []
    box: list[StreamRecord] = []

    def bare() -> None:
        while not stop:
            wake.wait(1.0)
            wake.clear()
            while box:
                taken.append(box.pop())

    def hand(rec: StreamRecord) -> None:
        box.append(rec)
        wake.set()

    anchor = threading.Thread(target=bare, name="bench-bare-wake", daemon=True)
    anchor.start()
    a0 = thread_cpu(anchor)
    run(hand)
    time.sleep(0.05)
    a1 = thread_cpu(anchor)
    stop = True
    wake.set()
    anchor.join()
    n = len(schedule)
    return {
        "writer": (w1 - w0) / n * 1e6,
        "journal": (j1 - j0) / n * 1e6,
        "bare wake": (a1 - a0) / n * 1e6,
    }


def submit_cost(url: str, spool: Path, n: int) -> dict[str, float]:
    """µs per call on the caller's thread: bare put_nowait vs the three submit paths."""
    recs = records(n)
    out: dict[str, float] = {}

    q: queue.Queue[Any] = queue.Queue(maxsize=n + 1)
    t0 = time.perf_counter()
    for r in recs:
        q.put_nowait((0, r))
    out["bare put_nowait"] = (time.perf_counter() - t0) / n * 1e6

    sink = SqlSink(url, spool / "q", queue_size=n + 1)
    sink.flush(5)
    t0 = time.perf_counter()
    for r in recs:
        sink.submit(r)
    out["submit (queue)"] = (time.perf_counter() - t0) / n * 1e6
    sink.close()

    sink = SqlSink(url, spool / "full", queue_size=1, start=False)  # every record overflows
    sink.submit(recs[0])
    t0 = time.perf_counter()
    for r in recs[1:]:
        sink.submit(r)
    out["submit (queue full: spool)"] = (time.perf_counter() - t0) / (n - 1) * 1e6
    sink.close()
    shutil.rmtree(spool / "full", ignore_errors=True)

    sink = SqlSink(url, spool / "first", queue_size=n + 1, spool_first=True)
    sink.flush(5)
    t0 = time.perf_counter()
    for r in recs:
        sink.submit(r)
    out["submit (spool_first)"] = (time.perf_counter() - t0) / n * 1e6
    sink.close()
    return out


async def _lag_run(
    submit: Callable[[StreamRecord], None], seconds: float, rate: int
) -> list[float]:
    lags: list[float] = []
    stop = time.perf_counter() + seconds

    async def ticker() -> None:
        while time.perf_counter() < stop:
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append((time.perf_counter() - t - 0.001) * 1000.0)

    async def producer() -> None:
        i = 0
        period = 0.01  # 10 ms ticks, rate/100 records each
        per_tick = max(1, rate // 100)
        while time.perf_counter() < stop:
            for _ in range(per_tick):
                submit(make_record(i))
                i += 1
            await asyncio.sleep(period)

    await asyncio.gather(ticker(), producer())
    return lags


def loop_lag(url: str, spool: Path, seconds: float, rate: int) -> dict[str, dict[str, float]]:
    """Event-loop lag (ms) with no sink, the database available, and locked."""

    def summary(lags: list[float]) -> dict[str, float]:
        lags.sort()
        return {
            "p50": statistics.median(lags),
            "p99": lags[int(len(lags) * 0.99)],
            "max": lags[-1],
        }

    out: dict[str, dict[str, float]] = {}
    out["no sink (anchor)"] = summary(asyncio.run(_lag_run(lambda r: None, seconds, rate)))

    sink = SqlSink(url, spool / "lag1")
    sink.flush(5)
    out["SqlSink, database available"] = summary(asyncio.run(_lag_run(sink.submit, seconds, rate)))
    sink.close()

    if url.startswith("sqlite"):
        eng = make_engine(url, sqlite_busy_timeout_ms=600_000)
        sink = SqlSink(url, spool / "lag2", engine=eng)
        sink.flush(5)
        locker = create_engine(url, isolation_level=None)
        with locker.connect() as conn:
            conn.exec_driver_sql("BEGIN EXCLUSIVE")  # the writer now waits on the lock
            lags = asyncio.run(_lag_run(sink.submit, seconds, rate))
            conn.exec_driver_sql("ROLLBACK")
        locker.dispose()
        sink.close()
        eng.dispose()
        out["SqlSink, database locked"] = summary(lags)
    return out


# -- report -----------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, one repetition")
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--pg", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    ap.add_argument("--no-pg", action="store_true")
    ap.add_argument("--write-docs", action="store_true", help="put the figures in docs/storage.md")
    args = ap.parse_args()
    n = 5_000 if args.quick else args.records
    reps = 1 if args.quick else args.reps
    lag_seconds = 1.0 if args.quick else 4.0
    paced_seconds = 2.0 if args.quick else 10.0

    pg: str | None = None if args.no_pg else args.pg
    if pg:
        try:
            with create_engine(pg).connect() as conn:
                conn.execute(text("SELECT 1"))
        except Exception as e:
            print(f"PostgreSQL not reachable ({e}); SQLite only", file=sys.stderr)
            pg = None
    kinds = ["sqlite"] + (["postgresql"] if pg else [])

    work = Path(tempfile.mkdtemp(prefix="recorder-bench-"))
    dbs = Databases(work, pg)
    results: dict[str, Any] = {}
    try:
        recs = records(n)
        for kind in kinds:
            for label, qsize in (("sustained", n + 1), ("default queue", 10_000)):
                runs = []
                for rep in range(reps):
                    url = dbs.fresh(kind)
                    fresh = [make_record(i) for i in range(n)] if rep else recs
                    runs.append(sustained(url, work / f"spool-{kind}-{label}-{rep}", fresh, qsize))
                    print(
                        f"{kind:10} {label:14} rep {rep}: {runs[-1]['rate']:,.0f} rec/s", flush=True
                    )
                results[(kind, label)] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        cost_runs = [
            submit_cost(dbs.fresh("sqlite"), work / f"cost{i}", min(n, 20_000)) for i in range(reps)
        ]
        cost = {k: statistics.median(r[k] for r in cost_runs) for k in cost_runs[0]}
        lag = loop_lag(dbs.fresh("sqlite"), work, lag_seconds, 2000)
        pace: dict[float, list[dict[str, float]]] = {}
        for rate in PACED_RATES:
            for rep in range(reps):
                schedule = paced_schedule(rate, paced_seconds, seed=rep)
                pace.setdefault(rate, []).append(
                    paced(
                        dbs.fresh("sqlite"),
                        work / f"paced{rate}-{rep}",
                        recs if len(recs) >= len(schedule) else records(len(schedule)),
                        schedule,
                    )
                )
        quiet = [
            idle(dbs.fresh("sqlite"), work / f"idle-{rep}", paced_seconds / 2, IDLE_TICK)
            for rep in range(reps)
        ]
    finally:
        dbs.close()
        shutil.rmtree(work, ignore_errors=True)

    report = render(results, cost, lag, n, reps, kinds, lag_seconds, pace, paced_seconds, quiet)
    print()
    print(report)
    if args.write_docs:
        write_docs(report)
    sqlite_rate = results[("sqlite", "sustained")]["rate"]
    if sqlite_rate < TARGET_SQLITE:
        print(f"\nTARGET MISSED: {sqlite_rate:,.0f} < {TARGET_SQLITE:,.0f} records/s on SQLite")
    return 0


def render(
    results: dict[Any, dict[str, float]],
    cost: dict[str, float],
    lag: dict[str, dict[str, float]],
    n: int,
    reps: int,
    kinds: list[str],
    lag_seconds: float,
    pace: dict[float, list[dict[str, float]]],
    paced_seconds: float,
    quiet: list[dict[str, float]],
) -> str:
    lines = [
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, SQLAlchemy {sqlalchemy.__version__}, "
        f"{'SQLite ' + __import__('sqlite3').sqlite_version}"
        + (", PostgreSQL on 127.0.0.1 (same machine)" if "postgresql" in kinds else "")
        + f". {n:,} records per run, median of {reps}.",
        "",
        "| database | queue | records/s (end to end) | submit µs/record | spooled, then replayed |",
        "|---|---|---:|---:|---:|",
    ]
    for kind in kinds:
        for label in ("sustained", "default queue"):
            r = results[(kind, label)]
            q = "never full" if label == "sustained" else "10,000 (default)"
            lines.append(
                f"| {kind} | {q} | {r['rate']:,.0f} | {r['submit_us']:.1f} | {r['spooled']:,.0f} |"
            )
    bare = cost["bare put_nowait"]
    lines += [
        "",
        "| on the caller's thread (the event loop) | µs per call | × bare put_nowait |",
        "|---|---:|---:|",
    ]
    for k, v in cost.items():
        lines.append(f"| {k} | {v:.2f} | {v / bare:.1f} |")
    lines += [
        "",
        f"Event-loop lag while submitting 2,000 records/s for {lag_seconds:g} s (how late a "
        "1 ms sleep wakes up, ms):",
        "",
        "| | p50 | p99 | max |",
        "|---|---:|---:|---:|",
    ]
    for k, v in lag.items():
        lines.append(f"| {k} | {v['p50']:.3f} | {v['p99']:.3f} | {v['max']:.3f} |")
    lines += [
        "",
        f"Records ending at random, {paced_seconds:g} s at each rate, SQLite, the sink as "
        "`recorder proxy` runs it (journal): CPU µs per record of its threads, median "
        "[min-max] of the repetitions, and over a bare thread woken per record (anchor):",
        "",
        "| records/s | SQL writer | journal | bare wake-up | writer / bare | journal / bare |",
        "|---:|---:|---:|---:|---:|---:|",
    ]

    def spread(values: list[float], spec: str) -> str:
        return f"{statistics.median(values):{spec}} [{min(values):{spec}}-{max(values):{spec}}]"

    for rate, runs in pace.items():
        col = {k: [r[k] for r in runs] for k in runs[0]}
        over = {
            k: [r[k] / r["bare wake"] for r in runs if r["bare wake"] > 0]
            for k in ("writer", "journal")
        }
        lines.append(
            f"| {rate:g} | {spread(col['writer'], '.0f')} | {spread(col['journal'], '.0f')} "
            f"| {spread(col['bare wake'], '.0f')} | {spread(over['writer'] or [0.0], '.1f')} "
            f"| {spread(over['journal'] or [0.0], '.1f')} |"
        )
    col = {k: [r[k] for r in quiet] for k in quiet[0]}
    ratio = [r["writer"] / r["bare poll"] for r in quiet if r["bare poll"] > 0]
    lines += [
        "",
        f"No records at all ({paced_seconds / 2:g} s): CPU µs per second of the sink's "
        f"threads, against a bare thread waking every {IDLE_TICK:g} s to find nothing "
        "(a writer polling at its flush interval):",
        "",
        "| SQL writer | journal | bare poll | writer / bare poll |",
        "|---:|---:|---:|---:|",
        f"| {spread(col['writer'], '.0f')} | {spread(col['journal'], '.0f')} "
        f"| {spread(col['bare poll'], '.0f')} "
        f"| {spread(ratio or [0.0], '.2f')} |",
    ]
    return "\n".join(lines)


def write_docs(report: str) -> None:
    text_ = DOCS.read_text()
    if BEGIN not in text_ or END not in text_:
        raise SystemExit(f"{DOCS} has no {BEGIN} ... {END} block")
    head, rest = text_.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOCS.write_text(f"{head}{BEGIN}\n{report}\n{END}{tail}")
    print(f"\nwritten to {DOCS}")


if __name__ == "__main__":
    sys.exit(main())
