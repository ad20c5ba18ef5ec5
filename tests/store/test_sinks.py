"""Sinks: JSON lines on a writer thread, fan-out, failures that are reported."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from recorder.core.record import Gap, StreamRecord
from recorder.store.sinks import FanoutSink, JsonlSink, MemorySink


def test_jsonl_appends_every_record_with_its_gaps(tmp_path: Path) -> None:
    sink = JsonlSink(tmp_path / "sub" / "r.jsonl")
    for i in range(50):
        sink.submit(StreamRecord(id=f"r{i}", gaps=[Gap("stall", 1.0, 2.0)]))
    sink.close()
    lines = (tmp_path / "sub" / "r.jsonl").read_bytes().splitlines()
    docs = [orjson.loads(line) for line in lines]
    assert [d["id"] for d in docs] == [f"r{i}" for i in range(50)]
    assert docs[0]["gaps"] == [{"kind": "stall", "start_ms": 1.0, "length_ms": 2.0}]
    assert sink.written == 50 and sink.failed == 0


def test_a_new_jsonl_file_is_private_whatever_the_umask(tmp_path: Path) -> None:
    """The lines are records: mode 0600, like the spool and the database."""
    old = os.umask(0o022)
    try:
        sink = JsonlSink(tmp_path / "r.jsonl")
    finally:
        os.umask(old)
    sink.submit(StreamRecord(id="r1"))
    sink.close()
    assert (tmp_path / "r.jsonl").stat().st_mode & 0o777 == 0o600


def test_an_unwritable_file_fails_at_once(tmp_path: Path) -> None:
    (tmp_path / "dir.jsonl").mkdir()
    with pytest.raises(OSError):
        JsonlSink(tmp_path / "dir.jsonl")


def test_fanout_closes_every_sink_even_when_one_fails() -> None:
    closed: list[str] = []

    class Broken(MemorySink):
        def close(self) -> None:
            closed.append("broken")
            raise RuntimeError("disk gone")

    class Fine(MemorySink):
        def close(self) -> None:
            closed.append("fine")

    fine = Fine()
    sink = FanoutSink(Broken(), fine)
    sink.submit(StreamRecord(id="x"))
    with pytest.raises(RuntimeError):
        sink.close()
    assert closed == ["broken", "fine"] and [r.id for r in fine.records] == ["x"]
