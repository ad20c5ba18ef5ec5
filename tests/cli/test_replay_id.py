"""`recorder replay --id ID`: streams captured through the real proxy (the simulator
upstream, ``capture_bodies`` on, the SQL writer on SQLite and PostgreSQL) are
metered again from their stored bodies and give the records the proxy wrote."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from recorder.cli.main import main
from recorder.core.captured import CapturedBody, CapturedRecord
from recorder.core.record import FIELDS, StreamRecord
from recorder.simulate import Simulator, run_in_thread
from recorder.store.engine import make_engine
from recorder.store.queries import get_stream
from recorder.store.writer import SqlSink
from tests.kit.cli import Cli
from tests.kit.ports import free_port
from tests.kit.processes import RECORDER, start_proxy
from tests.kit.proxy_thread import running_proxy
from tests.kit.records import TIMING_FIELDS, simple_record

KEY = "sk-replay-id-test-0042"
STALL_AFTER = 1.0
# (path, request body, x-sim-fault): every outcome a stream can have, keepalives,
# a stall, a compressed upstream, reported and estimated usage, tool calls. A fault
# "client_gone=N" is ours, not the simulator's: the client hangs up after N bytes.
CASES: list[tuple[str, dict[str, Any], str]] = [
    (
        "/v1/chat/completions",
        {"model": "gpt-4o", "stream_options": {"include_usage": True}},
        "keepalive=0.1,stall=1.3",
    ),
    ("/v1/chat/completions", {"model": "gpt-4o-mini"}, "rst=5"),  # no usage: estimated
    ("/v1/chat/completions", {"model": "gpt-4o"}, "eof,fin=4"),  # truncated
    ("/v1/chat/completions", {"model": "gpt-4o"}, "error=3,usage=on"),
    ("/v1/responses", {"model": "gpt-5", "input": "Tell me about harmony."}, "compress=gzip"),
    ("/v1/responses", {"model": "gpt-5", "input": "hi", "max_output_tokens": 5}, ""),
    ("/v1/messages", {"model": "claude-sonnet-4-5", "max_tokens": 500}, "tools=2,lang=ja"),
    (
        "/v1/messages",
        {"model": "claude-sonnet-4-5", "max_tokens": 500},
        "interrupt=6,keepalive=0.05,delay=0.03",
    ),
    ("/v1/messages", {"model": "claude-haiku-4-5", "max_tokens": 500}, "bytewise,crlf,deltas=3"),
    ("/v1/chat/completions", {"model": "gpt-4o"}, "delay=0.02,client_gone=600"),
    ("/v1/chat/completions", {"model": "gpt-4o"}, "status=429"),  # http_error, no SSE body
]
MESSAGES = [{"role": "user", "content": "Say something about harmony."}]
# docs/record.md's timings; replayed from offsets kept in microseconds
TIMINGS = TIMING_FIELDS


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with run_in_thread() as simulator:
        yield simulator


def send(base: str, path: str, body: dict[str, Any], fault: str) -> None:
    doc = {"stream": True, **body}
    if path != "/v1/responses":
        doc["messages"] = MESSAGES
    headers = {"authorization": f"Bearer {KEY}", "x-api-key": KEY}
    faults = [f for f in fault.split(",") if f]
    gone = [int(f.split("=")[1]) for f in faults if f.startswith("client_gone=")]
    faults = [f for f in faults if not f.startswith("client_gone=")]
    if faults:
        headers["x-sim-fault"] = ",".join(faults)
    try:
        with (
            httpx.Client(timeout=20) as client,
            client.stream("POST", base + path, json=doc, headers=headers) as resp,
        ):
            received = 0
            for piece in resp.iter_raw():
                received += len(piece)
                if gone and received >= gone[0]:
                    break  # leaving the block closes the connection mid-stream
    except httpx.HTTPError:
        pass  # a cut stream


def replay_json(cli: Cli, *argv: str) -> dict[str, Any]:
    code, out, err = cli("replay", *argv, "--format", "json")
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


def assert_reproduces(doc: dict[str, Any], stored: StreamRecord) -> None:
    """The replayed record is the stored one: every field, timings within 1 ms."""
    want = stored.to_dict()
    assert list(doc) == list(FIELDS)
    for name in FIELDS:
        if name in TIMINGS and doc[name] is not None and want[name] is not None:
            assert abs(doc[name] - want[name]) <= 1.0, (name, doc[name], want[name])
        else:
            assert doc[name] == want[name], (name, doc[name], want[name], stored.outcome)


def test_stored_streams_replay_to_their_records(
    cli: Cli, db_url: str, sim: Simulator, tmp_path: Path
) -> None:
    sink = SqlSink(db_url, tmp_path / "spool", flush_interval=0.05)
    with running_proxy(
        [f"reverse:{sim.url}@{free_port()}"],
        str(tmp_path / "mitmproxy"),
        stall_after=STALL_AFTER,
        config={"capture_bodies": True},
        also=sink,
    ) as proxy:
        for path, body, fault in CASES:
            send(proxy.url(), path, body, fault)
        records = proxy.sink.wait_for(len(CASES), timeout=60)
    assert sink.stats()["written"] == len(CASES)  # the proxy's shutdown closed the writer
    assert sink.stats()["bodies_written"] == len(CASES) - 1  # not the 429's JSON body
    outcomes = {r.outcome for r in records}
    assert outcomes == {
        "completed",
        "upstream_disconnect",
        "truncated",
        "error",
        "incomplete",
        "client_disconnect",
        "http_error",
    }
    engine = make_engine(db_url)
    try:
        stored = {r.id: get_stream(engine, r.id) for r in records}
    finally:
        engine.dispose()
    stalls = keepalives = 0
    for rec in records:
        assert rec.id is not None
        if rec.outcome == "http_error":
            code, _, err = cli("replay", "--id", rec.id, "--db", db_url)
            assert code == 1 and "no stored body" in err
            continue
        doc = replay_json(cli, "--id", rec.id, "--db", db_url)
        assert_reproduces(doc, stored[rec.id])
        stalls += doc["stalls"]
        keepalives += doc["keepalives"]
    assert stalls >= 1 and keepalives >= 10  # the rhythm was there to reproduce
    # an id prefix works as in `recorder show`; the stall threshold can be changed
    some = next(r for r in records if r.stalls)
    assert some.id is not None
    doc = replay_json(cli, "--id", some.id[:-4], "--db", db_url, "--stall-after", "100")
    assert doc["id"] == some.id and doc["stalls"] == 0 and doc["outcome"] == some.outcome


def test_an_incomplete_body_is_said_so(cli: Cli, db_url: str, tmp_path: Path) -> None:
    import dataclasses

    base = simple_record(endpoint="chat.completions", http_status=200)
    values = {f.name: getattr(base, f.name) for f in dataclasses.fields(StreamRecord)}
    body = CapturedBody(0.0, 0.1, limit=20)
    body.add(b'data: {"choices": []}\n\n', 0.2)  # over the limit: counted, not kept
    body.end(0.3, "eof")
    sink = SqlSink(db_url, tmp_path / "spool")
    sink.submit(CapturedRecord(**values, body=body))
    sink.close()
    code, out, err = cli("replay", "--id", str(base.id), "--db", db_url, "--format", "json")
    assert code == 0
    assert "incomplete" in err and "cannot be reproduced exactly" in err
    assert json.loads(out)["outcome"] == "truncated"


def test_usage_errors(capsys: pytest.CaptureFixture[str], cli: Cli, tmp_path: Path) -> None:
    for argv in (
        ["replay"],  # neither
        ["replay", "x.sse", "--endpoint", "messages", "--id", "abcd"],  # both
        ["replay", "--id", "abcd", "--stall-after", "0"],
    ):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2, argv
        capsys.readouterr()
    missing = f"sqlite:///{tmp_path / 'missing.db'}"
    ran = cli("replay", "--id", "abcd", "--db", missing)
    assert ran.code == 1
    assert "no database" in ran.err


def test_unknown_id(cli: Cli, db_url: str) -> None:
    ran = cli("replay", "--id", "0000-no-such-stream", "--db", db_url)
    assert ran.code == 1
    assert "no stream with id" in ran.err


@pytest.mark.slow
def test_recorder_proxy_capture_bodies_end_to_end(tmp_path: Path, sim: Simulator) -> None:
    """`recorder proxy --capture-bodies` as users run it, then `recorder replay --id`."""
    recorder = RECORDER
    db = f"sqlite:///{tmp_path / 'recorder.db'}"
    proc, port, _metrics_port, banner = start_proxy(
        tmp_path, sim, "--capture-bodies", "--capture-max-bytes", "1MiB"
    )
    try:
        assert "SSE response bodies, compressed" in banner and "up to 1 MiB each" in banner
        send(
            f"http://127.0.0.1:{port}",
            "/v1/chat/completions",
            {"model": "gpt-4o", "stream_options": {"include_usage": True}},
            "keepalive=0.1,stall=1.2",
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    res = subprocess.run(
        [recorder, "sessions", "--db", db, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    (row,) = json.loads(res.stdout)
    res = subprocess.run(
        [recorder, "replay", "--id", row["id"], "--db", db],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    doc = json.loads(res.stdout)
    assert doc["outcome"] == row["outcome"] == "completed"
    assert doc["stalls"] == row["stalls"] == 1
    assert doc["keepalives"] == row["keepalives"] > 0
    assert (doc["input_tokens"], doc["output_tokens"]) == (
        row["input_tokens"],
        row["output_tokens"],
    )
    assert abs(doc["ttft_ms"] - row["ttft_ms"]) <= 1.0
    assert KEY not in (tmp_path / "recorder.db").read_text(errors="replace")
