"""`recorder sessions` and `recorder show`, on SQLite and PostgreSQL."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from recorder.cli import sessions, top
from recorder.cli.main import main
from recorder.core.record import FIELDS, Gap, StreamRecord
from recorder.core.short_id import short_id
from recorder.proxy.ids import new_record_start
from recorder.proxy.live_lines import stream_line, summary
from recorder.store.writer import SqlSink
from tests.kit.cli import Cli
from tests.kit.hostile import ESCAPED_MODEL, HOSTILE_MODEL, assert_inert
from tests.kit.processes import RECORDER
from tests.kit.records import full_record, simple_record
from tests.kit.terminal import Tmux


@pytest.fixture
def stored(db_url: str, tmp_path: Path) -> list[StreamRecord]:
    recs = [
        simple_record(1, started_at="2026-01-10T00:00:00.000Z"),
        simple_record(
            2,
            started_at="2026-01-11T00:00:00.000Z",
            outcome="truncated",
            interrupted=True,
            output_source="estimated",
            usage_source="mixed",
        ),
        full_record(started_at="2026-01-12T00:00:00.000Z"),
    ]
    sink = SqlSink(db_url, tmp_path / "spool")
    for r in recs:
        sink.submit(r)
    sink.close()
    return recs


def test_json_is_one_array_newest_first(cli: Cli, db_url: str, stored: list[StreamRecord]) -> None:
    code, out, _ = cli("sessions", "--db", db_url, "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert [d["id"] for d in doc] == [stored[2].id, stored[1].id, stored[0].id]
    assert list(doc[0]) == list(FIELDS)
    assert doc[0]["cost_usd"] == "0.123456789012"  # money is a decimal string
    assert doc[0] == stored[2].to_dict()


def test_filters(cli: Cli, db_url: str, stored: list[StreamRecord]) -> None:
    def ids(*extra: str) -> list[str]:
        code, out, err = cli("sessions", "--db", db_url, "--format", "json", *extra)
        assert code == 0, err
        return [d["id"] for d in json.loads(out)]

    assert ids("--since", "2026-01-11") == [stored[2].id, stored[1].id]
    assert ids("--until", "2026-01-11") == [stored[0].id]
    assert ids("--endpoint", "messages") == [stored[2].id]
    assert ids("--model", "gpt-4o-mini") == [stored[1].id, stored[0].id]
    assert ids("--outcome", "truncated,upstream_disconnect") == [stored[2].id, stored[1].id]
    assert ids("--outcome", "truncated", "--outcome", "completed") == [stored[1].id, stored[0].id]
    assert ids("--key", "…3456") == [stored[2].id]
    assert ids("--limit", "1") == [stored[2].id]


def test_csv_has_every_field(cli: Cli, db_url: str, stored: list[StreamRecord]) -> None:
    code, out, _ = cli("sessions", "--db", db_url, "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 3 and list(rows[0]) == list(FIELDS)
    assert rows[0]["cost_usd"] == "0.123456789012"
    assert json.loads(rows[0]["raw_usage"])["nested"] == {"a": [1, 2]}
    assert rows[1]["input_tokens"] == "100" and rows[1]["ttfb_ms"] == ""  # unknown: empty


def test_table(cli: Cli, db_url: str, stored: list[StreamRecord]) -> None:
    code, out, _ = cli("sessions", "--db", db_url, "--format", "table")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == list(sessions.TABLE_COLUMNS)
    assert len(lines) == 5  # header, three streams, the legend of "~"
    assert lines[1].split()[0] == short_id(stored[2].id)  # the id as every screen shows it
    assert "~890" in lines[1]  # estimated output tokens
    assert "01-12 00:00:00" in lines[1]  # month-day and time
    assert lines[4] == sessions.LEGEND


def test_empty_table_says_so(cli: Cli, db_url: str) -> None:
    code, _, err = cli("sessions", "--db", db_url, "--format", "table")
    assert code == 0 and "no streams" in err


def test_show_json_has_gaps(cli: Cli, db_url: str, stored: list[StreamRecord]) -> None:
    rec = stored[2]
    code, out, _ = cli("show", rec.id or "", "--db", db_url, "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc == rec.to_dict(with_gaps=True)
    assert doc["gaps"][0] == {"kind": "stall", "start_ms": 1000.0, "length_ms": 61000.25}


def test_show_by_prefix_and_table_timeline(
    cli: Cli, db_url: str, stored: list[StreamRecord]
) -> None:
    rec = stored[2]
    code, out, _ = cli("show", (rec.id or "")[:24], "--db", db_url, "--format", "table")
    assert code == 0
    assert rec.id is not None and rec.id in out
    lanes: dict[str, str] = {}
    for line in out.splitlines():
        if line.strip():
            lanes.setdefault(line.split()[0], line)  # the lanes come before the list of gaps
    assert "#" in lanes["stall"] and "~" in lanes["keepalive"] and "!" in lanes["silence"]
    assert lanes["stream"].rstrip().endswith("X")  # cut by the upstream
    assert "#" in lanes["stream"]  # its stalls fill most of it


def test_show_csv(cli: Cli, db_url: str, stored: list[StreamRecord]) -> None:
    code, out, _ = cli("show", stored[0].id or "", "--db", db_url, "--format", "csv")
    assert code == 0
    (row,) = csv.DictReader(io.StringIO(out))
    assert row["id"] == stored[0].id and json.loads(row["gaps"])[0]["kind"] == "silence"


def test_show_unknown_id(cli: Cli, db_url: str) -> None:
    code, _, err = cli("show", "nope-nope", "--db", db_url)
    assert code == 1 and "no stream" in err


def test_missing_database_is_not_created(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "absent.db"
    code, _, err = cli("sessions", "--db", f"sqlite:///{path}")
    assert code == 1 and "no database" in err
    assert not path.exists()


def test_unmigrated_database(cli: Cli, tmp_path: Path) -> None:
    path = tmp_path / "blank.db"
    path.write_bytes(b"")
    code, _, err = cli("sessions", "--db", f"sqlite:///{path}")
    assert code == 1 and "db upgrade" in err


def test_bad_time_is_a_usage_error(cli: Cli, db_url: str) -> None:
    code, _, err = cli("sessions", "--db", db_url, "--since", "last tuesday")
    assert code == 2 and "not a time" in err


def test_db_from_environment(
    cli: Cli,
    monkeypatch: pytest.MonkeyPatch,
    db_url: str,
    stored: list[StreamRecord],
) -> None:
    monkeypatch.setenv("RECORDER_DB", db_url)
    code, out, _ = cli("sessions", "--format", "json")
    assert code == 0 and len(json.loads(out)) == 3


def test_timeline_scales_to_the_duration() -> None:
    rec = simple_record(
        duration_ms=10_000.0,
        ttft_ms=1_000.0,
        outcome="completed",
        gaps=[Gap("stall", 5_000.0, 2_500.0)],
    )
    text = sessions.timeline(rec, width=20)
    lanes: dict[str, str] = {}
    for line in text.splitlines():
        if line.strip():
            lanes.setdefault(line.split()[0], line[10:])
    # the stall shows on the stream's own lane too: no output there
    assert lanes["stream"] == ".." + "=" * 8 + "#" * 5 + "=" * 4 + "|"
    assert lanes["stall"] == " " * 10 + "#" * 5
    assert "10.0 s" in text.splitlines()[0]


def test_timeline_without_timings() -> None:
    assert "no timings" in sessions.timeline(StreamRecord())


@pytest.mark.parametrize("command", [["sessions"], ["db", "upgrade"], ["proxy"]])
def test_an_unknown_option_shows_the_usage_of_its_command(
    capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:

    with pytest.raises(SystemExit) as exited:
        main([*command, "--bogus"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    name = "recorder " + " ".join(command)
    assert err.startswith(f"usage: {name} "), err
    assert err.rstrip().endswith(f"{name}: error: unrecognized arguments: --bogus"), err


@pytest.fixture
def hostile(db_url: str, tmp_path: Path) -> StreamRecord:
    """A stream whose model (the client's) and error message (the upstream's) were
    built to attack the terminal they are printed on."""
    rec = simple_record(1, model=HOSTILE_MODEL, error_message=HOSTILE_MODEL)
    sink = SqlSink(db_url, tmp_path / "spool")
    sink.submit(rec)
    sink.close()
    return rec


@pytest.mark.parametrize("columns", [None, "80"])
def test_a_hostile_value_is_escaped_in_the_table(
    cli: Cli,
    monkeypatch: pytest.MonkeyPatch,
    db_url: str,
    hostile: StreamRecord,
    columns: str | None,
) -> None:
    """Issue 34 §4: `recorder sessions` as a table, piped (every column whole) and
    fitted to 80 columns (the model shortened), shows the model escaped."""
    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    code, out, err = cli("sessions", "--db", db_url, "--format", "table")
    assert code == 0, err
    assert_inert(out, shortened=columns is not None)
    rows = [line for line in out.splitlines() if not line.startswith(("(", " "))]
    assert len(rows) == 2  # the header and the stream (then notes): no forged line


def test_a_hostile_value_is_escaped_by_show_and_exact_in_json_and_csv(
    cli: Cli, db_url: str, hostile: StreamRecord
) -> None:
    assert hostile.id is not None
    code, out, _ = cli("show", hostile.id, "--db", db_url, "--format", "table")
    assert code == 0
    assert_inert(out)
    (line,) = [x for x in out.splitlines() if x.startswith("error_message ")]
    assert line.split(maxsplit=1)[1] == ESCAPED_MODEL
    code, out, _ = cli("show", hostile.id, "--db", db_url, "--format", "json")
    assert code == 0 and "\x1b" not in out and "\r" not in out
    assert json.loads(out)["model"] == HOSTILE_MODEL
    code, out, _ = cli("sessions", "--db", db_url, "--format", "csv")
    assert code == 0
    (row,) = csv.DictReader(io.StringIO(out))
    assert row["model"] == HOSTILE_MODEL  # CSV is data: the value exact


@pytest.mark.slow
def test_a_hostile_value_never_acts_on_a_real_terminal(
    db_url: str, hostile: StreamRecord, tmux: Callable[..., Tmux]
) -> None:
    """`recorder sessions` on a terminal (tmux): the title is not set, nothing is
    cleared, the model shows escaped."""
    screen = tmux([RECORDER, "sessions", "--db", db_url], width=200, hold=True)
    text = screen.wait_for(lambda s: "completed" in s)
    assert_inert(text)
    assert "PWNED" not in screen.title()
    assert text.splitlines()[0].startswith("id "), text  # the header still on the first line


def test_csv_cells_a_spreadsheet_would_run_are_quoted_as_text(
    cli: Cli, db_url: str, tmp_path: Path
) -> None:
    """A model like ``=HYPERLINK(…)`` opens as text in a spreadsheet, not as a
    formula; numbers, negative ones too, are written as they are."""
    recs = [
        simple_record(1, model='=HYPERLINK("http://x","y")', error_message="@SUM(A1)"),
        simple_record(2, model="+cmd", error_message="-2+3"),
    ]
    sink = SqlSink(db_url, tmp_path / "spool")
    for r in recs:
        sink.submit(r)
    sink.close()
    code, out, _ = cli("sessions", "--db", db_url, "--format", "csv")
    assert code == 0
    rows = list(csv.DictReader(io.StringIO(out)))
    assert [r["model"] for r in rows] == ["'+cmd", '\'=HYPERLINK("http://x","y")']
    assert [r["error_message"] for r in rows] == ["'-2+3", "'@SUM(A1)"]
    assert all(r["input_tokens"] == "100" for r in rows)


def test_one_short_id_on_every_screen_tells_streams_of_one_millisecond_apart(
    cli: Cli, monkeypatch: pytest.MonkeyPatch, db_url: str, tmp_path: Path
) -> None:
    """Issue 33 §2: the console line, `sessions` and `top` show one short form of
    a stream's id, two streams started in the same millisecond get different ones,
    and `show` takes it."""
    monkeypatch.setenv("COLUMNS", "120")
    ms = 1_790_000_000_123
    recs = []
    for i in range(2):
        ident, started = new_record_start(ms)
        recs.append(simple_record(i, id=ident, started_at=started))
    a, b = recs
    assert a.id is not None and b.id is not None and a.id[:14] == b.id[:14]
    sink = SqlSink(db_url, tmp_path / "spool")
    for r in recs:
        sink.submit(r)
    sink.close()

    _, table_out, _ = cli("sessions", "--db", db_url, "--format", "table")
    console = Console(file=io.StringIO(), width=160)
    console.print(top.render({"finished": [summary(r) for r in recs]}, "http://x", "silence"))
    top_out = console.file.getvalue()  # type: ignore[attr-defined]
    for r in recs:
        shown = stream_line(summary(r)).split()[-1]  # the console line's last word
        assert shown == short_id(r.id)
        assert any(line.split()[:1] == [shown] for line in table_out.splitlines())
        assert any(line.split()[:1] == [shown] for line in top_out.splitlines())
        code, out, err = cli("show", shown, "--db", db_url, "--format", "json")
        assert code == 0, err
        assert json.loads(out)["id"] == r.id
    # their common start names both, so that one can be picked
    code, _, err = cli("show", a.id[:13], "--db", db_url)
    assert code == 1 and err.count("\n") == 1
    assert "matches several streams" in err
    assert short_id(a.id) in err and short_id(b.id) in err


def test_show_prints_the_providers_timing_beside_the_measured(
    cli: Cli, db_url: str, tmp_path: Path
) -> None:
    """A Bedrock record keeps what Bedrock says it took; `show` prints it beside the
    recorder's figures, with the difference, from the store (SQLite and PostgreSQL)."""
    rec = simple_record(
        9,
        started_at="2026-01-13T00:00:00.000Z",
        endpoint="converse",
        provider="aws.bedrock",
        transport="eventstream",
        duration_ms=900.0,
        provider_latency_ms=650.0,
    )
    sink = SqlSink(db_url, tmp_path / "spool")
    sink.submit(rec)
    sink.close()
    code, out, _ = cli("show", rec.id or "", "--db", db_url, "--format", "table")
    assert code == 0
    line = next(x for x in out.splitlines() if x.startswith("duration "))
    assert "provider" in line and "650 ms" in line and "900 ms" in line and "+250 ms" in line
    code, out, _ = cli("show", rec.id or "", "--db", db_url, "--format", "json")
    assert json.loads(out)["provider_latency_ms"] == 650.0
