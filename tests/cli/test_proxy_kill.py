"""kill -9 of a `recorder proxy` under load, at a random moment, whatever state
its database is in: up, locked (SQLite, ``BEGIN EXCLUSIVE`` from another
connection), refusing connections or hung (PostgreSQL behind a TCP forwarder
that resets, or swallows, everything).

The promise (docs/reliability.md): no record of a stream that ended more than
0.5 s before the kill is lost, and the next process on the same spool
directory writes each exactly once. The time a stream ended is taken at the
client, once it has read the last byte: the proxy saw the end earlier, so the
check is, if anything, stricter than the promise.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from recorder.simulate import Simulator
from tests.kit.databases import spool_files
from tests.kit.proxy_faults import (
    Forwarder,
    Store,
    migrated_store,
    running_proxy,
    sim,
    stream,
    wait_until,
)

__all__ = ["sim"]
pytestmark = pytest.mark.slow

WINDOW_S = 0.5  # the promise: what ended longer ago than this survives a kill -9
WORKERS = 6


class HangingForwarder(Forwarder):
    """A forwarder that can also hang: while ``hung``, bytes in either direction
    are swallowed (connections stay open, nothing answers), as a database whose
    processes are stopped."""

    hung = False

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                if not self.hung:
                    dst.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


@contextlib.contextmanager
def database(request: pytest.FixtureRequest, tmp_path: Path, kind: str) -> Iterator[Store]:
    """A migrated database for the test; PostgreSQL behind a ``HangingForwarder``."""
    yield from migrated_store(request, tmp_path, kind, HangingForwarder)


@contextlib.contextmanager
def state(store: Store, how: str) -> Iterator[None]:
    """The database in state ``how`` inside the block."""
    if how == "up":
        yield
    elif how in ("locked", "refusing"):  # SQLite: BEGIN EXCLUSIVE; PostgreSQL: resets
        with store.down():
            yield
    else:  # hung
        fwd = store.fwd
        assert isinstance(fwd, HangingForwarder)
        fwd.hung = True
        try:
            yield
        finally:
            fwd.hung = False


class Load:
    """``WORKERS`` clients sending Chat streams back to back; every stream that
    arrives whole is noted with the time its last byte was read."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.run = uuid.uuid4().hex[:6]
        self.done: list[tuple[str, float]] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._client, args=(w,), daemon=True) for w in range(WORKERS)
        ]
        for t in self._threads:
            t.start()

    def _client(self, w: int) -> None:
        i = 0
        while not self._stop.is_set():
            rid = f"req_kill_{self.run}_{w}_{i:05d}"
            i += 1
            try:
                _, clean = stream(self.base, rid)
            except Exception:  # the proxy is gone
                clean = False
            if clean:
                self.done.append((rid, time.monotonic()))
            elif self._stop.is_set():
                return

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)


@pytest.mark.parametrize(
    "case", ["sqlite-up", "sqlite-locked", "postgresql-refusing", "postgresql-hung"]
)
def test_kill_9_loses_no_record_that_ended_half_a_second_before(
    request: pytest.FixtureRequest, tmp_path: Path, sim: Simulator, case: str
) -> None:
    kind, how = case.split("-")
    seed = int.from_bytes(os.urandom(4))
    rng = random.Random(seed)
    spool = tmp_path / "spool"
    with database(request, tmp_path, kind) as store:
        with running_proxy(tmp_path, sim, store.proxy_url, spool) as first:
            load = Load(first.base)
            time.sleep(0.7)  # some records reach the database first
            with state(store, how):
                time.sleep(rng.uniform(0.8, 2.8))
                t_kill = time.monotonic()
                first.proc.send_signal(signal.SIGKILL)
                first.proc.wait(10)
                load.stop()
        assert load.done, first.output
        with running_proxy(tmp_path, sim, store.proxy_url, spool) as second:
            mine = f"-{second.proc.pid}-"
            wait_until(
                lambda: all(mine in p.name for p in spool_files(spool)),
                60,
                "the dead proxy's spool files replayed",
            )
            code, _ = second.stop()
        assert code == 0, second.output
        rows = store.rows()
    request_ids = [r["request_id"] for r in rows]
    stored = set(request_ids)
    lost = [(rid, t_kill - t) for rid, t in load.done if rid not in stored]
    late = [(rid, age) for rid, age in lost if age > WINDOW_S]
    print(
        f"\n{case} (seed {seed}): {len(load.done)} streams completed, the last"
        f" {t_kill - load.done[-1][1]:.3f} s before the kill; {len(lost)} lost, of which"
        f" {len(late)} ended more than {WINDOW_S} s before it; the oldest lost ended"
        f" {max((a for _, a in lost), default=0.0):.3f} s before"
    )
    assert len(request_ids) == len(stored), "a record written twice"
    assert not late, (seed, late[:5], second.output)
