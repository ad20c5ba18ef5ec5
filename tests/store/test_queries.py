"""Reading: session filters, one stream with its gaps, retention."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, text

from recorder.core.keys import SECRET_ENV, fingerprint
from recorder.core.record import StreamRecord
from recorder.store.queries import (
    QueryError,
    SessionFilter,
    count_before,
    get_stream,
    list_sessions,
    parse_when,
    prune,
)
from recorder.store.secret import get_or_create_secret
from recorder.store.writer import SqlSink
from tests.kit.records import full_record, simple_record

NOW = datetime(2026, 2, 1, 12, 0, tzinfo=UTC)


def _write(url: str, records: list[StreamRecord], spool: object) -> None:
    sink = SqlSink(url, str(spool))
    for r in records:
        sink.submit(r)
    sink.close()


@pytest.fixture
def sample(db_url: str, engine: Engine, tmp_path: object) -> dict[str, StreamRecord]:
    secret = get_or_create_secret(engine)
    recs = {
        "old": simple_record(started_at="2025-12-31T23:59:59.000Z", model="gpt-4o"),
        "chat": simple_record(
            started_at="2026-01-15T10:00:00.000Z",
            model="gpt-4o-mini",
            api_key_id=fingerprint("sk-alpha-1111", secret),
        ),
        "cut": simple_record(
            started_at="2026-01-20T10:00:00.000Z",
            model="gpt-4o-mini-2024",
            outcome="upstream_disconnect",
            interrupted=True,
            api_key_id=fingerprint("sk-beta-2222", secret),
        ),
        "msg": full_record(started_at="2026-01-25T10:00:00.000Z", outcome="error"),
    }
    _write(db_url, list(recs.values()), tmp_path)
    return recs


def _ids(engine: Engine, **kw: object) -> list[str | None]:
    f = SessionFilter(**kw)  # type: ignore[arg-type]
    return [r.id for r in list_sessions(engine, f, environ={})]


def test_newest_first(engine: Engine, sample: dict[str, StreamRecord]) -> None:
    assert _ids(engine) == [sample[k].id for k in ("msg", "cut", "chat", "old")]


def test_time_window(engine: Engine, sample: dict[str, StreamRecord]) -> None:
    since = parse_when("2026-01-01")
    until = parse_when("2026-01-25T10:00:00Z")
    assert _ids(engine, since=since, until=until) == [sample["cut"].id, sample["chat"].id]


def test_endpoint_model_outcome(engine: Engine, sample: dict[str, StreamRecord]) -> None:
    assert _ids(engine, endpoint="messages") == [sample["msg"].id]
    assert _ids(engine, model="gpt-4o-mini") == [sample["chat"].id]
    assert _ids(engine, model="gpt-4o-mini*") == [sample["cut"].id, sample["chat"].id]
    assert _ids(engine, outcomes=["error", "upstream_disconnect"]) == [
        sample["msg"].id,
        sample["cut"].id,
    ]
    with pytest.raises(QueryError):
        _ids(engine, outcomes=["exploded"])


def test_key_in_every_form(engine: Engine, sample: dict[str, StreamRecord]) -> None:
    fp = sample["chat"].api_key_id or ""
    want = [sample["chat"].id]
    assert _ids(engine, key=fp) == want
    assert _ids(engine, key=fp.split(":")[1]) == want  # the hex part
    assert _ids(engine, key="1111") == want  # the last four
    assert _ids(engine, key="…1111") == want
    assert _ids(engine, key="sk-alpha-1111") == want  # the key itself
    assert _ids(engine, key="sk-gamma-3333") == []
    assert _ids(engine, key="11_1") == []  # "_" is a character of keys, not a wildcard
    assert _ids(engine, key="1%") == []


def test_raw_key_uses_the_secret_in_force(engine: Engine, sample: dict[str, StreamRecord]) -> None:
    f = SessionFilter(key="sk-alpha-1111")
    assert list_sessions(engine, f, environ={SECRET_ENV: "another"}) == []


def test_limit(engine: Engine, sample: dict[str, StreamRecord]) -> None:
    assert len(_ids(engine, limit=2)) == 2
    assert len(_ids(engine, limit=None)) == 4


def test_show_by_id_and_prefix(engine: Engine, sample: dict[str, StreamRecord]) -> None:
    rec = sample["msg"]
    assert get_stream(engine, rec.id or "") == rec
    assert get_stream(engine, (rec.id or "")[:30]).id == rec.id
    with pytest.raises(QueryError, match="no stream"):
        get_stream(engine, "ffffffff-0000")
    with pytest.raises(QueryError, match="no stream"):
        get_stream(engine, (rec.id or "")[:3])  # too short to be taken as a prefix


def test_ambiguous_prefix(engine: Engine, db_url: str, tmp_path: object) -> None:
    a = simple_record(id="abcd0000-0000-7000-8000-000000000001")
    b = simple_record(id="abcd0000-0000-7000-8000-000000000002")
    _write(db_url, [a, b], tmp_path)
    with pytest.raises(QueryError, match="several"):
        get_stream(engine, "abcd0000")
    assert get_stream(engine, "abcd0000-0000-7000-8000-000000000002").id == b.id


def test_prune(engine: Engine, sample: dict[str, StreamRecord]) -> None:
    before = parse_when("2026-01-20")
    assert count_before(engine, before) == 2
    assert prune(engine, before, chunk=1) == 2
    assert _ids(engine) == [sample["msg"].id, sample["cut"].id]
    with engine.connect() as conn:
        orphans = conn.execute(
            text("SELECT count(*) FROM stream_gaps WHERE stream_id NOT IN (SELECT id FROM streams)")
        ).scalar()
    assert orphans == 0
    assert prune(engine, before) == 0


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("2026-01-31", datetime(2026, 1, 31, tzinfo=UTC)),
        ("2026-01-31T12:30", datetime(2026, 1, 31, 12, 30, tzinfo=UTC)),
        ("2026-01-31T12:30:00Z", datetime(2026, 1, 31, 12, 30, tzinfo=UTC)),
        ("2026-01-31T14:30:00+02:00", datetime(2026, 1, 31, 12, 30, tzinfo=UTC)),
        ("12h", NOW - timedelta(hours=12)),
        ("90m", NOW - timedelta(minutes=90)),
        ("7d", NOW - timedelta(days=7)),
        ("2w", NOW - timedelta(weeks=2)),
    ],
)
def test_parse_when(given: str, expected: datetime) -> None:
    assert parse_when(given, now=NOW) == expected


def test_parse_when_rejects_nonsense() -> None:
    with pytest.raises(QueryError):
        parse_when("yesterday-ish")
