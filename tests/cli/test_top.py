"""Watching `recorder proxy` live, as a person would: a stalled stream (simulator
fault) shows on the proxy's console while it lasts, in ``/metrics`` and
``/streams``, and in `recorder top` running in tmux (its screen read with
``tmux capture-pane``); then the stream's line when it ends. And what `recorder
top` says when no proxy answers.

tmux is installed with apt-get when missing (as root); the tmux tests are skipped,
saying why, only where that cannot be done.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import orjson
import pytest

from recorder.simulate import run_in_thread
from tests.kit.ports import free_port
from tests.kit.processes import RECORDER, start_proxy
from tests.kit.traffic import post_stream

pytestmark = pytest.mark.slow

STALL_MODEL = "gpt-4o+keepalive=0.5+stall=8"


def ensure_tmux() -> str:
    found = shutil.which("tmux")
    if found:
        return found
    if not (hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("apt-get")):
        pytest.skip("tmux not found and cannot be installed here: `apt-get install tmux`")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", "tmux"]
    result = subprocess.run(install, env=env, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, timeout=300)
        result = subprocess.run(install, env=env, capture_output=True, text=True, timeout=600)
    found = shutil.which("tmux")
    if not found:
        pytest.fail(f"installing tmux failed:\n{result.stderr[-2000:]}")
    return found


class Tmux:
    """One tmux server of our own (its own socket), one session running a command."""

    def __init__(self, tmux: str, command: list[str]) -> None:
        self.tmux = tmux
        self.socket = f"recorder-test-{os.getpid()}-{free_port()}"
        self.run("new-session", "-d", "-s", "top", "-x", "180", "-y", "45", *command, check=True)

    def run(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        # the test run may export COLUMNS/LINES, which Rich would obey over the pane's size
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        return subprocess.run(
            [self.tmux, "-L", self.socket, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=10,
            check=check,
        )

    def screen(self, escapes: bool = False) -> str:
        return self.run("capture-pane", "-p", *(["-e"] if escapes else []), "-t", "top").stdout

    def wait_for(self, check: Callable[[str], bool], timeout: float = 20) -> str:
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.screen()
            if check(text):
                return text
            time.sleep(0.3)
        size = self.run("display", "-p", "-t", "top", "#{window_width}x#{window_height}").stdout
        raise AssertionError(f"not on the screen after {timeout} s ({size}):\n{text}")

    def alive(self) -> bool:
        return self.run("has-session", "-t", "top").returncode == 0

    def close(self) -> None:
        self.run("kill-server")


@pytest.fixture
def tmux() -> Iterator[Callable[[list[str]], Tmux]]:
    path = ensure_tmux()
    opened: list[Tmux] = []

    def start(command: list[str]) -> Tmux:
        t = Tmux(path, command)
        opened.append(t)
        return t

    yield start
    for t in opened:
        t.close()


def test_a_stalled_stream_is_seen_live_on_console_metrics_streams_and_top(
    tmp_path: Path, tmux: Callable[[list[str]], Tmux]
) -> None:
    with run_in_thread() as sim:
        proc, port, metrics_port, _ = start_proxy(tmp_path, sim)  # stall after 1 s
        try:
            answer: list[bytes] = []
            client = threading.Thread(target=lambda: answer.append(post_stream(port, STALL_MODEL)))
            client.start()
            base = f"http://127.0.0.1:{metrics_port}"
            screen = tmux([RECORDER, "top", "--url", base])

            # the stalled row, highlighted, while the stream is open
            text = screen.wait_for(lambda s: "STALLED" in s)
            (row,) = [line for line in text.splitlines() if "STALLED" in line]
            assert "chat.completions" in row and "9876" in row
            (coloured,) = [
                line for line in screen.screen(escapes=True).splitlines() if "STALLED" in line
            ]
            assert "41m" in coloured or "41;" in coloured  # red background
            assert "stalled 1" in text

            with urllib.request.urlopen(f"{base}/streams", timeout=5) as resp:
                doc = orjson.loads(resp.read())
            (live,) = doc["open"]
            assert live["stalled"] is True and live["silence_s"] >= 1
            assert live["model"] == STALL_MODEL and live["key_last4"] == "9876"
            gauge = 'llm_streams_stalled{endpoint="chat.completions",provider="openai"} 1.0'
            deadline = time.monotonic() + 5  # the gauges follow within a tick (1 s)
            while time.monotonic() < deadline:
                with urllib.request.urlopen(f"{base}/metrics", timeout=5) as resp:
                    metrics = resp.read().decode()
                if gauge in metrics:
                    break
                time.sleep(0.2)
            assert gauge in metrics

            # a key sorts, the stream ends and moves to the finished list, q quits
            screen.run("send-keys", "-t", "top", "a")
            screen.wait_for(lambda s: "sorted by age" in s)
            client.join(60)
            assert answer and b"[DONE]" in answer[0]
            text = screen.wait_for(lambda s: "open 0" in s and "completed" in s)
            assert "STALLED" not in text
            screen.run("send-keys", "-t", "top", "q")
            deadline = time.monotonic() + 10
            while screen.alive() and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not screen.alive()
        finally:
            proc.send_signal(signal.SIGINT)
            out, _ = proc.communicate(timeout=30)
    stall = [line for line in out.splitlines() if " stall: " in line]
    over = [line for line in out.splitlines() if " stall over: " in line]
    done = [
        line for line in out.splitlines() if " chat.completions " in line and " completed " in line
    ]
    assert len(stall) == 1 and "chat.completions" in stall[0] and "keepalives meanwhile" in stall[0]
    assert len(over) == 1 and "output resumed after" in over[0]
    (line,) = done
    assert "stalls 1" in line and "200" in line
    # the id on the line is what `recorder show` takes
    shown = subprocess.run(
        [RECORDER, "show", line.split()[-1], "--db", f"sqlite:///{tmp_path / 'recorder.db'}"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert shown.returncode == 0, shown.stderr
    assert STALL_MODEL in shown.stdout


def test_top_says_clearly_when_no_proxy_answers(
    tmp_path: Path, tmux: Callable[[list[str]], Tmux]
) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    screen = tmux([RECORDER, "top", "--url", url])
    text = screen.wait_for(lambda s: "no proxy answers" in s)
    assert f"{url}/streams" in text and "recorder proxy" in text
    once = subprocess.run(
        [RECORDER, "top", "--once", "--url", url], capture_output=True, text=True, timeout=60
    )
    assert once.returncode == 1
    assert f"no proxy answers at {url}/streams" in once.stderr
