"""The `mitmdump -s addons/recorder_addon.py` path: options, store, a recorded stream."""

from __future__ import annotations

import threading
import time
import urllib.request
from pathlib import Path

import orjson
import pytest
import sqlalchemy as sa
from mitmproxy import exceptions
from mitmproxy.test import taddons

from recorder.app.script import ScriptRecorder
from recorder.core.record import StreamRecord
from recorder.simulate import run_in_thread
from recorder.store import SqlSink, upgrade
from tests.kit.ports import free_port
from tests.kit.processes import start_mitmdump, wait_listening
from tests.kit.traffic import post_stream


def test_bad_stall_option_is_an_options_error(tmp_path: Path) -> None:
    addon = ScriptRecorder()
    with taddons.context(addon) as tctx, pytest.raises(exceptions.OptionsError):
        tctx.configure(addon, recorder_stall_after="-1", recorder_db=f"sqlite:///{tmp_path}/x.db")


def test_mitmdump_with_the_script_records_to_sqlite(tmp_path: Path) -> None:
    port = free_port()
    db = tmp_path / "r.db"
    with run_in_thread() as sim:
        proc = start_mitmdump(
            tmp_path, sim.url, port, f"recorder_db=sqlite:///{db}", f"recorder_spool_dir={tmp_path}"
        )
        try:
            import openai

            client = openai.OpenAI(
                base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-script", max_retries=3
            )
            deadline = time.monotonic() + 30
            while True:
                try:
                    for _ in client.chat.completions.create(
                        model="gpt-4o",
                        messages=[{"role": "user", "content": "hi"}],
                        stream=True,
                        stream_options={"include_usage": True},
                    ):
                        pass
                    break
                except openai.APIConnectionError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.3)
        finally:
            proc.terminate()
            out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    with sa.create_engine(f"sqlite:///{db}").connect() as conn:
        rows = conn.execute(sa.text("SELECT outcome, output_tokens FROM streams")).all()
    assert len(rows) == 1 and rows[0][0] == "completed" and rows[0][1] > 0


def test_the_script_estimates_with_the_stored_calibration(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/x.db"
    upgrade(db)
    sink = SqlSink(db, str(tmp_path / "spool"))
    for i in range(25):  # an earlier run's Claude streams: 2 characters a token
        sink.submit(
            StreamRecord(
                id=f"00000000-0000-0000-0000-{i:012d}",
                started_at=f"2026-11-30T00:00:{i:02d}.000Z",
                endpoint="messages",
                model="claude-sonnet-4-5",
                outcome="completed",
                output_tokens=1003,
                output_source="reported",
                usage_source="reported",
                output_breakdown={"latin": 2000},
            )
        )
    sink.close()
    addon = ScriptRecorder()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, recorder_db=db, recorder_spool_dir=str(tmp_path))
        assert addon.estimator.calibration.ratio("claude-sonnet-4-5", "output", "latin") == 2.0
        addon.sink.close()


def test_mitmdump_with_the_script_shows_streams_and_stalls_live(tmp_path: Path) -> None:
    """§1-§3 of the live view through `mitmdump -s`: JSON console lines, a stall seen
    while it lasts (console, gauge, /streams), the finished stream's line."""
    port, metrics_port = free_port(), free_port()
    model = "gpt-4o+keepalive=0.3+stall=4"
    with run_in_thread() as sim:
        proc = start_mitmdump(
            tmp_path,
            sim.url,
            port,
            f"recorder_db=sqlite:///{tmp_path / 'r.db'}",
            f"recorder_spool_dir={tmp_path}",
            "recorder_stall_after=1",
            "recorder_log_format=json",
            f"recorder_metrics=127.0.0.1:{metrics_port}",
        )
        try:
            wait_listening(port)
            wait_listening(metrics_port)  # mitmdump loads the script after it listens
            done: list[bytes] = []
            client = threading.Thread(target=lambda: done.append(post_stream(port, model)))
            client.start()
            base = f"http://127.0.0.1:{metrics_port}"
            deadline = time.monotonic() + 20
            stalled: list[dict[str, object]] = []
            metrics = ""
            while not stalled and time.monotonic() < deadline:
                time.sleep(0.3)
                with urllib.request.urlopen(f"{base}/streams", timeout=5) as resp:
                    stalled = [r for r in orjson.loads(resp.read())["open"] if r["stalled"]]
                with urllib.request.urlopen(f"{base}/metrics", timeout=5) as resp:
                    metrics = resp.read().decode()
            assert stalled and stalled[0]["model"] == model
            client.join(30)
            assert done
        finally:
            proc.terminate()
            out, _ = proc.communicate(timeout=60)
    assert 'llm_stream_oldest_silence_seconds{endpoint="chat.completions"' in metrics
    # the store's figures too, as `recorder proxy` serves them (the write-queue alert)
    assert "llm_recorder_write_queue_depth" in metrics
    assert "llm_recorder_records_written" in metrics
    lines = [orjson.loads(x) for x in out.splitlines() if x.startswith("{")]
    kinds = [x["type"] for x in lines]
    assert kinds == ["stall", "stall_over", "stream"], out
    stall, over, line = lines
    assert stall["id"] == over["id"] == line["id"] == stalled[0]["id"]
    assert over["how"] == "output resumed" and over["stall_s"] >= 3.5
    assert line["outcome"] == "completed" and line["stalls"] == 1


def test_otlp_endpoint_option_turns_span_export_on(tmp_path: Path) -> None:
    addon = ScriptRecorder()
    with taddons.context(addon) as tctx:
        assert addon.on_span is None  # off by default
        tctx.configure(
            addon,
            recorder_db=f"sqlite:///{tmp_path}/x.db",
            recorder_spool_dir=str(tmp_path),
            recorder_otlp_endpoint=f"http://127.0.0.1:{free_port()}",
        )
        assert addon.on_span is not None
        addon.close()  # bounded, although nothing listens there


def test_a_bad_otlp_endpoint_is_an_options_error(tmp_path: Path) -> None:
    addon = ScriptRecorder()
    with taddons.context(addon) as tctx, pytest.raises(exceptions.OptionsError, match="otlp"):
        tctx.configure(
            addon,
            recorder_db=f"sqlite:///{tmp_path}/x.db",
            recorder_spool_dir=str(tmp_path),
            recorder_otlp_endpoint="collector:4318",
        )
