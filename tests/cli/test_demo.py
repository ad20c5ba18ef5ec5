"""`recorder demo` end to end: every scenario gives the outcome it is there to show."""

from __future__ import annotations

import csv
import fcntl
import io
import json
import os
import pty
import re
import select
import shlex
import signal
import struct
import subprocess
import sys
import termios
import time
from decimal import Decimal
from pathlib import Path

import pytest
from rich.cells import cell_len

from recorder.cli import demo as demo_cli
from recorder.cli.scenarios import SCENARIOS, run_demo
from recorder.core.money import display
from recorder.store.sinks import MemorySink
from recorder.store.writer import SqlSink
from tests.kit.cli import Cli
from tests.kit.records import simple_record

CONSOLE_SCRIPT = Path(sys.executable).parent / "recorder"

EXPECTED = [
    "completed",
    "completed",
    "completed",
    "completed",
    "upstream_disconnect",
    "completed",  # its client's retry
    "client_disconnect",
    "completed",
    "error",
    "completed",
    "error",
    "completed",
    "http_error",
    "completed",  # Amazon Bedrock through boto3
    "completed",  # Gemini's generateContent (alt=sse) through google-genai
    "completed",  # Gemini's Interactions API through google-genai
]


def test_every_scenario_shows_its_outcome_and_what_interruptions_cost(tmp_path: Path) -> None:
    sink = MemorySink()
    said: list[str] = []
    records = run_demo(sink, b"demo-secret", confdir=str(tmp_path), progress=said.append)
    assert sum(s.requests for s in SCENARIOS) == len(EXPECTED)
    assert [r.outcome for r in records] == EXPECTED
    assert [r.id for r in sink.records] == [r.id for r in records]
    stall = records[3]
    assert stall.stalls == 1 and (stall.keepalives or 0) >= 4
    # what it calls a stall, it says by which threshold (time is scaled)
    (line,) = [s for s in said if "is still a stall" in s]
    assert f"a stall is {demo_cli.DEMO_STALL_AFTER:g} s of output silence" in line
    assert stall.max_output_gap_ms is not None
    assert stall.max_output_gap_ms >= demo_cli.DEMO_STALL_AFTER * 1000
    assert records[2].tool_calls == 2
    assert records[10].error_message == "Response stream interrupted, please retry"
    assert records[11].streamed is False
    # the reset stream, retried by its client: the same request again, answered
    cut, retry = records[4], records[5]
    assert (cut.model, cut.http_status, cut.interrupted) == (retry.model, 200, True)
    assert retry.outcome == "completed" and retry.usage_source == "reported"
    if hasattr(retry, "retry_of"):  # retry chains (issue 32 §2) recorded
        assert getattr(retry, "retry_of", None) == cut.id
    # Gemini through google-genai: both of its streamed APIs, billed as reported
    gemini = [(r.endpoint, r.provider, r.transport, r.usage_source) for r in records[-2:]]
    assert gemini == [
        ("generate_content", "gcp.gemini", "sse", "reported"),
        ("interactions", "gcp.gemini", "sse", "reported"),
    ]
    assert all(r.cost_usd and r.output_tokens for r in records[-2:])
    # and the closing lines say what the interruptions cost
    line = demo_cli.interruption_lines([r.to_dict() for r in records])
    cut = [r for r in records if r.interrupted or r.outcome == "http_error"]
    billed = sum((Decimal(r.cost_usd) for r in cut if r.cost_usd), Decimal(0))
    spend = sum((Decimal(r.cost_usd) for r in records if r.cost_usd), Decimal(0))
    assert billed > 0 and len(cut) == 5
    assert line.startswith(
        f"What the interruptions cost: 5 requests did not complete, billed ${display(billed)}"
    )
    assert f"{billed / spend * 100:.1f}% of the demo's ${display(spend)}" in line
    if hasattr(records[5], "retry_of"):  # retry chains recorded: what the retry resent
        assert f"1 retry sent {records[5].input_tokens} input tokens again" in line


def test_cli_prints_one_json_document(
    tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # mitmproxy's confdir goes there
    monkeypatch.delenv("RECORDER_KEY_SECRET", raising=False)
    db = tmp_path / "demo.db"
    ran = cli("demo", "--format", "json", "--db", f"sqlite:///{db}")
    assert ran.code == 0
    rows = json.loads(ran.out)
    assert [r["outcome"] for r in rows] == EXPECTED
    # and the database holds the same streams
    ran = cli("sessions", "--db", f"sqlite:///{db}", "--format", "json")
    assert ran.code == 0
    stored = json.loads(ran.out)
    assert sorted(r["id"] for r in stored) == sorted(r["id"] for r in rows)
    assert b"sk-demo" not in db.read_bytes()


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "RECORDER_PROG")}
    env.update(HOME=str(home), RECORDER_KEY_SECRET="")
    return env


def _in_a_terminal(argv: list[str], cwd: Path, env: dict[str, str], width: int) -> str:
    """Run ``argv`` with a pseudo-terminal of ``width`` columns as its stdout and
    stderr, as a person's shell would; return what the screen received."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, width, 0, 0))
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        elif proc.poll() is not None:
            break
    os.close(master)
    assert proc.wait(timeout=30) == 0
    return re.sub(r"\x1b\[[0-9;]*m", "", b"".join(chunks).decode()).replace("\r\n", "\n")


@pytest.mark.slow
def test_demo_is_for_people_piped_or_in_a_terminal(
    tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Piped, the demo prints its table and hints (not 900 lines of JSON); in an
    80-column terminal no line is wider; every hint runs as printed; each run
    starts fresh (other keys' records untouched), --keep appends; the CSV has ids."""
    env = _env(tmp_path)
    url = "sqlite:///recorder-demo.db"
    # someone else's record in the demo's database is never removed
    foreign = simple_record(1)
    sink = SqlSink(f"sqlite:///{tmp_path / 'recorder-demo.db'}", tmp_path / "spool")
    sink.submit(foreign)
    sink.close()

    piped = subprocess.run(
        [str(CONSOLE_SCRIPT), "demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert piped.returncode == 0, piped.stderr
    lines = piped.stdout.splitlines()
    assert lines[0].split() == list(demo_cli.COLUMNS)  # a pipe gets every column
    assert len(lines) == 1 + len(EXPECTED)
    assert [line.split()[2] for line in lines[1:]] == EXPECTED
    assert "Where to look next" in piped.stderr

    # every hint runs as printed, from where the demo ran
    monkeypatch.chdir(tmp_path)
    after = piped.stderr.split("Where to look next:", 1)[1]
    hints = [h.strip() for h in after.splitlines() if h.startswith("    ")]
    # (`recorder` when it is on PATH, else the one beside this Python: runnable as printed)
    commands = [h for h in hints if Path(h.split()[0]).name == "recorder"]
    # nothing that leads nowhere once the demo is over (its proxy and /metrics are gone)
    assert [h for h in hints if h not in commands] == ["docs/record.md"], hints
    assert {h.split()[1] for h in commands} == {"sessions", "show", "audit", "proxy"}
    for hint in commands:
        if hint.split()[1] == "proxy":
            continue  # a server: its own tests start it
        argv = shlex.split(hint)[1:]
        ran = cli(*argv, "--format", "json")
        assert ran.code == 0, hint
        out = ran.out
        doc = json.loads(out)
        if argv[0] == "show":
            assert doc["stalls"] == 1  # the demo points at its stall
        elif argv[0] == "audit":  # the demo's models, and the total
            assert (
                sum(row["requests"] for row in doc if row["model"] != "TOTAL") == len(EXPECTED) + 1
            )
        else:
            assert len(doc) == len(EXPECTED) + 1

    screen = _in_a_terminal([str(CONSOLE_SCRIPT), "demo"], tmp_path, env, 80)
    assert f"starting fresh, {len(EXPECTED)} records of earlier demos removed" in screen
    assert "What the interruptions cost: 5 requests did not complete" in screen
    assert max(cell_len(line) for line in screen.splitlines()) <= 80
    assert "left out to fit 80 characters" in screen and "Where to look next" in screen

    ran = cli("demo", "--db", url, "--keep", "--format", "csv")
    assert ran.code == 0
    rows = list(csv.DictReader(io.StringIO(ran.out)))
    assert next(iter(rows[0])) == "id" and all(r["id"] for r in rows)
    ran = cli("sessions", "--db", url, "--format", "json", "--limit", "0")
    assert ran.code == 0
    stored = json.loads(ran.out)
    assert len(stored) == 2 * len(EXPECTED) + 1  # this run and the terminal's, and the other
    assert foreign.id in {s["id"] for s in stored}


def test_demo_help_is_plain_text(cli: Cli) -> None:
    """`demo --help` is for people: no reStructuredText markup, and it says how
    time is scaled."""
    ran = cli("demo", "--help")
    assert ran.code == 0
    assert "`" not in ran.out, ran.out
    text = " ".join(ran.out.split())
    assert f"a stall is {demo_cli.DEMO_STALL_AFTER:g} s of output silence here" in text


def test_demo_piped_as_json_is_one_document_without_hints(
    tmp_path: Path, cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    ran = cli("demo", "--format", "json", "--db", f"sqlite:///{tmp_path / 'd.db'}")
    assert ran.code == 0
    _, out, err = ran
    assert [r["outcome"] for r in json.loads(out)] == EXPECTED
    assert err == ""


@pytest.mark.slow
def test_an_interrupted_demo_says_so(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [str(CONSOLE_SCRIPT), "demo"],
        cwd=tmp_path,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a shell's background job ignores SIGINT; a person's Ctrl-C does not
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stderr is not None
    line = ""
    deadline = time.monotonic() + 60
    while f"[ 3/{len(SCENARIOS)}]" not in line and time.monotonic() < deadline:
        line = proc.stderr.readline()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert re.search(r"recorder demo: interrupted; \d+ records written to", err), err
