"""Spooled records reach only their own store, through the commands users run.

The scenario of the report: a proxy whose PostgreSQL cannot be reached spools a
stream in ``sp2``; then `recorder demo --db sqlite:///sp2/demo.db` ran, said
nothing, and the spooled stream turned up in demo.db. Also: a proxy of another
store given the same ``--spool-dir`` on purpose, and `recorder db spool`.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from recorder.simulate import Simulator, run_in_thread
from tests.kit.processes import RECORDER, start_proxy
from tests.kit.proxy_faults import stream

pytestmark = pytest.mark.slow

NOWHERE = "postgresql+psycopg://postgres:hunter2@127.0.0.1:1/nowhere"
NOWHERE_KEY = "postgresql://postgres@127.0.0.1:1/nowhere"
SECRET = {"RECORDER_KEY_SECRET": "spool-isolation-test-secret"}


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with run_in_thread() as simulator:
        yield simulator


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> str:
    """Signal the proxy; the rest of its output."""
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    return out


def waiting_lines(spool: Path, rid: str) -> int:
    """Lines of the spool files in ``spool`` that hold request ``rid``."""
    return sum(
        line.count(rid.encode())
        for p in spool.glob("recorder-spool-*.jsonl")
        for line in p.read_bytes().splitlines()
    )


def rows_with(db: Path, rid: str) -> int:
    if not db.exists():
        return 0
    with sqlite3.connect(db) as conn:
        (n,) = conn.execute("SELECT count(*) FROM streams WHERE request_id = ?", (rid,)).fetchone()
    return int(n)


def test_spooled_records_reach_only_their_own_store(tmp_path: Path, sim: Simulator) -> None:
    sp2 = tmp_path / "sp2"
    rid = f"req_isolation_{os.getpid()}_{time.monotonic_ns()}"
    proc, port, _, _ = start_proxy(
        tmp_path, sim, "--db", NOWHERE, "--spool-dir", str(sp2), env=SECRET
    )
    _, clean = stream(f"http://127.0.0.1:{port}", rid)
    assert clean
    out = stop(proc)
    assert proc.returncode == 0, out
    assert "1 spooled" in out, out
    assert waiting_lines(sp2, rid) == 1

    # the demo, its database in that directory
    env = {**os.environ, "HOME": str(tmp_path)}
    env.pop("RECORDER_DB", None)
    demo = subprocess.run(
        [RECORDER, "demo", "--db", f"sqlite:///{sp2}/demo.db", "--format", "json"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert demo.returncode == 0, demo.stderr
    assert rows_with(sp2 / "demo.db", rid) == 0, demo.stdout + demo.stderr
    assert len(json.loads(demo.stdout)) >= 10  # the demo's own records
    assert waiting_lines(sp2, rid) == 1

    # a proxy of another store, told to use that very spool directory
    other = sp2 / "other.db"
    proc, port, _, banner = start_proxy(
        tmp_path, sim, "--db", f"sqlite:///{other}", "--spool-dir", str(sp2)
    )
    _, clean = stream(f"http://127.0.0.1:{port}", rid + "_own")
    assert clean
    time.sleep(2.0)  # it scans the directory at start
    out = banner + stop(proc)
    assert proc.returncode == 0, out
    assert rows_with(other, rid) == 0 and rows_with(other, rid + "_own") == 1
    assert waiting_lines(sp2, rid) == 1
    told = [line for line in out.splitlines() if "other stores" in line]
    assert len(told) == 1, out
    assert f"1 for {NOWHERE_KEY}" in told[0] and "hunter2" not in out

    # what waits there, by store
    listing = subprocess.run(
        [RECORDER, "db", "spool", "--spool-dir", str(sp2), "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listing.returncode == 0, listing.stderr
    rows = json.loads(listing.stdout)
    assert [(r["store"], r["records"], r["held_files"]) for r in rows] == [(NOWHERE_KEY, 1, 0)]
    assert "hunter2" not in listing.stdout
