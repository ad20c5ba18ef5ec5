"""SIGTERM of a real `recorder proxy` while its database does not answer.

Traffic first, also at shutdown: with 40 streams open and the database hung
(a private PostgreSQL cluster whose processes are stopped with SIGSTOP: TCP
accepts, nothing replies) or locked (SQLite held by ``BEGIN EXCLUSIVE`` from
another process) or refusing (a forwarder that resets connections), SIGTERM
ends every client's stream within about 2 s, the
writer gets its bounded time, what it could not write goes to the spool, and
the process is gone within 8 s. Every request is in the database or the spool,
none twice in the database, and a next process, with the database healthy,
stores each exactly once.

The bounds asserted are the promises (docs/reliability.md), with room for a
loaded machine on the client side; they are not performance measurements.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
import sqlalchemy as sa

from recorder.simulate import Simulator, run_in_thread
from recorder.store import upgrade
from tests.kit.databases import spool_files, spooled_docs
from tests.kit.pgcluster import PgCluster
from tests.kit.proxy_faults import (
    Proxy,
    Store,
    assert_each_once,
    new_ids,
    pg_store,
    send,
    stream,
    wait_until,
)

__all__ = ["pg_store"]
pytestmark = pytest.mark.slow

EXIT_BOUND_S = 8.0  # the promise: the process is gone within 8 s
# The promise is 2 s; the test leaves room for a loaded machine (2 cores shared).
CLIENT_BOUND_S = 3.0


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with run_in_thread() as simulator:
        yield simulator


@contextlib.contextmanager
def sqlite_locked(path: Path) -> Iterator[None]:
    """Another process holds ``BEGIN EXCLUSIVE`` on the SQLite file inside the block."""
    code = (
        "import sqlite3, sys\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('BEGIN EXCLUSIVE')\n"
        "print('locked', flush=True)\n"
        "sys.stdin.read()\n"
        "c.execute('ROLLBACK')\n"
    )
    locker = subprocess.Popen(
        [sys.executable, "-c", code, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert locker.stdout is not None
        assert locker.stdout.readline().strip() == "locked"
        yield
    finally:
        assert locker.stdin is not None
        with contextlib.suppress(OSError):
            locker.stdin.close()
        try:
            locker.wait(10)
        except subprocess.TimeoutExpired:
            locker.kill()
            locker.wait()


def timed_stream(base: str, rid: str, faults: str, seen: set[str]) -> tuple[bool, float]:
    """A stream; whether it ended cleanly and when (monotonic) the client saw it end."""
    _, clean = stream(base, rid, faults, seen)
    return clean, time.monotonic()


def spooled_request_ids(spool: Path) -> list[str]:
    return [doc["request_id"] for doc in spooled_docs(spool)]


def shutdown_while_stuck(
    tmp_path: Path,
    sim: Simulator,
    db: str,
    spool: Path,
    stuck: Callable[[], contextlib.AbstractContextManager[None]],
    tag: str,
) -> tuple[list[str], Proxy, float, list[float]]:
    """10 streams recorded normally; 40 slow ones under way; the database stops
    answering; 10 more finish (the writer goes into the database with them); then
    SIGTERM. Returns every request id, the proxy, its exit time and how long after
    the signal each slow client saw its stream end (all measured inside ``stuck``)."""
    before, slow, during = new_ids(f"{tag}_b", 10), new_ids(f"{tag}_s", 40), new_ids(f"{tag}_d", 10)
    proxy = Proxy(tmp_path, sim, db, spool)
    try:
        send(proxy.base, sim, before)
        proxy.wait_metrics(lambda m: m["llm_recorder_records_written_total"] == 10, 20)
        with ThreadPoolExecutor(len(slow)) as pool, stuck():
            seen: set[str] = set()
            futures: dict[str, Future[tuple[bool, float]]] = {
                rid: pool.submit(timed_stream, proxy.base, rid, "delay=0.5", seen) for rid in slow
            }
            wait_until(lambda: len(seen) == len(slow), 30, "every slow stream under way")
            send(proxy.base, sim, during)
            # their records are finished (0.25 s) and handed to the writer (0.2 s)
            time.sleep(1.0)
            assert not any(f.done() for f in futures.values())
            exited: Future[float] = Future()
            t0 = time.monotonic()
            proxy.proc.send_signal(signal.SIGTERM)
            threading.Thread(
                target=lambda: (proxy.proc.wait(60), exited.set_result(time.monotonic())),
                daemon=True,
            ).start()
            time.sleep(1.5)
            # a new client is refused at once, not left waiting in the backlog
            with pytest.raises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", proxy.port), timeout=5).close()
            took = exited.result(timeout=60) - t0
            code = proxy.proc.returncode
            ends = []
            for rid, f in futures.items():
                clean, ended = f.result(timeout=60)
                assert not clean, rid  # cut by the shutdown
                ends.append(ended - t0)
    finally:
        proxy.kill()
    assert code == 0, proxy.output
    return before + slow + during, proxy, took, ends


def assert_bounded(proxy: Proxy, took: float, ends: list[float]) -> None:
    out = proxy.output
    # the figures behind docs/reliability.md (shown with pytest -s)
    print(f"\nshutdown: exit {took:.2f} s, clients ended {min(ends):.2f}-{max(ends):.2f} s")
    assert took < EXIT_BOUND_S, f"exit took {took:.1f} s\n{out}"
    assert max(ends) < CLIENT_BOUND_S, f"clients ended after {max(ends):.1f} s\n{out}"
    assert "60 records:" in out and " 0 dropped" in out, out
    assert "; 40 streams were still open and cut by the shutdown" in out, out


def assert_nothing_lost(stored: list[str], spooled: list[str], ids: list[str]) -> None:
    """Every request is in the database or the spool: nothing lost, nothing stored
    twice. (The spool's journal may still hold records the database took before it
    stopped answering; the next process's replay skips those, see the callers.)"""
    assert len(set(stored)) == len(stored), "a record stored twice"
    assert set(stored) | set(spooled) == set(ids), sorted(set(ids) - set(stored) - set(spooled))


def replay_healthy(tmp_path: Path, sim: Simulator, db: str, spool: Path, n: int) -> Proxy:
    """A next proxy on the same spool, database healthy: the spool is replayed."""
    proxy = Proxy(tmp_path, sim, db, spool)
    try:
        wait_until(lambda: not spool_files(spool), 30, f"the spool replayed\n{proxy.output}")
        proxy.wait_metrics(lambda m: m["llm_recorder_records_replayed_total"] >= n, 10)
        code, _ = proxy.stop()
    finally:
        proxy.kill()
    assert code == 0, proxy.output
    return proxy


def rows(url: str) -> list[dict[str, str]]:
    """Every stored record's id and request id."""
    eng = sa.create_engine(url)
    try:
        with eng.connect() as conn:
            result = conn.execute(sa.text("SELECT id, request_id FROM streams"))
            return [dict(r) for r in result.mappings()]
    finally:
        eng.dispose()


def test_sigterm_with_postgresql_hung(
    tmp_path: Path, sim: Simulator, pg_cluster: PgCluster
) -> None:
    """PostgreSQL's processes are stopped (SIGSTOP) with 40 streams open: the
    clients are released at once and the proxy exits within the bound; nothing
    is lost, and the next process stores every request once."""
    upgrade(pg_cluster.url)
    spool = tmp_path / "spool"

    @contextlib.contextmanager
    def hung() -> Iterator[None]:
        pg_cluster.freeze()
        try:
            yield
        finally:
            pg_cluster.thaw()

    ids, proxy, took, ends = shutdown_while_stuck(
        tmp_path, sim, pg_cluster.url, spool, hung, "pghung"
    )
    assert_bounded(proxy, took, ends)
    assert "did not finish in time; spooling what is left" in proxy.output, proxy.output
    stored = [r["request_id"] for r in rows(pg_cluster.url)]
    spooled = spooled_request_ids(spool)
    assert_nothing_lost(stored, spooled, ids)
    assert spooled, "the hung database took everything?"
    replay_healthy(tmp_path, sim, pg_cluster.url, spool, 1)
    assert_each_once(rows(pg_cluster.url), ids)


def test_sigterm_with_sqlite_locked_by_another_process(
    tmp_path: Path, sim: Simulator, sqlite_template: Path
) -> None:
    """SQLite held by BEGIN EXCLUSIVE from another process: the same bounds."""
    path = tmp_path / "recorder.db"
    shutil.copyfile(sqlite_template, path)
    url = f"sqlite:///{path}"
    spool = tmp_path / "spool"
    ids, proxy, took, ends = shutdown_while_stuck(
        tmp_path, sim, url, spool, lambda: sqlite_locked(path), "sqlocked"
    )
    assert_bounded(proxy, took, ends)
    stored, spooled = [r["request_id"] for r in rows(url)], spooled_request_ids(spool)
    assert_nothing_lost(stored, spooled, ids)
    assert spooled, "the locked database took everything?"
    replay_healthy(tmp_path, sim, url, spool, 1)
    assert_each_once(rows(url), ids)


def test_sigterm_with_postgresql_refusing(tmp_path: Path, sim: Simulator, pg_store: Store) -> None:
    """PostgreSQL refusing connections (a forwarder that resets them): the same bounds."""
    spool = tmp_path / "spool"
    ids, proxy, took, ends = shutdown_while_stuck(
        tmp_path, sim, pg_store.proxy_url, spool, pg_store.down, "pgrefused"
    )
    assert_bounded(proxy, took, ends)
    stored = [r["request_id"] for r in pg_store.rows()]
    assert_nothing_lost(stored, spooled_request_ids(spool), ids)
    replay_healthy(tmp_path, sim, pg_store.proxy_url, spool, 1)
    assert_each_once(pg_store.rows(), ids)
