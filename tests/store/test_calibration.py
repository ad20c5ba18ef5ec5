"""A restarted proxy keeps its estimator's calibration: the stored streams hold it."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import update

from recorder.core.billing import fill_usage
from recorder.core.estimate import Calibration, Estimator
from recorder.core.model_families import PROFILES
from recorder.core.record import StreamRecord
from recorder.store.calibration import warm_from
from recorder.store.engine import make_engine
from recorder.store.models import STREAMS, parse_started_at
from recorder.store.writer import SqlSink
from tests.kit.databases import unreachable_url
from tests.kit.records import simple_record


def claude_stream(i: int, ratio: float) -> StreamRecord:
    """A completed Claude stream of 2,000 ASCII characters that made 2000/ratio tokens."""
    return simple_record(
        i,
        endpoint="messages",
        provider="anthropic",
        model="claude-sonnet-4-5",
        output_tokens=round(2000 / ratio) + PROFILES["anthropic"].response_tokens,
        output_breakdown={"latin": 2000, "deltas": 40},
        input_breakdown=None,
    )


def cut_stream() -> StreamRecord:
    """A Claude stream cut after 900 ASCII characters, before its usage arrived."""
    return StreamRecord(
        endpoint="messages",
        model="claude-sonnet-4-5",
        outcome="upstream_disconnect",
        http_status=200,
        events=3,
        output_chars=900,
        output_breakdown={"latin": 900, "deltas": 3},
    )


def test_a_restart_keeps_what_the_estimator_learned(db_url: str, tmp_path: Path) -> None:
    sink = SqlSink(db_url, str(tmp_path / "spool"))
    for i in range(30):  # this model makes 2.5 characters a token, not the default 3.6
        sink.submit(claude_stream(i, 2.5))
    sink.submit(simple_record(99, usage_source="none", output_source="none"))
    sink.close()

    before = cut_stream()
    fill_usage(before, Estimator())
    assert before.estimate_method == "e3;output:chars/default"

    estimator = Estimator()  # a new process: nothing learned in memory
    assert warm_from(db_url, estimator) == 30
    assert estimator.calibration.ratio("claude-sonnet-4-5", "output", "latin") == 2.5
    after = cut_stream()
    fill_usage(after, estimator)
    assert after.estimate_method == "e3;output:chars/calibrated"
    assert after.output_tokens == 360 + PROFILES["anthropic"].response_tokens


def test_the_newest_streams_teach_and_an_unreadable_store_does_not_stop_a_start(
    db_url: str, tmp_path: Path
) -> None:
    sink = SqlSink(db_url, str(tmp_path / "spool"))
    for i in range(30):  # older: 4 characters a token; newer: 2
        sink.submit(claude_stream(i, 4.0 if i < 10 else 2.0))
    sink.close()
    estimator = Estimator()
    assert warm_from(db_url, estimator, limit=20) == 20
    assert estimator.calibration.ratio("claude-sonnet-4-5", "output", "latin") == 2.0
    kind = "sqlite" if db_url.startswith("sqlite") else "postgresql"
    assert warm_from(unreachable_url(kind, tmp_path), Estimator()) is None


def test_a_malformed_row_is_skipped_not_fatal(db_url: str, tmp_path: Path) -> None:
    sink = SqlSink(db_url, str(tmp_path / "spool"))
    for i in range(3):
        sink.submit(claude_stream(i, 2.5))
    sink.close()
    engine = make_engine(db_url)
    with engine.begin() as conn:  # someone edits a row by hand
        conn.execute(
            update(STREAMS)
            .where(STREAMS.c.started_at == parse_started_at("2026-02-01T00:00:01.000Z"))
            .values(output_breakdown=[1, 2])
        )
    engine.dispose()
    estimator = Estimator(Calibration(min_samples=2))
    assert warm_from(db_url, estimator) == 2
    assert estimator.calibration.ratio("claude-sonnet-4-5", "output", "latin") == 2.5
