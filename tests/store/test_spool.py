"""The spool files: append-only lines, per-process names, flock ownership."""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from recorder.store.spool import (
    REJECTED_FILE,
    SPOOL_PREFIX,
    BadLine,
    Spool,
    append_rejected,
    claim,
    read_records,
    record_from_doc,
    record_line,
)
from tests.kit.records import full_record, simple_record


def test_lines_read_back_as_the_same_records(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    records = [full_record(), simple_record(1), simple_record(2)]
    seg = spool.append(b"".join(record_line(r) for r in records), len(records))
    assert seg.records == 3 and seg.dirty
    chunks = list(read_records(seg.path, batch=2))
    assert [len(c) for c in chunks] == [2, 1]
    assert [r for c in chunks for r in c] == records
    spool.close()


def test_files_are_named_per_process_and_private(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    seg = spool.append(record_line(simple_record()), 1)
    assert seg.path.name.startswith(f"{SPOOL_PREFIX}{os.getpid()}-")
    assert seg.path.suffix == ".jsonl"
    assert seg.path.stat().st_mode & 0o777 == 0o600
    spool.seal()
    seg2 = spool.append(record_line(simple_record()), 1)
    assert seg2.path != seg.path
    spool.close()
    assert seg.path.exists() and seg2.path.exists()  # records in them: kept


def test_empty_files_are_removed_on_close(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    with spool.lock:
        seg = spool._open()
    spool.close()
    assert not seg.path.exists()


def test_an_owned_file_cannot_be_claimed(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    seg = spool.append(record_line(simple_record()), 1)
    assert claim(seg.path) is None  # held (flock is per open file, even in-process)
    assert spool.claim_orphans(exclude=set()) == ([], [])
    spool.close()
    taken = claim(seg.path)
    assert taken is not None
    assert claim(seg.path) is None  # now held by the claimer
    taken.release(remove=True)
    assert claim(seg.path) is None and not seg.path.exists()


def test_orphans_are_claimed_oldest_first(tmp_path: Path) -> None:
    for name in ("recorder-spool-9-2-0002.jsonl", "recorder-spool-9-1-0001.jsonl", "other.txt"):
        (tmp_path / name).write_bytes(record_line(simple_record()))
    spool = Spool(tmp_path)
    segs, _ = spool.claim_orphans(exclude=set())
    assert [s.path.name for s in segs] == [
        "recorder-spool-9-1-0001.jsonl",
        "recorder-spool-9-2-0002.jsonl",
    ]
    for s in segs:
        s.release(remove=False)


def test_torn_and_damaged_lines_are_reported(tmp_path: Path) -> None:
    path = tmp_path / "recorder-spool-1-1-0001.jsonl"
    good = simple_record()
    path.write_bytes(b"[1,2]\n" + b"{not json\n" + b"\n" + record_line(good) + b'{"id": "x"')
    items = [i for c in read_records(path, 100) for i in c]
    assert isinstance(items[0], BadLine) and items[0].lineno == 1
    assert isinstance(items[1], BadLine) and items[1].lineno == 2
    assert items[2] == good
    assert isinstance(items[3], BadLine) and "torn" in items[3].reason


def test_unknown_keys_are_ignored_missing_ones_default() -> None:
    rec = record_from_doc({"id": "abc", "outcome": "completed", "from_the_future": 1})
    assert rec.id == "abc" and rec.outcome == "completed" and rec.input_tokens is None


def test_rejected_records_are_kept_with_the_reason(tmp_path: Path) -> None:
    rec = simple_record()
    assert append_rejected(tmp_path, rec, "IntegrityError: NOT NULL")
    doc = orjson.loads((tmp_path / REJECTED_FILE).read_bytes())
    assert doc["id"] == rec.id and doc["rejected_because"] == "IntegrityError: NOT NULL"


def test_a_failed_write_retires_the_file(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    seg = spool.append(record_line(simple_record()), 1)
    os.close(seg.fd)  # the next write fails (EBADF)
    try:
        spool.append(record_line(simple_record()), 1)
    except OSError:
        pass
    else:
        raise AssertionError("expected OSError")
    assert seg.sealed and spool.current is None
    seg.fd = os.open(seg.path, os.O_RDONLY)  # so close() has something to close
    fresh = spool.append(record_line(simple_record()), 1)
    assert fresh.path != seg.path
    spool.close()
