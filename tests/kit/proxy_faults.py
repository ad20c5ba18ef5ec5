"""`recorder proxy` against a store that fails: a TCP forwarder the test can cut
between the proxy and PostgreSQL (``Forwarder``), the store of either kind behind
it (the ``store`` / ``pg_store`` fixtures), the proxy as a subprocess whose output
is collected (``Proxy``, ``running_proxy``), and the streams sent through it
(``stream``, ``send``) with their checks (``assert_intact``, ``assert_each_once``)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import sqlalchemy as sa
from sqlalchemy import Engine
from sqlalchemy.engine import make_url

from recorder.simulate import SentRecord, Simulator, run_in_thread
from tests.kit.databases import create_pg_db, drop_pg_db, outage, pg_url
from tests.kit.ports import free_port
from tests.kit.processes import RECORDER, scrape_metrics


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with run_in_thread() as simulator:
        yield simulator


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
    yield from migrated_store(request, tmp_path, request.param)


@pytest.fixture
def pg_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    yield from migrated_store(request, tmp_path, "postgresql")


def migrated_store(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    kind: str,
    forwarder: type[Forwarder] = Forwarder,
) -> Iterator[Store]:
    """A migrated database for one test (a copy of the SQLite template, or a fresh
    PostgreSQL database reached through a ``forwarder``), dropped after it."""
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
    fwd = forwarder((u.host or "127.0.0.1", u.port or 5432))
    try:
        yield Store(kind, url, fwd.url(url), fwd)
    finally:
        fwd.close()
        drop_pg_db(admin, name)


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
        return scrape_metrics(self.metrics_port, "llm_recorder_")

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
