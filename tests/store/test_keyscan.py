"""No API key ever reaches the database file, the spool or the logs."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from recorder.core.keys import fingerprint
from recorder.store.engine import make_engine
from recorder.store.migrate import upgrade
from recorder.store.secret import key_secret
from recorder.store.writer import SqlSink
from tests.kit.cli import Cli
from tests.kit.databases import outage
from tests.kit.records import simple_record

KEY = "sk-live-SECRETKEY123456"
NEEDLES = (KEY.encode(), b"SECRETKEY", b"sk-live", KEY.encode("utf-16-le"))


def _scan(paths: list[Path]) -> list[str]:
    found = []
    for p in paths:
        data = p.read_bytes()
        found += [f"{p.name}: {n!r}" for n in NEEDLES if n in data]
    return found


def test_no_key_in_database_spool_or_logs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, cli: Cli
) -> None:
    db_path = tmp_path / "recorder.db"
    db = f"sqlite:///{db_path}"
    spool = tmp_path / "spool"
    caplog.set_level(logging.DEBUG)
    logging.getLogger("sqlalchemy.engine").setLevel(logging.INFO)  # SQL and parameters too
    upgrade(db)
    secret = key_secret(db, cache_dir=spool, environ={})
    fp = fingerprint(KEY, secret)
    assert fp.startswith("…3456:")  # recognisable, and nothing more of the key

    records = [simple_record(i, api_key_id=fp) for i in range(30)]
    # some go through the spool (database away), some straight in, one is refused
    engine = make_engine(db, sqlite_busy_timeout_ms=100)
    away = SqlSink(db, spool, engine=engine)
    with outage(db):
        for r in records[:10]:
            away.submit(r)
        away.close(timeout=10)
    engine.dispose()
    sink = SqlSink(db, spool, queue_size=5, batch_size=5)
    for r in records[10:]:
        sink.submit(r)
    sink.submit(simple_record(99, api_key_id=fp, outcome=None))
    sink.close()
    logging.getLogger("sqlalchemy.engine").setLevel(logging.WARNING)

    ran = cli("sessions", "--db", db, "--format", "json", "--key", KEY, "--limit", "0")
    assert ran.code == 0
    out = ran.out
    assert out.count(fp) == 30

    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert db_path in files
    assert (spool / "recorder-rejected.jsonl") in files
    assert _scan(files) == []
    for needle in NEEDLES:
        text = needle.decode("utf-8", "ignore")
        assert text not in caplog.text
        assert text not in out
    assert "SQL" in caplog.text or "INSERT" in caplog.text  # the logs were really captured
