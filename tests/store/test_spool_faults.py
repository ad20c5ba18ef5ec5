"""The spool's disk fills up while the database is away (in process).

The end-to-end version, a real ENOSPC on a full tmpfs under `recorder proxy`, is
tests/cli/test_proxy_faults.py. Here ``os.write`` on spool files fails the way
the kernel's does on a full disk, which needs no mount: at the first byte, or
part-way (a write that fills the disk returns short, the next one fails). The
promises: the log says which file and which errno; exactly the records of the
failed appends are counted as dropped (none of them comes back from a torn
line); a disk that stays full costs no new spool file per attempt; once there
is room again, records are spooled and replayed as usual.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from recorder.store import spool as spool_mod
from recorder.store.engine import make_engine
from recorder.store.spool import SPOOL_PREFIX
from recorder.store.writer import SqlSink
from tests.kit.databases import count_rows, ids_in_db, outage, spool_files, wait_for
from tests.kit.records import simple_record

_real_write = os.write


class Disk:
    """Spool writes fail with ENOSPC while ``full``; with ``room`` set, a write
    first gets that many bytes through (a short write), then the disk is full."""

    def __init__(self) -> None:
        self.full = False
        self.room: int | None = None
        self.refused = 0

    def write(self, fd: int, data: bytes | memoryview) -> int:
        if not self._is_spool(fd):
            return _real_write(fd, data)
        if self.room is not None:
            n, self.room, self.full = self.room, None, True
            return _real_write(fd, bytes(data[:n]))
        if self.full:
            self.refused += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return _real_write(fd, data)

    @staticmethod
    def _is_spool(fd: int) -> bool:
        try:
            return SPOOL_PREFIX in os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return False


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Disk:
    d = Disk()
    monkeypatch.setattr(spool_mod.os, "write", d.write)
    return d


@pytest.fixture
def sqlite_db(sqlite_template: Path, tmp_path: Path) -> str:
    path = tmp_path / "recorder.db"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


@pytest.fixture
def quick_engine(sqlite_db: str) -> Iterator[Engine]:
    """Gives up on a locked database after 50 ms (instead of 5 s)."""
    engine = make_engine(sqlite_db, sqlite_busy_timeout_ms=50)
    yield engine
    engine.dispose()


def _sink(db: str, spool: Path, engine: Engine) -> SqlSink:
    return SqlSink(
        db, spool, engine=engine, batch_size=10, flush_interval=0.02, retry_min=0.05, retry_max=0.2
    )


def test_a_full_disk_drops_loudly_without_a_file_per_attempt(
    sqlite_db: str,
    quick_engine: Engine,
    tmp_path: Path,
    disk: Disk,
    caplog: pytest.LogCaptureFixture,
) -> None:
    spool = tmp_path / "spool"
    sink = _sink(sqlite_db, spool, quick_engine)
    dropped = [simple_record(i) for i in range(50)]
    kept = [simple_record(i) for i in range(30)]
    with outage(sqlite_db), caplog.at_level(logging.ERROR, logger="recorder.store"):
        disk.full = True
        for k in range(0, 50, 10):  # five batches, five failed appends
            for r in dropped[k : k + 10]:
                sink.submit(r)
            assert sink.flush(10)
        stats = sink.stats()
        assert disk.refused >= 5
        assert stats["dropped"] == 50 and stats["spooled"] == 0 and stats["written"] == 0
        # one (empty) spool file at most, not one per failed append
        assert len(spool_files(spool)) <= 1 and stats["spool_files"] <= 1
        assert "DROPPED 10 record(s)" in caplog.text
        assert "database unavailable and spool unwritable" in caplog.text
        assert f"No space left on device (ENOSPC) on {spool}/{SPOOL_PREFIX}" in caplog.text
        disk.full = False  # room again: the outage goes on, records are spooled
        for r in kept:
            sink.submit(r)
        assert sink.flush(10)
        assert sink.stats()["spooled"] == 30
    wait_for(lambda: count_rows(sqlite_db) == 30 and not spool_files(spool), 15)
    sink.close()
    stats = sink.stats()
    assert stats["replayed"] == 30 and stats["dropped"] == 50
    assert sorted(ids_in_db(sqlite_db)) == sorted(r.id for r in kept)


def test_a_disk_filling_up_mid_append_loses_exactly_that_append(
    sqlite_db: str, quick_engine: Engine, tmp_path: Path, disk: Disk
) -> None:
    """The first append fits; the second is cut short by the disk filling up. Its
    records are the dropped ones, the first append's are replayed, nothing is
    counted twice and no torn line is left to skip."""
    spool = tmp_path / "spool"
    sink = _sink(sqlite_db, spool, quick_engine)
    first = [simple_record(i) for i in range(10)]
    second = [simple_record(i) for i in range(10)]
    third = [simple_record(i) for i in range(10)]
    with outage(sqlite_db):
        for r in first:
            sink.submit(r)
        assert sink.flush(10)
        assert sink.stats()["spooled"] == 10
        disk.room = 700  # a line is a few hundred bytes: the disk fills inside the second
        for r in second:
            sink.submit(r)
        assert sink.flush(10)
        assert sink.stats()["dropped"] == 10
        (path,) = spool_files(spool)  # still the one file, holding whole lines only
        # the header line, then the first append's 10 lines
        assert path.read_bytes().endswith(b"\n") and path.read_bytes().count(b"\n") == 1 + 10
        disk.full = False
        for r in third:
            sink.submit(r)
        assert sink.flush(10)
        assert sink.stats()["spooled"] == 20
    wait_for(lambda: count_rows(sqlite_db) == 20 and not spool_files(spool), 15)
    sink.close()
    stats = sink.stats()
    assert stats["replayed"] == 20 and stats["dropped"] == 10 and stats["written"] == 0
    assert sorted(ids_in_db(sqlite_db)) == sorted(r.id for r in first + third)
