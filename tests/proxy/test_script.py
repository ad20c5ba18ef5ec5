"""The `mitmdump -s addons/recorder_addon.py` path: options, store, a recorded stream."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import sqlalchemy as sa
from mitmproxy import exceptions
from mitmproxy.test import taddons

from recorder.proxy.script import ScriptRecorder
from recorder.simulate import run_in_thread
from tests.e2e.conftest import free_port

ROOT = Path(__file__).parents[2]


def test_bad_stall_option_is_an_options_error(tmp_path: Path) -> None:
    addon = ScriptRecorder()
    with taddons.context(addon) as tctx, pytest.raises(exceptions.OptionsError):
        tctx.configure(addon, recorder_stall_after="-1", recorder_db=f"sqlite:///{tmp_path}/x.db")


def test_mitmdump_with_the_script_records_to_sqlite(tmp_path: Path) -> None:
    mitmdump = str(Path(sys.executable).parent / "mitmdump")
    port = free_port()
    db = tmp_path / "r.db"
    with run_in_thread() as sim:
        proc = subprocess.Popen(
            [
                mitmdump,
                "-q",
                "-s",
                str(ROOT / "addons" / "recorder_addon.py"),
                "--mode",
                f"reverse:{sim.url}",
                "--listen-host",
                "127.0.0.1",
                "-p",
                str(port),
                "--set",
                f"recorder_db=sqlite:///{db}",
                "--set",
                f"recorder_spool_dir={tmp_path}",
            ],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
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
