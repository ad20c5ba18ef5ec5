"""The recorder inside mitmweb, as a mitmproxy user sees it: through mitmweb's own
JSON API, every metered flow carries the record's summary as its comment, the
stalled, interrupted and error-after-200 ones are marked and findable by a word
of their comment, and the "LLM stream" content view shows the events with their
times; the client still receives the upstream's exact bytes. Both through
`recorder proxy --web` and `mitmweb -s addons/recorder_addon.py`."""

from __future__ import annotations

import re
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from recorder.proxy.webview import mark_for, summary
from recorder.simulate import Simulator, run_in_thread
from tests.kit.ports import free_port
from tests.kit.processes import start_mitmweb, start_proxy
from tests.kit.records import simple_record

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "webview-test-password"
# (x-sim-fault, outcome, the word its comment carries, marked)
CASES = [
    ("", "completed", None, False),
    ("keepalive=0.3,stall=1.5", "completed", "STALLED", True),
    ("rst=8", "upstream_disconnect", "INTERRUPTED", True),
    ("error=3", "error", "ERROR-AFTER-200", True),
    ("compress=gzip", "completed", None, False),
]


@dataclass
class Web:
    proxy: str  # base URL of the reverse listener
    api: str  # mitmweb's interface
    auth: str  # its token or password

    def get(self, path: str) -> Any:
        r = httpx.get(self.api + path, headers={"Authorization": f"Bearer {self.auth}"})
        r.raise_for_status()
        return r.json()


@pytest.fixture(scope="module")
def sim() -> Iterator[Simulator]:
    with run_in_thread(keep_bodies=True) as simulator:
        yield simulator


def _wait_for_api(web: Web, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, "mitmweb exited"
        try:
            web.get("/flows")
            return
        except httpx.HTTPError:
            time.sleep(0.2)
    raise AssertionError("mitmweb's interface did not answer")


@pytest.fixture(params=["recorder proxy --web", "mitmweb -s"])
def web(request: pytest.FixtureRequest, sim: Simulator, tmp_path: Path) -> Iterator[Web]:
    web_port = free_port()
    if request.param == "recorder proxy --web":
        proc, port, _, banner = start_proxy(tmp_path, sim, "--web", "--web-port", str(web_port))
        found = re.search(r"web UI +(http://\S+/\?token=([0-9a-f]+))", banner)
        assert found, banner
        w = Web(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{web_port}", found.group(2))
    else:
        port = free_port()
        proc = start_mitmweb(
            tmp_path,
            sim.url,
            port,
            f"web_port={web_port}",
            "web_open_browser=false",
            f"web_password={PASSWORD}",
            f"recorder_db=sqlite:///{tmp_path / 'web.db'}",
            f"recorder_spool_dir={tmp_path}",
            "recorder_stall_after=1",
        )
        w = Web(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{web_port}", PASSWORD)
    try:
        _wait_for_api(w, proc)
        yield w
    finally:
        proc.terminate()
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def _send(web: Web, sim: Simulator, fault: str) -> tuple[str, bytes]:
    """One streamed chat request; returns its simulator id and the bytes received."""
    got = bytearray()
    with httpx.Client(timeout=30) as client:
        try:
            with client.stream(
                "POST",
                web.proxy + "/v1/chat/completions",
                json={
                    "model": "gpt-4o",
                    "stream": True,
                    "messages": [{"role": "user", "content": "hi"}],
                },
                headers={"Authorization": "Bearer sk-webview-0000", "x-sim-fault": fault},
            ) as r:
                rid = r.headers["x-request-id"]
                for piece in r.iter_raw():
                    got += piece
        except httpx.HTTPError:
            pass  # the reset case: what arrived is kept
    return rid, bytes(got)


def _flows_done(web: Web, n: int) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        flows = [f for f in web.get("/flows") if f["type"] == "http"]
        if len(flows) >= n and all(
            f["comment"].startswith("LLM ")
            and "metering" not in f["comment"]
            and " streaming" not in f["comment"]
            for f in flows
        ):
            return flows
        time.sleep(0.2)
    raise AssertionError(f"flows not completed: {[f['comment'] for f in flows]}")


@pytest.mark.slow
def test_mitmweb_shows_what_the_recorder_measured(web: Web, sim: Simulator) -> None:
    sent = [
        (_send(web, sim, fault), (fault, outcome, word, marked))
        for fault, outcome, word, marked in CASES
    ]
    flows = _flows_done(web, len(CASES))
    assert len(flows) == len(CASES)
    by_rid = {dict(f["response"]["headers"]).get("x-request-id"): f for f in flows}
    for (rid, received), (fault, outcome, word, marked) in sent:
        truth = sim.wait_sent_blocking(rid)
        assert truth.body is not None and received == bytes(truth.body), fault  # untouched
        flow = by_rid[rid]
        comment = flow["comment"]
        assert comment.startswith(f"LLM gpt-4o {outcome}"), (fault, comment)
        if word:
            assert word in comment, (fault, comment)
        assert bool(flow["marked"]) == marked, (fault, flow["marked"])
        view = web.get(f"/flows/{flow['id']}/response/content/auto.json")
        assert view["view_name"] == "LLM stream", (fault, view)
        text = view["text"]
        assert text.startswith("chat.completions\n") and "arrival times not kept" not in text
        if truth.outcome == "completed":
            assert f"{truth.keepalives} keepalives" in text.splitlines()[1]
        if truth.text:
            assert truth.text in text.split("── text ──\n", 1)[1]
        if word == "STALLED":
            assert "[keepalive]" in text and "[STALL:" in text


@pytest.mark.slow
def test_a_stall_is_marked_while_it_lasts(web: Web, sim: Simulator) -> None:
    """A stream silent past the stall threshold is marked, and says so in its
    comment, while it is still open: mitmweb finds it before it ends."""
    done: list[tuple[str, bytes]] = []
    client = threading.Thread(target=lambda: done.append(_send(web, sim, "keepalive=0.3,stall=4")))
    client.start()
    try:
        seen: list[dict[str, Any]] = []
        deadline = time.monotonic() + 10
        while not seen and time.monotonic() < deadline:
            time.sleep(0.2)
            seen = [f for f in web.get("/flows") if "STALLED now" in f["comment"]]
        assert seen, [f["comment"] for f in web.get("/flows")]
        assert not done, "the stream had ended already"
        assert seen[0]["marked"] and " streaming STALLED now, silent " in seen[0]["comment"]
    finally:
        client.join(30)
    (flow,) = _flows_done(web, 1)
    assert flow["comment"].startswith("LLM gpt-4o completed STALLED") and flow["marked"]


def test_summary_and_marks() -> None:
    rec = simple_record(
        1,
        model="gpt-4o",
        outcome="error",
        http_status=200,
        stalls=1,
        keepalives=3,
        output_source="estimated",
        cost_usd="0.000470000000",
        error_type="server_error",
        error_message="boom",
    )
    line = summary(rec)
    assert line.startswith("LLM gpt-4o error ERROR-AFTER-200 STALLED | TTFT 300 ms | 1.5 s |")
    assert "in 100 out ~21 tok" in line and "$0.000470" in line and "$0.000470000000" not in line
    assert line.endswith("1 stall | 3 keepalives | server_error: boom")
    assert mark_for(rec) == ":red_circle:"
    assert mark_for(simple_record(1)) == ""
    assert mark_for(simple_record(1, stalls=2)) == ":warning:"
    assert "INTERRUPTED" in summary(simple_record(1, outcome="client_disconnect"))


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.slow
@pytest.mark.skipif(
    CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)"
)
def test_the_flow_list_in_a_browser(web: Web, sim: Simulator, tmp_path: Path) -> None:
    """Headless Chromium renders mitmweb's flow list: the summary is in its DOM,
    and a screenshot is taken (kept in the test's directory)."""
    _send(web, sim, "keepalive=0.3,stall=1.5")
    _flows_done(web, 1)
    args = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        f"--user-data-dir={tmp_path / 'chromium'}",
        "--window-size=1600,500",
        "--virtual-time-budget=10000",
    ]
    url = f"{web.api}/?token={web.auth}"
    dom = subprocess.run(
        [*args, "--dump-dom", url], capture_output=True, text=True, timeout=120
    ).stdout
    assert "LLM gpt-4o completed STALLED" in dom, dom[-2000:]
    shot = tmp_path / "flows.png"
    subprocess.run([*args, f"--screenshot={shot}", url], capture_output=True, timeout=120)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_a_websocket_connection_carries_its_responses_summary(web: Web, sim: Simulator) -> None:
    """One comment per WebSocket connection: how many responses, their cost, the
    last one's summary; a connection whose response was cut is marked."""
    import asyncio
    import json

    import websockets

    async def talk() -> None:
        url = web.proxy.replace("http://", "ws://") + "/v1/responses"
        async with websockets.connect(
            url, additional_headers={"authorization": "Bearer sk-webview-ws"}
        ) as ws:
            for model in ("gpt-5+deltas=2", "gpt-5+deltas=6+rst=4"):
                await ws.send(
                    json.dumps({"type": "response.create", "model": model, "input": "hi"})
                )
                try:
                    async for raw in ws:
                        if json.loads(raw)["type"] == "response.completed":
                            break
                except websockets.ConnectionClosed:
                    break

    asyncio.run(talk())
    deadline = time.monotonic() + 20
    comment, flow = "", None
    while time.monotonic() < deadline:
        flows = [f for f in web.get("/flows") if f.get("websocket")]
        flow = flows[0] if flows else None
        comment = flow["comment"] if flow else ""
        if comment.startswith("LLM WebSocket responses: 2 responses"):
            break
        time.sleep(0.2)
    assert comment.startswith("LLM WebSocket responses: 2 responses, $"), comment
    assert "| last: LLM gpt-5+deltas=6+rst=4 upstream_disconnect INTERRUPTED" in comment
    assert flow is not None and flow["marked"]
