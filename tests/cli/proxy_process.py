"""Starting `recorder proxy` as users do: a subprocess on free loopback ports."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from recorder.simulate import Simulator
from tests.e2e.conftest import free_port

RECORDER = str(Path(sys.executable).parent / "recorder")


def start_proxy(
    tmp_path: Path, sim: Simulator, *extra: str, env: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], int, int, str]:
    """`recorder proxy` in reverse mode before ``sim``, on SQLite in ``tmp_path``
    (``extra`` may name another ``--db``); ``env`` adds to its environment.
    Returns the process, its proxy and metrics ports, and its start-up banner."""
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
            raise AssertionError(f"proxy did not start:\n{banner}{proc.stdout.read()}")
        banner += line
    return proc, port, metrics_port, banner
