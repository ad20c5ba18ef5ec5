"""Record ids are UUIDv7: unique and ordered by creation time."""

from __future__ import annotations

import os
import time
import uuid
from datetime import UTC, datetime

from recorder.proxy.ids import new_record_id, new_record_start, started_at_text


def test_ids_are_uuid7_unique_and_time_ordered() -> None:
    ids = []
    for _ in range(5):
        ids.append(new_record_id())
        time.sleep(0.002)
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    parsed = uuid.UUID(ids[0])
    assert parsed.version == 7 and parsed.variant == uuid.RFC_4122


def test_ids_are_formatted_as_uuid_formats_them() -> None:
    for _ in range(300):  # past one batch of random bytes
        text = new_record_id()
        assert str(uuid.UUID(text)) == text


def test_start_stamp_is_the_datetime_text_of_the_same_instant() -> None:
    # every millisecond of a second, both sides of a second's edge, a leap day,
    # the epoch: what datetime's isoformat (milliseconds, "Z") gives
    instants = [0, 999, 1000, 1_709_164_799_999, 1_709_164_800_000, 1_798_761_599_999]
    instants += [1_764_600_000_000 + i for i in range(0, 2000, 7)]
    for ms in instants:
        want = (
            datetime.fromtimestamp(ms / 1000, UTC)
            .replace(microsecond=ms % 1000 * 1000)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z")
        )
        assert started_at_text(ms) == want


def test_record_start_reads_one_clock_for_id_and_stamp() -> None:
    before = datetime.now(UTC)
    rid, started_at = new_record_start()
    after = datetime.now(UTC)
    parsed = uuid.UUID(rid)
    assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
    id_ms = parsed.int >> 80
    stamp = datetime.fromisoformat(started_at.replace("Z", "+00:00"))
    assert started_at_text(id_ms) == started_at
    assert before.replace(microsecond=before.microsecond // 1000 * 1000) <= stamp <= after


def test_a_record_start_read_earlier_carries_that_instant() -> None:
    # requestheaders reads the clock; the record is made later from that reading
    ms = 1_764_600_000_123  # 2025-12-01T14:40:00.123Z
    rid, started_at = new_record_start(ms)
    assert uuid.UUID(rid).int >> 80 == ms and uuid.UUID(rid).version == 7
    assert started_at == "2025-12-01T14:40:00.123Z" == started_at_text(ms)
    assert new_record_start(ms)[0] != rid  # the same instant, another id


def test_a_forked_child_does_not_reuse_the_parents_random_bits() -> None:
    new_record_id()  # the parent holds a batch
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        os.write(write, new_record_id().encode())
        os._exit(0)
    os.close(write)
    child = os.read(read, 100).decode()
    os.close(read)
    os.waitpid(pid, 0)
    parent = new_record_id()
    # the next random bits of the parent's batch, and the child's, differ
    assert uuid.UUID(child).int & ((1 << 74) - 1) != uuid.UUID(parent).int & ((1 << 74) - 1)
