"""Reading the store: `recorder sessions` (filters), `recorder show`, retention,
and the captured bodies (`recorder replay --id`, `recorder db purge-bodies`).

Times given by a user are UTC unless they say otherwise: ``2026-01-01``,
``2026-01-01T12:00``, ``2026-01-01T12:00:00+02:00``, or an age such as ``90m``,
``12h``, ``7d``, ``2w`` (that long before now).

``--key`` matches a fingerprint in any of the forms a person has at hand: the
whole fingerprint (``…3456:0a1b2c3d4e5f``), its hex part, its last-four part
(``…3456`` or ``3456``), or the API key itself, fingerprinted here with the
database's secret (or ``RECORDER_KEY_SECRET``) and never stored or printed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import ColumnElement, Engine, delete, func, or_, select
from sqlalchemy.orm import Session, selectinload

from recorder.core.captured import PackedBody
from recorder.core.errors import RecorderError, UsageError
from recorder.core.keys import fingerprint
from recorder.core.record import OUTCOMES, StreamRecord
from recorder.core.short_id import dashed_end, dashed_start, short_id
from recorder.store.models import (
    STREAM_BODIES,
    STREAM_GAPS,
    STREAMS,
    Stream,
    record_from_row,
    to_record,
)
from recorder.store.secret import read_secret

_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_HEX12 = re.compile(r"^[0-9a-f]{12}$")
MIN_PREFIX = 4
CANDIDATES = 3  # the streams an ambiguous id names
MAX_CHAIN = 100  # the attempts `recorder show` follows each way


class QueryError(UsageError):
    """A filter or id the store cannot answer (printed to the user as is); a
    filter that cannot be read is a usage mistake (exit 2)."""


class NoSuchStream(QueryError):
    """No stream (or several) for an id, or no stored body for it: the store
    cannot give what was asked, which is no mistake in how it was asked (exit 1)."""

    exit_code = RecorderError.exit_code


def parse_when(text: str, now: datetime | None = None) -> datetime:
    """A user's time (ISO 8601 date or datetime, UTC unless an offset is given, or
    an age like ``12h``) as an aware UTC datetime. Raises QueryError."""
    m = _AGE.match(text)
    if m:
        now = now or datetime.now(UTC)
        return now - timedelta(seconds=float(m.group(1)) * _AGE_UNITS[m.group(2)])
    value = text.strip()
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        try:
            when = datetime.combine(date.fromisoformat(value), datetime.min.time())
        except ValueError:
            raise QueryError(
                f"not a time: {text!r} (use 2026-01-31, 2026-01-31T12:00Z or an age like 12h)"
            ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.astimezone(UTC)


@dataclass(slots=True)
class SessionFilter:
    """What `recorder sessions` selects (every field optional)."""

    since: datetime | None = None
    until: datetime | None = None
    endpoint: str | None = None
    model: str | None = None
    outcomes: Sequence[str] = ()
    key: str | None = None
    limit: int | None = 50
    # issue 32: only requests with these tags (name, value), only retries
    tags: Sequence[tuple[str, str]] = ()
    retries: bool = False


def key_condition(
    engine: Engine, key: str, environ: Mapping[str, str] | None = None
) -> ColumnElement[bool]:
    """The WHERE clause matching ``key`` in any of its accepted forms."""
    col = STREAMS.c.api_key_id
    k = key.strip()
    if ":" in k:
        return col == k
    if _HEX12.match(k):
        return col.like(f"%:{k}")
    short = k.removeprefix("…").removeprefix("...")
    if len(k) <= 4 or k.startswith(("…", "...")):
        # keys hold "_" (Anthropic's sk-ant-…): a LIKE wildcard unless escaped
        escaped = short.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        return col.like(f"…{escaped}:%", escape="\\")
    secret = read_secret(engine, environ)
    if secret is None:
        return col == ""  # no secret, so no fingerprint can match a raw key
    return col == fingerprint(k, secret)


def filter_conditions(
    engine: Engine, f: SessionFilter, environ: Mapping[str, str] | None
) -> list[ColumnElement[bool]]:
    """The WHERE conditions of a filter (shared by sessions, show, audit and reprice)."""
    c = STREAMS.c
    where: list[ColumnElement[bool]] = []
    if f.since is not None:
        where.append(c.started_at >= f.since)
    if f.until is not None:
        where.append(c.started_at < f.until)
    if f.endpoint:
        where.append(c.endpoint == f.endpoint)
    if f.model:
        if "*" in f.model:
            pattern = f.model.replace("%", r"\%").replace("_", r"\_").replace("*", "%")
            where.append(c.model.like(pattern, escape="\\"))
        else:
            where.append(c.model == f.model)
    if f.outcomes:
        bad = [o for o in f.outcomes if o not in OUTCOMES]
        if bad:
            raise QueryError(f"unknown outcome {bad[0]!r}: one of {', '.join(OUTCOMES)}")
        where.append(c.outcome.in_(list(f.outcomes)))
    if f.key:
        where.append(key_condition(engine, f.key, environ))
    for name, value in f.tags:
        where.append(c.tags[name].as_string() == value)
    if f.retries:
        where.append(c.retry_of.is_not(None))
    return where


def retry_chain(engine: Engine, record: StreamRecord) -> list[StreamRecord]:
    """The retry chain ``record`` belongs to, first attempt first: the attempts it
    retries (``retry_of``, back to the first), itself, and the retries of it
    (forward, by ``retry_of``); only itself when it is in no chain. Bounded: a
    chain is followed at most ``MAX_CHAIN`` steps each way."""
    back: list[StreamRecord] = []
    with engine.connect() as conn:
        previous = record.retry_of
        while previous and len(back) < MAX_CHAIN:
            row = conn.execute(select(STREAMS).where(STREAMS.c.id == previous)).first()
            if row is None:
                break
            back.append(record_from_row(row))
            previous = back[-1].retry_of
        forward: list[StreamRecord] = []
        current = record.id
        while current and len(forward) < MAX_CHAIN:
            stmt = select(STREAMS).where(STREAMS.c.retry_of == current).order_by(STREAMS.c.id)
            row = conn.execute(stmt.limit(1)).first()
            if row is None:
                break
            forward.append(record_from_row(row))
            current = forward[-1].id
    return [*reversed(back), record, *forward]


def list_sessions(
    engine: Engine, f: SessionFilter, *, environ: Mapping[str, str] | None = None
) -> list[StreamRecord]:
    """The streams matching ``f``, newest first (without their gaps)."""
    stmt = select(STREAMS).where(*filter_conditions(engine, f, environ))
    stmt = stmt.order_by(STREAMS.c.started_at.desc(), STREAMS.c.id.desc())
    if f.limit:
        stmt = stmt.limit(f.limit)
    with engine.connect() as conn:
        return [record_from_row(row) for row in conn.execute(stmt)]


def count_sessions(
    engine: Engine, f: SessionFilter, *, environ: Mapping[str, str] | None = None
) -> int:
    """How many streams match ``f`` (its limit aside)."""
    stmt = select(func.count()).select_from(STREAMS).where(*filter_conditions(engine, f, environ))
    with engine.connect() as conn:
        return int(conn.execute(stmt).scalar_one())


def get_stream(engine: Engine, ident: str) -> StreamRecord:
    """One stream with its gaps, by id or by a part of it (at least 4 characters)
    that only its id holds: the short form every screen shows (its last 12
    characters), its start or end with or without the dashes, any part between,
    or both ends as an older table printed them (``01a2321e…6f250f2``, also with
    ``...``). Raises NoSuchStream when there is none, or several (naming a few)."""
    ident = ident.strip()
    with Session(engine) as session:
        stream = session.get(Stream, ident, options=[selectinload(Stream.gaps)])
        if stream is None and len(ident.replace("…", "").replace("...", "")) >= MIN_PREFIX:
            stream = _by_part(session, ident)
        if stream is None:
            raise NoSuchStream(f"no stream with id {ident!r}")
        return to_record(stream)


def _like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", r"\%").replace("_", r"\_")


def _by_part(session: Session, ident: str) -> Stream | None:
    """The one stream whose id holds ``ident`` (see get_stream)."""
    part = ident.lower()  # ids are lower-case hex; PostgreSQL's LIKE minds the case
    for sep in ("…", "..."):
        if sep in part:
            head, _, tail = part.partition(sep)
            patterns = {_like(head) + "%" + _like(tail)}
            break
    else:
        patterns = {"%" + _like(part) + "%"}
        start, end = dashed_start(part), dashed_end(part)
        if start is not None and end is not None:  # hex typed without its dashes
            patterns |= {_like(start) + "%", "%" + _like(end)}
    found = session.scalars(
        select(Stream)
        .where(or_(*(Stream.id.like(p, escape="\\") for p in sorted(patterns))))
        .order_by(Stream.started_at.desc())
        .options(selectinload(Stream.gaps))
        .limit(CANDIDATES + 1)
    ).all()
    if len(found) > 1:
        named = ", ".join(
            f"{short_id(s.id)} ({s.started_at:%m-%d %H:%M:%S})" for s in found[:CANDIDATES]
        )
        more = ", …" if len(found) > CANDIDATES else ""
        raise NoSuchStream(
            f"id {ident!r} matches several streams: {named}{more}; give more of it,"
            " such as the short id the screens show"
        )
    return found[0] if found else None


def count_before(engine: Engine, before: datetime) -> int:
    """How many streams started before ``before``."""
    with engine.connect() as conn:
        n = conn.execute(
            select(func.count()).select_from(STREAMS).where(STREAMS.c.started_at < before)
        ).scalar_one()
    return int(n)


def prune(engine: Engine, before: datetime, *, chunk: int = 5000) -> int:
    """Delete the streams that started before ``before`` (and their gaps and
    bodies), a chunk per transaction so a large prune never holds the write lock
    for long. Returns how many were deleted."""
    return _delete_streams(engine, STREAMS.c.started_at < before, chunk)


def forget_key(engine: Engine, api_key_id: str, *, chunk: int = 5000) -> int:
    """Delete the streams sent with the key whose id (fingerprint) is
    ``api_key_id``, with their gaps and bodies (`recorder demo` starting fresh).
    Returns how many were deleted."""
    return _delete_streams(engine, STREAMS.c.api_key_id == api_key_id, chunk)


def _delete_streams(engine: Engine, where: ColumnElement[bool], chunk: int) -> int:
    total = 0
    opts = {"sqlite_begin": "IMMEDIATE"} if engine.dialect.name == "sqlite" else {}
    while True:
        with engine.connect() as raw:
            conn = raw.execution_options(**opts) if opts else raw
            with conn.begin():
                ids = conn.execute(select(STREAMS.c.id).where(where).limit(chunk)).scalars().all()
                if not ids:
                    return total
                conn.execute(delete(STREAM_GAPS).where(STREAM_GAPS.c.stream_id.in_(ids)))
                conn.execute(delete(STREAM_BODIES).where(STREAM_BODIES.c.stream_id.in_(ids)))
                conn.execute(delete(STREAMS).where(STREAMS.c.id.in_(ids)))
        total += len(ids)


def get_body(engine: Engine, ident: str) -> tuple[StreamRecord, PackedBody]:
    """A stream (by id or unique prefix, as ``get_stream``) and its captured body.
    Raises QueryError when there is no such stream, or it has no body."""
    record = get_stream(engine, ident)
    b = STREAM_BODIES.c
    with engine.connect() as conn:
        row = conn.execute(
            select(b.encoding, b.body, b.size, b.timings, b.truncated).where(
                b.stream_id == record.id
            )
        ).first()
    if row is None:
        raise NoSuchStream(
            f"stream {record.id} has no stored body (the proxy keeps bodies only with "
            "--capture-bodies, and `recorder db purge-bodies` removes them)"
        )
    body = PackedBody(
        encoding=row.encoding,
        data=bytes(row.body),
        timings=bytes(row.timings),
        size=int(row.size),
        truncated=bool(row.truncated),
    )
    return record, body


def _bodies_where(before: datetime | None) -> ColumnElement[bool] | None:
    if before is None:
        return None
    started = select(STREAMS.c.id).where(STREAMS.c.started_at < before)
    return STREAM_BODIES.c.stream_id.in_(started)


def count_bodies(engine: Engine, before: datetime | None = None) -> tuple[int, int]:
    """How many bodies are stored (of streams started before ``before``, if given),
    and their stored (compressed) bytes."""
    b = STREAM_BODIES.c
    stmt = select(
        func.count(), func.coalesce(func.sum(func.length(b.body) + func.length(b.timings)), 0)
    ).select_from(STREAM_BODIES)
    where = _bodies_where(before)
    if where is not None:
        stmt = stmt.where(where)
    with engine.connect() as conn:
        n, size = conn.execute(stmt).one()
    return int(n), int(size)


def purge_bodies(engine: Engine, before: datetime | None = None, *, chunk: int = 5000) -> int:
    """Delete the stored bodies (of streams started before ``before``, if given),
    keeping the streams, a chunk per transaction. Returns how many were deleted."""
    total = 0
    opts = {"sqlite_begin": "IMMEDIATE"} if engine.dialect.name == "sqlite" else {}
    b = STREAM_BODIES.c
    while True:
        with engine.connect() as raw:
            conn = raw.execution_options(**opts) if opts else raw
            with conn.begin():
                stmt = select(b.stream_id).limit(chunk)
                where = _bodies_where(before)
                if where is not None:
                    stmt = stmt.where(where)
                ids = conn.execute(stmt).scalars().all()
                if not ids:
                    return total
                conn.execute(delete(STREAM_BODIES).where(b.stream_id.in_(ids)))
        total += len(ids)
