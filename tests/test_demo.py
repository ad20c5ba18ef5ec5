"""`recorder demo` end to end: every scenario gives the outcome it is there to show."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recorder.cli.main import main
from recorder.demo import SCENARIOS, run_demo
from recorder.sinks import MemorySink

EXPECTED = [
    "completed",
    "completed",
    "completed",
    "completed",
    "upstream_disconnect",
    "client_disconnect",
    "completed",
    "error",
    "completed",
    "error",
    "completed",
    "http_error",
]


def test_every_scenario_shows_its_outcome(tmp_path: Path) -> None:
    sink = MemorySink()
    records = run_demo(sink, b"demo-secret", confdir=str(tmp_path))
    assert len(SCENARIOS) == len(EXPECTED)
    assert [r.outcome for r in records] == EXPECTED
    assert [r.id for r in sink.records] == [r.id for r in records]
    stall = records[3]
    assert stall.stalls == 1 and (stall.keepalives or 0) >= 4
    assert records[2].tool_calls == 2
    assert records[9].error_message == "Response stream interrupted, please retry"
    assert records[10].streamed is False


def test_cli_prints_one_json_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # mitmproxy's confdir goes there
    monkeypatch.delenv("RECORDER_KEY_SECRET", raising=False)
    db = tmp_path / "demo.db"
    assert main(["demo", "--format", "json", "--db", f"sqlite:///{db}"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["outcome"] for r in rows] == EXPECTED
    # and the database holds the same streams
    assert main(["sessions", "--db", f"sqlite:///{db}", "--format", "json"]) == 0
    stored = json.loads(capsys.readouterr().out)
    assert sorted(r["id"] for r in stored) == sorted(r["id"] for r in rows)
    assert b"sk-demo" not in db.read_bytes()
