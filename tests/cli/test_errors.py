"""What a user meets when the store cannot be read: every command that reads it
says so in one line on standard error, ``recorder COMMAND: message``, names the
database (never its password), prints no traceback, and exits with the
documented status: 2 for a ``--db`` that is no usable URL (a usage mistake), 1
when the database is missing, refuses, lacks the recorder's tables, is locked or
forbids this user; ``reconcile`` exits 2 for all of them (its 1 says that the
bill differs)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

import recorder
from recorder.cli.main import main
from recorder.core.errors import RecorderError
from tests.kit.databases import create_pg_db, drop_pg_db, outage, pg_url

EXPORT = str(
    Path(__file__).resolve().parents[1] / "fixtures/usage_exports/openai_usage_completions.csv"
)
# Every command that reads the store, by the name it says its errors under.
COMMANDS = {
    "sessions": ["sessions"],
    "show": ["show", "0000abcd"],
    "audit": ["audit"],
    "reprice": ["reprice", "--since", "2026-01-01"],
    "reconcile": ["reconcile", EXPORT, "--since", "2026-01-01", "--until", "2026-02-01"],
    "replay": ["replay", "--id", "0000abcd"],
    "prices missing": ["prices", "missing"],
    "db prune": ["db", "prune", "--before", "2026-01-01"],
    "db purge-bodies": ["db", "purge-bodies"],
}
PASSWORD = "s3cret-Pw"


def fails(capsys: pytest.CaptureFixture[str], name: str, db: str) -> tuple[int, str]:
    """Run ``name`` on ``db``; its exit status and the one line it said."""
    code = main([*COMMANDS[name], "--db", db])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and out == "", (out, err)
    lines = err.splitlines()
    assert len(lines) == 1 and err.endswith("\n"), err
    assert lines[0].startswith(f"recorder {name}: "), err
    return code, lines[0]


def status(name: str, code: int) -> int:
    return 2 if name == "reconcile" else code


@pytest.fixture(params=sorted(COMMANDS))
def name(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize(
    ("db", "says"),
    [
        ("mysql://user@host/db", "unsupported database 'mysql'"),
        ("recorder.db", "not a database URL: 'recorder.db' (for a SQLite file, write sqlite:///"),
    ],
)
def test_a_bad_db_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], name: str, db: str, says: str
) -> None:
    code, line = fails(capsys, name, db)
    assert code == 2 and says in line


def test_no_database_file_is_not_created(
    capsys: pytest.CaptureFixture[str], name: str, tmp_path: Path
) -> None:
    path = tmp_path / "absent.db"
    code, line = fails(capsys, name, f"sqlite:///{path}")
    assert code == status(name, 1)
    assert line.endswith(f"no database at {path} (run `recorder proxy` or `recorder db upgrade`)")
    assert not path.exists()


def test_a_database_that_refuses_the_connection(
    capsys: pytest.CaptureFixture[str], name: str
) -> None:
    code, line = fails(capsys, name, f"postgresql://recorder:{PASSWORD}@127.0.0.1:1/nowhere")
    assert code == status(name, 1)
    assert "cannot connect to postgresql+psycopg://recorder:***@127.0.0.1:1/nowhere: " in line
    assert PASSWORD not in line


def test_a_database_that_takes_no_connections(
    capsys: pytest.CaptureFixture[str], name: str, pg_admin: Engine, pg_template: str
) -> None:
    db = create_pg_db(pg_admin, pg_template)
    try:
        with outage(pg_url(db), pg_admin):
            code, line = fails(capsys, name, pg_url(db))
    finally:
        drop_pg_db(pg_admin, db)
    assert code == status(name, 1)
    assert f"cannot connect to postgresql+psycopg://postgres@127.0.0.1:5432/{db}: " in line
    assert "not currently accepting connections" in line


def test_an_unmigrated_database(
    capsys: pytest.CaptureFixture[str], name: str, empty_db_url: str
) -> None:
    if empty_db_url.startswith("sqlite:///"):  # the file exists, without tables
        Path(empty_db_url.removeprefix("sqlite:///")).write_bytes(b"")
    code, line = fails(capsys, name, empty_db_url)
    assert code == status(name, 1)
    assert line.endswith(" holds no recorder tables (run `recorder db upgrade`)")


def test_a_file_that_is_no_database(
    capsys: pytest.CaptureFixture[str], name: str, tmp_path: Path
) -> None:
    path = tmp_path / "notes.db"
    path.write_text("these are notes, not a SQLite database\n" * 100)
    code, line = fails(capsys, name, f"sqlite:///{path}")
    assert code == status(name, 1)
    assert line.endswith(f"cannot read sqlite:///{path}: file is not a database")


@pytest.fixture
def locked_sqlite(tmp_path: Path, sqlite_template: Path) -> Iterator[str]:
    """A migrated SQLite file another connection holds exclusively (its locking
    mode EXCLUSIVE: even a reader in WAL mode waits, then gives up)."""
    path = tmp_path / "recorder.db"
    path.write_bytes(sqlite_template.read_bytes())
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        holder.execute("PRAGMA locking_mode = EXCLUSIVE")
        holder.execute("BEGIN EXCLUSIVE")
        yield f"sqlite:///{path}"
        holder.execute("ROLLBACK")
    finally:
        holder.close()


@pytest.mark.slow  # each waits out the 5 s busy timeout
def test_a_locked_sqlite(capsys: pytest.CaptureFixture[str], name: str, locked_sqlite: str) -> None:
    code, line = fails(capsys, name, locked_sqlite)
    assert code == status(name, 1)
    assert line.endswith(f"{locked_sqlite} is locked by another process (database is locked)")


@pytest.fixture
def stranger(pg_admin: Engine, pg_template: str) -> Iterator[str]:
    """A migrated database and the URL of a role that may log in but read nothing."""
    db = create_pg_db(pg_admin, pg_template)
    role = f"recorder_stranger_{uuid.uuid4().hex[:8]}"
    with pg_admin.connect() as conn:
        conn.execute(text(f"CREATE ROLE {role} LOGIN"))
    try:
        yield pg_url(db).replace("postgres@", f"{role}@", 1)
    finally:
        drop_pg_db(pg_admin, db)
        with pg_admin.connect() as conn:
            conn.execute(text(f"DROP ROLE IF EXISTS {role}"))


def test_a_database_that_forbids_the_user(
    capsys: pytest.CaptureFixture[str], name: str, stranger: str
) -> None:
    code, line = fails(capsys, name, stranger)
    assert code == status(name, 1)
    assert f"no permission to use {stranger}: " in line
    assert "permission denied" in line


@pytest.fixture
def migrated(tmp_path: Path, sqlite_template: Path) -> str:
    path = tmp_path / "recorder.db"
    path.write_bytes(sqlite_template.read_bytes())
    return f"sqlite:///{path}"


@pytest.mark.parametrize(
    ("argv", "code", "says"),
    [
        (["audit", "--by", "colour"], 2, "recorder audit: cannot group by 'colour': use "),
        (["sessions", "--since", "last tuesday"], 2, "recorder sessions: not a time: "),
        (
            ["sessions", "--format", "table", "--columns", "nope"],
            2,
            "recorder sessions: --columns: no column nope (there are: id, ",
        ),
        (
            ["reprice", "--since", "30d", "--prices", "{broken}"],
            2,
            "recorder reprice: {broken}: not a JSON document: ",
        ),
        (["replay", "--id", "0000abcd", "--prices", "{broken}"], 2, "recorder replay: --prices "),
        (["show", "0000abcd"], 1, "recorder show: no stream with id '0000abcd'"),
        (["prices", "show", "no-such-model"], 1, "recorder prices show: no price for "),
        (
            ["top", "--once", "--url", "http://127.0.0.1:1"],
            1,
            "recorder top: no proxy answers at http://127.0.0.1:1/streams",
        ),
    ],
)
def test_every_other_failure_is_one_line_too(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    migrated: str,
    argv: list[str],
    code: int,
    says: str,
) -> None:
    broken = tmp_path / "prices.json"
    broken.write_text("not json {")
    argv = [a.replace("{broken}", str(broken)) for a in argv]
    if argv[0] != "top" and argv[:2] != ["prices", "show"]:
        argv += ["--db", migrated]
    assert main(argv) == code
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert len(err.splitlines()) == 1 and err.startswith(says.replace("{broken}", str(broken)))


# Exceptions that never reach a user: the writer's signal that a batch waits for
# the database, and the simulator's own (it stands alone; `recorder simulate`
# says its FaultError in one line itself).
# caught where they are raised, never shown to a user: the store's outage (spooled
# through), an exchange's illegal move (the recorder's own bug, counted), a request
# body that cannot be read (said on its record)
INTERNAL = {
    "recorder.store.link.Unavailable",
    "recorder.proxy.lifecycle.IllegalMove",
    "recorder.proxy.state.RequestNotRead",
}
STANDALONE = "recorder.simulate."


def test_every_exception_of_the_recorder_derives_from_recorder_error() -> None:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(recorder.__path__, "recorder."):
        if info.name.startswith(STANDALONE):
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == module.__name__
            ):
                found[f"{module.__name__}.{name}"] = obj
    assert len(found) >= 20, sorted(found)  # the walk did find the tree
    strays = [n for n, c in found.items() if not issubclass(c, RecorderError) and n not in INTERNAL]
    assert strays == []
    assert all(c.exit_code in (1, 2) for c in found.values() if issubclass(c, RecorderError))
