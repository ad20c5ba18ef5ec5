"""Databases for the tests, built by running the migrations.

Every test that takes ``db_url`` runs twice: on SQLite (a copy of a migrated
template file) and on PostgreSQL (a database cloned from a migrated template
database, created for this run on the server at 127.0.0.1:5432 and dropped
afterwards). ``empty_db_url`` is the same without the migrations.

PostgreSQL is reached as ``RECORDER_TEST_PG`` (default
``postgresql+psycopg://postgres@127.0.0.1:5432/test``). When nothing answers
there, its tests are skipped, except under CI (``CI`` set), where they fail.

tests/conftest.py registers the fixtures for the whole suite; the helpers
(``kind_of``, ``outage``, ``count_rows``, ``sqlite_stream_rows``, ``spool_files``,
…) are imported from here.
"""

from __future__ import annotations

import itertools
import os
import shutil
import sqlite3
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


def wait_for(cond: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll ``cond`` until it holds (the writer works on its own thread)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def sqlite_stream_rows(db: Path, want: int, timeout: float = 20.0) -> list[sqlite3.Row]:
    """The rows of a SQLite file's ``streams``, in order of start, once ``want`` of
    them are there (or the timeout passed: the writer's batches, bounded, never a
    measure); a file not written yet reads as none."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with sqlite3.connect(db) as conn:
                conn.row_factory = sqlite3.Row
                rows = conn.execute("select * from streams order by started_at, id").fetchall()
        except sqlite3.Error:
            rows = []
        if len(rows) >= want or time.monotonic() > deadline:
            return rows
        time.sleep(0.1)


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
