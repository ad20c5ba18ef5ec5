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

import errno
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
import pytest

from recorder.simulate import Simulator
from tests.kit.databases import spool_files
from tests.kit.proxy_faults import (
    Store,
    assert_each_once,
    assert_intact,
    new_ids,
    running_proxy,
    send,
    stream,
    wait_until,
)
from tests.kit.proxy_faults import pg_store as pg_store
from tests.kit.proxy_faults import sim as sim
from tests.kit.proxy_faults import store as store

pytestmark = pytest.mark.slow


# -- a TCP forwarder the test can cut ----------------------------------------------


# -- databases ----------------------------------------------------------------------


# -- the proxy ----------------------------------------------------------------------


# -- traffic ------------------------------------------------------------------------


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
