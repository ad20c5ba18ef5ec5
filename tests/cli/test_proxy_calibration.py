"""A restarted `recorder proxy` estimates with what its database's streams taught."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest
import sqlalchemy as sa

from recorder.core.record import StreamRecord
from recorder.simulate import Simulator, run_in_thread
from recorder.store import SqlSink, upgrade
from tests.kit.processes import start_proxy


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with run_in_thread() as simulator:
        yield simulator


def cut_stream(client: anthropic.Anthropic) -> None:
    """A Claude stream the upstream resets after its sixth event."""
    try:
        with client.messages.stream(
            model="claude-sonnet-4-5+rst=6",
            max_tokens=100,
            messages=[{"role": "user", "content": "Tell me about harmony."}],
        ) as stream:
            for _ in stream:
                pass
    except Exception:  # the reset reaches the client as the SDK or httpx words it
        return
    raise AssertionError("the stream was not cut")


def test_a_restarted_proxy_estimates_with_the_stored_calibration(
    tmp_path: Path, sim: Simulator
) -> None:
    # an earlier run's completed Claude streams: 2 characters a token, not 3.6
    db = f"sqlite:///{tmp_path / 'recorder.db'}"
    upgrade(db)
    sink = SqlSink(db, str(tmp_path / "spool"))
    for i in range(25):
        sink.submit(
            StreamRecord(
                id=f"00000000-0000-0000-0000-{i:012d}",
                started_at=f"2026-11-30T00:00:{i:02d}.000Z",
                endpoint="messages",
                provider="anthropic",
                model="claude-sonnet-4-5",
                outcome="completed",
                http_status=200,
                output_tokens=1003,
                output_source="reported",
                usage_source="reported",
                output_breakdown={"latin": 2000, "deltas": 50},
            )
        )
    sink.close()

    proc, port, _, _ = start_proxy(tmp_path, sim)
    try:
        client = anthropic.Anthropic(
            base_url=f"http://127.0.0.1:{port}", api_key="sk-ant-cli-test", max_retries=0
        )
        cut_stream(client)
        deadline = time.monotonic() + 10
        engine = sa.create_engine(db)
        while True:
            with engine.connect() as conn:
                rows = conn.execute(
                    sa.text("SELECT estimate_method, outcome FROM streams WHERE started_at > :t"),
                    {"t": "2026-12-01"},
                ).all()
            if rows or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert len(rows) == 1
    method, outcome = rows[0]
    assert outcome == "upstream_disconnect"
    assert "output:chars/calibrated" in method
