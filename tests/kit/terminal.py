"""A real terminal for the tests: tmux, its screen read with ``capture-pane``.

- ``ensure_tmux``: tmux's path, installed with apt-get when missing (as root); the
  test is skipped, saying why, only where that cannot be done;
- ``Tmux``: one tmux server of our own (its own socket) with one session, of a
  given size, running a command; ``screen``, ``wait_for``, ``title`` (the pane's
  title, which an escape sequence can set), ``alive``, ``close``;
- the ``tmux`` fixture: ``tmux(command, width=…, height=…, hold=…)``, closed after
  the test (``hold``: the pane kept open once the command ended).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator

import pytest

from tests.kit.ports import free_port


def ensure_tmux() -> str:
    """tmux's path (installed if it can be; else the test is skipped)."""
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

    def __init__(
        self,
        tmux: str,
        command: list[str],
        width: int = 180,
        height: int = 45,
        *,
        hold: bool = False,
    ) -> None:
        self.tmux = tmux
        self.socket = f"recorder-test-{os.getpid()}-{free_port()}"
        if hold:
            # the pane outlives the command: when a pane's command ends, tmux writes
            # "Pane is dead" below its last line, scrolling the first off the screen
            command = ["sh", "-c", '"$0" "$@"; exec sleep 600', *command]
        # the screen stays readable after the command ends (`sessions` does, at once):
        # set before the session starts, in the same call
        size = ["-x", str(width), "-y", str(height)]
        self.run(
            "set-option", "-g", "remain-on-exit", "on", ";",
            "new-session", "-d", "-s", "top", *size, *command,
            check=True,
        )  # fmt: skip

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

    def title(self) -> str:
        """The pane's title: what an OSC 0/2 sequence printed in it sets."""
        return self.run("display", "-p", "-t", "top", "#{pane_title}").stdout.strip()

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
        """The command still runs (its pane is kept once it ends)."""
        dead = self.run("display", "-p", "-t", "top", "#{pane_dead}").stdout.strip()
        return dead == "0"

    def close(self) -> None:
        self.run("kill-server")


@pytest.fixture
def tmux() -> Iterator[Callable[..., Tmux]]:
    """``tmux(command, width=180, height=45, hold=False)``: a terminal running
    ``command`` (``hold``: kept open once the command ended, its screen as it left it;
    ``alive`` then says True)."""
    path = ensure_tmux()
    opened: list[Tmux] = []

    def start(
        command: list[str], width: int = 180, height: int = 45, *, hold: bool = False
    ) -> Tmux:
        t = Tmux(path, command, width, height, hold=hold)
        opened.append(t)
        return t

    yield start
    for t in opened:
        t.close()
