"""DatabaseLink: the backoff of an outage, the schema checked once, the store id."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event
from sqlalchemy.exc import OperationalError

from recorder.store.engine import make_engine
from recorder.store.link import LOCK_WAIT_S, DatabaseLink, Unavailable
from recorder.store.migrate import is_current
from tests.kit.databases import kind_of, unreachable_url


class Clock:
    """A clock the test moves."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def down(msg: str = "database is locked") -> OperationalError:
    return OperationalError("INSERT ...", {}, Exception(msg))


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def link(db_url: str, clock: Clock) -> Iterator[DatabaseLink]:
    lk = DatabaseLink(db_url, retry_min=0.5, retry_max=3.0, clock=clock)
    yield lk
    lk.dispose()


def statements(engine: Engine) -> list[str]:
    """The SQL ``engine`` runs from now on."""
    seen: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def _seen(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    return seen


def test_available_until_a_write_says_otherwise(link: DatabaseLink, clock: Clock) -> None:
    assert link.available and link.may_try() and link.last_error is None
    clock.t += 3600
    assert link.may_try()  # no outage, no backoff: whatever the time


def test_an_outage_backs_off_doubling_up_to_the_maximum(link: DatabaseLink, clock: Clock) -> None:
    waits = []
    for _ in range(6):
        link.outage(down())
        waits.append(link.retry_at - clock.t)
        assert not link.available
        assert not link.may_try()  # not before the backoff is over
        clock.t = link.retry_at - 0.01
        assert not link.may_try()
        clock.t = link.retry_at
        assert link.may_try()  # one attempt per backoff
    assert waits == [0.5, 1.0, 2.0, 3.0, 3.0, 3.0]
    assert link.last_error == "Exception: database is locked"


def test_a_write_that_succeeds_ends_the_outage_and_resets_the_backoff(
    link: DatabaseLink, clock: Clock
) -> None:
    link.outage(down())
    link.outage(down())
    assert link.retry_at - clock.t == 1.0
    before = link.resumed
    link.succeeded()
    assert link.available and link.may_try()
    assert link.resumed == before + 1  # the replayer looks for orphaned spools now
    link.succeeded()
    assert link.resumed == before + 1  # no outage ended: nothing resumed
    link.outage(down("gone"))
    assert link.retry_at - clock.t == 0.5  # a new outage starts from retry_min
    assert link.last_error == "Exception: gone"


def test_the_schema_is_brought_to_head_once(empty_db_url: str, clock: Clock) -> None:
    engine = make_engine(empty_db_url)
    link = DatabaseLink(empty_db_url, engine=engine, clock=clock)
    try:
        assert not link.schema_checked
        link.ensure_schema()
        assert link.schema_checked and is_current(engine)
        seen = statements(engine)
        link.ensure_schema()
        assert seen == []  # known current: not even a SELECT
    finally:
        link.dispose()
        engine.dispose()


def test_without_upgrade_the_schema_is_not_checked(empty_db_url: str) -> None:
    engine = make_engine(empty_db_url)
    link = DatabaseLink(empty_db_url, engine=engine, upgrade=False)
    try:
        seen = statements(engine)
        link.ensure_schema()
        assert link.schema_checked and seen == []
    finally:
        engine.dispose()


def test_a_schema_check_that_cannot_reach_the_database_is_an_outage(
    db_url: str, tmp_path: Path, clock: Clock
) -> None:
    link = DatabaseLink(unreachable_url(kind_of(db_url), tmp_path), retry_min=0.5, clock=clock)
    with pytest.raises(Unavailable):
        link.ensure_schema()
    assert not link.available and not link.schema_checked and link.last_error
    assert link.retry_at == clock.t + 0.5
    assert link.read_store_id() is None  # the same outage, backing off
    assert link.retry_at == clock.t + 1.0
    link.dispose()


def test_the_store_id_is_the_same_for_every_link(db_url: str) -> None:
    a = DatabaseLink(db_url)
    b = DatabaseLink(db_url)
    try:
        first = a.read_store_id()
        assert first is not None
        assert b.read_store_id() == first == a.read_store_id()
    finally:
        a.dispose()
        b.dispose()


def test_a_link_disposes_of_its_own_engine_only(db_url: str) -> None:
    engine = make_engine(db_url)
    shared = DatabaseLink(db_url, engine=engine)
    own = DatabaseLink(db_url)
    for lk in (shared, own):
        with lk.transaction() as conn:
            conn.exec_driver_sql("SELECT 1")
        assert lk.engine.pool.checkedin() == 1  # pooled for the next batch
        lk.dispose()
    assert engine.pool.checkedin() == 1  # the caller's engine, left as it was
    assert own.engine.pool.checkedin() == 0  # its own, closed
    engine.dispose()


def test_a_transaction_that_waited_on_a_lock_counts_as_resumed(
    link: DatabaseLink, clock: Clock
) -> None:
    """Whoever held the database may have died with records in its spool: a long
    wait is the others' cue to look (the replayer scans when ``resumed`` moves)."""
    before = link.resumed
    with link.transaction() as conn:
        conn.exec_driver_sql("SELECT 1")
        clock.t += LOCK_WAIT_S / 2
    assert link.resumed == before  # an ordinary transaction
    with link.transaction() as conn:
        conn.exec_driver_sql("SELECT 1")
        clock.t += LOCK_WAIT_S
    assert link.resumed == before + 1
