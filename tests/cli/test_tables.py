"""Tables as a person at a terminal reads them: within the terminal's width at
80, 120 and 200 columns, the most useful columns first, the rest named in a
note, long values shortened in the middle (and a shortened id still works),
hidden rows and the ``~`` sign explained. JSON and CSV stay whole."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.cells import cell_len

from recorder.cli import sessions
from recorder.cli.render import Fit, shorten, table
from recorder.core.record import FIELDS, StreamRecord
from recorder.core.short_id import short_id
from recorder.store.writer import SqlSink
from tests.kit.cli import Cli
from tests.kit.records import simple_record

WIDTHS = (80, 100, 120, 200)
LONG_MODEL = "claude-sonnet-4-5-20250929-with-a-very-long-deployment-name"


@pytest.fixture
def many(db_url: str, tmp_path: Path) -> list[StreamRecord]:
    """57 streams (more than the default limit of 50), some with long names,
    estimated tokens, wide (CJK) text, stalls and the longest outcome."""
    recs = [
        simple_record(
            i,
            model=LONG_MODEL if i % 3 == 0 else "gpt-4o-mini",
            project="プロジェクト-音楽" if i % 5 == 0 else None,
            output_source="estimated" if i % 4 == 0 else "reported",
            outcome="upstream_disconnect" if i % 7 == 0 else "completed",
            stalls=i % 3,
            keepalives=i,
            api_key_id="…3456:0a1b2c3d4e5f",
        )
        for i in range(57)
    ]
    sink = SqlSink(db_url, tmp_path / "spool")
    for r in recs:
        sink.submit(r)
    sink.close()
    return recs


def widest(text: str) -> int:
    return max(cell_len(line) for line in text.splitlines())


@pytest.mark.parametrize("width", WIDTHS)
def test_sessions_fit_the_terminal(
    cli: Cli,
    monkeypatch: pytest.MonkeyPatch,
    db_url: str,
    many: list[StreamRecord],
    width: int,
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    code, out, err = cli("sessions", "--db", db_url, "--format", "table")
    assert code == 0, err
    assert widest(out) <= width
    lines = out.splitlines()
    header = lines[0].split()
    # the most useful columns come first, and a narrow terminal keeps them: how
    # each stream went and what it cost always (issue 33 §3), whole
    assert header == list(sessions.TABLE_COLUMNS[: len(header)])
    assert {"id", "model", "outcome", "stalls", "cost_usd", "ttft_ms"} <= set(header)
    if width >= 100:
        assert "output" in header
    at = lines[0].index("outcome")
    assert {line[at:].split()[0] for line in lines[1:51]} == {"completed", "upstream_disconnect"}
    rows = lines[1:51]
    assert len(rows) == 50 and all(not line.startswith("(") for line in rows)
    hidden = [c for c in sessions.TABLE_COLUMNS if c not in header]
    text = " ".join(" ".join(lines[51:]).split())  # the notes, unfolded
    if hidden:
        assert f"left out to fit {width} characters: {', '.join(hidden)}" in text
        assert "--wide or --columns" in text
    assert "50 of 57 streams shown" in text and "--limit" in text
    assert sessions.LEGEND in text
    # a long model is shortened in the middle, keeping its start and its end
    if width < 120:
        assert any(line.split()[1].startswith("claude-") and "…" in line for line in rows)


def test_the_short_id_in_a_table_shows_its_stream(
    cli: Cli,
    monkeypatch: pytest.MonkeyPatch,
    db_url: str,
    many: list[StreamRecord],
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    _, out, _ = cli("sessions", "--db", db_url, "--format", "table", "--limit", "0")
    shown = [line.split()[0] for line in out.splitlines()[1:58]]
    # ids of one millisecond share their start: the table shows their ends, whole
    assert shown == [short_id(r.id) for r in reversed(many)]
    assert len(set(shown)) == 57 and not any("…" in ident for ident in shown)
    by_id = {r.id: r for r in many}
    for ident in shown[:10]:
        code, out, err = cli("show", ident, "--db", db_url, "--format", "json")
        assert code == 0, err
        found = json.loads(out)["id"]
        assert found in by_id and found.endswith(ident)
    # the start works too, with its dashes or without; an ambiguous part says so
    whole = many[5].id or ""
    for part in (whole[:-4], whole.replace("-", "")[:26], whole.upper()):
        code, out, err = cli("show", part, "--db", db_url, "--format", "json")
        assert code == 0 and json.loads(out)["id"] == whole, (part, err)
    code, _, err = cli("show", whole[:8], "--db", db_url)
    assert code == 1 and "matches several streams" in err


@pytest.mark.parametrize("width", [80, 100, 120])
def test_an_audit_keeps_its_cost_at_any_width(
    cli: Cli,
    monkeypatch: pytest.MonkeyPatch,
    db_url: str,
    many: list[StreamRecord],
    width: int,
) -> None:
    """Issue 33 §3: at 120 columns `audit --by day,model` left out cost_usd."""
    monkeypatch.setenv("COLUMNS", str(width))
    code, out, err = cli("audit", "--db", db_url, "--format", "table", "--by", "day,model")
    assert code == 0, err
    assert widest(out) <= width
    header = out.splitlines()[0].split()
    assert header[:3] == ["day", "model", "requests"] and "cost_usd" in header
    (total,) = [line for line in out.splitlines() if line.startswith("TOTAL")]
    assert total.split()[header.index("cost_usd")] == "0.001539"  # whole, to the micro-dollar


@pytest.mark.parametrize("fmt", ["table", "json", "csv"])
def test_every_field_can_be_chosen_in_every_format(
    cli: Cli,
    monkeypatch: pytest.MonkeyPatch,
    db_url: str,
    many: list[StreamRecord],
    fmt: str,
) -> None:
    """Issue 33 §3: `--columns …,keepalives` said "no column keepalives", and
    `--columns` was ignored by JSON and CSV."""
    monkeypatch.setenv("COLUMNS", "80")
    chosen = "id,keepalives,model,key,error_type"
    code, out, err = cli("sessions", "--db", db_url, "--format", fmt, "--columns", chosen)
    assert code == 0, err
    newest = many[-1]
    if fmt == "table":
        lines = out.splitlines()
        assert lines[0].split() == chosen.split(",")
        assert lines[1].split()[:2] == [short_id(newest.id), str(newest.keepalives)]
        return
    names = ["id", "keepalives", "model", "api_key_id", "error_type"]  # key: its field
    if fmt == "json":
        doc = json.loads(out)
        assert [list(d) for d in doc] == [names] * 50
        assert doc[0] == {n: newest.to_dict()[n] for n in names}
    else:
        rows = list(csv.DictReader(io.StringIO(out)))
        assert len(rows) == 50 and list(rows[0]) == names
        assert rows[0]["keepalives"] == str(newest.keepalives) and rows[0]["id"] == newest.id
    code, out, err = cli("sessions", "--db", db_url, "--format", fmt, "--columns", "id,nope")
    assert code == 2 and out == "" and "no column nope" in err
    code, out, _ = cli("audit", "--db", db_url, "--format", fmt, "--columns", "day,cost_usd")
    assert code == 0
    if fmt == "json":
        assert [list(d) for d in json.loads(out)] == [["day", "cost_usd"]] * 3  # 2 models, TOTAL


def test_wide_and_columns_choose(
    capsys: pytest.CaptureFixture[str],
    cli: Cli,
    monkeypatch: pytest.MonkeyPatch,
    db_url: str,
    many: list[StreamRecord],
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli("sessions", "--db", db_url, "--format", "table", "--wide")
    assert code == 0
    assert out.splitlines()[0].split() == list(sessions.TABLE_COLUMNS)
    assert LONG_MODEL in out and short_id(many[-1].id) in out and "left out" not in out

    code, out, _ = cli("sessions", "--db", db_url, "--format", "table", "--columns", "model,key")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split() == ["model", "key"]
    assert widest(out) <= 80

    code, out, err = cli(
        "sessions", "--db", db_url, "--format", "table", "--columns", "model,nonsense"
    )
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "no column nonsense" in err


def test_json_and_csv_stay_whole(
    cli: Cli,
    monkeypatch: pytest.MonkeyPatch,
    db_url: str,
    many: list[StreamRecord],
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli("sessions", "--db", db_url, "--format", "json", "--limit", "0")
    assert code == 0
    doc = json.loads(out)
    assert len(doc) == 57 and list(doc[0]) == list(FIELDS)
    assert {d["model"] for d in doc} == {LONG_MODEL, "gpt-4o-mini"}
    code, out, _ = cli("sessions", "--db", db_url, "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(out)))
    assert len(rows) == 50 and list(rows[0]) == list(FIELDS)


def test_every_row_shown_needs_no_note(
    cli: Cli,
    monkeypatch: pytest.MonkeyPatch,
    db_url: str,
    many: list[StreamRecord],
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    code, out, _ = cli("sessions", "--db", db_url, "--format", "table", "--limit", "0")
    assert code == 0 and "streams shown" not in out
    ids = {short_id(r.id) for r in many}
    assert len([line for line in out.splitlines() if line.split()[0] in ids]) == 57


@pytest.mark.parametrize("width", WIDTHS)
def test_audit_fits_the_terminal(
    cli: Cli,
    monkeypatch: pytest.MonkeyPatch,
    db_url: str,
    many: list[StreamRecord],
    width: int,
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    code, out, err = cli("audit", "--db", db_url, "--format", "table", "--by", "model,key,day")
    assert code == 0, err
    assert widest(out) <= width
    assert out.splitlines()[0].split()[0] == "model"


def test_a_table_to_a_pipe_keeps_every_column(
    cli: Cli,
    monkeypatch: pytest.MonkeyPatch,
    db_url: str,
    many: list[StreamRecord],
) -> None:
    """Written to a file (no terminal, no COLUMNS), a table is not cut down."""
    monkeypatch.delenv("COLUMNS", raising=False)
    code, out, _ = cli("sessions", "--db", db_url, "--format", "table")
    assert code == 0
    assert out.splitlines()[0].split() == list(sessions.TABLE_COLUMNS)
    assert LONG_MODEL in out


def test_show_without_gaps_prints_no_empty_header(cli: Cli, db_url: str, tmp_path: Path) -> None:
    rec = simple_record(1, gaps=[])
    sink = SqlSink(db_url, tmp_path / "spool")
    sink.submit(rec)
    sink.close()
    code, out, _ = cli("show", rec.id, "--db", db_url, "--format", "table")
    assert code == 0
    assert "start" not in out.split("timeline", 1)[1]
    assert "gaps      none recorded" in out


@pytest.mark.parametrize("width", [1, 2, 5, 16, 40])
def test_shorten_keeps_both_ends_within_width(width: int) -> None:
    for text in ("01a2321e-14c3-7667-9ebf-4606b6f250f2", "音楽における調和について教えてください"):
        short = shorten(text, width)
        assert cell_len(short) <= width
        if cell_len(text) <= width:
            assert short == text
        elif width >= 5:
            assert short[0] == text[0] and short[-1] == text[-1] and "…" in short


def test_numbers_are_right_aligned() -> None:
    text = table(
        [{"name": "a", "n": 1}, {"name": "bb", "n": 100}, {"name": "c", "n": None}],
        ["name", "n"],
        Fit(width=80),
    )
    assert text.splitlines() == ["name    n", "a       1", "bb    100", "c       -"]


@pytest.mark.parametrize("sid", ["972702700620", "12e456789012"])
def test_an_id_of_digits_is_text(sid: str) -> None:
    """A short id is hex: now and then its twelve characters all read as a number
    (digits, or digits around one ``e``); its column stays left-aligned."""
    rows = [{"id": sid, "key": "1", "trace_id": "22", "n": 1}, {"id": "5", "key": "333", "n": 2}]
    lines = table(rows, ["id", "key", "trace_id", "n"], Fit(width=80)).splitlines()
    assert lines[0].split() == ["id", "key", "trace_id", "n"]
    assert lines[0].index("key") == lines[1].index("1   ") == lines[2].index("333")
    assert lines[0].index("trace_id") == lines[1].index("22")
    assert lines[2].startswith("5 ")


@pytest.mark.slow
def test_hints_name_scripts_run_when_started_so(tmp_path: Path) -> None:
    """`recorder` is not on PATH after the README's set-up: a hint printed under
    `scripts/run` reads `scripts/run …`, so it runs as printed."""
    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if k != "RECORDER_PROG"}
    env["RECORDER_VENV"] = str(Path(sys.executable).parent.parent)  # this suite's venv
    missing = f"sqlite:///{tmp_path / 'missing.db'}"
    done = subprocess.run(
        ["scripts/run", "sessions", "--db", missing],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1
    assert "(run `scripts/run proxy` or `scripts/run db upgrade`)" in done.stderr
    assert not (tmp_path / "missing.db").exists()
