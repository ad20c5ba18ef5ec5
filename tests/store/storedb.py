"""Databases for the store's tests, built by running the migrations.

Every test that takes ``db_url`` runs twice: on SQLite (a copy of a migrated
template file) and on PostgreSQL (a database cloned from a migrated template
database, created for this run on the server at 127.0.0.1:5432 and dropped
afterwards). ``empty_db_url`` is the same without the migrations.

PostgreSQL is reached as ``RECORDER_TEST_PG`` (default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``). When nothing answers
there, its tests are skipped, except under CI (``CI`` set), where they fail.

Test modules outside tests/store import the fixtures from here (the store's
conftest does too).
"""

from __future__ import annotations

import itertools
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from recorder.core.record import Gap, StreamRecord
from recorder.proxy.ids import new_record_id
from recorder.store.engine import make_engine
from recorder.store.migrate import upgrade
from recorder.store.spool import SPOOL_PREFIX

PG_ADMIN_URL = os.environ.get(
    "RECORDER_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
RUN_TAG = uuid.uuid4().hex[:8]
_counter = itertools.count(1)


@pytest.fixture(scope="session")
def pg_admin() -> Iterator[Engine]:
    """An autocommit engine on the PostgreSQL server (for CREATE/DROP DATABASE)."""
    engine = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as e:
        engine.dispose()
        message = f"PostgreSQL not reachable at {PG_ADMIN_URL}: {e}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    yield engine
    engine.dispose()


def pg_url(name: str) -> str:
    """The URL of database ``name`` on the test server."""
    return make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)


def create_pg_db(admin: Engine, template: str | None = None) -> str:
    """A new, uniquely named database (cloned from ``template`` if given)."""
    name = f"recorder_test_{RUN_TAG}_{next(_counter)}"
    clause = f" TEMPLATE {template}" if template else ""
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}{clause}"))
    return name


def drop_pg_db(admin: Engine, name: str) -> None:
    """Drop a test database, ending whatever is still connected to it."""
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


@pytest.fixture(scope="session")
def pg_template(pg_admin: Engine) -> Iterator[str]:
    """A database brought to head by the migrations, to clone per test."""
    name = create_pg_db(pg_admin)
    try:
        upgrade(pg_url(name))
        yield name
    finally:
        drop_pg_db(pg_admin, name)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file brought to head by the migrations, to copy per test."""
    path = tmp_path_factory.mktemp("template") / "template.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A migrated, empty database of the parametrised kind."""
    if request.param == "sqlite":
        template: Path = request.getfixturevalue("sqlite_template")
        path = tmp_path / "recorder.db"
        shutil.copyfile(template, path)
        yield f"sqlite:///{path}"
        return
    admin: Engine = request.getfixturevalue("pg_admin")
    name = create_pg_db(admin, request.getfixturevalue("pg_template"))
    try:
        yield pg_url(name)
    finally:
        drop_pg_db(admin, name)


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database with no tables at all."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    admin: Engine = request.getfixturevalue("pg_admin")
    name = create_pg_db(admin)
    try:
        yield pg_url(name)
    finally:
        drop_pg_db(admin, name)


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    """An engine on ``db_url``."""
    eng = make_engine(db_url)
    yield eng
    eng.dispose()


def unreachable_url(kind: str, tmp_path: Path) -> str:
    """A database URL of ``kind`` that cannot be reached."""
    if kind == "postgresql":
        return "postgresql+psycopg://postgres@127.0.0.1:1/nowhere"
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the database's directory should be")
    return f"sqlite:///{blocker / 'recorder.db'}"


def kind_of(url: str) -> str:
    """``sqlite`` or ``postgresql``."""
    return "sqlite" if url.startswith("sqlite") else "postgresql"


@contextmanager
def outage(url: str, admin: Engine | None = None) -> Iterator[None]:
    """The database at ``url`` refuses writes inside the block: SQLite is locked by
    another connection; PostgreSQL refuses connections and its sessions are ended."""
    if kind_of(url) == "sqlite":
        locker = create_engine(url, isolation_level=None)  # the raw driver, no pragmas
        with locker.connect() as conn:
            conn.exec_driver_sql("BEGIN EXCLUSIVE")
            try:
                yield
            finally:
                conn.exec_driver_sql("ROLLBACK")
        locker.dispose()
        return
    assert admin is not None
    name = make_url(url).database
    eng = admin
    with eng.connect() as conn:
        conn.execute(text(f"ALTER DATABASE {name} ALLOW_CONNECTIONS false"))
        conn.execute(
            text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :d"),
            {"d": name},
        )
    try:
        yield
    finally:
        with eng.connect() as conn:
            conn.execute(text(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true"))


def count_rows(url: str, table: str = "streams") -> int:
    """Rows in ``table``."""
    eng = make_engine(url)
    try:
        with eng.connect() as conn:
            return int(conn.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())
    finally:
        eng.dispose()


def ids_in_db(url: str) -> list[str]:
    """Every stream id stored (with repeats, if there were any)."""
    eng = make_engine(url)
    try:
        with eng.connect() as conn:
            return [r[0] for r in conn.execute(text("SELECT id FROM streams"))]
    finally:
        eng.dispose()


def full_record(**overrides: Any) -> StreamRecord:
    """A record with every field set (nothing left at its default)."""
    values: dict[str, Any] = dict(
        id=new_record_id(),
        started_at="2026-03-04T05:06:07.089Z",
        endpoint="messages",
        provider="anthropic",
        upstream="api.anthropic.com:443",
        model="claude-sonnet-4-5",
        response_model="claude-sonnet-4-5-20250929",
        request_id="req_011CUZ",
        response_id="msg_01XYZ",
        project="wrkspc_01",
        streamed=True,
        http_status=200,
        outcome="upstream_disconnect",
        interrupted=True,
        finish_reason="max_tokens",
        error_type="overloaded_error",
        error_code="529",
        error_message="Overloaded: «ça déborde» 😅",
        ttfb_ms=212.5,
        first_event_ms=230.25,
        ttft_ms=731.125,
        duration_ms=95123.5,
        events=1234,
        keepalives=17,
        max_keepalive_gap_ms=15000.5,
        max_silence_ms=45000.0,
        max_output_gap_ms=61000.25,
        stalls=2,
        stall_ms=96000.75,
        output_chars=4567,
        tool_calls=3,
        input_tokens=12345,
        cache_read_tokens=10000,
        cache_write_tokens=345,
        output_tokens=890,
        reasoning_tokens=120,
        input_source="reported",
        output_source="estimated",
        usage_source="mixed",
        estimate_method="chars/4",
        cost_usd="0.123456789012",
        price_version="anthropic-2026-01",
        api_key_id="…3456:0a1b2c3d4e5f",
        organization="org-abc",
        include_usage=True,
        max_output_tokens=4096,
        parse_issues=2,
        oversized_events=1,
        partial_event_at_end=True,
        transport_error="connection reset by peer",
        recorder_error="ValueError: boom",
        raw_usage={"input_tokens": 1000, "cache_read_input_tokens": 10000, "nested": {"a": [1, 2]}},
        service_tier="priority",
        requested_tier="fast",
        cache_write_5m_tokens=300,
        cache_write_1h_tokens=45,
        server_tool_requests={"web_search": 2},
        output_breakdown={"text": 4000, "tool_arguments": 567},
        input_breakdown={"latin": 40000, "cjk": 1200},
        unpriced_reason="no 'priority' service-tier rate for claude-x",
        gaps=[
            Gap("stall", 1000.0, 61000.25),
            Gap("keepalive", 2000.0, 15000.5),
            Gap("silence", 3000.5, 45000.0),
            Gap("stall", 62000.0, 35000.5),
        ],
    )
    values.update(overrides)
    return StreamRecord(**values)


def simple_record(i: int = 0, **overrides: Any) -> StreamRecord:
    """A small completed record."""
    values: dict[str, Any] = dict(
        id=new_record_id(),
        started_at=f"2026-02-01T00:00:{i % 60:02d}.000Z",
        endpoint="chat.completions",
        provider="openai",
        upstream="api.openai.com:443",
        model="gpt-4o-mini",
        outcome="completed",
        interrupted=False,
        http_status=200,
        duration_ms=1500.0 + i,
        ttft_ms=300.0,
        input_tokens=100,
        output_tokens=20 + i,
        input_source="reported",
        output_source="reported",
        usage_source="reported",
        cost_usd="0.000027000000",
        gaps=[Gap("silence", 300.0, 800.0)],
    )
    values.update(overrides)
    return StreamRecord(**values)


def wait_for(cond: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll ``cond`` until it holds (the writer works on its own thread)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def spool_files(d: Path) -> list[Path]:
    """The spool files waiting in ``d``."""
    return sorted(d.glob(f"{SPOOL_PREFIX}*.jsonl")) if d.is_dir() else []


def spooled_docs(d: Path) -> list[dict[str, Any]]:
    """The records waiting in the spool files of ``d`` (each file's first line is a
    header naming its store, not a record)."""
    docs = [
        orjson.loads(line)
        for path in spool_files(d)
        for line in path.read_bytes().splitlines()
        if line.strip()
    ]
    return [doc for doc in docs if "recorder_spool" not in doc]
