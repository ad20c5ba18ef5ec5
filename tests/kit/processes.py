"""The recorder as users start it, in subprocesses on free loopback ports:
`recorder proxy` (``start_proxy``), `mitmdump -s addons/recorder_addon.py`
(``start_mitmdump``), `mitmweb -s addons/recorder_addon.py` (``start_mitmweb``);
``stop`` ends one and returns the rest of its output, ``wait_listening`` waits for
a port, ``scrape_metrics`` reads a running proxy's /metrics, ``python_env`` lets a
child `python -c` import this package."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from recorder.simulate import Simulator
from tests.kit.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
ADDON = ROOT / "addons" / "recorder_addon.py"
RECORDER = str(Path(sys.executable).parent / "recorder")
MITMDUMP = str(Path(sys.executable).parent / "mitmdump")
MITMWEB = str(Path(sys.executable).parent / "mitmweb")


def python_env() -> dict[str, str]:
    """The environment for a child `python -c` that imports ``tests.kit``."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path}


def start_proxy(
    tmp_path: Path, sim: Simulator, *extra: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], int, int, str]:
    """`recorder proxy` in reverse mode before ``sim``, on SQLite in ``tmp_path``
    (``extra`` may name another ``--db``); ``env`` adds to its environment.
    Returns the process, its proxy and metrics ports, and its start-up banner.

    A free port may be taken by another process before the proxy binds it (seen
    with the OTLP receiver's in CI): then it starts again on other ports, twice at
    most."""
    for attempt in range(3):
        try:
            return _start_proxy(tmp_path, sim, extra, env)
        except _PortTaken:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


class _PortTaken(AssertionError):
    """The proxy could not bind a port found free a moment before."""


def _start_proxy(
    tmp_path: Path, sim: Simulator, extra: tuple[str, ...], env: dict[str, str] | None
) -> tuple[subprocess.Popen[str], int, int, str]:
    port, metrics_port = free_port(), free_port()
    db = f"sqlite:///{tmp_path / 'recorder.db'}"
    given = env or {}
    env = {**os.environ, "HOME": str(tmp_path), "RECORDER_STALL_AFTER": "1"}
    env.pop("RECORDER_KEY_SECRET", None)
    env.update(given)
    proc = subprocess.Popen(
        [
            RECORDER,
            "proxy",
            "--mode",
            f"reverse:{sim.url}",
            "--listen-port",
            str(port),
            "--metrics-port",
            str(metrics_port),
            "--db",
            db,
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert proc.stdout is not None
    banner = ""
    deadline = time.monotonic() + 30
    while "metrics:" not in banner:
        line = proc.stdout.readline()
        if not line or time.monotonic() > deadline:
            proc.kill()
            said = f"{banner}{proc.stdout.read()}"
            proc.wait()
            taken = "address already in use" in said.lower()
            raise (_PortTaken if taken else AssertionError)(f"proxy did not start:\n{said}")
        banner += line
    return proc, port, metrics_port, banner


def start_mitmdump(
    tmp_path: Path, upstream: str, port: int, *options: str, also_modes: tuple[str, ...] = ()
) -> subprocess.Popen[str]:
    """`mitmdump -q -s addons/recorder_addon.py` in reverse mode before ``upstream``,
    on 127.0.0.1:``port``, with ``--set`` for each of ``options`` and a ``--mode``
    for each of ``also_modes`` (each with its own ``@port``)."""
    sets = [arg for option in options for arg in ("--set", option)]
    sets += [arg for mode in also_modes for arg in ("--mode", mode)]
    return subprocess.Popen(
        [
            MITMDUMP,
            "-q",
            "-s",
            str(ADDON),
            "--mode",
            f"reverse:{upstream}",
            "--listen-host",
            "127.0.0.1",
            "-p",
            str(port),
            *sets,
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def start_mitmweb(tmp_path: Path, upstream: str, port: int, *options: str) -> subprocess.Popen[str]:
    """`mitmweb -s addons/recorder_addon.py` in reverse mode before ``upstream``, on
    127.0.0.1:``port``, with ``--set`` for each of ``options``; HOME is ``tmp_path``
    and no key secret comes from the environment."""
    env = {**os.environ, "HOME": str(tmp_path)}
    env.pop("RECORDER_KEY_SECRET", None)
    sets = [arg for option in options for arg in ("--set", option)]
    return subprocess.Popen(
        [
            MITMWEB,
            "-s",
            str(ADDON),
            "--mode",
            f"reverse:{upstream}",
            "--listen-host",
            "127.0.0.1",
            "--listen-port",
            str(port),
            *sets,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        cwd=tmp_path,
    )


def stop(proc: subprocess.Popen[str]) -> str:
    """SIGINT, wait, and the rest of the output. Not ``communicate()``: it reads the
    pipe's descriptor and would miss what ``readline()`` has buffered already."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    assert proc.stdout is not None
    return proc.stdout.read()


def wait_listening(
    port: int, proc: subprocess.Popen[str] | None = None, timeout: float = 30
) -> None:
    """Until something accepts connections on 127.0.0.1:``port`` (raising at once
    should ``proc``, the process meant to listen there, have ended)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if (proc is not None and proc.poll() is not None) or time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def scrape_metrics(metrics_port: int, prefix: str) -> dict[str, float]:
    """The samples of the proxy's /metrics on ``metrics_port`` whose names begin
    with ``prefix``, by name (for series that carry no labels)."""
    url = f"http://127.0.0.1:{metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as resp:
        text = resp.read().decode()
    return {
        s.name: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith(prefix)
    }
