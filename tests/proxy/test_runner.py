"""recorder.proxy.runner: where the proxy's log goes. mitmproxy's terminal log
writes to stdout; a command whose stdout is a document (`recorder demo --format
json`) sends it elsewhere, so a warning never lands inside its JSON."""

from __future__ import annotations

import io
import logging
import time

import pytest

from recorder.proxy.addon import Recorder
from recorder.proxy.config import RecorderConfig
from recorder.proxy.runner import ProxySettings, run_in_thread
from recorder.store.sinks import MemorySink


def test_the_log_goes_where_the_settings_say(capsys: pytest.CaptureFixture[str]) -> None:
    out = io.StringIO()
    recorder = Recorder(MemorySink(), RecorderConfig(key_secret=b"k"))
    settings = ProxySettings(modes=["regular"], listen_port=0, log_out=out)
    with run_in_thread(recorder, settings):
        logging.getLogger("recorder").warning("recorder: probe-7f3a for the log")
        deadline = time.monotonic() + 5
        while "probe-7f3a" not in out.getvalue() and time.monotonic() < deadline:
            time.sleep(0.05)
    assert "probe-7f3a" in out.getvalue()
    assert "probe-7f3a" not in capsys.readouterr().out
