"""Counters: each side's tally adds up in the totals; every drop is counted, and
the log says so without flooding."""

from __future__ import annotations

import logging

import pytest

from recorder.store.counters import LOG_EVERY, LOG_FIRST, Counters


def test_totals_add_both_sides_under_the_names_of_stats() -> None:
    c = Counters()
    c.caller.spooled += 3
    c.writer.spooled += 4
    c.writer.written += 10
    c.writer.replayed += 2
    c.writer.failed += 1
    c.caller.dropped += 1
    c.writer.bodies_written += 5
    c.writer.bodies_failed += 1
    assert c.totals() == {
        "written": 10,
        "spooled": 7,
        "replayed": 2,
        "dropped": 1,
        "failed": 1,
        "bodies_written": 5,
        "bodies_failed": 1,
    }


def test_every_drop_is_counted_on_its_side(caplog: pytest.LogCaptureFixture) -> None:
    c = Counters()
    c.drop(c.caller, 3, "queue full and spool unwritable", "a")
    c.drop(c.writer, 2, "database unavailable and spool unwritable", "b")
    assert (c.caller.dropped, c.writer.dropped) == (3, 2)
    assert c.totals()["dropped"] == 5
    # each line says the running total, both sides together
    assert "DROPPED 2 record(s) (e.g. b): database unavailable" in caplog.text
    assert "5 dropped so far" in caplog.text


def test_the_drop_log_says_the_first_ones_then_every_thousandth(
    caplog: pytest.LogCaptureFixture,
) -> None:
    c = Counters()
    with caplog.at_level(logging.ERROR, logger="recorder.store"):
        for _ in range(2 * LOG_EVERY + 5):
            c.drop(c.writer, 1, "disk full", None)
    lines = [r.getMessage() for r in caplog.records if "DROPPED" in r.getMessage()]
    assert c.writer.dropped == 2 * LOG_EVERY + 5  # every one counted
    assert len(lines) == LOG_FIRST + 2  # the first ten, then the 1000th and 2000th
    assert lines[-1].endswith(f"{2 * LOG_EVERY} dropped so far")
