"""Storage faults through a real `recorder proxy`: what a user sees.

The proxy runs as a subprocess in reverse mode before an in-thread simulator;
its database fails under it while streams go through:

- the database goes away and comes back (SQLite: another connection holds an
  exclusive lock; PostgreSQL: a TCP forwarder in this process, between the
  proxy and the server, cuts and refuses connections; the shared server is
  never stopped);
- the database is away and the spool's disk is full (a 64 KiB tmpfs, filled);
- SIGTERM with 100 streams in flight;
- a restart with records still in the spool (after SIGTERM, and after kill -9).

Every client gets its stream intact; every request ends up in the database once
(except what the full disk drops, counted and logged); the llm_recorder_*
metrics say what happened.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import Engine
from sqlalchemy.engine import make_url

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "store"))

from storedb import (
    create_pg_db,
    drop_pg_db,
    outage,
    pg_admin,
    pg_template,
    pg_url,
    spool_files,
    sqlite_template,
)

from recorder.simulate import SentRecord, Simulator, run_in_thread
from tests.cli.proxy_process import RECORDER
from tests.e2e.conftest import free_port

__all__ = ["pg_admin", "pg_template", "sqlite_template"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with run_in_thread() as simulator:
        yield simulator


# -- a TCP forwarder the test can cut ----------------------------------------------


class Forwarder:
    """127.0.0.1:<port> -> ``target``, one pair of pump threads per connection.
    ``cut()`` resets every open connection and refuses new ones (accepted, then
    reset at once) until ``restore()``."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._up = True
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self.refused = 0
        self._closed = False
        threading.Thread(target=self._accept, name="forwarder", daemon=True).start()

    def url(self, database_url: str) -> str:
        """``database_url`` with its host and port replaced by the forwarder's."""
        u = make_url(database_url).set(host="127.0.0.1", port=self.port)
        return u.render_as_string(hide_password=False)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if not self._up:
                self.refused += 1
                _reset(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _reset(client)
                continue
            with self._lock:
                self._conns |= {client, upstream}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        self._up = False
        with self._lock:
            conns, self._conns = self._conns, set()
        for s in conns:
            _reset(s)

    def restore(self) -> None:
        self._up = True

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._listener.close()


def _reset(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    with contextlib.suppress(OSError):
        s.close()


# -- databases ----------------------------------------------------------------------


class Store:
    """A migrated database for one test, and how to take it away."""

    def __init__(self, kind: str, url: str, proxy_url: str, fwd: Forwarder | None) -> None:
        self.kind = kind
        self.url = url  # direct, for the test's own queries
        self.proxy_url = proxy_url  # what the proxy is given (via the forwarder on PG)
        self.fwd = fwd

    @contextlib.contextmanager
    def down(self) -> Iterator[None]:
        """The database refuses the proxy inside the block."""
        if self.fwd is None:
            with outage(self.url):  # SQLite: BEGIN EXCLUSIVE from another connection
                yield
            return
        self.fwd.cut()
        try:
            yield
        finally:
            self.fwd.restore()

    def rows(self) -> list[dict[str, Any]]:
        eng = sa.create_engine(self.url)
        try:
            with eng.connect() as conn:
                result = conn.execute(
                    sa.text("SELECT id, request_id, outcome, transport_error FROM streams")
                )
                return [dict(r) for r in result.mappings()]
        finally:
            eng.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from _store(request, tmp_path, request.param)


@pytest.fixture
def pg_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from _store(request, tmp_path, "postgresql")


def _store(request: pytest.FixtureRequest, tmp_path: Path, kind: str) -> Iterator[Store]:
    if kind == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        path = tmp_path / "recorder.db"
        shutil.copyfile(template, path)
        url = f"sqlite:///{path}"
        yield Store(kind, url, url, None)
        return
    admin: Engine = request.getfixturevalue("pg_admin")
    name = create_pg_db(admin, request.getfixturevalue("pg_template"))
    url = pg_url(name)
    u = make_url(url)
    fwd = Forwarder((u.host or "127.0.0.1", u.port or 5432))
    try:
        yield Store(kind, url, fwd.url(url), fwd)
    finally:
        fwd.close()
        drop_pg_db(admin, name)


# -- the proxy ----------------------------------------------------------------------


class Proxy:
    """`recorder proxy` in reverse mode before ``sim``; its output is collected by a
    thread (so the pipe never fills) and can be searched."""

    def __init__(self, tmp_path: Path, sim: Simulator, db: str, spool: Path) -> None:
        self.port, self.metrics_port = free_port(), free_port()
        env = {**os.environ, "HOME": str(tmp_path), "RECORDER_STALL_AFTER": "30"}
        env.pop("RECORDER_KEY_SECRET", None)
        self.proc = subprocess.Popen(
            [
                RECORDER,
                "proxy",
                "--mode",
                f"reverse:{sim.url}",
                "--listen-port",
                str(self.port),
                "--metrics-port",
                str(self.metrics_port),
                "--db",
                db,
                "--spool-dir",
                str(spool),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=tmp_path,
        )
        self._lines: list[str] = []
        self._started = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()
        if not self._started.wait(30):
            self.proc.kill()
            raise AssertionError(f"proxy did not start:\n{self.output}")
        assert self.proc.poll() is None, self.output

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.append(line)
            if line.lstrip().startswith("metrics:"):
                self._started.set()
        self._started.set()

    @property
    def output(self) -> str:
        return "".join(self._lines)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def metrics(self) -> dict[str, float]:
        """The llm_recorder_* samples (they carry no labels)."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as resp:
            text = resp.read().decode()
        return {
            s.name: s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name.startswith("llm_recorder_")
        }

    def wait_metrics(self, cond: Callable[[dict[str, float]], bool], timeout: float) -> None:
        end = time.monotonic() + timeout
        m: dict[str, float] = {}
        while time.monotonic() < end:
            m = self.metrics()
            if cond(m):
                return
            time.sleep(0.1)
        raise AssertionError(f"metrics never got there: {m}\n{self.output}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> tuple[int, float]:
        """Signal the proxy; its exit code and how long it took to exit."""
        t0 = time.monotonic()
        self.proc.send_signal(sig)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise AssertionError(f"proxy did not exit in {timeout} s:\n{self.output}") from None
        return code, time.monotonic() - t0

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def running_proxy(tmp_path: Path, sim: Simulator, db: str, spool: Path) -> Iterator[Proxy]:
    proxy = Proxy(tmp_path, sim, db, spool)
    try:
        yield proxy
    finally:
        proxy.kill()


# -- traffic ------------------------------------------------------------------------


def new_ids(tag: str, n: int) -> list[str]:
    run = uuid.uuid4().hex[:6]
    return [f"req_{tag}_{run}_{i:03d}" for i in range(n)]


def stream(
    base: str, rid: str, faults: str = "", seen: set[str] | None = None
) -> tuple[bytes, bool]:
    """One Chat stream through the proxy: the body the client got, and whether it
    ended cleanly. ``rid`` joins ``seen`` once the response's headers are in."""
    headers = {"x-sim-id": rid, "authorization": "Bearer sk-faults-test-1234"}
    if faults:
        headers["x-sim-fault"] = faults
    body = {
        "model": "gpt-4o",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": "Tell me about harmony."}],
    }
    got = bytearray()
    try:
        with (
            httpx.Client(timeout=30) as client,
            client.stream("POST", f"{base}/v1/chat/completions", json=body, headers=headers) as r,
        ):
            assert r.status_code == 200, r.status_code
            assert r.headers["x-request-id"] == rid
            if seen is not None:
                seen.add(rid)
            for piece in r.iter_bytes():
                got += piece
    except httpx.TransportError:
        return bytes(got), False
    return bytes(got), True


def assert_intact(body: bytes, truth: SentRecord) -> None:
    """The client got every event the simulator sent, with the same text."""
    events = [line[len(b"data: ") :] for line in body.split(b"\n") if line.startswith(b"data: ")]
    assert len(events) == truth.events, (len(events), truth.events)
    assert events[-1] == b"[DONE]"
    text = ""
    for data in events[:-1]:
        for choice in orjson.loads(data)["choices"]:
            text += choice["delta"].get("content") or ""
    assert text == truth.text and text


def send(base: str, sim: Simulator, ids: list[str], workers: int = 10) -> None:
    """Streams with ``ids``, ``workers`` at a time; every one must arrive intact."""
    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(lambda rid: stream(base, rid), ids))
    for rid, (body, clean) in zip(ids, results, strict=True):
        assert clean, rid
        assert_intact(body, sim.wait_sent_blocking(rid))


def wait_until(cond: Callable[[], bool], timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.1)
    raise AssertionError(f"not in {timeout} s: {what}")


def assert_each_once(rows: list[dict[str, Any]], ids: list[str]) -> None:
    """Every request is one row, none twice, none foreign."""
    assert len({r["id"] for r in rows}) == len(rows), "duplicate record ids"
    request_ids = [r["request_id"] for r in rows]
    assert len(set(request_ids)) == len(request_ids), "a request recorded twice"
    assert sorted(request_ids, key=str) == sorted(ids)


# -- 1. the database goes away and comes back ------------------------------------


def test_database_outage_during_traffic(tmp_path: Path, sim: Simulator, store: Store) -> None:
    """60 streams: 20 before, 20 during, 20 after an outage. Clients see nothing;
    the records of the outage are spooled and replayed; each request is stored once."""
    spool = tmp_path / "spool"
    before, during, after = (new_ids(f"{store.kind}_out{k}", 20) for k in range(3))
    with running_proxy(tmp_path, sim, store.proxy_url, spool) as proxy:
        send(proxy.base, sim, before)
        proxy.wait_metrics(lambda m: m["llm_recorder_records_written_total"] == 20, 10)
        with store.down():
            send(proxy.base, sim, during)
            # SQLite: the writer waits out its 5 s busy timeout before it spools
            proxy.wait_metrics(lambda m: m["llm_recorder_records_spooled_total"] == 20, 20)
            assert spool_files(spool)
        # right after the outage, the writer may still be backing off: it spools
        send(proxy.base, sim, after)
        proxy.wait_metrics(
            lambda m: (
                m["llm_recorder_records_written_total"] + m["llm_recorder_records_replayed_total"]
                == 60
                and m["llm_recorder_spool_depth"] == 0
            ),
            30,
        )
        wait_until(lambda: not spool_files(spool), 10, "spool files removed")
        m = proxy.metrics()
        code, _ = proxy.stop()
    assert code == 0, proxy.output
    assert m["llm_recorder_records_spooled_total"] >= 20
    assert m["llm_recorder_records_replayed_total"] == m["llm_recorder_records_spooled_total"]
    assert m["llm_recorder_records_submitted_total"] == 60
    assert m["llm_recorder_records_dropped_total"] == 0
    assert m["llm_recorder_records_failed_total"] == 0
    assert m["llm_recorder_spool_depth"] == 0
    assert m["llm_recorder_write_queue_depth"] == 0
    out = proxy.output
    assert "unavailable" in out and "spooling records in" in out and str(spool) in out, out
    assert "is back; replaying the spool" in out, out
    rows = store.rows()
    assert_each_once(rows, before + during + after)
    assert {r["outcome"] for r in rows} == {"completed"}


# -- 2. the database is away and the spool's disk is full ------------------------


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 KiB tmpfs (root only: skipped where it cannot be mounted; the in-process
    test in tests/store/test_spool_faults.py fakes ENOSPC instead)."""
    mnt = tmp_path / "tinyfs"
    mnt.mkdir()
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root")
    res = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(mnt)],
        capture_output=True,
        text=True,
    )
    if res.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {res.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(directory: Path) -> Path:
    """Fill the file system of ``directory`` up: the next write gets ENOSPC."""
    filler = directory / "filler"
    with filler.open("wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 4096)
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
    return filler


def test_full_spool_disk_during_an_outage(
    tmp_path: Path, sim: Simulator, pg_store: Store, tiny_disk: Path
) -> None:
    """The database is away and the spool's disk is full: streams pass untouched,
    their records are dropped, counted and logged with the file and the errno.
    When the disk has room again, records are spooled (and replayed) as usual."""
    spool = tiny_disk / "spool"
    before, lost, later = (new_ids(f"enospc{k}", n) for k, n in enumerate((10, 20, 10)))
    with running_proxy(tmp_path, sim, pg_store.proxy_url, spool) as proxy:
        send(proxy.base, sim, before)
        proxy.wait_metrics(lambda m: m["llm_recorder_records_written_total"] == 10, 10)
        filler = fill(tiny_disk)
        with pg_store.down():
            send(proxy.base, sim, lost)
            proxy.wait_metrics(lambda m: m["llm_recorder_records_dropped_total"] == 20, 20)
            m = proxy.metrics()
            assert m["llm_recorder_records_spooled_total"] == 0
            assert m["llm_recorder_spool_depth"] <= 1  # not a file per failed append
            assert len(spool_files(spool)) <= 1
            filler.unlink()  # room again; the database is still away
            send(proxy.base, sim, later)
            proxy.wait_metrics(lambda m: m["llm_recorder_records_spooled_total"] == 10, 20)
        proxy.wait_metrics(
            lambda m: (
                m["llm_recorder_records_replayed_total"] == 10
                and m["llm_recorder_spool_depth"] == 0
            ),
            30,
        )
        wait_until(lambda: not spool_files(spool), 10, "spool files removed")
        code, _ = proxy.stop()
    out = proxy.output
    assert code == 0, out
    assert "DROPPED" in out and "database unavailable and spool unwritable" in out, out
    assert f"No space left on device (ENOSPC) on {spool}/recorder-spool-" in out, out
    assert "40 records: 10 written to the database, 10 spooled, 20 dropped" in out, out
    rows = pg_store.rows()
    assert_each_once(rows, before + later)  # the dropped ones are lost, and only they


# -- 3. SIGTERM under load -------------------------------------------------------------


def test_sigterm_with_100_streams_in_flight(tmp_path: Path, sim: Simulator, store: Store) -> None:
    """30 short streams have ended, 70 slow ones are in flight when the proxy gets
    SIGTERM: it exits 0 promptly and every request is one record."""
    fast, slow = new_ids(f"{store.kind}_fast", 30), new_ids(f"{store.kind}_slow", 70)
    spool = tmp_path / "spool"
    with (
        running_proxy(tmp_path, sim, store.proxy_url, spool) as proxy,
        ThreadPoolExecutor(100) as pool,
    ):
        seen: set[str] = set()  # the streams whose headers reached the client
        futures = {rid: pool.submit(stream, proxy.base, rid) for rid in fast}
        # 18 to 48 deltas, 0.5 s apart: 10 s at least
        futures |= {rid: pool.submit(stream, proxy.base, rid, "delay=0.5", seen) for rid in slow}
        wait_until(
            lambda: len(seen) == len(slow) and all(futures[rid].done() for rid in fast),
            30,
            "every slow stream under way, the short ones over",
        )
        assert not any(futures[rid].done() for rid in slow)
        code, took = proxy.stop()
        results = {rid: f.result(timeout=30) for rid, f in futures.items()}
    out = proxy.output
    assert code == 0, out
    assert took < 8, took  # the promise (docs/reliability.md)
    for rid in fast:
        body, clean = results[rid]
        assert clean, rid
        assert_intact(body, sim.wait_sent_blocking(rid))
    for rid in slow:
        assert not results[rid][1], rid  # cut by the shutdown
    assert "100 records: 100 written to the database, 0 spooled, 0 dropped" in out, out
    assert not spool_files(spool)
    rows = store.rows()
    assert_each_once(rows, fast + slow)
    by_request = {r["request_id"]: r for r in rows}
    assert {by_request[rid]["outcome"] for rid in fast} == {"completed"}
    cut = {(by_request[rid]["outcome"], by_request[rid]["transport_error"]) for rid in slow}
    assert cut == {("client_disconnect", "proxy shut down")}, cut


# -- 4. a restart with records still in the spool ----------------------------------


@pytest.mark.parametrize("how", ["sigterm", "kill -9"])
def test_restart_replays_what_the_last_process_spooled(
    tmp_path: Path, sim: Simulator, pg_store: Store, how: str
) -> None:
    """Proxy 1 spools 20 records (the database is away), then is stopped (SIGTERM)
    or killed (kill -9). Proxy 2, on the same spool directory once the database is
    back, replays them: each once, the spool files removed."""
    spool = tmp_path / "spool"
    ids = new_ids("restart", 20)
    fwd = pg_store.fwd
    assert fwd is not None
    with running_proxy(tmp_path, sim, pg_store.proxy_url, spool) as first:
        fwd.cut()
        send(first.base, sim, ids)
        first.wait_metrics(lambda m: m["llm_recorder_records_spooled_total"] == 20, 20)
        if how == "sigterm":
            code, _ = first.stop()
            assert code == 0, first.output
            assert "20 records: 0 written to the database, 20 spooled, 0 dropped" in first.output
        else:
            first.kill()
            assert first.proc.returncode == -signal.SIGKILL
    files = spool_files(spool)
    docs = [orjson.loads(line) for path in files for line in path.read_bytes().splitlines()]
    records = [d for d in docs if "recorder_spool" not in d]  # each file's header names the store
    assert sorted(d["request_id"] for d in records) == sorted(ids)
    assert pg_store.rows() == []
    fwd.restore()
    with running_proxy(tmp_path, sim, pg_store.proxy_url, spool) as second:
        second.wait_metrics(
            lambda m: (
                m["llm_recorder_records_replayed_total"] == 20
                and m["llm_recorder_spool_depth"] == 0
            ),
            20,
        )
        wait_until(lambda: not spool_files(spool), 10, "spool files removed")
        m = second.metrics()
        code, _ = second.stop()
    assert code == 0, second.output
    assert "replaying spool file" in second.output and "left by another process" in second.output
    assert m["llm_recorder_records_spooled_total"] == 0
    assert m["llm_recorder_records_written_total"] == 0
    assert m["llm_recorder_records_dropped_total"] == 0
    assert_each_once(pg_store.rows(), ids)
