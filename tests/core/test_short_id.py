"""recorder/core/short_id.py: one short form of a record id, told apart within a millisecond."""

from __future__ import annotations

from recorder.core.short_id import SHORT_ID_CHARS, dashed_end, dashed_start, short_id
from recorder.proxy.ids import new_record_start

ID = "01a23c96-a789-7334-9ebf-4606b6f250f2"


def test_ids_of_one_millisecond_have_different_short_forms() -> None:
    ids = [new_record_start(1_790_000_000_123)[0] for _ in range(1000)]
    assert len({i[:13] for i in ids}) == 1  # the same time: the start tells them not apart
    assert len({short_id(i) for i in ids}) == len(ids)
    assert all(len(short_id(i)) == SHORT_ID_CHARS and i.endswith(short_id(i)) for i in ids)
    assert all("-" not in short_id(i) for i in ids)


def test_short_id_of_none() -> None:
    assert short_id(None) == "-" and short_id("") == "-"


def test_hex_parts_as_the_start_or_end_of_a_uuid() -> None:
    assert dashed_start("01a23c96a789") == "01a23c96-a789"
    assert dashed_start("01A23C96-A789-73") == "01a23c96-a789-73"
    assert dashed_end("4606b6f250f2") == "4606b6f250f2"
    assert dashed_end("9ebf4606b6f250f2") == "9ebf-4606b6f250f2"
    assert dashed_end("349ebf4606b6f250f2") == "34-9ebf-4606b6f250f2"
    whole = ID.replace("-", "")
    assert dashed_start(whole) == ID and dashed_end(whole) == ID
    assert dashed_start("nope") is None and dashed_end("0" * 33) is None
