"""The mitmproxy script's options come from the option table: their defaults, and
what happens when one changes while a real mitmdump runs (applied, or refused
with an OptionsError, never dropped)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import sqlalchemy as sa
from mitmproxy.test import taddons

from recorder.app.banner import banner_lines
from recorder.app.script import ScriptRecorder
from recorder.proxy.options import AppConfig
from recorder.simulate import run_in_thread
from tests.kit.processes import wait_listening

ROOT = Path(__file__).parents[2]
MITMDUMP = str(Path(sys.executable).parent / "mitmdump")

# A second script: GET /_set?NAME=VALUE changes a mitmproxy option at run time, as
# another addon (or mitmweb's options editor) does, and answers what happened.
SETTER = """
from mitmproxy import ctx, exceptions, http

class Setter:
    def request(self, flow):
        if not flow.request.path.startswith("/_set?"):
            return
        (name, value), = flow.request.query.items()
        try:
            ctx.options.set(f"{name}={value}")
            text = "applied"
        except exceptions.OptionsError as e:
            text = f"refused: {e}"
        text += f" | now {name}={getattr(ctx.options, name)}"
        flow.response = http.Response.make(200, text.encode())

addons = [Setter()]
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as resp:
        body: bytes = resp.read()
        return body.decode()


def test_the_options_are_generated_from_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a change of options builds the recorder: its store here
    addon = ScriptRecorder()
    with taddons.context(addon) as tctx:
        for opt in AppConfig.options():
            if opt.declared is not None:
                assert getattr(tctx.options, opt.declared) == opt.default, opt.declared
        # the names the script always had still exist
        for name in (
            "recorder_db",
            "recorder_spool_dir",
            "recorder_stall_after",
            "recorder_prices",
            "recorder_quiet",
            "recorder_log_format",
            "recorder_verbose",
            "recorder_metrics",
            "recorder_otlp_endpoint",
        ):
            assert name in tctx.options, name
        # /metrics is on by default, on loopback, on recorder proxy's port
        assert tctx.options.recorder_metrics_host == "127.0.0.1"
        assert tctx.options.recorder_metrics_port == 9464
        # the older HOST:PORT option is read as the two
        # (the change builds the recorder, which serves /metrics there: a free port)
        port = free_port()
        tctx.options.update(recorder_metrics=f"[::1]:{port}")
        config = AppConfig.resolve(AppConfig.from_mitmproxy(tctx.options), under="mitmproxy")
        assert (config.metrics_host, config.metrics_port) == ("::1", port)
        # messages name the mitmproxy option
        assert config.where("db") == "recorder_db"
        addon.close()


def test_the_banner_warns_of_metrics_beyond_loopback_under_mitmproxy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    addon = ScriptRecorder()
    with taddons.context(addon) as tctx:
        # (not served: the recorder this change builds must not bind 0.0.0.0)
        tctx.options.update(recorder_metrics_host="0.0.0.0", recorder_metrics_port=0)
        config = AppConfig.resolve(AppConfig.from_mitmproxy(tctx.options), under="mitmproxy")
        addon.close()
    config.metrics_port_bound = 9464
    config.metrics_url = "http://0.0.0.0:9464/metrics"
    lines = banner_lines(config, [], "/conf")
    assert any("WARNING: /metrics is served on 0.0.0.0:9464" in line for line in lines), lines


@pytest.mark.slow
def test_options_changed_while_mitmdump_runs_are_applied_or_refused(tmp_path: Path) -> None:
    """A real mitmdump with the recorder script and a second script that changes
    options at run time: a change the recorder can take is applied (a stall
    threshold the next stream is metered with), one it cannot (the store) is
    refused with an OptionsError and mitmproxy keeps the old value; records keep
    going to the first store. The start is quiet (no migration log) and prints
    the banner; /metrics is served."""
    (tmp_path / "setter.py").write_text(SETTER)
    port, metrics_port = free_port(), free_port()
    db = tmp_path / "r.db"
    with run_in_thread() as sim:
        proc = subprocess.Popen(
            [
                MITMDUMP,
                "-s",
                str(ROOT / "addons" / "recorder_addon.py"),
                "-s",
                str(tmp_path / "setter.py"),
                "--mode",
                f"reverse:{sim.url}",
                "--listen-host",
                "127.0.0.1",
                "-p",
                str(port),
                "--set",
                f"recorder_db=sqlite:///{db}",
                "--set",
                f"recorder_metrics_port={metrics_port}",
                "--set",
                "recorder_log_format=json",
            ],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        try:
            wait_listening(port, proc)
            wait_listening(metrics_port, proc)
            base = f"http://127.0.0.1:{port}"

            def change(name: str, value: str) -> str:
                return get(f"{base}/_set?{urllib.parse.urlencode({name: value})}")

            other = f"sqlite:///{tmp_path / 'other.db'}"
            refused = change("recorder_db", other)
            assert refused.startswith("refused: recorder: recorder_db cannot change"), refused
            assert refused.endswith(f"now recorder_db=sqlite:///{db}"), refused
            bad = change("recorder_stall_after", "-1")
            assert (
                "recorder_stall_after must be positive" in bad
                and "now recorder_stall_after=30" in bad
            )
            applied = change("recorder_stall_after", "0.5")
            assert applied == "applied | now recorder_stall_after=0.5", applied
            # metered with the new threshold: 1.5 s of keepalives is a stall now
            body = _post(port, "gpt-4o+keepalive=0.2+stall=1.5")
            assert b"[DONE]" in body
            # counted once the record is completed (the finishing delay after the end)
            deadline = time.monotonic() + 10
            metrics = ""
            while "llm_streams_total{" not in metrics and time.monotonic() < deadline:
                time.sleep(0.1)
                metrics = get(f"http://127.0.0.1:{metrics_port}/metrics")
        finally:
            proc.terminate()
            out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert 'llm_streams_total{endpoint="chat.completions"' in metrics
    with sa.create_engine(f"sqlite:///{db}").connect() as conn:
        rows = conn.execute(sa.text("SELECT model, stalls FROM streams")).all()
    assert [(m, s >= 1) for m, s in rows] == [("gpt-4o+keepalive=0.2+stall=1.5", True)], out
    assert not (tmp_path / "other.db").exists()
    assert "recorder: recording inside mitmproxy" in out, out
    assert f"metrics:  http://127.0.0.1:{metrics_port}/metrics" in out, out
    assert "alembic" not in out and "Context impl" not in out, out


def _post(port: int, model: str) -> bytes:
    import orjson

    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=orjson.dumps(
            {"model": model, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        ),
        headers={"content-type": "application/json", "authorization": "Bearer sk-test-12345678"},
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        body: bytes = resp.read()
        return body


def test_attribution_options_reach_the_recorder_under_mitmproxy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mitmdump -s … --set recorder_tag_header=… --set recorder_strip_tag_headers=true`
    builds the recorder `recorder proxy --tag-header … --strip-tag-headers` builds."""
    monkeypatch.chdir(tmp_path)
    addon = ScriptRecorder()
    with taddons.context(addon) as tctx:
        try:
            tctx.configure(
                addon,
                recorder_metrics_port=0,
                recorder_no_live=True,
                recorder_tag_header="x-team helicone-property-feature=feature",
                recorder_strip_tag_headers=True,
                recorder_keep_user_ids=True,
                recorder_retry_window="120",
                recorder_metrics_tag="team",
            )
            assert addon.app is not None
            config = addon.app.recorder.config
            assert config.tag_headers == {
                "x-team": "x-team",
                "helicone-property-feature": "feature",
            }
            assert (config.strip_tag_headers, config.keep_user_ids) == (True, True)
            assert addon.app.recorder.finishing.chains.window == config.retry_window == 120.0
            assert addon.app.metrics.metrics_tag == "team"
        finally:
            addon.close()
