"""Record ids are UUIDv7: unique and ordered by creation time."""

from __future__ import annotations

import time
import uuid

from recorder.proxy.ids import new_record_id


def test_ids_are_uuid7_unique_and_time_ordered() -> None:
    ids = []
    for _ in range(5):
        ids.append(new_record_id())
        time.sleep(0.002)
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    parsed = uuid.UUID(ids[0])
    assert parsed.version == 7 and parsed.variant == uuid.RFC_4122
