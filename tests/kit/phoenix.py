"""Arize Phoenix, a real OTLP receiver, started by the tests on free loopback ports.

It takes OTLP over HTTP at ``/v1/traces`` and stores spans in SQLite under a
temporary working directory; its REST API returns them with attributes, events
and parent ids. It lives in its own venv (``scripts/phoenix`` builds it;
``.ci/run`` does so in CI): without it these tests are skipped, except in CI,
where they fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.kit.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 180  # it takes 20-30 s on a loaded 2-core machine


def phoenix_bin() -> Path:
    venv = Path(os.environ.get("RECORDER_PHOENIX_VENV") or ROOT / ".venv-phoenix")
    exe = venv / "bin" / "phoenix"
    if not exe.exists():
        why = f"Phoenix (the OTLP receiver) is not installed in {venv}: run scripts/phoenix"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return exe


class Phoenix:
    def __init__(self, port: int) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def spans(self, project: str = "default") -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        cursor = None
        while True:
            q = "?limit=1000" + (f"&cursor={cursor}" if cursor else "")
            url = f"{self.url}/v1/projects/{project}/spans{q}"
            try:
                with urllib.request.urlopen(url, timeout=10) as resp:
                    doc = json.load(resp)
            except urllib.error.HTTPError as e:
                if e.code == 404:  # no span yet: the project does not exist
                    return []
                raise
            out += doc["data"]
            cursor = doc.get("next_cursor")
            if not cursor:
                return out

    def wait_spans(self, count: int, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Poll until ``count`` spans are stored (Phoenix inserts in batches)."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.spans()
            if len(spans) >= count or time.monotonic() > deadline:
                return spans
            time.sleep(0.5)


@contextmanager
def running_phoenix(workdir: Path) -> Iterator[Phoenix]:
    exe = phoenix_bin()
    port, grpc_port = free_port(), free_port()
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(workdir),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc_port),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = open(workdir / "phoenix.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([str(exe), "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        phoenix = Phoenix(port)
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                with urllib.request.urlopen(f"{phoenix.url}/healthz", timeout=2):
                    break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    text = (workdir / "phoenix.log").read_text(errors="replace")[-3000:]
                    raise AssertionError(f"Phoenix did not start:\n{text}") from None
                time.sleep(0.5)
        yield phoenix
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()
