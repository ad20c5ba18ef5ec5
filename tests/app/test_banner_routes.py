"""The start-up banner says what is true in each way of starting the recorder:
`recorder proxy` (as `scripts/run` starts it) and `mitmdump -s
addons/recorder_addon.py` with mitmproxy's own defaults (every interface, and the
default /metrics port taken), each a real subprocess."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from recorder.simulate import Simulator, run_in_thread
from tests.kit.ports import free_port
from tests.kit.processes import ADDON, MITMDUMP, start_proxy, stop

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with run_in_thread() as simulator:
        yield simulator


def _banner_of(proc: subprocess.Popen[str], timeout: float = 60) -> str:
    """Everything ``proc`` printed up to and with its banner (printed at once:
    once its metrics line is there, all of it is), then stopped."""
    assert proc.stdout is not None
    out = ""
    deadline = time.monotonic() + timeout
    while "  metrics:" not in out and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        out += line
    return out + stop(proc)


def _one_line(text: str) -> str:
    """The banner with its wrapped lines joined (warnings wrap at 88 columns)."""
    return " ".join(line.strip() for line in text.splitlines())


def test_recorder_proxy_started_by_scripts_run(tmp_path: Path, sim: Simulator) -> None:
    """The hints name the way the proxy was started (`scripts/run` exports
    RECORDER_PROG); a regular listener says that a base URL needs reverse mode."""
    regular = free_port()
    proc, port, metrics_port, start = start_proxy(
        tmp_path, sim, "--mode", f"regular@{regular}", env={"RECORDER_PROG": "scripts/run"}
    )
    banner = start + stop(proc)  # the banner is printed at once: its rest is in the pipe
    assert f"(watch it: scripts/run top --url http://127.0.0.1:{metrics_port})" in banner, banner
    assert f"OPENAI_BASE_URL=http://127.0.0.1:{port}/v1" in banner  # the reverse listener
    # the regular one: a proxy for HTTPS_PROXY, and not a base URL
    assert f"HTTPS_PROXY=http://127.0.0.1:{regular}" in banner
    text = _one_line(banner)
    assert (
        f'As a base URL (http://127.0.0.1:{regular}/v1) it answers 502 "Request destination'
        ' unknown": base URLs need reverse mode, --mode reverse:https://api.openai.com@8081'
    ) in text, banner
    assert "WARNING" not in banner


def _hold_the_default_metrics_port() -> socket.socket:
    held = socket.socket()
    try:
        held.bind(("127.0.0.1", 9464))
    except OSError:
        held.close()
        pytest.skip("127.0.0.1:9464 is in use by another process: this test must hold it")
    held.listen()
    return held


def _mitmdump(tmp_path: Path, *args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [MITMDUMP, "-s", str(ADDON), *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )


def test_mitmdump_with_mitmproxys_own_defaults(tmp_path: Path) -> None:
    """No --listen-host: mitmproxy listens on every interface, which the banner
    says once (not as `[::]` and `0.0.0.0` apart), giving the address a client on
    this machine uses, and its warning does not call 127.0.0.1 the default. The
    default /metrics port taken: the recording starts, and the banner says why
    /metrics is off (not that its port is 0)."""
    port = free_port()
    env = {**os.environ, "HOME": str(tmp_path)}
    env.pop("RECORDER_PROG", None)
    held = _hold_the_default_metrics_port()
    try:
        proc = _mitmdump(
            tmp_path, "-p", str(port), "--set", f"recorder_db=sqlite:///{tmp_path}/r.db", env=env
        )
        banner = _banner_of(proc)
    finally:
        held.close()
    assert "recorder: recording inside mitmproxy" in banner, banner
    assert banner.count(f"every interface, port {port}") == 1, banner
    assert f"HTTPS_PROXY=http://127.0.0.1:{port}" in banner
    assert "http://[::]" not in banner and "http://0.0.0.0" not in banner
    text = _one_line(banner)
    assert "WARNING: the proxy listens on" in text and "open proxy" in text
    assert (
        "or listen on 127.0.0.1 (--listen-host 127.0.0.1; mitmproxy's default is every interface)"
    ) in text, banner
    assert "(the default)" not in text
    assert "metrics:  off: 127.0.0.1:9464 could not be served (see above)" in banner, banner
    assert "(--set recorder_metrics_port=PORT for another, 0 for none)" in banner
    assert "metrics port 0" not in banner


def test_mitmdump_from_the_venv_names_a_recorder_it_can_run(tmp_path: Path) -> None:
    """`.venv/bin/mitmdump` run without the venv on PATH: the `top` hint names the
    venv's own `recorder`, which runs as printed."""
    port, metrics_port = free_port(), free_port()
    path = os.pathsep.join(
        p
        for p in os.environ.get("PATH", "").split(os.pathsep)
        if p and Path(p).resolve() != Path(sys.executable).parent.resolve()
    )
    env = {**os.environ, "HOME": str(tmp_path), "PATH": path}
    env.pop("RECORDER_PROG", None)
    proc = _mitmdump(
        tmp_path,
        "--listen-host",
        "127.0.0.1",
        "-p",
        str(port),
        "--set",
        f"recorder_db=sqlite:///{tmp_path}/r.db",
        "--set",
        f"recorder_metrics_port={metrics_port}",
        env=env,
    )
    banner = _banner_of(proc)
    assert f"  regular  http://127.0.0.1:{port}" in banner, banner
    line = next(x for x in banner.splitlines() if "(watch it: " in x)
    hint = line.split("(watch it: ", 1)[1].rstrip(")")
    prog, rest = hint.split(" ", 1)
    assert rest == f"top --url http://127.0.0.1:{metrics_port}"
    assert Path(tmp_path, prog).resolve() == (Path(sys.executable).parent / "recorder").resolve()
    ran = subprocess.run(
        [prog, "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0 and "top" in ran.stdout
