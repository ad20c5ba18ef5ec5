"""`recorder db upgrade` and `recorder db prune`."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from recorder.store.identity import default_spool_dir, store_key
from recorder.store.migrate import head_revision
from recorder.store.spool import record_line
from recorder.store.writer import SqlSink
from tests.kit.cli import Cli, parse
from tests.kit.databases import count_rows
from tests.kit.records import simple_record


def test_upgrade_creates_the_store(cli: Cli, empty_db_url: str) -> None:
    code, out, err = cli("db", "upgrade", "--db", empty_db_url)
    assert code == 0, err
    assert f"at revision {head_revision()}" in out
    assert count_rows(empty_db_url) == 0
    code, out, _ = cli("db", "upgrade", "--db", empty_db_url)  # again: nothing to do
    assert code == 0


def test_upgrade_makes_no_directory(cli: Cli, tmp_path: Path) -> None:
    """A typo in the path is one line, not a new tree of directories."""
    path = tmp_path / "new" / "dir" / "recorder.db"
    code, _, err = cli("db", "upgrade", "--db", f"sqlite:///{path}")
    assert code == 1
    assert err.splitlines() == [
        f"recorder db upgrade: sqlite:///{path}: cannot create the SQLite database {path}:"
        f" {path.parent} does not exist"
    ], err
    assert not (tmp_path / "new").exists()
    (tmp_path / "new" / "dir").mkdir(parents=True)
    code, _, err = cli("db", "upgrade", "--db", f"sqlite:///{path}")
    assert code == 0, err
    assert path.is_file()


def test_upgrade_hides_the_password(cli: Cli) -> None:
    code, _, err = cli("db", "upgrade", "--db", "postgresql://postgres:hunter2@127.0.0.1:1/x")
    assert code == 1
    assert "unreachable" in err and "hunter2" not in err


def test_upgrade_refuses_other_databases(cli: Cli) -> None:
    code, _, err = cli("db", "upgrade", "--db", "mysql://u@h/db")
    assert code == 2 and "unsupported" in err


def test_prune(cli: Cli, db_url: str, tmp_path: Path) -> None:
    sink = SqlSink(db_url, tmp_path / "spool")
    for day in ("2025-12-30", "2025-12-31", "2026-01-01", "2026-01-02"):
        sink.submit(simple_record(started_at=f"{day}T08:00:00.000Z"))
    sink.close()
    code, out, _ = cli("db", "prune", "--before", "2026-01-01", "--db", db_url, "--dry-run")
    assert code == 0 and out.startswith("2 stream(s)") and count_rows(db_url) == 4
    code, out, _ = cli("db", "prune", "--before", "2026-01-01", "--db", db_url)
    assert code == 0 and out.startswith("deleted 2 stream(s)")
    assert count_rows(db_url) == 2 and count_rows(db_url, "stream_gaps") == 2


def test_prune_bad_date(cli: Cli, db_url: str) -> None:
    code, _, err = cli("db", "prune", "--before", "soon", "--db", db_url)
    assert code == 2 and "not a time" in err


def test_prune_missing_database(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "absent.db"
    code, _, err = cli("db", "prune", "--before", "2026-01-01", "--db", f"sqlite:///{path}")
    assert code == 1 and "no database" in err and not path.exists()


def test_subcommand_is_required() -> None:
    with pytest.raises(SystemExit):
        parse("db")


def test_spool_lists_what_waits_by_store_and_adopts_an_older_recorders_files(
    cli: Cli,
    db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Files an older recorder left (no header: they name no store) are listed and
    never replayed on their own; `--adopt` gives them to a store, whose next
    writer replays them exactly once."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    old = tmp_path / "old"
    old.mkdir()
    records = [simple_record(i) for i in range(7)]
    legacy = old / "recorder-spool-1-2-0001.jsonl"
    legacy.write_bytes(b"".join(record_line(r) for r in records))
    code, out, err = cli("db", "spool", "--spool-dir", str(old), "--format", "json")
    assert code == 0, err
    (row,) = json.loads(out)
    assert row["records"] == 7 and row["files"] == 1 and row["store_id"] is None
    assert "no store named" in row["store"]

    code, out, err = cli("db", "spool", "--spool-dir", str(old), "--adopt", "--db", db_url)
    assert code == 0, err
    assert "adopted 1 file(s), 7 record(s)" in out
    assert not legacy.exists()
    home = default_spool_dir(db_url)
    code, out, _ = cli("db", "spool", "--db", db_url, "--format", "json")
    assert [(r["store"], r["records"]) for r in json.loads(out)] == [(store_key(db_url), 7)]

    sink = SqlSink(db_url, home)
    sink.flush(10)
    deadline = time.monotonic() + 30
    while count_rows(db_url) < 7 and time.monotonic() < deadline:
        time.sleep(0.05)
    sink.close()
    assert count_rows(db_url) == 7 and sink.stats()["replayed"] == 7


def test_spool_of_a_directory_that_is_not_there(cli: Cli, tmp_path: Path) -> None:
    code, _, err = cli("db", "spool", "--spool-dir", str(tmp_path / "none"))
    assert code == 1 and "no spool directory at" in err
