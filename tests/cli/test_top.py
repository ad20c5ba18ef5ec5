"""Watching `recorder proxy` live, as a person would: a stalled stream (simulator
fault) shows on the proxy's console while it lasts, in ``/metrics`` and
``/streams``, and in `recorder top` running in tmux (its screen read with
``tmux capture-pane``); then the stream's line when it ends. And what `recorder
top` says when no proxy answers.

tmux (tests.kit.terminal) is installed with apt-get when missing (as root); the tmux
tests are skipped, saying why, only where that cannot be done.
"""

from __future__ import annotations

import contextlib
import http.client
import io
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from rich.console import Console

from recorder.cli import top
from recorder.core.short_id import short_id
from recorder.proxy.live_lines import money
from recorder.simulate import run_in_thread
from tests.kit.hostile import ESCAPED_MODEL, HOSTILE_MODEL, assert_inert
from tests.kit.ports import free_port
from tests.kit.processes import RECORDER, start_proxy, stop
from tests.kit.terminal import Tmux
from tests.kit.traffic import post_stream

pytestmark = pytest.mark.slow

STALL_MODEL = "gpt-4o+keepalive=0.5+stall=8"


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


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_hostile_model_name_is_shown_escaped_on_every_screen(
    tmp_path: Path, tmux: Callable[..., Tmux], log_format: str
) -> None:
    """Issue 34 §4: the model a client names reaches the proxy's console line, its
    "no price" warning and `recorder top` (piped, and in a terminal) escaped; the
    terminal's title stays, and no forged line appears."""
    with run_in_thread() as sim:
        proc, port, metrics_port, _ = start_proxy(tmp_path, sim, "--log-format", log_format)
        try:
            assert b"[DONE]" in post_stream(port, HOSTILE_MODEL)
            url = f"http://127.0.0.1:{metrics_port}"
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:  # the record is finished off the stream's path
                with urllib.request.urlopen(f"{url}/streams", timeout=5) as resp:
                    doc = orjson.loads(resp.read())
                if doc["finished"]:
                    break
                time.sleep(0.1)
            (finished,) = doc["finished"]
            assert finished["model"] == HOSTILE_MODEL  # JSON keeps the value exact
            piped = subprocess.run(
                [RECORDER, "top", "--once", "--url", url],
                capture_output=True,
                text=True,
                timeout=60,
                env={k: v for k, v in os.environ.items() if k != "COLUMNS"},
            )
            assert piped.returncode == 0, piped.stderr
            assert_inert(piped.stdout)  # a pipe gets every column whole
            screen = tmux([RECORDER, "top", "--url", url], width=160)
            text = screen.wait_for(lambda s: "completed" in s)
            assert_inert(text, shortened=True)
            assert "PWNED" not in screen.title()
        finally:
            out = stop(proc)
    assert_inert(out)
    warning = [line for line in out.splitlines() if "without a cost" in line]
    assert len(warning) == 1 and ESCAPED_MODEL in warning[0]
    if log_format == "json":
        (line,) = [orjson.loads(x) for x in out.splitlines() if x.startswith('{"type":"stream"')]
        assert line["model"] == HOSTILE_MODEL
    else:
        (line,) = [x for x in out.splitlines() if " chat.completions " in x]
        assert f" {ESCAPED_MODEL} 200 completed " in line


LONG_MODEL = "claude-sonnet-4-5-20250929-with-a-very-long-deployment-name"


def headers(text: str, first: str) -> list[str]:
    """The column names of the table whose header line starts with ``first``."""
    (line,) = [x for x in text.splitlines() if x.split()[:1] == [first] and "  " in x]
    return line.split()


def test_top_is_readable_at_80_100_120_and_160_columns(
    tmp_path: Path, tmux: Callable[..., Tmux]
) -> None:
    """Issue 33 §3: at 120 columns `top` showed `sile… k… tt…` and `$0.00006…`
    while the model kept ~37 characters. In a real terminal of each width: no
    header cut, the columns that matter whole (the short id, the outcome, the
    cost), a long model shortened first; more columns as the terminal widens."""
    with run_in_thread() as sim:
        proc, port, metrics_port, _ = start_proxy(tmp_path, sim)  # stall after 1 s
        try:
            with contextlib.suppress(OSError, http.client.HTTPException):
                post_stream(port, "gpt-4o-mini+rst=6")  # cut by the upstream
            post_stream(port, LONG_MODEL)

            def stalling() -> None:  # cut when the proxy stops
                with contextlib.suppress(OSError, http.client.HTTPException):
                    post_stream(port, LONG_MODEL + "+keepalive=0.5+stall=60")

            threading.Thread(target=stalling, daemon=True).start()
            base = f"http://127.0.0.1:{metrics_port}"
            deadline = time.monotonic() + 20
            doc: dict[str, Any] = {}
            while time.monotonic() < deadline:
                with urllib.request.urlopen(f"{base}/streams", timeout=5) as resp:
                    doc = orjson.loads(resp.read())
                if len(doc["finished"]) == 2 and any(r["stalled"] for r in doc["open"]):
                    break
                time.sleep(0.2)
            cut = next(f for f in doc["finished"] if f["outcome"] == "upstream_disconnect")
            (live,) = doc["open"]
            whole = [short_id(cut["id"]), money(cut["cost_usd"]), short_id(live["id"])]
            seen: dict[int, tuple[list[str], list[str]]] = {}
            for width in (80, 100, 120, 160):
                screen = tmux([RECORDER, "top", "--url", base], width=width, height=40)
                text = screen.wait_for(lambda s: "STALLED" in s and "upstream_disconnect" in s)
                opened, finished = headers(text, "state"), headers(text, "id")
                assert not any("…" in h for h in opened + finished), text
                assert set(top.OPEN_KEEP) <= set(opened), text
                assert set(top.FINISHED_KEEP) <= set(finished), text
                assert all(w in text for w in whole), text
                assert "claude-" in text and LONG_MODEL not in text  # shortened in the middle
                seen[width] = (opened, finished)
                screen.close()
            assert {"ttft", "age", "ka"} <= set(seen[100][0])
            assert {"ttft", "duration", "out", "in"} <= set(seen[100][1])
            for narrow, wide in ((80, 100), (100, 120), (120, 160)):
                assert len(seen[narrow][0]) <= len(seen[wide][0])
                assert len(seen[narrow][1]) <= len(seen[wide][1])
            assert len(seen[160][0]) == len(top.OPEN_COLUMNS)

            # piped, `top --once` keeps every column whole; with COLUMNS, it fits
            env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
            piped = subprocess.run(
                [RECORDER, "top", "--once", "--url", base],
                capture_output=True,
                text=True,
                timeout=60,
                env=env,
            )
            assert piped.returncode == 0, piped.stderr
            assert headers(piped.stdout, "state") == [c for c, _ in top.OPEN_COLUMNS]
            assert headers(piped.stdout, "id") == [c for c, _ in top.FINISHED_COLUMNS]
            assert LONG_MODEL in piped.stdout and all(w in piped.stdout for w in whole)
            narrow = subprocess.run(
                [RECORDER, "top", "--once", "--url", base],
                capture_output=True,
                text=True,
                timeout=60,
                env={**env, "COLUMNS": "80"},
            )
            assert max(len(line.rstrip()) for line in narrow.stdout.splitlines()) <= 80
            assert all(w in narrow.stdout for w in whole)
        finally:
            out = stop(proc)
    # the stalled stream is cut by the shutdown, and said in the singular (issue 33 §4)
    assert "3 records:" in out and "; 1 stream was still open and cut by the shutdown" in out


def test_the_hint_names_the_way_the_proxy_is_started(monkeypatch: pytest.MonkeyPatch) -> None:
    """Started through scripts/run, `recorder` is not on PATH: the hint says so."""
    for prog in (None, "scripts/run"):
        if prog is None:
            monkeypatch.delenv("RECORDER_PROG", raising=False)
        else:
            monkeypatch.setenv("RECORDER_PROG", prog)
        console = Console(file=io.StringIO(), width=120)
        console.print(top.render(None, "http://127.0.0.1:1", "silence", "no proxy answers"))
        said = console.file.getvalue()  # type: ignore[attr-defined]
        found = re.search(r"Start the proxy \(`(\S+) proxy`\)", said)
        assert found is not None, said
        if prog is not None:
            assert found.group(1) == prog
        else:  # `recorder` on PATH, or the one beside this Python: runnable as printed
            assert shutil.which(found.group(1)) is not None or Path(found.group(1)).exists()
