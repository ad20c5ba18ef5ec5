"""The record's public face: field names and order as docs/record.md lists them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from recorder.core.record import (
    FIELDS,
    INTERRUPTED_OUTCOMES,
    OUTCOMES,
    SOURCES,
    Gap,
    StreamRecord,
    combine_sources,
)
from tests.kit.records import DOCUMENTED_FIELDS

# the record's specification, in the repository
RECORD_MD = Path(__file__).resolve().parents[2] / "docs" / "record.md"


def parse_documented_fields(text: str, heading: str = "## A recorded stream") -> tuple[str, ...]:
    """Field names from the first column of the first table under ``heading``."""
    section = text.split(heading, 1)[1].split("\n## ", 1)[0]
    names: list[str] = []
    in_table = False
    for line in section.splitlines():
        if not line.startswith("|"):
            if in_table:
                break
            continue
        in_table = True
        first = line.split("|")[1]
        names += re.findall(r"`([a-z][a-z0-9_]*)`", first)
    return tuple(names)


def documented_fields() -> tuple[str, ...]:
    return parse_documented_fields(RECORD_MD.read_text(encoding="utf-8"))


def test_parser_reads_the_copied_table() -> None:
    parsed = documented_fields()
    # The document may add fields, never drop or reorder the ones users script against.
    it = iter(parsed)
    assert all(name in it for name in DOCUMENTED_FIELDS)


def test_fields_cover_every_documented_field_in_order() -> None:
    documented = documented_fields()
    assert len(documented) >= len(DOCUMENTED_FIELDS)
    missing = [name for name in documented if name not in FIELDS]
    assert missing == []
    positions = [FIELDS.index(name) for name in documented]
    assert positions == sorted(positions), "FIELDS must keep docs/record.md's order"


def test_record_md_documents_every_field_in_order() -> None:
    """docs/record.md's two field tables, one after the other, are FIELDS."""
    text = RECORD_MD.read_text(encoding="utf-8")
    documented = parse_documented_fields(text) + parse_documented_fields(
        text, "## Fields beyond the contract table"
    )
    assert documented == FIELDS


def test_fields_are_unique_and_exclude_gaps() -> None:
    assert len(set(FIELDS)) == len(FIELDS)
    assert "gaps" not in FIELDS


def test_every_field_is_an_attribute_of_the_record() -> None:
    rec = StreamRecord()
    for name in FIELDS:
        getattr(rec, name)


def test_defaults_mean_unknown_not_zero() -> None:
    rec = StreamRecord()
    for name in (
        "http_status",
        "ttfb_ms",
        "ttft_ms",
        "duration_ms",
        "events",
        "keepalives",
        "stalls",
        "stall_ms",
        "input_tokens",
        "output_tokens",
        "cost_usd",
        "api_key_id",
    ):
        assert getattr(rec, name) is None, name
    assert rec.input_source == rec.output_source == rec.usage_source == "none"
    assert rec.outcome in OUTCOMES
    assert rec.interrupted is (rec.outcome in INTERRUPTED_OUTCOMES)


def test_to_dict_shape() -> None:
    rec = StreamRecord(
        id="r1",
        endpoint="messages",
        outcome="completed",
        interrupted=False,
        raw_usage={"input_tokens": 3},
        gaps=[Gap("stall", 10.0, 40000.0), Gap("silence", 0.0, 5.5)],
    )
    out = rec.to_dict()
    assert list(out) == list(FIELDS)
    assert out["id"] == "r1"
    assert out["endpoint"] == "messages"
    assert out["outcome"] == "completed"
    assert out["interrupted"] is False
    assert out["ttft_ms"] is None
    assert "gaps" not in out
    json.dumps(out)  # serialisable as is

    with_gaps = rec.to_dict(with_gaps=True)
    assert list(with_gaps) == [*FIELDS, "gaps"]
    assert with_gaps["gaps"] == [
        {"kind": "stall", "start_ms": 10.0, "length_ms": 40000.0},
        {"kind": "silence", "start_ms": 0.0, "length_ms": 5.5},
    ]
    json.dumps(with_gaps)


def test_to_dict_is_a_snapshot() -> None:
    rec = StreamRecord()
    out = rec.to_dict()
    out["outcome"] = "changed"
    assert rec.outcome != "changed"


def test_gap_to_dict_and_immutability() -> None:
    gap = Gap("keepalive", 1.5, 10000.0)
    assert gap.to_dict() == {"kind": "keepalive", "start_ms": 1.5, "length_ms": 10000.0}
    with pytest.raises(AttributeError):
        gap.kind = "stall"  # type: ignore[misc]


def test_outcomes_and_interrupted() -> None:
    assert set(OUTCOMES) == {
        "completed",
        "incomplete",
        "error",
        "upstream_disconnect",
        "client_disconnect",
        "truncated",
        "http_error",
    }
    assert (
        frozenset({"error", "upstream_disconnect", "client_disconnect", "truncated"})
        == INTERRUPTED_OUTCOMES
    )
    assert set(SOURCES) == {"reported", "estimated", "none"}


@pytest.mark.parametrize(
    ("input_source", "output_source", "expected"),
    [
        ("reported", "reported", "reported"),
        ("estimated", "estimated", "estimated"),
        ("none", "none", "none"),
        ("reported", "estimated", "mixed"),
        ("estimated", "reported", "mixed"),
        ("reported", "none", "mixed"),
        ("none", "reported", "mixed"),
        ("estimated", "none", "mixed"),
        ("none", "estimated", "mixed"),
    ],
)
def test_combine_sources(input_source: str, output_source: str, expected: str) -> None:
    assert combine_sources(input_source, output_source) == expected
